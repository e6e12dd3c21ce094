"""The int16-activation matvec kernels (Q8_0, Q5_0, IQ4_NL, Q4_1, Q4_K, Q6_K) and their SIMD values.

Beyond test_matvec.py's bound against the float64 product, these kernels must be exact in the
integer part: for activations that int16 blocks represent exactly, y agrees with
`dequantize(W) @ x` to float32 rounding; and the quantizer agrees bit for bit with its numpy twin.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from numba import njit

from llamacpy.format.constants import GGMLType
from llamacpy.kernels import matmul, matvec, simd
from llamacpy.kernels.repack import repack_as_q8_0, repack_q6_k_bytes
from llamacpy.kernels.matvec import BYTE_QMAX, quantize_byte_pairs_reference, quantize_i16_reference

from llamacpy.ops.linear import Linear

from .test_matvec import real_matrices, reference, synth_blocks

mv = importlib.import_module("llamacpy.kernels.matvec")  # the module, not the re-exported function
mm = importlib.import_module("llamacpy.kernels.matmul")

INTEGER_TYPES = ["Q8_0", "Q5_0", "IQ4_NL", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]
REPACKABLE = ["Q5_0", "IQ4_NL"]


@njit(cache=False)
def _quantize(x):
    return mv.quantize_i16(x)


def activations(n: int, seed: int) -> np.ndarray:
    """Normal values with a zero block, a tiny block, an outlier and an exact block maximum."""
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    x[32:64] = 0
    x[64:96] *= 1e-30
    x[100] = 4e4
    x[130] = -np.abs(x[128:160]).max()
    return x


def dequantized_activations(x: np.ndarray) -> np.ndarray:
    """float64 [n]: what the kernels multiply with, in natural order."""
    xq, xd = quantize_i16_reference(x)
    q = xq.reshape(-1, 2, 16).transpose(0, 2, 1).reshape(-1, 32)  # undo even/odd order
    return (q.astype(np.float64) * xd[:, None].astype(np.float64)).reshape(-1)


def test_quantize_i16_matches_numpy_twin():
    x = activations(1024, 0)
    xq, xd = _quantize(x)
    ref_q, ref_d = quantize_i16_reference(x)
    assert np.array_equal(xq, ref_q) and np.array_equal(xd, ref_d)
    assert np.abs(xq).max() == 32767
    err = np.abs(dequantized_activations(x) - x).reshape(-1, 32).max(axis=1)
    assert np.all(err <= 0.5001 * xd)  # round to nearest


def test_quantize_i16_nan_poisons_its_block_scale():
    x = activations(256, 1)
    x[40] = np.nan
    xq, xd = _quantize(x)
    assert np.isnan(xd[1]) and not np.isnan(np.delete(xd, 1)).any()


def representable_activations(n: int, seed: int) -> np.ndarray:
    """Integers times a power of two, each block reaching +-32767 of them: int16 blocks hold
    these exactly (scale 2^-e per block), so the only error left is float32 rounding."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-32767, 32768, n).reshape(-1, 32)
    q[:, rng.integers(0, 32)] = 32767 * rng.choice([-1, 1], q.shape[0])
    scale = 2.0 ** rng.integers(-20, 4, (q.shape[0], 1))
    return (q * scale).astype(np.float32).reshape(-1)


def representable_byte_pair_activations(n: int, seed: int) -> np.ndarray:
    """The same for the byte-pair kernels' int16 blocks of 256, which reach +-BYTE_QMAX."""
    rng = np.random.default_rng(seed)
    top = int(BYTE_QMAX)
    q = rng.integers(-top, top + 1, n).reshape(-1, 256)
    q[:, rng.integers(0, 256)] = top * rng.choice([-1, 1], q.shape[0])
    scale = 2.0 ** rng.integers(-20, 4, (q.shape[0], 1))
    return (q * scale).astype(np.float32).reshape(-1)


BYTE_PAIR_KERNELS = ("matvec_q4_k_zmm", "matvec_q6_k_zmm")


