"""Context shift (--context-shift, n_keep): cells removed from a sequence and the later ones moved
down with their keys re-rotated (llama.cpp's llama_memory_seq_rm + llama_memory_seq_add and its
K-shift), checked against keys computed fresh at the new positions, against llama.cpp doing the
same shift on the same model, and through the scheduler against a transcription of llama.cpp's
server formula (keep n_keep + BOS, drop half of the rest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.engine.context import Context
from llamacpy.engine.prompt import Prompt
from llamacpy.engine.scheduler import Scheduler
from llamacpy.engine.sequence import Request
from llamacpy.format import open_gguf
from llamacpy.kernels.kv_quant import dequantize_cells
from llamacpy.memory.batch import Batch
from llamacpy.memory.kv_cache import rotated
from llamacpy.memory.kv_shift import can_shift, remove_cells
from llamacpy.models import load_model
from llamacpy.ops.rope import apply_rope_reference, rope_cos_sin
from llamacpy.sampling import SamplingParams
from llamacpy.tokenizer import Tokenizer
from tests.reference import llamacpp

MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"]  # NORM, NEOX, NEOX + SWA bases
QWEN35 = Path("tests/golden/qwen35/qwen35.gguf")
GREEDY = SamplingParams(temperature=0.0)
TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with "
        "a single step. All that glitters is not gold; the early bird catches the worm, and "
        "where there is smoke there is fire. Actions speak louder than words, so look before "
        "you leap and never judge a book by its cover. ")


@pytest.fixture(scope="module", params=MODELS)
def loaded(request, model_paths):
    g = open_gguf(model_paths[request.param])
    return request.param, model_paths[request.param], load_model(g), Tokenizer.from_gguf(g)


def keys(cache, il: int, seq: int, n: int) -> np.ndarray:
    """float64 [n, n_head_kv, d_k]: the keys as attention sees them (a block type dequantized,
    its Hadamard rotation undone)."""
    x = np.array(dequantize_cells(cache.k[il][seq, :n], cache.type_k), np.float32)
    if cache.rot_k is not None:
        x = rotated(x, cache.rot_k)
    return x.astype(np.float64)


# largest error allowed, relative to the largest key: one more rounding to the cache type
KEY_TOL = {"f32": 1e-4, "f16": 4e-3, "bf16": 2e-2, "q8_0": 3e-2, "q4_0": 0.25}


@pytest.mark.parametrize("kv", list(KEY_TOL))
def test_layer0_keys_equal_keys_computed_at_the_new_positions(loaded, kv):
    """Layer 0's key depends only on the token and its position: after the shift, the moved
    keys equal those of the kept tokens decoded fresh at their new positions (block types:
    dequantized, Hadamard-unrotated, roped and quantized again, as llama.cpp)."""
    _, _, model, tok = loaded
    tokens = tok.tokenize(TEXT, add_special=True)[:40]
    n_keep, d = 5, 13
    ctx = Context(model, n_ctx=64, type_k=kv, type_v=kv)
    ctx.decode(Batch.from_tokens(tokens))
    v_before = ctx.cache.v[0][0, : len(tokens)].copy()
    assert remove_cells(ctx.cache, 0, n_keep, n_keep + d, model.kv_rope) == len(tokens) - d
    fresh = Context(model, n_ctx=64, type_k=kv, type_v=kv)
    fresh.decode(Batch.from_tokens(tokens[:n_keep] + tokens[n_keep + d:]))
    n = len(tokens) - d
    got, want = keys(ctx.cache, 0, 0, n), keys(fresh.cache, 0, 0, n)
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= KEY_TOL[kv], err
    # values move unchanged (a fresh decode of another batch size may take another matmul path)
    moved = np.concatenate([v_before[:n_keep], v_before[n_keep + d :]])
    assert np.array_equal(ctx.cache.v[0][0, :n], moved)


def test_every_layer_is_rerotated_by_its_own_rope(loaded):
    """All layers (Gemma 3: local and global rope bases): the moved keys are the cached keys
    rotated back to their own position's zero and forward to the new one, in float64."""
    _, _, model, tok = loaded
    tokens = tok.tokenize(TEXT, add_special=True)[:30]
    ctx = Context(model, n_ctx=64, type_k="f32", type_v="f32")
    ctx.decode(Batch.from_tokens(tokens))
    before = [keys(ctx.cache, il, 0, len(tokens)) for il in range(len(model.layers))]
    p0, p1 = 3, 10
    remove_cells(ctx.cache, 0, p0, p1, model.kv_rope)
    old = np.arange(p1, len(tokens))
    for il in range(len(model.layers)):
        rope = model.kv_rope(il)
        cos, sin = rope_cos_sin(rope, -old)  # undo R(p): unit magnitude when attn_factor is 1
        k = apply_rope_reference(before[il][p1:].copy(), cos.astype(np.float64),
                                 sin.astype(np.float64), rope.mode)
        cos, sin = rope_cos_sin(rope, old - (p1 - p0))
        k = apply_rope_reference(k, cos.astype(np.float64), sin.astype(np.float64), rope.mode)
        got = keys(ctx.cache, il, 0, len(tokens) - (p1 - p0))
        assert np.allclose(got[:p0], before[il][:p0])
        assert np.abs(got[p0:] - k).max() <= 1e-4 * max(1.0, np.abs(k).max()), il


