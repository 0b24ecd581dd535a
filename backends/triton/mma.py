"""Host side of the RHT on the tensor cores (``arith="mma:sm90-bf16"``; kernels:
:mod:`.kernels.rht_mma`): the transform matrices, the TMA view of the operand, the fused
kernel's launcher, the unfused transform, the RHT + amax pass, and quantize_packed for an mma
RHT.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import triton

from .. import torch_backend as tb
from . import capability
from .capability import interpret
from .config import DEFAULT_CONFIG, resolve_config
from .kernels import rht_mma
from .launch import as_matrix, like_matrix, mx_consts, scheme_flags, two_level_consts


def t_matrix_bits(signs):
    """T = diag(s) . H16 / 4 (:func:`fp4spec.rht.mma_transform_matrix`, step M3) as uint16
    bf16 bit patterns (numpy, 16 x 16): +-0.25 exactly."""
    from fp4spec.rht import mma_transform_matrix

    return (mma_transform_matrix(16, signs).view(np.uint32) >> 16).astype(np.uint16)


def wide_matrix_bits(signs):
    """The wide 64 x 64 matrix of the fused kernel (uint16 bf16 bits): W[16 t + k, 8 i + 2 t + e]
    = T[k, 2 i + e] for t = 0..3, +0 elsewhere."""
    t16 = t_matrix_bits(signs)
    w = np.zeros((64, 64), dtype=np.uint16)
    for t in range(4):
        for i in range(8):
            for e in range(2):
                w[16 * t:16 * t + 16, 8 * i + 2 * t + e] = t16[:, 2 * i + e]
    return w


_MATS: dict = {}


def matrices(signs, device):
    """(wide, T) as int16 torch tensors on ``device``, cached per sign vector and device."""
    key = (tuple(int(s) for s in signs), str(device))
    if key not in _MATS:
        w = torch.from_numpy(wide_matrix_bits(signs).view("int16").copy()).to(device)
        t = torch.from_numpy(t_matrix_bits(signs).view("int16").copy()).to(device)
        _MATS[key] = (w, t)
    return _MATS[key]


def _model_dots(arith):
    """The context in which the kernels run: the interpreter's dots become the model's."""
    if not interpret():
        return contextlib.nullcontext()
    from .gemm import interpreter_model_dot

    return interpreter_model_dot(arith.split(":", 1)[1])


def as_bf16(x):
    """x as a bf16 torch tensor: itself, or a float16/float32 tensor whose every value is a
    bf16 value (step M1), else ValueError."""
    if x.dtype == torch.bfloat16:
        return x
    if x.dtype not in (torch.float16, torch.float32):
        raise ValueError(f"x: bfloat16 (or float16/float32 holding bfloat16 values), not {x.dtype}")
    xb = x.to(torch.bfloat16)
    same = (xb.to(x.dtype) == x) | torch.isnan(x)
    if not bool(same.all()):
        raise ValueError("x: the mma RHT's operand is bfloat16 (fp4spec.rht step M1), and x holds values that are "
                         "not bfloat16 values; round x to bfloat16 first or use arith='fwht-fp32'")
    return xb


def rht_apply(x2, M, N, sxm, sxn, r, config=None):
    """The mma RHT of the logical M x N matrix along N (x2 bf16, logical x[m, n] =
    x2[m * sxm + n * sxn]) as a float32 tensor of x2's shape and stride order."""

    BM, w = (DEFAULT_CONFIG if config is None else config).mma_apply
    y2, sym, syn = like_matrix(x2, sxm, sxn)
    _, t = matrices(r.signs, x2.device)
    if M and N:
        with _model_dots(r.arith):
            rht_mma.rht_mma_apply_kernel[(triton.cdiv(M, BM), N // 16)](
                x2.view(torch.int16), t, y2, M, sxm, sxn, sym, syn, BM=BM, OUT_BF16=r.out_dtype == "bfloat16",
                INTERP=interpret(), num_warps=w)
    return y2


def rht_amax(x2, r, config=None):
    """float32 0-d tensor: max |RHT(x)| of a contiguous bf16 tensor (NaN if any NaN)."""
    R, w = (DEFAULT_CONFIG if config is None else config).mma_amax
    out = torch.zeros(1, dtype=torch.int32, device=x2.device)
    nrow = x2.numel() // 16
    _, t = matrices(r.signs, x2.device)
    if nrow:
        with _model_dots(r.arith):
            rht_mma.rht_mma_amax_kernel[(triton.cdiv(nrow, R),)](
                x2.view(torch.int16), t, out, nrow, R=R, OUT_BF16=r.out_dtype == "bfloat16", INTERP=interpret(),
                num_warps=w)
    return out.view(torch.float32)[0]


def fused_ok(sch, rounding, scale_layout, rowwise, out_bf16=True) -> bool:
    """Whether the fused kernel (:func:`.kernels.rht_mma.rows_rht_mma_kernel`) takes the request."""
    return (rowwise and out_bf16 and sch.element.name == "e2m1" and sch.structure in ("mx", "two_level")
            and not sch.is_2d and sch.block_size in (16, 32) and rounding == "rne" and scale_layout == "plain")


def quantize_fused_or_transform(x, sch, r, *, axis=-1, rounding="rne", rbits=None, seed=None, s_enc_dec=None,
                                scale_layout="plain", BM=None, num_warps=None, variant=None, config=None):
    """:func:`.quantize.quantize_packed` with an ``"mma:..."`` RHT ``r``: fused (variant
    ``rows``) for rowwise E2M1 RNE 1 x 16 / 1 x 32 blocks with plain scales, returning
    quantize_packed's dict; otherwise (``unfused``) the transform of x into a float32
    temporary (:func:`rht_apply`), returned as ``{"y", "axis", "rbits"}`` for quantize_packed
    to quantize without the RHT."""
    cfg = resolve_config(config)
    if variant not in (None, "rows", "unfused"):
        raise ValueError(f"variant: {variant!r} with an mma rht: None, 'rows' or 'unfused'")
    if r.size != 16:
        raise NotImplementedError(f"rht: size {r.size} (triton mma kernels: 16)")
    x = as_bf16(tb.as_torch(x))
    x2, M, N, sxm, sxn = as_matrix(x, axis)
    K = sch.block_size
    if N % K or M % sch.tile_rows:
        raise ValueError(f"x: the {M} x {N} matrix is not a whole number of {sch.block_shape} blocks")
    if N % 16:
        raise ValueError(f"x: length {N} along the quantized axis is not a multiple of 16 (the RHT size)")
    rowwise = sxn == 1 and sxm == N
    fused = fused_ok(sch, rounding, scale_layout, rowwise, r.out_dtype == "bfloat16")
    if variant == "rows" and not fused:
        raise NotImplementedError("variant='rows' with an mma rht: rowwise, E2M1 1 x 16 or 1 x 32 blocks, RNE, "
                                  "plain scales")
    if variant == "unfused" or not fused:
        y2 = rht_apply(x2, M, N, sxm, sxn, r, cfg)
        rb = None if rbits is None else tb.as_torch(rbits, x.device).expand(x.shape).reshape(x2.shape)
        last = x.dim() == 1 or axis % x.dim() == x.dim() - 1
        return {"y": y2, "axis": -1 if last else 0, "rbits": rb}
    if rounding != "rne" or rbits is not None or seed is not None:
        raise ValueError("rbits, seed: only used with rounding='sr'")
    dev = x.device
    g = None
    if sch.structure == "two_level":
        amax = rht_amax(x2, r, cfg) if s_enc_dec is None else None
        ts = two_level_consts(sch, dev, amax=amax, s_enc_dec=s_enc_dec)
        g = ts[1]
    else:
        ts = mx_consts(sch, dev)
    packed = torch.empty((M, N // 2), dtype=torch.uint8, device=dev)
    scales = torch.empty((M, N // K), dtype=torch.uint8, device=dev)
    mma_launcher(x2, packed, scales, ts, sch, r, cfg, R=BM, num_warps=num_warps)()
    return {"packed": packed, "scales": scales, "global_scale": g, "scheme": sch}


def _has_tensor_descriptors():
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401  (triton >= 3.3)
    except ImportError:  # pragma: no cover
        return False
    return True


def tma_view(x16, R, pair=True, tmajor=False):
    """The tensor descriptor of the fused kernel's TMA loads over the contiguous 16-bit tensor
    x16 (R * 64 | numel; bf16 on a GPU, whose dot then reads the box in shared memory itself;
    int16 in the interpreter), one box per tile's operand of the kernel's ``_load_a``. pair:
    the 5-D view [g, h, l, t, k] of element ``1024 g + 128 l + 32 t + 16 h + k`` (strides 1024,
    16, 128, 32, 1 elements: 16-byte multiples, not monotonic, which the TMA allows) in boxes
    of [R / 16, 2, 8, 4, 16]; tmajor: the same view as [t, g, h, l, k] (strides 32, 1024, 16,
    128, 1) in boxes of [4, R / 16, 2, 8, 16]; else the [numel / 64, 64] matrix in [R, 64]
    boxes."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if not pair:
        return TensorDescriptor(x16, [x16.numel() // 64, 64], [64, 1], [R, 64])
    if tmajor:
        return TensorDescriptor(x16, [4, x16.numel() // 1024, 2, 8, 16], [32, 1024, 16, 128, 1], [4, R // 16, 2, 8, 16])
    return TensorDescriptor(x16, [x16.numel() // 1024, 2, 8, 4, 16], [1024, 16, 128, 32, 1], [R // 16, 2, 8, 4, 16])


def mma_launcher(x2, packed, scales, ts, sch, r, config=None, *, R=None, num_warps=None):
    """A function that runs the fused kernel on given buffers (benchmarks: the kernel alone)
    and returns triton's compiled kernel (None for an empty tensor). R: tile rows of 64
    elements, num_warps: overrides of the config's mma_rows / mma_warps; every other choice
    (TMA or pointer loads, operand rows, the rare-case check, stores, grid, registers, the
    bf16x2 encoder) is the config's ``mma_*`` fields."""

    cfg = DEFAULT_CONFIG if config is None else config
    K = sch.block_size
    nel = x2.numel()
    R = R or cfg.mma_rows
    if R % 16 or R & (R - 1):
        raise ValueError(f"BM: {R} rows of 64 elements per program is not a power of two >= 16")
    w, t = matrices(r.signs, x2.device)
    feats = capability.gpu_features(x2.device)
    flags = scheme_flags(sch)
    pair = bool(cfg.mma_pair_rows[K])
    flags.update(R=R, K=K, EVEN=nel % (R * 64) == 0, SLOW=bool(cfg.exact_fallback), INTERP=interpret(), PAIR=pair,
                 num_warps=num_warps or cfg.mma_warps)
    ntiles = triton.cdiv(nel, R * 64)
    x16 = x2.view(torch.int16)
    tma = cfg.mma_tma and nel % (R * 64) == 0 and nel > 0 and x16.data_ptr() % 16 == 0 and _has_tensor_descriptors()
    hw = cfg.hw_instructions
    if tma:
        grid = (max(1, min(ntiles, feats.sm_count * cfg.mma_tma_per_sm)),)
        flags.update(TMA=True, STAGES=cfg.mma_tma_stages[K], DEFER=bool(cfg.mma_defer),
                     BLOCK_STORES=bool(cfg.mma_block_stores), HW_CVT=hw and feats.hw_e4m3)
        flags["PAIR_T"] = pair and bool(cfg.mma_pair_tmajor)
        bf16x2 = cfg.mma_bf16x2 and hw and feats.hw_bf16x2
        flags["BF16X2"] = bool(bf16x2) and flags["MX"] and K == 32 and flags["DEFER"] and not interpret()
    elif cfg.mma_persist:
        grid = (max(1, min(ntiles, feats.sm_count * cfg.mma_per_sm)),)
        flags.update(PERSIST=True, STAGES=cfg.mma_stages)
    else:
        grid = (ntiles,)
    maxnreg = cfg.mma_tma_maxnreg if tma else cfg.mma_maxnreg
    if maxnreg and not interpret():
        flags["maxnreg"] = maxnreg
    # on a GPU the box is bf16: the dot reads it from shared memory (an int16 box would be
    # bitcast in registers first); the interpreter's dots take the int16 bits
    xd = tma_view(x16 if interpret() else x2, R, pair, flags["PAIR_T"]) if tma else x16
    args = (x16, xd, w, t, packed.view(torch.int32), scales, ts, nel, nel // K, ntiles, 0.5, 0.25)

    def launch():
        if nel:
            with _model_dots(r.arith):
                return rht_mma.rows_rht_mma_kernel[grid](*args, **flags)

    return launch


__all__ = ["as_bf16", "fused_ok", "matrices", "mma_launcher", "quantize_fused_or_transform", "rht_amax", "rht_apply",
           "t_matrix_bits", "tma_view", "wide_matrix_bits"]
