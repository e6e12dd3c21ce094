"""The AVX-512 VNNI prompt kernel (kernels/vnni.py) against `X @ dequantize(W)^T` in float64:
every type it takes, row counts off the 32-row tile, token counts off the 6-token tile, rows
longer than one K chunk, weights spread over several panels, and the int32 sums at their
worst-case weights and activations. The float types (F16, BF16) have their weights quantized
too, per block of 32, and the bounds take that step as well.

Two references per product. Against the exact product the error may be as large as the
activations' quantization allows: 0.5 * sum_k |W_rk| xs_tk, with xs the step of x_tk's block
(max |x| / qmax). Against the product with the activations quantized as the kernel does (its
numpy twin, `quantized`), only float32 rounding remains."""

from __future__ import annotations

import importlib

import numba
import numpy as np
import pytest

from llamacpy.format.constants import GGML_QUANT_SIZES, GGMLType
from llamacpy.kernels import vnni

from .test_matvec import FP16_FIELDS, reference, synth_blocks

mm = importlib.import_module("llamacpy.kernels.matmul")
pytestmark = pytest.mark.skipif(not vnni.AVAILABLE,
                                reason="this CPU has neither AVX-512 VNNI nor AVX2")
TYPES = [t.name for t in vnni.UNPACKERS]
EPS32 = 2.0**-24