@pytest.mark.skipif(not llamacpp.available(), reason="needs llama-cpp-python")
def test_logits_after_a_shift_match_llama_cpp(loaded):
    """llama.cpp: decode, llama_memory_seq_rm(n_keep, n_keep + d), llama_memory_seq_add(n_keep
    + d, n, -d), decode the next tokens; ours the same. The gap between the two is no larger
    than between the two without any shift (llama.cpp quantizes activations to Q8 in its dot
    products: mean gaps of 0.05-0.25 logits either way; measured shifted/unshifted: SmolLM2
    0.262/0.245, Qwen2.5-Coder 0.051/0.047, Gemma 3 0.32/0.24), and smaller than the gap to
    llama.cpp's unshifted logits."""
    name, path, model, tok = loaded
    tokens = tok.tokenize(TEXT, add_special=True)
    assert len(tokens) >= 44
    head, tail = tokens[:36], tokens[36:44]
    n_keep, d = 4, 16
    ref = llamacpp.load_llama(path, n_ctx=128, n_batch=128, n_ubatch=128, logits_all=True)

    def llama_cpp(shift: bool) -> np.ndarray:
        ref.reset()
        ref._ctx.kv_cache_clear()
        ref.eval(head)
        if shift:
            ref._ctx.kv_cache_seq_rm(0, n_keep, n_keep + d)
            ref._ctx.kv_cache_seq_shift(0, n_keep + d, len(head), -d)
            ref.n_tokens = len(head) - d
        start = ref.n_tokens
        ref.eval(tail)
        return np.array(ref.scores[start:start + len(tail)])

    def ours(shift: bool) -> np.ndarray:
        ctx = Context(model, n_ctx=128)
        ctx.decode(Batch.from_tokens(head))
        n = len(head)
        if shift:
            n = remove_cells(ctx.cache, 0, n_keep, n_keep + d, model.kv_rope)
        return ctx.decode(Batch.from_tokens(tail, pos0=n, all_logits=True))

    ref_plain = llama_cpp(False)
    base = np.abs(ours(False) - ref_plain).mean()
    shifted_ours, shifted_ref = ours(True), llama_cpp(True)
    gap = np.abs(shifted_ours - shifted_ref).mean()
    cross = np.abs(shifted_ours - ref_plain).mean()  # against llama.cpp without the shift
    assert gap <= 1.5 * base + 0.01, (name, gap, base)
    assert gap < cross, (name, gap, cross)
    rows = np.arange(len(tail))  # our greedy token is llama.cpp's, or a near tie there
    assert np.all(shifted_ref.max(-1) - shifted_ref[rows, shifted_ours.argmax(-1)] < 1.0)


def run(sched: Scheduler, request: Request) -> tuple[list[int], dict]:
    tokens, done = [], None
    for event in sched.generate(request):
        if event["type"] == "token":
            tokens.append(event["token"])
        elif event["type"] == "done":
            done = event
        else:
            raise AssertionError(event)
    return tokens, done


