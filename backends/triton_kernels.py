"""Triton kernels of the triton backend: the emulator's float32 steps, one tile per program.

Every fp32 operation is the spec's, in the spec's order: products and sums are single IEEE
RNE operations, the one division (TE's element multiplier ``1 / (s * S_dec)``) is
``tl.math.div_rn`` (Triton's ``/`` on fp32 may be approximate on NVIDIA GPUs), clamps are
``tl.where`` comparisons (NaN passes through, as ``np.minimum``). Bit-level steps (amax as
the max of sign-cleared bit patterns, E8M0 exponents, UE4M3 rounding, 2^e) are integer
operations on the float32 patterns. Element rounding counts float32 thresholds taken from
the emulator's own tables (passed in a small device tensor).

Kernels:

* :func:`amax_kernel` -- global amax (int32 atomic max of sign-cleared bit patterns).
* :func:`quantize_kernel` -- one (BM x BN) tile of the logical matrix (strides given, so
  rowwise and columnwise/transposed quantization are the same kernel): block amaxes (1 x k
  blocks or 16 x k tiles), scale codes, element codes (RNE, or SR with given random bits),
  two codes per byte (first element in the low nibble), scale codes.
* :func:`dequantize_kernel` -- packed codes and scale codes back to float32.
"""

from __future__ import annotations

import triton
import triton.language as tl

FLT_MAX = 3.4028234663852886e38


