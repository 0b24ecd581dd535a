"""RHT on the tensor cores: ``arith="mma:sm90-bf16"`` (fp4spec.rht, steps M1-M5) in Triton.

The transform ``y_row = x_row . T`` (T = diag(s) . H16 / 4, exact in bf16) is one bf16
``tl.dot`` with a float32 accumulator starting at +0, which on Hopper computes the
``sm90-bf16`` accumulator model bit for bit (the model of fp4spec's GEMM, measured on the
H200); the result is rounded to bf16 (RNE) as step M5 says. A butterfly on the CUDA cores
(``fwht-fp32``) costs several instructions per element; the dot almost none
(benchmarks/RESULTS.md).

Kernels:

* :func:`rows_rht_mma_kernel` -- fused RHT + rowwise quantize of a contiguous bf16 tensor
  (E2M1, 1 x 16 or 1 x 32 blocks, RNE, plain scales; two-level and MX), the block encoder of
  the ``rows_bf16`` kernel. Tensors of whole tiles read their operand by TMA (a tensor
  descriptor whose box is one tile's operand, :func:`..mma.tma_view`: 2-D for plain rows,
  5-D for paired rows) in a loop that triton pipelines; others by pointer loads.
* :func:`rht_mma_apply_kernel` -- the RHT of a logical M x N matrix along N (any strides)
  written to a float32 tensor: the unfused path (SR, columnwise, other elements, the cuBLAS
  layout).
* :func:`rht_mma_amax_kernel` -- max |RHT(x)| of a contiguous tensor (the tensor amax of
  two-level schemes), one pass, no temporary.

Why the fused kernel multiplies by a 64 x 64 block-diagonal matrix (the *wide* dot). The MMA
accumulator of ``[R, 64] @ [64, 64]`` leaves thread ``t`` of a quad (t = lane % 4) the
columns ``8 i + 2 t + e`` (i = 0..7, e = 0, 1) of its two rows, on Hopper's wgmma and on
mma.sync alike. Column ``8 i + 2 t + e`` of the wide matrix B is column ``2 i + e`` of T,
on the rows of the t-th group of 16 inputs (zeros elsewhere): so each thread ends up with
the 16 outputs of one RHT row per accumulator row -- whole blocks, with no layout exchange,
and the block amax, scale and codes stay in the thread (the ``rows_bf16`` kernel's cost). Rows m and m + 8 of
a 16-row group (the two rows a thread holds) load 32 consecutive elements per t: the two
halves of a 1 x 32 block, or two consecutive 1 x 16 blocks, so a thread's codes are 16
contiguous bytes. The code below states all of this as reshapes and permutes of the logical tensor, so
its results do not depend on the layout Triton picks; only its speed does.

Exactness of the wide dot: for finite inputs, the model's chained k = 16 steps over the 64
rows of B add exact zeros before and after the one step that carries a column's 16 products;
a step of zero products returns its accumulator unchanged (aligned to its own exponent, or to
e_zero = -133 above it: exact either way, and a zero accumulator stays +0). So every column
equals the model's single k = 16 dot. A non-finite input would spread (Inf * 0 = NaN) to the
other three RHT rows of its accumulator row; a tile whose wide result holds a NaN therefore
recomputes its values with one [rows, 16] @ T dot per RHT row (one uniform branch per
program, rare). Under ``TRITON_INTERPRET=1`` the dots are the model's (``model_dot``, through
``..gemm.interpreter_model_dot``), including the spreading, so the CPU runs the same
paths.

The MX encoder on bf16x2 words (GPU only, :func:`_encode_store_bf16x2`). Step M5 rounds
every value to bf16, and an MX multiplier is a power of two, so the E2M1 grid roundings can
run in bf16 itself: ``cvt.rn.bf16x2.f32`` makes one word of two values, and the three
fma-with-magic roundings (``.primitives._mag_bf16x2``), the 4-way min and the block amax
run on both halves at once. Half the instructions per element of the float32 encoder
(counts: benchmarks/RESULTS.md).
"""


