"""attend_prompt (causal query blocks through BLAS, the softmax in numba) against attention
computed from its definition in float64, for GQA groups, offsets, sliding windows, blocks that
do not divide the prompt, and queries that see no key."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.kernels.attention_prompt import attend_prompt, masked_softmax_rows


def reference(q, k, v, q_pos, n_swa, scale):
    """float64 softmax(q k^T * scale) v per query head over the keys it may see."""
    n_tok, n_head, _ = q.shape
    group = n_head // k.shape[1]
    out = np.zeros((n_tok, n_head, v.shape[2]))
    for i, p in enumerate(q_pos):
        lo = max(0, p + 1 - n_swa) if n_swa > 0 else 0
        for h in range(n_head):
            keys, values = k[lo:p + 1, h // group].astype(np.float64), v[lo:p + 1, h // group]
            s = keys @ q[i, h].astype(np.float64) * scale
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ values.astype(np.float64)
    return out


@pytest.mark.parametrize("n_tok,n_head,n_kv,d,pos0,n_swa,block,f16", [
    (300, 8, 2, 64, 0, 0, 128, True),  # three blocks, the last one short
    (97, 4, 4, 32, 41, 0, 32, False),  # after cached positions, no grouping, f32 cells
    (200, 6, 2, 64, 100, 48, 64, True),  # a sliding window that drops early keys
    (16, 2, 1, 128, 0, 0, 5, True),  # blocks smaller than the group's rows
])
def test_matches_definition(n_tok, n_head, n_kv, d, pos0, n_swa, block, f16):
    rng = np.random.default_rng(n_tok)
    q = rng.standard_normal((n_tok, n_head, d), np.float32)
    k = rng.standard_normal((pos0 + n_tok + 7, n_kv, d), np.float32)
    v = rng.standard_normal(k.shape, np.float32)
    if f16:
        k, v = (x.astype(np.float16) for x in (k, v))
    q_pos = np.arange(pos0, pos0 + n_tok, dtype=np.int32)
    out = np.full((n_tok, n_head, d), np.nan, np.float32)
    cells = (k.view(np.uint16), v.view(np.uint16)) if f16 else (k, v)
    attend_prompt(q, *cells, q_pos, n_swa, 1 / np.sqrt(d), out, block=block)
    want = reference(q, k.astype(np.float32), v.astype(np.float32), q_pos, n_swa, 1 / np.sqrt(d))
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=1e-4)


def test_softmax_rows_mask_and_empty_rows():
    s = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0]], np.float32)
    # key j at position 10 + j; rows' queries at 11, 13 (window 2: keys 12, 13) and 9 (none)
    masked_softmax_rows(s, np.array([11, 13, 9]), 10, 2, 1.0)
    e = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    np.testing.assert_allclose(s[0], [e[0], e[1], 0, 0], rtol=1e-6)
    np.testing.assert_allclose(s[1], [0, 0, e[0], e[1]], rtol=1e-6)
    assert (s[2] == 0).all()