def per_block(A: np.ndarray, block: int, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Each row of A rounded per `block` values onto a step of max |A| / bound, as the kernel's
    float32 arithmetic does it: (integers, each value's step) [rows, n], in float64."""
    rows, n = A.shape
    ab = A.astype(np.float32).reshape(rows, n // block, block)
    amax = np.abs(ab).max(-1, keepdims=True)
    bound = np.float32(bound)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, bound / amax, np.float32(0)).astype(np.float32)
    q = np.rint((ab * inv).astype(np.float32))
    step = np.broadcast_to(amax / bound, ab.shape).astype(np.float32)
    return q.reshape(rows, n).astype(np.float64), step.reshape(rows, n).astype(np.float64)


def quantized(X: np.ndarray, u: vnni.Unpacker) -> tuple[np.ndarray, np.ndarray]:
    """The numpy twin of `_quantize_activations`: (xq [T, n] integers, xs [T, n] the step of
    each value's block)."""
    return per_block(X, u.block, u.qmax)


def quantized_weights(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The numpy twin of `_ints_of_floats` for the float types (F16, BF16): (wq, ws) per block
    of 32 of each row."""
    return per_block(W, 32, vnni.FLOAT_WMAX)


def scale_parts(w: np.ndarray, name: str, n: int) -> np.ndarray:
    """|d q| + |m| per weight, float64 [rows, n]: the magnitudes the kernel's float sums see
    (for the types with mins, the block's fp16 min field zeroed, then its scale)."""
    if name not in ("Q4_K", "Q4_1"):
        return np.abs(reference(w, name, n))
    size = GGML_QUANT_SIZES[GGMLType[name]][1]
    parts = []
    for field in FP16_FIELDS[name]:
        z = w.reshape(w.shape[0], -1, size).copy()
        z[:, :, field : field + 2] = 0
        parts.append(np.abs(reference(z.reshape(w.shape), name, n)))
    return parts[0] + parts[1]


def check(out: np.ndarray, w: np.ndarray, name: str, X: np.ndarray) -> None:
    """out [T, rows] against both references, with the bounds of the module docstring."""
    n = X.shape[1]
    u = vnni.UNPACKERS[GGMLType[name]]
    W = reference(w, name, n)
    xq, xs = quantized(X, u)
    x64 = X.astype(np.float64)
    y = out.astype(np.float64)
    # float32 rounding: each block's sum converted and scaled, plus the float accumulation over
    # the blocks and min terms, relative to the magnitudes summed (a generous count of roundings)
    roundings = n // u.block * (1 + u.nsub) + 8
    float_err = roundings * EPS32 * (np.abs(x64) @ scale_parts(w, name, n).T)
    step_err = 0.5 * (xs @ np.abs(W).T)
    Wk = W  # the weights the kernel multiplies: the float types' become int16 per block of 32
    if GGMLType[name] in vnni.FLOAT_TYPES:
        wq, ws = quantized_weights(W)
        Wk = wq * ws
        step_err = 0.5 * (xs @ np.abs(Wk).T) + 0.5 * (np.abs(x64) @ ws.T)
    exact = x64 @ W.T
    err = np.abs(y - exact) / (step_err + float_err + 1e-30)
    assert err.max() <= 1.0, f"{name}: {err.max():.2f} x the quantization-step bound"
    twin = (xq * xs) @ Wk.T
    err = np.abs(y - twin) / (float_err + 1e-30)
    assert err.max() <= 1.0, f"{name}: {err.max():.2f} x the float-rounding bound"


def _run(name, rows, n, n_tok, seed=0):
    w = synth_blocks(name, rows, n, seed=seed)
    X = np.random.default_rng(seed + 1).standard_normal((n_tok, n)).astype(np.float32)
    out = np.full((n_tok, rows), np.nan, np.float32)
    vnni.vnni_matmul(w, GGMLType[name], X, out)
    check(out, w, name, X)
    return w, X, out


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("rows,n_tok", [(37, 7), (64, 30), (5, 1)])
def test_types_and_tile_edges(name, rows, n_tok):
    _run(name, rows, 512, n_tok)


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q8_0"])
@pytest.mark.parametrize("rows", [40, 64])  # through Y and a store pass; whole strips, direct
def test_rows_longer_than_a_k_chunk(name, rows):
    _run(name, rows, 3 * vnni.KC + 256, 13)  # three full chunks and a partial one


def per_thread(panel_bytes: int) -> int:
    """PANEL_BYTES for panels of panel_bytes at this process's thread count (it is per thread)."""
    return panel_bytes // max(1, numba.get_num_threads())


@pytest.mark.parametrize("rows", [150, 160])
def test_several_panels_the_last_partial(monkeypatch, rows):
    monkeypatch.setattr(vnni, "PANEL_BYTES", per_thread(2 * 512 * 64))  # 64-row panels
    _run("Q4_K", rows, 512, 9)


@pytest.mark.parametrize("name", ["Q4_K", "Q5_0", "Q6_K"])
@pytest.mark.parametrize("gated", [-1, 0, 1])
def test_direct_stores_are_the_store_pass_bit_for_bit(monkeypatch, name, gated):
    """Whole strips are written to out by the micro-kernel's last K chunk (with the gated FFN's
    activation applied there): the same bits as the pass over Y with elementwise's kernels, over
    several K chunks and panels and a token count off the 6-token tile."""
    monkeypatch.setattr(vnni, "PANEL_BYTES", per_thread(2 * 2048 * 64))  # 64-row panels
    w = synth_blocks(name, 128, 2048, seed=9)
    X = np.random.default_rng(10).standard_normal((23, 2048)).astype(np.float32)
    gate = np.random.default_rng(11).standard_normal((23, 128)).astype(np.float32) * 4
    got = {}
    for direct in (True, False):
        monkeypatch.setattr(vnni, "DIRECT_STORES", direct)
        got[direct] = gate.copy() if gated >= 0 else np.full((23, 128), np.nan, np.float32)
        vnni.vnni_matmul(w, GGMLType[name], X, got[direct], gated)
    assert np.array_equal(got[True], got[False])
    if gated < 0:
        check(got[True], w, name, X)


def test_direct_stores_need_unit_column_stride():
    """A column-strided out (a view) takes the store pass: the micro-kernel writes 16 floats in
    a row."""
    w = synth_blocks("Q8_0", 64, 512, seed=12)
    X = np.random.default_rng(13).standard_normal((7, 512)).astype(np.float32)
    wide = np.full((7, 128), np.nan, np.float32)
    vnni.vnni_matmul(w, GGMLType.Q8_0, X, wide[:, ::2])
    check(wide[:, ::2], w, "Q8_0", X)
    assert np.isnan(wide[:, 1::2]).all()


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q8_0"])
def test_activation_outliers(name):
    """One huge activation per 32 coarsens its whole block's step, no more than that."""
    w = synth_blocks(name, 33, 512, seed=3)
    X = np.random.default_rng(4).standard_normal((12, 512)).astype(np.float32)
    X[:, ::32] *= 1000
    out = np.empty((12, 33), np.float32)
    vnni.vnni_matmul(w, GGMLType[name], X, out)
    check(out, w, name, X)


def test_activation_bound_keeps_int32_sums():
    """qmax is the largest bound for which a block's worst-case sum fits in int32."""
    for ggml_type, u in vnni.UNPACKERS.items():
        assert u.block * u.wmax * u.qmax <= vnni.INT32_MAX, ggml_type.name
        assert u.qmax == 32767 or u.block * u.wmax * (u.qmax + 1) > vnni.INT32_MAX
    assert vnni.UNPACKERS[GGMLType.Q4_K].qmax == 8876  # blocks of 256, |q sc| <= 15 * 63
    assert vnni.UNPACKERS[GGMLType.Q6_K].qmax == 8191  # blocks of 64, |(q - 32) sc| <= 32 * 128


def worst_blocks(name: str, rows: int, n: int) -> np.ndarray:
    """Blocks whose every folded integer weight is at the type's largest magnitude: Q4_K q = 15
    with sub-block scale and min 63 (all 12 scale bytes 0xFF), Q6_K q - 32 = -32 with scale -128."""
    block, size = GGML_QUANT_SIZES[GGMLType[name]]
    b = np.zeros((rows, n // block, size), np.uint8)
    d = np.array([0.01], "<f2").view(np.uint8)
    if name == "Q4_K":
        b[:, :, 0:2] = d
        b[:, :, 2:4] = np.array([0.002], "<f2").view(np.uint8)
        b[:, :, 4:] = 0xFF  # scales / mins 63, quants 15
    else:  # Q6_K: ql, qh zero (q = 0), scales int8 -128, then d
        b[:, :, 192:208] = 0x80
        b[:, :, 208:210] = d
    return b.reshape(rows, -1)


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("sign", [1, -1])
def test_worst_case_sums_do_not_overflow(name, sign):
    """Every activation at +-qmax times every weight at its largest: each block's int32 sum is
    block * wmax * qmax (within 0.01% of 2^31 for Q4_K); one more would wrap and miss the
    reference by far more than the bound."""
    u = vnni.UNPACKERS[GGMLType[name]]
    w = worst_blocks(name, 40, 1024)
    X = np.full((7, 1024), sign, np.float32)
    xq, _ = quantized(X, u)
    assert np.abs(xq).max() == u.qmax
    out = np.empty((7, 40), np.float32)
    vnni.vnni_matmul(w, GGMLType[name], X, out)
    check(out, w, name, X)
    assert np.all(np.sign(out) == sign * np.sign(reference(w, name, 1024).sum(1)))


def test_matmul_takes_this_path_for_prompts():
    if not vnni.vnni_enabled():
        pytest.skip("LLAMACPY_VNNI=0")
    w, X, out = _run("Q4_K", 48, 512, 40)
    np.testing.assert_array_equal(mm.matmul(w, GGMLType.Q4_K, X), out)


@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_float_matrices_take_this_path_only_with_vnni(name):
    """F16 / BF16 prompts go through here on AVX-512 VNNI (timed faster than sgemm there) and
    keep sgemm on AVX2; rows must be whole blocks of 32."""
    assert vnni.vnni_supports(GGMLType[name], 64, 512) == vnni.HAS_VNNI
    assert not vnni.vnni_supports(GGMLType[name], 64, 520)
    if not (vnni.HAS_VNNI and vnni.vnni_enabled()):
        return
    w, X, out = _run(name, 40, 512, 48)  # past the few-token kernels (40)
    np.testing.assert_array_equal(mm.matmul(w, GGMLType[name], X), out)


@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "Q5_0"])
@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("rows", [96, 88, 77])  # direct; the store pass's 8-lane and 1-lane
def test_gated_store_is_the_activation_times_the_product(name, kind, rows):
    """With `gated`, the stores write act(gate) * (X @ W^T) into the gate array: what the plain
    GEMM followed by elementwise.gated_1d gives, bit for bit when rows are a multiple of 8 (both
    then take the 8-lane path for every value; a part strip of 24 here), else within float32
    the activations' own bound (the last strip's odd values take the scalar path elsewhere)."""
    from llamacpy.kernels.elementwise import gated_1d

    w = synth_blocks(name, rows, 512, seed=6)
    X = np.random.default_rng(7).standard_normal((9, 512)).astype(np.float32)
    gate = np.random.default_rng(8).standard_normal((9, rows)).astype(np.float32) * 4
    plain = np.empty((9, rows), np.float32)
    vnni.vnni_matmul(w, GGMLType[name], X, plain)
    check(plain, w, name, X)
    want = gate.copy()
    gated_1d(want.reshape(-1), plain.reshape(-1), kind)
    got = gate.copy()
    vnni.vnni_matmul(w, GGMLType[name], X, got, kind)
    if rows % 8 == 0:
        assert np.array_equal(got, want)
    else:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-30)  # exp: vectorised vs libm
