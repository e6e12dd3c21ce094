"""Qwen3.5 (qwen35): tiny random transformers models converted by llama.cpp's converter, against
transformers' float32 logits (tests/golden/qwen35, from tests/reference/make_qwen35_golden.py; no
torch needed here), and the random 0.8B-shaped Q4_0 stand-in against llama.cpp itself.

Every decode mode must match: the whole sequence as one batch, one token at a time and in
micro-batches (snapshots split each micro-batch 4 tokens before its end), with the recurrent delta
rule (the default) and the chunked one. Hybrid-cache behaviour: several sequences per batch, trim
restoring the latest snapshot, prompt-prefix reuse through Slot.prefill.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from llamacpy.memory.batch import Batch
from llamacpy.memory.seq_state import load_seq, save_seq
from llamacpy.engine.context import Context
from llamacpy.engine.sequence import Slot
from llamacpy.format import open_gguf
from llamacpy.models import load_model
from llamacpy.models.qwen35 import GatedDeltaNet
from llamacpy.ops.rope import RopeConfig, mrope_cos_sin, rope_cos_sin
from tests.models.test_tiny_hf import copy_gguf
from tests.reference.metrics import full_kld, log_softmax

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "qwen35"
MODELS = ["qwen35", "qwen35-mtp"]
STANDIN = Path.home() / ".cache" / "llama.cpp" / "qwen35-0.8b-random-q4_0.gguf"
TOL = 1e-3  # max |ours - transformers| over every logit (measured: 4e-5)
N_CTX = 640  # the goldens hold 512 tokens


@pytest.fixture(scope="module", params=MODELS)
def tiny(request):
    """(name, model, tokens int32 [n], reference npz)."""
    g = open_gguf(GOLDEN / f"{request.param}.gguf")
    ref = np.load(GOLDEN / f"{request.param}.npz")
    yield request.param, load_model(g), ref["tokens"], ref
    g.close()


def decode_all(model, tokens: np.ndarray, kv: str = "f32", n_ubatch: int = 512) -> np.ndarray:
    ctx = Context(model, n_ctx=N_CTX, n_ubatch=n_ubatch, type_k=kv, type_v=kv)
    return ctx.decode(Batch.from_tokens(tokens, all_logits=True))


def decode_one_by_one(model, tokens: np.ndarray, kv: str = "f32") -> np.ndarray:
    ctx = Context(model, n_ctx=N_CTX, type_k=kv, type_v=kv)
    return np.concatenate([ctx.decode(Batch.from_tokens(tokens[i : i + 1], pos0=i))
                           for i in range(len(tokens))])


MODES = {
    "one-batch": decode_all,
    "token-by-token": decode_one_by_one,
    "ubatch-5": lambda m, t, kv="f32": decode_all(m, t, kv, n_ubatch=5),
    "ubatch-20": lambda m, t, kv="f32": decode_all(m, t, kv, n_ubatch=20),
    "ubatch-70": lambda m, t, kv="f32": decode_all(m, t, kv, n_ubatch=70),
}


def check(ours: np.ndarray, want: np.ndarray, what: str, tol: float = TOL) -> float:
    """KLD(want || ours) mean <= 1e-4, top-1 >= 99%, every logit within tol; returns the KLD."""
    assert ours.shape == want.shape and ours.dtype == np.float32
    kld = full_kld(log_softmax(want), log_softmax(ours))
    top1 = (ours.argmax(-1) == want.argmax(-1)).mean()
    err = np.abs(ours - want).max()
    print(f"{what}: KLD mean {kld.mean():.1e} max {kld.max():.1e}, top-1 {top1:.3f}, "
          f"max |diff| {err:.1e}")
    assert kld.mean() <= 1e-4 and top1 >= 0.99, f"{what}: KLD {kld.mean():.2e}, top-1 {top1}"
    assert err <= tol, f"{what}: logits differ by up to {err:.2e}"
    return float(kld.mean())


@pytest.mark.parametrize("mode", MODES)
def test_matches_transformers(tiny, mode):
    name, model, tokens, ref = tiny
    check(MODES[mode](model, tokens), ref["logits"], f"{name} {mode}")


@pytest.mark.parametrize("mode", ["one-batch", "ubatch-20"])
def test_fp16_cache_matches_transformers(tiny, mode):
    """The default engine: fp16 KV cache for the attention layers (moves logits by ~1e-3)."""
    name, model, tokens, ref = tiny
    check(MODES[mode](model, tokens, "f16"), ref["logits"], f"{name} {mode} fp16", tol=1e-2)


def test_matches_llama_cpp(tiny):
    """llama.cpp's own logits for the same file (its KLD to transformers: ~5e-12)."""
    name, model, tokens, ref = tiny
    check(decode_all(model, tokens), ref["llamacpp_logits"], f"{name} vs llama.cpp")


