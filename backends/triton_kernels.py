"""Triton kernels of the triton backend: the emulator's float32 steps, one tile per program.

Every fp32 operation is the spec's, in the spec's order: products and sums are single IEEE
RNE operations, the one division (TE's element multiplier ``1 / (s * S_dec)``) is
``tl.math.div_rn`` (Triton's ``/`` on fp32 may be approximate on NVIDIA GPUs), clamps are
``tl.where`` comparisons (NaN passes through, as ``np.minimum``). Bit-level steps (amax as
the max of sign-cleared bit patterns, E8M0 exponents, UE4M3 rounding, 2^e) are integer
operations on the float32 patterns. Element rounding counts float32 thresholds taken from
the emulator's own tables (passed in a small device tensor).

Kernels:

* :func:`amax_kernel` -- global amax (int32 atomic max of sign-cleared bit patterns).
* :func:`quantize_kernel` -- one (BM x BN) tile of the logical matrix (strides given, so
  rowwise and columnwise/transposed quantization are the same kernel): block amaxes (1 x k
  blocks or 16 x k tiles), scale codes, element codes (RNE, or SR with given random bits),
  two codes per byte (first element in the low nibble), scale codes.
* :func:`dequantize_kernel` -- packed codes and scale codes back to float32.
"""

from __future__ import annotations

import triton
import triton.language as tl

# the FP32-pipe E2M1 encoder (proved equal to _e2m1_rne over every float32 in the tests)
from .triton_rows_fast import _mag_scaled, _mag_y
# block scales on amax bit patterns (shared with the fast rowwise kernels)
from .triton_rows_fast import _block_scale as _block_scale_bits
from .triton_rows_fast import _bf16x2_pack, _max_halves_f32, _max_u16x2, _mult_b, _mx_codes_bf16x2, _mx_mults_bf16x2
from .triton_rows_fast import _pow2, _ue4m3_sat, _unpack

FLT_MAX = 3.4028234663852886e38


