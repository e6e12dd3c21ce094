"""The gated delta rule (Qwen3.5 / Qwen3-Next linear attention) and its causal depthwise conv.

Per value head h and token t, with the state S [d_k, d_v] (ggml-cpu ops.cpp:
ggml_compute_forward_gated_delta_net, transformers' torch_recurrent_gated_delta_rule):

    S <- S * exp(g_t);  d = beta_t (v_t - S^T k_t);  S <- S + k_t d^T;  o_t = S^T q_t / sqrt(d_k)

The state is stored as ggml stores it, transposed: state[h, j, i] = S[i][j], so that row j (value
dim j over every key dim i) is contiguous. Value head h reads key head h % n_k_heads: llama.cpp's
tiled order, into which convert_hf_to_gguf.py reorders transformers' grouped value heads.

Two forms, equal up to float32 rounding:
- `delta_rule_recurrent`: token by token, a numba kernel over (segment, value head), each state
  row read once and written once per token (ggml's fused op makes four passes).
- `delta_rule_chunked`: transformers' and llama.cpp's chunked form (delta-net-base.cpp:
  build_delta_net_chunking), whole 64-token chunks at a time in BLAS matrix products, the
  intra-chunk triangular system inverted by `unit_lower_inverse`. With 128-wide heads it does
  about twice the recurrent form's arithmetic, so on a CPU it is the slower one at every prompt
  length (models/qwen35.py says when it runs).
`delta_rule_reference` and the `*_reference` functions are the plain numpy twins the tests hold
the kernels to.

Shapes: q, k float32 [n, n_k_heads, d]; v, out [n, n_v_heads, d]; g (log decay, <= 0) and beta
[n, n_v_heads]; a batch holds several sequences as segments: rows starts[s]..stops[s]-1 belong to
the state states[slots[s]].
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .dequant import call_kernel, ld, ld2, st2
from .threading_layer import NOGIL

CHUNK = 64  # the chunk size of transformers' and llama.cpp's chunked delta rule
DELTA_FASTMATH = {"contract", "reassoc"}  # the dot products over d_k may be vectorised


# -- causal depthwise convolution (ggml_ssm_conv) --------------------------------------------------


@njit(cache=True, nogil=NOGIL, fastmath={"contract"})
def _conv1d(x, starts, stops, slots, states, wt, out):
    n_seg, C, K = starts.shape[0], x.shape[1], wt.shape[0]
    for sg in range(n_seg):
        a, b, st = starts[sg], stops[sg], states[slots[sg]]
        for t in range(a, b):
            for c in range(C):
                st2(out, t, c, np.float32(0))
            for i in range(K):  # input row t - (K - 1) + i; rows before `a` come from the state
                r = t - a - (K - 1) + i
                src = st[K - 1 + r] if r < 0 else x[a + r]
                w = wt[i]
                for c in range(C):
                    st2(out, t, c, ld2(out, t, c) + ld(src, c) * ld(w, c))
        n = b - a  # the state becomes the last K - 1 inputs
        if n >= K - 1:
            for i in range(K - 1):
                st[i, :] = x[b - (K - 1) + i]
        else:
            for i in range(K - 1 - n):
                st[i, :] = st[i + n]
            for i in range(n):
                st[K - 1 - n + i, :] = x[a + i]


def conv1d(x: np.ndarray, starts: np.ndarray, stops: np.ndarray, slots: np.ndarray,
           states: np.ndarray, wt: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out[t, c] = sum_i window[t + i, c] * w[c, i] over the segment's last K inputs (the state's
    K - 1 then x's), summed in ggml_ssm_conv's order; x, out float32 [n, C]; states float32
    [n_seq, K - 1, C], advanced in place; wt float32 [K, C] (the conv weight transposed)."""
    call_kernel(_conv1d, x, starts, stops, slots, states, wt, out)
    return out


def conv1d_reference(x, starts, stops, slots, states, wt) -> np.ndarray:
    """The numpy twin of conv1d (advances `states` the same way)."""
    K = wt.shape[0]
    out = np.empty_like(x)
    for a, b, slot in zip(starts, stops, slots):
        window = np.concatenate([states[slot], x[a:b]])  # [K - 1 + n, C]
        acc = np.zeros((b - a, x.shape[1]), np.float32)
        for i in range(K):
            acc += window[i : i + b - a] * wt[i]
        out[a:b] = acc
        states[slot] = window[len(window) - (K - 1):]
    return out


