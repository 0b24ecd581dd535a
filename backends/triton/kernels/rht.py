"""Kernels of the RHT with the pinned butterfly (``arith="fwht-fp32"``, size 16;
:mod:`.row16`): fused with rowwise quantization (1 x 16 / 1 x 32 blocks; the columnwise
fusion is :func:`.columnwise.quantize_cols_kernel` with RHT=True), the tensor amax after the
transform (rowwise and columnwise, no temporary), and the transform alone into a float32
tensor (the unfused path).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .primitives import _abs_bits, _absmax16, _block_scale_f32, _max_halves_f32, _mx_mults_bf16x2, _rbits4, _store_scales
from .row16 import (_absmax8_words, _cols16, _mx_word16_bf16x2, _needs_exact_fast, _rows16, _rows16_vec,
                    _unpack_words16, _word16, _word16_fast_or_exact, _words16)


@triton.jit
def _rbits_rows16(r_ptr, seed, g, mask, SR: tl.constexpr, SR_BITS: tl.constexpr):
    """Random bits (float32) of the 16 elements from group g on (flat element order)."""
    r0, r1, r2, r3 = _rbits4(r_ptr, seed, g, mask, SR, SR_BITS)
    r4, r5, r6, r7 = _rbits4(r_ptr, seed, g + 1, mask, SR, SR_BITS)
    r8, r9, r10, r11 = _rbits4(r_ptr, seed, g + 2, mask, SR, SR_BITS)
    r12, r13, r14, r15 = _rbits4(r_ptr, seed, g + 3, mask, SR, SR_BITS)
    return r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15


@triton.jit
def _store_words16(q_ptr, blk, wa, wb, mask, K: tl.constexpr):
    """Store each block's int64 code words: wa (1 x 16), or wa then wb (1 x 32) as one store."""
    if K == 16:
        tl.store(q_ptr + blk, wa, mask=mask)
    else:
        tl.store(q_ptr + (blk * 2)[:, None] + tl.arange(0, 2)[None, :], tl.join(wa, wb), mask=mask[:, None])


@triton.jit
def _rows_rht_mx_bf16x2(x_ptr, q_ptr, s_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr, blk, mask, NSC, CPAD, sgn,
                        G: tl.constexpr, K: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                        NAN_INF: tl.constexpr, SCALING: tl.constexpr, NTHR: tl.constexpr, INT4: tl.constexpr,
                        NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, CUBLAS: tl.constexpr, SIGNS: tl.constexpr,
                        BF16_CVT: tl.constexpr, SLOW: tl.constexpr):
    """:func:`quantize_rows_rht_kernel` for MX E2M1 RNE with bf16 RHT output and bf16 input, the
    encoder on bf16x2 words (GPU only; :mod:`.rht_mma`'s module docstring): the butterfly's
    float32 outputs rounded to bf16 two at a time by the cvt that packs them, the block amax by
    max.u16x2, the grid roundings two elements an instruction. A program with a NaN-scale
    block takes the exact encoder on the unpacked values (one uniform branch)."""
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = _rows16_vec(
        x_ptr, blk, 0, mask, G, True, SIGNS, sgn, False, BF16_CVT)
    wa0, wa1, wa2, wa3, wa4, wa5, wa6, wa7 = _words16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13,
                                                      a14, a15)
    am = _absmax8_words(tl.zeros_like(wa0), wa0, wa1, wa2, wa3, wa4, wa5, wa6, wa7)
    if K == 32:
        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _rows16_vec(
            x_ptr, blk, 1, mask, G, True, SIGNS, sgn, False, BF16_CVT)
        wb0, wb1, wb2, wb3, wb4, wb5, wb6, wb7 = _words16(b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13,
                                                          b14, b15)
        am = _absmax8_words(am, wb0, wb1, wb2, wb3, wb4, wb5, wb6, wb7)
    vm = _max_halves_f32(am).to(tl.float32, bitcast=True)  # the block amax (bf16)
    scode, mult, nan_scale = _block_scale_f32(vm, ts_ptr, True, RULE, EMAX, NAN_INF, SCALING)
    if SLOW and tl.max(nan_scale.to(tl.int32), axis=0) != 0:  # rare: the exact encoder for the whole program
        y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15 = _unpack_words16(
            wa0, wa1, wa2, wa3, wa4, wa5, wa6, wa7)
        qa = _word16_fast_or_exact(True, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15, mult,
                                   nan_scale, thr_ptr, dthr_ptr, mags_ptr, True, NTHR, INT4, NEGZERO, ZERO_POS, True)
        qb = qa
        if K == 32:
            y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15 = _unpack_words16(
                wb0, wb1, wb2, wb3, wb4, wb5, wb6, wb7)
            qb = _word16_fast_or_exact(True, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
                                       mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, True, NTHR, INT4, NEGZERO,
                                       ZERO_POS, True)
    else:
        m1, m2, m4 = _mx_mults_bf16x2(mult)
        qa = _mx_word16_bf16x2(wa0, wa1, wa2, wa3, wa4, wa5, wa6, wa7, m1, m2, m4)
        qb = qa
        if K == 32:
            qb = _mx_word16_bf16x2(wb0, wb1, wb2, wb3, wb4, wb5, wb6, wb7, m1, m2, m4)
    _store_words16(q_ptr, blk, qa, qb, mask, K)
    _store_scales(s_ptr, blk, scode, mask, NSC, CPAD, CUBLAS)


