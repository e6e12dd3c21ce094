"""Reference quantizers for Q2_K..Q6_K, IQ4_NL and IQ4_XS, byte-identical to llama.cpp.

Each function writes what `ggml_quantize_chunk(type, ..., imatrix=NULL)` writes: the
`quantize_row_q*_K_ref` functions and `quantize_iq4_nl`/`quantize_iq4_xs` (ggml-quants.c).
The C code is sequential float32 arithmetic, so this is too: numba without fastmath, every
intermediate float32 (`F(...)` on every int->float conversion, as C converts), sums in C order.

Speed comes from independence, never from reordering a sum: the per-group scale searches
(make_qkx2_quants, make_qx_quants, the IQ4 search) run as `*_lanes` functions over many groups at
once, one group per column, each column doing exactly the C's operations; the plain per-group
ports stay beside them as twins the tests compare against. Groups of GROUP blocks run in
parallel (prange).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

F = np.float32
I = np.int64  # I(15) passes a plain int64: shared helpers compile once, not per literal value
GROUP_MAX_EPS = F(1e-15)  # ggml-quants.c GROUP_MAX_EPS
GROUP = 16  # blocks per parallel work item (and per make_qkx2_quants_lanes call)

# kvalues_iq4nl (ggml-common.h) as float32: best_index_int8 compares floats with these
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                      dtype=np.float32)

jit = njit(cache=True, error_model="numpy")  # numpy model: x/0 gives inf/nan as in C, no raise
pjit = njit(cache=True, error_model="numpy", parallel=True)
ijit = njit(cache=True, error_model="numpy", inline="always")  # tiny helpers used in hot loops


# ---------------------------------------------------------------- bit-level helpers


@intrinsic
def _f32_bits(typingctx, x):
    """The bits of a float32 as int32 (C's memcpy pun); refuses float64 to catch promotions."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _bits_f32(typingctx, u):
    """The float32 whose bits are the uint32 u."""
    if u != types.uint32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.uint32), codegen


@intrinsic
def _nearest_f32(typingctx, x):
    """float32(nearest_int(x)) in 32-bit integer ops only, so that loops over it vectorize."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        val = builder.fadd(args[0], ir.Constant(ir.FloatType(), 12582912.0))
        bits = builder.and_(builder.bitcast(val, i32), ir.Constant(i32, 0x007FFFFF))
        return builder.sitofp(builder.sub(bits, ir.Constant(i32, 0x00400000)), ir.FloatType())

    return types.float32(types.float32), codegen


@ijit
def nearest_int(fval):
    # ggml-quants.c nearest_int: the 1.5*2^23 trick, round half to even for |fval| < 2^22
    val = fval + F(12582912.0)
    return (np.int64(_f32_bits(val)) & 0x007FFFFF) - 0x00400000


@jit
def fp32_to_fp16(f):
    # ggml_compute_fp32_to_fp16 (ggml-impl.h), bit for bit; returns the half's bits as int64
    base = (abs(f) * F(2.0**112)) * F(2.0**-110)
    w = np.int64(_f32_bits(f)) & 0xFFFFFFFF
    shl1_w = (w + w) & 0xFFFFFFFF
    sign = w & 0x80000000
    bias = shl1_w & 0xFF000000
    if bias < 0x71000000:
        bias = 0x71000000
    base = _bits_f32(np.uint32((bias >> 1) + 0x07800000)) + base
    bits = np.int64(_f32_bits(base)) & 0xFFFFFFFF
    nonsign = ((bits >> 13) & 0x7C00) + (bits & 0x0FFF)
    return ((sign >> 16) | (0x7E00 if shl1_w > 0xFF000000 else nonsign)) & 0xFFFF


@jit
def fp16_to_fp32(h):
    # exact, like ggml_compute_fp16_to_fp32
    exp, mant = (h >> 10) & 0x1F, h & 0x3FF
    if exp == 0:
        v = F(mant) * F(2.0**-24)
        return -v if h & 0x8000 else v
    sign = (h & 0x8000) << 16
    e32 = 0xFF if exp == 31 else exp + 112
    return _bits_f32(np.uint32(sign | (e32 << 23) | (mant << 13)))


@jit
def _put_f16(y, off, f):
    """Store GGML_FP32_TO_FP16(f) little-endian at y[off]; return its float32 value."""
    h = fp32_to_fp16(f)
    y[off] = h & 0xFF
    y[off + 1] = h >> 8
    return fp16_to_fp32(h)


@ijit
def _clamp(v, lo, hi):
    return max(lo, min(hi, v))


@jit
def _pack_crumbs(L, qs):
    """Four 2-bit values per byte, 32 apart (quantize_row_q2_K_ref / q3_K packing)."""
    for j in range(0, 256, 128):
        for i in range(32):
            qs[j // 4 + i] = (L[j + i] | (L[j + i + 32] << 2) | (L[j + i + 64] << 4)
                              | (L[j + i + 96] << 6))


# ---------------------------------------------------------------- ggml-quants.c helpers


@jit
def make_qx_quants_rmse1(nmax, x, L):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL): weights x*x, 18 trial scales."""
    n = x.size
    mx = F(0)
    amax = F(0)
    for i in range(n):
        ax = abs(x[i])
        if ax > amax:
            amax = ax
            mx = x[i]
    if amax < GROUP_MAX_EPS:
        L[:n] = 0
        return F(0)
    iscale = F(-nmax) / mx
    sumlx = F(0)
    suml2 = F(0)
    for i in range(n):
        l = _clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
        L[i] = l + nmax
        w = x[i] * x[i]
        sumlx += w * x[i] * F(l)
        suml2 += w * F(l) * F(l)
    scale = sumlx / suml2 if suml2 != 0 else F(0)
    best = scale * sumlx
    for is_ in range(-9, 10):
        if is_ == 0:
            continue
        iscale = -(F(nmax) + F(0.1) * F(is_)) / mx
        sumlx = F(0)
        suml2 = F(0)
        for i in range(n):
            fl = F(_clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1))
            w = x[i] * x[i]
            sumlx += w * x[i] * fl
            suml2 += w * fl * fl
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            for i in range(n):
                L[i] = nmax + _clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
            scale = sumlx / suml2
            best = scale * sumlx
    return scale


