"""MX blocks with 6- and 8-bit elements (E2M3, E3M2, E4M3, E5M2): quantize rowwise (variant
``rows_wide``) and columnwise (``cols_wide``), and dequantize. Codes are one per byte, as
:class:`fp4spec.QuantizedTensor` stores elements wider than 4 bits.

Each program reads its tile of x once (amax, E8M0 scale and codes in registers) and writes
one byte per element plus one scale byte per block. The element encoder works on the
float32 bit pattern of the scaled value y = x * 2^-e:

1. A = the pattern of |y|, E its exponent field. With b the element's bias and m its
   mantissa bits, the element's smallest normal has the float32 exponent field
   ``Emin = 128 - b``.
2. Normal range (E >= Emin): v = A - ((127 - b) << 23) holds the element's exponent field
   above its 23 mantissa bits; the code is v shifted right by s = 23 - m, rounded. A carry
   out of the mantissa steps into the next binade, as the code's exponent field does.
3. Element subnormals (E < Emin): v = the float32 significand (hidden bit included, float32
   subnormals read with E = 1), the code is v / 2^s with s = 23 - m + Emin - max(E, 1) (the
   code counts the element's smallest subnormal step); s >= 25 leaves nothing (v < 2^24).
4. Rounding of q = v >> s with remainder rem: RNE adds 1 when rem is above half, or equal
   to half with q odd. SR with random integer r < 2^N adds 1 when floor(rem * 2^N / 2^s) +
   r >= 2^N (the spec's frac * 2^N + r >= 2^N, r an integer; frac = rem / 2^s is the
   distance to the lower neighbour in units of the grid step, since a float32 binade lies
   within one element binade or below the element's normals).
5. Saturate: min(code, the largest finite code) (+-Inf and values rounded past the max
   included; E4M3's 0x7F and E5M2's Inf codes lie above it).
6. Sign: x's sign bit (MX keeps -0; y has x's sign). A NaN y (a NaN scale times a NaN or
   infinite x) gives the element's quiet NaN with x's sign, or +0 for elements without NaN.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .columnwise import _philox_tile
from .primitives import _abs_bits, _block_scale, _cublas_offset, _load_f32, _pow2, _rbits4, _store_scales, _values_out


@triton.jit
def _wide_magnitude(a_bits, r, MB: tl.constexpr, BIAS: tl.constexpr, MAXC: tl.constexpr, SR: tl.constexpr,
                    SR_BITS: tl.constexpr):
    """Saturated magnitude code (int32) of the non-negative float32 pattern a_bits: steps 1-5
    of the module docstring (r: int32 random integers, SR only)."""
    EMIN: tl.constexpr = 128 - BIAS
    E = a_bits >> 23
    normal = E >= EMIN
    v = tl.where(normal, a_bits - ((127 - BIAS) << 23), (a_bits & 0x7FFFFF) | tl.where(E > 0, 0x800000, 0))
    s = tl.where(normal, 23 - MB, 23 - MB + EMIN - tl.maximum(E, 1))
    sq = tl.minimum(s, 25)  # v < 2^24 below the normals: q = 0, rem = v from 24 on
    q = v >> sq
    rem = v & ((1 << sq) - 1)
    if SR:
        f = tl.where(s >= SR_BITS, rem >> tl.minimum(s - SR_BITS, 31), rem << tl.maximum(SR_BITS - s, 0))
        up = (f + r) >= (1 << SR_BITS)
    else:
        half = 1 << (sq - 1)
        up = (rem > half) | ((rem == half) & ((q & 1) != 0))
    return tl.minimum(q + up.to(tl.int32), MAXC)


@triton.jit
def _wide_codes(x, mult, r, MB: tl.constexpr, BIAS: tl.constexpr, MAXC: tl.constexpr, NANC: tl.constexpr,
                BITS: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr):
    """Element codes (int32) of float32 x times the block multiplier mult (broadcast): steps
    1-6. NANC: the element's positive quiet NaN code, or -1 for elements without NaN."""
    y = x * mult
    mag = _wide_magnitude(_abs_bits(y), r, MB, BIAS, MAXC, SR, SR_BITS)
    sign = (x.to(tl.int32, bitcast=True) >> 31) & 1
    if NANC >= 0:
        nan_code = NANC | (sign << (BITS - 1))
    else:
        nan_code = 0
    return tl.where(y != y, nan_code, mag | (sign << (BITS - 1)))


