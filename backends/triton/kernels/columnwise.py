"""Columnwise kernels: quantization of x^T (blocks of K rows of the row-major x, along axis 0)
without a transpose. ``cols`` (K = 16, 32; the default) holds a block per thread down a
column, with or without the fused RHT along the block; ``cols_tile`` (any K multiple of 16)
reads K rows x BC columns as two tiles of even and odd rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .primitives import _abs_bits, _absmax16, _block_scale_f32, _code, _cublas_offset, _load_f32
from .row16 import _cols16, _needs_exact_fast, _word16, _word16_fast_or_exact


# ---------------------------------------------------------------------------------------------
# Variant cols_tile: K rows x BC columns per band
# ---------------------------------------------------------------------------------------------


@triton.jit
def _philox_tile(seed, ridx, c0, NCOL, BC: tl.constexpr, SR_BITS: tl.constexpr):
    """Philox bits (float32) of x[ridx, c0 + j] for a [R, BC] tile (c0, BC and NCOL multiples
    of 4): word (c % 4) of the group (ridx * NCOL + c) // 4, as :func:`_rbits4` rowwise."""
    c4 = c0 + 4 * tl.arange(0, BC // 4)
    g = (ridx.to(tl.int64)[:, None] * NCOL + c4.to(tl.int64)[None, :]) // 4
    u0, u1, u2, u3 = tl.randint4x(seed, g)
    u = tl.reshape(tl.join(tl.join(u0, u2), tl.join(u1, u3)), (ridx.shape[0], BC))  # new axes last
    return (u.to(tl.uint32) >> (32 - SR_BITS)).to(tl.float32)


@triton.jit
def quantize_cols_tile_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                              NROW, NCOL, sxr, srr, QW, NSC, CPAD, seed,
                              BC: tl.constexpr, K: tl.constexpr, FAST: tl.constexpr,
                              MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                              SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr,
                              INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                              IN_BF16: tl.constexpr, CUBLAS: tl.constexpr, NBANDS: tl.constexpr = 1):
    """Columnwise quantization (of x^T) without a transpose: the program reads K rows x BC
    columns of x (even and odd rows as two [K/2, BC] tiles, coalesced along the columns); a
    column of the tile is one block. Code pairs are (row 2i, row 2i+1), packed into int64
    words per column (q_ptr: int64 view of the (NCOL, NROW/2) packed output, QW words a row).
    A program does NBANDS consecutive bands of K rows, so that its stores to a column's
    output row are contiguous (whole 32-byte sectors, no partial writes left to merge).
    """
    for band in range(NBANDS):
        _cols_tile_band(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                        NROW, NCOL, sxr, srr, QW, NSC, CPAD, seed, tl.program_id(0),
                        tl.program_id(1) * NBANDS + band,
                        BC, K, FAST, MX, RULE, EMAX, NAN_INF, SCALING, NTHR, SR, SR_BITS, INT4, NEGZERO,
                        ZERO_POS, IN_BF16, CUBLAS)


