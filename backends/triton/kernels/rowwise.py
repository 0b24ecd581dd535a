"""Rowwise kernels of a contiguous tensor seen as a list of 1 x K blocks (block b holds
elements [b K, (b + 1) K) of the flat row-major tensor; K a multiple of 16): quantize with one
block per thread (variants ``rows_bf16`` and ``rows``), with a block split over a few threads
(``rows_split``), and the dequantize of packed codes.

``rows`` reads a block as K/4 groups of four (a bf16 group is one int64 word, little endian:
element 4q + t is bits [16t, 16t + 16)), so the amax is a plain reduction over the block's
groups and the four codes of a group make one 16-bit output word (first element in the lowest
nibble) with no data exchange between threads. The same group numbering is Philox's counter
(one Philox4x32-10 call gives the four random words of a group). ``rows_bf16`` (bf16, E2M1,
RNE, 1 x 16 / 1 x 32 blocks, plain scales: the default where it applies) reads a block as
int32 words of two bf16 values with 16-byte loads and runs the fast E2M1 encoder of
:mod:`.primitives` on the FP32 pipe. ``rows_sr`` (SR of E2M1, E1M2 and INT4 in 1 x 16 / 1 x 32
blocks: the default for those) holds a block in registers as rows of 16 (:mod:`.row16`) and
draws one Philox call per group of four, the counter the group's number, as ``rows`` does.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .primitives import (_values_out, _absmax4, _absmax16, _amax2, _bf16_group, _block_scale, _block_scale_f32, _code, _e2m1_rne,
                         _load_group, _max_nan, _mult_b, _needs_exact, _pow2, _rbits4, _store_scales, _ue4m3_value,
                         _unpack, _word_codes, _word_codes_exact)
from .row16 import _rows16_any, _word16_sr


@triton.jit
def _rows_bf16_tile(x_ptr, q_ptr, s_ptr, ts_ptr, mult_b, tile, NBLK,
                    BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                    EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr,
                    HW: tl.constexpr = False):
    """Tile `tile` (BR blocks; HW, GPU only: the hardware UE4M3 conversion, _block_scale's
    HW_CVT, and the sign bits by byte permutes, _pair_codes's PRMT). x_ptr: int32 words (2
    bf16), K/2 per block; q_ptr: int32 words of codes, K/8 per block; s_ptr: uint8 scale codes."""
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
def quantize_rows_bf16_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK,
                              BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr,
                              RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr,
                              SLOW: tl.constexpr = True, HW: tl.constexpr = False):
    """Variant ``rows_bf16``: BR blocks per program, one block per thread -- K/8 16-byte loads at
    the block stride, amax, scale and codes in registers (the fast E2M1 encoder; SLOW: the
    exact one for programs holding a block it cannot take), one 8-byte (K=16) or 16-byte
    (K=32) store of codes. EVEN: every program has BR blocks (no masks)."""
    mult_b = _mult_b(ts_ptr, MX)
    _rows_bf16_tile(x_ptr, q_ptr, s_ptr, ts_ptr, mult_b, tl.program_id(0), NBLK,
                    BR, K, EVEN, MX, RULE, EMAX, NAN_INF, SCALING, SLOW, HW)


@triton.jit
def quantize_rows_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr, NBLK, NSC, CPAD, seed,
                         BR: tl.constexpr, K: tl.constexpr, FAST: tl.constexpr,
                         MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                         SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr,
                         INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                         IN_BF16: tl.constexpr, CUBLAS: tl.constexpr):
    """Rowwise quantization of BR consecutive 1 x K blocks of a contiguous tensor, one block
    per thread (its K/4 groups are read twice: amax, then codes; the second read hits L1).

    x_ptr: int64 words (bf16) or the elements; q_ptr: int64 words of packed codes (K/16 per
    block); s_ptr: uint8 scale codes (row-major, or the cuBLAS layout with CPAD padded
    columns); SR 0: RNE, 1: given int32 bits at r_ptr, 2: Philox from seed."""
    G: tl.constexpr = K // 4
    pid = tl.program_id(0)
    blk = pid.to(tl.int64) * BR + tl.arange(0, BR)
    mask = blk < NBLK
    vm = tl.zeros((BR,), tl.float32)
    for q in tl.static_range(G):
        e0, e1, e2, e3 = _load_group(x_ptr, blk * G + q, mask, IN_BF16)
        vm = _absmax4(vm, e0, e1, e2, e3)
    scode, mult, nan_scale = _block_scale_f32(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
    if SR != 0:
        sr_scale = tl.load(ts_ptr + 3)
    else:
        sr_scale = 0.0
    keep = tl.where(nan_scale, 0, -1)
    for h in tl.static_range(K // 16):
        half = tl.zeros((BR,), tl.int32)
        word = tl.zeros((BR,), tl.int64)
        for qq in tl.static_range(4):
            g = blk * G + (h * 4 + qq)
            e0, e1, e2, e3 = _load_group(x_ptr, g, mask, IN_BF16)
            if SR != 0:
                r0, r1, r2, r3 = _rbits4(r_ptr, seed, g, mask, SR, SR_BITS)
            else:
                r0 = e0
                r1 = e1
                r2 = e2
                r3 = e3
            c0 = _code(e0 * mult, r0, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO, ZERO_POS)
            c1 = _code(e1 * mult, r1, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO, ZERO_POS)
            c2 = _code(e2 * mult, r2, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO, ZERO_POS)
            c3 = _code(e3 * mult, r3, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO, ZERO_POS)
            p = c0 | (c1 << 4) | (c2 << 8) | (c3 << 12)
            if qq % 2 == 0:
                half = p
            else:
                half = half | (p << 16)
                if FAST and not MX:
                    half = half & keep  # two-level: a NaN multiplier (scale 0x7F) gives code 0
                if qq == 1:
                    word = half.to(tl.uint32).to(tl.int64)
                else:
                    word = word | (half.to(tl.uint32).to(tl.int64) << 32)
        tl.store(q_ptr + blk * (K // 16) + h, word, mask=mask)
    _store_scales(s_ptr, blk, scode, mask, NSC, CPAD, CUBLAS)


@triton.jit
def quantize_rows_sr_kernel(x_ptr, q_ptr, s_ptr, r_ptr, ts_ptr, NBLK, NSC, CPAD, seed,
                            BR: tl.constexpr, K: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                            EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SR: tl.constexpr,
                            SR_BITS: tl.constexpr, E2M1: tl.constexpr, SR_MAX: tl.constexpr,
                            SR_SCALE: tl.constexpr, INT4: tl.constexpr, NEGZERO: tl.constexpr,
                            ZERO_POS: tl.constexpr, IN_BF16: tl.constexpr, CUBLAS: tl.constexpr,
                            FP32_PIPE: tl.constexpr = False, HALF_STEP: tl.constexpr = True):
    """Variant ``rows_sr``: stochastic rounding of BR consecutive 1 x K blocks (K = 16 or 32)
    of a contiguous tensor, one block per thread, the K values held in registers (one read):
    amax, scale, then per group of four the random integers -- given (SR 1: int32 at r_ptr,
    one 16-byte load) or one Philox call at the group's counter (SR 2; the
    ``draw_rbits(method="philox")`` stream) -- and the integer SR encoder
    (:func:`.primitives._sr_index`; FP32_PIPE, GPU only: :func:`.primitives._sr_index_fp32`)
    for E2M1, E1M2 and INT4, without the per-element NaN test in programs that cannot have a
    NaN product; one 8-byte store of codes per 16 values. x_ptr: int64 words of four bf16,
    or float32 / float16 elements."""
    G: tl.constexpr = K // 4
    pid = tl.program_id(0)
    blk = pid.to(tl.int64) * BR + tl.arange(0, BR)
    mask = blk < NBLK
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = _rows16_any(x_ptr, blk, 0, mask, G, IN_BF16)
    vm = _absmax16(tl.zeros((BR,), tl.float32), a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)
    if K == 32:
        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _rows16_any(x_ptr, blk, 1, mask, G,
                                                                                          IN_BF16)
        vm = _absmax16(vm, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15)
    scode, mult, nan_scale = _block_scale_f32(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
    # a NaN product needs a NaN input (its block's multiplier is NaN, or 0 for MX) or a
    # multiplier of 0 (Inf * 0: MX NaN scales, a given tensor scale whose multipliers
    # underflow): programs whose multipliers are all positive skip the per-element NaN test
    if tl.max((~(mult > 0.0)).to(tl.int32), axis=0) != 0:  # rare
        w0 = _word16_sr(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, r_ptr, seed, blk * G,
                        mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS, FP32_PIPE,
                        HALF_STEP, True)
        if K == 32:
            w1 = _word16_sr(b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, r_ptr, seed,
                            blk * G + 4, mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS,
                            FP32_PIPE, HALF_STEP, True)
    else:
        w0 = _word16_sr(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, r_ptr, seed, blk * G,
                        mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS, FP32_PIPE,
                        HALF_STEP, False)
        if K == 32:
            w1 = _word16_sr(b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, r_ptr, seed,
                            blk * G + 4, mask, mult, SR, SR_BITS, E2M1, SR_MAX, SR_SCALE, INT4, NEGZERO, ZERO_POS,
                            FP32_PIPE, HALF_STEP, False)
    tl.store(q_ptr + blk * (K // 16), w0, mask=mask)
    if K == 32:
        tl.store(q_ptr + blk * 2 + 1, w1, mask=mask)
    _store_scales(s_ptr, blk, scode, mask, NSC, CPAD, CUBLAS)


@triton.jit
def quantize_rows_split_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK, NSC, CPAD,
                               BR: tl.constexpr, K: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                               EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr,
                               CUBLAS: tl.constexpr):
    """Variant of :func:`quantize_rows_kernel` (bf16, E2M1, RNE) on a [BR, K/4] tile of int64
    words: a block's groups are spread over a few threads (the amax is a row reduction), each
    group's four codes are one 16-bit output word."""
    G: tl.constexpr = K // 4
    pid = tl.program_id(0)
    blk = pid.to(tl.int64) * BR + tl.arange(0, BR)
    mask = blk < NBLK
    gq = tl.arange(0, G)
    offs = blk[:, None] * G + gq[None, :]
    w = tl.load(x_ptr + offs, mask=mask[:, None], other=0)
    e0, e1, e2, e3 = _bf16_group(w)
    m = tl.maximum(tl.maximum(tl.abs(e0), tl.abs(e1), propagate_nan=tl.PropagateNan.ALL),
                   tl.maximum(tl.abs(e2), tl.abs(e3), propagate_nan=tl.PropagateNan.ALL),
                   propagate_nan=tl.PropagateNan.ALL)
    vm = tl.max(m.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=1).to(tl.float32, bitcast=True)
    scode, mult, nan_scale = _block_scale_f32(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
    mb = mult[:, None]
    c0 = _e2m1_rne(e0 * mb, MX)
    c1 = _e2m1_rne(e1 * mb, MX)
    c2 = _e2m1_rne(e2 * mb, MX)
    c3 = _e2m1_rne(e3 * mb, MX)
    p = c0 | (c1 << 4) | (c2 << 8) | (c3 << 12)
    if not MX:
        p = tl.where(nan_scale[:, None], 0, p)
    tl.store(q_ptr + offs, p.to(tl.int16), mask=mask[:, None])
    _store_scales(s_ptr, blk, scode, mask, NSC, CPAD, CUBLAS)


# ---------------------------------------------------------------------------------------------
# Dequantize
# ---------------------------------------------------------------------------------------------


@triton.jit
def _e2m1_value_bits(c):
    """float32 bit pattern of E2M1 code c (int32 in [0, 15]): m >= 2 -> (m + 252) << 22
    (exponent (m >> 1) + 126, mantissa bit m & 1), m = 1 -> 0.5, m = 0 -> 0; sign bit 3 -> 31."""
    m = c & 7
    mag = tl.where(m >= 2, (m + 252) << 22, m * 0x3F000000)
    return mag | ((c & 8) << 28)


@triton.jit
def _dq_value(c, vals_ptr, FAST: tl.constexpr):
    if FAST:
        return _e2m1_value_bits(c).to(tl.float32, bitcast=True)
    else:
        return tl.load(vals_ptr + c)


@triton.jit
def dequantize_rows_kernel(q_ptr, s_ptr, vals_ptr, g_ptr, out_ptr, NBLK,
                           BR: tl.constexpr, K: tl.constexpr, MX: tl.constexpr, FAST: tl.constexpr,
                           OUT_BF16: tl.constexpr):
    """float32 values of BR blocks: q_ptr int32 words of packed codes (8 codes each, first in
    the low nibble), s_ptr uint8 scale codes (one per block); as :func:`dequantize_tile_kernel`."""
    W: tl.constexpr = K // 8
    pid = tl.program_id(0)
    blk = pid.to(tl.int64) * BR + tl.arange(0, BR)
    mask = blk < NBLK
    w = tl.load(q_ptr + blk[:, None] * W + tl.arange(0, W)[None, :], mask=mask[:, None], other=0)
    sc = tl.load(s_ptr + blk, mask=mask, other=0).to(tl.int32)
    if MX:
        sv = tl.where(sc == 255, float("nan"), _pow2(sc - 127))
    else:
        sv = _ue4m3_value(sc)
    svb = sv[:, None]
    if MX:
        g = 1.0
    else:
        g = tl.load(g_ptr)
    v0 = (_dq_value(w & 15, vals_ptr, FAST) * svb) * g
    v1 = (_dq_value((w >> 4) & 15, vals_ptr, FAST) * svb) * g
    v2 = (_dq_value((w >> 8) & 15, vals_ptr, FAST) * svb) * g
    v3 = (_dq_value((w >> 12) & 15, vals_ptr, FAST) * svb) * g
    v4 = (_dq_value((w >> 16) & 15, vals_ptr, FAST) * svb) * g
    v5 = (_dq_value((w >> 20) & 15, vals_ptr, FAST) * svb) * g
    v6 = (_dq_value((w >> 24) & 15, vals_ptr, FAST) * svb) * g
    v7 = (_dq_value((w >> 28) & 15, vals_ptr, FAST) * svb) * g
    # tl.join appends the new axis last: the leaves go in bit-reversed order
    v = tl.join(tl.join(tl.join(v0, v4), tl.join(v2, v6)), tl.join(tl.join(v1, v5), tl.join(v3, v7)))
    v = tl.reshape(v, (BR, K))
    tl.store(out_ptr + blk[:, None] * K + tl.arange(0, K)[None, :], _values_out(v, OUT_BF16), mask=mask[:, None])
