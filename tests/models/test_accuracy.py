"""Faithfulness on the three real models, teacher-forced over 512 tokens of mixed text.

References (tests/golden/accuracy, from tests/reference/make_accuracy_golden.py): the exact
computation (the GGUF's dequantized weights in fp32, run by transformers) and llama.cpp itself.
llamacpy must be at least as close to the exact computation as llama.cpp (mean KLD no higher,
top-1 agreement no lower) and stay near llama.cpp (mean KLD <= 0.02, top-1 >= 92%). The KLDs here
are over the partition {reference top-64, rest}, computed identically for llama.cpp and llamacpy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.memory.batch import Batch
from llamacpy.engine.context import Context
from llamacpy.models import load_model
from tests.reference.metrics import log_softmax, partition_kld

GOLDEN = Path(__file__).parent.parent / "golden" / "accuracy"
MODELS = ["gemma3-270m", "smollm2-135m", "qwen2.5-coder-0.5b"]


@pytest.fixture(scope="module", params=MODELS)
def measured(request, real_models):
    name = request.param
    ref = np.load(GOLDEN / f"{name}.npz")
    ctx = Context(load_model(real_models[name]), n_ctx=1024)
    logits = ctx.decode(Batch.from_tokens(ref["tokens"], all_logits=True))
    return name, ref, log_softmax(logits)


def test_at_least_as_close_to_exact_as_llama_cpp(measured):
    name, ref, logp = measured
    ours = partition_kld(ref["exact_ids"], ref["exact_logp"], logp).mean()
    theirs = ref["llamacpp_pkld_exact"].mean()
    top1_ours = (logp.argmax(-1) == ref["exact_top1"]).mean()
    top1_theirs = (ref["llamacpp_top1"] == ref["exact_top1"]).mean()
    print(f"{name}: KLD vs exact ours {ours:.3g} llama.cpp {theirs:.3g}; "
          f"top-1 ours {top1_ours:.3f} llama.cpp {top1_theirs:.3f}")
    assert ours <= theirs, f"{name}: KLD to exact {ours:.6f} > llama.cpp's {theirs:.6f}"
    assert top1_ours >= top1_theirs


def test_near_llama_cpp(measured):
    name, ref, logp = measured
    kld = partition_kld(ref["llamacpp_ids"], ref["llamacpp_logp"], logp).mean()
    top1 = (logp.argmax(-1) == ref["llamacpp_top1"]).mean()
    print(f"{name}: vs llama.cpp KLD {kld:.4f}, top-1 {top1:.3f}")
    assert kld <= 0.02 and top1 >= 0.92, f"{name}: KLD {kld:.4f}, top-1 {top1:.3f}"

