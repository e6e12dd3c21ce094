"""Every sampler, and whole chains, against llama.cpp's own (llama-cpp-python's ctypes API)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from llamacpy.sampling import Sampler, SamplingParams, dry_breakers
from llamacpy.tokenizer import Tokenizer
from tests.sampling import cases as C
from tests.sampling import reference as R

pytestmark = pytest.mark.llamacpp


@pytest.mark.parametrize("spec", C.SPECS, ids=lambda s: f"{s[0]}-{s[1]}")
def test_sampler(spec):
    """2 seeds x vocab 32/1000/50000 x token-order/sorted/shuffled candidates, every step."""
    name, kwargs, steps = spec
    n_steps = n_exact = 0
    for case in [
        C.make_case(name, kwargs, steps, n, v, seed)
        for n in (32, 1000, 50000)
        for v in ("ids", "sorted", "shuffled")
        for seed in (0, 1)
    ]:
        for step, (ours, ref) in enumerate(zip(C.run_ours(case), R.run_ref(case))):
            n_exact += C.check(ours, ref, case.ids[step], case.logits[step])
            n_steps += 1
    # llama.cpp's float arithmetic is reproduced, so (nearly) every value is bit-identical
    assert n_exact >= 0.95 * n_steps, f"only {n_exact}/{n_steps} bit-identical"


@pytest.mark.parametrize("name", list(C.CHAIN_PARAMS))
def test_chain(name):
    """common_sampler's chain with the same seed: same candidates, probabilities and tokens
    over 8 steps after a shared history (accepted into both)."""
    params = SamplingParams(**C.CHAIN_PARAMS[name])
    n_vocab = 32000
    ours, ref = Sampler(params, n_vocab=n_vocab), R.chain_from_params(params, n_vocab)
    history, rows = C.chain_inputs(n_vocab, 8, seed=len(name))
    for token in history:
        ours.accept(token)
        ref.accept(token)
    for logits in rows:
        token = ours.sample(logits)
        out = ref.apply(np.arange(n_vocab, dtype=np.int32), logits)
        C.check_chain_step(ours, token, out, logits, ulps=C.chain_ulps(C.CHAIN_PARAMS[name]))
        ref_token = int(out["ids"][out["selected"]])
        ours.accept(ref_token)
        ref.accept(ref_token)


def test_chain_reset_reseeds_like_llamacpp():
    params = SamplingParams(seed=11, xtc_probability=0.5, xtc_threshold=0.05)
    ours, ref = Sampler(params), R.chain_from_params(params, 5000)
    _, rows = C.chain_inputs(5000, 6, seed=3)
    for i, logits in enumerate(rows):
        if i == 3:
            ours.reset()
            ref.reset()
        token = ours.sample(logits)
        out = ref.apply(np.arange(5000, dtype=np.int32), logits)
        assert token == out["ids"][out["selected"]]


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def vocab(request, model_paths):
    """A BPE (SmolLM2, 49k) and an SPM (Gemma 3, 262k) vocabulary: llama.cpp's, its piece
    table, and llamacpy's own Tokenizer of the same model."""
    vocab = R.Vocab(model_paths[request.param])
    return vocab, vocab.pieces(), Tokenizer.from_gguf(model_paths[request.param])


@pytest.mark.parametrize("breakers", C.DRY_BREAKERS, ids=lambda b: f"{len(b)}-breakers")
def test_dry(vocab, breakers):
    """DRY with sequence breakers processed from a real vocabulary."""
    vocab, pieces, _ = vocab
    table = dry_breakers(pieces, vocab.tokenize, breakers)
    histories = C.dry_histories(vocab.tokenize, pieces, seed=5)
    for params in C.DRY_PARAMS:
        ref = R.dry(vocab.vocab, *params, breakers)  # llama.cpp scans the vocabulary here
        for i, history in enumerate(histories):
            ids, logits = C.dry_candidates(history, vocab.n_vocab, seed=i)
            ref.reset()
            for token in history:
                ref.accept(token)
            out = ref.apply(ids, logits)
            ours = C.run_dry_ours(params, table, history, ids, logits)
            C.check(ours, out, ids, logits, ulps=C.EXACT)


def test_chain_with_dry_and_our_tokenizer(vocab):
    """The whole chain with DRY, its restart sequences derived through llamacpy's Tokenizer."""
    vocab, _, tokenizer = vocab
    params = SamplingParams(seed=3, dry_multiplier=0.8, dry_allowed_length=1, repeat_penalty=1.1)
    ours = Sampler(params, tokenizer)
    ref = R.chain_from_params(params, vocab.n_vocab, vocab.vocab)
    history = vocab.tokenize(C.DRY_TEXT)
    ours.prime(history)
    for token in history:
        ref.accept(token)
    rng = np.random.default_rng(0)
    for _ in range(4):
        logits = C.random_logits(vocab.n_vocab, rng)
        token = ours.sample(logits)
        out = ref.apply(np.arange(vocab.n_vocab, dtype=np.int32), logits)
        C.check_chain_step(ours, token, out, logits, ulps=C.EXACT)
        ours.accept(token)
        ref.accept(token)
