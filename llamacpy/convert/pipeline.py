"""Plan and write a conversion: tensor types by llama.cpp's rules, metadata in its order, the
default file name, and the GGUF written one tensor at a time (ModelBase.prepare_tensors / write).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..format import TensorToWrite, write_gguf
from ..format.constants import GGML_QUANT_VERSION, GGMLType, ValueType, row_nbytes
from ..quants.base import quantize
from ..quants.floats import fp32_to_bf16_bits
from .base import F32_TENSORS, FILE_TYPES, FTYPES, UNUSED_SUFFIXES, Converter, tensor_block
from .kv import KV
from .naming import derive_metadata, naming_convention, weight_count_label, write_general
from .safetensors import ConvertError, SourceTensor

SLAB_ROWS_ELEMENTS = 1 << 22  # float32 elements converted per slab of rows


@dataclass
class Options:
    """Flags of convert_hf_to_gguf.py that llamacpy honours."""

    outfile: Path | None = None
    outtype: str = "auto"
    vocab_only: bool = False
    mmproj: bool = False  # export the vision projector instead of the text model
    dry_run: bool = False
    model_name: str | None = None
    split_max_size: int = 0
    no_mtp: bool = False  # leave out the multi-token-prediction block
    progress: Callable[[int, int], None] | None = None  # (bytes written, total)


@dataclass
class Planned:
    """One output tensor: its GGUF name, type and numpy shape, and where its data comes from."""

    name: str
    ggml_type: GGMLType
    shape: tuple[int, ...]
    hf_name: str | None = None
    source: SourceTensor | None = None
    array: np.ndarray | None = None  # generated tensors

    @property
    def nbytes(self) -> int:
        rows = int(np.prod(self.shape[:-1], dtype=np.int64)) if len(self.shape) > 1 else 1
        return rows * row_nbytes(self.ggml_type, self.shape[-1] if self.shape else 1)


@dataclass
class Conversion:
    converter: Converter
    ftype: GGMLType
    tensors: list[Planned] = field(default_factory=list)
    kv: KV = field(default_factory=KV)
    outfile: Path | None = None


def guess_ftype(conv: Converter) -> GGMLType:
    """--outtype auto: the first matrix's dtype, BF16 or F16; otherwise F16 (ModelBase)."""
    for t in conv.sources.values():
        if len(t.shape) >= 2:
            if t.dtype == "BF16":
                return GGMLType.BF16
            if t.dtype == "F16":
                return GGMLType.F16
            break
    return GGMLType.F16


def tensor_type(name: str, shape: tuple[int, ...], ftype: GGMLType,
                forced: GGMLType | None = None) -> GGMLType:
    """llama.cpp's choice: norms, vectors, biases and a few tables stay F32; an architecture may
    force a matrix's type; rows that Q8_0 cannot block fall back to F16 (prepare_tensors and
    gguf-py's QuantError fallback)."""
    if len(shape) <= 1 or name.endswith("_norm.weight"):
        return GGMLType.F32
    if forced is not None:
        return forced
    if not name.endswith(".weight"):
        return GGMLType.F32
    stem = name[: -len(".weight")]
    if stem.split(".", 2)[-1] in F32_TENSORS or stem in F32_TENSORS:
        return GGMLType.F32
    if ftype == GGMLType.Q8_0 and shape[-1] % 32:
        return GGMLType.F16
    return ftype


def _placeholder(t: SourceTensor) -> np.ndarray:
    """A zero-stride stand-in of the tensor's shape: modify() runs on it to learn the output
    names and shapes without reading any weights."""
    dtype = np.float16 if t.dtype == "F16" else np.float32
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), t.shape, (0,) * len(t.shape))


