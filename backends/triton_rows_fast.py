"""Rowwise bf16 -> E2M1 quantize kernels aimed at the copy bandwidth (issue #7, part 4).

Same outputs as :func:`triton_backend.quantize_packed` for rowwise RNE of a contiguous bf16
tensor with 1 x K blocks (K = 16 or 32, a multiple of 16): packed codes (two per byte, first
element in the low nibble), uint8 scale codes (row-major), and the TE tensor scale S_dec.
Schemes: two-level TE (``nvfp4``) and MX (``mxfp4``, every scale rule and profile the
triton backend takes).

Why these kernels exist (benchmarks/NOTES-triton.md): the v2 kernels issue about 28
instructions per element, most of them on the half-rate integer/logic pipe (min/max, compare,
select, logic, shift); at 85 % of the copy the H200 has about 23 issue slots per element.
Here the work per element is moved to the full-rate FP32 pipe and the rest is cut:

* E2M1 magnitude from three fused multiply-adds that round ``a = |y|`` on the grids of
  step 1/2, 1 and 2 *with the code offset folded into the addend*, so the three results
  share one exponent and compare as integers: ``u_k = bits(fma(a, 2^(1-k), 2^22 + k - 1))
  = 0x4A800000 + c_k`` with ``c_1 = RNE(2a)``, ``c_2 = RNE(a) + 2``, ``c_3 = RNE(a/2) + 4``;
  the code is ``min(u_1, u_2, u_3, 0x4A800007) - 0x4A800000`` (proved equal to the v2
  encoder over every float32 in the tests). MX folds its power-of-two multiplier into the
  fma (``fma(|x|, m * 2^(1-k), ...)``: x * m is exact, so no separate product).
* Sign: two-level ``y < 0`` (-0 and a product that underflowing to -0 give code 0); MX: the
  sign bit of x (MX keeps -0, and x * m has the sign of x).
* Codes are joined with multiply-adds into one int32 per 8 elements; a block's amax,
  scale and codes stay in the thread that loaded it (variant ``tb``) or in a thread pair.
* Blocks whose MX scale is NaN (a NaN or an Inf in the block) are rare: a program that has
  one recomputes its tile with the exact v2 encoder (one uniform branch per program).

Variants (``VARIANTS``):

* ``tb`` -- one block per thread: K/8 16-byte loads per thread at the block stride, amax,
  scale and codes in registers, one 8-byte (K=16) or 16-byte (K=32) store of codes.
* ``pair`` -- a [BR, K/8, 4] int32 tile (16 bytes per thread, a warp reads 512 contiguous
  bytes per load): K/8 threads per block, amax by a cross-thread max, one int32 of codes
  per thread (a warp writes 128 contiguous bytes).
* ``tbp`` -- ``tb`` in a persistent grid (a fixed number of programs loop over tiles).
"""

from __future__ import annotations

import triton
import triton.language as tl

VARIANTS = ("tb", "pair", "tbp")

#: Default tiles: blocks per program and warps, per variant. ``tb``: the H200 sweep
#: (benchmarks/bench_gpu_rows.py; BR=256 w=8 as good); the others untuned guesses.
DEFAULTS = {"tb": (128, 4), "pair": (256, 8), "tbp": (256, 4)}
#: Programs per SM of the persistent variant.
PERSISTENT_PER_SM = 8

_K0 = 0x4A800000  # bits of 2^22: u_k = _K0 + c_k


# ---------------------------------------------------------------------------------------------
# Element encoding
# ---------------------------------------------------------------------------------------------


@triton.jit
def _mag(u1, u2, u3):
    """0x4A800000 + E2M1 magnitude code from the three grid roundings (bit patterns)."""
    return tl.minimum(tl.minimum(u1, u2), tl.minimum(u3, 0x4A800007))


@triton.jit
def _mag_y(y, half=0.5, quarter=0.25):
    """Magnitude code of float32 y (not NaN): |y| rounded on the three grids by fma.

    half, quarter: the grid multipliers 1/2 and 1/4, literals by default. A kernel short of
    registers passes them as kernel arguments: with a literal multiplier and a literal addend
    in one fma, ptxas rematerialises the multiplier before every fma (triton_rht_mma)."""
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
def _e2m1_exact(y, MX: tl.constexpr):
    """The v2 encoder (triton_kernels._e2m1_rne): NaN -> 0, -0 kept (MX) or made +0."""
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
def _needs_exact(mult, nan_scale, MX: tl.constexpr):
    """Blocks the fast encoder may get wrong: MX blocks with a NaN scale (x * 0 is NaN for an
    infinite x); two-level blocks whose multiplier could take a nonzero product to -0 (for
    mult >= 2^-16 every nonzero bf16 product is at least 2^-149)."""
    if MX:
        return nan_scale
    else:
        return mult < 1.52587890625e-05