@pytest.mark.parametrize("mode", ["one-batch", "ubatch-20", "ubatch-70"])
def test_chunked_form_matches_transformers(tiny, mode, monkeypatch):
    name, model, tokens, ref = tiny
    monkeypatch.setattr(GatedDeltaNet, "chunked_min_tokens", 1)
    check(MODES[mode](model, tokens), ref["logits"], f"{name} {mode} chunked")


def test_recurrent_and_chunked_forms_agree(tiny, monkeypatch):
    name, model, tokens, _ = tiny
    monkeypatch.setattr(GatedDeltaNet, "chunked_min_tokens", None)
    recurrent = decode_all(model, tokens)
    monkeypatch.setattr(GatedDeltaNet, "chunked_min_tokens", 1)
    chunked = decode_all(model, tokens)
    assert np.abs(recurrent - chunked).max() <= 1e-4


def test_sequences_batched_together(tiny):
    """Two sequences in each batch, as the server steps them: prompt chunks and single tokens."""
    name, model, tokens, ref = tiny
    ctx = Context(model, n_ctx=N_CTX, n_seq=2, n_ubatch=16, type_k="f32", type_v="f32")
    steps = [((0, 30), (0, 9)), ((30, 31), (9, 27)), ((31, 32), (27, 28)), ((32, 50), (28, 29))]
    for (a0, b0), (a1, b1) in steps:
        rows = [(0, p) for p in range(a0, b0)] + [(1, p) for p in range(a1, b1)]
        batch = Batch(tokens[[p for _, p in rows]], np.array([p for _, p in rows], np.int32),
                      np.array([s for s, _ in rows], np.int32), np.ones(len(rows), bool))
        got = ctx.decode(batch)
        assert np.abs(got - ref["logits"][batch.positions]).max() <= TOL


def test_trim_restores_the_latest_snapshot(tiny):
    name, model, tokens, ref = tiny
    ctx = Context(model, n_ctx=N_CTX, type_k="f32", type_v="f32")
    ctx.decode(Batch.from_tokens(tokens[:50]))  # snapshots at 46 and 50
    for i in range(50, 60):
        ctx.decode(Batch.from_tokens(tokens[i : i + 1], pos0=i))
    assert ctx.cache.trim(0, 70) == 60  # nothing to forget
    assert ctx.cache.trim(0, 55) == 50
    assert ctx.cache.trim(0, 49) == 46
    got = ctx.decode(Batch.from_tokens(tokens[46:], pos0=46, all_logits=True))
    assert np.abs(got - ref["logits"][46:]).max() <= TOL
    assert ctx.cache.trim(0, 10) == 0  # no snapshot that early: start again
    got = ctx.decode(Batch.from_tokens(tokens[:20], all_logits=True))
    assert np.abs(got - ref["logits"][:20]).max() <= TOL