@pytest.mark.parametrize("n_keep", [0, 6, -1])
def test_generation_goes_on_past_a_full_context(loaded, n_keep):
    """The scheduler's shifts against a hand-driven loop of llama.cpp's formula: when the next
    token would fill the context, keep n_keep (+ BOS) cells, drop half of the rest."""
    name, _, model, tok = loaded
    prompt = tok.tokenize(TEXT, add_special=True)[:20]
    n_ctx, n_predict = 48, 70
    sched = Scheduler(Context(model, n_ctx=n_ctx), tok, context_shift=True)
    request = Request(Prompt(list(prompt)), GREEDY, n_predict=n_predict, ignore_eos=True,
                      n_keep=n_keep)
    got, done = run(sched, request)
    assert len(got) == n_predict and done["stop_type"] == "limit" and done["truncated"]

    ctx = Context(model, n_ctx=n_ctx)
    cells, want, shifts = list(prompt), [], 0
    logits = ctx.decode(Batch.from_tokens(cells))[-1]
    while True:
        want.append(int(np.argmax(logits)))
        if len(want) == n_predict:
            break
        if len(cells) + 1 >= n_ctx:
            keep = min(n_ctx - 4, (len(prompt) if n_keep < 0 else n_keep) + int(tok.add_bos))
            n_discard = min((len(cells) - keep) // 2, len(cells) - keep - 1)
            remove_cells(ctx.cache, 0, keep, keep + n_discard, model.kv_rope)
            del cells[keep:keep + n_discard]
            shifts += 1
        logits = ctx.decode(Batch.from_tokens([want[-1]], pos0=len(cells)))[-1]
        cells.append(want[-1])
    assert shifts >= 2 and got == want, name
    assert sched.slots[0].tokens[:min(len(prompt), max(n_keep, 0) + int(tok.add_bos))] == \
        prompt[:min(len(prompt), max(n_keep, 0) + int(tok.add_bos))]


def test_without_context_shift_a_full_context_ends_the_generation(loaded):
    _, _, model, tok = loaded
    prompt = tok.tokenize(TEXT, add_special=True)[:20]
    sched = Scheduler(Context(model, n_ctx=48), tok)
    got, done = run(sched, Request(Prompt(prompt), GREEDY, n_predict=70, ignore_eos=True))
    assert done["stop_type"] == "limit" and not done["truncated"]
    assert len(prompt) + len(got) == 48


def test_recurrent_memory_cannot_shift():
    g = open_gguf(QWEN35)
    model = load_model(g)
    ctx = Context(model, n_ctx=64)
    assert not can_shift(ctx.cache)
    with pytest.raises(ValueError, match="--context-shift is not supported with this model and "
                                         "cache: its memory cannot shift"):
        Scheduler(ctx, Tokenizer.from_gguf(g), context_shift=True)
    with pytest.raises(ValueError, match="cannot shift cells: its memory cannot shift"):
        remove_cells(ctx.cache, 0, 0, 1, model.kv_rope)


def test_cache_reuse_moves_a_cached_chunk_into_place(loaded):
    """--cache-reuse 8: after a prompt P1 + X + P2, the prompt P1 + P2 + Q reuses P1 as the
    prefix and P2 shifted down over X (llama.cpp's seq_rm(head_p, head_c) + seq_add), so only Q
    is decoded; the tokens equal a hand-driven run of that shift. Without it, P2 is decoded
    again."""
    name, _, model, tok = loaded
    words = tok.tokenize(TEXT, add_special=True)
    p1, x, p2, q = words[:10], words[10:22], words[22:40], words[40:46]
    reuse = Scheduler(Context(model, n_ctx=128), tok, n_cache_reuse=8)
    plain = Scheduler(Context(model, n_ctx=128), tok)
    for sched in (reuse, plain):
        run(sched, Request(Prompt(p1 + x + p2), GREEDY, n_predict=1))
    got, done = run(reuse, Request(Prompt(p1 + p2 + q), GREEDY, n_predict=8, ignore_eos=True))
    assert done["n_cached"] == len(p1) + len(p2) and done["timings"]["prompt_n"] == len(q)
    _, done_plain = run(plain, Request(Prompt(p1 + p2 + q), GREEDY, n_predict=8))
    assert len(p1) <= done_plain["n_cached"] < len(p1) + 3  # the prefix (and a coincidence)

    ctx = Context(model, n_ctx=128)
    ctx.decode(Batch.from_tokens(p1 + x + p2))
    n = remove_cells(ctx.cache, 0, len(p1), len(p1) + len(x), model.kv_rope)
    logits = ctx.decode(Batch.from_tokens(q, pos0=n))[-1]
    want = []
    for _ in range(8):
        want.append(int(np.argmax(logits)))
        logits = ctx.decode(Batch.from_tokens([want[-1]], pos0=n + len(q) + len(want) - 1))[-1]
    assert got == want, name


def test_cache_reuse_needs_chunks_of_n_tokens(loaded):
    _, _, model, tok = loaded
    words = tok.tokenize(TEXT, add_special=True)
    p1, x, p2, q = words[:10], words[10:22], words[22:28], words[40:46]  # a 6-token chunk
    sched = Scheduler(Context(model, n_ctx=128), tok, n_cache_reuse=8)
    run(sched, Request(Prompt(p1 + x + p2), GREEDY, n_predict=1))
    _, done = run(sched, Request(Prompt(p1 + p2 + q), GREEDY, n_predict=1))
    assert len(p1) <= done["n_cached"] < len(p1) + 3


def test_recurrent_memory_refuses_cache_reuse():
    g = open_gguf(QWEN35)
    with pytest.raises(ValueError, match="--cache-reuse is not supported with this model"):
        Scheduler(Context(load_model(g), n_ctx=64), Tokenizer.from_gguf(g), n_cache_reuse=4)


def test_cache_ram_brings_back_an_idle_slots_prompt(loaded):
    """--cache-ram: one slot, prompts A then B then A again. B replaces A in the slot, so A is
    saved to RAM first; A's return loads it back and reuses all but its last token. The tokens
    equal a run without the cache, and without it A is decoded again."""
    name, _, model, tok = loaded
    words = tok.tokenize(TEXT, add_special=True)
    a, b = words[:30], [words[0]] + words[30:60]
    outs = {}
    for mib in (0, 64):
        sched = Scheduler(Context(model, n_ctx=128), tok, cache_ram_mib=mib)
        run(sched, Request(Prompt(a), GREEDY, n_predict=4))
        run(sched, Request(Prompt(b), GREEDY, n_predict=4))
        outs[mib] = run(sched, Request(Prompt(a), GREEDY, n_predict=6, ignore_eos=True))
        if mib:
            assert len(sched.prompt_cache.entries) == 1  # B's prompt, saved when A came back
            assert sched.prompt_cache.entries[0].tokens[:len(b)] == b
    (with_cache, done), (without, done_plain) = outs[64], outs[0]
    assert done["n_cached"] == len(a) - 1 and done_plain["n_cached"] <= 1
    assert with_cache == without, name


def test_cache_ram_limit_drops_the_oldest(loaded):
    _, _, model, tok = loaded
    words = tok.tokenize(TEXT, add_special=True)
    sched = Scheduler(Context(model, n_ctx=128), tok, cache_ram_mib=1)
    prompts = [words[i:i + 20] for i in range(0, 60, 20)]
    for p in prompts:
        run(sched, Request(Prompt(p), GREEDY, n_predict=2))
    cache = sched.prompt_cache
    assert cache.nbytes <= 2**20 and cache.entries
    per_entry = cache.entries[-1].state.nbytes
    assert len(cache.entries) == min(2, 2**20 // per_entry)
    assert cache.entries[-1].tokens[:20] == prompts[1]  # the newest saved, the oldest gone first


def test_cache_ram_restores_a_recurrent_state():
    """Qwen3.5: the saved memory holds the recurrent state and its snapshots; greedy tokens after
    a round trip through RAM equal those of a fresh run."""
    g = open_gguf(QWEN35)
    model, tok = load_model(g), Tokenizer.from_gguf(g)
    a, b = list(range(5, 40)), list(range(50, 80))
    outs = {}
    for mib in (0, -1):
        sched = Scheduler(Context(model, n_ctx=128), tok, cache_ram_mib=mib)
        for p in (a, b):
            run(sched, Request(Prompt(p), GREEDY, n_predict=3))
        outs[mib] = run(sched, Request(Prompt(a), GREEDY, n_predict=5, ignore_eos=True))
    assert outs[-1][1]["n_cached"] > outs[0][1]["n_cached"]
    assert outs[-1][0] == outs[0][0]