# -- the recurrent form ----------------------------------------------------------------------------


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=DELTA_FASTMATH)
def _delta_rule_recurrent(q, k, v, g, beta, starts, stops, slots, states, scale, out):
    n_seg, n_v_heads, d = starts.shape[0], v.shape[1], v.shape[2]
    n_k_heads = q.shape[1]
    # parallel over heads only: two segments of one sequence update the same state, so the
    # segments of a head run in row order (in parallel they raced)
    for h in prange(n_v_heads):
        hk = h % n_k_heads
        for sg in range(n_seg):
            st = states[slots[sg], h]  # [d_v (j), d_k (i)]
            for t in range(starts[sg], stops[sg]):
                decay = np.exp(g[t, h])
                b = beta[t, h]
                qt, kt = q[t, hk], k[t, hk]
                for j in range(d):
                    dot = np.float32(0)
                    for i in range(d):
                        dot += (ld2(st, j, i) * decay) * ld(kt, i)
                    delta = (v[t, h, j] - dot) * b
                    acc = np.float32(0)
                    for i in range(d):
                        s = ld2(st, j, i) * decay + delta * ld(kt, i)
                        st2(st, j, i, s)
                        acc += s * ld(qt, i)
                    out[t, h, j] = acc * scale


def delta_rule_recurrent(q, k, v, g, beta, starts, stops, slots, states, out) -> np.ndarray:
    """Token by token over each segment; states float32 [n_seq, n_v_heads, d, d] in place."""
    scale = np.float32(1.0 / np.sqrt(q.shape[2]))
    call_kernel(_delta_rule_recurrent, q, k, v, g, beta, starts, stops, slots, states, scale, out)
    return out


def delta_rule_reference(q, k, v, g, beta, state) -> np.ndarray:
    """The numpy twin: one sequence, token by token; state float32 [n_v_heads, d, d] in place."""
    n, n_v_heads, d = v.shape
    heads = np.arange(n_v_heads) % q.shape[1]
    out = np.empty_like(v)
    scale = np.float32(1.0 / np.sqrt(d))
    for t in range(n):
        state *= np.exp(g[t])[:, None, None]
        kt, qt = k[t, heads], q[t, heads]  # [n_v_heads, d]
        delta = (v[t] - np.einsum("hji,hi->hj", state, kt)) * beta[t][:, None]
        state += delta[:, :, None] * kt[:, None, :]
        out[t] = np.einsum("hji,hi->hj", state, qt) * scale
    return out


# -- the chunked form ------------------------------------------------------------------------------


@njit(parallel=True, cache=True, nogil=NOGIL)
def _unit_lower_inverse(a, out):
    n_mat, c = a.shape[0], a.shape[1]
    for m in prange(n_mat):
        inv = out[m]
        inv[:, :] = 0
        for t in range(c):  # row t of (I + L)^-1 = e_t - sum_{s < t} L[t, s] row s
            inv[t, t] = 1
            for s in range(t):
                coef = a[m, t, s]
                for r in range(s + 1):
                    inv[t, r] -= coef * inv[s, r]


def unit_lower_inverse(a: np.ndarray) -> np.ndarray:
    """(I + L)^-1 for L the strictly lower triangle of each a [..., c, c] (forward substitution,
    as ggml_solve_tri does for build_delta_net_chunking); float32 [..., c, c]."""
    flat = np.ascontiguousarray(a, np.float32).reshape(-1, *a.shape[-2:])
    out = np.empty_like(flat)
    call_kernel(_unit_lower_inverse, flat, out)
    return out.reshape(a.shape)


def unit_lower_inverse_reference(a: np.ndarray) -> np.ndarray:
    """The numpy twin of unit_lower_inverse."""
    c = a.shape[-1]
    return np.linalg.inv(np.eye(c, dtype=np.float64) + np.tril(a.astype(np.float64), -1))


