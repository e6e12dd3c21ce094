"""Quantize a whole GGUF model file (llama.cpp: llama_model_quantize_impl).

Tensors are written in llama.cpp's order (non-layer tensors, then layer by layer, each sorted by
name), metadata is copied with the file type and quantization version updated, and each tensor is
converted in slabs of rows so memory stays bounded on 262k-row embeddings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..format import GGUFFile, GGUFTensor, TensorToWrite, open_gguf, write_gguf
from ..format.constants import (
    GGML_QUANT_VERSION,
    KEY_ARCHITECTURE,
    KEY_FILE_TYPE,
    KEY_QUANT_VERSION,
    KEY_SPLIT_COUNT,
    KEY_SPLIT_NO,
    KEY_SPLIT_TENSORS_COUNT,
    GGMLType,
    ValueType,
)
from .base import dequantize, get_quant, quantize
from .recipe import ModelHParams, QuantizeParams, TypeChooser, is_quantized, layer_order_key

SLAB_ELEMENTS = 1 << 23  # 32 MiB of float32 per slab


class QuantizeError(RuntimeError):
    """A model that cannot be quantized as asked; the message says why."""


@dataclass
class TensorPlan:
    tensor: GGUFTensor
    new_type: GGMLType

    @property
    def converts(self) -> bool:
        return self.new_type != self.tensor.ggml_type


@dataclass
class QuantizeSummary:
    size_in: int = 0
    size_out: int = 0
    n_elements: int = 0
    n_fallback: int = 0
    seconds: float = 0.0
    plans: list[TensorPlan] = field(default_factory=list)


def read_hparams(model: GGUFFile) -> ModelHParams:
    """Architecture, layer and head counts (per-layer arrays: layer 0, as n_gqa() does)."""
    arch = model.require(KEY_ARCHITECTURE)

    def first(value, default):
        if value is None:
            return default
        return int(value[0]) if isinstance(value, (list, np.ndarray)) else int(value)

    n_head = first(model.get(f"{arch}.attention.head_count"), 0)
    return ModelHParams(
        arch=arch,
        n_layer=int(model.require(f"{arch}.block_count")),
        n_head=n_head,
        n_head_kv=first(model.get(f"{arch}.attention.head_count_kv"), n_head),
        n_expert=first(model.get(f"{arch}.expert_count"), 0),
    )


def plan_types(model: GGUFFile, params: QuantizeParams) -> tuple[list[TensorPlan], int]:
    """The new type of every tensor, in llama.cpp's output order; also the fallback count."""
    names = sorted(model.tensors, key=layer_order_key)
    chooser = TypeChooser(read_hparams(model), params, names)
    plans = []
    for name in names:
        t = model.tensors[name]
        new_type = chooser.choose(name, t.ne, t.ggml_type)
        if new_type != t.ggml_type and is_quantized(t.ggml_type) and not params.allow_requantize:
            raise QuantizeError(f"requantizing from type {t.ggml_type.name} is disabled "
                                f"(tensor '{name}'); pass --allow-requantize to allow it")
        get_quant(new_type)  # unsupported target types fail before anything is written
        plans.append(TensorPlan(t, new_type))
    return plans, chooser.n_fallback


def convert_rows(t: GGUFTensor, new_type: GGMLType) -> Iterator[np.ndarray]:
    """Dequantize-then-quantize a tensor slab by slab (llama_tensor_quantize_impl)."""
    rows = t.blocks()
    n_per_row = t.ne[0]
    slab = max(1, SLAB_ELEMENTS // n_per_row)
    for start in range(0, rows.shape[0], slab):
        part = rows[start : start + slab]
        f32 = dequantize(part, t.ggml_type, (n_per_row, part.shape[0]))
        yield quantize(f32, new_type)


def output_metadata(model: GGUFFile, params: QuantizeParams) -> tuple[dict, dict]:
    metadata = dict(model.metadata)
    types = dict(model.value_types)
    for key in (KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT):
        metadata.pop(key, None)
        types.pop(key, None)
    metadata[KEY_QUANT_VERSION] = GGML_QUANT_VERSION
    types[KEY_QUANT_VERSION] = ValueType.UINT32
    metadata[KEY_FILE_TYPE] = int(params.ftype.ftype)
    types[KEY_FILE_TYPE] = ValueType.UINT32
    return metadata, types


def quantize_model(
    path_in: str | os.PathLike,
    path_out: str | os.PathLike,
    params: QuantizeParams,
    on_tensor: Callable[[int, int, TensorPlan], None] | None = None,
) -> QuantizeSummary:
    """Quantize `path_in` into `path_out` as llama_model_quantize does; returns sizes and plans."""
    t0 = time.perf_counter()
    model = open_gguf(path_in)
    plans, n_fallback = plan_types(model, params)
    metadata, types = output_metadata(model, params)

    def producer(plan: TensorPlan):
        if not plan.converts:
            return lambda: plan.tensor.data
        return lambda: convert_rows(plan.tensor, plan.new_type)

    to_write = [TensorToWrite(p.tensor.name, p.new_type, p.tensor.ne, producer(p)) for p in plans]

    def progress(t: TensorToWrite, i: int) -> None:
        if on_tensor:
            on_tensor(i, len(plans), plans[i])

    write_gguf(path_out, metadata, to_write, types, on_tensor=progress)
    summary = QuantizeSummary(plans=plans, n_fallback=n_fallback)
    summary.size_in = sum(p.tensor.nbytes for p in plans)
    summary.size_out = sum(t.nbytes for t in to_write)
    summary.n_elements = sum(p.tensor.n_elements for p in plans)
    summary.seconds = time.perf_counter() - t0
    model.close()
    return summary