def plan_tensors(conv: Converter, ftype: GGMLType) -> list[Planned]:
    planned = []
    for name, arr in conv.extra_tensors():
        planned.append(Planned(name, tensor_type(name, arr.shape, ftype), arr.shape, array=arr))
    for hf_name, src in conv.sources.items():
        if hf_name.endswith(UNUSED_SUFFIXES):
            continue
        for name, data in conv.modify(_placeholder(src), hf_name, tensor_block(hf_name)):
            ggml_type = tensor_type(name, data.shape, ftype, conv.force_type(hf_name, name, ftype))
            planned.append(Planned(name, ggml_type, data.shape, hf_name, src))
    seen = set()
    for p in planned:
        if p.name in seen:
            raise ConvertError(f"two checkpoint tensors map to '{p.name}'")
        seen.add(p.name)
    return planned


def convert_slab(x: np.ndarray, ggml_type: GGMLType) -> np.ndarray:
    if ggml_type == GGMLType.F32:
        return x.astype(np.float32)
    if ggml_type == GGMLType.F16:
        with np.errstate(over="ignore"):
            return x.astype(np.float16)
    if ggml_type == GGMLType.BF16:
        return fp32_to_bf16_bits(x.astype(np.float32))
    return quantize(x, ggml_type)


def tensor_data(conv: Converter, p: Planned) -> Iterator[np.ndarray]:
    """The tensor's bytes in slabs of rows: read, fixed by the architecture, converted."""
    if p.array is not None:
        data = p.array
    else:
        outs = dict(conv.modify(p.source.load(), p.hf_name, tensor_block(p.hf_name)))
        data = outs[p.name]
    rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
    step = max(1, SLAB_ROWS_ELEMENTS // max(1, rows.shape[1]))
    for start in range(0, rows.shape[0], step):
        yield convert_slab(np.asarray(rows[start:start + step]), p.ggml_type)


def parameter_count(tensors: list[Planned]) -> int:
    return sum(int(np.prod(p.shape, dtype=np.int64)) for p in tensors)


def build_metadata(conv: Converter, ftype: GGMLType, tensors: list[Planned],
                   opts: Options) -> tuple[KV, dict]:
    """Every key in llama.cpp's order: general.*, the architecture's, then the tokenizer's."""
    kv = KV()
    kv.string("general.architecture", conv.arch)
    kv.string("general.type", "mmproj" if conv.is_mmproj else "model")
    total = parameter_count(tensors)
    meta = derive_metadata(conv.dir, total, opts.model_name)
    if meta.get("name") is None:
        meta["name"] = conv.dir.name
    if meta.get("size_label") is None and total > 0:
        meta["size_label"] = weight_count_label(total)
    write_general(kv, meta)
    conv.file_type = FILE_TYPES[ftype]
    conv.set_params(kv)
    kv.u32("general.quantization_version", GGML_QUANT_VERSION)
    conv.set_vocab(kv)
    return kv, meta


def output_path(model_dir: Path, outfile: Path | None, meta: dict, ftype: GGMLType,
                vocab_only: bool, mmproj: bool = False) -> Path:
    """llama.cpp's default name in the model folder (or in a folder given as --outfile), or the
    --outfile template with {ftype} / {outtype} filled in."""
    out_type = ftype.name
    target = outfile if outfile is not None else model_dir
    if target.is_dir():
        if mmproj:  # MmprojModel.prepare_metadata: no size label, an mmproj- prefix
            name = "mmproj-" + naming_convention(meta, out_type, with_size=False)
        elif vocab_only:
            name = naming_convention(meta, None, kind="vocab", with_size=False)
        else:
            name = naming_convention(meta, out_type)
        return target / f"{name}.gguf"
    low, up = out_type.lower(), out_type.upper()
    try:
        filled = target.name.format(low, outtype=low, ftype=low, OUTTYPE=up, FTYPE=up)
    except (IndexError, KeyError, ValueError):
        raise ConvertError(f"--outfile {target}: bad template (use {{ftype}})") from None
    return target.parent / filled


def check_disk_space(path: Path, nbytes: int) -> None:
    free = shutil.disk_usage(path.parent if path.parent.exists() else Path.cwd()).free
    if nbytes > free:
        raise ConvertError(f"not enough disk space for {path}: needs {nbytes / 2**20:.1f} MiB, "
                           f"{free / 2**20:.1f} MiB free")


def prepare(conv: Converter, opts: Options) -> Conversion:
    if opts.outtype != "auto" and opts.outtype not in FTYPES:
        raise ConvertError(f"--outtype {opts.outtype}: not one of {', '.join(FTYPES)}, auto")
    ftype = guess_ftype(conv) if opts.outtype == "auto" else FTYPES[opts.outtype]
    tensors = [] if opts.vocab_only else plan_tensors(conv, ftype)
    kv, meta = build_metadata(conv, ftype, tensors, opts)
    out = output_path(conv.dir, opts.outfile, meta, ftype, opts.vocab_only, conv.is_mmproj)
    return Conversion(conv, ftype, tensors, kv, out)


def split_tensors(tensors: list[Planned], max_size: int) -> list[list[Planned]]:
    """Shards of at most max_size tensor bytes, a new one when the next tensor would pass it
    (GGUFWriter.add_tensor_info); one shard when max_size is 0."""
    shards: list[list[Planned]] = [[]]
    for p in tensors:
        if max_size and shards[-1] and sum(t.nbytes for t in shards[-1]) + p.nbytes > max_size:
            shards.append([])
        shards[-1].append(p)
    return shards


def shard_paths(path: Path, n: int) -> list[Path]:
    """<stem>-00001-of-00003.gguf ... (gguf-py SHARD_NAME_FORMAT), or the path itself."""
    if n == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{i + 1:05d}-of-{n:05d}.gguf") for i in range(n)]


def shard_metadata(kv: KV, i: int, shards: list[list[Planned]]) -> KV:
    """The first shard has every key, the others only the split keys, which come last."""
    out = KV()
    if i == 0:
        out.items.update(kv.items)
    if len(shards) > 1:
        out.put("split.no", i, ValueType.UINT16)
        out.put("split.count", len(shards), ValueType.UINT16)
        out.put("split.tensors.count", sum(len(s) for s in shards), ValueType.INT32)
    return out


def write(c: Conversion, opts: Options) -> list[Path]:
    """Write the planned GGUF (or its shards under --split-max-size); returns the paths."""
    metadata_margin = 64 << 20  # the largest vocabularies take ~10 MiB of metadata
    check_disk_space(c.outfile, sum(p.nbytes for p in c.tensors) + metadata_margin)
    total, done = sum(p.nbytes for p in c.tensors), [0]

    def on_tensor(t: TensorToWrite, _i: int) -> None:
        done[0] += t.nbytes
        if opts.progress:
            opts.progress(done[0], total)

    shards = split_tensors(c.tensors, opts.split_max_size)
    paths = shard_paths(c.outfile, len(shards))
    for i, (path, shard) in enumerate(zip(paths, shards)):
        to_write = [TensorToWrite(p.name, p.ggml_type, tuple(reversed(p.shape)),
                                  lambda p=p: tensor_data(c.converter, p)) for p in shard]
        kv = shard_metadata(c.kv, i, shards)
        write_gguf(path, kv.values(), to_write, kv.types(), on_tensor)
    return paths


_last_drawn = [-1]


def text_progress(done: int, total: int) -> None:
    """A one-line progress bar over the bytes written, on stderr, redrawn per whole percent."""
    width = 30
    frac = done / total if total else 1.0
    if int(frac * 100) == _last_drawn[0] and done < total:
        return
    _last_drawn[0] = int(frac * 100) if done < total else -1
    bar = "#" * int(frac * width)
    sys.stderr.write(f"\rWriting: [{bar:<{width}}] {done / 2**20:7.1f}/{total / 2**20:.1f} MiB")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