@jit
def make_qx_quants_lanes(nmax, X, L, scales):
    """make_qx_quants_rmse1 on the columns of X at once: X, L float32 [n, lanes], scales [lanes].

    The 18 trial scales only meet in the comparison with `best`, so each trial runs on all
    columns side by side; a column whose trial wins gets its quants recomputed, as in the C.
    """
    n, lanes = X.shape
    st = np.empty((7, lanes), np.float32)
    amax, mx, iscale, sumlx, suml2, scale, best = st[0], st[1], st[2], st[3], st[4], st[5], st[6]
    lo, hi = F(-nmax), F(nmax - 1)
    for k in range(lanes):
        amax[k] = F(0)
        mx[k] = F(0)
        for i in range(n):
            ax = abs(X[i, k])
            if ax > amax[k]:
                amax[k] = ax
                mx[k] = X[i, k]
        iscale[k] = F(-nmax) / mx[k]
    _qx_sums(X, iscale, lo, hi, sumlx, suml2)
    for k in range(lanes):
        for i in range(n):
            L[i, k] = max(lo, min(hi, _nearest_f32(iscale[k] * X[i, k]))) + F(nmax)
        scale[k] = sumlx[k] / suml2[k] if suml2[k] != 0 else F(0)
        best[k] = scale[k] * sumlx[k]
    for is_ in range(-9, 10):
        if is_ == 0:
            continue
        for k in range(lanes):
            iscale[k] = -(F(nmax) + F(0.1) * F(is_)) / mx[k]
        _qx_sums(X, iscale, lo, hi, sumlx, suml2)
        for k in range(lanes):
            if suml2[k] > 0 and sumlx[k] * sumlx[k] > best[k] * suml2[k]:
                for i in range(n):
                    L[i, k] = max(lo, min(hi, _nearest_f32(iscale[k] * X[i, k]))) + F(nmax)
                scale[k] = sumlx[k] / suml2[k]
                best[k] = scale[k] * sumlx[k]
    for k in range(lanes):
        if amax[k] < GROUP_MAX_EPS:  # all zero: make_qx_quants returns early
            L[:, k] = 0
            scale[k] = F(0)
        scales[k] = scale[k]


@jit
def _qx_sums(X, iscale, lo, hi, sumlx, suml2):
    """One trial of make_qx_quants (rmse_type 1) per column: sum w*x*l and w*l*l, w = x*x."""
    n, lanes = X.shape
    sumlx[:] = 0
    suml2[:] = 0
    for i in range(n):
        for k in range(lanes):
            x = X[i, k]
            fl = max(lo, min(hi, _nearest_f32(iscale[k] * x)))
            w = x * x
            sumlx[k] += w * x * fl
            suml2[k] += w * fl * fl


