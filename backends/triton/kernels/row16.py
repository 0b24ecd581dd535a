"""Sixteen values in one thread: the loads of a row of 16, the pinned butterfly of the RHT,
and the code words of 16 values -- the layer under the fused-RHT and the ``cols`` kernels.

A row of 16 (16 consecutive elements along the blocked axis: one RHT row, a 1 x 16 block or
half a 1 x 32 block) is held as 16 separate tensors, one value of each row per thread, so the
transform, the block amax, the scale and the codes need no exchange between threads.

The pinned transform (fp4spec.rht.rht, steps F1-F5), per row of 16 values: F1 widen to
float32 (the loads do it); F2 u_i = s_i * x_i, a sign flip where bit i of the sign mask is
set (-0.0 kept); F3 for d = 1, 2, 4, 8 in this order, for every i with (i & d) == 0 at once,
(u_i, u_{i+d}) <- (fp32(u_i + u_{i+d}), fp32(u_i - u_{i+d})); F4 y_j = fp32(u_j * 0.25); F5
bf16 RNE (or nothing for float32). :func:`_fwht16` is the spec's butterfly operation for
operation (a dot or a reduction would leave the order to the compiler). No multiply feeds an
add in it, so FMA contraction cannot change a rounding.

Code words: :func:`_word16` (the exact or table encoder of every element and rounding),
:func:`_word16_sr` (stochastic rounding by the integer encoder of :mod:`.primitives`, the
random integers read or drawn per group of four) and
:func:`_word16_fast` (the fast E2M1 encoder of :mod:`.primitives`: per value three fused
multiply-adds -- MX folds its power-of-two multiplier into them --, a 3-input and a 2-input
integer min, the sign bit, and one multiply-add that places the code in its nibble). The
fast one is exact where :func:`_needs_exact_fast` holds for no block of the program; the
kernels branch (one uniform branch per program) to :func:`_word16` otherwise
(:func:`_word16_fast_or_exact`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .primitives import (_bf16_group, _bf16x2_pack, _code, _load_f32, _load_group, _mag_scaled, _mag_y,
                         _max_u16x2, _mx_codes_bf16x2, _philox_bits4, _split4, _sr_code, _unpack)


# ---------------------------------------------------------------------------------------------
# Loads of rows of 16, with the sign flips of step F2 folded in where free
# ---------------------------------------------------------------------------------------------


@triton.jit
def _sbit(sgn, I: tl.constexpr):
    """The sign-bit word of value I (0 or 0x80000000): sgn is the tuple of 16 int32 kernel
    arguments of :func:`..launch.sign_words`, so each is a constant-bank operand of the
    instruction that uses it (computing ``((mask >> I) & 1) << 31`` per program cost about two
    instructions per element at one block a thread)."""
    return sgn[I]


@triton.jit
def _load_row_flip(x_ptr, offs, mask, IN_BF16: tl.constexpr, FLIP: tl.constexpr, sgn, I: tl.constexpr):
    """:func:`.primitives._load_f32`, with FLIP (bf16) step F2 for value I in the widening: (b << 16) +
    sign bit, one shift-add (no separate xor)."""
    if FLIP:
        v = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.int32)
        return ((v << 16) + _sbit(sgn, I)).to(tl.float32, bitcast=True)
    else:
        return _load_f32(x_ptr + offs, mask, IN_BF16)


@triton.jit
def _bf16_group_flip(w, sgn, I: tl.constexpr):
    """As :func:`_bf16_group` with step F2 (the sign flips of values I..I+3) in the widening:
    the low halves as (b << 16) + sign bit (one shift-add), the high ones as (b & mask) ^ sign
    bit (one three-input logic op): the flips cost nothing."""
    lo = w.to(tl.int32)
    hi = (w >> 32).to(tl.int32)
    e0 = ((lo << 16) + _sbit(sgn, I)).to(tl.float32, bitcast=True)
    e1 = ((lo & -65536) ^ _sbit(sgn, I + 1)).to(tl.float32, bitcast=True)
    e2 = ((hi << 16) + _sbit(sgn, I + 2)).to(tl.float32, bitcast=True)
    e3 = ((hi & -65536) ^ _sbit(sgn, I + 3)).to(tl.float32, bitcast=True)
    return e0, e1, e2, e3


@triton.jit
def _rows16(x_ptr, g, mask, IN_BF16: tl.constexpr, RHT: tl.constexpr, SIGNS: tl.constexpr, sgn,
            OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """The 16 float32 values (transformed if RHT) of the 16 consecutive elements that start
    at group g (of four) of a contiguous tensor."""
    x0, x1, x2, x3 = _load_group(x_ptr, g, mask, IN_BF16)
    x4, x5, x6, x7 = _load_group(x_ptr, g + 1, mask, IN_BF16)
    x8, x9, x10, x11 = _load_group(x_ptr, g + 2, mask, IN_BF16)
    x12, x13, x14, x15 = _load_group(x_ptr, g + 3, mask, IN_BF16)
    if RHT:
        return _fwht16(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15,
                       SIGNS, sgn, OUT_BF16, BF16_CVT)
    else:
        return x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15


@triton.jit
def _cols16(x_ptr, offs, sxr, mask, IN_BF16: tl.constexpr, RHT: tl.constexpr, SIGNS: tl.constexpr, sgn,
            OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """The 16 float32 values (transformed if RHT) of rows r..r+15 of a row-major tensor, for
    a vector of columns: offs = r * sxr + column (int64); each row load is coalesced. A
    runtime sign mask with bf16 input goes into the widening (:func:`_load_row_flip`)."""
    FLIP: tl.constexpr = RHT and IN_BF16 and SIGNS == -1
    x0 = _load_row_flip(x_ptr, offs, mask, IN_BF16, FLIP, sgn, 0)
    x1 = _load_row_flip(x_ptr, offs + sxr, mask, IN_BF16, FLIP, sgn, 1)
    x2 = _load_row_flip(x_ptr, offs + 2 * sxr, mask, IN_BF16, FLIP, sgn, 2)
    x3 = _load_row_flip(x_ptr, offs + 3 * sxr, mask, IN_BF16, FLIP, sgn, 3)
    x4 = _load_row_flip(x_ptr, offs + 4 * sxr, mask, IN_BF16, FLIP, sgn, 4)
    x5 = _load_row_flip(x_ptr, offs + 5 * sxr, mask, IN_BF16, FLIP, sgn, 5)
    x6 = _load_row_flip(x_ptr, offs + 6 * sxr, mask, IN_BF16, FLIP, sgn, 6)
    x7 = _load_row_flip(x_ptr, offs + 7 * sxr, mask, IN_BF16, FLIP, sgn, 7)
    x8 = _load_row_flip(x_ptr, offs + 8 * sxr, mask, IN_BF16, FLIP, sgn, 8)
    x9 = _load_row_flip(x_ptr, offs + 9 * sxr, mask, IN_BF16, FLIP, sgn, 9)
    x10 = _load_row_flip(x_ptr, offs + 10 * sxr, mask, IN_BF16, FLIP, sgn, 10)
    x11 = _load_row_flip(x_ptr, offs + 11 * sxr, mask, IN_BF16, FLIP, sgn, 11)
    x12 = _load_row_flip(x_ptr, offs + 12 * sxr, mask, IN_BF16, FLIP, sgn, 12)
    x13 = _load_row_flip(x_ptr, offs + 13 * sxr, mask, IN_BF16, FLIP, sgn, 13)
    x14 = _load_row_flip(x_ptr, offs + 14 * sxr, mask, IN_BF16, FLIP, sgn, 14)
    x15 = _load_row_flip(x_ptr, offs + 15 * sxr, mask, IN_BF16, FLIP, sgn, 15)
    if RHT:
        return _fwht16(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15,
                       0 if FLIP else SIGNS, sgn, OUT_BF16, BF16_CVT)
    else:
        return x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15


@triton.jit
def _rows16_vec(x_ptr, blk, h, mask, G: tl.constexpr, RHT: tl.constexpr, SIGNS: tl.constexpr, sgn,
                OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """As :func:`_rows16` for bf16 (x_ptr: int64 words of four): row h of 16 of each block blk
    (G words a block), read as two [BR, 2] tiles (one 16-byte load per thread each)."""
    offs = (blk * G + h * 4)[:, None] + tl.arange(0, 2)[None, :]
    g0, g1 = tl.split(tl.load(x_ptr + offs, mask=mask[:, None], other=0))
    g2, g3 = tl.split(tl.load(x_ptr + offs + 2, mask=mask[:, None], other=0))
    if RHT and SIGNS == -1:  # runtime sign mask: the flips in the widening (then no flips below)
        x0, x1, x2, x3 = _bf16_group_flip(g0, sgn, 0)
        x4, x5, x6, x7 = _bf16_group_flip(g1, sgn, 4)
        x8, x9, x10, x11 = _bf16_group_flip(g2, sgn, 8)
        x12, x13, x14, x15 = _bf16_group_flip(g3, sgn, 12)
    else:
        x0, x1, x2, x3 = _bf16_group(g0)
        x4, x5, x6, x7 = _bf16_group(g1)
        x8, x9, x10, x11 = _bf16_group(g2)
        x12, x13, x14, x15 = _bf16_group(g3)
    if RHT:
        return _fwht16(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15,
                       0 if SIGNS == -1 else SIGNS, sgn, OUT_BF16, BF16_CVT)
    else:
        return x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15


@triton.jit
def _load4_vec(ptr, g, mask):
    """The four elements of group g (elements 4g..4g+3, one vector per block) of a contiguous
    tensor of 4-byte or 2-byte elements, by one 16- or 8-byte load per thread."""
    t = tl.load(ptr + (g * 4)[:, None] + tl.arange(0, 4)[None, :], mask=mask[:, None], other=0)
    return _split4(t)


@triton.jit
def _rows16_any(x_ptr, blk, h, mask, G: tl.constexpr, IN_BF16: tl.constexpr):
    """The 16 float32 values of row h of 16 of each block blk (G groups a block): bf16 as
    int64 words (:func:`_rows16_vec`), float32 or float16 by 16- or 8-byte loads of groups."""
    if IN_BF16:
        return _rows16_vec(x_ptr, blk, h, mask, G, False, 0, 0, False, 0)
    else:
        g = blk * G + h * 4
        x0, x1, x2, x3 = _load4_vec(x_ptr, g, mask)
        x4, x5, x6, x7 = _load4_vec(x_ptr, g + 1, mask)
        x8, x9, x10, x11 = _load4_vec(x_ptr, g + 2, mask)
        x12, x13, x14, x15 = _load4_vec(x_ptr, g + 3, mask)
        return (x0.to(tl.float32), x1.to(tl.float32), x2.to(tl.float32), x3.to(tl.float32),
                x4.to(tl.float32), x5.to(tl.float32), x6.to(tl.float32), x7.to(tl.float32),
                x8.to(tl.float32), x9.to(tl.float32), x10.to(tl.float32), x11.to(tl.float32),
                x12.to(tl.float32), x13.to(tl.float32), x14.to(tl.float32), x15.to(tl.float32))


# ---------------------------------------------------------------------------------------------
# The butterfly (steps F2-F5)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _sflip(v, SIGNS: tl.constexpr, sgn, I: tl.constexpr):
    """Step F2 for value I: s_I * v, an exact sign flip where bit I of the mask is set. SIGNS
    >= 0: the mask as a constexpr (a flip is a free fneg, folded into the first butterfly);
    SIGNS = -1: the mask is run-time: sgn is the tuple of the 16 sign-bit words (:func:`_sbit`;
    one xor per value, one compile for every sign vector)."""
    if SIGNS >= 0:
        if (SIGNS >> I) & 1:
            return -v
        else:
            return v
    else:
        return (v.to(tl.int32, bitcast=True) ^ _sbit(sgn, I)).to(tl.float32, bitcast=True)


@triton.jit
def _bfly(a, b):
    """One butterfly of step F3: (fp32(a + b), fp32(a - b))."""
    return a + b, a - b


@triton.jit
def _bf16_rne(y):
    """float32 y rounded to the nearest bfloat16 (ties to even; overflow -> Inf; NaN stays a
    NaN), as float32, by integer operations: add 0x7FFF + the kept lsb, clear the low half."""
    b = y.to(tl.int32, bitcast=True)
    r = ((b + (0x7FFF + ((b >> 16) & 1))) & -65536).to(tl.float32, bitcast=True)
    return tl.where(y != y, y, r)


@triton.jit
def _rht_out2(u, v, OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """Steps F4-F5 for two values: fp32(u * 0.25), then (OUT_BF16) bf16 RNE, as float32.

    BF16_CVT selects how the bf16 rounding runs (all exact): 0 integer operations
    (:func:`_bf16_rne`; the interpreter's own fp32 -> bf16 cast truncates), 1 the hardware
    conversion per value (cvt.rn.bf16.f32), 2 one packed conversion for both values
    (cvt.rn.bf16x2.f32, inline PTX: NVIDIA only)."""
    y = u * 0.25
    z = v * 0.25
    if OUT_BF16:
        if BF16_CVT == 2:
            # cvt.rn.bf16x2.f32 d, a, b puts bf16(a) in the upper half of d, bf16(b) in the lower
            p = tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", [z, y],
                                          dtype=tl.int32, is_pure=True, pack=1)
            y = (p << 16).to(tl.float32, bitcast=True)
            z = (p & -65536).to(tl.float32, bitcast=True)
        elif BF16_CVT == 1:
            y = y.to(tl.bfloat16).to(tl.float32)
            z = z.to(tl.bfloat16).to(tl.float32)
        else:
            y = _bf16_rne(y)
            z = _bf16_rne(z)
    return y, z


@triton.jit
def _fwht16(u0, u1, u2, u3, u4, u5, u6, u7, u8, u9, u10, u11, u12, u13, u14, u15,
            SIGNS: tl.constexpr, sgn, OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """Steps F2-F5 of fwht-fp32 on one row of 16 float32 values (sign mask: bit i set where
    s_i = -1; SIGNS, or sgn when SIGNS = -1, see :func:`_sflip`)."""
    # F2: sign flips
    u0 = _sflip(u0, SIGNS, sgn, 0)
    u1 = _sflip(u1, SIGNS, sgn, 1)
    u2 = _sflip(u2, SIGNS, sgn, 2)
    u3 = _sflip(u3, SIGNS, sgn, 3)
    u4 = _sflip(u4, SIGNS, sgn, 4)
    u5 = _sflip(u5, SIGNS, sgn, 5)
    u6 = _sflip(u6, SIGNS, sgn, 6)
    u7 = _sflip(u7, SIGNS, sgn, 7)
    u8 = _sflip(u8, SIGNS, sgn, 8)
    u9 = _sflip(u9, SIGNS, sgn, 9)
    u10 = _sflip(u10, SIGNS, sgn, 10)
    u11 = _sflip(u11, SIGNS, sgn, 11)
    u12 = _sflip(u12, SIGNS, sgn, 12)
    u13 = _sflip(u13, SIGNS, sgn, 13)
    u14 = _sflip(u14, SIGNS, sgn, 14)
    u15 = _sflip(u15, SIGNS, sgn, 15)
    # F3, d = 1
    u0, u1 = _bfly(u0, u1)
    u2, u3 = _bfly(u2, u3)
    u4, u5 = _bfly(u4, u5)
    u6, u7 = _bfly(u6, u7)
    u8, u9 = _bfly(u8, u9)
    u10, u11 = _bfly(u10, u11)
    u12, u13 = _bfly(u12, u13)
    u14, u15 = _bfly(u14, u15)
    # F3, d = 2
    u0, u2 = _bfly(u0, u2)
    u1, u3 = _bfly(u1, u3)
    u4, u6 = _bfly(u4, u6)
    u5, u7 = _bfly(u5, u7)
    u8, u10 = _bfly(u8, u10)
    u9, u11 = _bfly(u9, u11)
    u12, u14 = _bfly(u12, u14)
    u13, u15 = _bfly(u13, u15)
    # F3, d = 4
    u0, u4 = _bfly(u0, u4)
    u1, u5 = _bfly(u1, u5)
    u2, u6 = _bfly(u2, u6)
    u3, u7 = _bfly(u3, u7)
    u8, u12 = _bfly(u8, u12)
    u9, u13 = _bfly(u9, u13)
    u10, u14 = _bfly(u10, u14)
    u11, u15 = _bfly(u11, u15)
    # F3, d = 8
    u0, u8 = _bfly(u0, u8)
    u1, u9 = _bfly(u1, u9)
    u2, u10 = _bfly(u2, u10)
    u3, u11 = _bfly(u3, u11)
    u4, u12 = _bfly(u4, u12)
    u5, u13 = _bfly(u5, u13)
    u6, u14 = _bfly(u6, u14)
    u7, u15 = _bfly(u7, u15)
    # F4: fp32(u * 0.25); F5: bf16 RNE
    u0, u1 = _rht_out2(u0, u1, OUT_BF16, BF16_CVT)
    u2, u3 = _rht_out2(u2, u3, OUT_BF16, BF16_CVT)
    u4, u5 = _rht_out2(u4, u5, OUT_BF16, BF16_CVT)
    u6, u7 = _rht_out2(u6, u7, OUT_BF16, BF16_CVT)
    u8, u9 = _rht_out2(u8, u9, OUT_BF16, BF16_CVT)
    u10, u11 = _rht_out2(u10, u11, OUT_BF16, BF16_CVT)
    u12, u13 = _rht_out2(u12, u13, OUT_BF16, BF16_CVT)
    u14, u15 = _rht_out2(u14, u15, OUT_BF16, BF16_CVT)
    return u0, u1, u2, u3, u4, u5, u6, u7, u8, u9, u10, u11, u12, u13, u14, u15


# ---------------------------------------------------------------------------------------------
# Code words of 16 values
# ---------------------------------------------------------------------------------------------


@triton.jit
def _pack_nibbles(c0, c1, c2, c3):
    return c0 | (c1 << 4) | (c2 << 8) | (c3 << 12)


@triton.jit
def _word16(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
            r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15,
            mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, sr_scale,
            FAST: tl.constexpr, MX: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, INT4: tl.constexpr,
            NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr):
    """The int64 word of the 16 codes of y_i * mult (random bits r_i for SR), the first in the
    lowest nibble. Two-level FAST: a block with a NaN scale (0x7F) gets codes 0."""
    c0 = _code(y0 * mult, r0, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c1 = _code(y1 * mult, r1, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c2 = _code(y2 * mult, r2, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c3 = _code(y3 * mult, r3, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c4 = _code(y4 * mult, r4, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c5 = _code(y5 * mult, r5, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c6 = _code(y6 * mult, r6, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c7 = _code(y7 * mult, r7, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c8 = _code(y8 * mult, r8, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c9 = _code(y9 * mult, r9, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c10 = _code(y10 * mult, r10, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c11 = _code(y11 * mult, r11, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c12 = _code(y12 * mult, r12, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c13 = _code(y13 * mult, r13, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c14 = _code(y14 * mult, r14, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    c15 = _code(y15 * mult, r15, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    lo = _pack_nibbles(c0, c1, c2, c3) | (_pack_nibbles(c4, c5, c6, c7) << 16)
    hi = _pack_nibbles(c8, c9, c10, c11) | (_pack_nibbles(c12, c13, c14, c15) << 16)
    if FAST and not MX:
        lo = tl.where(nan_scale, 0, lo)
        hi = tl.where(nan_scale, 0, hi)
    return lo.to(tl.uint32).to(tl.int64) | (hi.to(tl.int64) << 32)


@triton.jit
def _sr_half4(y0, y1, y2, y3, r_ptr, seed, g, mask, mult, SR: tl.constexpr, SR_BITS: tl.constexpr,
              E2M1: tl.constexpr, SR_MAX: tl.constexpr, SR_SCALE: tl.constexpr, INT4: tl.constexpr,
              NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, FP32_PIPE: tl.constexpr, HALF_STEP: tl.constexpr,
              NAN_CHECK: tl.constexpr):
    """int32 of the 4 SR codes of y_i * mult (group g, first in the lowest nibble): the random
    integers read from r_ptr (SR 1: int32, one 16-byte load) or drawn (SR 2: one Philox call,
    all four words used)."""
    if SR == 1:
        r0, r1, r2, r3 = _load4_vec(r_ptr, g, mask)
    else:
        r0, r1, r2, r3 = _philox_bits4(seed, g, SR_BITS)
    c0 = _sr_code(y0 * mult, r0, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS, FP32_PIPE,
                  HALF_STEP, NAN_CHECK)
    c1 = _sr_code(y1 * mult, r1, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS, FP32_PIPE,
                  HALF_STEP, NAN_CHECK)
    c2 = _sr_code(y2 * mult, r2, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS, FP32_PIPE,
                  HALF_STEP, NAN_CHECK)
    c3 = _sr_code(y3 * mult, r3, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS, FP32_PIPE,
                  HALF_STEP, NAN_CHECK)
    return _pack_nibbles(c0, c1, c2, c3)


@triton.jit
def _word16_sr(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15, r_ptr, seed, g, mask, mult,
               SR: tl.constexpr, SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr,
               SR_SCALE: tl.constexpr, INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
               FP32_PIPE: tl.constexpr = False, HALF_STEP: tl.constexpr = True, NAN_CHECK: tl.constexpr = True):
    """As :func:`_word16` with SR by the integer encoder (:func:`.primitives._sr_code`): the
    int64 word of the 16 codes of y_i * mult, the values of groups g..g+3 (int64, the Philox
    counters); the bits are read or drawn one group at a time. NAN_CHECK False: no y_i * mult
    is NaN (the caller checked the multipliers)."""
    q0 = _sr_half4(y0, y1, y2, y3, r_ptr, seed, g, mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO,
                   ZERO_POS, FP32_PIPE, HALF_STEP, NAN_CHECK)
    q1 = _sr_half4(y4, y5, y6, y7, r_ptr, seed, g + 1, mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4,
                   NEGZERO, ZERO_POS, FP32_PIPE, HALF_STEP, NAN_CHECK)
    q2 = _sr_half4(y8, y9, y10, y11, r_ptr, seed, g + 2, mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4,
                   NEGZERO, ZERO_POS, FP32_PIPE, HALF_STEP, NAN_CHECK)
    q3 = _sr_half4(y12, y13, y14, y15, r_ptr, seed, g + 3, mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4,
                   NEGZERO, ZERO_POS, FP32_PIPE, HALF_STEP, NAN_CHECK)
    lo = q0 | (q1 << 16)
    hi = q2 | (q3 << 16)
    return lo.to(tl.uint32).to(tl.int64) | (hi.to(tl.int64) << 32)


#: 0x4A800000 * (1 + 16 + ... + 16^7) mod 2^32 (0x72800000): the magnitudes' offsets of 8 nibbles.
_K8 = tl.constexpr((0x4A800000 * 0x11111111) % (1 << 32))


@triton.jit
def _nib_fast(y, mult, m2, m4, MX: tl.constexpr, SIGN_BIT: tl.constexpr):
    """0x4A800000 + the E2M1 code (magnitude | 8 * sign) of y * mult, int32.

    MX (mult a power of two): |y| * mult inside the fmas (exact products), the sign of y.
    Two-level: t = fma(y, mult, +0) is fp32(y * mult) with -0 made +0; the sign is its sign
    bit (SIGN_BIT: no nonzero product can round to -0, see _needs_exact_fast) or t < 0.
    The magnitude pattern has bit 3 clear, so the sign goes in with an or (one LOP3 with the
    shift of the sign bit to bit 3)."""
    if MX:
        u = _mag_scaled(y, mult, m2, m4)
        sb = y.to(tl.int32, bitcast=True)
    else:
        t = tl.fma(y, mult, 0.0)
        u = _mag_y(t)
        if SIGN_BIT:
            sb = t.to(tl.int32, bitcast=True)
        else:
            sb = tl.where(t < 0.0, -1, 0)
    return u | ((sb >> 28) & 8)


@triton.jit
def _word8_fast(y0, y1, y2, y3, y4, y5, y6, y7, mult, m2, m4, MX: tl.constexpr, SIGN_BIT: tl.constexpr):
    """int32 of the 8 codes of y_i * mult, the first in the lowest nibble (shift-adds of the
    patterns; their offsets 0x4A800000 are taken off at the end, mod 2^32, as one constant)."""
    w = _nib_fast(y0, mult, m2, m4, MX, SIGN_BIT)
    w += _nib_fast(y1, mult, m2, m4, MX, SIGN_BIT) << 4
    w += _nib_fast(y2, mult, m2, m4, MX, SIGN_BIT) << 8
    w += _nib_fast(y3, mult, m2, m4, MX, SIGN_BIT) << 12
    w += _nib_fast(y4, mult, m2, m4, MX, SIGN_BIT) << 16
    w += _nib_fast(y5, mult, m2, m4, MX, SIGN_BIT) << 20
    w += _nib_fast(y6, mult, m2, m4, MX, SIGN_BIT) << 24
    w += _nib_fast(y7, mult, m2, m4, MX, SIGN_BIT) << 28
    return w - _K8


@triton.jit
def _word16_fast(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15, mult, nan_scale,
                 MX: tl.constexpr, SIGN_BIT: tl.constexpr):
    """As :func:`_word16` (FAST, RNE) with the fast encoder: the int64 word of the 16 codes of
    y_i * mult; two-level blocks with a NaN scale get codes 0. Exact unless
    :func:`_needs_exact_fast` holds for the block."""
    m2 = mult * 0.5
    m4 = mult * 0.25
    lo = _word8_fast(y0, y1, y2, y3, y4, y5, y6, y7, mult, m2, m4, MX, SIGN_BIT)
    hi = _word8_fast(y8, y9, y10, y11, y12, y13, y14, y15, mult, m2, m4, MX, SIGN_BIT)
    if not MX:
        keep = tl.where(nan_scale, 0, -1)
        lo = lo & keep
        hi = hi & keep
    return lo.to(tl.uint32).to(tl.int64) | (hi.to(tl.int64) << 32)


@triton.jit
def _needs_exact_fast(mult, nan_scale, MX: tl.constexpr, SIGN_BIT: tl.constexpr):
    """Blocks the fast encoder may get wrong: MX blocks with a NaN scale (mult = 0: x * 0 is
    NaN for an infinite x, -0 kept for the others); two-level blocks whose multiplier could
    round a nonzero product to -0 when the sign is read from the sign bit (SIGN_BIT: values
    on the bf16 grid, nonzero ones >= 2^-133, so mult >= 2^-16 keeps every nonzero product
    >= 2^-149)."""
    if MX:
        return nan_scale
    elif SIGN_BIT:
        return mult < 1.52587890625e-05
    else:
        return mult < 0.0  # never: the sign is t < 0


@triton.jit
def _word16_fast_or_exact(exact, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
                          mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, MX: tl.constexpr, NTHR: tl.constexpr,
                          INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, SIGN_BIT: tl.constexpr):
    """The code word of 16 values of a block, E2M1 RNE: the exact encoder (:func:`_word16`) where
    ``exact`` (a program-wide flag, one uniform branch: some block :func:`_needs_exact_fast`),
    else the fast one (:func:`_word16_fast`)."""
    if exact:  # rare: the exact encoder for the whole program
        w = _word16(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
                    y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
                    mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, 0.0, True, MX, NTHR, False, INT4, NEGZERO, ZERO_POS)
    else:
        w = _word16_fast(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15, mult, nan_scale, MX, SIGN_BIT)
    return w


# ---------------------------------------------------------------------------------------------
# bf16x2 words of 16 values (GPU only)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _words16(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15):
    """The 16 float32 values of an RHT row as 8 bf16x2 words (step M5's rounding, one cvt per
    two values; GPU only): elements (r, r + 4) of the first group of 8, then of the second."""
    return (_bf16x2_pack(y0, y4), _bf16x2_pack(y1, y5), _bf16x2_pack(y2, y6), _bf16x2_pack(y3, y7),
            _bf16x2_pack(y8, y12), _bf16x2_pack(y9, y13), _bf16x2_pack(y10, y14), _bf16x2_pack(y11, y15))


@triton.jit
def _absmax8_words(m, w0, w1, w2, w3, w4, w5, w6, w7):
    """Per 16-bit half, the max of m and the sign-clear bf16 patterns of 8 bf16x2 words."""
    c = 0x7FFF7FFF
    m = _max_u16x2(m, _max_u16x2(_max_u16x2(w0 & c, w1 & c), _max_u16x2(w2 & c, w3 & c)))
    return _max_u16x2(m, _max_u16x2(_max_u16x2(w4 & c, w5 & c), _max_u16x2(w6 & c, w7 & c)))


@triton.jit
def _mx_word16_bf16x2(w0, w1, w2, w3, w4, w5, w6, w7, m1, m2, m4):
    """int64 word of the 16 MX codes of the bf16x2 words of :func:`_words16` (element k in bits
    4k..4k+3), by :func:`.primitives._mx_codes_bf16x2` (GPU only)."""
    lo = _mx_codes_bf16x2(w0, w1, w2, w3, m1, m2, m4)
    hi = _mx_codes_bf16x2(w4, w5, w6, w7, m1, m2, m4)
    return (lo.to(tl.int64) & 0xFFFFFFFF) | (hi.to(tl.int64) << 32)


@triton.jit
def _unpack_words16(w0, w1, w2, w3, w4, w5, w6, w7):
    """The 16 float32 values of :func:`_words16`'s words, in element order."""
    y0, y4 = _unpack(w0)
    y1, y5 = _unpack(w1)
    y2, y6 = _unpack(w2)
    y3, y7 = _unpack(w3)
    y8, y12 = _unpack(w4)
    y9, y13 = _unpack(w5)
    y10, y14 = _unpack(w6)
    y11, y15 = _unpack(w7)
    return y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15
