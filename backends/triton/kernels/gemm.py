"""Kernels of the block-scaled GEMM under the ``sm90-bf16`` accumulator model: the exact bf16
dequantization of packed operands (in the K loop, or as a prepass) and the bf16 ``tl.dot`` chain
into a float32 accumulator. The normative algorithm (steps 1-5) and why it is bit-exact:
:mod:`..gemm`.
"""

from __future__ import annotations

import inspect

import triton
import triton.language as tl


@triton.jit
def _element(code, ELEM: tl.constexpr):
    """float32 values of 4-bit element codes (int32 0..15), exact, -0 kept.

    e2m1 (ELEM 0) and e1m2 (1) are read as float32 bit patterns: the magnitude bits put in
    the low exponent bit(s) and the top mantissa bit(s) (e2m1: bits 24..22, e1m2: bits
    23..21), the sign in bit 31, then multiplied by 2^126 (e2m1) or 2^127 (e1m2). A code
    with a zero exponent field is a float32 subnormal pattern, and the multiplication by
    the power of two is exact (e2m1 m = 1: 2^-127 * 2^126 = 0.5) as long as the multiply
    does not flush subnormals (Triton emits no .ftz for it; the exhaustive dequantization
    test would show it). int4_sym (2): (code ^ 8) = value + 8, made float by the 2^23 trick
    ((u | 0x4B000000) - (2^23 + 8)).
    """
    if ELEM == 0:
        v = (((code & 8) << 28) | ((code & 7) << 22)).to(tl.float32, bitcast=True) * 8.507059173023462e37
    elif ELEM == 1:
        v = (((code & 8) << 28) | ((code & 7) << 21)).to(tl.float32, bitcast=True) * 1.7014118346046923e38
    else:
        v = ((code ^ 8) | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0
    return v


@triton.jit
def _scale_operand(s, SCALE: tl.constexpr):
    """What the dequantization multiplies by, per scale code s (int32): UE4M3 (SCALE 1): its
    float32 value (exact; bit 7 ignored -- the sm90-bf16 model's ue4m3_sign_bit='ignore', so
    a float8_e4m3fn byte 0xFF reads as 0x7F; 0x7F -> NaN); E8M0 (SCALE 0): s itself (the
    exponent is added as an integer)."""
    if SCALE == 1:
        s = s & 0x7F
        e = s >> 3
        m = s & 7
        normal = ((e + 120) << 23 | (m << 20)).to(tl.float32, bitcast=True)
        sub = ((m | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0) * 0.001953125
        v = tl.where(e == 0, sub, normal)
        v = tl.where(s == 0x7F, float("nan"), v)
    else:
        v = s
    return v


@triton.jit
def _bf16_bits(code, sv, ELEM: tl.constexpr, SCALE: tl.constexpr):
    """bf16 bit patterns (int32 in 0..0xFFFF) of element * block scale, as the sm90-bf16
    model's operands: exact products, +-Inf on overflow, NaN for a NaN scale code
    (``sv`` from :func:`_scale_operand`).

    UE4M3 (SCALE 1): one float32 multiplication, exact and normal (|product| >= 2^-10,
    at most 8 significant bits), so its upper 16 bits are the bf16 value. E8M0 (SCALE 0):
    one float32 multiplication by 2^(s - 127) (the float32 pattern s << 23; 2^-127, a
    float32 subnormal, for s = 0), exact: the elements carry at most 3 significant bits and
    their smallest product, 0.5 * 2^-127 = 2^-128, is a multiple of bf16's subnormal step
    2^-133, so the product is a bf16 value (float32's upper 16 bits), +-Inf where it reaches
    2^128, a signed zero for a zero element; s = 255 is NaN.
    """
    v = _element(code, ELEM)
    if SCALE == 1:
        r = ((v * sv).to(tl.int32, bitcast=True) >> 16) & 0xFFFF
    else:
        pow2 = tl.where(sv == 0, 0x400000, sv << 23).to(tl.float32, bitcast=True)
        r = ((v * pow2).to(tl.int32, bitcast=True) >> 16) & 0xFFFF
        r = tl.where(sv == 255, 0x7FC0, r)
    return r


@triton.jit
def _tile_scales(s_ptr, rows, first, ss, BR: tl.constexpr, COLS: tl.constexpr, PER: tl.constexpr,
                 SCALE: tl.constexpr, mask):
    """The scale operands of a BR x COLS tile whose columns share one scale per PER
    consecutive columns (scale index ``first`` at column 0): loaded and decoded once per
    block, then broadcast (shape (BR, COLS), or (BR, 1) when one block covers the tile)."""
    if PER >= COLS:
        s = tl.load(s_ptr + rows * ss + first, mask=mask, other=0).to(tl.int32)
        out = _scale_operand(s, SCALE)[:, None]
    else:
        NB: tl.constexpr = COLS // PER
        s = tl.load(s_ptr + rows[:, None] * ss + (first + tl.arange(0, NB))[None, :], mask=mask[:, None],
                    other=0)
        sv = _scale_operand(s.to(tl.int32), SCALE)
        out = tl.reshape(tl.broadcast_to(sv[:, :, None], (BR, NB, PER)), (BR, COLS))
    return out


@triton.jit
def _as_dot_operand(bits, DOT_F32: tl.constexpr):
    """bf16 tensor from bf16 bit patterns (int32); the same value as float32 under the
    interpreter (whose tl.dot mishandles bf16), exact either way."""
    if DOT_F32:
        return (bits << 16).to(tl.float32, bitcast=True)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _operand_tile(p_ptr, s_ptr, rows, k0, sp, ss, BR: tl.constexpr, BK: tl.constexpr, BLOCK: tl.constexpr,
                  ELEM: tl.constexpr, SCALE: tl.constexpr, FUSED: tl.constexpr, DUP: tl.constexpr,
                  DOT_F32: tl.constexpr):
    """One BR x BK operand tile (rows ``rows`` (int64), K from k0), bf16 for tl.dot.

    FUSED: packed codes (p_ptr, row stride sp bytes) and scale codes (s_ptr, row stride
    ss), dequantized here; else a bf16 matrix (row stride sp) loaded straight into the
    dot (int16 bit patterns under the interpreter).
    DUP: column c of the tile is K index k0 + 16 (c // 16) + 2 (c % 8) + (c // 8) % 2 (the
    same 16-element group, permuted); else column c is K index k0 + c.
    """
    if FUSED:
        true = rows >= 0
        if DUP:
            c = tl.arange(0, BK)
            kb = k0 // 2 + (c // 16) * 8 + (c % 8)
            byte = tl.load(p_ptr + rows[:, None] * sp + kb[None, :]).to(tl.int32)
            code = (byte >> (((c // 8) % 2) * 4)[None, :]) & 15
            sv = _tile_scales(s_ptr, rows, k0 // BLOCK, ss, BR, BK, BLOCK, SCALE, true)
            bits = _bf16_bits(code, sv, ELEM, SCALE)
        else:
            kb = k0 // 2 + tl.arange(0, BK // 2)
            byte = tl.load(p_ptr + rows[:, None] * sp + kb[None, :]).to(tl.int32)
            sv = _tile_scales(s_ptr, rows, k0 // BLOCK, ss, BR, BK // 2, BLOCK // 2, SCALE, true)
            lo = _bf16_bits(byte & 15, sv, ELEM, SCALE)
            hi = _bf16_bits(byte >> 4, sv, ELEM, SCALE)
            bits = tl.reshape(tl.join(lo, hi), (BR, BK))
        x = _as_dot_operand(bits, DOT_F32)
    else:
        c = tl.arange(0, BK)
        if DUP:
            k = k0 + (c // 16) * 16 + 2 * (c % 8) + (c // 8) % 2
        else:
            k = k0 + c
        x = tl.load(p_ptr + rows[:, None] * sp + k[None, :])
        if DOT_F32:
            x = _as_dot_operand(x.to(tl.int32) & 0xFFFF, DOT_F32)
    return x


@triton.jit
def _dot_step(a_ptr, as_ptr, b_ptr, bs_ptr, ra, rb, k0, sam, sas, sbn, sbs, acc, BM: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr,
              A_FUSED: tl.constexpr, A_ELEM: tl.constexpr, A_SCALE: tl.constexpr, A_BLOCK: tl.constexpr,
              B_FUSED: tl.constexpr, B_ELEM: tl.constexpr, B_SCALE: tl.constexpr, B_BLOCK: tl.constexpr,
              DUP: tl.constexpr, DOT_F32: tl.constexpr):
    """acc + A[:, k0:k0+BK] . B[:, k0:k0+BK]^T: one tl.dot (BK / 16 chained MMA steps)."""
    a = _operand_tile(a_ptr, as_ptr, ra, k0, sam, sas, BM, BK, A_BLOCK, A_ELEM, A_SCALE, A_FUSED, DUP, DOT_F32)
    b = _operand_tile(b_ptr, bs_ptr, rb, k0, sbn, sbs, BN, BK, B_BLOCK, B_ELEM, B_SCALE, B_FUSED, DUP, DOT_F32)
    if DOT_F32:
        acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, tl.trans(b), acc)
    return acc


@triton.jit
def tile_indices(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(rows, columns, rows mod M as int64, columns mod N as int64, the in-range mask) of
    output tile ``pid`` in the grouped order (GROUP_M rows of tiles share B tiles in L2;
    :func:`..certify.tile_blocks` inverts it)."""
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % size_m
    pid_n = (pid % per_group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    omask = (rm[:, None] < M) & (rn[None, :] < N)
    return rm, rn, (rm % M).to(tl.int64), (rn % N).to(tl.int64), omask


@triton.jit
def lsb_floor(bits):
    """A lower bound of the lsb exponent of float32 values (int32 bit patterns): exponent - 23,
    -149 for subnormals (and zeros, which the callers test first)."""
    e = (bits >> 23) & 255
    return tl.where(e == 0, -149, e - 150)


@triton.jit
def limit_24(lo):
    """2^min(lo + 24, 128) as float32 (+Inf for 128 and above) for lo >= -150: the bound below
    which every multiple of 2^lo is a float32 (:mod:`..certify`)."""
    t = tl.minimum(tl.maximum(lo + 24, -126), 127)
    return tl.where(lo + 24 >= 128, float("inf"), ((t + 127) << 23).to(tl.float32, bitcast=True))


@triton.jit
def _cert_fail_rows(mx, c_ptr, ra, rb, rm64, rn, scm, omask, la_ptr, lb_ptr, na_ptr, nb_ptr, lo_min, inflate,
                    HAS_C: tl.constexpr):
    """Per tile row, whether any output lacks the certificate of :mod:`..certify`:
    ``(mx + na_i nb_j) inflate + 2^-140 < 2^min(lo + 24, 128)`` with lo = la_i + lb_j (with c:
    also at most a lower bound of lsb(c), its exponent - 23, -149 for subnormals; a c of -0
    is never certified) and lo >= lo_min. mx: the largest |acc| at the K tiles' boundaries."""
    lo = tl.load(la_ptr + ra)[:, None] + tl.load(lb_ptr + rb)[None, :]
    if HAS_C:
        cb = tl.load(c_ptr + rm64[:, None] * scm + rn[None, :], mask=omask, other=0.0).to(tl.int32, bitcast=True)
        lo = tl.where((cb & 0x7FFFFFFF) == 0, lo, tl.minimum(lo, lsb_floor(cb)))
        lo = tl.where(cb == -2147483648, -(1 << 20), lo)
    limit = tl.where(lo >= lo_min, limit_24(lo), 0.0)
    na = tl.load(na_ptr + ra)
    nb = tl.load(nb_ptr + rb)
    bound = (mx + na[:, None] * nb[None, :]) * inflate + 7.174648137343064e-43
    fail = tl.where((bound < limit) | ~omask, 0, 1)
    return tl.max(fail, axis=1)


def gemm_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, g_ptr, out_ptr, zero, M, N, K,
                sam, sas, sbn, sbs, scm, som,
                la_ptr, lb_ptr, na_ptr, nb_ptr, bad_ptr, lo_min, inflate,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                A_FUSED: tl.constexpr, A_ELEM: tl.constexpr, A_SCALE: tl.constexpr, A_BLOCK: tl.constexpr,
                B_FUSED: tl.constexpr, B_ELEM: tl.constexpr, B_SCALE: tl.constexpr, B_BLOCK: tl.constexpr,
                DUP: tl.constexpr, HAS_C: tl.constexpr, HAS_G: tl.constexpr, OUT_BF16: tl.constexpr,
                NAN: tl.constexpr, DOT_F32: tl.constexpr, TAIL: tl.constexpr, CERT: tl.constexpr):
    """One BM x BN tile of C = A . B^T (+ c), steps 2-5 of :mod:`..gemm`'s docstring.

    Grouped tile order (GROUP_M rows of tiles share B tiles in L2). Rows past M / N are
    read modulo M / N (no masks in the K loop) and not stored. TAIL: K is any multiple of
    16 (the K % BK rest runs as k = 16 dots after the BK ones, still in ascending K);
    else K % BK == 0.

    CERT: also write to ``bad_ptr[pid]`` whether any output of the tile lacks the exactness
    certificate of :mod:`..certify` (la/lb: int32 lsb bounds per row; na/nb: float32 bounds
    per row of the norm of any K tile; the largest |acc| at the K tiles' boundaries is kept
    per output). The result is computed as without CERT.
    """
    pid = tl.program_id(0)
    rm, rn, ra, rb, omask = tile_indices(pid, M, N, BM, BN, GROUP_M)
    rm64 = rm.to(tl.int64)
    if HAS_C:
        acc = tl.load(c_ptr + rm64[:, None] * scm + rn[None, :], mask=omask, other=0.0)
    else:
        # +0 from a runtime argument: a constant zero would let Triton drop the
        # accumulator operand of the first MMA, which the model does not describe
        acc = tl.full((BM, BN), zero, tl.float32)
    k_main = K
    if TAIL:
        k_main = K - K % BK
    if CERT:
        mx = tl.abs(acc)
    for k0 in range(0, k_main, BK):
        acc = _dot_step(a_ptr, as_ptr, b_ptr, bs_ptr, ra, rb, k0, sam, sas, sbn, sbs, acc, BM, BN, BK,
                        A_FUSED, A_ELEM, A_SCALE, A_BLOCK, B_FUSED, B_ELEM, B_SCALE, B_BLOCK, DUP, DOT_F32)
        if CERT:
            mx = tl.maximum(mx, tl.abs(acc))
    if TAIL:
        if BK > 16:
            for k0 in range(k_main, K, 16):
                acc = _dot_step(a_ptr, as_ptr, b_ptr, bs_ptr, ra, rb, k0, sam, sas, sbn, sbs, acc, BM, BN, 16,
                                A_FUSED, A_ELEM, A_SCALE, A_BLOCK, B_FUSED, B_ELEM, B_SCALE, B_BLOCK, DUP,
                                DOT_F32)
                if CERT:
                    mx = tl.maximum(mx, tl.abs(acc))
    if CERT:
        fail = _cert_fail_rows(mx, c_ptr, ra, rb, rm64, rn, scm, omask, la_ptr, lb_ptr, na_ptr, nb_ptr, lo_min,
                               inflate, HAS_C)
        tl.store(bad_ptr + pid, tl.max(fail, axis=0))
    if HAS_G:
        acc = acc * tl.load(g_ptr)
    bits = tl.where(acc != acc, NAN, acc.to(tl.int32, bitcast=True))
    optr = out_ptr + rm64[:, None] * som + rn[None, :]
    if OUT_BF16:
        r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        r = tl.where(acc != acc, (NAN >> 16) & 0xFFFF, r)
        tl.store(optr, r.to(tl.int16), mask=omask)
    else:
        tl.store(optr, bits, mask=omask)


def dequant_bf16_kernel(p_ptr, s_ptr, out_ptr, R, KB, sp, ss, so,
                        BR: tl.constexpr, BKB: tl.constexpr, BLOCK: tl.constexpr,
                        ELEM: tl.constexpr, SCALE: tl.constexpr):
    """bf16(element * scale) of a BR x 2 BKB tile: out (int32 view of the bf16 R x K
    matrix, row stride so = K / 2 words) gets lo | hi << 16 per packed byte."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    kb = tl.program_id(1) * BKB + tl.arange(0, BKB)
    rmask = rows < R
    mask = rmask[:, None] & (kb[None, :] < KB)
    r64 = rows.to(tl.int64)
    byte = tl.load(p_ptr + r64[:, None] * sp + kb[None, :], mask=mask, other=0).to(tl.int32)
    sv = _tile_scales(s_ptr, r64, (tl.program_id(1) * BKB * 2) // BLOCK, ss, BR, BKB, BLOCK // 2, SCALE, rmask)
    lo = _bf16_bits(byte & 15, sv, ELEM, SCALE)
    hi = _bf16_bits(byte >> 4, sv, ELEM, SCALE)
    tl.store(out_ptr + r64[:, None] * so + kb[None, :], lo | (hi << 16), mask=mask)


@triton.jit
def operand_stats_kernel(x_ptr, s_ptr, la_ptr, na_ptr, ha_ptr, R, K, sx, ss, KCH, BR: tl.constexpr, SB: tl.constexpr,
                         BLOCK: tl.constexpr, SCALE: tl.constexpr, ELSB: tl.constexpr, LSB_MIN: tl.constexpr,
                         HA: tl.constexpr, EMAX: tl.constexpr):
    """The certificate's row statistics (:mod:`..certify`) of a bf16 operand (x: int16 bit
    patterns, R x K, row stride sx; s: scale codes, row stride ss): na[r] = the largest
    Euclidean norm over the row's K tiles of SB elements (float32: sums of SB squares, then a
    square root; the certificate's ``inflate`` covers their rounding); la[r] = the smallest
    lsb exponent of the row's nonzero blocks (scale lsb + ELSB: E8M0 ``s - 127``, UE4M3 bit 7
    ignored, ``e - 10`` or -9 for e = 0), or -2^20 where a value is NaN or Inf, a square
    overflows, or la < LSB_MIN (never certified); 2^20 for a row of zeros. HA: also ha[r] =
    the largest assigned exponent of the row's nonzero blocks' scales (E8M0 ``s - 127``, UE4M3
    ``e - 7`` or -6 for e = 0), plus EMAX (the element format's largest assigned exponent)
    where HA == 2; -2^20 for a row of zeros.

    Program (i, j) reads rows i BR.. and columns j KCH.. (KCH a multiple of SB) and combines
    its partial results with atomic min / max (order-free, so deterministic): la_ptr must
    hold 2^20, na_ptr 0 and ha_ptr -2^20 before the launch. Splitting K keeps enough loads in
    flight; one program per row band was latency-bound."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < R
    r64 = rows.to(tl.int64)
    NB: tl.constexpr = SB // BLOCK
    best = tl.zeros((BR,), tl.float32)
    lsb = tl.full((BR,), 1 << 20, tl.int32)
    hi = tl.full((BR,), -(1 << 20), tl.int32)
    never = tl.zeros((BR,), tl.int32)
    kstart = tl.program_id(1) * KCH
    for k0 in range(kstart, tl.minimum(kstart + KCH, K), SB):
        cols = k0 + tl.arange(0, SB)
        m = rmask[:, None] & (cols[None, :] < K)
        v = (tl.load(x_ptr + r64[:, None] * sx + cols[None, :], mask=m, other=0).to(tl.int32) << 16).to(
            tl.float32, bitcast=True)
        sq = tl.sum(v * v, axis=1)
        never = tl.maximum(never, tl.where((sq == sq) & (sq < float("inf")), 0, 1))
        best = tl.maximum(best, sq)
        nz = tl.max(tl.reshape(tl.abs(v), (BR, NB, BLOCK)), axis=2) > 0
        blocks = k0 // BLOCK + tl.arange(0, NB)
        sc = tl.load(s_ptr + r64[:, None] * ss + blocks[None, :], mask=rmask[:, None] & (blocks[None, :] < K // BLOCK),
                     other=0).to(tl.int32)
        if SCALE == 1:
            e = (sc & 0x7F) >> 3
            bl = tl.where(e == 0, -9, e - 10)
            bh = tl.where(e == 0, -6, e - 7)
        else:
            bl = sc - 127
            bh = sc - 127
        lsb = tl.minimum(lsb, tl.min(tl.where(nz, bl + ELSB, 1 << 20), axis=1))
        if HA > 0:
            hi = tl.maximum(hi, tl.max(tl.where(nz, bh + EMAX, -(1 << 20)), axis=1))
    # a partial la below LSB_MIN or a non-finite partial makes the row's minimum -2^20 too
    la = tl.where((never != 0) | (lsb < LSB_MIN), -(1 << 20), lsb)
    tl.atomic_min(la_ptr + rows, la, mask=rmask)
    # norms are non-negative floats: their bit patterns order as they do
    tl.atomic_max(na_ptr + rows, tl.sqrt_rn(best).to(tl.int32, bitcast=True), mask=rmask)
    if HA > 0:
        tl.atomic_max(ha_ptr + rows, hi, mask=rmask)


def _jit_pair(fn, shape_args):
    """(fn specialised on every int argument, as the tuned configurations want: strides that
    are multiples of 16 give vector loads; fn with ``shape_args`` -- sizes and strides --
    as plain runtime ints: one compile for every shape)."""
    names = list(inspect.signature(fn).parameters)
    return triton.jit(fn), triton.jit(fn, do_not_specialize=[names.index(a) for a in shape_args])


gemm_kernel, gemm_kernel_any = _jit_pair(gemm_kernel, ("M", "N", "K", "sam", "sas", "sbn", "sbs", "scm", "som", "lo_min"))
dequant_bf16_kernel, dequant_bf16_kernel_any = _jit_pair(dequant_bf16_kernel, ("R", "KB", "sp", "ss", "so"))