def exact_activations(kernel_name: str, n: int, seed: int) -> np.ndarray:
    """Activations the kernel's quantizer holds exactly: int16 per 256 split into bytes for the
    byte-pair kernels, int16 per 32 for the others."""
    if kernel_name in BYTE_PAIR_KERNELS:
        return representable_byte_pair_activations(n, seed)
    return representable_activations(n, seed)


@njit(cache=False)
def _quantize_byte_pairs(x, nibble_order):
    return mv.quantize_byte_pairs(x, nibble_order)


@pytest.mark.parametrize("nibble_order", [False, True])
def test_quantize_byte_pairs_matches_numpy_twin(nibble_order):
    x = activations(1024, 3)
    got = _quantize_byte_pairs(x, nibble_order)
    ref = quantize_byte_pairs_reference(x, nibble_order)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    low, high = (v.view(np.int8).astype(np.int32) for v in got[:2])
    q = 256 * high + low
    assert np.abs(q).max() == BYTE_QMAX and low.min() >= -128 and low.max() <= 127
    if not nibble_order:  # natural order: q * xd is x to within half a step
        err = np.abs(q.reshape(-1, 256) * got[2][:, None].astype(np.float64) - x.reshape(-1, 256))
        assert np.all(err.max(axis=1) <= 0.5001 * got[2])


def test_quantize_byte_pairs_nan_poisons_its_block_scale():
    x = activations(768, 4)
    x[300] = np.nan
    xd = _quantize_byte_pairs(x, True)[2]
    assert np.isnan(xd[1]) and not np.isnan(xd[[0, 2]]).any()


@pytest.mark.parametrize("kernel", BYTE_PAIR_KERNELS)
def test_byte_pair_kernels_do_not_saturate(kernel):
    """Every weight and scale at its largest magnitude, every activation at +-BYTE_QMAX: the
    byte products' pair sums stay within vpmaddubsw's int16, the int32 sums exact."""
    name = "_".join(kernel.split("_")[1:3]).upper()
    rows, n = 3, 512
    w = synth_blocks(name, rows, n, seed=5).reshape(rows, n // 256, -1)
    if name == "Q4_K":
        w[:, :, 4:16] = 0xFF  # scales and mins 63
        w[:, :, 16:] = 0xFF  # nibbles 15
    else:
        w[:, :, :192] = 0xFF  # q = 63
        w[:, :, 192:208] = 0x80  # scales -128
    w = w.reshape(rows, -1)
    x = np.where(np.arange(n) % 3 == 0, -1.0, 1.0).astype(np.float32) * BYTE_QMAX / 1024
    W = reference(w, name, n)
    y = np.empty(rows, np.float32)
    getattr(mv, kernel)(w, x, y)
    bound = np.abs(W) @ np.abs(x.astype(np.float64))
    assert np.all(np.abs(y - W @ x.astype(np.float64)) <= 2e-6 * bound)


@pytest.mark.parametrize("name", INTEGER_TYPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 37])
def test_exact_in_representable_activations(name, rows):
    n = 512
    w = synth_blocks(name, rows, n, seed=rows)
    kernel = mv.MATVEC_KERNELS[GGMLType[name]].__name__
    x = exact_activations(kernel, n, rows)
    if kernel not in BYTE_PAIR_KERNELS:
        assert np.array_equal(dequantized_activations(x), x)
    W = reference(w, name, n)
    y = matvec(w, GGMLType[name], x)
    bound = np.abs(W) @ np.abs(x.astype(np.float64))
    assert np.all(np.abs(y - W @ x.astype(np.float64)) <= 2e-6 * bound)


