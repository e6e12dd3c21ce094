"""llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf with .inp/.out), fetched once.

They ship inside the llama-cpp-python 0.3.36 source distribution. `vocab_dir()` extracts just
those files into the model cache; the sdist comes from /work/ref or ~/.cache/llamacpy when a
copy is there, else from PyPI through `pip download`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from llamacpy.hub.catalog import cache_dir

VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
LOCAL_SDISTS = [Path("/work/ref") / SDIST, Path.home() / ".cache" / "llamacpy" / SDIST]
MEMBER_DIR = "vendor/llama.cpp/models/"
SEP = b"\n__ggml_vocab_test__\n"


def vocab_dir() -> Path:
    """The folder holding ggml-vocab-*.gguf and their .inp/.out files (created on first use)."""
    target = cache_dir() / f"llamacpy-vocab-{VERSION}"
    if target.is_dir() and any(target.glob("ggml-vocab-*.gguf.out")):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpy-vocab-", dir=target.parent) as tmp:
        staging = Path(tmp) / "vocab"
        staging.mkdir()
        _extract(_sdist(Path(tmp)), staging)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    return target


def _sdist(tmp: Path) -> Path:
    """The sdist, downloaded once into ~/.cache/llamacpy (templates, vocabularies and grammar
    vectors are each extracted from it on first use: without the cache, each would fetch
    76 MB again)."""
    for path in LOCAL_SDISTS:
        if path.is_file():
            return path
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--quiet", "-d", str(tmp), f"llama-cpp-python=={VERSION}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip download of llama-cpp-python=={VERSION} failed:\n"
                           f"{result.stderr[-2000:]}")
    fetched = next(tmp.glob("llama_cpp_python-*.tar.gz"))
    keep = LOCAL_SDISTS[-1]
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(fetched, f"{keep}.part")
    os.replace(f"{keep}.part", keep)
    return keep


def _extract(sdist: Path, dest: Path) -> None:
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            name = member.name.split("/", 1)[-1]
            base = name[len(MEMBER_DIR):]
            if name.startswith(MEMBER_DIR) and base.startswith("ggml-vocab-") and member.isfile():
                with tar.extractfile(member) as src, open(dest / base, "wb") as out:
                    shutil.copyfileobj(src, out)


def llama_cpp_files(target: Path, members: tuple[str, ...]) -> Path:
    """`target`, holding the files of the sdist's vendor/llama.cpp/ whose paths there start
    with one of `members`: extracted on first use (into a staging folder, then renamed)."""
    if (target / members[0]).exists():
        return target
    root = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpy-src-", dir=target.parent) as tmp:
        staging = Path(tmp) / "src"
        with tarfile.open(_sdist(Path(tmp)), "r:gz") as tar:
            for member in tar:
                rel = member.name[len(root):]
                if member.name.startswith(root) and member.isfile() and rel.startswith(members):
                    (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as src, open(staging / rel, "wb") as out:
                        shutil.copyfileobj(src, out)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    return target


def llama_cpp_source() -> Path:
    """llama.cpp's converter (convert_hf_to_gguf.py, conversion/, gguf-py/) for the reference
    converters: /work/ref's unpacked sdist where there is one, else extracted into the model
    cache on first use."""
    unpacked = Path("/work/ref") / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if (unpacked / "convert_hf_to_gguf.py").is_file():
        return unpacked
    return llama_cpp_files(cache_dir() / f"llamacpy-llama.cpp-{VERSION}",
                           ("convert_hf_to_gguf.py", "conversion/", "gguf-py/"))


def template_path(name: str) -> Path:
    """llama.cpp's copy of a model's chat template (models/templates/NAME.jinja), extracted from
    the sdist into the model cache on first use."""
    target = cache_dir() / f"llamacpy-templates-{VERSION}" / f"{name}.jinja"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            with tarfile.open(_sdist(Path(tmp)), "r:gz") as tar:
                member = f"llama_cpp_python-{VERSION}/{MEMBER_DIR}templates/{name}.jinja"
                with tar.extractfile(member) as src, open(f"{target}.tmp", "wb") as out:
                    shutil.copyfileobj(src, out)
            os.replace(f"{target}.tmp", target)
    return target


def vocab_names(with_vectors: bool = True) -> list[str]:
    """Names (e.g. 'llama-bpe') of the vocab files, those with .inp/.out when with_vectors."""
    d = vocab_dir()
    pattern = "ggml-vocab-*.gguf.out" if with_vectors else "ggml-vocab-*.gguf"
    return sorted(p.name[len("ggml-vocab-"):].split(".gguf")[0] for p in d.glob(pattern))


def vocab_path(name: str) -> Path:
    return vocab_dir() / f"ggml-vocab-{name}.gguf"


def read_vectors(name: str) -> list[tuple[bytes, list[int]]]:
    """(text, expected ids) pairs, parsed as tests/test-tokenizer-0.cpp reads them: the .inp split
    at the marker, one .out line per text; duplicate texts keep the last line (a std::map)."""
    raw = vocab_path(name).with_suffix(".gguf.inp").read_bytes()
    lines = vocab_path(name).with_suffix(".gguf.out").read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # std::getline yields no empty last line
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        texts.append(raw[pos:] if nxt < 0 else raw[pos:nxt])
        pos = len(raw) if nxt < 0 else nxt + len(SEP)
    if len(texts) != len(lines):
        raise ValueError(f"{name}: {len(texts)} inputs but {len(lines)} outputs")
    tests = {t: [int(x) for x in line.strip().split()] for t, line in zip(texts, lines)}
    return list(tests.items())
