"""The decode path (one token per step: the matvec and attention kernels) on the three real models,
teacher-forced over the first tokens of tests/golden/accuracy: at least as close to the exact
computation as llama.cpp. tests/models/test_accuracy.py checks the same for the prompt path
(matmul, BLAS attention), which uses none of the decode kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.memory.batch import Batch
from llamacpy.engine.context import Context
from llamacpy.models import load_model
from tests.reference.metrics import log_softmax, partition_kld

GOLDEN = Path(__file__).parent.parent / "golden" / "accuracy"
N_TOKENS = 64


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m", "qwen2.5-coder-0.5b"])
def test_decode_at_least_as_close_to_exact_as_llama_cpp(name, real_models):
    ref = np.load(GOLDEN / f"{name}.npz")
    ctx = Context(load_model(real_models[name]), n_ctx=N_TOKENS + 8)
    logits = np.stack([ctx.decode(Batch.from_tokens([int(t)], pos0=i))[-1]
                       for i, t in enumerate(ref["tokens"][:N_TOKENS])])
    logp = log_softmax(logits)
    ours = partition_kld(ref["exact_ids"][:N_TOKENS], ref["exact_logp"][:N_TOKENS], logp).mean()
    theirs = ref["llamacpp_pkld_exact"][:N_TOKENS].mean()
    top1 = (logp.argmax(-1) == ref["exact_top1"][:N_TOKENS]).mean()
    top1_theirs = (ref["llamacpp_top1"][:N_TOKENS] == ref["exact_top1"][:N_TOKENS]).mean()
    print(f"{name}: decode KLD vs exact ours {ours:.3e} llama.cpp {theirs:.3e}; "
          f"top-1 ours {top1:.3f} llama.cpp {top1_theirs:.3f}")
    assert ours <= theirs and top1 >= top1_theirs