def test_prompt_end_snapshot_is_copied_when_the_state_moves(tiny):
    """The snapshot at a prompt chunk's end stands for the live state until a later decode or a
    save copies it; restored, it gives the state at its position."""
    name, model, tokens, ref = tiny
    ctx = Context(model, n_ctx=N_CTX, type_k="f32", type_v="f32")
    cache = ctx.cache
    ctx.decode(Batch.from_tokens(tokens[:50]))
    tail, end = cache.snapshots[0][-2:]
    assert (tail.pos, end.pos) == (46, 50) and end.live and not end.ssm and not tail.live
    at_50 = {il: cache.ssm[il][0].copy() for il in cache.recurrent_layers}
    state = save_seq(cache, 0)  # a save copies it: the saved state must not follow the cache
    assert not end.live and all(np.array_equal(end.ssm[il], at_50[il]) for il in at_50)
    ctx.decode(Batch.from_tokens(tokens[50:53], pos0=50))
    assert cache.snapshots[0][-1].pos == 53 and cache.snapshots[0][-1].live
    ctx.decode(Batch.from_tokens(tokens[53:54], pos0=53))  # the state moves: 53's is copied
    assert not cache.snapshots[0][-1].live
    assert cache.trim(0, 53) == 53
    got = ctx.decode(Batch.from_tokens(tokens[53:], pos0=53, all_logits=True))
    assert np.abs(got - ref["logits"][53:]).max() <= TOL
    load_seq(cache, 0, state)
    got = ctx.decode(Batch.from_tokens(tokens[50:], pos0=50, all_logits=True))
    assert np.abs(got - ref["logits"][50:]).max() <= TOL


def test_snapshot_inside_the_conv_window(tiny):
    """Micro-batches of 5 snapshot 1 token in: the conv state is then mostly the old state's."""
    name, model, tokens, ref = tiny
    ctx = Context(model, n_ctx=N_CTX, n_ubatch=5, type_k="f32", type_v="f32")
    ctx.decode(Batch.from_tokens(tokens[:50]))  # snapshots at 41, 45, 46, 50
    assert [s.pos for s in ctx.cache.snapshots[0]][-4:] == [41, 45, 46, 50]
    assert ctx.cache.trim(0, 44) == 41
    got = ctx.decode(Batch.from_tokens(tokens[41:], pos0=41, all_logits=True))
    assert np.abs(got - ref["logits"][41:]).max() <= TOL


def test_prefill_reuses_a_snapshot(tiny):
    """The same prompt again re-reads only from the snapshot 4 tokens before its end; a longer
    prompt continues from the snapshot at its end."""
    name, model, tokens, ref = tiny
    state = Slot(Context(model, n_ctx=N_CTX, type_k="f32", type_v="f32"))
    prompt = [int(t) for t in tokens[:40]]
    assert state.prefill(prompt)[1] == 0
    state.evaluate([int(t) for t in tokens[40:45]])
    logits, kept = state.prefill(prompt)
    assert kept == 36 and np.abs(logits - ref["logits"][39]).max() <= TOL
    logits, kept = state.prefill([int(t) for t in tokens[:60]])
    assert kept == 40 and np.abs(logits - ref["logits"][59]).max() <= TOL


def test_rewriting_cached_positions_needs_a_trim(tiny):
    name, model, tokens, _ = tiny
    ctx = Context(model, n_ctx=64)
    ctx.decode(Batch.from_tokens(tokens[:10]))
    with pytest.raises(ValueError, match="trimmed back first"):
        ctx.decode(Batch.from_tokens(tokens[5:8], pos0=5))
    ctx.cache.clear(0)
    assert ctx.cache.n_past[0] == 0 and not ctx.cache.snapshots[0]
    assert all(s is None or not s.any() for s in ctx.cache.ssm + ctx.cache.conv)


def test_layer_kinds_and_mtp(tiny):
    name, model, _, _ = tiny
    kinds = [type(layer.mixer).__name__ for layer in model.layers]
    if name == "qwen35":
        assert kinds == ["GatedDeltaNet"] * 3 + ["GatedAttention"] and model.mtp == []
    else:  # block_count 5 with nextn_predict_layers 1: the MTP block is bound, not run
        assert kinds == ["GatedDeltaNet", "GatedAttention"] * 2 and len(model.mtp) == 1


def test_full_attention_interval_without_layer_list(tmp_path):
    """Without attention.recurrent_layers every 4th layer is attention (the default)."""
    path = tmp_path / "no-layer-list.gguf"
    copy_gguf(GOLDEN / "qwen35.gguf", path,
              lambda m: m.pop("qwen35.attention.recurrent_layers"))
    ref = np.load(GOLDEN / "qwen35.npz")
    with open_gguf(path) as g:
        check(decode_all(load_model(g), ref["tokens"]), ref["logits"], "interval fallback")