from __future__ import annotations

import triton
import triton.language as tl

from .primitives import (_amax2, _bf16x2_pack, _block_scale, _max_halves_f32, _max_u16x2, _mult_b, _mx_codes_bf16x2,
                         _mx_mults_bf16x2, _needs_exact, _pair_codes, _pair_codes_exact, _split4)
from .row16 import _bf16_rne


@triton.jit
def _bf16_round(y, INTERP: tl.constexpr):
    """Step M5: float32 y to the nearest bf16 (ties to even, overflow -> Inf, NaN -> 0x7FFF),
    as float32. The interpreter's own fp32 -> bf16 cast truncates: integer ops there."""
    if INTERP:
        r = _bf16_rne(y).to(tl.int32, bitcast=True)
        return tl.where(y != y, 0x7FFF0000, r).to(tl.float32, bitcast=True)  # NaN: the model's
    else:
        return y.to(tl.bfloat16).to(tl.float32)


@triton.jit
def _out(y, OUT_BF16: tl.constexpr, INTERP: tl.constexpr):
    """Step M5: the bf16 rounding (OUT_BF16) or the float32 result itself."""
    if OUT_BF16:
        return _bf16_round(y, INTERP)
    else:
        return y


@triton.jit
def _dot_bf16(a_bits, b_bits, INTERP: tl.constexpr):
    """a . b of bf16 bit patterns (int16) with a float32 accumulator from +0: the MMA. The
    interpreter multiplies bf16 bit patterns in its dot, so there the operands go in as their
    exact float32 values (interpreter_model_dot turns that dot into the model)."""
    if INTERP:
        a = (a_bits.to(tl.int32) << 16).to(tl.float32, bitcast=True)
        b = (b_bits.to(tl.int32) << 16).to(tl.float32, bitcast=True)
        return tl.dot(a, b)
    else:
        return tl.dot(a_bits.to(tl.bfloat16, bitcast=True), b_bits.to(tl.bfloat16, bitcast=True))


@triton.jit
def _load_t16(t_ptr):
    i = tl.arange(0, 16)
    return tl.load(t_ptr + i[:, None] * 16 + i[None, :])


# ---------------------------------------------------------------------------------------------
# Fused RHT + rowwise quantize
# ---------------------------------------------------------------------------------------------


@triton.jit
def _bf16_val(y, INTERP: tl.constexpr):
    """Step M5 for one float32 value: bf16(y) (RNE, NaN -> 0x7FFF) as float32. On a GPU one
    instruction: the packed cvt.rn.bf16x2.f32 with +0 as its low half writes the float32
    pattern itself (``y.to(bfloat16).to(float32)`` is a cvt and a shift; one packed cvt per
    pair and an unpack cost one instruction per value more). The interpreter rounds on
    integers."""
    if INTERP:
        return _bf16_round(y, INTERP)
    else:
        return tl.inline_asm_elementwise("{ .reg .f32 z; mov.f32 z, 0f00000000; cvt.rn.bf16x2.f32 $0, $1, z; }",
                                         "=r,f", [y], dtype=tl.int32, is_pure=True,
                                         pack=1).to(tl.float32, bitcast=True)


@triton.jit
def _load_wide(w_ptr):
    n = tl.arange(0, 64)
    return tl.load(w_ptr + n[:, None] * 64 + n[None, :])