@triton.jit
def quantize_rows_wide_kernel(x_ptr, q_ptr, s_ptr, r_ptr, ts_ptr, NBLK, NSC, CPAD, seed,
                              BR: tl.constexpr, K: tl.constexpr, IN_BF16: tl.constexpr, SR: tl.constexpr,
                              SR_BITS: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                              NAN_INF: tl.constexpr, SCALING: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                              MAXC: tl.constexpr, NANC: tl.constexpr, BITS: tl.constexpr, CUBLAS: tl.constexpr):
    """Variant ``rows_wide``: BR consecutive 1 x K blocks of a contiguous tensor as one [BR, K]
    tile (x_ptr: float32, or bf16 as int16 patterns), codes to q_ptr (uint8, one per element,
    x's layout), scale codes to s_ptr (row-major over NSC columns, or the cuBLAS layout with
    CPAD padded columns). SR 0: RNE; 1: int32 bits at r_ptr (x's layout); 2: Philox from seed
    (element i: word i % 4 of the draw for counter i // 4, as :func:`.primitives._rbits4`)."""
    blk = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    bmask = blk < NBLK
    m2 = bmask[:, None]
    offs = blk[:, None] * K + tl.arange(0, K)[None, :]
    x = _load_f32(x_ptr + offs, m2, IN_BF16)
    vmb = tl.max(_abs_bits(x), axis=1)  # a NaN pattern is above every number's
    scode, mult, _ = _block_scale(vmb, ts_ptr, 1.0, True, RULE, EMAX, NAN_INF, SCALING, MBITS=MB)
    if SR == 1:
        r = tl.load(r_ptr + offs, mask=m2, other=0)
    elif SR == 2:
        g = tl.program_id(0).to(tl.int64) * (BR * K // 4) + tl.arange(0, BR * K // 4)
        r0, r1, r2, r3 = _rbits4(r_ptr, seed, g, g >= 0, 2, SR_BITS)
        r = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (BR, K)).to(tl.int32)  # new axes last
    else:
        r = 0
    codes = _wide_codes(x, mult[:, None], r, MB, BIAS, MAXC, NANC, BITS, SR != 0, SR_BITS)
    tl.store(q_ptr + offs, codes.to(tl.uint8), mask=m2)
    _store_scales(s_ptr, blk, scode, bmask, NSC, CPAD, CUBLAS)


@triton.jit
def quantize_cols_wide_kernel(x_ptr, q_ptr, s_ptr, r_ptr, ts_ptr, NROW, NCOL, sxr, srr, NSC, CPAD, seed,
                              BC: tl.constexpr, NB: tl.constexpr, K: tl.constexpr, IN_BF16: tl.constexpr,
                              SR: tl.constexpr, SR_BITS: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                              NAN_INF: tl.constexpr, SCALING: tl.constexpr, MB: tl.constexpr, BIAS: tl.constexpr,
                              MAXC: tl.constexpr, NANC: tl.constexpr, BITS: tl.constexpr, CUBLAS: tl.constexpr):
    """Variant ``cols_wide``: quantization of x^T (blocks of K rows of the row-major x, row
    stride sxr) without a transpose. A program reads NB blocks of K rows of BC columns as one
    [NB, K, BC] tile (loads coalesced along the columns) and writes column c's codes to row c
    of the (NCOL, NROW) code matrix (NB K contiguous bytes) and its scale codes to row c of
    the (NCOL, NSC) plain or cuBLAS layout. SR as :func:`quantize_rows_wide_kernel`: given
    bits at r_ptr (row stride srr), or Philox of x's flat index (NCOL, BC multiples of 4)."""
    c = tl.program_id(0) * BC + tl.arange(0, BC)
    b = tl.program_id(1) * NB + tl.arange(0, NB)
    rows = b.to(tl.int64)[:, None] * K + tl.arange(0, K)[None, :]  # [NB, K]
    bmask = (b[:, None] < NSC) & (c[None, :] < NCOL)  # [NB, BC]
    m3 = bmask[:, None, :]
    c64 = c.to(tl.int64)
    x = _load_f32(x_ptr + (rows[:, :, None] * sxr + c64[None, None, :]), m3, IN_BF16)
    vmb = tl.max(_abs_bits(x), axis=1)  # [NB, BC]
    scode, mult, _ = _block_scale(vmb, ts_ptr, 1.0, True, RULE, EMAX, NAN_INF, SCALING, MBITS=MB)
    if SR == 1:
        r = tl.load(r_ptr + (rows[:, :, None] * srr + c64[None, None, :]), mask=m3, other=0)
    elif SR == 2:
        rr = _philox_tile(seed, tl.reshape(rows, (NB * K,)), tl.program_id(0) * BC, NCOL, BC, SR_BITS)
        r = tl.reshape(rr, (NB, K, BC)).to(tl.int32)
    else:
        r = 0
    codes = _wide_codes(x, mult[:, None, :], r, MB, BIAS, MAXC, NANC, BITS, SR != 0, SR_BITS)
    tl.store(q_ptr + (c64[None, None, :] * NROW + rows[:, :, None]), codes.to(tl.uint8), mask=m3)
    if CUBLAS:
        soff = _cublas_offset(c64[None, :], b[:, None], CPAD)
    else:
        soff = c64[None, :] * NSC + b[:, None]
    tl.store(s_ptr + soff, scode.to(tl.uint8), mask=bmask)


@triton.jit
def dequantize_rows_wide_kernel(q_ptr, s_ptr, vals_ptr, out_ptr, NBLK, BR: tl.constexpr, K: tl.constexpr,
                                OUT_BF16: tl.constexpr):
    """float32 values of BR blocks of one-byte MX codes: fp32(values[code] * 2^(scale - 127)),
    NaN for scale code 0xFF (the emulator's dequantize_mx)."""
    blk = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    bmask = blk < NBLK
    offs = blk[:, None] * K + tl.arange(0, K)[None, :]
    codes = tl.load(q_ptr + offs, mask=bmask[:, None], other=0).to(tl.int32)
    sc = tl.load(s_ptr + blk, mask=bmask, other=0).to(tl.int32)
    sv = tl.where(sc == 255, float("nan"), _pow2(sc - 127))
    v = tl.load(vals_ptr + codes) * sv[:, None]
    tl.store(out_ptr + offs, _values_out(v, OUT_BF16), mask=bmask[:, None])