@jit
def make_q3_quants(nmax, x, L):
    """make_q3_quants(n, nmax, x, L, do_rmse=true): greedy per-weight refinement, up to 5 passes."""
    n = x.size
    mx = F(0)
    amax = F(0)
    for i in range(n):
        ax = abs(x[i])
        if ax > amax:
            amax = ax
            mx = x[i]
    if amax < GROUP_MAX_EPS:
        L[:n] = 0
        return F(0)
    iscale = F(-nmax) / mx
    sumlx = F(0)
    suml2 = F(0)
    for i in range(n):
        l = _clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1)
        L[i] = l
        w = x[i] * x[i]
        sumlx += w * x[i] * F(l)
        suml2 += w * F(l) * F(l)
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = x[i] * x[i]
            fli = F(L[i])
            slx = sumlx - w * x[i] * fli
            if slx > 0:
                sl2 = suml2 - w * fli * fli
                new_l = _clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1)
                if new_l != L[i]:
                    slx += w * x[i] * F(new_l)
                    sl2 += w * F(new_l) * F(new_l)
                    if sl2 > 0 and slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l
                        sumlx = slx
                        suml2 = sl2
                        n_changed += 1
        if n_changed == 0:
            break
    for i in range(n):
        L[i] += nmax
    return sumlx / suml2 if suml2 > 0 else F(0)


@jit
def make_qkx2_quants(nmax, x, weights, L, Laux, rmin, rdelta, nstep, use_mad):
    """make_qkx2_quants: weighted (scale, min) search over nstep+1 trial scales.

    Returns (scale, the_min). Each accepted trial moves `mn`, which later trials start from.
    """
    n = x.size
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w += w
        sum_x += w * x[i]
    if mn > 0:
        mn = F(0)
    if mx == mn:
        L[:n] = 0
        return F(0), -mn
    iscale = F(nmax) / (mx - mn)
    scale = F(1) / iscale
    best_error = F(0)
    for i in range(n):
        L[i] = _clamp(nearest_int(iscale * (x[i] - mn)), 0, nmax)
        diff = scale * F(L[i]) + mn - x[i]
        diff = abs(diff) if use_mad else diff * diff
        best_error += weights[i] * diff
    if nstep < 1:
        return scale, -mn
    for is_ in range(nstep + 1):
        iscale = (rmin + rdelta * F(is_) + F(nmax)) / (mx - mn)
        sum_l = F(0)
        sum_l2 = F(0)
        sum_xl = F(0)
        for i in range(n):
            l = _clamp(nearest_int(iscale * (x[i] - mn)), 0, nmax)
            Laux[i] = l
            wl = weights[i] * F(l)
            sum_l += wl
            sum_l2 += wl * F(l)
            sum_xl += wl * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = F(0)
                this_scale = sum_xl / sum_l2
            cur_error = F(0)
            for i in range(n):
                diff = this_scale * F(Laux[i]) + this_min - x[i]
                diff = abs(diff) if use_mad else diff * diff
                cur_error += weights[i] * diff
            if cur_error < best_error:
                L[:n] = Laux[:n]
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, -mn