@triton.jit
def _load_a(x_ptr, e0, NELEM, R: tl.constexpr, EVEN: tl.constexpr, PAIR: tl.constexpr = True):
    """The [R, 64] int16 operand of the wide dot: the R * 64 elements from e0. Row
    m = 16 g + 8 h + l, column 16 t + k is element ((8 g + l) * 4 + t) * 32 + 16 h + k: the
    rows m and m + 8 that one thread's accumulator holds get 32 consecutive elements for each
    t -- the two halves of a 1 x 32 block, or two consecutive 1 x 16 blocks -- so a thread's
    codes are 16 contiguous bytes and a warp's are 512 (the stores need no layout exchange).
    PAIR=False: row m is the 64 elements from e0 + 64 m (a plain [R, 64] tile: a TMA box that
    the 128-byte swizzle fits; a thread then holds one RHT row of each of rows m, m + 8)."""
    m = tl.arange(0, R)
    k = tl.arange(0, 64)
    if PAIR:
        row0 = ((m // 16) * 8 + m % 8) * 128 + ((m // 8) % 2) * 16
        offs = row0[:, None] + ((k // 16) * 32 + k % 16)[None, :]
    else:
        offs = m[:, None] * 64 + k[None, :]
    if EVEN:
        return tl.load(x_ptr + e0 + offs)
    else:
        return tl.load(x_ptr + e0 + offs, mask=(e0 + offs) < NELEM, other=0)


@triton.jit
def _wide_vals(a, b, R: tl.constexpr, G: tl.constexpr, INTERP: tl.constexpr, PAIR: tl.constexpr = True):
    """(lo, hi), each [R * 4 / G, 2 G, 4] float32: the bf16 RHT of the operand a
    (:func:`_load_a`) as pairs (lo: element 2j, hi: element 2j + 1), one quantization block per
    row, by the wide dot with b (the wide matrix, :func:`_load_wide`; module docstring); pair w
    of a block is [.., w // 4, w % 4]."""
    y = _dot_bf16(a, b, INTERP)  # [R, 64] float32
    if PAIR:
        # row 16 g + 8 h + l, column 8 i + 2 t + e -> element ((8 g + l) * 4 + t) * 32 + 16 h + 2 i + e
        y = tl.permute(tl.reshape(y, (R // 16, 2, 8, 8, 4, 2)), (0, 2, 4, 1, 3, 5))  # [g, l, t, h, i, e]
    else:
        # row m, column 8 i + 2 t + e -> element 64 m + 16 t + 2 i + e
        y = tl.permute(tl.reshape(y, (R, 8, 4, 2)), (0, 2, 1, 3))  # [m, t, i, e]
    lo, hi = tl.split(y)
    lo, hi = _bf16_val(lo, INTERP), _bf16_val(hi, INTERP)
    return tl.reshape(lo, (R * 4 // G, 2 * G, 4)), tl.reshape(hi, (R * 4 // G, 2 * G, 4))


@triton.jit
def _wide_words(a, b, R: tl.constexpr, PAIR: tl.constexpr = True):
    """[R * 2, 4, 4] int32 (GPU only, 1 x 32 blocks): the bf16 RHT of the operand a as bf16x2
    words, one block per row; word [n, g, r] holds elements 8 g + r (low half) and
    8 g + r + 4 (high half) of block n, the layout of .primitives._nibbles_bf16x2.
    Step M5 is the cvt that makes the words (one per two elements)."""
    y = _dot_bf16(a, b, False)  # [R, 64] float32
    if PAIR:
        # row 16 g + 8 h + l, column 8 i + 2 t + e (i = 4 i2 + 2 i1 + i0) -> element
        # ((8 g + l) * 4 + t) * 32 + 16 h + 2 i + e: block (g, l, t), position 8 (2 h + i2) + 4 i1 + 2 i0 + e
        y = tl.reshape(y, (R // 16, 2, 8, 2, 2, 2, 4, 2))  # [g, h, l, i2, i1, i0, t, e]
        y = tl.permute(y, (0, 2, 6, 1, 3, 5, 7, 4))  # [g, l, t, h, i2, i0, e, i1]
    else:
        # row m, column 8 i + 2 t + e (t = 2 t1 + t0) -> element 64 m + 16 t + 2 i + e: block
        # (m, t1), position 8 (2 t0 + i2) + 4 i1 + 2 i0 + e
        y = tl.reshape(y, (R, 2, 2, 2, 2, 2, 2))  # [m, i2, i1, i0, t1, t0, e]
        y = tl.permute(y, (0, 4, 5, 1, 3, 6, 2))  # [m, t1, t0, i2, i0, e, i1]
    lo, hi = tl.split(tl.reshape(y, (R * 2, 4, 4, 2)))
    return _bf16x2_pack(lo, hi)


@triton.jit
def _encode_store_bf16x2(xw, q_ptr, s_ptr, ts_ptr, blk0, NB: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                         NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr, SPREAD: tl.constexpr):
    """:func:`_encode_store` of MX 1 x 32 blocks given as the bf16x2 words of
    :func:`_wide_words` (GPU only; the fast encoder, per-block stores): the block amax by
    max.u16x2 over the sign-clear words, codes and signs two elements an instruction
    (.primitives._mx_codes_bf16x2). Same bits as the
    float32 path (a block's values times its power-of-two multiplier are below 8; NaN-scale
    blocks are flagged for the exact encoder, as there)."""
    aw = xw & 0x7FFF7FFF
    am = tl.reduce(tl.reduce(aw, 2, _max_u16x2), 1, _max_u16x2)  # [NB]: the max of each half
    vmb = _max_halves_f32(am)  # float32 pattern of the block amax
    scode, mult, nan_scale = _block_scale(vmb, ts_ptr, 1.0, True, RULE, EMAX, NAN_INF, SCALING)
    m1, m2, m4 = _mx_mults_bf16x2(mult)
    x0, x1, x2, x3 = _split4(xw)
    q = _mx_codes_bf16x2(x0, x1, x2, x3, m1[:, None], m2[:, None], m4[:, None])  # [NB, 4]
    oq = blk0 * 4 + tl.arange(0, NB)[:, None] * 4 + tl.arange(0, 4)[None, :]
    tl.store(q_ptr + oq, q)
    tl.store(s_ptr + blk0 + tl.arange(0, NB), scode.to(tl.uint8))
    return _redo_flags(vmb, mult, nan_scale, True, SLOW, SPREAD)


@triton.jit
def _plain_vals(x_ptr, t_ptr, e0, NELEM, R: tl.constexpr, G: tl.constexpr, EVEN: tl.constexpr,
                INTERP: tl.constexpr):
    """The same pairs as :func:`_wide_vals` by one [R * 4, 16] @ T dot (every RHT row on its
    own: right for non-finite inputs too)."""
    offs = tl.arange(0, R * 4)[:, None] * 16 + tl.arange(0, 16)[None, :]
    if EVEN:
        xb = tl.load(x_ptr + e0 + offs)
    else:
        xb = tl.load(x_ptr + e0 + offs, mask=(e0 + offs) < NELEM, other=0)
    y = _dot_bf16(xb, _load_t16(t_ptr), INTERP)
    lo, hi = tl.split(tl.reshape(y, (R * 4, 8, 2)))
    lo, hi = _bf16_val(lo, INTERP), _bf16_val(hi, INTERP)
    return tl.reshape(lo, (R * 4 // G, 2 * G, 4)), tl.reshape(hi, (R * 4 // G, 2 * G, 4))


@triton.jit
def _vals_amax(lo, hi):
    """[NB, H, 4] pairs -> [NB] sign-clear float32 pattern of the block amax (NaN: above all)."""
    return tl.max(tl.max(_amax2(lo, hi).to(tl.int32, bitcast=True), axis=2), axis=1)


@triton.jit
def _redo_flags(vmb, mult, nan_scale, MX: tl.constexpr, SLOW: tl.constexpr, SPREAD: tl.constexpr):
    """[NB] int32: 2 where a NaN may have spread across RHT rows (SPREAD: the values must be
    recomputed), | 1 where the fast encoder may be wrong (SLOW: the exact encoder), else 0."""
    flag = tl.zeros_like(vmb)
    if SPREAD:
        flag = tl.where(vmb > 0x7F800000, 2, flag)
    if SLOW:
        flag = flag | _needs_exact(mult, nan_scale, MX).to(tl.int32)
    return flag


@triton.jit
def _encode_store(lo, hi, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, blk0, NBLK, NB: tl.constexpr, K: tl.constexpr,
                  EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                  NAN_INF: tl.constexpr, SCALING: tl.constexpr, EXACT: tl.constexpr, GA: tl.constexpr = False,
                  SLOW: tl.constexpr = False, SPREAD: tl.constexpr = False, BLOCK_STORES: tl.constexpr = False,
                  HW: tl.constexpr = False):
    """Block amax, scale, codes of the [NB, K/8, 4] pairs (lo, hi) and their stores (EXACT: the
    exact encoder; else the fast one, exact where _needs_exact holds for no block). Returns
    the blocks' :func:`_redo_flags` (SLOW, SPREAD). HW (GPU only): the hardware UE4M3
    conversion (.primitives._ue4m3_cvt) and the sign bits by byte permutes
    (.primitives._pair_codes)."""
    vmb = _vals_amax(lo, hi)
    scode, mult, nan_scale = _block_scale(vmb, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING, GA, HW)
    mb = mult[:, None, None]
    if EXACT:
        q = _pair_codes_exact(lo, hi, mb, MX)
    else:
        q = _pair_codes(lo, hi, mb, mb * 0.5, mb * 0.25, MX, half, quarter, HW)  # [NB, K / 8]
    if not MX:
        q = tl.where(nan_scale[:, None], 0, q)  # NaN scale code: every element code 0
    if BLOCK_STORES:
        # each block's codes (8 or 16 bytes) and scale byte stored from the thread that holds
        # them: no exchange between threads whatever the operand rows
        q4 = q
        oq = blk0 * (K // 8) + tl.arange(0, NB)[:, None] * (K // 8) + tl.arange(0, K // 8)[None, :]
        s2 = scode.to(tl.uint8)
        osc = blk0 + tl.arange(0, NB)
    else:
        # 16 bytes of codes per row of q4 (two 1 x 16 blocks or one 1 x 32 block: one thread's
        # with paired rows; with plain rows Triton exchanges words between threads)
        NW: tl.constexpr = NB * (K // 8) // 4
        S: tl.constexpr = 32 // K
        q4 = tl.reshape(q, (NW, 4))
        oq = blk0 * (K // 8) + tl.arange(0, NW)[:, None] * 4 + tl.arange(0, 4)[None, :]
        s2 = tl.reshape(scode.to(tl.uint8), (NB // S, S))
        osc = blk0 + tl.arange(0, NB // S)[:, None] * S + tl.arange(0, S)[None, :]
    if EVEN:
        tl.store(q_ptr + oq, q4)
        tl.store(s_ptr + osc, s2)
    else:
        tl.store(q_ptr + oq, q4, mask=oq < NBLK * (K // 8))
        tl.store(s_ptr + osc, s2, mask=osc < NBLK)
    return _redo_flags(vmb, mult, nan_scale, MX, SLOW, SPREAD)


@triton.jit
def _tile_flag(lo, hi, ts_ptr, mult_b, MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
               NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr, SPREAD: tl.constexpr,
               GA: tl.constexpr = False):
    """One tile-wide reduction for both rare cases: the max of :func:`_redo_flags` (2 =
    recompute the values, 1 = the exact encoder, 0 = neither)."""
    vmb = _vals_amax(lo, hi)
    _, mult, nan_scale = _block_scale(vmb, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING, GA)
    return tl.max(_redo_flags(vmb, mult, nan_scale, MX, SLOW, SPREAD), axis=0)


@triton.jit
def _fused_tile(a, x_ptr, b, t_ptr, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, NELEM, NBLK,
                R: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr,
                RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr,
                SLOW: tl.constexpr, INTERP: tl.constexpr, SPREAD: tl.constexpr, GA: tl.constexpr = False,
                PAIR: tl.constexpr = True):
    """One tile (GA: the multiplier gather by inline PTX, .primitives._load_hidden). Each
    branch stores its own results, so no tensor leaves a branch: a value that did would make
    Triton give both branches one layout (a shared-memory round trip of every value on the fast
    path)."""
    G: tl.constexpr = K // 16
    NB: tl.constexpr = R * 4 // G
    e0 = tl.cast(tile, tl.int64) * (R * 64)
    blk0 = e0 // K
    lo, hi = _wide_vals(a, b, R, G, INTERP, PAIR)
    f = 0
    if SPREAD or SLOW:
        f = _tile_flag(lo, hi, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING, SLOW, SPREAD, GA)
    if f >= 2:  # rare: recompute every RHT row on its own, then the exact encoder (NaN blocks)
        lo2, hi2 = _plain_vals(x_ptr, t_ptr, e0, NELEM, R, G, EVEN, INTERP)
        _encode_store(lo2, hi2, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, blk0, NBLK, NB, K, EVEN, MX, RULE, EMAX,
                      NAN_INF, SCALING, SLOW, GA)
    elif f == 1:  # rare: the exact encoder
        _encode_store(lo, hi, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, blk0, NBLK, NB, K, EVEN, MX, RULE, EMAX,
                      NAN_INF, SCALING, True, GA)
    else:
        _encode_store(lo, hi, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, blk0, NBLK, NB, K, EVEN, MX, RULE, EMAX,
                      NAN_INF, SCALING, False, GA)


@triton.jit
def _fast_tile(a, b, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, NBLK, R: tl.constexpr, K: tl.constexpr,
               MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
               SCALING: tl.constexpr, SLOW: tl.constexpr, INTERP: tl.constexpr, SPREAD: tl.constexpr,
               GA: tl.constexpr, PAIR: tl.constexpr, BLOCK_STORES: tl.constexpr,
               HW: tl.constexpr, BF16X2: tl.constexpr = False):
    """One whole tile by the fast path alone, no branch; returns its blocks' _redo_flags (the
    caller redoes the tile by :func:`_fused_tile` where one is nonzero). BF16X2 (MX 1 x 32,
    GPU only): the encoder on bf16x2 words (:func:`_encode_store_bf16x2`)."""
    G: tl.constexpr = K // 16
    e0 = tl.cast(tile, tl.int64) * (R * 64)
    if BF16X2:
        return _encode_store_bf16x2(_wide_words(a, b, R, PAIR), q_ptr, s_ptr, ts_ptr, e0 // K, R * 2, RULE, EMAX,
                                    NAN_INF, SCALING, SLOW, SPREAD)
    lo, hi = _wide_vals(a, b, R, G, INTERP, PAIR)
    return _encode_store(lo, hi, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, e0 // K, NBLK, R * 4 // G, K, True, MX,
                         RULE, EMAX, NAN_INF, SCALING, False, GA, SLOW, SPREAD, BLOCK_STORES, HW)


@triton.jit
def _tma_operand(x_desc, tile, R: tl.constexpr, PAIR: tl.constexpr, PAIR_T: tl.constexpr):
    """The tile's [R, 64] operand from its TMA box (:func:`..mma.tma_view`). PAIR_T: the paired rows'
    box with its column group t outermost ([t, g, h, l, k]), whose shared-memory image is the
    operand's 32-byte-swizzled layout itself (four [R, 16] column groups)."""
    if PAIR_T:
        a5 = x_desc.load([0, tile * (R // 16), 0, 0, 0])
        return tl.reshape(tl.permute(a5, (1, 2, 3, 0, 4)), (R, 64))
    elif PAIR:
        return tl.reshape(x_desc.load([tile * (R // 16), 0, 0, 0, 0]), (R, 64))
    else:
        return x_desc.load([tile * R, 0])


@triton.jit
def rows_rht_mma_kernel(x_ptr, x_desc, w_ptr, t_ptr, q_ptr, s_ptr, ts_ptr, NELEM, NBLK, NTILES, half, quarter,
                        R: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr,
                        RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr,
                        SLOW: tl.constexpr, INTERP: tl.constexpr, PERSIST: tl.constexpr = False,
                        STAGES: tl.constexpr = 1, SPREAD: tl.constexpr = True, TMA: tl.constexpr = False,
                        PAIR: tl.constexpr = True, DEFER: tl.constexpr = False,
                        BLOCK_STORES: tl.constexpr = False, HW_CVT: tl.constexpr = False,
                        PAIR_T: tl.constexpr = False, BF16X2: tl.constexpr = False):
    """Fused RHT (mma, bf16 output) + rowwise E2M1 RNE quantize of a contiguous bf16 tensor.

    x_ptr: int16 (bf16 bits), NELEM elements; w_ptr: the wide 64 x 64 matrix, t_ptr: T (16 x
    16), both int16 bf16 bits (:func:`..mma.matrices`); q_ptr: int32 words of codes, K/8 per
    block; s_ptr: uint8 scale codes; ts_ptr: the constants of ..quantize.quantize_packed.
    A tile is R rows of 64 elements (R * 64 / K blocks); from the bf16 words on it is
    the ``rows_bf16`` kernel's tile (block scale, fast encoder, exact fallback per tile).
    half, quarter: 0.5 and 0.25 (.primitives._mag_y: literals there cost instructions here).
    x_desc: with TMA, the tensor descriptor of :func:`..mma.tma_view` over x (whole tiles only):
    a program loops over tiles pid, pid + P, ..., and triton pipelines the operand loads over
    STAGES shared-memory buffers (else any value: unused).
    PERSIST: a program loops over tiles pid, pid + P, ... (the wide matrix loaded once; the
    next tile's operand loaded ahead by hand; STAGES > 1 also lets triton pipeline the loop);
    else one tile per program. SPREAD=False drops the
    recomputation of tiles holding a NaN (instruction counts only: wrong on non-finite input).
    DEFER (with TMA): the loop runs the fast path alone and keeps each thread's redo flags;
    one reduction after the loop decides whether the program runs its tiles again by the
    checked path (rare), instead of a tile-wide reduction and branch per tile. The barrier of
    that reduction orders the second pass's stores after the first's.
    BLOCK_STORES (the deferred loop's fast path): each thread stores its own blocks' codes and
    scale bytes, else 16-byte rows of codes (with plain rows, an exchange of words between
    threads by shuffles). HW_CVT (the deferred loop's fast path): two-level block scales by the
    hardware UE4M3 conversion (.primitives._ue4m3_cvt; GPU only). BF16X2 (the deferred
    loop's fast path, MX 1 x 32 blocks, GPU only): the encoder on bf16x2 words, two elements
    an instruction (:func:`_encode_store_bf16x2`)."""
    mult_b = _mult_b(ts_ptr, MX)
    b = _load_wide(w_ptr)
    pid = tl.program_id(0)
    if TMA:
        # the operand by the tensor memory accelerator: a box of x_desc (:func:`..mma.tma_view`) is the
        # [R, 64] operand of :func:`_load_a` (paired rows: the 5-D box [g, h, l, t, k] for row
        # m = 16 g + 8 h + l, column 16 t + k); triton pipelines the loads over STAGES buffers
        if DEFER:
            redo = tl.zeros([R * 4 // (K // 16)], tl.int32)
            for tile in tl.range(pid, NTILES, tl.num_programs(0), num_stages=STAGES):
                a = _tma_operand(x_desc, tile, R, PAIR, PAIR_T)
                redo = redo | _fast_tile(a, b, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, NBLK, R, K, MX, RULE,
                                         EMAX, NAN_INF, SCALING, SLOW, INTERP, SPREAD, not INTERP, PAIR,
                                         BLOCK_STORES, HW_CVT, BF16X2)
            if tl.max(redo, axis=0) != 0:  # rare: this program's tiles again, each checked
                tl.debug_barrier()
                for tile in range(pid, NTILES, tl.num_programs(0)):
                    a = _load_a(x_ptr, tl.cast(tile, tl.int64) * (R * 64), NELEM, R, True, PAIR)
                    _fused_tile(a, x_ptr, b, t_ptr, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, NELEM, NBLK, R,
                                K, True, MX, RULE, EMAX, NAN_INF, SCALING, SLOW, INTERP, SPREAD, False, PAIR)
        else:
            for tile in tl.range(pid, NTILES, tl.num_programs(0), num_stages=STAGES):
                a = _tma_operand(x_desc, tile, R, PAIR, PAIR_T)
                _fused_tile(a, x_ptr, b, t_ptr, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, NELEM, NBLK, R, K,
                            EVEN, MX, RULE, EMAX, NAN_INF, SCALING, SLOW, INTERP, SPREAD, not INTERP, PAIR)
    elif PERSIST:
        # the next tile's operand is loaded before this tile is computed (one tile in flight
        # per program besides the one computed; the last prefetch rereads the last tile)
        a = _load_a(x_ptr, tl.cast(pid, tl.int64) * (R * 64), NELEM, R, EVEN, PAIR)
        for tile in tl.range(pid, NTILES, tl.num_programs(0), num_stages=STAGES):
            nxt = tl.minimum(tile + tl.num_programs(0), NTILES - 1)
            a_next = _load_a(x_ptr, tl.cast(nxt, tl.int64) * (R * 64), NELEM, R, EVEN, PAIR)
            _fused_tile(a, x_ptr, b, t_ptr, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, NELEM, NBLK, R, K, EVEN, MX, RULE,
                        EMAX, NAN_INF, SCALING, SLOW, INTERP, SPREAD, False, PAIR)
            a = a_next
    else:
        a = _load_a(x_ptr, tl.cast(pid, tl.int64) * (R * 64), NELEM, R, EVEN, PAIR)
        _fused_tile(a, x_ptr, b, t_ptr, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, pid, NELEM, NBLK, R, K, EVEN, MX,
                    RULE, EMAX, NAN_INF, SCALING, SLOW, INTERP, SPREAD, False, PAIR)


# ---------------------------------------------------------------------------------------------
# Unfused transform and the tensor amax
# ---------------------------------------------------------------------------------------------


@triton.jit
def rht_mma_apply_kernel(x_ptr, t_ptr, y_ptr, M, sxm, sxn, sym, syn, BM: tl.constexpr, OUT_BF16: tl.constexpr,
                         INTERP: tl.constexpr):
    """y[m, n] = RHT(x)[m, n] (float32 holding the bf16-rounded values) of the logical matrix
    x[m, n] = x_ptr[m * sxm + n * sxn] (int16 bf16 bits) along n; a program takes BM logical
    rows of one RHT row (program_id(1))."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    mask = (rm < M)[:, None]
    k = tl.arange(0, 16)
    n0 = (tl.program_id(1) * 16).to(tl.int64)
    xb = tl.load(x_ptr + rm.to(tl.int64)[:, None] * sxm + (n0 + k)[None, :] * sxn, mask=mask, other=0)
    y = _out(_dot_bf16(xb, _load_t16(t_ptr), INTERP), OUT_BF16, INTERP)
    tl.store(y_ptr + rm.to(tl.int64)[:, None] * sym + (n0 + k)[None, :] * syn, y, mask=mask)


@triton.jit
def rht_mma_amax_kernel(x_ptr, t_ptr, out_ptr, NROW, R: tl.constexpr, OUT_BF16: tl.constexpr,
                        INTERP: tl.constexpr):
    """atomic max into out_ptr (int32 pattern, starts at 0) of |RHT(x)| over the NROW rows of 16
    of a contiguous tensor (a NaN gives a NaN pattern: above every number)."""
    r = tl.program_id(0).to(tl.int64) * R + tl.arange(0, R)
    mask = (r < NROW)[:, None]
    xb = tl.load(x_ptr + r[:, None] * 16 + tl.arange(0, 16)[None, :], mask=mask, other=0)
    y = _out(_dot_bf16(xb, _load_t16(t_ptr), INTERP), OUT_BF16, INTERP)
    m = tl.max(tl.max(y.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=1), axis=0)
    tl.atomic_max(out_ptr, m)
