"""--spec-type draft-mtp: Qwen3.5's MTP block as a drafter, on the tiny random Qwen3.5 with an MTP
block (tests/golden/qwen35/qwen35-mtp.gguf). The block's hidden states and logits are checked
against llama.cpp's MTP context (tests/reference/mtp_ref.py), the drafts against the chain that
llama.cpp's draft-mtp runs, and the output against decoding without speculation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.engine.context import Context
from llamacpy.engine.draft_model import build_speculator
from llamacpy.engine.mtp_draft import MtpDrafter, top_candidate
from llamacpy.engine.speculative import SpecConfig
from llamacpy.format import open_gguf
from llamacpy.memory.batch import Batch
from llamacpy.models import load_model
from llamacpy.tokenizer import Tokenizer

from .test_speculative_qwen35 import run

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "qwen35"
PROMPT = [5, 17, 33, 2, 9, 41, 7, 12, 88, 3, 150, 61]


@pytest.fixture(scope="module")
def mtp_model():
    g = open_gguf(GOLDEN / "qwen35-mtp.gguf")
    yield load_model(g), Tokenizer.from_gguf(g)
    g.close()


@pytest.fixture(scope="module")
def reference():
    llamacpp = pytest.importorskip("tests.reference.llamacpp")
    if not llamacpp.available():
        pytest.skip("llama-cpp-python is not installed")
    from tests.reference.mtp_ref import MtpReference

    ref = MtpReference(GOLDEN / "qwen35-mtp.gguf")
    yield ref
    ref.close()


def close(ours, theirs, what):
    scale = np.abs(theirs).max()
    assert np.abs(ours - theirs).max() <= 2e-3 * scale, f"{what}: {np.abs(ours - theirs).max()}"


def target_hidden(model, tokens):
    rows = {}
    model.hidden_sink = lambda batch, h: rows.setdefault("h", h.copy())
    try:
        Context(model, n_ctx=256, type_k="f32", type_v="f32").decode(
            Batch.from_tokens(tokens, all_logits=True))
    finally:
        model.hidden_sink = None
    return rows["h"]


def test_block_matches_llama_cpp(mtp_model, reference):
    """h_nextn of the trunk, then the MTP head over (x_p, h_{p-1}) in two batches (the second
    attends to the first's cells), hidden states and logits as llama.cpp's MTP context."""
    m, _ = mtp_model
    reference.reset()
    _, h_ref = reference.decode_target(PROMPT)
    h = target_hidden(m, PROMPT)
    close(h, h_ref, "trunk h_nextn")
    pairs = np.vstack([np.zeros((1, h.shape[1]), np.float32), h_ref[:-1]])
    block, cache = m.mtp[0], m.mtp[0].make_cache(256, 1)
    for lo, hi in ((0, 7), (7, len(PROMPT))):
        logits_ref, out_ref = reference.decode_mtp(PROMPT[lo:hi], pairs[lo:hi], lo)
        out = block.forward(m, Batch.from_tokens(PROMPT[lo:hi], lo, all_logits=True),
                            pairs[lo:hi], cache)
        cache.commit(0, hi)
        close(out, out_ref, f"MTP h_nextn rows {lo}..{hi}")
        logits = block.logits(m, out)
        close(logits, logits_ref, f"MTP logits rows {lo}..{hi}")
        assert (logits.argmax(1) == logits_ref.argmax(1)).all()


def test_drafts_follow_llama_cpp_chain(mtp_model, reference):
    """The drafter's guesses after a prompt and a sampled token are the greedy chain of
    llama.cpp's MTP head: each step's own output hidden state paired with its guess."""
    m, _ = mtp_model
    sampled = 77
    reference.reset()
    _, h_ref = reference.decode_target(PROMPT)
    pairs = np.vstack([np.zeros((1, h_ref.shape[1]), np.float32), h_ref[:-1]])
    reference.decode_mtp(PROMPT, pairs, 0)
    chain, token, h = [], sampled, h_ref[-1:]
    for i in range(4):
        logits, h = reference.decode_mtp([token], h, len(PROMPT) + i)
        token = top_candidate(logits[0])[0]
        chain.append(token)
    drafter = MtpDrafter(m, 256, 1, n_max=4)
    try:
        Context(m, n_ctx=256, type_k="f32", type_v="f32").decode(
            Batch.from_tokens(PROMPT, all_logits=False))
        assert drafter.draft(0, PROMPT + [sampled], 4) == chain
        assert drafter.cache.n_past[0] == len(PROMPT)  # the guesses' cells are dropped
        assert drafter.draft(0, PROMPT + [sampled], 2) == chain[:2]  # nothing recomputed wrong
    finally:
        m.hidden_sink = None


@pytest.mark.parametrize("draft_vocab", [0, 16])
def test_greedy_identical_with_mtp_drafts(mtp_model, draft_vocab):
    """With the whole vocabulary and with a head over the first 16 ids and those seen
    (--spec-draft-vocab): the target's greedy tokens either way."""
    from llamacpy.engine.draft_vocab import DraftVocabulary

    m, tok = mtp_model
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 200, 24)]
    plain, _ = run(m, tok, prompt, None)
    spec = build_speculator(SpecConfig(types=["draft-mtp"], n_max=3, draft_vocab=draft_vocab),
                            tok, 256, 1, target_model=m)
    head = spec.drafters[0].head
    assert isinstance(head, DraftVocabulary) == (draft_vocab > 0)
    try:
        fast, t = run(m, tok, prompt, spec)
    finally:
        m.hidden_sink = None
    assert fast == plain
    assert t["draft_n"] > 0 and spec.stats.n_steps > 0
    if draft_vocab:
        assert set(prompt) <= set(head.ids().tolist())


def test_p_min_stops_drafts(mtp_model):
    m, _ = mtp_model
    drafter = MtpDrafter(m, 256, 1, n_max=4, p_min=1.01)
    try:
        Context(m, n_ctx=256, type_k="f32", type_v="f32").decode(Batch.from_tokens(PROMPT))
        assert drafter.draft(0, PROMPT + [77], 4) == []
    finally:
        m.hidden_sink = None


def test_model_without_mtp_is_refused():
    g = open_gguf(GOLDEN / "qwen35.gguf")
    try:
        with pytest.raises(ValueError, match="needs a model with an MTP block"):
            build_speculator(SpecConfig(types=["draft-mtp"]), Tokenizer.from_gguf(g), 256, 1,
                             target_model=load_model(g))
    finally:
        g.close()


def test_speculator_takes_mtp_type():
    from llamacpy.engine.speculative import parse_spec_types

    assert parse_spec_types("ngram-simple,draft-mtp") == ["ngram-simple", "draft-mtp"]