@triton.jit
def _unpack(w):
    """The two float32 values of a word holding two bf16 (first element in the low half)."""
    lo = (w << 16).to(tl.float32, bitcast=True)
    hi = (w & -65536).to(tl.float32, bitcast=True)
    return lo, hi


@triton.jit
def _amax2(a, b):
    return tl.maximum(tl.abs(a), tl.abs(b), propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _pack4(b):
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
        mag = _pack4((ul - 0x4A800000) + (uh - 0x4A800000) * 16)
        # byte j: sign of element 2j at bit 3, of element 2j + 1 at bit 7
        return mag | (_sign_bytes(sl) & 0x08080808) | (_sign_bytes(sh) & -0x7F7F7F80)
    # (u - 0x4A800000) + 8 s per nibble; the constants fold into one subtraction per word
    byte = (ul - 0x4A800000) + ((sl >> 31) & 1) * 8 + (uh - 0x4A800000) * 16 + ((sh >> 31) & 1) * 128
    return _pack4(byte)


@triton.jit
def _word_codes(w, mult, m2, m4, MX: tl.constexpr, half=0.5, quarter=0.25, PRMT: tl.constexpr = False):
    """[..., 4] int32 words (8 bf16) -> [...] int32 of their 8 codes (first in the low nibble);
    half, quarter, PRMT as :func:`_pair_codes`."""
    lo, hi = _unpack(w)
    return _pair_codes(lo, hi, mult, m2, m4, MX, half, quarter, PRMT)


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


@triton.jit
def _pair_codes_exact(lo, hi, mult, MX: tl.constexpr):
    byte = _e2m1_exact(lo * mult, MX) + (_e2m1_exact(hi * mult, MX) << 4)
    return _pack4(byte)


@triton.jit
def _word_codes_exact(w, mult, MX: tl.constexpr):
    lo, hi = _unpack(w)
    return _pair_codes_exact(lo, hi, mult, MX)


# ---------------------------------------------------------------------------------------------
# Block scales (also triton_kernels._block_scale's: one implementation on amax bit patterns)
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
    against _ue4m3_sat on every non-negative float32 on the H200
    (benchmarks/check_gpu_e4m3.py)."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 h; .reg .f32 z; .reg .b32 w; mov.f32 z, 0f00000000; "
        "cvt.rn.satfinite.e4m3x2.f32 h, z, $1; cvt.u32.u16 w, h; and.b32 $0, w, 127; }",
        "=r,f", [s], dtype=tl.int32, is_pure=True, pack=1)


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
                 HW_CVT: tl.constexpr = False):
    """(scale code, element multiplier, nan-scale mask) of blocks whose amax has the bit
    pattern vmb (int32, sign clear; any NaN pattern for a block holding a NaN).

    Two-level (TE): s = min(vm * fp32(S_enc * fp32(1/6)), 448) (NaN passes), UE4M3 RNE,
    multiplier = the 128-entry table at ts[4:] (mult_table_kernel's; GATHER_ASM: see
    :func:`_load_hidden`); HW_CVT: the clamp and the rounding by one hardware conversion
    (:func:`_ue4m3_cvt`, GPU only). MX: exponent e by RULE (0 floor, 1 ceil, 2 even: of log2 amax,
    minus EMAX; 3 rceil: ceil log2(amax * ts[2]), ts[2] = 1 / element max), clamped to
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


# ---------------------------------------------------------------------------------------------
# Variant tb: one block per thread
# ---------------------------------------------------------------------------------------------


@triton.jit
def _tb_tile(x_ptr, q_ptr, s_ptr, ts_ptr, mult_b, tile, NBLK,
             BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
             EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr,
             HW: tl.constexpr = False):
    """Tile `tile` (BR blocks; HW, GPU only: the hardware UE4M3 conversion, _block_scale's
    HW_CVT, and the sign bits by byte permutes, _pair_codes's PRMT). x_ptr: int32 words (2 bf16), K/2 per block; q_ptr: int32
    words of codes, K/8 per block; s_ptr: uint8 scale codes."""
    W: tl.constexpr = K // 2
    r = tl.arange(0, BR)
    c = tl.arange(0, 4)
    blk0 = tl.cast(tile, tl.int64) * BR
    xb = x_ptr + blk0 * W
    offs = r[:, None] * W + c[None, :]
    if EVEN:
        m2d = None
        w0 = tl.load(xb + offs)
        w1 = tl.load(xb + offs + 4)
        if K == 32:
            w2 = tl.load(xb + offs + 8)
            w3 = tl.load(xb + offs + 12)
    else:
        m1d = (blk0 + r) < NBLK
        m2d = m1d[:, None]
        w0 = tl.load(xb + offs, mask=m2d, other=0)
        w1 = tl.load(xb + offs + 4, mask=m2d, other=0)
        if K == 32:
            w2 = tl.load(xb + offs + 8, mask=m2d, other=0)
            w3 = tl.load(xb + offs + 12, mask=m2d, other=0)
    l0, h0 = _unpack(w0)
    l1, h1 = _unpack(w1)
    am = _max_nan(_amax2(l0, h0), _amax2(l1, h1))
    if K == 32:
        l2, h2 = _unpack(w2)
        l3, h3 = _unpack(w3)
        am = _max_nan(am, _max_nan(_amax2(l2, h2), _amax2(l3, h3)))
    # sign-clear float32 patterns: the max of the patterns is the amax (a NaN above every number)
    vmb = tl.max(am.to(tl.int32, bitcast=True), axis=1)
    scode, mult, nan_scale = _block_scale(vmb, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING, False, HW)
    mb = mult[:, None]
    m2 = mb * 0.5
    m4 = mb * 0.25
    q0 = _word_codes(w0, mb, m2, m4, MX, 0.5, 0.25, HW)
    q1 = _word_codes(w1, mb, m2, m4, MX, 0.5, 0.25, HW)
    if K == 32:
        q2 = _word_codes(w2, mb, m2, m4, MX, 0.5, 0.25, HW)
        q3 = _word_codes(w3, mb, m2, m4, MX, 0.5, 0.25, HW)
    if SLOW:
        if tl.max(_needs_exact(mult, nan_scale, MX).to(tl.int32), axis=0) != 0:  # rare: exact tile
            q0 = _word_codes_exact(w0, mb, MX)
            q1 = _word_codes_exact(w1, mb, MX)
            if K == 32:
                q2 = _word_codes_exact(w2, mb, MX)
                q3 = _word_codes_exact(w3, mb, MX)
    if not MX:
        keep = tl.where(nan_scale, 0, -1)  # NaN scale code: every element code 0
        q0 = q0 & keep
        q1 = q1 & keep
    if K == 16:
        q = tl.join(q0, q1)  # [BR, 2]: words 0, 1 of each block
    else:
        q = tl.reshape(tl.join(tl.join(q0, q2), tl.join(q1, q3)), (BR, 4))
    oq = r[:, None] * (K // 8) + tl.arange(0, K // 8)[None, :]
    qb = q_ptr + blk0 * (K // 8)
    sb = s_ptr + blk0
    if EVEN:
        tl.store(qb + oq, q)
        tl.store(sb + r, scode.to(tl.uint8))
    else:
        tl.store(qb + oq, q, mask=m2d)
        tl.store(sb + r, scode.to(tl.uint8), mask=m1d)


@triton.jit
def rows_tb_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK,
                   BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                   EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr = True,
                   HW: tl.constexpr = False):
    mult_b = _mult_b(ts_ptr, MX)
    _tb_tile(x_ptr, q_ptr, s_ptr, ts_ptr, mult_b, tl.program_id(0), NBLK,
             BR, K, EVEN, MX, RULE, EMAX, NAN_INF, SCALING, SLOW, HW)


@triton.jit
def rows_tbp_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK, NTILES,
                    BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                    EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr = True):
    """Persistent grid: program p does tiles p, p + P, p + 2P, ..."""
    mult_b = _mult_b(ts_ptr, MX)
    for tile in range(tl.program_id(0), NTILES, tl.num_programs(0)):
        _tb_tile(x_ptr, q_ptr, s_ptr, ts_ptr, mult_b, tile, NBLK,
                 BR, K, EVEN, MX, RULE, EMAX, NAN_INF, SCALING, SLOW)


# ---------------------------------------------------------------------------------------------
# Variant pair: [BR, K/8, 4] words, K/8 threads per block, coalesced 16-byte accesses
# ---------------------------------------------------------------------------------------------


@triton.jit
def rows_pair_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK,
                     BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                     EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr = True):
    H: tl.constexpr = K // 8
    mult_b = _mult_b(ts_ptr, MX)
    r = tl.arange(0, BR)
    blk0 = tl.program_id(0).to(tl.int64) * BR
    offs = (r[:, None, None] * H + tl.arange(0, H)[None, :, None]) * 4 + tl.arange(0, 4)[None, None, :]
    xb = x_ptr + blk0 * (K // 2)
    if EVEN:
        w = tl.load(xb + offs)
    else:
        m1d = (blk0 + r) < NBLK
        w = tl.load(xb + offs, mask=m1d[:, None, None], other=0)
    lo, hi = _unpack(w)
    am = tl.max(_amax2(lo, hi).to(tl.int32, bitcast=True), axis=2)
    vmb = tl.max(am, axis=1)
    scode, mult, nan_scale = _block_scale(vmb, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING)
    mb = mult[:, None, None]
    q = _word_codes(w, mb, mb * 0.5, mb * 0.25, MX)  # [BR, H]
    if SLOW:
        if tl.max(_needs_exact(mult, nan_scale, MX).to(tl.int32), axis=0) != 0:
            q = _word_codes_exact(w, mb, MX)
    if not MX:
        q = tl.where(nan_scale[:, None], 0, q)
    oq = r[:, None] * H + tl.arange(0, H)[None, :]
    qb = q_ptr + blk0 * H
    if EVEN:
        tl.store(qb + oq, q)
        tl.store(s_ptr + blk0 + r, scode.to(tl.uint8))
    else:
        tl.store(qb + oq, q, mask=m1d[:, None])
        tl.store(s_ptr + blk0 + r, scode.to(tl.uint8), mask=m1d)


# ---------------------------------------------------------------------------------------------
# Python entry
# ---------------------------------------------------------------------------------------------

_MX_RULES = {"floor": 0, "ceil": 1, "even": 2, "rceil": 3}


def _sm_count(device):
    import torch

    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


#: GPU-only instructions where the device has them (:func:`hw_e4m3`).
HW_E4M3 = True


def hw_e4m3(device) -> bool:
    """Whether kernels on ``device`` take their GPU-only instructions (the hardware rounding of
    two-level block scales, _ue4m3_cvt, and the sign bits by byte permutes, _pair_codes's
    PRMT): HW_E4M3, a CUDA device of compute capability 8.9 or later, not the interpreter
    (which has no inline PTX)."""
    import torch

    from .triton_backend import _interpret

    if not HW_E4M3 or _interpret() or device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def hw_bf16x2(device) -> bool:
    """Whether the MX encoder on bf16x2 words (_mag_bf16x2: fma.rn.bf16x2 and min.u16x2, the
    latter sm_90+) runs on ``device``: :func:`hw_e4m3` and compute capability 9.0 or later."""
    import torch

    return hw_e4m3(device) and torch.cuda.get_device_capability(device) >= (9, 0)


def rows_flags(sch):
    """The scheme constexprs of the kernels (MX, RULE, EMAX, NAN_INF, SCALING)."""
    mx = sch.structure == "mx"
    pol = sch.policies
    scaling = 0
    if mx and pol["mx_element_scaling"] != "exact":
        scaling = 2 if sch.scale_rule == "rceil" else 1
    return dict(MX=mx, RULE=_MX_RULES.get(sch.scale_rule, 0), EMAX=sch.element.emax if mx else 0,
                NAN_INF=mx and pol["mx_nonfinite_block"] == "nan_scale", SCALING=scaling)


def launcher(x2, packed, scales, ts, sch, *, variant="tb", BR=None, num_warps=None, programs_per_sm=None,
             exact_fallback=True, hw_cvt=None):
    """A function that runs one variant's kernel on given buffers and returns triton's compiled
    kernel (None for an empty tensor): x2 contiguous bf16 (M, N), packed uint8 (M, N/2),
    scales uint8 (M, N/K) row-major, ts the float32 constants of
    :func:`triton_backend.quantize_packed` (two-level: S_enc, S_dec and the 128 multipliers
    filled in). No checks: the callers make them."""
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"variant: {variant!r} is not one of {', '.join(VARIANTS)}")
    K = sch.block_size
    nblk = x2.numel() // K
    br0, w0 = DEFAULTS[variant]
    br = BR or br0
    ntiles = triton.cdiv(nblk, br)
    args = (x2.view(torch.int32), packed.view(torch.int32), scales, ts, nblk)
    flags = rows_flags(sch)
    flags.update(BR=br, K=K, EVEN=nblk % br == 0, SLOW=bool(exact_fallback), num_warps=num_warps or w0)
    if variant == "tb":
        kernel, grid = rows_tb_kernel, (ntiles,)
        flags["HW"] = hw_e4m3(x2.device) if hw_cvt is None else bool(hw_cvt)
    elif variant == "tbp":
        kernel, grid = rows_tbp_kernel, (min(ntiles, _sm_count(x2.device) * (programs_per_sm or PERSISTENT_PER_SM)),)
        args = args + (ntiles,)
    else:
        kernel, grid = rows_pair_kernel, (ntiles,)

    def launch():
        """Run the kernel alone (the outputs are rewritten); returns triton's compiled kernel."""
        if nblk:
            return kernel[grid](*args, **flags)

    return launch


def quantize_rows_fast(x, scheme, *, variant="tb", s_enc_dec=None, BR=None, num_warps=None,
                       programs_per_sm=None, exact_fallback=True, return_launcher=False):
    """Rowwise RNE quantization of a contiguous bf16 tensor (quantized along the last axis).

    Returns the dict of :func:`triton_backend.quantize_packed` (``packed`` uint8 (M, N/2),
    ``scales`` uint8 (M, N/K), ``global_scale`` 0-d float32 S_dec or None, ``scheme``),
    bit-identical to it. ``variant``: one of :data:`VARIANTS`; ``BR`` blocks per program and
    ``num_warps`` (defaults :data:`DEFAULTS`); ``programs_per_sm`` for ``tbp``.
    ``s_enc_dec``: a precomputed (S_enc, S_dec) for two-level schemes (else the global amax
    pass runs first, as in quantize_packed). ``exact_fallback=False`` drops the per-tile
    branch to the exact encoder (tests of the fast path alone, instruction counts): the
    result is then only right where :func:`_needs_exact` holds for no block.
    ``return_launcher=True`` returns ``(result, launch)``: ``launch()`` reruns the kernel
    alone on the same buffers (benchmarks: no host-side torch ops) and returns triton's
    compiled kernel (``.asm["cubin"]`` for an instruction count).

    ``quantize_packed`` runs variant ``tb`` by default for these requests; this entry keeps
    the other variants and the knobs of the benchmarks."""
    import torch

    from fp4spec.backends import torch_backend as tb
    from fp4spec.backends import triton_backend as trb
    from fp4spec.backends.base import resolve_scheme

    if variant not in VARIANTS:
        raise ValueError(f"variant: {variant!r} is not one of {', '.join(VARIANTS)}")
    sch = resolve_scheme(scheme)
    x = tb.as_torch(x)
    if x.dtype != torch.bfloat16:
        raise ValueError(f"x: bfloat16 only (the fast rowwise kernels), not {x.dtype}")
    if sch.element.name != "e2m1" or sch.structure not in ("mx", "two_level") or sch.is_2d:
        raise ValueError(f"scheme: {sch.name} (E2M1 elements, 1 x K blocks, mx or two_level)")
    trb.check_request(sch, "rne")
    K = sch.block_size
    if K not in (16, 32):
        raise ValueError(f"scheme: block size {K} (16 or 32)")
    x2 = x.reshape(-1, x.shape[-1]) if x.dim() != 1 else x.reshape(1, -1)
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    M, N = x2.shape
    if N % K:
        raise ValueError(f"x: rows of {N} elements are not a whole number of {K}-element blocks")
    dev = x2.device
    g = None
    if sch.structure == "mx":
        ts = trb.mx_consts(sch, dev)
    else:
        amax = trb.global_amax(x2, M, N, N, 1) if s_enc_dec is None else None
        ts = trb.two_level_consts(sch, dev, amax=amax, s_enc_dec=s_enc_dec)
        g = ts[1]
    packed = torch.empty((M, N // 2), dtype=torch.uint8, device=dev)
    scales = torch.empty((M, N // K), dtype=torch.uint8, device=dev)
    launch = launcher(x2, packed, scales, ts, sch, variant=variant, BR=BR, num_warps=num_warps,
                      programs_per_sm=programs_per_sm, exact_fallback=exact_fallback)
    launch()
    out = {"packed": packed, "scales": scales, "global_scale": g, "scheme": sch}
    if return_launcher:
        return out, launch
    return out


__all__ = ["DEFAULTS", "VARIANTS", "launcher", "quantize_rows_fast", "rows_flags", "rows_pair_kernel", "rows_tb_kernel", "rows_tbp_kernel"]
