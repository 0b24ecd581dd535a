"""The shared ``@triton.jit`` building blocks of the quantize kernels.

Every float32 operation is the spec's, in the spec's order: products and sums are single IEEE
RNE operations, the one division (TE's element multiplier ``1 / (s * S_dec)``) is
``tl.math.div_rn`` (Triton's ``/`` on fp32 may be approximate on NVIDIA GPUs), clamps are
``tl.where`` comparisons (NaN passes through, as ``np.minimum``). Bit-level steps (amax as the
max of sign-cleared bit patterns, E8M0 exponents, UE4M3 rounding, 2^e) are integer operations
on the float32 patterns.

Sections: loads and amaxes; block scales (E8M0 and UE4M3 on amax bit patterns); element
codes -- the exact E2M1 encoder, the table encoder of every element and rounding, the
integer SR encoder of E2M1 / E1M2 / INT4 (``rows_sr``: :func:`_sr_index`, and its FP32-pipe
twin), the fast E2M1 encoder on the FP32 pipe, the MX encoder on bf16x2 words; scale stores
and the cuBLAS layout; random bits. Helpers marked *GPU only* are inline PTX (the interpreter has none): the
launchers take them only where :func:`..capability.gpu_features` says the device has them,
and each has an integer twin they are tested against.

The fast E2M1 encoder (used by ``rows_bf16``, the fused RHT kernels, ``cols`` and the mma
kernel) moves the per-element work to the full-rate FP32 pipe:

* the magnitude from three fused multiply-adds that round ``a = |y|`` on the grids of step
  1/2, 1 and 2 *with the code offset folded into the addend*, so the three results share one
  exponent and compare as integers: ``u_k = bits(fma(a, 2^(1-k), 2^22 + k - 1)) = 0x4A800000
  + c_k`` with ``c_1 = RNE(2a)``, ``c_2 = RNE(a) + 2``, ``c_3 = RNE(a/2) + 4``; the code is
  ``min(u_1, u_2, u_3, 0x4A800007) - 0x4A800000`` (proved equal to the exact encoder over
  every float32 in the tests). MX folds its power-of-two multiplier into the fma (``fma(|x|,
  m * 2^(1-k), ...)``: x * m is exact, so no separate product);
* the sign: two-level ``y < 0`` (-0 and a product underflowing to -0 give code 0); MX: the
  sign bit of x (MX keeps -0, and x * m has the sign of x);
* blocks it cannot take (:func:`_needs_exact`: MX NaN scales, two-level multipliers below
  2^-16) are rare: a program that has one recomputes its tile with the exact encoder (one
  uniform branch per program).
"""

from __future__ import annotations

import triton
import triton.language as tl


# ---------------------------------------------------------------------------------------------
# Loads and amaxes
# ---------------------------------------------------------------------------------------------


@triton.jit
def _load_f32(ptrs, mask, BF16: tl.constexpr):
    """Load as float32; bf16 arrives as int16 bit patterns and widens by a shift (exact,
    subnormals included -- the CPU interpreter's own bf16 conversion flushes them)."""
    if BF16:
        v = tl.load(ptrs, mask=mask, other=0).to(tl.int32)
        return (v << 16).to(tl.float32, bitcast=True)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _bf16_group(w):
    """The four float32 values of a bf16 group held in an int64 word (widened exactly)."""
    lo = w.to(tl.int32)
    hi = (w >> 32).to(tl.int32)
    e0 = (lo << 16).to(tl.float32, bitcast=True)
    e1 = (lo & -65536).to(tl.float32, bitcast=True)
    e2 = (hi << 16).to(tl.float32, bitcast=True)
    e3 = (hi & -65536).to(tl.float32, bitcast=True)
    return e0, e1, e2, e3


@triton.jit
def _load_group(x_ptr, g, mask, IN_BF16: tl.constexpr):
    """Group g (int64 index) of the flat input as four float32 tensors."""
    if IN_BF16:
        w = tl.load(x_ptr + g, mask=mask, other=0)
        e0, e1, e2, e3 = _bf16_group(w)
    else:
        p = x_ptr + g * 4
        e0 = tl.load(p, mask=mask, other=0.0).to(tl.float32)
        e1 = tl.load(p + 1, mask=mask, other=0.0).to(tl.float32)
        e2 = tl.load(p + 2, mask=mask, other=0.0).to(tl.float32)
        e3 = tl.load(p + 3, mask=mask, other=0.0).to(tl.float32)
    return e0, e1, e2, e3