@jit
def make_qkx2_quants_lanes(nmax, X, W, L, rmin, rdelta, nstep, use_mad, scales, the_mins):
    """make_qkx2_quants on the columns of X at once: X, W, L float32 [n, lanes].

    Same arithmetic per column as make_qkx2_quants (its plain twin); running independent groups
    side by side (column loop inner) breaks the float add latency chains and vectorizes.
    The quants L come back as floats. Fills scales and the_mins [lanes].
    """
    n, lanes = X.shape
    st = np.empty((13, lanes), np.float32)
    mn, mx, sum_w, sum_x, best, iscale, scale = st[0], st[1], st[2], st[3], st[4], st[5], st[6]
    sum_l, sum_l2, sum_xl, this_scale, this_min, cur = st[7], st[8], st[9], st[10], st[11], st[12]
    Laux = np.empty((n, lanes), np.float32)
    fmax = F(nmax)
    for k in range(lanes):
        mn[k] = X[0, k]
        mx[k] = X[0, k]
        sum_w[k] = W[0, k]
        sum_x[k] = W[0, k] * X[0, k]
    for i in range(1, n):
        for k in range(lanes):
            mn[k] = X[i, k] if X[i, k] < mn[k] else mn[k]
            mx[k] = X[i, k] if X[i, k] > mx[k] else mx[k]
            sum_w[k] += W[i, k]
            sum_x[k] += W[i, k] * X[i, k]
    for k in range(lanes):
        mn[k] = F(0) if mn[k] > 0 else mn[k]
        the_mins[k] = mn[k]  # remembered for the max == min groups, fixed up at the end
        iscale[k] = fmax / (mx[k] - mn[k])
        scale[k] = F(1) / iscale[k]
        best[k] = F(0)
    for i in range(n):
        for k in range(lanes):
            fl = max(F(0), min(fmax, _nearest_f32(iscale[k] * (X[i, k] - mn[k]))))
            L[i, k] = fl
            diff = scale[k] * fl + mn[k] - X[i, k]
            best[k] += W[i, k] * (abs(diff) if use_mad else diff * diff)
    for is_ in range(nstep + 1 if nstep >= 1 else 0):  # nstep < 1: no search
        for k in range(lanes):
            iscale[k] = (rmin + rdelta * F(is_) + fmax) / (mx[k] - mn[k])
            sum_l[k] = F(0)
            sum_l2[k] = F(0)
            sum_xl[k] = F(0)
        for i in range(n):
            for k in range(lanes):
                fl = max(F(0), min(fmax, _nearest_f32(iscale[k] * (X[i, k] - mn[k]))))
                Laux[i, k] = fl
                wl = W[i, k] * fl
                sum_l[k] += wl
                sum_l2[k] += wl * fl
                sum_xl[k] += wl * X[i, k]
        for k in range(lanes):
            D = sum_w[k] * sum_l2[k] - sum_l[k] * sum_l[k]
            this_scale[k] = (sum_w[k] * sum_xl[k] - sum_x[k] * sum_l[k]) / D
            this_min[k] = (sum_l2[k] * sum_x[k] - sum_l[k] * sum_xl[k]) / D
            if this_min[k] > 0:
                this_min[k] = F(0)
                this_scale[k] = sum_xl[k] / sum_l2[k]
            cur[k] = F(0) if D > 0 else F(np.inf)  # D <= 0: the C skips this trial
        for i in range(n):
            for k in range(lanes):
                diff = this_scale[k] * Laux[i, k] + this_min[k] - X[i, k]
                cur[k] += W[i, k] * (abs(diff) if use_mad else diff * diff)
        for k in range(lanes):
            if cur[k] < best[k]:
                L[:, k] = Laux[:, k]
                best[k] = cur[k]
                scale[k] = this_scale[k]
                mn[k] = this_min[k]
    for k in range(lanes):
        if mx[k] == the_mins[k]:  # all weights equal: make_qkx2_quants returns early
            L[:, k] = 0
            scales[k] = F(0)
        else:
            scales[k] = scale[k]
            the_mins[k] = mn[k]
        the_mins[k] = -the_mins[k]


@jit
def best_index_int8(values, x):
    # ggml-quants.c best_index_int8: binary search, the lower level wins only if strictly nearer
    n = values.size
    if x <= values[0]:
        return 0
    if x >= values[n - 1]:
        return n - 1
    ml, mu = 0, n - 1
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < values[mav]:
            mu = mav
        else:
            ml = mav
    return mu - 1 if x - values[mu - 1] < values[mu] - x else mu


# ---------------------------------------------------------------- column layout
# The *_lanes searches take one group of weights per column, the groups of GROUP blocks side by
# side, so that their loops over columns are long enough to vectorize.


@jit
def _groups_as_columns(x, group):
    """float32 [group, n]: column b*k + j holds group j of block b (k groups per block)."""
    k = x.shape[1] // group
    X = np.empty((group, x.shape[0] * k), np.float32)
    for b in range(x.shape[0]):
        for j in range(k):
            for i in range(group):
                X[i, b * k + j] = x[b, group * j + i]
    return X


@jit
def _block_quants(Lt, b, group, L):
    """Gather block b's quants from the column layout into L uint8 [block]."""
    k = L.size // group
    for j in range(k):
        for i in range(group):
            L[group * j + i] = Lt[i, b * k + j]


# ---------------------------------------------------------------- Q2_K


@jit
def _q2_k_blocks(x, out):
    # quantize_row_q2_K_ref; the 16-weight groups of all blocks search their (scale, min) together
    X = _groups_as_columns(x, 16)
    Lt = np.empty_like(X)
    scales = np.empty(X.shape[1], np.float32)
    mins = np.empty(X.shape[1], np.float32)
    make_qkx2_quants_lanes(I(3), X, np.abs(X), Lt, F(-0.5), F(0.1), I(15), np.bool_(True), scales,
                           mins)
    L = np.empty(256, np.uint8)
    for b in range(x.shape[0]):
        _block_quants(Lt, b, 16, L)
        _q2_k_finish(x[b], out[b], L, scales[16 * b : 16 * b + 16], mins[16 * b : 16 * b + 16])