@pytest.mark.parametrize("kernel", ["matvec_q4_k", "matvec_q4_k_zmm", "matvec_q6_k", "matvec_q6_k_zmm"])
@pytest.mark.parametrize("rows", [1, 3, 37])
def test_k_quant_kernels_both_widths(kernel, rows):
    """The ymm Q4_K / Q6_K kernels (every AVX2 CPU) and the zmm ones (AVX-512BW, byte pairs;
    elsewhere LLVM splits their vectors, still correct) all exact in activations their quantizer
    represents, whichever matvec picks."""
    n, name = 768, "_".join(kernel.split("_")[1:3]).upper()
    w = synth_blocks(name, rows, n, seed=rows + 7)
    x = exact_activations(kernel, n, rows + 7)
    W = reference(w, name, n)
    y = np.empty(rows, np.float32)
    getattr(mv, kernel)(w, x, y)
    bound = np.abs(W) @ np.abs(x.astype(np.float64))
    assert np.all(np.abs(y - W @ x.astype(np.float64)) <= 2e-6 * bound)


@pytest.mark.parametrize("name", ["Q8_0", "Q5_0", "IQ4_NL", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("rows", [1, 2, 5, 38])
def test_scaled_row_kernels_both_widths_bit_identical(name, rows):
    """Two rows per 512-bit vector give the ymm kernel's integer lanes, scales and sums: the
    same float32 results bit for bit (so a Q5_0 / IQ4_NL matrix still equals its Q8_0 repack
    on either width), row counts that leave a pair or a group short included."""
    n = 512
    w = synth_blocks(name, rows, n, seed=rows + 11)
    x = activations(n, rows)
    ymm, zmm = np.empty(rows, np.float32), np.empty(rows, np.float32)
    getattr(mv, f"matvec_{name.lower()}")(w, x, ymm)
    getattr(mv, f"matvec_{name.lower()}_zmm")(w, x, zmm)
    assert np.array_equal(ymm, zmm)
    if name != "Q4_1":  # its min terms use x itself (test_exact_in_... covers Q4_1's bound)
        W = reference(w, name, n)
        bound = np.abs(W) @ np.abs(x.astype(np.float64))
        assert np.all(np.abs(zmm - W @ dequantized_activations(x)) <= 2e-6 * bound)


@pytest.mark.parametrize("name", INTEGER_TYPES)
@pytest.mark.parametrize("n_tokens", [2, 3, 4, 5])
def test_several_tokens_exact_in_representable_activations(name, n_tokens):
    """The multi-token kernels quantize each token's blocks as quantize_i16 does (here exactly),
    whatever their place in the pairs of tokens; K-quants with one scale per 256 where the
    one-token kernels do (AVX-512BW: matmul._per_256)."""
    n = 512
    w = synth_blocks(name, 37, n, seed=n_tokens)
    per_256 = mm.HAS_AVX512BW and name in ("Q4_K", "Q6_K")
    exact = representable_byte_pair_activations if per_256 else representable_activations
    X = np.stack([exact(n, 10 * n_tokens + t) for t in range(n_tokens)])
    W = reference(w, name, n)
    Y = matmul(w, GGMLType[name], X)
    bound = np.abs(X.astype(np.float64)) @ np.abs(W).T
    assert np.all(np.abs(Y - X.astype(np.float64) @ W.T) <= 2e-6 * bound)


@pytest.mark.parametrize("name", INTEGER_TYPES)
@pytest.mark.parametrize("n_tokens", [2, 3, 4, 5, 8, 9, 13])
def test_zmm_multi_kernels_bit_identical_to_ymm(name, n_tokens):
    """Four tokens a 512-bit vector, two rows and two quads a pass, give the ymm kernel's integer
    lanes and float sums in the same order: the same results bit for bit, whichever kernel
    matmul() picks, with an odd row count and quads left part-filled (on a CPU without
    AVX-512BW LLVM splits the vectors; still the same numbers)."""
    n, rows = 512, 37
    w = mm.weight_view(synth_blocks(name, rows, n, seed=n_tokens + 3), GGMLType[name])
    X = activations(n * n_tokens, n_tokens).reshape(n_tokens, n)
    ymm = np.full((n_tokens, rows), np.nan, np.float32)
    zmm = ymm.copy()
    getattr(mm, f"multi_{name.lower()}")(w, X, ymm, 2)
    getattr(mm, f"multi_{name.lower()}_zmm")(w, X, zmm, 2)
    assert np.isfinite(ymm).all() and np.array_equal(ymm, zmm)


def test_matmul_picks_the_zmm_kernel_by_token_count():
    if not simd.HAS_AVX512BW:
        assert mm.ZMM_KERNELS == {} and mm.multi_kernel(GGMLType.Q8_0, 8) is mm.multi_q8_0
        return
    for t, (zmm, start) in mm.ZMM_KERNELS.items():
        assert mm.multi_kernel(t, start) is zmm
        assert mm.multi_kernel(t, start - 1) is mm.MULTI_KERNELS[t]


@pytest.mark.parametrize("name", INTEGER_TYPES)
def test_nan_in_one_token_gives_nan_in_its_outputs_only(name):
    w = synth_blocks(name, 6, 256)
    X = activations(3 * 256, 3).reshape(3, 256)
    X[1, 7] = np.nan
    Y = matmul(w, GGMLType[name], X)
    assert np.isnan(Y[1]).all() and np.isfinite(Y[[0, 2]]).all()


@pytest.mark.parametrize("name", INTEGER_TYPES)
def test_nan_activation_gives_nan(name):
    w = synth_blocks(name, 6, 256)
    x = activations(256, 2)
    x[7] = np.nan
    assert np.isnan(matvec(w, GGMLType[name], x)).all()


@pytest.mark.parametrize("name", REPACKABLE)
@pytest.mark.parametrize("n_tokens", [1, 2, 3, 4, 5, 8])
def test_direct_kernels_match_the_q8_0_repack(name, n_tokens):
    """Q5_0 / IQ4_NL read in place give the floats of their Q8_0 repack: exactly for one token
    (the same integers per lane, the same scales), and to float32 rounding for several, where
    the Q8_0 kernel groups a block's products into lanes in byte order (the block sums are the
    same integers): turning repacking off changes no one-token decode step at all."""
    w = synth_blocks(name, 37, 512, seed=n_tokens)
    packed = repack_as_q8_0(w, GGMLType[name])
    X = activations(512 * n_tokens, n_tokens).reshape(n_tokens, 512)
    assert_same_up_to_rounding(matmul(w, GGMLType[name], X), matmul(packed, GGMLType.Q8_0, X),
                               name)


def assert_same_up_to_rounding(direct: np.ndarray, packed: np.ndarray, label: str) -> None:
    if direct.shape[0] == 1:
        assert np.array_equal(direct, packed), label
    else:  # eight int32 lanes per block converted separately: a few ulps of the row's size
        assert np.abs(direct - packed).max() <= 1e-6 * np.abs(packed).max(), label


@pytest.mark.slow
def test_direct_kernels_match_the_repack_on_real_tensors(real_models):
    seen = set()
    for label, t, rows in real_matrices(real_models, max_rows=256):
        if t.ggml_type.name not in REPACKABLE:
            continue
        seen.add(t.ggml_type.name)
        w = t.blocks()[rows]
        packed = repack_as_q8_0(w, t.ggml_type)
        for n_tok in (1, 4):
            X = activations(t.ne[0] * n_tok, n_tok).reshape(n_tok, -1)
            assert_same_up_to_rounding(matmul(w, t.ggml_type, X),
                                       matmul(packed, GGMLType.Q8_0, X), label)
    assert "Q5_0" in seen


def dequantize_q6_k_bytes(packed: np.ndarray) -> np.ndarray:
    """The weights of a repack_q6_k_bytes matrix, as the Q6_K reference computes them."""
    rows, nb = packed.shape[0], packed.shape[1] // 40
    q = packed[:, : 32 * nb].view(np.int8).reshape(rows, 2 * nb, 16).astype(np.float32)
    sc = packed[:, 32 * nb : 36 * nb].copy().view(np.int16).reshape(rows, 2 * nb, 1)
    d = packed[:, 36 * nb :].copy().view(np.float32).repeat(2, axis=1)[:, :, None]
    return ((d * sc.astype(np.float32)) * q).reshape(rows, -1)


def test_q6_k_bytes_repack_holds_the_same_weights():
    w = synth_blocks("Q6_K", 37, 1024, seed=4)
    packed = repack_q6_k_bytes(w)
    assert packed.shape == (37, 40 * 32)
    assert np.array_equal(dequantize_q6_k_bytes(packed), reference(w, "Q6_K", 1024))


@pytest.mark.parametrize("n_tokens", [2, 3, 4, 5, 8])
def test_q6_k_bytes_kernel_matches_the_direct_one(n_tokens):
    """The same integer products per block as multi_q6_k, grouped into lanes in byte order."""
    w = synth_blocks("Q6_K", 37, 512, seed=n_tokens)
    X = activations(512 * n_tokens, n_tokens).reshape(n_tokens, 512)
    Y = np.full((n_tokens, 37), np.nan, np.float32)
    mm.multi_q6_k_bytes(repack_q6_k_bytes(w), X, Y, 1)
    direct = np.empty_like(Y)
    mm.multi_q6_k(mm.weight_view(w, GGMLType.Q6_K), X, direct, 1)
    assert_same_up_to_rounding(Y, direct, "Q6_K bytes")


def test_linear_reads_the_q6_k_bytes_for_few_tokens_only():
    """A repacking Linear without AVX-512BW: one token from the file's Q6_K blocks (bit for bit
    what a plain Linear gives), a few tokens from the bytes copy. With it there is no copy:
    kernels/kquant_tokens.py reads the file's blocks faster."""
    tensor = FakeTensor(synth_blocks("Q6_K", 37, 512, seed=9), GGMLType.Q6_K, 512)
    plain, packed = Linear(tensor), Linear(tensor, repack_q8_0=True)
    copied = packed.weight is not packed._multi_weight
    assert copied != simd.HAS_AVX512BW and packed.ggml_type == GGMLType.Q6_K
    X = activations(512 * 4, 4).reshape(4, 512)
    assert np.array_equal(packed(X[0]), plain(X[0]))
    assert_same_up_to_rounding(packed(X), plain(X), "Linear Q6_K")


class FakeTensor:
    """What Linear reads of a GGUFTensor."""

    def __init__(self, blocks: np.ndarray, ggml_type: GGMLType, n: int):
        self.name, self.ggml_type, self._blocks = "w", ggml_type, blocks
        self.ne = (n, blocks.shape[0])

    def blocks(self) -> np.ndarray:
        return self._blocks


# -------------------------------------------------------------------------- the SIMD values


@njit(cache=False)
def _madd(a, b, out):
    out[:] = 0
    p = simd.madd(simd.load_i16(a, 0), simd.load_i16(b, 0))
    s = simd.fma_vec(p, simd.load_f32(np.ones(8, np.float32), 0), simd.f32x8_zero())
    t = simd.f32x8_mul(s, np.float32(1))
    for k in range(8):
        out[k] = simd.f32x8_sum(simd.f32x8_mul(t, simd.load_f32(np.eye(8, dtype=np.float32)[k], 0)))


@pytest.mark.parametrize("avx2", [True, False])
def test_madd_pairs_products(monkeypatch, avx2):
    """vpmaddwd's semantics, from the x86 instruction and from the portable IR pattern."""
    monkeypatch.setattr(simd, "HAS_AVX2", avx2 and simd.HAS_AVX2)
    fn = njit(cache=False)(_madd.py_func)  # a fresh compile sees the patched flag
    rng = np.random.default_rng(3)
    a = rng.integers(-32767, 32768, 16).astype(np.int16)
    b = rng.integers(-32767, 32768, 16).astype(np.int16)
    out = np.empty(8, np.float32)
    fn(a, b, out)
    prod = a.astype(np.int64) * b.astype(np.int64)
    assert np.array_equal(out, (prod[0::2] + prod[1::2]).astype(np.float32))


@pytest.mark.parametrize("avx512", [True, False])
def test_madd_zmm_pairs_products(monkeypatch, avx512):
    """The zmm vpmaddwd, from the instruction and from the portable IR pattern; fma_lane_pair
    scales the two halves by their own lanes; f32x16_sum adds all sixteen."""
    monkeypatch.setattr(simd, "HAS_AVX512BW", avx512 and simd.HAS_AVX512BW)
    fn = njit(cache=False)(_madd_zmm.py_func)  # a fresh compile sees the patched flag
    rng = np.random.default_rng(5)
    a = rng.integers(-32767, 32768, 32).astype(np.int16)
    b = rng.integers(-32767, 32768, 32).astype(np.int16)
    scale = np.arange(1, 9, dtype=np.float32)
    out = np.empty(17, np.float32)
    fn(a, b, scale, out)
    prod = a.astype(np.int64) * b.astype(np.int64)
    want = (prod[0::2] + prod[1::2]) * np.repeat([scale[2], scale[5]], 8)
    np.testing.assert_allclose(out[:16], want, rtol=1e-6)
    assert abs(out[16] - want.sum()) <= 1e-6 * np.abs(want).sum()  # float32 sums of ~1e9 terms


@njit(cache=False)
def _dpwssd_both(acc8, acc16, a, b, out8, out16):
    simd.store_f32(out8, 0, simd.fma_vec(simd.dpwssd(simd.load_i32(acc8, 0), simd.load_i16(a, 0),
                                                     simd.load_i16(b, 0)),
                                         simd.load_f32(np.ones(8, np.float32), 0),
                                         simd.f32x8_zero()))
    p = simd.dpwssd(simd.concat(simd.load_i32(acc16, 0), simd.load_i32(acc16, 8)),
                    simd.load_i16x32(a, 0), simd.load_i16x32(b, 0))
    simd.store_f32(out16, 0, simd.fma_vec(p, simd.concat(simd.load_f32(np.ones(8, np.float32), 0),
                                                         simd.load_f32(np.ones(8, np.float32), 0)),
                                          simd.f32x16_zero()))


@pytest.mark.parametrize("native", [True, False])
def test_dpwssd_adds_the_pair_sums(monkeypatch, native):
    """vpdpwssd (AVX-512 VNNI) and its vpmaddwd + vpaddd stand-in give acc + the pair sums."""
    for flag in ("HAS_VNNI", "HAS_VNNI_YMM"):
        monkeypatch.setattr(simd, flag, native and getattr(simd, flag))
    fn = njit(cache=False)(_dpwssd_both.py_func)
    rng = np.random.default_rng(8)
    a = rng.integers(-32767, 32768, 32).astype(np.int16)
    b = rng.integers(-32767, 32768, 32).astype(np.int16)
    acc = rng.integers(-2**20, 2**20, 16).astype(np.int32)
    out8, out16 = np.empty(8, np.float32), np.empty(16, np.float32)
    fn(acc[:8].copy(), acc, a, b, out8, out16)
    prod = a.astype(np.int64) * b.astype(np.int64)
    want = acc + prod[0::2] + prod[1::2]
    assert np.array_equal(out16, want.astype(np.float32))
    assert np.array_equal(out8, want[:8].astype(np.float32))


@njit(cache=False)
def _madd_zmm(a, b, scale, out):
    p = simd.fma_lane_pair(simd.madd(simd.load_i16x32(a, 0), simd.load_i16x32(b, 0)),
                           simd.load_f32(scale, 0), 2, 5, simd.f32x16_zero())
    simd.store_f32(out, 0, p)
    out[16] = simd.f32x16_sum(p)


@njit(cache=False)
def _fields(w, out):
    lo, hi = simd.f16_pair(w, 0, 0)
    out[0], out[1] = lo, hi
    u = simd.bytes_f32(simd.load_u32(w, 0, 4), simd.load_u32(w, 0, 8))
    s = simd.sbytes_f32(simd.load_u32(w, 0, 4), simd.load_u32(w, 0, 8))
    rows = simd.f16_rows(w, 0, 1, 1, 0, 0)
    pairs = simd.lane_pairs(u, 2)
    for k in range(8):
        e = simd.load_f32(np.eye(8, dtype=np.float32)[k], 0)
        out[2 + k] = simd.f32x8_sum(simd.f32x8_mul(u, e))
        out[10 + k] = simd.f32x8_sum(simd.f32x8_mul(s, e))
        out[18 + k] = simd.f32x8_sum(simd.f32x8_mul(rows, e))
        out[26 + k] = simd.f32x8_sum(simd.f32x8_mul(pairs, e))


def test_field_loads():
    w = np.zeros((2, 16), np.uint8)
    w[0, :4] = np.array([1.5, -2.25], "<f2").view(np.uint8)
    w[1, :2] = np.array([3.0], "<f2").view(np.uint8)
    w[0, 4:12] = [0, 1, 2, 127, 128, 200, 254, 255]
    out = np.empty(34, np.float32)
    _fields(w, out)
    b = w[0, 4:12]
    assert out[:2].tolist() == [1.5, -2.25]
    assert np.array_equal(out[2:10], b.astype(np.float32))
    assert np.array_equal(out[10:18], b.view(np.int8).astype(np.float32))
    assert out[18:26].tolist() == [1.5, 3.0, 3.0, 1.5, 0, 0, 0, 0]
    assert out[26:34].tolist() == [b[4]] * 4 + [b[5]] * 4


@njit(cache=False)
def _bytes(w, table, out):
    simd.store_i16(out, 0, simd.load_nibbles(w, 0, 0))
    simd.store_i16(out, 16, simd.bit_bytes(w, 0, 16, 0x10, 0xF0))
    simd.store_i16(out, 32, simd.shuffle_bytes(table, simd.load_nibbles(w, 0, 0)))


@pytest.mark.parametrize("avx2", [True, False])
def test_nibble_bit_and_table_bytes(monkeypatch, avx2):
    """load_nibbles, bit_bytes and shuffle_bytes (vpshufb and its portable fallback) against
    numpy: byte p of each result belongs to quant p of a 32-weight block."""
    monkeypatch.setattr(simd, "HAS_AVX2", avx2 and simd.HAS_AVX2)
    fn = njit(cache=False)(_bytes.py_func)
    rng = np.random.default_rng(5)
    w = rng.integers(0, 256, (1, 20), dtype=np.uint8)
    table = rng.integers(-128, 128, 16).astype(np.int8)
    out = np.empty(48, np.int16)
    fn(w, table, out)
    got = out.view(np.uint8).reshape(3, 32)
    nibbles = np.concatenate([w[0, :16] & 15, w[0, :16] >> 4])
    bits = (int.from_bytes(w[0, 16:20].tobytes(), "little") >> np.arange(32)) & 1
    assert np.array_equal(got[0], nibbles)
    assert np.array_equal(got[1], np.where(bits == 1, 0x10, 0xF0))
    assert np.array_equal(got[2], table.view(np.uint8)[nibbles])


@pytest.mark.parametrize("n_tokens", [1, 3, 40])
@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "Q6_K"])
def test_linear_gated_is_the_activation_times_the_projection(name, n_tokens):
    """Linear.gated (a gated FFN's up projection): silu(gate) * up(x) written into the gate,
    bit for bit what the activation and a multiply give, for one token, a few and a prompt's
    count (the integer GEMM's stores where the CPU has one); a gate it cannot write is refused."""
    from llamacpy.ops.activations import silu

    tensor = FakeTensor(synth_blocks(name, 64, 512, seed=10), GGMLType[name], 512)
    up = Linear(tensor)
    X = activations(512 * n_tokens, 11).reshape(n_tokens, 512)
    gate = np.random.default_rng(12).standard_normal((n_tokens, 64)).astype(np.float32) * 3
    want = silu(gate) * up(X)
    got = gate.copy()
    assert up.gated(X, got, 0) is got
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="gate must be"):
        up.gated(X, np.zeros((n_tokens, 128), np.float32)[:, ::2], 0)