@triton.jit
def _cols_tile_band(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                    NROW, NCOL, sxr, srr, QW, NSC, CPAD, seed, pid_c, pid_r,
                    BC: tl.constexpr, K: tl.constexpr, FAST: tl.constexpr,
                    MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                    SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr,
                    INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                    IN_BF16: tl.constexpr, CUBLAS: tl.constexpr):
    H: tl.constexpr = K // 2
    c = pid_c * BC + tl.arange(0, BC)
    i = tl.arange(0, H)
    re = pid_r * K + 2 * i
    cmask = c < NCOL
    bmask = cmask & ((c * 0 + pid_r * K) < NROW)
    m2 = cmask[None, :] & (re[:, None] < NROW)
    oe = re.to(tl.int64)[:, None] * sxr + c[None, :]
    ev = _load_f32(x_ptr + oe, m2, IN_BF16)
    od = _load_f32(x_ptr + (oe + sxr), m2, IN_BF16)
    vmb = tl.max(tl.maximum(_abs_bits(ev), _abs_bits(od)), axis=0)
    scode, mult, nan_scale = _block_scale_f32(vmb.to(tl.float32, bitcast=True), ts_ptr, MX, RULE, EMAX, NAN_INF,
                                              SCALING)
    if SR != 0:
        sr_scale = tl.load(ts_ptr + 3)
        if SR == 1:
            ore = re.to(tl.int64)[:, None] * srr + c[None, :]
            r_e = tl.load(r_ptr + ore, mask=m2, other=0).to(tl.float32)
            r_o = tl.load(r_ptr + ore + srr, mask=m2, other=0).to(tl.float32)
        else:
            r_e = _philox_tile(seed, re, pid_c * BC, NCOL, BC, SR_BITS)
            r_o = _philox_tile(seed, re + 1, pid_c * BC, NCOL, BC, SR_BITS)
    else:
        sr_scale = 0.0
        r_e = ev
        r_o = od
    mb = mult[None, :]
    ce = _code(ev * mb, r_e, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO, ZERO_POS)
    co = _code(od * mb, r_o, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO, ZERO_POS)
    byte = ce | (co << 4)
    if FAST and not MX:
        byte = tl.where(nan_scale[None, :], 0, byte)
    sh = ((i % 8) * 8).to(tl.int64)[:, None]
    b64 = byte.to(tl.int64) << sh
    c64 = c.to(tl.int64)
    for h in tl.static_range(K // 16):
        sel = (i // 8 == h)[:, None]
        word = tl.sum(tl.where(sel, b64, 0), axis=0)
        tl.store(q_ptr + c64 * QW + (pid_r * (K // 16) + h), word, mask=bmask)
    if CUBLAS:
        soff = _cublas_offset(c64, pid_r, CPAD)
    else:
        soff = c64 * NSC + pid_r
    tl.store(s_ptr + soff, scode.to(tl.uint8), mask=bmask)


# ---------------------------------------------------------------------------------------------
# Variant cols: a block per thread down a column, NB blocks per program
# ---------------------------------------------------------------------------------------------


@triton.jit
def _rbits_row(r_ptr, seed, row, c, c0, mask, srr, NCOL, NB: tl.constexpr, BC: tl.constexpr, SR: tl.constexpr,
               SR_BITS: tl.constexpr):
    """Random bits (float32) of x[row, c] for a [NB, BC] tile (row: [NB, 1] int64, c: [1, BC]
    int64 = c0 + arange(BC)): given (int32 at r_ptr[row * srr + c]) or Philox of the flat
    index, as :func:`_rbits4` (NCOL, c0 and BC multiples of 4)."""
    if SR == 1:
        return tl.load(r_ptr + (row * srr + c), mask=mask, other=0).to(tl.float32)
    else:
        c4 = c0 + 4 * tl.arange(0, BC // 4)
        g = (row * NCOL + c4.to(tl.int64)[None, :]) // 4
        u0, u1, u2, u3 = tl.randint4x(seed, g)
        u = tl.reshape(tl.join(tl.join(u0, u2), tl.join(u1, u3)), (NB, BC))  # new axes last
        return (u.to(tl.uint32) >> (32 - SR_BITS)).to(tl.float32)


@triton.jit
def _rbits_cols16(r_ptr, seed, row, c, c0, mask, srr, NCOL, NB: tl.constexpr, BC: tl.constexpr, SR: tl.constexpr,
                  SR_BITS: tl.constexpr):
    r0 = _rbits_row(r_ptr, seed, row, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r1 = _rbits_row(r_ptr, seed, row + 1, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r2 = _rbits_row(r_ptr, seed, row + 2, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r3 = _rbits_row(r_ptr, seed, row + 3, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r4 = _rbits_row(r_ptr, seed, row + 4, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r5 = _rbits_row(r_ptr, seed, row + 5, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r6 = _rbits_row(r_ptr, seed, row + 6, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r7 = _rbits_row(r_ptr, seed, row + 7, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r8 = _rbits_row(r_ptr, seed, row + 8, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r9 = _rbits_row(r_ptr, seed, row + 9, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r10 = _rbits_row(r_ptr, seed, row + 10, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r11 = _rbits_row(r_ptr, seed, row + 11, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r12 = _rbits_row(r_ptr, seed, row + 12, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r13 = _rbits_row(r_ptr, seed, row + 13, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r14 = _rbits_row(r_ptr, seed, row + 14, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    r15 = _rbits_row(r_ptr, seed, row + 15, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    return r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15


@triton.jit
def _cols_blocks(x_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr, row0, c, c0, mask, sxr, srr, NCOL, seed,
                 NB: tl.constexpr, BC: tl.constexpr, K: tl.constexpr, FAST: tl.constexpr, MX: tl.constexpr,
                 RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr,
                 NTHR: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr, INT4: tl.constexpr,
                 NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, IN_BF16: tl.constexpr, RHT: tl.constexpr,
                 SIGNS: tl.constexpr, sgn, OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr, SLOW: tl.constexpr):
    """NB x BC blocks of K rows: block (b, j) holds rows row0[b] .. row0[b] + K - 1 of column
    c[j] (row0: [NB, 1] int64, c: [1, BC] int64). Returns the scale codes (int32) and the code
    words (int64, 16 codes each: one for K = 16, two for K = 32), all [NB, BC]."""
    offs = row0 * sxr + c
    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = _cols16(
        x_ptr, offs, sxr, mask, IN_BF16, RHT, SIGNS, sgn, OUT_BF16, BF16_CVT)
    vm = _absmax16(tl.zeros((NB, BC), tl.float32), a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14,
                   a15)
    if K == 32:
        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = _cols16(
            x_ptr, offs + 16 * sxr, sxr, mask, IN_BF16, RHT, SIGNS, sgn, OUT_BF16, BF16_CVT)
        vm = _absmax16(vm, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15)
    scode, mult, nan_scale = _block_scale_f32(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
    if FAST:
        # values on the bf16 grid (bf16 RHT output, or bf16 input without the RHT): nonzero >= 2^-133
        SIGN_BIT: tl.constexpr = OUT_BF16 if RHT else IN_BF16
        ex = tl.max(tl.max(_needs_exact_fast(mult, nan_scale, MX, SIGN_BIT).to(tl.int32), axis=1), axis=0)
        ex = SLOW and ex != 0  # rare: the exact encoder for the whole program
        wa = _word16_fast_or_exact(ex, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, mult, nan_scale,
                                   thr_ptr, dthr_ptr, mags_ptr, MX, NTHR, INT4, NEGZERO, ZERO_POS, SIGN_BIT)
        if K == 32:
            wb = _word16_fast_or_exact(ex, b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, mult, nan_scale,
                                       thr_ptr, dthr_ptr, mags_ptr, MX, NTHR, INT4, NEGZERO, ZERO_POS, SIGN_BIT)
        else:
            wb = wa
        return scode, wa, wb
    if SR != 0:
        sr_scale = tl.load(ts_ptr + 3)
        r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = _rbits_cols16(
            r_ptr, seed, row0, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
    else:
        sr_scale = 0.0
        r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = (
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15)
    wa = _word16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
                 r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15,
                 mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO,
                 ZERO_POS)
    if K == 32:
        if SR != 0:
            r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = _rbits_cols16(
                r_ptr, seed, row0 + 16, c, c0, mask, srr, NCOL, NB, BC, SR, SR_BITS)
        else:
            r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15 = (
                b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15)
        wb = _word16(b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15,
                     r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15,
                     mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST, MX, NTHR, SR != 0, INT4, NEGZERO,
                     ZERO_POS)
        return scode, wa, wb
    else:
        return scode, wa, wa


@triton.jit
def quantize_cols_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                         NCOL, sxr, srr, QW, NSC, CPAD, seed, sgn, col_xor,
                         BC: tl.constexpr, K: tl.constexpr, NB: tl.constexpr, FAST: tl.constexpr,
                         MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                         SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, SR_BITS: tl.constexpr,
                         INT4: tl.constexpr, NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr,
                         IN_BF16: tl.constexpr, CUBLAS: tl.constexpr, RHT: tl.constexpr, SIGNS: tl.constexpr,
                         OUT_BF16: tl.constexpr, BF16_CVT: tl.constexpr, SLOW: tl.constexpr = True,
                         SCALAR_LOADS: tl.constexpr = False):
    """Columnwise quantization (of x^T, blocks of K = 16 or 32 rows of the row-major x), with
    or without the RHT along the block (axis 0), without a transpose.

    A program takes NB (1, 2 or 4) consecutive blocks of K rows of BC columns, held as
    [NB, BC] tensors: each row of 16 is 16 coalesced loads of [NB, BC] (a block's values in
    one thread), so amax, scale and codes need no exchange between threads, and the code
    is that of one block whatever NB (compile time). A column's 16 codes are one int64
    word; the band's NB K/16 words of a column are one [BC, NB K/16] tile (NB K/16 = 4: 32
    contiguous output bytes per column, a whole sector) and its NB scale codes one int16 /
    int32 word (contiguous in the transposed layout, and in the cuBLAS 128x4 layout since
    the first block is a multiple of NB). NSC % NB == 0 (the host chooses NB).

    q_ptr: int64 view of the (NCOL, NROW/2) packed output (QW words a row); s_ptr: the
    scale codes (uint8, int16 or int32 view for NB = 1, 2, 4) of the (NCOL, NSC) plain or
    cuBLAS (CPAD) layout.

    FAST (E2M1, RNE): the fast encoder with the exact encoder for programs that need it, as
    :func:`quantize_rows_rht_kernel` (SLOW=False: without that branch).
    """
    pid_c = tl.program_id(0)
    pid_r = tl.program_id(1)
    c0 = pid_c * BC
    c = c0 + tl.arange(0, BC)
    cmask = c < NCOL
    c64 = c.to(tl.int64)
    blk0 = pid_r * NB
    jb = tl.arange(0, NB)
    row0 = ((blk0 + jb) * K).to(tl.int64)[:, None]
    mask = tl.broadcast_to(cmask[None, :], (NB, BC))
    if SCALAR_LOADS:
        # col_xor is a run-time 0: triton cannot prove the columns contiguous, so each value is
        # loaded in the layout that computes it. Its 8-byte loads would each be followed by a
        # layout conversion through shared memory, whose barriers keep the next row's load from
        # issuing before the conversion (one load in flight per warp: benchmarks/NOTES-triton.md)
        cl = c64 ^ col_xor
    else:
        cl = c64
    sc, wa, wb = _cols_blocks(x_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr, row0, cl[None, :], c0, mask, sxr, srr,
                              NCOL, seed, NB, BC, K, FAST, MX, RULE, EMAX, NAN_INF, SCALING, NTHR, SR, SR_BITS,
                              INT4, NEGZERO, ZERO_POS, IN_BF16, RHT, SIGNS, sgn, OUT_BF16, BF16_CVT, SLOW)
    W: tl.constexpr = NB * (K // 16)
    if K == 16:
        words = tl.trans(wa)  # [BC, NB]
    else:
        words = tl.reshape(tl.permute(tl.join(wa, wb), (1, 0, 2)), (BC, W))  # block b: words 2b, 2b + 1
    wcol = blk0 * (K // 16) + tl.arange(0, W)
    tl.store(q_ptr + c64[:, None] * QW + wcol[None, :], words, mask=cmask[:, None])
    # the NB scale bytes of a column as one little-endian word (disjoint bit fields: sum = or)
    sw = tl.sum(sc << (8 * jb)[:, None], axis=0)
    if CUBLAS:
        soff = _cublas_offset(c64, blk0, CPAD) // NB
    else:
        soff = c64 * (NSC // NB) + pid_r
    if NB == 1:
        tl.store(s_ptr + soff, sw.to(tl.uint8), mask=cmask)
    elif NB == 2:
        tl.store(s_ptr + soff, sw.to(tl.int16), mask=cmask)
    else:
        tl.static_assert(NB == 4, "NB: 1, 2 or 4 blocks per program")
        tl.store(s_ptr + soff, sw, mask=cmask)
