"""Kernels on 2-D tiles of the logical matrix x[m, n] = x_ptr[m * sxm + n * sxn] (any strides):
the tensor amax, the generic quantize (every scheme the backend takes, 1 x k blocks and
16 x k tiles, RNE and SR with given bits: variant ``tile``), the generic dequantize, and the
constants of a two-level call.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .primitives import _block_scale_f32, _element_codes, _load_f32, _pow2, _ue4m3_sat, _ue4m3_value, _values_out


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
def quantize_tile_kernel(x_ptr, q_ptr, s_ptr, r_ptr, thr_ptr, dthr_ptr, mags_ptr, ts_ptr,
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
        scode, mult, _ = _block_scale_f32(vm, ts_ptr, True, RULE, EMAX, NAN_INF, SCALING)
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
def dequantize_tile_kernel(q_ptr, s_ptr, vals_ptr, g_ptr, out_ptr, M, N, sqm, ssm, som,
                           BM: tl.constexpr, BN: tl.constexpr, K: tl.constexpr, MX: tl.constexpr,
                           OUT_BF16: tl.constexpr):
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
    tl.store(out_ptr + rm64[:, None] * som + rn[None, :], _values_out(tl.reshape(out, (BM, BN)), OUT_BF16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def two_level_consts_kernel(amax_ptr, se_ptr, sd_ptr, ts_ptr, se, sd, num, rcp_max, sr_scale, MODE: tl.constexpr):
    """The float32 constants of a two-level quantize call in one launch: ts[0:132] =
    [S_enc, S_dec, rcp_max, sr_scale, the 128 TE element multipliers
    min(1 / fp32(value(c) * S_dec), FLT_MAX) per UE4M3 code c (div_rn)].

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