def _by_chunk(x: np.ndarray, chunk: int) -> np.ndarray:
    """[n, H, ...] -> [H, n_chunks, chunk, ...], zero-padded to whole chunks."""
    n = x.shape[0]
    padded = np.zeros((-(-n // chunk) * chunk, *x.shape[1:]), x.dtype)
    padded[:n] = x
    return np.moveaxis(padded.reshape(-1, chunk, *x.shape[1:]), 2, 0)


def delta_rule_chunked(q, k, v, g, beta, state, out, chunk: int = CHUNK) -> np.ndarray:
    """One sequence, `chunk` tokens at a time (transformers' torch_chunk_gated_delta_rule, the
    state kept transposed); state float32 [n_v_heads, d, d] in place; out float32 [n, H_v, d].

    The log decays accumulate in float64, so exp(G_t - G_s) keeps its precision however much the
    chunk has decayed in all (float32 loses digits of the difference once |G| is in the 100s)."""
    n, n_v_heads, d = v.shape
    heads = np.arange(n_v_heads) % q.shape[1]
    scale = np.float32(1.0 / np.sqrt(d))
    qc = _by_chunk(q, chunk)[heads] * scale  # [H, n_chunks, C, d]
    kc = _by_chunk(k, chunk)[heads]
    vc = _by_chunk(v, chunk)
    bc = _by_chunk(beta, chunk)[..., None]  # [H, n_chunks, C, 1]; padding: beta 0, g 0
    G = np.cumsum(_by_chunk(g.astype(np.float64), chunk), axis=-1)  # [H, n_chunks, C]
    causal = np.tril(np.ones((chunk, chunk), bool))
    diff = np.where(causal, G[..., :, None] - G[..., None, :], -np.inf)
    decay = np.exp(diff).astype(np.float32)  # [H, n_chunks, C, C]: exp(G_t - G_s), s <= t
    kt = kc.swapaxes(-1, -2)
    kb = kc * bc
    inv = unit_lower_inverse((kb @ kt) * decay)  # (I + strictly_lower(beta_t k_t.k_s decay))^-1
    u = inv @ (vc * bc)  # the corrected values ("new_values")
    w = inv @ (kb * np.exp(G).astype(np.float32)[..., None])  # k_cumdecay
    qk = (qc @ kt) * decay  # intra-chunk attention, diagonal included
    qg = qc * np.exp(G).astype(np.float32)[..., None]
    g_last = G[..., -1]  # [H, n_chunks]
    kd = kc * np.exp(g_last[..., None] - G).astype(np.float32)[..., None]
    o = np.empty_like(vc)
    m = state  # [H, d_v, d_k] = S^T
    for c in range(G.shape[1]):
        s = m.swapaxes(-1, -2)  # S [H, d_k, d_v]
        v_new = u[:, c] - w[:, c] @ s
        o[:, c] = qg[:, c] @ s + qk[:, c] @ v_new
        m = m * np.exp(g_last[:, c]).astype(np.float32)[:, None, None] + \
            v_new.swapaxes(-1, -2) @ kd[:, c]
    state[...] = m
    out[...] = np.moveaxis(o, 0, 2).reshape(-1, n_v_heads, d)[:n]
    return out


# -- the per-head decay and write strength ---------------------------------------------------------


@njit(cache=True, nogil=NOGIL)
def _gates(alpha, beta_in, dt_bias, a, g, beta):
    n, n_v_heads = alpha.shape
    for t in range(n):
        for h in range(n_v_heads):
            z = alpha[t, h] + dt_bias[h]
            softplus = z if z > np.float32(20) else np.log1p(np.exp(z))
            g[t, h] = softplus * a[h]
            beta[t, h] = np.float32(1) / (np.float32(1) + np.exp(-beta_in[t, h]))


def gates(alpha: np.ndarray, beta_in: np.ndarray, dt_bias: np.ndarray,
          a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """g = softplus(alpha + dt_bias) * a (log decay; a = -exp(A_log)) and beta = sigmoid(beta_in),
    float32 [n, n_v_heads] each (build_layer_attn_linear; ggml_softplus is x itself above 20)."""
    g, beta = np.empty_like(alpha), np.empty_like(alpha)
    _gates(alpha, beta_in, dt_bias, a, g, beta)
    return g, beta


def gates_reference(alpha, beta_in, dt_bias, a) -> tuple[np.ndarray, np.ndarray]:
    """The numpy twin of gates."""
    z = alpha + dt_bias
    with np.errstate(over="ignore"):
        softplus = np.where(z > 20, z, np.log1p(np.exp(z))).astype(np.float32)
        return softplus * a, (1 / (1 + np.exp(-beta_in))).astype(np.float32)
