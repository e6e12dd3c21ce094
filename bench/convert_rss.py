"""Peak RSS and wall time of our converter against llama.cpp's convert_hf_to_gguf.py on the same
checkpoint, same run (the issue's bound: ours at most 1.5x llama.cpp's).

The checkpoint is a random-weight model of Qwen2.5-0.5B's shape (hidden 896, 24 layers, vocab
151936: 494M parameters), saved once by transformers as BF16 safetensors in --work; both
converters write F16 from it, each in its own process, measured by wait4's ru_maxrss.

    .venv/bin/python bench/convert_rss.py [--work DIR] [--outtype f16] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_checkpoint(folder: Path, dtype: str) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tests.convert.checkpoints import write_tokenizer
    from llamacpy.hub import pull

    folder.mkdir(parents=True, exist_ok=True)
    n_vocab = write_tokenizer(Path(pull("qwen2.5-coder-0.5b", quiet=True)), "qwen2", folder)
    config = Qwen2Config(vocab_size=n_vocab, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         max_position_embeddings=32768, rope_theta=1000000.0,
                         tie_word_embeddings=True, architectures=["Qwen2ForCausalLM"])
    torch.manual_seed(0)
    with torch.no_grad():
        model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(folder, safe_serialization=True)


def measure(cmd: list[str], env: dict | None = None,
            cwd: Path | None = None) -> tuple[float, float]:
    """(peak RSS in MiB, seconds) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd[:3]} failed: {proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/llamacpy-convert-bench"))
    ap.add_argument("--outtype", default="f16")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    folder = args.work / f"Qwen2.5-0.5B-random-{args.dtype}"
    if not (folder / "model.safetensors").is_file():
        make_checkpoint(folder, args.dtype)
    from tests.reference.vocab_data import llama_cpp_source

    src = llama_cpp_source()
    env = dict(os.environ, PYTHONPATH=f"{src / 'gguf-py'}{os.pathsep}{src}")
    ref_out, our_out = args.work / "ref.gguf", args.work / "ours.gguf"
    ref = measure([sys.executable, str(src / "convert_hf_to_gguf.py"), str(folder),
                   "--outtype", args.outtype, "--outfile", str(ref_out)], env=env, cwd=src)
    ours = measure([sys.executable, "-m", "llamacpy.cli.convert", str(folder),
                    "--outtype", args.outtype, "--outfile", str(our_out)], cwd=ROOT)
    same = ref_out.read_bytes() == our_out.read_bytes()
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors")) / 2**20
    print(json.dumps({"checkpoint_mib": round(weights), "outtype": args.outtype,
                      "llamacpp_rss_mib": round(ref[0]), "llamacpp_s": round(ref[1], 1),
                      "ours_rss_mib": round(ours[0]), "ours_s": round(ours[1], 1),
                      "rss_ratio": round(ours[0] / ref[0], 2), "identical": same}))
    ref_out.unlink()
    our_out.unlink()


if __name__ == "__main__":
    main()