@triton.jit
def _load_f32(ptrs, mask, BF16: tl.constexpr):
    """Load as float32; bf16 arrives as int16 bit patterns and widens by a shift (exact,
    subnormals included -- the CPU interpreter's own bf16 conversion flushes them)."""
    if BF16:
        v = tl.load(ptrs, mask=mask, other=0).to(tl.int32)
        return (v << 16).to(tl.float32, bitcast=True)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def amax_kernel(x_ptr, out_ptr, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr, BF16: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm.to(tl.int64)[:, None] * sxm + rn.to(tl.int64)[None, :] * sxn
    x = _load_f32(x_ptr + offs, mask, BF16)
    b = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    tl.atomic_max(out_ptr, tl.max(tl.max(b, axis=1), axis=0))


@triton.jit
def _floor_log2(b):
    """Exact floor(log2 a) of positive float32 a given by its bit pattern b (int32)."""
    E = (b >> 23) & 0xFF
    M = b & 0x7FFFFF
    # subnormal: the exponent of float(M) (exact, M < 2^23) gives floor(log2 M)
    msub = ((M.to(tl.float32).to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    return tl.where(E == 0, msub - 149, E - 127)


@triton.jit
def _is_pow2(b):
    E = (b >> 23) & 0xFF
    M = b & 0x7FFFFF
    return tl.where(E == 0, (M & (M - 1)) == 0, M == 0)


@triton.jit
def _pow2(e):
    """float32 2^e for int32 e in [-127, 128] (2^128 -> +Inf), from the bit pattern."""
    normal = (tl.maximum(e + 127, 0) << 23)
    sub = tl.full(e.shape, 1 << 22, tl.int32)
    return tl.where(e >= -126, normal, sub).to(tl.float32, bitcast=True)


@triton.jit
def _ue4m3_rne(s):
    """UE4M3 code of float32 s in [0, 448] or NaN: round to nearest even (NaN -> 0x7F)."""
    b = s.to(tl.int32, bitcast=True)
    # normal range s >= 2^-6: round the mantissa to 3 bits (ties to even), rebias 127 -> 7
    rn = (b + 0x7FFFF + ((b >> 20) & 1)) >> 20
    normal = rn - ((127 - 7) << 3)
    # subnormal range: m = RNE(s * 2^9) in [0, 8] (8 is the code of 2^-6), by adding 2^23
    t = s * 512.0 + 8388608.0
    sub = t.to(tl.int32, bitcast=True) - 0x4B000000
    code = tl.where(b >= 0x3C800000, normal, sub)
    return tl.where(s != s, 0x7F, code)


@triton.jit
def _ue4m3_value(c):
    """float32 value of UE4M3 codes c (int32 in [0, 127]; 0x7F -> NaN)."""
    e = c >> 3
    m = c & 7
    normal = ((e + 120) << 23 | (m << 20)).to(tl.float32, bitcast=True)
    sub = m.to(tl.float32) * 0.001953125
    v = tl.where(e == 0, sub, normal)
    return tl.where(c == 0x7F, float("nan"), v)


@triton.jit
def _element_codes(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, NTHR: tl.constexpr, SR: tl.constexpr,
                   INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr):
    """Saturating codes of scaled float32 values y (RNE, or SR with random bits r as float32)."""
    a = tl.abs(y)
    idx = tl.zeros(y.shape, tl.int32)
    if SR:
        for i in tl.static_range(NTHR):
            idx += (a >= tl.load(dthr_ptr + i)).to(tl.int32)
        lo = tl.load(mags_ptr + idx)
        hi = tl.load(mags_ptr + tl.minimum(idx + 1, NTHR))
        # exact in fp32: a - lo (Sterbenz, or lo = 0), grid steps are powers of two, 2^N - r < 2^24
        up = ((a - lo) * sr_scale >= (sr_scale - r) * (hi - lo)) & (a > lo) & (idx < NTHR)
        idx += up.to(tl.int32)
    else:
        for i in tl.static_range(NTHR):
            idx += (a >= tl.load(thr_ptr + i)).to(tl.int32)
    idx = tl.minimum(idx, NTHR - 1)
    if ZERO_POS:
        neg = y < 0.0
    else:
        neg = y.to(tl.int32, bitcast=True) < 0
    if INT4:
        code = tl.where(neg, (16 - idx) & 15, idx)
    else:
        if NEGZERO:
            code = tl.where(neg, idx | 8, idx)
        else:
            code = tl.where(neg & (idx != 0), idx | 8, idx)
    return tl.where(y != y, 0, code)


@triton.jit
def quantize_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                    M, N, sxm, sxn, sqm, ssm, srm, srn,
                    BM: tl.constexpr, BN: tl.constexpr, K: tl.constexpr, TILE_R: tl.constexpr,
                    MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                    SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, INT4: tl.constexpr,
                    NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, BF16: tl.constexpr):
    """Quantize one BM x BN tile of the logical matrix x[m, n] = x_ptr[m*sxm + n*sxn] along n.

    ts_ptr (float32): [S_enc, S_dec, fp32(1/max_elem), 2^sr_bits]. MX: RULE 0 floor, 1 ceil,
    2 even, 3 rceil (multiply by fp32(1/max)); SCALING 0 exact, 1 torchao, 2 rceil-TE.
    """
    NB: tl.constexpr = BN // K
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rm64 = rm.to(tl.int64)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = _load_f32(x_ptr + rm64[:, None] * sxm + rn.to(tl.int64)[None, :] * sxn, mask, BF16)
    xb = tl.reshape(x, (BM, NB, K))
    bits = xb.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    vmb = tl.max(bits, axis=2)  # (BM, NB)
    if TILE_R > 1:
        t = tl.max(tl.reshape(vmb, (BM // TILE_R, TILE_R, NB)), axis=1)
        vmb = tl.reshape(tl.broadcast_to(t[:, None, :], (BM // TILE_R, TILE_R, NB)), (BM, NB))
    vm = vmb.to(tl.float32, bitcast=True)
    if MX:
        if NAN_INF:
            nan_scale = vmb >= 0x7F800000
        else:
            nan_scale = vmb > 0x7F800000
        ab = tl.where(nan_scale, 0x3F800000, vmb)
        zero = ab == 0
        safe = tl.where(zero, 0x3F800000, ab)
        if RULE == 0:
            e = _floor_log2(safe) - EMAX
        elif RULE == 1:
            e = _floor_log2(safe) + (~_is_pow2(safe)).to(tl.int32) - EMAX
        elif RULE == 2:
            e = (((safe + (1 << (22 - 1))) & 0x7F800000) >> 23) - 127 - EMAX
        else:
            d = ab.to(tl.float32, bitcast=True) * tl.load(ts_ptr + 2)
            db = d.to(tl.int32, bitcast=True)
            dz = db == 0
            dinf = db == 0x7F800000
            dsafe = tl.where(dz | dinf, 0x3F800000, db)
            e = _floor_log2(dsafe) + (~_is_pow2(dsafe)).to(tl.int32)
            e = tl.where(dinf, 127, e)
            zero = zero | dz
        e = tl.where(zero, -127, e)
        e = tl.minimum(tl.maximum(e, -127), 127)
        scode = tl.where(nan_scale, 255, e + 127)
        if SCALING == 0:
            shift = -e
        elif SCALING == 2:
            shift = tl.where(e == -127, 0, -e)
        else:
            shift = -tl.maximum(e, -126)
        mult = tl.where(nan_scale, 0.0, _pow2(shift))
    else:
        s_enc = tl.load(ts_ptr)
        s_dec = tl.load(ts_ptr + 1)
        mult_b = s_enc * tl.load(ts_ptr + 2)
        s = vm * mult_b
        s = tl.where(s > 3.4028234663852886e38, 3.4028234663852886e38, s)
        s = tl.where(s > 448.0, 448.0, s)
        scode = _ue4m3_rne(s)
        den = _ue4m3_value(scode) * s_dec
        me = tl.math.div_rn(tl.full(den.shape, 1.0, tl.float32), den)
        mult = tl.where(me > 3.4028234663852886e38, 3.4028234663852886e38, me)
    y = xb * mult[:, :, None]
    if SR:
        rr = tl.load(r_ptr + rm64[:, None] * srm + rn.to(tl.int64)[None, :] * srn, mask=mask, other=0)
        r = tl.reshape(rr.to(tl.float32), (BM, NB, K))
        sr_scale = tl.load(ts_ptr + 3)
    else:
        r = y
        sr_scale = 0.0
    codes = _element_codes(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    pairs = tl.reshape(codes, (BM, BN // 2, 2))
    lo, hi = tl.split(pairs)
    packed = (lo | (hi << 4)).to(tl.uint8)
    cn = pid_n * (BN // 2) + tl.arange(0, BN // 2)
    tl.store(q_ptr + rm64[:, None] * sqm + cn[None, :], packed,
             mask=(rm[:, None] < M) & (cn[None, :] < N // 2))
    sn = pid_n * NB + tl.arange(0, NB)
    tl.store(s_ptr + rm64[:, None] * ssm + sn[None, :], scode.to(tl.uint8),
             mask=(rm[:, None] < M) & (sn[None, :] < N // K))


@triton.jit
def dequantize_kernel(q_ptr, s_ptr, vals_ptr, g_ptr, out_ptr, M, N, sqm, ssm, som,
                      BM: tl.constexpr, BN: tl.constexpr, K: tl.constexpr, MX: tl.constexpr):
    """float32 values: MX fp32(P * 2^(s-127)) (NaN for 0xFF); TE two-level fp32(fp32(P * s) * S_dec)."""
    NB: tl.constexpr = BN // K
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rm64 = rm.to(tl.int64)
    cn = pid_n * (BN // 2) + tl.arange(0, BN // 2)
    qmask = (rm[:, None] < M) & (cn[None, :] < N // 2)
    p = tl.load(q_ptr + rm64[:, None] * sqm + cn[None, :], mask=qmask, other=0).to(tl.int32)
    lo = tl.load(vals_ptr + (p & 15))
    hi = tl.load(vals_ptr + (p >> 4))
    v = tl.reshape(tl.join(lo, hi), (BM, NB, K))
    sn = pid_n * NB + tl.arange(0, NB)
    sc = tl.load(s_ptr + rm64[:, None] * ssm + sn[None, :], mask=(rm[:, None] < M) & (sn[None, :] < N // K),
                 other=0).to(tl.int32)
    if MX:
        sv = _pow2(sc - 127)
        sv = tl.where(sc == 255, float("nan"), sv)
        out = v * sv[:, :, None]
    else:
        sv = _ue4m3_value(sc)
        out = (v * sv[:, :, None]) * tl.load(g_ptr)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(out_ptr + rm64[:, None] * som + rn[None, :], tl.reshape(out, (BM, BN)),
             mask=(rm[:, None] < M) & (rn[None, :] < N))
