"""What Ollama's model routes say about a GGUF file: /api/tags and /api/ps entries, /api/show's
details, model_info and capabilities, and /api/pull's progress for `llamacpy pull` (field
names and formats from ollama's docs/api.md and api/types.go)."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..format import StringArray
from ..format.constants import FileType
from ..hub import catalog

TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                    "tokenizer.ggml.merges", "tokenizer.ggml.scores")
# keep_alive < 0 keeps a model for ever: Ollama then reports a time centuries ahead
FOREVER = datetime(2318, 1, 1, tzinfo=UTC)


def rfc3339(t: float | datetime) -> str:
    """A time as Ollama writes it (RFC 3339, UTC, nanosecond-free)."""
    if not isinstance(t, datetime):
        t = datetime.fromtimestamp(t, UTC)
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def human_number(n: int) -> str:
    """Ollama's format.HumanNumber: 630.17M, 1.5B, 7B, 135K."""
    for scale, unit, digits in ((1e12, "T", 0), (1e9, "B", 1), (1e6, "M", 2), (1e3, "K", 0)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.{digits}f}{unit}"
    return str(n)


def quantization_level(gguf) -> str:
    """general.file_type's name as Ollama prints it (Q4_K_M, F16), else the commonest
    tensor type."""
    file_type = gguf.get("general.file_type")
    try:
        return FileType(int(file_type)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (TypeError, ValueError):
        types = [t.ggml_type.name for t in gguf.tensors.values() if len(t.ne) > 1]
        return max(set(types), key=types.count) if types else "unknown"


@functools.lru_cache(maxsize=16)
def file_digest(path: str, size: int, mtime: float) -> str:
    """The file's sha256 (Ollama's digest is its blob's), once per file version."""
    return catalog.sha256_file(Path(path))


async def digest_of(path: str) -> str:
    st = os.stat(path)
    return await asyncio.to_thread(file_digest, path, st.st_size, st.st_mtime)


def details(gguf) -> dict:
    arch = gguf.get("general.architecture") or "unknown"
    n_params = sum(t.n_elements for t in gguf.tensors.values())
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
            "parameter_size": human_number(n_params),
            "quantization_level": quantization_level(gguf)}


async def entry(path: str, name: str, gguf) -> dict:
    """A GGUF file as one /api/tags entry (also the start of /api/ps's)."""
    st = os.stat(path)
    return {"name": name, "model": name, "modified_at": rfc3339(st.st_mtime),
            "size": st.st_size, "digest": await digest_of(path), "details": details(gguf)}


async def running(state, name: str) -> dict:
    """/api/ps's entry: the slot context, and no expiry (the server keeps its model)."""
    out = await entry(state.cfg.model_path, name, state.gguf)
    out.pop("modified_at")
    out.update(expires_at=rfc3339(FOREVER), size_vram=0,
               context_length=state.engine.n_ctx_slot)
    return out


def model_info(gguf, verbose: bool) -> dict:
    """The GGUF metadata as JSON values, plus general.parameter_count; the tokenizer's big
    arrays are empty unless `verbose` (as Ollama's /api/show)."""
    info = {}
    for key, value in gguf.metadata.items():
        if key == "tokenizer.chat_template":
            continue  # /api/show carries it as `template`
        if isinstance(value, (np.ndarray, StringArray)):
            value = value.tolist()
        if key in TOKENIZER_ARRAYS and not verbose:
            value = []
        info[key] = value
    info["general.parameter_count"] = sum(t.n_elements for t in gguf.tensors.values())
    return info


def capabilities(state) -> list[str]:
    if getattr(state, "embeddings", None) is not None:
        return ["embedding"]  # --embeddings: the completion routes refuse
    source = state.template.source
    caps = ["completion"]
    if "tools" in source:
        caps.append("tools")
    if thinks(source):
        caps.append("thinking")
    if state.mtmd is not None:
        caps.append("vision")
    return caps


def thinks(template_source: str) -> bool:
    """Whether a chat template can think (Ollama's thinking capability)."""
    return "<think>" in template_source or "enable_thinking" in template_source


OPTION_NAMES = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                "presence_penalty", "frequency_penalty")  # Ollama's names, SamplingParams' too


def parameters(state) -> str:
    """The server's sampling defaults as Modelfile PARAMETER lines (Ollama's `parameters`)."""
    p = state.sampling_defaults
    lines = [f"{name:<18} {getattr(p, name)}" for name in OPTION_NAMES]
    lines.append(f"{'num_ctx':<18} {state.engine.n_ctx_slot}")
    if state.cfg.n_predict > 0:
        lines.append(f"{'num_predict':<18} {state.cfg.n_predict}")
    return "\n".join(lines)


def modelfile(state, template: str) -> str:
    params = "".join(f"PARAMETER {line}\n" for line in parameters(state).splitlines())
    return (f"# Modelfile generated by llamacpy (llama-server)\nFROM {state.cfg.model_path}\n"
            f'TEMPLATE """{template}"""\n{params}')


async def show(state, verbose: bool) -> dict:
    template = state.template.source
    st = os.stat(state.cfg.model_path)
    return {"license": state.gguf.get("general.license") or "",
            "modelfile": modelfile(state, template), "parameters": parameters(state),
            "template": template, "details": details(state.gguf),
            "model_info": model_info(state.gguf, verbose),
            "capabilities": capabilities(state), "modified_at": rfc3339(st.st_mtime)}


# -- /api/pull -----------------------------------------------------------------------------------

def catalogue_name(name: str) -> str | None:
    """A catalogue name, with or without Ollama's :latest tag."""
    base = name.removesuffix(":latest")
    return base if base in catalog.CATALOG else None


async def pull_progress(name: str) -> AsyncIterator[dict]:
    """`llamacpy pull NAME` as Ollama's progress objects: the manifest, the file's bytes as
    they are written (polled), the sha256 check, success; a failure is an {"error"}."""
    entry = catalog.CATALOG[name]
    digest = f"sha256:{entry.sha256}"
    status = f"pulling {entry.sha256[:12]}"
    yield {"status": "pulling manifest"}
    target = catalog.cache_dir() / entry.file
    partial = target.with_suffix(".gguf.partial")
    task = asyncio.ensure_future(asyncio.to_thread(catalog.pull, name, True))
    while not task.done():
        await asyncio.wait([task], timeout=0.5)
        if not task.done() and partial.exists():
            yield {"status": status, "digest": digest, "completed": partial.stat().st_size}
    try:
        path = task.result()
    except (KeyError, RuntimeError, OSError) as e:
        yield {"error": f"pull model: {e}"}
        return
    size = path.stat().st_size
    yield {"status": status, "digest": digest, "total": size, "completed": size}
    yield {"status": "verifying sha256 digest"}
    yield {"status": "success"}


def now() -> str:
    return rfc3339(time.time())