@triton.jit
def _load_f32(ptrs, mask, BF16: tl.constexpr):
    """Load as float32; bf16 arrives as int16 bit patterns and widens by a shift (exact,
    subnormals included -- the CPU interpreter's own bf16 conversion flushes them)."""
    if BF16:
        v = tl.load(ptrs, mask=mask, other=0).to(tl.int32)
        return (v << 16).to(tl.float32, bitcast=True)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def amax_kernel(x_ptr, out_ptr, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr, BF16: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm.to(tl.int64)[:, None] * sxm + rn.to(tl.int64)[None, :] * sxn
    x = _load_f32(x_ptr + offs, mask, BF16)
    b = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    tl.atomic_max(out_ptr, tl.max(tl.max(b, axis=1), axis=0))


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
    idx = tl.minimum(idx, NTHR - 1)
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
    return tl.where(y != y, 0, code)


@triton.jit
def quantize_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                    M, N, sxm, sxn, sqm, ssm, srm, srn,
                    BM: tl.constexpr, BN: tl.constexpr, K: tl.constexpr, TILE_R: tl.constexpr,
                    MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr, NAN_INF: tl.constexpr,
                    SCALING: tl.constexpr, NTHR: tl.constexpr, SR: tl.constexpr, INT4: tl.constexpr,
                    NEGZERO: tl.constexpr, ZERO_POS: tl.constexpr, BF16: tl.constexpr):
    """Quantize one BM x BN tile of the logical matrix x[m, n] = x_ptr[m*sxm + n*sxn] along n.

    ts_ptr (float32): [S_enc, S_dec, fp32(1/max_elem), 2^sr_bits]. MX: RULE 0 floor, 1 ceil,
    2 even, 3 rceil (multiply by fp32(1/max)); SCALING 0 exact, 1 torchao, 2 rceil-TE.
    """
    NB: tl.constexpr = BN // K
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rm64 = rm.to(tl.int64)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = _load_f32(x_ptr + rm64[:, None] * sxm + rn.to(tl.int64)[None, :] * sxn, mask, BF16)
    xb = tl.reshape(x, (BM, NB, K))
    bits = xb.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    vmb = tl.max(bits, axis=2)  # (BM, NB)
    if TILE_R > 1:
        t = tl.max(tl.reshape(vmb, (BM // TILE_R, TILE_R, NB)), axis=1)
        vmb = tl.reshape(tl.broadcast_to(t[:, None, :], (BM // TILE_R, TILE_R, NB)), (BM, NB))
    vm = vmb.to(tl.float32, bitcast=True)
    if MX:
        scode, mult, _ = _block_scale(vm, ts_ptr, True, RULE, EMAX, NAN_INF, SCALING)
    else:
        s_enc = tl.load(ts_ptr)
        s_dec = tl.load(ts_ptr + 1)
        mult_b = s_enc * tl.load(ts_ptr + 2)
        s = vm * mult_b
        s = tl.where(s > 3.4028234663852886e38, 3.4028234663852886e38, s)
        scode = _ue4m3_sat(s)
        den = _ue4m3_value(scode) * s_dec
        me = tl.math.div_rn(tl.full(den.shape, 1.0, tl.float32), den)
        mult = tl.where(me > 3.4028234663852886e38, 3.4028234663852886e38, me)
    y = xb * mult[:, :, None]
    if SR:
        rr = tl.load(r_ptr + rm64[:, None] * srm + rn.to(tl.int64)[None, :] * srn, mask=mask, other=0)
        r = tl.reshape(rr.to(tl.float32), (BM, NB, K))
        sr_scale = tl.load(ts_ptr + 3)
    else:
        r = y
        sr_scale = 0.0
    codes = _element_codes(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, NTHR, SR, INT4, NEGZERO, ZERO_POS)
    pairs = tl.reshape(codes, (BM, BN // 2, 2))
    lo, hi = tl.split(pairs)
    packed = (lo | (hi << 4)).to(tl.uint8)
    cn = pid_n * (BN // 2) + tl.arange(0, BN // 2)
    tl.store(q_ptr + rm64[:, None] * sqm + cn[None, :], packed,
             mask=(rm[:, None] < M) & (cn[None, :] < N // 2))
    sn = pid_n * NB + tl.arange(0, NB)
    tl.store(s_ptr + rm64[:, None] * ssm + sn[None, :], scode.to(tl.uint8),
             mask=(rm[:, None] < M) & (sn[None, :] < N // K))


@triton.jit
def dequantize_kernel(q_ptr, s_ptr, vals_ptr, g_ptr, out_ptr, M, N, sqm, ssm, som,
                      BM: tl.constexpr, BN: tl.constexpr, K: tl.constexpr, MX: tl.constexpr):
    """float32 values: MX fp32(P * 2^(s-127)) (NaN for 0xFF); TE two-level fp32(fp32(P * s) * S_dec)."""
    NB: tl.constexpr = BN // K
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rm64 = rm.to(tl.int64)
    cn = pid_n * (BN // 2) + tl.arange(0, BN // 2)
    qmask = (rm[:, None] < M) & (cn[None, :] < N // 2)
    p = tl.load(q_ptr + rm64[:, None] * sqm + cn[None, :], mask=qmask, other=0).to(tl.int32)
    lo = tl.load(vals_ptr + (p & 15))
    hi = tl.load(vals_ptr + (p >> 4))
    v = tl.reshape(tl.join(lo, hi), (BM, NB, K))
    sn = pid_n * NB + tl.arange(0, NB)
    sc = tl.load(s_ptr + rm64[:, None] * ssm + sn[None, :], mask=(rm[:, None] < M) & (sn[None, :] < N // K),
                 other=0).to(tl.int32)
    if MX:
        sv = _pow2(sc - 127)
        sv = tl.where(sc == 255, float("nan"), sv)
        out = v * sv[:, :, None]
    else:
        sv = _ue4m3_value(sc)
        out = (v * sv[:, :, None]) * tl.load(g_ptr)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(out_ptr + rm64[:, None] * som + rn[None, :], tl.reshape(out, (BM, BN)),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


# ---------------------------------------------------------------------------------------------
# Fast paths (v2): one scale block per tile row, groups of four elements per 64-bit word.
# ---------------------------------------------------------------------------------------------
#
# Rowwise, the tensor is a list of blocks: block b holds elements [b*K, (b+1)*K) of the flat
# row-major tensor, and its K elements are G = K/4 groups of four. A bf16 group is one int64
# word (little endian: element 4q+t is bits [16t, 16t+16)), so a block is read with 64-bit
# loads, the amax is a plain reduction over the block's groups, and the four codes of a group
# make one 16-bit output word (first element in the lowest nibble) with no data exchange
# between threads. The same group numbering is Philox's counter (one Philox4x32-10 call gives
# the four random words of a group).


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
def _absmax4(m, e0, e1, e2, e3):
    """Running max of |e| with NaN propagation (a block holding a NaN has a NaN amax)."""
    m = tl.maximum(m, tl.abs(e0), propagate_nan=tl.PropagateNan.ALL)
    m = tl.maximum(m, tl.abs(e1), propagate_nan=tl.PropagateNan.ALL)
    m = tl.maximum(m, tl.abs(e2), propagate_nan=tl.PropagateNan.ALL)
    m = tl.maximum(m, tl.abs(e3), propagate_nan=tl.PropagateNan.ALL)
    return m


@triton.jit
def mult_table_kernel(ts_ptr, out_ptr):
    """TE element multipliers of the 128 UE4M3 scale codes: fp32 min(1 / fp32(value(c) * S_dec),
    FLT_MAX) (div_rn), so the quantize kernels look them up instead of dividing per block."""
    c = tl.arange(0, 128)
    den = _ue4m3_value(c) * tl.load(ts_ptr + 1)
    me = tl.math.div_rn(tl.full(den.shape, 1.0, tl.float32), den)
    tl.store(out_ptr + c, tl.where(me > 3.4028234663852886e38, 3.4028234663852886e38, me))


@triton.jit
def two_level_consts_kernel(amax_ptr, se_ptr, sd_ptr, ts_ptr, se, sd, num, rcp_max, sr_scale, MODE: tl.constexpr):
    """The float32 constants of a two-level quantize call in one launch: ts[0:132] =
    [S_enc, S_dec, rcp_max, sr_scale, the 128 multipliers of :func:`mult_table_kernel`].

    MODE 0: S_enc, S_dec from the global amax a at amax_ptr, the steps of
    ``torch_backend.tensor_scale``: S_enc = 1 where a == 0 or a is not finite, else
    min(fp32(num / a), FLT_MAX) (num = fp32(448 * max_elem), IEEE division); S_dec =
    fp32(1 / S_enc). MODE 1: loaded from se_ptr, sd_ptr (float32). MODE 2: the float32
    scalars se, sd."""
    if MODE == 0:
        a = tl.load(amax_ptr + tl.zeros((1,), tl.int32))
        bad = (a == 0.0) | (tl.abs(a) == float("inf")) | (a != a)
        q = tl.math.div_rn(tl.full((1,), num, tl.float32), tl.where(bad, 1.0, a))
        q = tl.where(q > 3.4028234663852886e38, 3.4028234663852886e38, q)  # clamp(max=FLT_MAX)
        s_enc = tl.where(bad, 1.0, q)
        s_dec = tl.math.div_rn(tl.full((1,), 1.0, tl.float32), s_enc)
    elif MODE == 1:
        s_enc = tl.load(se_ptr + tl.zeros((1,), tl.int32))
        s_dec = tl.load(sd_ptr + tl.zeros((1,), tl.int32))
    else:
        s_enc = tl.full((1,), se, tl.float32)
        s_dec = tl.full((1,), sd, tl.float32)
    c = tl.arange(0, 128)
    den = _ue4m3_value(c) * s_dec
    me = tl.math.div_rn(tl.full(den.shape, 1.0, tl.float32), den)
    tl.store(ts_ptr + 4 + c, tl.where(me > 3.4028234663852886e38, 3.4028234663852886e38, me))
    i = tl.arange(0, 4)
    head = tl.where(i == 0, s_enc, tl.where(i == 1, s_dec, tl.where(i == 2, rcp_max, sr_scale)))
    tl.store(ts_ptr + i, head)


@triton.jit
def _block_scale(vm, ts_ptr, MX: tl.constexpr, RULE: tl.constexpr, EMAX: tl.constexpr,
                 NAN_INF: tl.constexpr, SCALING: tl.constexpr):
    """(scale code int32, element multiplier float32, nan-scale mask) of blocks with amax vm.

    vm is the float32 amax (a NaN of any payload for a block holding a NaN); the rules are
    triton_rows_fast._block_scale's, on vm's sign-clear bit pattern."""
    vmb = vm.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    return _block_scale_bits(vmb, ts_ptr, _mult_b(ts_ptr, MX), MX, RULE, EMAX, NAN_INF, SCALING)


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
def _code(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, FAST: tl.constexpr, MX: tl.constexpr,
          NTHR: tl.constexpr, SR: tl.constexpr, INT4: tl.constexpr, NEGZERO: tl.constexpr,
          ZERO_POS: tl.constexpr):
    if FAST:
        return _e2m1_rne(y, MX)
    else:
        return _element_codes(y, r, thr_ptr, dthr_ptr, mags_ptr, sr_scale, NTHR, SR, INT4, NEGZERO, ZERO_POS)


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
        u0, u1, u2, u3 = tl.randint4x(seed, g)
        r0 = (u0.to(tl.uint32) >> (32 - SR_BITS)).to(tl.float32)
        r1 = (u1.to(tl.uint32) >> (32 - SR_BITS)).to(tl.float32)
        r2 = (u2.to(tl.uint32) >> (32 - SR_BITS)).to(tl.float32)
        r3 = (u3.to(tl.uint32) >> (32 - SR_BITS)).to(tl.float32)
    return r0, r1, r2, r3


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
    scode, mult, nan_scale = _block_scale(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
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
def quantize_rows2d_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK, NSC, CPAD,
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
    scode, mult, nan_scale = _block_scale(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
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
                           BR: tl.constexpr, K: tl.constexpr, MX: tl.constexpr, FAST: tl.constexpr):
    """float32 values of BR blocks: q_ptr int32 words of packed codes (8 codes each, first in
    the low nibble), s_ptr uint8 scale codes (one per block); as :func:`dequantize_kernel`."""
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
    tl.store(out_ptr + blk[:, None] * K + tl.arange(0, K)[None, :], v, mask=mask[:, None])


@triton.jit
def _load_rows(x_ptr, offs, mask, IN_BF16: tl.constexpr):
    if IN_BF16:
        v = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.int32)
        return (v << 16).to(tl.float32, bitcast=True)
    return tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _abs_bits(v):
    return v.to(tl.int32, bitcast=True) & 0x7FFFFFFF


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
def quantize_cols_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
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
        _quantize_cols_band(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
                            NROW, NCOL, sxr, srr, QW, NSC, CPAD, seed, tl.program_id(0),
                            tl.program_id(1) * NBANDS + band,
                            BC, K, FAST, MX, RULE, EMAX, NAN_INF, SCALING, NTHR, SR, SR_BITS, INT4, NEGZERO,
                            ZERO_POS, IN_BF16, CUBLAS)


@triton.jit
def _quantize_cols_band(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
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
    ev = _load_rows(x_ptr, oe, m2, IN_BF16)
    od = _load_rows(x_ptr, oe + sxr, m2, IN_BF16)
    vmb = tl.max(tl.maximum(_abs_bits(ev), _abs_bits(od)), axis=0)
    scode, mult, nan_scale = _block_scale(vmb.to(tl.float32, bitcast=True), ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
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
# Fused RHT + quantize (arith "fwht-fp32", size 16) and the v3 columnwise kernel.
# ---------------------------------------------------------------------------------------------
#
# The pinned transform (fp4spec.rht.rht, steps F1-F5), per row of 16 values along the blocked
# axis: F1 widen to float32 (the loads do it); F2 u_i = s_i * x_i, a sign flip where bit i of
# the sign mask is set (-0.0 kept); F3 for d = 1, 2, 4, 8 in this order, for every i with
# (i & d) == 0 at once, (u_i, u_{i+d}) <- (fp32(u_i + u_{i+d}), fp32(u_i - u_{i+d})); F4
# y_j = fp32(u_j * 0.25); F5 bf16 RNE (or nothing for float32). Each thread holds the 16
# values of a row as 16 separate tensors, so :func:`_fwht16` below is the spec's butterfly
# operation for operation (a dot or a reduction would leave the order to the compiler). No
# multiply feeds an add in it, so FMA contraction cannot change a rounding.


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


@triton.jit
def _absmax16(m, y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15):
    m = _absmax4(m, y0, y1, y2, y3)
    m = _absmax4(m, y4, y5, y6, y7)
    m = _absmax4(m, y8, y9, y10, y11)
    return _absmax4(m, y12, y13, y14, y15)


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
def _load_row_flip(x_ptr, offs, mask, IN_BF16: tl.constexpr, FLIP: tl.constexpr, sgn, I: tl.constexpr):
    """:func:`_load_rows`, with FLIP (bf16) step F2 for value I in the widening: (b << 16) +
    sign bit, one shift-add (no separate xor)."""
    if FLIP:
        v = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.int32)
        return ((v << 16) + _sbit(sgn, I)).to(tl.float32, bitcast=True)
    else:
        return _load_rows(x_ptr, offs, mask, IN_BF16)


@triton.jit
def _pack4(c0, c1, c2, c3):
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
    lo = _pack4(c0, c1, c2, c3) | (_pack4(c4, c5, c6, c7) << 16)
    hi = _pack4(c8, c9, c10, c11) | (_pack4(c12, c13, c14, c15) << 16)
    if FAST and not MX:
        lo = tl.where(nan_scale, 0, lo)
        hi = tl.where(nan_scale, 0, hi)
    return lo.to(tl.uint32).to(tl.int64) | (hi.to(tl.int64) << 32)


# The fast E2M1 encoder of triton_rows_fast for the 16 values of a row in registers: per value
# three fused multiply-adds (MX folds the power-of-two multiplier into them), a 3-input and a
# 2-input integer min, the sign bit, and one multiply-add that places the code in its nibble.
# Exact where _needs_exact_fast holds for no block of the program; the kernels branch (one
# uniform branch per program) to the v2 encoder (_word16) otherwise.

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
    """The code word of 16 values of a block, E2M1 RNE: the v2 encoder (:func:`_word16`) where
    ``exact`` (a program-wide flag, one uniform branch: some block :func:`_needs_exact_fast`),
    else the fast one (:func:`_word16_fast`)."""
    if exact:  # rare: the v2 encoder for the whole program
        w = _word16(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
                    y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15,
                    mult, nan_scale, thr_ptr, dthr_ptr, mags_ptr, 0.0, True, MX, NTHR, False, INT4, NEGZERO, ZERO_POS)
    else:
        w = _word16_fast(y0, y1, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14, y15, mult, nan_scale, MX, SIGN_BIT)
    return w


@triton.jit
def _rbits_rows16(r_ptr, seed, g, mask, SR: tl.constexpr, SR_BITS: tl.constexpr):
    """Random bits (float32) of the 16 elements from group g on (flat element order)."""
    r0, r1, r2, r3 = _rbits4(r_ptr, seed, g, mask, SR, SR_BITS)
    r4, r5, r6, r7 = _rbits4(r_ptr, seed, g + 1, mask, SR, SR_BITS)
    r8, r9, r10, r11 = _rbits4(r_ptr, seed, g + 2, mask, SR, SR_BITS)
    r12, r13, r14, r15 = _rbits4(r_ptr, seed, g + 3, mask, SR, SR_BITS)
    return r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15


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
def _sbit(sgn, I: tl.constexpr):
    """The sign-bit word of value I (0 or 0x80000000): sgn is the tuple of 16 int32 kernel
    arguments of :func:`triton_backend.sign_words`, so each is a constant-bank operand of the
    instruction that uses it (computing ``((mask >> I) & 1) << 31`` per program cost about two
    instructions per element at one block a thread)."""
    return sgn[I]


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
    4k..4k+3), by triton_rows_fast._mx_codes_bf16x2 (GPU only)."""
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
    encoder on bf16x2 words (GPU only; triton_rht_mma's module docstring): the butterfly's
    float32 outputs rounded to bf16 two at a time by the cvt that packs them, the block amax by
    max.u16x2, the grid roundings two elements an instruction. A program with a NaN-scale
    block takes the v2 encoder on the unpacked values (one uniform branch)."""
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
    scode, mult, nan_scale = _block_scale(vm, ts_ptr, True, RULE, EMAX, NAN_INF, SCALING)
    if SLOW and tl.max(nan_scale.to(tl.int32), axis=0) != 0:  # rare: the v2 encoder for the whole program
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
    v2 encoder instead (one uniform branch; SLOW=False leaves it out: instruction counts of
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
        scode, mult, nan_scale = _block_scale(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
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
    scode, mult, nan_scale = _block_scale(vm, ts_ptr, MX, RULE, EMAX, NAN_INF, SCALING)
    if FAST:
        # values on the bf16 grid (bf16 RHT output, or bf16 input without the RHT): nonzero >= 2^-133
        SIGN_BIT: tl.constexpr = OUT_BF16 if RHT else IN_BF16
        ex = tl.max(tl.max(_needs_exact_fast(mult, nan_scale, MX, SIGN_BIT).to(tl.int32), axis=1), axis=0)
        ex = SLOW and ex != 0  # rare: the v2 encoder for the whole program
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
def quantize_cols3_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
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

    FAST (E2M1, RNE): the fast encoder with the v2 encoder for programs that need it, as
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
        # issuing before the conversion (one load in flight per warp; H200 nvfp4 0.70 ms)
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
def rht_kernel(x_ptr, y_ptr, M, sxm, sxn, sym, syn, sgn, BM: tl.constexpr, IN_BF16: tl.constexpr,
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
    tl.store(o, y0, mask=mask)
    tl.store(o + syn, y1, mask=mask)
    tl.store(o + 2 * syn, y2, mask=mask)
    tl.store(o + 3 * syn, y3, mask=mask)
    tl.store(o + 4 * syn, y4, mask=mask)
    tl.store(o + 5 * syn, y5, mask=mask)
    tl.store(o + 6 * syn, y6, mask=mask)
    tl.store(o + 7 * syn, y7, mask=mask)
    tl.store(o + 8 * syn, y8, mask=mask)
    tl.store(o + 9 * syn, y9, mask=mask)
    tl.store(o + 10 * syn, y10, mask=mask)
    tl.store(o + 11 * syn, y11, mask=mask)
    tl.store(o + 12 * syn, y12, mask=mask)
    tl.store(o + 13 * syn, y13, mask=mask)
    tl.store(o + 14 * syn, y14, mask=mask)
    tl.store(o + 15 * syn, y15, mask=mask)