@jit
def _q2_k_finish(x, y, L, scales, mins):
    # the rest of quantize_row_q2_K_ref; y: scales[16] qs[64] d dmin
    max_scale = F(0)
    max_min = F(0)
    for j in range(16):
        if scales[j] > max_scale:
            max_scale = scales[j]
        if mins[j] > max_min:
            max_min = mins[j]
    sc = y[0:16]
    q4scale = F(15)
    if max_scale > 0:
        iscale = q4scale / max_scale
        for j in range(16):
            sc[j] = nearest_int(iscale * scales[j]) & 0xFF
        d = _put_f16(y, 80, max_scale / q4scale)
    else:
        sc[:] = 0
        d = _put_f16(y, 80, F(0))
    if max_min > 0:
        iscale = q4scale / max_min
        for j in range(16):
            sc[j] |= (nearest_int(iscale * mins[j]) << 4) & 0xFF
        dmin = _put_f16(y, 82, max_min / q4scale)
    else:
        dmin = _put_f16(y, 82, F(0))
    for j in range(16):
        dl = d * F(sc[j] & 0xF)
        if dl == 0:
            continue
        dm = dmin * F(sc[j] >> 4)
        for i in range(16):
            L[16 * j + i] = _clamp(nearest_int((x[16 * j + i] + dm) / dl), 0, 3)
    _pack_crumbs(L, y[16:80])


