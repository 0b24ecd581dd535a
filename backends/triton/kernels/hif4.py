"""HiF4 (:mod:`fp4spec.hif4`): quantize groups of 64 along a row (variant ``rows_hif4``) or
down the columns of a 2-D tensor (``cols_hif4``), and dequantize; bit for bit the golden
model with exact products (``arith="float64"``, what ``fp4spec.quantize`` runs).

Rowwise, a thread takes a whole group: its 16 quads (four consecutive elements, one 64-bit
word of bf16) are read for the maximum, then again per level-2 group (from L1) for the bits
and codes, so a group's scale is computed once. Columnwise, a program reads a [groups, 8, 2,
4] tile once (level-2 group k, level-3 group j = 2k + h, element t), a warp's loads spanning
consecutive columns. Both write, per group, 32 code bytes (two S1P2 codes per byte, the
first in the low nibble), the E6M2 scale byte and the 8 + 16 micro-exponent bits one per
byte -- the layout of :func:`fp4spec.emulator.hif4.hif4_quantize`. The steps of
:func:`fp4spec.hif4.hif4_quantize_group_scalar`, exactly:

1. Maxima (step 4) as maxima of sign-cleared float32 bit patterns; a group whose maximum
   pattern is that of +-Inf or NaN is non-finite (step 2): the kernel writes the
   ``nonfinite="propagate"`` group (scale 0xFF, codes and bits 0) and sets a flag, which
   the host reads to raise for ``nonfinite="error"``.
2. Scale (steps 5-7), per group in float64: ``Vmax * 73/512`` is exact there (31
   significant bits); BF16 and the E6M2 mantissa rounding are integer round-half-even on
   the float64 bit pattern. BF16's exponent floor (-126) never matters: a value it would
   change lies far below the clamp 2^-48. ``REC = BF16(1/(1 + M/4)) * 2^-E`` (a table of
   four, from the spec).
3. Products (steps 8, 9, 11) against exact thresholds. REC has 8 significant bits, so
   ``a * r`` (r = REC times a power of two) is exact in float32 for bfloat16 and float16
   input (at most 19 bits). For float32 input a splits into ``a_hi`` (16 bits) and
   ``a_lo = a - a_hi`` (8 bits): ``hi = a_hi * r`` and ``lo = a_lo * r`` are exact and
   ``a * r = hi + lo``; with ``s = fl(hi + lo)`` (round to nearest: monotone) the exact
   product is >= an integer n iff ``s > n``, or ``s == n`` and ``lo >= n - hi`` (exact by
   Sterbenz's lemma: hi lies within a factor 2 of n). Underflow of hi or lo only happens
   for products far below the thresholds (>= 1/8). Every product being exact, a compiler's
   fusing of a product and a sum into an FMA rounds the same.
4. ``E1_8 = V8 * REC/4 >= 1``, ``E1_16 = V16 * REC * 2^-(1 + E1_8) >= 1``, and the
   element magnitude ``min(floor(a * REC * 2^(2 - DE) + 1/2), 7)``: exact input products
   round ``a * r + 1/2`` once without changing its floor; float32 input takes
   ``(floor(a * REC * 2^(3 - DE)) + 1) >> 1`` with the floor of step 3. Sign bit: x < 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .primitives import _abs_bits, _load_f32, _load_group, _pow2, _values_out

# The spec's constants (fp4spec.hif4; tests/backends/test_triton_hif4.py checks them):
#: BF16(1 / (1 + M/4)) for the E6M2 mantissa M = 1, 2, 3 (step 7 at E = 0; M = 0 gives 1).
_REC1 = tl.constexpr(205 / 256)
_REC2 = tl.constexpr(171 / 256)
_REC3 = tl.constexpr(73 / 128)
#: Const_rec = BF16(1/7); the E6M2 clamps of step 6; the E6M2 NaN code.
_CONST_REC = tl.constexpr(73 / 512)
_SCALE_MIN = tl.constexpr(2.0 ** -48)
_SCALE_MAX = tl.constexpr(49152.0)
_NAN_CODE = tl.constexpr(0xFF)


@triton.jit
def _round_bits_f64(v, BITS: tl.constexpr):
    """Positive normal float64 v rounded to BITS significant bits, ties to even (integer
    rounding of the bit pattern; a carry steps into the next binade)."""
    SH: tl.constexpr = 53 - BITS
    b = v.to(tl.int64, bitcast=True)
    b = (b + ((1 << (SH - 1)) - 1) + ((b >> SH) & 1)) >> SH << SH
    return b.to(tl.float64, bitcast=True)


@triton.jit
def _group_scale(vmax_bits):
    """(E6M2 code, REC as float32) of finite groups with maximum |x| given by its float32 bit
    pattern (steps 5-7)."""
    sf = _round_bits_f64(vmax_bits.to(tl.float32, bitcast=True).to(tl.float64) * _CONST_REC, 8)
    sf = tl.maximum(tl.minimum(sf, _SCALE_MAX), _SCALE_MIN)  # a zero group: 2^-48 (0 passes the rounding)
    b = _round_bits_f64(sf, 3).to(tl.int64, bitcast=True)
    e = ((b >> 52) - 1023).to(tl.int32)
    m = ((b >> 50) & 3).to(tl.int32)
    rec = tl.where(m == 0, 1.0, tl.where(m == 1, _REC1, tl.where(m == 2, _REC2, _REC3))) * _pow2(-e)
    return ((e + 48) << 2) | m, rec


@triton.jit
def _split_product(a, r):
    """(hi, lo, s) with a * r = hi + lo exactly and s = fl(hi + lo): a >= 0 float32, r a
    float32 with at most 8 significant bits (step 3 of the module docstring)."""
    a_hi = (a.to(tl.int32, bitcast=True) & -256).to(tl.float32, bitcast=True)
    hi = a_hi * r
    lo = (a - a_hi) * r
    return hi, lo, hi + lo


@triton.jit
def _product_at_least_one(v, r, SPLIT: tl.constexpr):
    """Exactly ``v * r >= 1`` (v >= 0; SPLIT: v has more than 16 significant bits)."""
    if SPLIT:
        hi, lo, s = _split_product(v, r)
        return (s > 1.0) | ((s == 1.0) & (lo >= 1.0 - hi))
    else:
        return v * r >= 1.0


@triton.jit
def _magnitude(a, r2, SPLIT: tl.constexpr):
    """Exactly ``min(floor(a * r2 + 1/2), 7)`` as int32 (step 11; r2 = REC * 2^(2 - DE))."""
    if SPLIT:
        hi, lo, s = _split_product(a, r2 * 2.0)
        f = tl.floor(s)
        f = tl.where((s == f) & (lo < s - hi), f - 1.0, f)  # s rounded up onto an integer
        return tl.minimum((tl.minimum(f, 15.0).to(tl.int32) + 1) >> 1, 7)
    else:
        return tl.minimum(a * r2 + 0.5, 7.0).to(tl.int32)  # a * r2 exact: one rounding, same floor


@triton.jit
def _quad_max(x_ptr, q, mask, IN_BF16: tl.constexpr):
    """Quad q (int64 index) of the flat input: (max |x| bit pattern, the four |x| bit patterns,
    the four values)."""
    e0, e1, e2, e3 = _load_group(x_ptr, q, mask, IN_BF16)
    a0, a1, a2, a3 = _abs_bits(e0), _abs_bits(e1), _abs_bits(e2), _abs_bits(e3)
    return tl.maximum(tl.maximum(a0, a1), tl.maximum(a2, a3)), (a0, a1, a2, a3), (e0, e1, e2, e3)


@triton.jit
def _code(a_bits, x, r2, SPLIT: tl.constexpr):
    """Steps 11-12 for one element: magnitude of |x| (its bit pattern) and the sign x < 0."""
    return _magnitude(a_bits.to(tl.float32, bitcast=True), r2, SPLIT) | tl.where(x < 0, 8, 0)


@triton.jit
def _quad_codes(a, e, r2, SPLIT: tl.constexpr):
    """The four codes of a quad (|x| patterns a, values e) as one 16-bit word, the first in the
    low nibble."""
    return (_code(a[0], e[0], r2, SPLIT) | (_code(a[1], e[1], r2, SPLIT) << 4) | (_code(a[2], e[2], r2, SPLIT) << 8)
            | (_code(a[3], e[3], r2, SPLIT) << 12))


@triton.jit
def quantize_hif4_rows_kernel(x_ptr, q_ptr, s_ptr, e8_ptr, e16_ptr, flag_ptr, NGRP,
                              BR: tl.constexpr, IN_BF16: tl.constexpr, SPLIT: tl.constexpr):
    """Rowwise HiF4 of a contiguous tensor seen as NGRP groups of 64, one group per thread,
    BR groups per program: its 16 quads read twice (the maximum, then the bits and codes
    per level-2 group; the second read hits L1). x_ptr: int64 words of four bf16, or the
    elements; q_ptr: int32 words of 8 codes; s_ptr: E6M2 bytes; e8_ptr / e16_ptr: int64
    words of eight bits, one per byte; flag_ptr (int32): set to 1 if a group is non-finite."""
    g = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    mask = g < NGRP
    vmax = tl.zeros((BR,), tl.int32)
    for q in tl.static_range(16):  # step 4: Vmax (bit patterns: NaN above Inf above every number)
        m, _, _ = _quad_max(x_ptr, g * 16 + q, mask, IN_BF16)
        vmax = tl.maximum(vmax, m)
    bad = vmax >= 0x7F800000
    keep = tl.where(bad, 0, -1)
    scode, rec = _group_scale(tl.where(bad, 0, vmax))  # steps 5-7
    b8 = tl.zeros((BR,), tl.int64)
    b16a = tl.zeros((BR,), tl.int64)
    b16b = tl.zeros((BR,), tl.int64)
    for k in tl.static_range(8):  # steps 8-12, one level-2 group at a time
        ma, aa, xa = _quad_max(x_ptr, g * 16 + 2 * k, mask, IN_BF16)
        mb, ab, xb = _quad_max(x_ptr, g * 16 + 2 * k + 1, mask, IN_BF16)
        e8 = _product_at_least_one(tl.maximum(ma, mb).to(tl.float32, bitcast=True), rec * 0.25, SPLIT)
        r16 = tl.where(e8, rec * 0.25, rec * 0.5)
        ea = _product_at_least_one(ma.to(tl.float32, bitcast=True), r16, SPLIT)
        eb = _product_at_least_one(mb.to(tl.float32, bitcast=True), r16, SPLIT)
        r2 = tl.where(e8, rec * 2.0, rec * 4.0)  # REC * 2^(2 - E1_8); E1_16 halves it
        wa = _quad_codes(aa, xa, tl.where(ea, r2 * 0.5, r2), SPLIT)
        wb = _quad_codes(ab, xb, tl.where(eb, r2 * 0.5, r2), SPLIT)
        tl.store(q_ptr + g * 8 + k, (wa | (wb << 16)) & keep, mask=mask)
        b8 = b8 | (e8.to(tl.int64) << (8 * k))
        if k < 4:
            b16a = b16a | (ea.to(tl.int64) << (16 * k)) | (eb.to(tl.int64) << (16 * k + 8))
        else:
            b16b = b16b | (ea.to(tl.int64) << (16 * k - 64)) | (eb.to(tl.int64) << (16 * k - 56))
    keep64 = keep.to(tl.int64)
    tl.store(e8_ptr + g, b8 & keep64, mask=mask)
    tl.store(e16_ptr + g * 2, b16a & keep64, mask=mask)
    tl.store(e16_ptr + g * 2 + 1, b16b & keep64, mask=mask)
    tl.store(s_ptr + g, tl.where(bad, _NAN_CODE, scode).to(tl.uint8), mask=mask)
    if tl.max(bad.to(tl.int32), axis=0) != 0:  # rare: a non-finite group (masked lanes read 0)
        tl.store(flag_ptr, 1)


@triton.jit
def _load_unmasked_f32(ptrs, BF16: tl.constexpr):
    """primitives._load_f32 without a mask."""
    if BF16:
        return (tl.load(ptrs).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return tl.load(ptrs).to(tl.float32)


@triton.jit
def quantize_hif4_cols_kernel(x_ptr, q_ptr, s_ptr, e8_ptr, e16_ptr, flag_ptr, M, G, SXN,
                              BR: tl.constexpr, EVEN: tl.constexpr, IN_BF16: tl.constexpr, SPLIT: tl.constexpr):
    """HiF4 groups down the columns: the logical M x (64 G) matrix is the transpose of x (64 G
    rows, unit column stride, row stride SXN), group (m, g) = its elements [64 g, 64 g + 64)
    of row m. Program (p, g) takes group column g of rows p * BR ... (a warp's loads are
    consecutive columns). Outputs, group-major (index m * G + g): q_ptr int32 words of 8
    codes, s_ptr E6M2 bytes, e8_ptr / e16_ptr one byte per bit; flag_ptr (int32) is set to 1
    if a group is non-finite. EVEN: M is a multiple of BR (no masks). IN_BF16: x holds bf16
    bit patterns (int16); SPLIT: x is float32."""
    k = tl.arange(0, 8)[None, :, None, None]
    h = tl.arange(0, 2)[None, None, :, None]
    t = tl.arange(0, 4)[None, None, None, :]
    i = k * 8 + h * 4 + t  # element of the group
    m = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    xb = x_ptr + tl.program_id(1).to(tl.int64) * 64 * SXN
    offs = m[:, None, None, None] + i.to(tl.int64) * SXN  # 64-bit: SXN may be large
    grp = m * G + tl.program_id(1)
    valid = m < M
    if EVEN:
        x = _load_unmasked_f32(xb + offs, IN_BF16)
    else:
        x = _load_f32(xb + offs, valid[:, None, None, None], IN_BF16)
    ab = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    # Step 4 (patterns: NaN above Inf above every number)
    v16 = tl.max(ab, axis=3)
    v8 = tl.max(v16, axis=2)
    vmax = tl.max(v8, axis=1)
    bad = vmax >= 0x7F800000
    # Steps 5-7
    scode, rec = _group_scale(tl.where(bad, 0, vmax))
    rec2 = rec[:, None]
    # Steps 8-10
    e1_8 = _product_at_least_one(v8.to(tl.float32, bitcast=True), rec2 * 0.25, SPLIT) & (~bad[:, None])
    e8b = e1_8[:, :, None]
    e1_16 = _product_at_least_one(v16.to(tl.float32, bitcast=True), tl.where(e8b, rec2[:, :, None] * 0.25,
                                                                              rec2[:, :, None] * 0.5), SPLIT)
    e1_16 = e1_16 & (~bad[:, None, None])
    de = e8b.to(tl.int32) + e1_16.to(tl.int32)
    r2 = rec2[:, :, None] * _pow2(2 - de)
    # Steps 11-12
    mag = _magnitude(ab.to(tl.float32, bitcast=True), r2[:, :, :, None], SPLIT)
    code = mag | tl.where(x < 0, 8, 0)
    word = tl.sum(tl.sum(code << (4 * t + 16 * h), axis=3), axis=2)  # [BR, 8]: disjoint bits
    word = tl.where(bad[:, None], 0, word)
    kk = tl.arange(0, 8)[None, :]
    j = tl.arange(0, 8)[None, :, None] * 2 + tl.arange(0, 2)[None, None, :]
    scode = tl.where(bad, _NAN_CODE, scode).to(tl.uint8)
    if EVEN:
        tl.store(q_ptr + grp[:, None] * 8 + kk, word)
        tl.store(s_ptr + grp, scode)
        tl.store(e8_ptr + grp[:, None] * 8 + kk, e1_8.to(tl.uint8))
        tl.store(e16_ptr + grp[:, None, None] * 16 + j, e1_16.to(tl.uint8))
    else:
        tl.store(q_ptr + grp[:, None] * 8 + kk, word, mask=valid[:, None])
        tl.store(s_ptr + grp, scode, mask=valid)
        tl.store(e8_ptr + grp[:, None] * 8 + kk, e1_8.to(tl.uint8), mask=valid[:, None])
        tl.store(e16_ptr + grp[:, None, None] * 16 + j, e1_16.to(tl.uint8), mask=valid[:, None, None])
    if tl.max(bad.to(tl.int32), axis=0) != 0:  # rare: a non-finite group (padding never is)
        tl.store(flag_ptr, 1)


@triton.jit
def dequantize_hif4_kernel(q_ptr, s_ptr, e8_ptr, e16_ptr, out_ptr, NGRP, BR: tl.constexpr, OUT_BF16: tl.constexpr):
    """float32 values of BR groups (the layout quantize_hif4_kernel writes, rowwise):
    ``(-1)^s * E6M2 * 2^(E1_8 + E1_16) * m4 / 4``, exact; NaN for scale 0xFF."""
    grp = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    mask = grp < NGRP
    k = tl.arange(0, 8)[None, :]
    w = tl.load(q_ptr + grp[:, None] * 8 + k, mask=mask[:, None], other=0)
    sc = tl.load(s_ptr + grp, mask=mask, other=0).to(tl.int32)
    e8 = tl.load(e8_ptr + grp[:, None] * 8 + k, mask=mask[:, None], other=0).to(tl.int32)
    j = tl.arange(0, 8)[None, :, None] * 2 + tl.arange(0, 2)[None, None, :]
    e16 = tl.load(e16_ptr + grp[:, None, None] * 16 + j, mask=mask[:, None, None], other=0).to(tl.int32)
    scale = (1.0 + (sc & 3).to(tl.float32) * 0.25) * _pow2((sc >> 2) - 48)
    scale = tl.where(sc == _NAN_CODE, float("nan"), scale)
    step = scale[:, None, None] * _pow2(e8[:, :, None] + e16 - 2)  # E6M2 * 2^DE / 4: exact
    h = tl.arange(0, 2)[None, None, :, None]
    t = tl.arange(0, 4)[None, None, None, :]
    c = (w[:, :, None, None] >> (16 * h + 4 * t)) & 15
    mag = (c & 7).to(tl.float32) * step[:, :, :, None]
    # the sign by its bit: a negation compiled as 0 - mag gives +0 for a negative zero code
    # (seen on the H200); mag is >= 0 or a positive NaN, so this is the negation otherwise
    v = (mag.to(tl.int32, bitcast=True) | ((c >> 3) << 31)).to(tl.float32, bitcast=True)
    i = tl.arange(0, 8)[None, :, None, None] * 8 + h * 4 + t
    tl.store(out_ptr + grp[:, None, None, None] * 64 + i, _values_out(v, OUT_BF16), mask=mask[:, None, None, None])