@triton.jit
def quantize_rows_rht_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr, NBLK, NSC, CPAD, seed, sgn,
                             BR: tl.constexpr, K: tl.constexpr, FAST: tl.constexpr,
                             MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                             SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr,
                             INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                             IN_BF16: tl.constexpr, CUBLAS: tl.constexpr, SIGNS: tl.constexpr,
                             OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr, SLOW: tl.constexpr = True,
                             BF16X2: tl.constexpr = False):
    """Fused RHT + rowwise quantization of BR consecutive 1 x K blocks (K = 16 or 32) of a
    contiguous tensor, one block per thread: the block's K values are read once (bf16: 16-byte
    loads), transformed in registers (K/16 rows of 16, :func:`_fwht16`), and quantized from
    the registers (amax, scale, codes) as :func:`quantize_rows_kernel` does. Arguments as
    there; SIGNS, OUT_BF16 (bf16 RHT output, else float32), BF16_CVT (hardware bf16
    conversion).

    FAST (E2M1, RNE): the codes come from the fast encoder (:func:`_word16_fast`); a program
    with a block that :func:`_needs_exact_fast` flags (MX: a NaN scale; two-level: a
    multiplier below 2^-16, i.e. a block amax above ~4e5 times the tensor's scale) takes the
    exact encoder instead (one uniform branch; SLOW=False leaves it out: instruction counts of
    the fast path). The K codes of a block go out as one store.

    BF16X2 (GPU only; MX, FAST, bf16 in and out): the encoder on bf16x2 words
    (:func:`_rows_rht_mx_bf16x2`)."""
    G: tl.constexpr = K // 4
    pid = tl.program_id(0)
    blk = pid.to(tl.int64) * BR + tl.arange(0, BR)
    mask = blk < NBLK
    g0 = blk * G
    if BF16X2:
        _rows_rht_mx_bf16x2(x_ptr, q_ptr, s_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr, blk, mask, NSC, CPAD, sgn, G, K,
                            RULE, EMAX, NAN_INF, SCALING, NTHR, INT4, NEGZERO, ZERO_POS, CUBLAS, SIGNS, BF16_CVT, SLOW)
    else:  # the float32 encoders
        if IN_BF16:
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = _rows16_vec(
                x_ptr, blk, 0, mask, G, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
        else:
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = _rows16(
                x_ptr, g0, mask, IN_BF16, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
        vm = _absmax16(tl.zeros((BR,), tl.float32), a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14,
                       a15)
        if K == 32:
            if IN_BF16:
                b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _rows16_vec(
                    x_ptr, blk, 1, mask, G, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
            else:
                b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _rows16(
                    x_ptr, g0 + 4, mask, IN_BF16, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
            vm = _absmax16(vm, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15)
        scode, mult, nan_scale = _block_scale_f32(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
        if FAST:
            # bf16 RHT output: every nonzero value >= 2^-133 (the sign bit of the product is exact)
            SIGN_BIT: tl.constexpr = OUT_BF16
            ex = SLOW and tl.max(_needs_exact_fast(mult, nan_scale, MX, SIGN_BIT).to(tl.int32), axis=0) != 0
            wa = _word16_fast_or_exact(ex, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, mult,
                                       nan_scale, thr_ptr, dthr_ptr, mags_ptr, MX, NTHR, INT4, NEGZERO, ZERO_POS,
                                       SIGN_BIT)
            if K == 32:
                wb = _word16_fast_or_exact(ex, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15,
                                           mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, MX, NTHR, INT4, NEGZERO,
                                           ZERO_POS, SIGN_BIT)
            else:
                wb = wa
            _store_words16(q_ptr, blk, wa, wb, mask, K)
        else:
            if SR != 0:
                sr_scale = tl.load(ts_ptr + 3)
                r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = _rbits_rows16(
                    r_ptr, seed, g0, mask, SR, SR_BITS)
            else:
                sr_scale = 0.0
                r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = (
                    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)
            w = _word16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
                        r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15,
                        mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO,
                        ZERO_POS)
            tl.store(q_ptr + blk * (K // 16), w, mask=mask)
            if K == 32:
                if SR != 0:
                    r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = _rbits_rows16(
                        r_ptr, seed, g0 + 4, mask, SR, SR_BITS)
                else:
                    r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = (
                        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15)
                w = _word16(b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15,
                            r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15,
                            mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4,
                            NEGZERO, ZERO_POS)
                tl.store(q_ptr + blk * 2 + 1, w, mask=mask)
        _store_scales(s_ptr, blk, scode, mask, NSC, CPAD, CUBLAS)


# ---------------------------------------------------------------------------------------------
# The RHT + amax pass and the unfused transform
# ---------------------------------------------------------------------------------------------


@triton.jit
def rht_amax_rows_kernel(x_ptr, out_ptr, NCH, sgn, BR: tl.constexpr, IN_BF16: tl.constexpr, SIGNS: tl.constexpr,
                         OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """Global amax of the RHT of a contiguous tensor along its last axis (NCH rows of 16), one
    row per thread, no temporary: int32 atomic max of the sign-cleared bit pattern (a NaN
    anywhere gives a NaN pattern, above +Inf's)."""
    ch = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    mask = ch < NCH
    y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15 = _rows16(
        x_ptr, ch * 4, mask, IN_BF16, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
    m = _absmax16(tl.zeros((BR,), tl.float32), y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15)
    tl.atomic_max(out_ptr, tl.max(_abs_bits(m), axis=0))


@triton.jit
def rht_amax_cols_kernel(x_ptr, out_ptr, NROW, NCOL, sxr, sgn, BC: tl.constexpr, NB: tl.constexpr,
                         IN_BF16: tl.constexpr, SIGNS: tl.constexpr, OUT_BF16: tl.constexpr,
                         BF16_CVT: tl.constexpr):
    """Global amax of the RHT of a row-major (NROW, NCOL) tensor along axis 0 (rows of 16 down
    each column): NB bands of 16 rows x BC columns per program; as :func:`rht_amax_rows_kernel`."""
    c = tl.program_id(0) * BC + tl.arange(0, BC)
    cmask = c < NCOL
    m = tl.zeros((BC,), tl.float32)
    for b in tl.static_range(NB):
        row0 = (tl.program_id(1) * NB + b) * 16
        mask = cmask & ((c * 0 + row0) < NROW)
        y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15 = _cols16(
            x_ptr, row0.to(tl.int64) * sxr + c, sxr, mask, IN_BF16, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
        m = _absmax16(m, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15)
    tl.atomic_max(out_ptr, tl.max(_abs_bits(m), axis=0))


@triton.jit
def _pin_nan(y):
    """y with every NaN made fp4spec.rht's pinned NaN (0x7FFFFFFF, positive): a NaN's sign is
    otherwise the host's, and the codes of elements with NaN (E4M3, E5M2) keep it."""
    return tl.where(y != y, 0x7FFFFFFF, y.to(tl.int32, bitcast=True)).to(tl.float32, bitcast=True)


@triton.jit
def rht_apply_kernel(x_ptr, y_ptr, M, sxm, sxn, sym, syn, sgn, BM: tl.constexpr, IN_BF16: tl.constexpr,
                     SIGNS: tl.constexpr, OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr):
    """The RHT of the logical matrix x[m, n] = x_ptr[m*sxm + n*sxn] along n, written as float32
    (bf16 output: the rounded values) to y[m, n] = y_ptr[m*sym + n*syn]: the unfused path
    (2-D tiles, other block sizes). A program takes one row of 16 (program_id(1)) of BM
    logical rows."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    mask = rm < M
    n0 = (tl.program_id(1) * 16).to(tl.int64)
    offs = rm.to(tl.int64) * sxm + n0 * sxn
    y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15 = _cols16(
        x_ptr, offs, sxn, mask, IN_BF16, True, SIGNS, sgn, OUT_BF16, BF16_CVT)
    o = y_ptr + rm.to(tl.int64) * sym + n0 * syn
    tl.store(o, _pin_nan(y0), mask=mask)
    tl.store(o + syn, _pin_nan(y1), mask=mask)
    tl.store(o + 2 * syn, _pin_nan(y2), mask=mask)
    tl.store(o + 3 * syn, _pin_nan(y3), mask=mask)
    tl.store(o + 4 * syn, _pin_nan(y4), mask=mask)
    tl.store(o + 5 * syn, _pin_nan(y5), mask=mask)
    tl.store(o + 6 * syn, _pin_nan(y6), mask=mask)
    tl.store(o + 7 * syn, _pin_nan(y7), mask=mask)
    tl.store(o + 8 * syn, _pin_nan(y8), mask=mask)
    tl.store(o + 9 * syn, _pin_nan(y9), mask=mask)
    tl.store(o + 10 * syn, _pin_nan(y10), mask=mask)
    tl.store(o + 11 * syn, _pin_nan(y11), mask=mask)
    tl.store(o + 12 * syn, _pin_nan(y12), mask=mask)
    tl.store(o + 13 * syn, _pin_nan(y13), mask=mask)
    tl.store(o + 14 * syn, _pin_nan(y14), mask=mask)
    tl.store(o + 15 * syn, _pin_nan(y15), mask=mask)