@triton.jit
def _unpack(w):
    """The two float32 values of a word holding two bf16 (first element in the low half)."""
    lo = (w << 16).to(tl.float32, bitcast=True)
    hi = (w & -65536).to(tl.float32, bitcast=True)
    return lo, hi


@triton.jit
def _abs_bits(v):
    return v.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def _amax2(a, b):
    return tl.maximum(tl.abs(a), tl.abs(b), propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _absmax4(m, e0, e1, e2, e3):
    """Running max of |e| with NaN propagation (a block holding a NaN has a NaN amax)."""
    m = tl.maximum(m, tl.abs(e0), propagate_nan=tl.PropagateNan.ALL)
    m = tl.maximum(m, tl.abs(e1), propagate_nan=tl.PropagateNan.ALL)
    m = tl.maximum(m, tl.abs(e2), propagate_nan=tl.PropagateNan.ALL)
    m = tl.maximum(m, tl.abs(e3), propagate_nan=tl.PropagateNan.ALL)
    return m


@triton.jit
def _absmax16(m, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15):
    m = _absmax4(m, y0, y1, y2, y3)
    m = _absmax4(m, y4, y5, y6, y7)
    m = _absmax4(m, y8, y9, y10, y11)
    return _absmax4(m, y12, y13, y14, y15)


# ---------------------------------------------------------------------------------------------
# Block scales (E8M0, UE4M3) on amax bit patterns
# ---------------------------------------------------------------------------------------------


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
    return tl.where(e >= -126, normal, 1 << 22).to(tl.float32, bitcast=True)  # 2^-127: subnormal


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
def _ue4m3_sat(s):
    """UE4M3 code of float32 s >= +0 (or NaN): min(s, 448) (NaN passes), then
    :func:`_ue4m3_rne` -- the integer twin of :func:`_ue4m3_cvt`."""
    return _ue4m3_rne(tl.where(s > 448.0, 448.0, s))


@triton.jit
def _ue4m3_cvt(s):
    """:func:`_ue4m3_rne` of float32 s >= +0 (or NaN) by the hardware conversion (sm_89+):
    cvt.rn.satfinite.e4m3x2.f32 rounds to nearest even, subnormals included, takes s > 448
    (Inf too) to 448 and NaN to NaN; the low 7 bits are the UE4M3 code (0x7F: NaN). Checked
    against _ue4m3_sat on every non-negative float32 (tests/backends/test_triton_gpu.py)."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 h; .reg .f32 z; .reg .b32 w; mov.f32 z, 0f00000000; "
        "cvt.rn.satfinite.e4m3x2.f32 h, z, $1; cvt.u32.u16 w, h; and.b32 $0, w, 127; }",
        "=r,f", [s], dtype=tl.int32, is_pure=True, pack=1)


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
def _load_hidden(ptrs, ASM: tl.constexpr):
    """float32 loads; ASM: by inline PTX (ld.global.nc), which triton's loop pipeliner does not
    see. Triton 3.6 cannot pipeline a TMA-fed wgmma loop that also holds a load depending on
    the dot's result (it would have to predicate the wgmma): the multiplier gather is one."""
    if ASM:
        return tl.inline_asm_elementwise("ld.global.nc.f32 $0, [$1];", "=r,l", [ptrs], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return tl.load(ptrs)


@triton.jit
def _block_scale(vmb, ts_ptr, mult_b, MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                 NAN_INF: tl.constexpr, SCALING: tl.constexpr, GATHER_ASM: tl.constexpr = False,
                 HW_CVT: tl.constexpr = False, MBITS: tl.constexpr = 1):
    """(scale code, element multiplier, nan-scale mask) of blocks whose amax has the bit
    pattern vmb (int32, sign clear; any NaN pattern for a block holding a NaN).

    Two-level (TE): s = min(vm * fp32(S_enc * fp32(1/6)), 448) (NaN passes), UE4M3 RNE,
    multiplier = the 128-entry table at ts[4:] (two_level_consts_kernel's; GATHER_ASM: see
    :func:`_load_hidden`); HW_CVT: the clamp and the rounding by one hardware conversion
    (:func:`_ue4m3_cvt`, GPU only). MX: exponent e by RULE (0 floor, 1 ceil, 2 even: amax rounded
    half-up to MBITS mantissa bits, the element's, then floor -- each of log2 amax, minus EMAX;
    3 rceil: ceil log2(amax * ts[2]), ts[2] = 1 / element max), clamped to
    [-127, 127], code e + 127 (255 for a NaN scale: a NaN block, or with NAN_INF an Inf
    one); multiplier 2^-e by SCALING (0 exact, 1 torchao's clamp at 2^-126, 2 rceil's 1.0
    for code 0), 0 for a NaN scale."""
    if MX:
        vmb = tl.where(vmb > 0x7F800000, 0x7FC00000, vmb)
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
            e = (((safe + (1 << (22 - MBITS))) & 0x7F800000) >> 23) - 127 - EMAX
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
        s = vmb.to(tl.float32, bitcast=True) * mult_b
        if HW_CVT:
            scode = _ue4m3_cvt(s)
        else:
            scode = _ue4m3_sat(s)  # min(min(s, FLT_MAX), 448); NaN passes
        mult = _load_hidden(ts_ptr + 4 + scode, GATHER_ASM)
        nan_scale = scode == 0x7F
    return scode, mult, nan_scale


@triton.jit
def _mult_b(ts_ptr, MX: tl.constexpr):
    if MX:
        return 1.0
    else:
        return tl.load(ts_ptr) * tl.load(ts_ptr + 2)


@triton.jit
def _block_scale_f32(vm, ts_ptr, MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                     NAN_INF: tl.constexpr, SCALING: tl.constexpr):
    """(scale code int32, element multiplier float32, nan-scale mask) of blocks with amax vm.

    vm is the float32 amax (a NaN of any payload for a block holding a NaN); the rules are
    :func:`_block_scale`'s, on vm's sign-clear bit pattern."""
    vmb = vm.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    return _block_scale(vmb, ts_ptr, _mult_b(ts_ptr, MX), MX, RULE, EMAX, NAN_INF, SCALING)


# ---------------------------------------------------------------------------------------------
# Element codes
# ---------------------------------------------------------------------------------------------


@triton.jit
def _e2m1_rne(y, MX: tl.constexpr):
    """E2M1 code of float32 y, RNE, saturating, NaN -> 0, -0 kept (MX) or made +0 (two-level).

    Magnitude: with a = min(|y|, 6) (NaN -> 0), the three roundings of a to the grids of step
    1/2, 1 and 2 by one float32 addition each, r_k = RNE(a / 2^(k-1)), give the codes
    c1 = r_1, c2 = r_2 + 2, c3 = r_3 + 4; each is exact on its binade ([0, 2), [2, 4),
    [4, 6]) and never below the right code elsewhere, so the code is min(c1, c2, c3)."""
    a = tl.minimum(tl.maximum(tl.abs(y), 0.0), 6.0)
    c1 = (a + 4194304.0).to(tl.int32, bitcast=True) - 0x4A800000
    c2 = (a + 8388608.0).to(tl.int32, bitcast=True) - (0x4B000000 - 2)
    c3 = (a + 16777216.0).to(tl.int32, bitcast=True) - (0x4B800000 - 4)
    c = tl.minimum(tl.minimum(c1, c2), c3)
    if MX:
        neg = (y.to(tl.int32, bitcast=True) < 0) & (y == y)
    else:
        neg = y < 0.0
    return c | tl.where(neg, 8, 0)


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
    return _signed_code(y, tl.minimum(idx, NTHR - 1), INT4, NEGZERO, ZERO_POS)


@triton.jit
def _signed_code(y, idx, INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                 NAN_CHECK: tl.constexpr = True):
    """The code of scaled float32 y whose magnitude rounds to index idx (0..7): the sign of
    y (ZERO_POS: y < 0, so -0 is +0; else its sign bit) as two's complement (INT4) or a
    sign bit (bit 3; without NEGZERO not for index 0); NaN -> 0 (without NAN_CHECK: the
    caller knows no y is NaN)."""
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
    if NAN_CHECK:
        code = tl.where(y != y, 0, code)
    return code


@triton.jit
def _sr_index(a, r, SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr, SR_SCALE: tl.constexpr):
    """Stochastic rounding of magnitudes a = |y| (float32, NaN allowed: its result is
    discarded) onto the 8 magnitudes of E2M1, or of a uniform grid (E1M2, INT4), with random
    integers r in [0, 2^SR_BITS) (int32): the magnitude index, by integer operations.

    With the step s and rbits N of fp4spec.rounding (up iff frac * 2^N + r >= 2^N), the
    index on a uniform grid of step s is floor(a / s + r / 2^N) = (floor(a * 2^N / s) + r)
    >> N, since r is an integer. So:

    1. a' = min(a, SR_MAX) (NaN -> SR_MAX): above the largest magnitude SR saturates.
    2. xi = floor(a' * SR_SCALE), SR_SCALE = 2^N / s0 with s0 the finest step (0.5 for E2M1
       and E1M2, 1 for INT4): exact (a power-of-two product below 2^28, a truncating
       conversion).
    3. c = (xi + r) >> N, the index on the grid of step s0 (E1M2, INT4: the answer).
    4. E2M1 (steps 1/2, 1, 2 on [0, 2), [2, 4), [4, 6]): also c2 = ((xi >> 1) + r) >> N + 2
       and c3 = ((xi >> 2) + r) >> N + 4 (floor(floor(v) / 2) = floor(v / 2)); each is the
       right index on its binade and never below it elsewhere, so the index is
       min(c, c2, c3) -- as for the fast RNE encoder."""
    xi = (tl.where(a < SR_MAX, a, SR_MAX) * SR_SCALE).to(tl.int32)
    c = (xi + r) >> SR_BITS
    if E2M1:
        c2 = (((xi >> 1) + r) >> SR_BITS) + 2
        c3 = (((xi >> 2) + r) >> SR_BITS) + 4
        c = tl.minimum(c, tl.minimum(c2, c3))
    return c


def _rd_floor_asm(mult: str, magic: str) -> str:
    return f"{{ .reg .f32 t; fma.rm.f32 t, $1, {mult}, $2; add.rm.f32 $0, t, {magic}; }}"


#: :func:`_rd_floor`'s PTX per grid: (1 / step, 2^23 - 1 + the grid's first index) as float32
#: immediates -- step 1/2 from index 0, step 1 from 0, step 1 from 2, step 2 from 4.
_RD_HALF = tl.constexpr(_rd_floor_asm("0f40000000", "0f4AFFFFFE"))
_RD_ONE = tl.constexpr(_rd_floor_asm("0f3F800000", "0f4AFFFFFE"))
_RD_ONE_2 = tl.constexpr(_rd_floor_asm("0f3F800000", "0f4B000001"))
_RD_TWO_4 = tl.constexpr(_rd_floor_asm("0f3F000000", "0f4B000003"))


@triton.jit
def _rd_floor(a, rho1, ASM: tl.constexpr):
    """bits(RD(RD(a / step + rho1) + 2^23 - 1 + i0)) for one grid of :data:`_RD_HALF` ...:
    0x4B000000 + i0 + floor(a / step + rho) where rho1 = 1 + rho (GPU only: directed
    rounding). RD keeps the floor (the integer below is a float32 at these magnitudes), and
    RD onto the integers of [2^23, 2^24) is the floor."""
    return tl.inline_asm_elementwise(ASM, "=r,f,f", [a, rho1], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _sr_index_fp32(a, r, SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr, HALF_STEP: tl.constexpr):
    """:func:`_sr_index` on the FP32 pipe (GPU only; SR_BITS <= 23): with rho = r / 2^N held
    exactly as rho1 = 1 + rho (r's bits in the mantissa: one shift-or), the index on a grid
    of step s from i0 is floor(a / s + rho) + i0, by one fma and one add rounding down
    (:func:`_rd_floor`), in place of a conversion and integer shifts and adds. Equal to
    :func:`_sr_index` (the GPU tests: every bf16 value, the decision points, every sr_bits)."""
    ap = tl.where(a < SR_MAX, a, SR_MAX)
    rho1 = ((r << (23 - SR_BITS)) | 0x3F800000).to(tl.float32, bitcast=True)
    if E2M1:
        u = tl.minimum(tl.minimum(_rd_floor(ap, rho1, _RD_HALF), _rd_floor(ap, rho1, _RD_ONE_2)),
                       _rd_floor(ap, rho1, _RD_TWO_4))
    elif HALF_STEP:
        u = _rd_floor(ap, rho1, _RD_HALF)
    else:
        u = _rd_floor(ap, rho1, _RD_ONE)
    return u - 0x4B000000


@triton.jit
def _sr_code(y, r, SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr, SR_SCALE: tl.constexpr,
             INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, FP32_PIPE: tl.constexpr = False,
             HALF_STEP: tl.constexpr = True, NAN_CHECK: tl.constexpr = True):
    """The SR code of scaled float32 y with random integer r (int32): :func:`_sr_index` (or
    FP32_PIPE, GPU only: :func:`_sr_index_fp32`) of |y|, signed by :func:`_signed_code`
    (what :func:`_element_codes` gives with SR; NAN_CHECK as there)."""
    if FP32_PIPE:
        idx = _sr_index_fp32(tl.abs(y), r, SR_BITS, E2M1, SR_MAX, HALF_STEP)
    else:
        idx = _sr_index(tl.abs(y), r, SR_BITS, E2M1, SR_MAX, SR_SCALE)
    return _signed_code(y, idx, INT4, NEGZERO, ZERO_POS, NAN_CHECK)


@triton.jit
def _code(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST: tl.constexpr, MX: tl.constexpr,
          NTHR: tl.constexpr, SR: tl.constexpr, INT4: tl.constexpr, NEGZERO: tl.constexpr,
          ZERO_POS: tl.constexpr):
    if FAST:
        return _e2m1_rne(y, MX)
    else:
        return _element_codes(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, NTHR, SR, INT4, NEGZERO, ZERO_POS)


@triton.jit
def _mag(u1, u2, u3):
    """0x4A800000 + E2M1 magnitude code from the three grid roundings (bit patterns)."""
    return tl.minimum(tl.minimum(u1, u2), tl.minimum(u3, 0x4A800007))


@triton.jit
def _mag_y(y, half=0.5, quarter=0.25):
    """Magnitude code of float32 y (not NaN): |y| rounded on the three grids by fma.

    half, quarter: the grid multipliers 1/2 and 1/4, literals by default. A kernel short of
    registers passes them as kernel arguments: with a literal multiplier and a literal addend
    in one fma, ptxas rematerialises the multiplier before every fma (the mma kernel)."""
    a = tl.abs(y)
    u1 = (a + 4194304.0).to(tl.int32, bitcast=True)
    u2 = tl.fma(a, half, 4194305.0).to(tl.int32, bitcast=True)
    u3 = tl.fma(a, quarter, 4194306.0).to(tl.int32, bitcast=True)
    return _mag(u1, u2, u3)


@triton.jit
def _mag_scaled(x, m1, m2, m4):
    """Magnitude code of x * m for a power-of-two m (m1 = m, m2 = m/2, m4 = m/4, exact):
    the fma rounds the exact product once, as RNE of the (exact) float32 product would."""
    a = tl.abs(x)
    u1 = tl.fma(a, m1, 4194304.0).to(tl.int32, bitcast=True)
    u2 = tl.fma(a, m2, 4194305.0).to(tl.int32, bitcast=True)
    u3 = tl.fma(a, m4, 4194306.0).to(tl.int32, bitcast=True)
    return _mag(u1, u2, u3)


@triton.jit
def _nibble(x, mult, m2, m4, MX: tl.constexpr, half=0.5, quarter=0.25):
    """Unsigned magnitude pattern u (0x4A800000 + code, int32) and an int32 whose bit 31 is
    the sign of bf16 value x (as float32) times the block multiplier.

    Two-level: t = fma(x, mult, +0) is the float32 product y, but +0 where y is -0 (the sign
    is ``y < 0``); it equals y when no nonzero product underflows to zero, which the caller
    checks per tile (mult >= 2^-16). MX: the product is exact and keeps the sign of x.
    half, quarter: as :func:`_mag_y`."""
    if MX:
        u = _mag_scaled(x, mult, m2, m4)
        s = x.to(tl.int32, bitcast=True)
    else:
        t = tl.fma(x, mult, 0.0)
        u = _mag_y(t, half, quarter)
        s = t.to(tl.int32, bitcast=True)
    return u, s


@triton.jit
def _needs_exact(mult, nan_scale, MX: tl.constexpr):
    """Blocks the fast encoder may get wrong: MX blocks with a NaN scale (x * 0 is NaN for an
    infinite x); two-level blocks whose multiplier could take a nonzero product to -0 (for
    mult >= 2^-16 every nonzero bf16 product is at least 2^-149)."""
    if MX:
        return nan_scale
    else:
        return mult < 1.52587890625e-05


@triton.jit
def _pack_bytes(b):
    """[..., 4] int32 bytes (2-D or 3-D) -> [...] int32 word, element j in byte j."""
    if len(b.shape) == 2:
        e, o = tl.split(tl.reshape(b, (b.shape[0], 2, 2)))
    else:
        e, o = tl.split(tl.reshape(b, (b.shape[0], b.shape[1], 2, 2)))
    h = e + (o << 8)
    h0, h1 = tl.split(h)
    return h0 + (h1 << 16)


@triton.jit
def _split4(b):
    """[..., 4] (2-D or 3-D) -> its four [...] slices along the last axis."""
    if len(b.shape) == 2:
        e, o = tl.split(tl.reshape(b, (b.shape[0], 2, 2)))
    else:
        e, o = tl.split(tl.reshape(b, (b.shape[0], b.shape[1], 2, 2)))
    b0, b2 = tl.split(e)
    b1, b3 = tl.split(o)
    return b0, b1, b2, b3


@triton.jit
def _prmt(a, b, ASM: tl.constexpr):
    """``prmt.b32 $0, $1, $2, SEL;`` (byte permute, ASM) of (a, b): selector nibble j picks
    byte j of the result from the bytes of (a, b) (indices 0-3 of a, 4-7 of b); its bit 3
    replicates the picked byte's top bit (0xB: a's sign, 0xF: b's sign)."""
    return tl.inline_asm_elementwise(ASM, "=r,r,r", [a, b], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _sign_bytes(s):
    """[..., 4] int32 -> [...] int32 whose byte j is 0xFF if bit 31 of s[..., j] is set, else
    0: three byte permutes for four signs (GPU only)."""
    s0, s1, s2, s3 = _split4(s)
    lo = _prmt(s0, s1, "prmt.b32 $0, $1, $2, 0x00FB;")  # bytes 0, 1: signs of s0, s1
    hi = _prmt(s2, s3, "prmt.b32 $0, $1, $2, 0xFB00;")  # bytes 2, 3: signs of s2, s3
    return _prmt(lo, hi, "prmt.b32 $0, $1, $2, 0x7610;")  # bytes 0, 1 of lo, 2, 3 of hi


@triton.jit
def _pair_codes(lo, hi, mult, m2, m4, MX: tl.constexpr, half=0.5, quarter=0.25, PRMT: tl.constexpr = False):
    """[..., 4] float32 pairs (lo, hi: elements 2j, 2j + 1 of 8) -> [...] int32 of their 8
    codes (first in the low nibble); half, quarter as :func:`_mag_y`. PRMT (GPU only): the
    8 sign bits gathered by byte permutes (six per word) instead of a shift and a mask per
    element."""
    ul, sl = _nibble(lo, mult, m2, m4, MX, half, quarter)
    uh, sh = _nibble(hi, mult, m2, m4, MX, half, quarter)
    if PRMT:
        mag = _pack_bytes((ul - 0x4A800000) + (uh - 0x4A800000) * 16)
        # byte j: sign of element 2j at bit 3, of element 2j + 1 at bit 7
        return mag | (_sign_bytes(sl) & 0x08080808) | (_sign_bytes(sh) & -0x7F7F7F80)
    # (u - 0x4A800000) + 8 s per nibble; the constants fold into one subtraction per word
    byte = (ul - 0x4A800000) + ((sl >> 31) & 1) * 8 + (uh - 0x4A800000) * 16 + ((sh >> 31) & 1) * 128
    return _pack_bytes(byte)


@triton.jit
def _word_codes(w, mult, m2, m4, MX: tl.constexpr, half=0.5, quarter=0.25, PRMT: tl.constexpr = False):
    """[..., 4] int32 words (8 bf16) -> [...] int32 of their 8 codes (first in the low nibble);
    half, quarter, PRMT as :func:`_pair_codes`."""
    lo, hi = _unpack(w)
    return _pair_codes(lo, hi, mult, m2, m4, MX, half, quarter, PRMT)


@triton.jit
def _pair_codes_exact(lo, hi, mult, MX: tl.constexpr):
    byte = _e2m1_rne(lo * mult, MX) + (_e2m1_rne(hi * mult, MX) << 4)
    return _pack_bytes(byte)


@triton.jit
def _word_codes_exact(w, mult, MX: tl.constexpr):
    lo, hi = _unpack(w)
    return _pair_codes_exact(lo, hi, mult, MX)


# ---------------------------------------------------------------------------------------------
# The MX encoder on bf16x2 words (GPU only)
# ---------------------------------------------------------------------------------------------


#: 0x42804280 * 0x1111 mod 2^32 as int32: the bf16 grid magic 64 (0x4280) of both halves of four
#: words shifted by 0, 4, 8, 12 bits (_nibbles_bf16x2)
_B0_NIBBLES = tl.constexpr(-286332288)

@triton.jit
def _bf16x2_pack(lo, hi):
    """float32 lo, hi -> int32 word of bf16(lo) (low half) and bf16(hi) (high half), both RNE
    (NaN -> 0x7FFF): one cvt.rn.bf16x2.f32 (GPU only)."""
    return tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,f,f", [lo, hi], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _max_u16x2(a, b):
    """Per 16-bit half, the unsigned max of int32 words a and b (max.u16x2, sm_90, GPU only)."""
    return tl.inline_asm_elementwise("max.u16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.int32, is_pure=True,
                                     pack=1)


@triton.jit
def _max_halves_f32(w):
    """The float32 bit pattern of the larger of the two sign-clear bf16 halves of int32 w (a
    block amax folded by :func:`_max_u16x2`)."""
    return tl.maximum(w & 0xFFFF, w >> 16) << 16


@triton.jit
def _mag_bf16x2(a, m1, m2, m4):
    """The E2M1 grid roundings of :func:`_mag_scaled` on two bf16 values at once (GPU only):
    a holds two sign-clear bf16 values, m1, m2, m4 the bf16x2 words {m, m}, {m/2, m/2},
    {m/4, m/4} of a power of two m; per half the result is 0x4280 + the magnitude code of
    a * m, for a * m < 8.

    bf16 at 64 has the ulp 1/2 that float32 has at 2^22, so the three fma.rn.bf16x2 with the
    addends 64, 65, 66 (0x4280, 0x4282, 0x4284) round the exact product once onto the grids
    of step 1/2, 1 and 2 with the code offset folded in, as _mag_scaled's float32 fmas do;
    the results share one exponent and compare as 16-bit integers (min.u16x2; 0x4287 is
    code 7). One instruction covers two elements: half of _mag_scaled's count."""
    return tl.inline_asm_elementwise(
        "{ .reg .b32 k, u, v, w; "
        "mov.b32 k, 0x42804280; fma.rn.bf16x2 u, $1, $2, k; "
        "mov.b32 k, 0x42824282; fma.rn.bf16x2 v, $1, $3, k; "
        "mov.b32 k, 0x42844284; fma.rn.bf16x2 w, $1, $4, k; "
        "mov.b32 k, 0x42874287; min.u16x2 u, u, v; min.u16x2 w, w, k; min.u16x2 $0, u, w; }",
        "=r,r,r,r,r", [a, m1, m2, m4], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _nibbles_bf16x2(u0, u1, u2, u3, x0, x1, x2, x3):
    """One int32 of 8 MX codes (element k in bits 4k..4k+3) from the bf16x2 words of a group
    of 8 elements laid out as x_r = (element r, element r + 4), r = 0..3 (GPU only).

    u_r: :func:`_mag_bf16x2` of |x_r|; x_r: the words with their signs. Magnitudes: the four
    words shifted by 0, 4, 8, 12 bits and summed put half h of u_r at nibble r + 4h; the magic
    0x4280 of every half comes off as one constant (exact modulo 2^32, and no nibble carries
    since each code is below 8). Signs (MX: the sign bit of x, -0 included): two byte
    permutes with sign replication give the bytes 0x00 / 0xFF of the even elements (from x0,
    x2) and of the odd ones (x1, x3); their low and high nibbles merged, bit 3 of each nibble
    is the sign."""
    mag = u0 + (u1 << 4) + (u2 << 8) + (u3 << 12) - _B0_NIBBLES
    ev = _prmt(x0, x2, "prmt.b32 $0, $1, $2, 0xFBD9;")  # signs of elements 0, 2, 4, 6 as bytes
    od = _prmt(x1, x3, "prmt.b32 $0, $1, $2, 0xFBD9;")  # signs of elements 1, 3, 5, 7
    sgn = (ev & 0x0F0F0F0F) | (od & -0x0F0F0F10)  # -0x0F0F0F10 = 0xF0F0F0F0
    return mag | (sgn & -0x77777778)  # -0x77777778 = 0x88888888: bit 3 of every nibble


@triton.jit
def _mx_mults_bf16x2(mult):
    """The bf16x2 words {m, m}, {m/2, m/2}, {m/4, m/4} of float32 power-of-two multipliers m
    (exact: 2^-129 and up are bf16 values) for :func:`_mag_bf16x2` (GPU only)."""
    return (_bf16x2_pack(mult, mult), _bf16x2_pack(mult * 0.5, mult * 0.5),
            _bf16x2_pack(mult * 0.25, mult * 0.25))


@triton.jit
def _mx_codes_bf16x2(x0, x1, x2, x3, m1, m2, m4):
    """One int32 of the 8 MX codes of a group given as its four bf16x2 words x_r = (element r,
    element r + 4) with their signs, times the multipliers of :func:`_mx_mults_bf16x2` (GPU
    only; the values times m below 8)."""
    c = 0x7FFF7FFF
    return _nibbles_bf16x2(_mag_bf16x2(x0 & c, m1, m2, m4), _mag_bf16x2(x1 & c, m1, m2, m4),
                           _mag_bf16x2(x2 & c, m1, m2, m4), _mag_bf16x2(x3 & c, m1, m2, m4), x0, x1, x2, x3)


# ---------------------------------------------------------------------------------------------
# Scale stores, random bits
# ---------------------------------------------------------------------------------------------


@triton.jit
def _cublas_offset(r, c, CPAD):
    """Byte offset of scale (r, c) in the cuBLAS 128x4 blocked layout (fp4spec.layouts)."""
    return ((r // 128) * (CPAD // 4) + (c // 4)) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)


@triton.jit
def _store_scales(s_ptr, blk, scode, mask, NSC, CPAD, CUBLAS: tl.constexpr):
    """Scale code of block blk (row-major index over (rows, NSC) scale columns)."""
    if CUBLAS:
        off = _cublas_offset(blk // NSC, blk % NSC, CPAD)
    else:
        off = blk
    tl.store(s_ptr + off, scode.to(tl.uint8), mask=mask)


@triton.jit
def _philox_bits4(seed, g, SR_BITS: tl.constexpr):
    """The random integers (int32 in [0, 2^SR_BITS)) of the four elements of group g (int64):
    the top SR_BITS bits of the four words of Philox4x32-10 at counter g (tl.randint4x), as
    fp4spec.philox defines them."""
    u0, u1, u2, u3 = tl.randint4x(seed, g)
    s: tl.constexpr = 32 - SR_BITS
    return ((u0.to(tl.uint32) >> s).to(tl.int32), (u1.to(tl.uint32) >> s).to(tl.int32),
            (u2.to(tl.uint32) >> s).to(tl.int32), (u3.to(tl.uint32) >> s).to(tl.int32))


@triton.jit
def _rbits4(r_ptr, seed, g, mask, SR: tl.constexpr, SR_BITS: tl.constexpr):
    """Random bits (as float32) of the four elements of group g: given (int32 tensor), or
    Philox4x32-10 (tl.randint4x with counter g): the top SR_BITS bits of each 32-bit word."""
    if SR == 1:
        p = r_ptr + g * 4
        r0 = tl.load(p, mask=mask, other=0).to(tl.float32)
        r1 = tl.load(p + 1, mask=mask, other=0).to(tl.float32)
        r2 = tl.load(p + 2, mask=mask, other=0).to(tl.float32)
        r3 = tl.load(p + 3, mask=mask, other=0).to(tl.float32)
    else:
        u0, u1, u2, u3 = _philox_bits4(seed, g, SR_BITS)
        r0, r1, r2, r3 = u0.to(tl.float32), u1.to(tl.float32), u2.to(tl.float32), u3.to(tl.float32)
    return r0, r1, r2, r3


@triton.jit
def _values_out(v, OUT_BF16: tl.constexpr):
    """Dequantized float32 values as the kernels store them: v, or (OUT_BF16) int16 bfloat16
    bit patterns -- v rounded to nearest even on its bit pattern, overflow to +-Inf, every NaN
    0x7FC0 (:func:`fp4spec.rht.bf16_rne` with the float32 NaN 0x7FC00000). On integers: the
    interpreter's float32 -> bfloat16 store truncates."""
    if OUT_BF16:
        bits = v.to(tl.int32, bitcast=True)
        r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        return tl.where(v != v, 0x7FC0, r).to(tl.int16)
    else:
        return v