def ggml_mrope_cache(c: RopeConfig, sections, pos4, interleaved: bool):
    """ggml_mrope_cache_init (ggml-cpu ops.cpp) written out as a loop, in float64."""
    s = sections
    out = np.empty((len(pos4), c.n_rot // 2, 2))
    for t, (pt, ph, pw, pe) in enumerate(pos4):
        for i in range(c.n_rot // 2):
            sector = i % sum(s)
            if interleaved:
                p = ph if sector % 3 == 1 and sector < 3 * s[1] else \
                    pw if sector % 3 == 2 and sector < 3 * s[2] else \
                    pt if sector % 3 == 0 and sector < 3 * s[0] else pe
            else:
                p = pt if sector < s[0] else ph if sector < s[0] + s[1] else \
                    pw if sector < s[0] + s[1] + s[2] else pe
            theta = p * c.freq_base ** (-2 * i / c.n_rot)
            out[t, i] = math.cos(theta), math.sin(theta)
    return out


@pytest.mark.parametrize("sections, n_rot", [([11, 11, 10, 0], 64), ([3, 3, 2, 0], 16),
                                             ([16, 24, 24, 0], 128), ([2, 1, 1, 4], 16)])
@pytest.mark.parametrize("interleaved", [True, False])
def test_mrope_angles(sections, n_rot, interleaved):
    c = RopeConfig(n_rot=n_rot, freq_base=10000.0)
    pos4 = np.random.default_rng(n_rot).integers(0, 500, (7, 4)).astype(np.int32)
    cos, sin = mrope_cos_sin(c, sections, pos4, interleaved)
    want = ggml_mrope_cache(c, sections, pos4, interleaved)
    assert np.allclose(cos, want[..., 0], atol=1e-6) and np.allclose(sin, want[..., 1], atol=1e-6)
    text = np.repeat(pos4[:, :1], 4, axis=1)  # equal components: exactly the plain rope
    assert all(np.array_equal(a, b) for a, b in zip(mrope_cos_sin(c, sections, text, interleaved),
                                                    rope_cos_sin(c, pos4[:, 0])))


def test_batch_mrope_default():
    b = Batch.from_tokens([5, 6, 7], pos0=10)
    assert b.mrope().tolist() == [[10, 10, 10, 0], [11, 11, 11, 0], [12, 12, 12, 0]]
    b.mrope_positions = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert b.slice(1, 3).mrope().tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]


@pytest.mark.skipif(not STANDIN.exists(), reason="make it with bench/make_qwen35_standin.py")
def test_standin_near_llama_cpp():
    """Random 0.8B-shaped Q4_0 model: next-token distributions over 256 tokens near llama.cpp's
    (measured: KLD 0.018, top-1 94.5%; both from llama.cpp's own rounding of activations to
    Q8_0: llamacpy is at KLD 1e-7 from the exact float computation of the Q4_0 weights)."""
    llamacpp = pytest.importorskip("tests.reference.llamacpp")
    if not llamacpp.available():
        pytest.skip("llama-cpp-python is not installed")
    tokens = np.random.default_rng(7).integers(300, 248000, 256).astype(np.int32)
    llm = llamacpp.load_llama(STANDIN, n_ctx=512, n_batch=512, n_ubatch=512, logits_all=True)
    llm.eval([int(t) for t in tokens])
    theirs = np.array(llm.scores[: len(tokens)], np.float32)
    del llm
    with open_gguf(STANDIN) as g:
        ours = Context(load_model(g), n_ctx=512).decode(Batch.from_tokens(tokens, all_logits=True))
    kld = full_kld(log_softmax(theirs), log_softmax(ours)).mean()
    top1 = (ours.argmax(-1) == theirs.argmax(-1)).mean()
    print(f"stand-in vs llama.cpp: KLD {kld:.4f}, top-1 {top1:.3f}")
    assert kld <= 0.02 and top1 >= 0.92