@pjit
def _quantize_q2_k(x, out):
    for c in prange((x.shape[0] + GROUP - 1) // GROUP):
        _q2_k_blocks(x[c * GROUP : c * GROUP + GROUP], out[c * GROUP : c * GROUP + GROUP])


# ---------------------------------------------------------------- Q3_K


@jit
def _q3_k_blocks(x, out):
    L = np.empty(256, np.int8)
    scales = np.empty(16, np.float32)
    for b in range(x.shape[0]):
        _q3_k_block(x[b], out[b], L, scales)


@jit
def _q3_k_block(x, y, L, scales):
    # quantize_row_q3_K_ref; y: hmask[32] qs[64] scales[12] d
    max_scale = F(0)
    amax = F(0)
    for j in range(16):
        scales[j] = make_q3_quants(4, x[16 * j : 16 * j + 16], L[16 * j : 16 * j + 16])
        scale = abs(scales[j])
        if scale > amax:
            amax = scale
            max_scale = scales[j]
    sc = y[96:108]
    sc[:] = 0
    if max_scale != 0:
        iscale = F(-32) / max_scale
        for j in range(16):
            l = ((nearest_int(iscale * scales[j]) + 128) & 0xFF) - 128  # C: int8_t l = ...
            l = _clamp(l, -32, 31) + 32
            if j < 8:
                sc[j] = l & 0xF
            else:
                sc[j - 8] |= (l & 0xF) << 4
            sc[j % 4 + 8] |= (l >> 4) << (2 * (j // 4))
        d = _put_f16(y, 108, F(1) / iscale)
    else:
        d = _put_f16(y, 108, F(0))
    for j in range(16):
        s = np.int64(sc[j]) & 0xF if j < 8 else np.int64(sc[j - 8]) >> 4
        s = (s | (((np.int64(sc[8 + j % 4]) >> (2 * (j // 4))) & 3) << 4)) - 32
        dl = d * F(s)
        if dl == 0:
            continue
        for i in range(16):
            L[16 * j + i] = _clamp(nearest_int(x[16 * j + i] / dl), -4, 3) + 4
    hmask = y[0:32]
    hmask[:] = 0
    for j in range(256):
        # the high bit of quant j goes to bit j//32 of hmask[j%32]
        if L[j] > 3:
            hmask[j % 32] |= 1 << (j // 32)
            L[j] -= 4
    _pack_crumbs(L, y[32:96])


@pjit
def _quantize_q3_k(x, out):
    for c in prange((x.shape[0] + GROUP - 1) // GROUP):
        _q3_k_blocks(x[c * GROUP : c * GROUP + GROUP], out[c * GROUP : c * GROUP + GROUP])


# ---------------------------------------------------------------- Q4_K and Q5_K


@jit
def _qk32_columns(x, nmax, rmin, nstep):
    """make_qkx2_quants on every 32-weight sub-block of the blocks x, weighted as q4_K/q5_K_ref.

    Returns the quants Lt float32 [32, n] and scales, mins [n] in _groups_as_columns order.
    """
    X = _groups_as_columns(x, 32)
    W = np.empty_like(X)
    for g in range(X.shape[1]):
        sum_x2 = F(0)
        for i in range(32):
            sum_x2 += X[i, g] * X[i, g]
        av_x = np.sqrt(sum_x2 / F(32))
        for i in range(32):
            W[i, g] = av_x + abs(X[i, g])
    Lt = np.empty_like(X)
    scales = np.empty(X.shape[1], np.float32)
    mins = np.empty(X.shape[1], np.float32)
    make_qkx2_quants_lanes(nmax, X, W, Lt, rmin, F(0.1), nstep, np.bool_(False), scales, mins)
    return Lt, scales, mins


@jit
def _get_scale_min_k4(j, q):
    if j < 4:
        return np.int64(q[j]) & 63, np.int64(q[j + 4]) & 63
    lo, hi, q4 = np.int64(q[j - 4]), np.int64(q[j]), np.int64(q[j + 4])
    return (q4 & 0xF) | ((lo >> 6) << 4), (q4 >> 4) | ((hi >> 6) << 4)


@jit
def _qk32_finish(x, y, nmax, L, scales, mins):
    """Pack 6-bit scales/mins, store d/dmin, requantize with them (q4_K/q5_K_ref tails)."""
    max_scale = F(0)
    max_min = F(0)
    for j in range(8):
        if scales[j] > max_scale:
            max_scale = scales[j]
        if mins[j] > max_min:
            max_min = mins[j]
    inv_scale = F(63) / max_scale if max_scale > 0 else F(0)
    inv_min = F(63) / max_min if max_min > 0 else F(0)
    q = y[4:16]
    for j in range(8):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)  # C: uint8_t ls = ...
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        if j < 4:
            q[j] = ls
            q[j + 4] = lm
        else:
            q[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            q[j - 4] |= (ls >> 4) << 6
            q[j] |= (lm >> 4) << 6
    d = _put_f16(y, 0, max_scale / F(63))
    dmin = _put_f16(y, 2, max_min / F(63))
    for j in range(8):
        sc, m = _get_scale_min_k4(j, q)
        dl = d * F(sc)
        if dl == 0:
            continue
        dm = dmin * F(m)
        for i in range(32):
            L[32 * j + i] = _clamp(nearest_int((x[32 * j + i] + dm) / dl), 0, nmax)


@jit
def _q4_k_blocks(x, out):
    # quantize_row_q4_K_ref; out rows: d dmin scales[12] qs[128]
    Lt, scales, mins = _qk32_columns(x, I(15), F(-1), I(20))
    L = np.empty(256, np.uint8)
    for b in range(x.shape[0]):
        y = out[b]
        _block_quants(Lt, b, 32, L)
        _qk32_finish(x[b], y, 15, L, scales[8 * b : 8 * b + 8], mins[8 * b : 8 * b + 8])
        for j in range(0, 256, 64):
            for i in range(32):
                y[16 + j // 2 + i] = L[j + i] | (L[j + i + 32] << 4)


@jit
def _q5_k_blocks(x, out):
    # quantize_row_q5_K_ref; out rows: d dmin scales[12] qh[32] qs[128]
    Lt, scales, mins = _qk32_columns(x, I(31), F(-0.5), I(15))
    L = np.empty(256, np.uint8)
    for b in range(x.shape[0]):
        y = out[b]
        _block_quants(Lt, b, 32, L)
        _qk32_finish(x[b], y, 31, L, scales[8 * b : 8 * b + 8], mins[8 * b : 8 * b + 8])
        _pack_q5(L, y)


@jit
def _pack_q5(L, y):
    qh = y[16:48]
    qh[:] = 0
    for n in range(0, 256, 64):
        m1 = 1 << (n // 32)  # bits 2k, 2k+1 of qh[j]: fifth bits of the two halves of chunk k
        for j in range(32):
            l1 = L[n + j]
            if l1 > 15:
                l1 -= 16
                qh[j] |= m1
            l2 = L[n + j + 32]
            if l2 > 15:
                l2 -= 16
                qh[j] |= m1 << 1
            y[48 + n // 2 + j] = l1 | (l2 << 4)


@pjit
def _quantize_q4_k(x, out):
    for c in prange((x.shape[0] + GROUP - 1) // GROUP):
        _q4_k_blocks(x[c * GROUP : c * GROUP + GROUP], out[c * GROUP : c * GROUP + GROUP])


@pjit
def _quantize_q5_k(x, out):
    for c in prange((x.shape[0] + GROUP - 1) // GROUP):
        _q5_k_blocks(x[c * GROUP : c * GROUP + GROUP], out[c * GROUP : c * GROUP + GROUP])


# ---------------------------------------------------------------- Q6_K


@jit
def _q6_k_blocks(x, out):
    # quantize_row_q6_K_ref; the 16-weight groups of all blocks search their scales together
    X = _groups_as_columns(x, 16)
    Lt = np.empty_like(X)
    scales = np.empty(X.shape[1], np.float32)
    make_qx_quants_lanes(32, X, Lt, scales)
    L = np.empty(256, np.int8)
    for b in range(x.shape[0]):
        _block_quants(Lt, b, 16, L)
        _q6_k_finish(x[b], out[b], L, scales[16 * b : 16 * b + 16])


@jit
def _q6_k_finish(x, y, L, scales):
    # the rest of quantize_row_q6_K_ref; y: ql[128] qh[64] scales[16] d
    max_scale = F(0)
    max_abs_scale = F(0)
    for ib in range(16):
        if abs(scales[ib]) > max_abs_scale:
            max_abs_scale = abs(scales[ib])
            max_scale = scales[ib]
    if max_abs_scale < GROUP_MAX_EPS:
        y[:] = 0
        return
    iscale = F(-128) / max_scale
    d = _put_f16(y, 208, F(1) / iscale)
    sc = y[192:208]
    for ib in range(16):
        sc[ib] = min(127, nearest_int(iscale * scales[ib])) & 0xFF
    for j in range(16):
        s = np.int64(sc[j]) - 256 if sc[j] > 127 else np.int64(sc[j])  # int8_t scales
        dl = d * F(s)
        if dl == 0:
            continue
        for i in range(16):
            L[16 * j + i] = _clamp(nearest_int(x[16 * j + i] / dl), -32, 31) + 32
    for j in range(0, 256, 128):
        ql = y[j // 2 : j // 2 + 64]
        qh = y[128 + j // 4 : 128 + j // 4 + 32]
        for i in range(32):
            q1, q2 = L[j + i] & 0xF, L[j + i + 32] & 0xF
            q3, q4 = L[j + i + 64] & 0xF, L[j + i + 96] & 0xF
            ql[i] = q1 | (q3 << 4)
            ql[i + 32] = q2 | (q4 << 4)
            qh[i] = ((L[j + i] >> 4) | ((L[j + i + 32] >> 4) << 2) | ((L[j + i + 64] >> 4) << 4)
                     | ((L[j + i + 96] >> 4) << 6))


@pjit
def _quantize_q6_k(x, out):
    for c in prange((x.shape[0] + GROUP - 1) // GROUP):
        _q6_k_blocks(x[c * GROUP : c * GROUP + GROUP], out[c * GROUP : c * GROUP + GROUP])


# ---------------------------------------------------------------- IQ4_NL and IQ4_XS


@ijit
def _iq4_nearest(x):
    """(best_index_int8(16, kvalues_iq4nl, x), its level), with the C's comparisons but no branches.

    The binary search ends at values[mu-1] <= x < values[mu]; a linear scan finds the same pair.
    """
    v = IQ4_VALUES
    idx = 0
    lo = v[0]
    hi = v[1]
    for m in range(1, 15):
        if x >= v[m]:
            idx = m
            lo = v[m]
            hi = v[m + 1]
    if x != x:  # NaN: the binary search runs to the top
        return 15, v[15]
    return (idx, lo) if x - lo < hi - x else (idx + 1, hi)


@jit
def _iq4_sums(X, id_, sumqx, sumq2):
    """One trial scale per column: sum w*q*x and w*q*q with w = x*x (quantize_row_iq4_nl_impl)."""
    n, lanes = X.shape
    sumqx[:] = 0
    sumq2[:] = 0
    for i in range(n):
        for k in range(lanes):
            x = X[i, k]
            _, q = _iq4_nearest(id_[k] * x)
            w = x * x
            sumqx[k] += w * q * x
            sumq2[k] += w * q * q


@jit
def _iq4_scales_lanes(X, ntry, scales):
    """The per-block scale search of quantize_row_iq4_nl_impl (no imatrix) for each column of X.

    X float32 [32, n] (one block per column); fills scales [n], 0 for an all-zero block. The
    2*ntry+1 trial scales do not depend on each other, so all columns run side by side.
    """
    n, lanes = X.shape
    v0 = IQ4_VALUES[0]
    st = np.empty((7, lanes), np.float32)
    amax, mx, id_, sumqx, sumq2, d, best = st[0], st[1], st[2], st[3], st[4], st[5], st[6]
    for k in range(lanes):
        amax[k] = F(0)
        mx[k] = F(0)
        for i in range(n):
            ax = abs(X[i, k])
            if ax > amax[k]:
                amax[k] = ax
                mx[k] = X[i, k]
        id_[k] = F(1) / (-mx[k] / v0 if ntry > 0 else mx[k] / v0)
    _iq4_sums(X, id_, sumqx, sumq2)
    for k in range(lanes):
        d[k] = sumqx[k] / sumq2[k] if sumq2[k] > 0 else F(0)
        best[k] = d[k] * sumqx[k]
    for itry in range(-ntry, ntry + 1):
        for k in range(lanes):
            id_[k] = (F(itry) + v0) / mx[k]
        _iq4_sums(X, id_, sumqx, sumq2)
        for k in range(lanes):
            if sumq2[k] > 0 and sumqx[k] * sumqx[k] > best[k] * sumq2[k]:
                d[k] = sumqx[k] / sumq2[k]
                best[k] = d[k] * sumqx[k]
    for k in range(lanes):
        scales[k] = F(0) if amax[k] < GROUP_MAX_EPS else d[k]


@jit
def _pack_iq4_nibbles(L, q4):
    for i in range(L.size // 32):
        for j in range(16):
            q4[16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4)


@jit
def _iq4_nl_blocks(x, out):
    # quantize_iq4_nl -> quantize_row_iq4_nl_impl(32, 32, ..., ntry=7); out rows: d qs[16]
    scales = np.empty(x.shape[0], np.float32)
    _iq4_scales_lanes(_groups_as_columns(x, 32), 7, scales)
    L = np.empty(32, np.uint8)
    for b in range(x.shape[0]):
        scale = scales[b]
        _put_f16(out[b], 0, scale)
        id_ = F(1) / scale if scale != 0 else F(0)
        for j in range(32):
            L[j] = _iq4_nearest(id_ * x[b, j])[0]
        _pack_iq4_nibbles(L, out[b, 2:18])


@jit
def _iq4_xs_blocks(x, out):
    # quantize_iq4_xs -> quantize_row_iq4_nl_impl(256, 32, ..., ntry=7)
    scales = np.empty(x.shape[0] * 8, np.float32)
    _iq4_scales_lanes(_groups_as_columns(x, 32), 7, scales)
    L = np.empty(256, np.uint8)
    for b in range(x.shape[0]):
        _iq4_xs_finish(x[b], out[b], L, scales[8 * b : 8 * b + 8])


@jit
def _iq4_xs_finish(x, y, L, scales):
    # the super-block part of quantize_row_iq4_nl_impl; y: d scales_h scales_l[4] qs[128]
    max_scale = F(0)
    amax_scale = F(0)
    for ib in range(8):
        if abs(scales[ib]) > amax_scale:
            amax_scale = abs(scales[ib])
            max_scale = scales[ib]
    d = -max_scale / F(32)
    _put_f16(y, 0, d)
    id_ = F(1) / d if d != 0 else F(0)
    scales_h = 0
    y[4:8] = 0
    for ib in range(8):
        l = _clamp(nearest_int(id_ * scales[ib]), -32, 31)
        dl = d * F(l)
        idl = F(1) / dl if dl != 0 else F(0)
        for j in range(32):
            L[32 * ib + j] = _iq4_nearest(idl * x[32 * ib + j])[0]
        l += 32
        y[4 + ib // 2] |= (l & 0xF) << (4 * (ib % 2))
        scales_h |= (l >> 4) << (2 * ib)
    y[2] = scales_h & 0xFF
    y[3] = scales_h >> 8
    _pack_iq4_nibbles(L, y[8:136])


@pjit
def _quantize_iq4_nl(x, out):
    g = 8 * GROUP  # 32-weight blocks: 8 times as many per work item
    for c in prange((x.shape[0] + g - 1) // g):
        _iq4_nl_blocks(x[c * g : c * g + g], out[c * g : c * g + g])


@pjit
def _quantize_iq4_xs(x, out):
    for c in prange((x.shape[0] + GROUP - 1) // GROUP):
        _iq4_xs_blocks(x[c * GROUP : c * GROUP + GROUP], out[c * GROUP : c * GROUP + GROUP])


# ---------------------------------------------------------------- public entry points


def _run(kernel, x: np.ndarray, block_size: int, type_size: int) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, block_size)
    out = np.zeros((x.shape[0], type_size), dtype=np.uint8)
    if x.shape[0]:
        kernel(x, out)
    return out


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> Q2_K blocks uint8 [n, 84] (quantize_row_q2_K_ref)."""
    return _run(_quantize_q2_k, x, 256, 84)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> Q3_K blocks uint8 [n, 110] (quantize_row_q3_K_ref)."""
    return _run(_quantize_q3_k, x, 256, 110)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> Q4_K blocks uint8 [n, 144] (quantize_row_q4_K_ref)."""
    return _run(_quantize_q4_k, x, 256, 144)


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> Q5_K blocks uint8 [n, 176] (quantize_row_q5_K_ref)."""
    return _run(_quantize_q5_k, x, 256, 176)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> Q6_K blocks uint8 [n, 210] (quantize_row_q6_K_ref)."""
    return _run(_quantize_q6_k, x, 256, 210)


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """float32 [n, 32] -> IQ4_NL blocks uint8 [n, 18] (quantize_iq4_nl, no imatrix: ntry=7)."""
    return _run(_quantize_iq4_nl, x, 32, 18)


def quantize_iq4_xs(x: np.ndarray) -> np.ndarray:
    """float32 [n, 256] -> IQ4_XS blocks uint8 [n, 136] (quantize_iq4_xs, no imatrix).

    Super-blocks are quantized independently, so the row length does not matter.
    """
    return _run(_quantize_iq4_xs, x, 256, 136)
