"""quantize_packed and dequantize_packed: torch tensors in, packed codes and scale codes out, on
the tensor's device.

:func:`quantize_packed` resolves the request once into a :class:`.launch.Plan`, picks a
variant (the caller's, or :func:`default_variant`), checks that the variant takes the plan,
computes the call's float32 constants (for two-level schemes after the tensor amax pass), and
runs the variant's launcher. :data:`VARIANTS` is the table:

========== ===============================================================================
rows_bf16  rowwise bf16, E2M1 1 x 16 / 1 x 32, RNE, plain scales: one block per thread, the
           fast encoder (the default where it applies)
rows_sr    rowwise, E2M1 / E1M2 / INT4 1 x 16 / 1 x 32, SR (bits given or drawn by Philox),
           bf16, float16 or float32: one block per thread, the integer SR encoder (the
           default where it applies)
rows       rowwise, 1 x k blocks (k a multiple of 16), any element and rounding; with
           ``rht=`` the butterfly fused (1 x 16 / 1 x 32)
rows_split rowwise bf16, E2M1, RNE: a block split over a few threads
cols       columnwise (axis 0 of a 2-D tensor), 1 x 16 / 1 x 32: a block per thread down a
           column; with ``rht=`` the butterfly fused
cols_tile  columnwise, 1 x k blocks (k a multiple of 16): a tile of K rows per band
tile       any 1 x k block or 16 x k tile, any strides: a 2-D tile per program
unfused    ``rht=`` of other shapes: the transform into a float32 temporary, then the above
rows_wide  rowwise MX with 6- and 8-bit elements (E2M3, E3M2, E4M3, E5M2), any rounding:
           a [blocks, K] tile per program, codes one per byte (:mod:`.kernels.mx_wide`);
           with ``rht=`` after ``unfused``'s transform
cols_wide  the same columnwise (axis 0 of a 2-D tensor)
rows_hif4  rowwise HiF4: a [groups, 64] tile per program, codes packed, E6M2 scales and
           micro-exponent bits one per byte (:mod:`.kernels.hif4`); with ``rht=`` after
           ``unfused``'s transform
cols_hif4  the same columnwise (axis 0 of a 2-D tensor)
rows_if4   rowwise IF4 (1 x 16 blocks, E2M1 or INT4 per block, every rounding): a
           [blocks, 16] tile of one block column per program (:mod:`.kernels.if4`), after
           the tensor amax pass; with ``rht=`` after ``unfused``'s transform
cols_if4   the same columnwise (axis 0 of a 2-D tensor)
========== ===============================================================================

The 4-bit variants refuse the wide elements and the wide variants the 4-bit ones; HiF4 and
IF4 run only on their own variants (and ``unfused``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import triton

from fp4spec import if4 as spec_if4
from fp4spec import philox as _philox
from fp4spec.block_schemes import Scheme
from fp4spec.hif4 import NONFINITE_POLICIES
from fp4spec.rounding import check_choice
from fp4spec.rht import MMA_PREFIX

from .. import torch_backend as tb
from .. import torch_if4
from ..base import resolve_scheme
from . import capability, launch, mma
from .config import resolve_config
from .kernels import hif4, if4, mx_wide, rowwise, tile
from .launch import Plan, as_matrix, global_amax, mx_consts, rht_global_amax, tables, two_level_consts


# -- the variants ---------------------------------------------------------------------------------------


def _no(msg):
    raise NotImplementedError(msg)


def _check_rows_bf16(p: Plan):
    if not (p.rp is None and p.rowwise and p.bf16 and p.fused_shape and p.sch.element.name == "e2m1"
            and p.rounding == "rne" and p.scale_layout == "plain"):
        _no("variant='rows_bf16': rowwise bf16, E2M1 1 x 16 or 1 x 32 blocks, RNE, plain scales, no rht")


def _check_rows_sr(p: Plan):
    if not (p.rp is None and p.rowwise and p.fused_shape and p.sch.element.name in launch.SR_ELEMENTS
            and p.rounding == "sr"):
        _no("variant='rows_sr': rowwise SR, 1 x 16 or 1 x 32 blocks of " + ", ".join(launch.SR_ELEMENTS)
            + " elements, no rht")


def _check_rows(p: Plan):
    if p.rp is not None and not (p.fused_shape and p.rowwise):
        _no("variant='rows' with rht: 1 x 16 or 1 x 32 blocks, a contiguous tensor")
    if not (p.fast_shape and p.rowwise):
        _no("variant='rows': 1 x k blocks (k a multiple of 16) of a contiguous tensor, along the last axis")


def _check_rows_split(p: Plan):
    if p.rp is not None or not (p.fast_shape and p.rowwise and p.bf16 and p.fast):
        _no("variant='rows_split': rowwise bf16, E2M1, RNE, 1 x k blocks (k a multiple of 16), no rht")


def _check_cols(p: Plan):
    if p.sr_mode == 2 and p.sxm == 1 and p.M % 4:
        _no("Philox columnwise: the number of columns must be a multiple of 4")
    if not (p.fused_shape and p.colwise):
        _no("variant='cols': 1 x 16 or 1 x 32 blocks of a 2-D tensor, axis 0"
            + (" (with rht)" if p.rp is not None else ""))
    if p.BM is not None and p.BM not in (1, 2, 4):
        raise ValueError(f"BM: {p.BM} blocks per program for variant 'cols' is not 1, 2 or 4")
    bc = launch.cols_tile(p)[0]
    if bc % 4 or bc & (bc - 1):
        raise ValueError(f"BN: {bc} columns per program is not a power of two >= 4")


def _check_cols_tile(p: Plan):
    if p.sr_mode == 2 and p.sxm == 1 and p.M % 4:
        _no("Philox columnwise: the number of columns must be a multiple of 4")
    if p.rp is not None or not (p.fast_shape and p.colwise):
        _no("variant='cols_tile': 1 x k blocks (k a multiple of 16) of a 2-D tensor, axis 0, no rht")
    if p.sr_mode == 2 and (p.BN or p.cfg.cols_tile_columns) % 4:
        _no("Philox columnwise: BN must be a multiple of 4")


def _check_tile(p: Plan):
    if p.rp is not None:
        raise ValueError("variant='tile' with rht: None, 'rows', 'cols' or 'unfused'")
    if p.sr_mode == 2:
        _no("Philox-drawn bits: rowwise or columnwise 1 x k blocks only")
    if p.scale_layout != "plain":
        _no("scale_layout='cublas': rowwise or columnwise 1 x k blocks only")


def _check_unfused(p: Plan):
    if p.rp is None:
        raise ValueError("variant='unfused': only with rht=")


def _check_rows_wide(p: Plan):
    if not (capability.is_mx_wide(p.sch) and p.rp is None and p.rowwise):
        _no("variant='rows_wide': MX with E2M3, E3M2, E4M3 or E5M2 elements along the last axis, no rht")
    if p.sr_mode == 2 and ((p.BM or p.cfg.rows_wide[0]) * p.K) % 4:
        _no("Philox rowwise: blocks per program times the block size must be a multiple of 4")


def _check_cols_wide(p: Plan):
    if not (capability.is_mx_wide(p.sch) and p.rp is None and p.colwise):
        _no("variant='cols_wide': MX with E2M3, E3M2, E4M3 or E5M2 elements along axis 0 of a 2-D tensor, no rht"
            + (" (Philox: the number of columns a multiple of 4)" if p.sr_mode == 2 else ""))
    bc, nb, _ = launch.cols_wide_tile(p)
    if bc & (bc - 1) or nb & (nb - 1) or (p.sr_mode == 2 and bc % 4):
        raise ValueError(f"BN, BM: {bc} columns and {nb} blocks per program are not powers of two"
                         + (" (Philox: columns >= 4)" if p.sr_mode == 2 else ""))


def _check_rows_hif4(p: Plan):
    if not (p.sch.structure == "hif4" and p.rp is None and p.rowwise):
        _no("variant='rows_hif4': HiF4 along the last axis of a contiguous tensor, no rht")


def _check_cols_hif4(p: Plan):
    if not (p.sch.structure == "hif4" and p.rp is None and p.sxm == 1 and p.x2.dim() == 2):
        _no("variant='cols_hif4': HiF4 along axis 0 of a 2-D tensor, no rht")


def _run_hif4(p: Plan) -> dict:
    """The HiF4 variants' run step: codes (M, N/2), scales (M, G), e1_8 (M, G, 8), e1_16 (M, G,
    16) for G = N/64 groups a row, and ``nonfinite``, a one-element int32 flag (1: some group
    holds NaN or Inf; its outputs are the ``nonfinite="propagate"`` group)."""
    G = p.N // 64
    u8 = dict(dtype=torch.uint8, device=p.dev)
    out = {"packed": torch.empty((p.M, p.N // 2), **u8), "scales": torch.empty((p.M, G), **u8),
           "global_scale": None, "scheme": p.sch, "e1_8": torch.empty((p.M, G, 8), **u8),
           "e1_16": torch.empty((p.M, G, 16), **u8), "nonfinite": torch.zeros(1, dtype=torch.int32, device=p.dev)}
    launch.hif4_launch(p, out["packed"], out["scales"], out["e1_8"], out["e1_16"], out["nonfinite"])
    return out


def _raise_hif4_nonfinite(p: Plan):
    """The torch backend's ValueError for the first non-finite element of x (HiF4 has no
    encoding for NaN or Inf; nonfinite="error"). Runs only when the kernel flagged a group."""
    tb._gen.hif4_quantize(p.x, axis=-1 if p.x.dim() == 1 else p.axis)
    raise ValueError("x: a group holds NaN or Inf; HiF4 has no encoding for them")  # not reached


def _check_rows_if4(p: Plan):
    if not (p.sch.structure == "if4" and p.rp is None and p.rowwise and p.scale_layout == "plain"):
        _no("variant='rows_if4': IF4 along the last axis of a contiguous tensor, plain scales, no rht")


def _check_cols_if4(p: Plan):
    if not (p.sch.structure == "if4" and p.rp is None and p.sxm == 1 and p.x2.dim() == 2
            and p.scale_layout == "plain"):
        _no("variant='cols_if4': IF4 along axis 0 of a 2-D tensor, plain scales, no rht")


def _run_if4(p: Plan) -> dict:
    """The IF4 variants' run step: the tensor amax pass, one read of it on the host (a
    non-finite amax raises the torch backend's ValueError naming the element; the tensor scale
    is :func:`fp4spec.if4.tensor_scales`, as the emulator and the torch port compute it), the
    constants (``two_level_consts`` from (S_enc, S_dec)), one launch."""
    if p.s_enc_dec is not None:
        raise ValueError("s_enc_dec: IF4's tensor scale comes from the tensor amax (pass None)")
    gmax = float(global_amax(p.x2, p.M, p.N, p.sxm, p.sxn, p.cfg).item()) if p.M * p.N else 0.0
    if not np.isfinite(gmax):
        torch_if4.check_finite(torch.movedim(p.x, p.axis, -1) if p.x.dim() > 1 else p.x)
    amax, s_enc, s_dec = spec_if4.tensor_scales(np.float32(gmax))
    ts = two_level_consts(p.sch, p.dev, s_enc_dec=(s_enc, s_dec), sr_bits=p.sr_bits)
    packed = torch.empty((p.M, p.N // 2), dtype=torch.uint8, device=p.dev)
    scales = torch.empty((p.M, p.N // 16), dtype=torch.uint8, device=p.dev)
    launch.if4_launch(p, ts, amax, packed, scales)
    return {"packed": packed, "scales": scales, "global_scale": ts[1], "scheme": p.sch}


def _kernel(launcher):
    """The run step of a kernel variant: constants, output buffers, one launch."""

    def run(p: Plan) -> dict:
        ts, g = call_constants(p)
        width = p.N // 2 if p.sch.element.bits == 4 else p.N  # wider elements: one code per byte
        packed = torch.empty((p.M, width), dtype=torch.uint8, device=p.dev)
        scales, cpad = scale_buffer(p.M, p.N // p.K, p.dev, p.scale_layout)
        launcher(p, ts, packed, scales, cpad)
        return {"packed": packed, "scales": scales, "global_scale": g, "scheme": p.sch}

    return run


def _unfused(p: Plan) -> dict:
    y2 = launch.rht_apply(p.x2, p.M, p.N, p.sxm, p.sxn, p.rp, p.cfg)
    rb = None if p.rbits is None else tb.as_torch(p.rbits, p.dev).expand(p.x.shape).reshape(p.x2.shape)
    last = p.x.dim() == 1 or p.axis % p.x.dim() == p.x.dim() - 1
    return quantize_packed(y2, p.sch, axis=-1 if last else 0, rounding=p.rounding, rbits=rb, sr_bits=p.sr_bits,
                           s_enc_dec=p.s_enc_dec, seed=p.seed, scale_layout=p.scale_layout, BM=p.BM, BN=p.BN,
                           num_warps=p.num_warps, config=p.cfg)


#: quantize_packed's variants: name -> (check: raises if the variant cannot run the plan, run).
VARIANTS = {
    "rows_bf16": (_check_rows_bf16, _kernel(launch.rows_bf16)),
    "rows_sr": (_check_rows_sr, _kernel(launch.rows_sr)),
    "rows": (_check_rows, _kernel(launch.rows)),
    "rows_split": (_check_rows_split, _kernel(launch.rows_split)),
    "cols": (_check_cols, _kernel(launch.cols)),
    "cols_tile": (_check_cols_tile, _kernel(launch.cols_tile_launch)),
    "tile": (_check_tile, _kernel(launch.tile_launch)),
    "unfused": (_check_unfused, _unfused),
    "rows_wide": (_check_rows_wide, _kernel(launch.rows_wide)),
    "cols_wide": (_check_cols_wide, _kernel(launch.cols_wide)),
    "rows_hif4": (_check_rows_hif4, _run_hif4),
    "cols_hif4": (_check_cols_hif4, _run_hif4),
    "rows_if4": (_check_rows_if4, _run_if4),
    "cols_if4": (_check_cols_if4, _run_if4),
}
#: The variants of MX with 6- and 8-bit elements (the others encode 4-bit elements).
WIDE_VARIANTS = ("rows_wide", "cols_wide")
#: The variants of HiF4 (it runs on no other, ``unfused`` aside).
HIF4_VARIANTS = ("rows_hif4", "cols_hif4")
#: The variants of IF4 (it runs on no other, ``unfused`` aside).
IF4_VARIANTS = ("rows_if4", "cols_if4")
#: The variants that take rht= (the butterfly).
RHT_VARIANTS = ("rows", "cols", "unfused")


def default_variant(p: Plan) -> str:
    """The variant quantize_packed runs for a plan when none is named (tuned on the H200)."""
    if p.sch.structure == "hif4":
        return "unfused" if p.rp is not None else ("rows_hif4" if p.rowwise else "cols_hif4")
    if p.sch.structure == "if4":
        return "unfused" if p.rp is not None else ("rows_if4" if p.rowwise else "cols_if4")
    if capability.is_mx_wide(p.sch):  # the RHT kernels fuse E2M1 encoders only
        return "unfused" if p.rp is not None else ("rows_wide" if p.rowwise else "cols_wide")
    if p.rp is not None:
        return "rows" if (p.fused_shape and p.rowwise) else ("cols" if (p.fused_shape and p.colwise) else "unfused")
    for name, check in (("rows_bf16", _check_rows_bf16), ("rows_sr", _check_rows_sr)):
        try:
            check(p)
            return name
        except NotImplementedError:
            pass
    if p.fast_shape and p.rowwise:
        v = p.rows_tile[0]
        return v if (v == "rows" or (p.bf16 and p.fast)) else "rows"
    if p.fast_shape and p.colwise:
        return p.cfg.cols_variant if p.fused_shape else "cols_tile"
    return "tile"


# -- the entry points -------------------------------------------------------------------------------------------


def quantize_packed(x, scheme, *, axis=-1, rounding="rne", rbits=None, sr_bits=8, s_enc_dec=None, seed=None,
                    scale_layout="plain", BM=None, BN=None, num_warps=None, variant=None, rht=None, config=None,
                    nonfinite="error"):
    """Quantize a torch tensor on its device.

    Returns a dict: ``packed`` (uint8, (M, N/2), the first element in the low nibble; MX
    with 6- and 8-bit elements: (M, N), one code per byte),
    ``scales`` (uint8, (M, N/k); with ``scale_layout="cublas"`` the 1-D cuBLAS 128x4 blocked
    buffer, equal to ``fp4spec.to_blocked`` of the plain scales, zero padding),
    ``global_scale`` (0-d float32 S_dec or None), ``scheme``; M x N is the logical matrix
    (rows: everything but the quantized axis; columnwise: x transposed).

    ``rounding="sr"`` takes ``rbits`` or a ``seed``: with a seed the bits are drawn on the
    device by Philox (:func:`philox_rbits` replays them). ``s_enc_dec``: a precomputed
    two-level tensor scale (S_enc, S_dec), as TransformerEngine's delayed amax (no amax pass).
    ``variant``: None (the default of :func:`default_variant`) or a name of :data:`VARIANTS`;
    ``BM``, ``BN``, ``num_warps`` override the chosen kernel's tile; ``config``: a
    :class:`.config.TritonConfig` (None: the shipped one).

    ``rht``: None, an :class:`fp4spec.rht.RHT` (``"16/fwht-fp32"``, any signs; or
    ``"16/mma:sm90-bf16"`` where claimed), ``"te"`` or an int seed
    (:func:`fp4spec.rht.resolve_rht`): quantize the RHT of x along the quantized axis (the
    tensor amax of two-level schemes after it, SR bits indexing the transformed elements).
    Fused for 1 x 16 and 1 x 32 blocks rowwise (``rows``) and columnwise (``cols``); else
    ``unfused``.

    HiF4 (RNE: its own rounding, exact products as ``fp4spec.quantize``): the dict also holds
    ``e1_8`` (uint8, (M, N/64, 8)) and ``e1_16`` ((M, N/64, 16)), one bit per byte.
    ``nonfinite`` (HiF4): ``"error"`` raises ValueError for a group holding NaN or Inf (a
    one-element read on the host), ``"propagate"`` gives it scale code 0xFF with codes and
    bits 0, as :func:`fp4spec.emulator.hif4.hif4_quantize`.
    """
    sch = resolve_scheme(scheme)
    cfg = resolve_config(config)
    r = capability.check_request(sch, rounding, sr_bits, rht)
    if r is not None and r.arith.startswith(MMA_PREFIX):
        out = mma.quantize_fused_or_transform(x, sch, r, axis=axis, rounding=rounding, rbits=rbits, seed=seed,
                                              s_enc_dec=s_enc_dec, scale_layout=scale_layout, BM=BM,
                                              num_warps=num_warps, variant=variant, config=cfg)
        if "packed" in out:
            return out
        # unfused: quantize the transformed float32 matrix (the same arguments, no RHT)
        return quantize_packed(out["y"], sch, axis=out["axis"], rounding=rounding, rbits=out["rbits"],
                               sr_bits=sr_bits, s_enc_dec=s_enc_dec, seed=seed, scale_layout=scale_layout, BM=BM,
                               BN=BN, num_warps=num_warps, config=cfg)
    rp = capability.rht_params(rht)
    p = plan(x, sch, axis, rounding, rbits, sr_bits, s_enc_dec, seed, scale_layout, rp, cfg, BM, BN, num_warps)
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"variant: {variant!r} is not None or one of " + ", ".join(map(repr, VARIANTS)))
    if rp is not None and variant is not None and variant not in RHT_VARIANTS:
        raise ValueError(f"variant: {variant!r} with rht: None, " + ", ".join(map(repr, RHT_VARIANTS)))
    name = variant or default_variant(p)
    hif4_scheme = sch.structure == "hif4"
    if name != "unfused" and (name in HIF4_VARIANTS) != hif4_scheme:
        _no(f"variant={name!r} with {sch.name}: " + ("'rows_hif4' or 'cols_hif4'" if hif4_scheme
                                                     else "a variant of MX and two-level schemes"))
    if4_scheme = sch.structure == "if4"
    if name != "unfused" and (name in IF4_VARIANTS) != if4_scheme:
        _no(f"variant={name!r} with {sch.name}: " + ("'rows_if4' or 'cols_if4'" if if4_scheme
                                                     else "a variant of MX and two-level schemes"))
    if name != "unfused" and (name in WIDE_VARIANTS) != capability.is_mx_wide(sch):
        _no(f"variant={name!r} with {sch.name} ({sch.element.name} elements): "
            + ("'rows_wide' or 'cols_wide'" if capability.is_mx_wide(sch) else "a variant of 4-bit elements"))
    if hif4_scheme:
        check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
    check, run = VARIANTS[name]
    check(p)
    out = run(p)
    flag = out.pop("nonfinite", None)
    if flag is not None and nonfinite == "error" and bool(flag.item()):
        _raise_hif4_nonfinite(p)
    return out


def plan(x, sch: Scheme, axis, rounding, rbits, sr_bits, s_enc_dec, seed, scale_layout, rp, cfg, BM, BN,
         num_warps) -> Plan:
    """The :class:`.launch.Plan` of a quantize_packed call; ValueError for bad arguments."""
    x = tb.as_torch(x)
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x: bfloat16, float16 or float32, not {x.dtype}")
    x2, M, N, sxm, sxn = as_matrix(x, axis)
    if N % sch.block_size or M % sch.tile_rows:
        raise ValueError(f"x: the {M} x {N} matrix is not a whole number of {sch.block_shape} blocks")
    if rp is not None and N % 16:
        raise ValueError(f"x: length {N} along the quantized axis is not a multiple of 16 (the RHT size)")
    if scale_layout not in ("plain", "cublas"):
        raise ValueError(f"scale_layout: {scale_layout!r} is not 'plain' or 'cublas'")
    sr_mode, rb = 0, None
    if rounding == "sr":
        if rbits is None and seed is None:
            raise ValueError("rounding='sr' needs rbits (explicit random bits) or seed (Philox on the device)")
        sr_mode = 1 if rbits is not None else 2
    elif seed is not None or rbits is not None:
        raise ValueError("rbits, seed: only used with rounding='sr'")
    if sr_mode == 1:
        rb = tb.as_torch(rbits, x.device)
        if rb.dtype not in (torch.int32, torch.uint32):
            rb = rb.to(torch.int64)
        rb = rb.expand(x.shape).to(torch.int32)
    return Plan(x=x, x2=x2, M=M, N=N, sxm=sxm, sxn=sxn, sch=sch, axis=axis, rounding=rounding, sr_mode=sr_mode,
                seed=seed, sr_bits=sr_bits, rbits=rbits, rb=rb, rp=rp, scale_layout=scale_layout, s_enc_dec=s_enc_dec,
                cfg=cfg, BM=BM, BN=BN, num_warps=num_warps)


def dequantize_packed(packed, scales, global_scale, scheme, *, BM=None, BN=None, num_warps=None, variant=None,
                      config=None, out_dtype=torch.float32):
    """float32 (M, N) from packed codes (M, N/2), scale codes (M, N/k) and the tensor scale
    S_dec (None for MX) on one device. ``variant``: None (the rowwise kernel for k a multiple
    of 16 and contiguous operands, else the tile kernel), ``"rows"`` or ``"tile"``.
    ``out_dtype=torch.bfloat16``: those float32 values rounded to nearest even, NaN 0x7FC0
    (:func:`fp4spec.rht.bf16_rne`), written by the same kernels."""
    sch = resolve_scheme(scheme)
    cfg = resolve_config(config)
    bf16 = _out_bf16(out_dtype)
    if capability.is_mx_wide(sch):
        return _dequantize_wide(packed, scales, sch, cfg, BM, num_warps, variant, out_dtype)
    M, N = packed.shape[0], packed.shape[1] * 2
    K = sch.block_size
    dev = packed.device
    vals = tables(sch.element.name, str(dev))[3]
    g = _decode_scale(global_scale, dev)
    out = torch.empty((M, N), dtype=out_dtype, device=dev)
    ov = out.view(torch.int16) if bf16 else out
    mx = sch.structure == "mx"
    if variant not in (None, "rows", "tile"):
        raise ValueError(f"variant: {variant!r} is not None, 'rows' or 'tile'")
    rows_ok = K % 16 == 0 and packed.is_contiguous() and scales.is_contiguous()
    if variant == "rows" and not rows_ok:
        raise NotImplementedError("variant='rows': k a multiple of 16, contiguous packed codes and scales")
    if variant != "tile" and rows_ok:
        nblk = M * N // K
        br = BM or max(1, cfg.dequant_elements // K)
        rowwise.dequantize_rows_kernel[(triton.cdiv(nblk, br),)](
            packed.view(torch.int32), scales, vals, g, ov, nblk, BR=br, K=K, MX=mx,
            FAST=sch.element.name == "e2m1", OUT_BF16=bf16, num_warps=num_warps or cfg.dequant_warps)
        return out
    tr, tc, tw = cfg.dequant_tile
    BN = max(K, min(BN or tc, triton.next_power_of_2(N)))
    BM = min(BM or tr, triton.next_power_of_2(M))
    tile.dequantize_tile_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](
        packed, scales, vals, g, ov, M, N, packed.stride(0), scales.stride(0), out.stride(0), BM=BM, BN=BN, K=K,
        MX=mx, OUT_BF16=bf16, num_warps=num_warps or tw)
    return out


def _out_bf16(out_dtype) -> bool:
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"out_dtype: {out_dtype} is not torch.float32 or torch.bfloat16")
    return out_dtype == torch.bfloat16


def _dequantize_wide(codes, scales, sch, cfg, BM, num_warps, variant, out_dtype):
    """dequantize_packed of MX codes one per byte (M, N) (:mod:`.kernels.mx_wide`)."""
    if variant not in (None, "rows"):
        raise ValueError(f"variant: {variant!r} is not None or 'rows' ({sch.name}: one code per byte)")
    codes, scales = codes.contiguous(), scales.contiguous()
    M, N = codes.shape
    K = sch.block_size
    out = torch.empty((M, N), dtype=out_dtype, device=codes.device)
    bf16 = _out_bf16(out_dtype)
    nblk = M * N // K
    br = BM or max(1, cfg.dequant_elements // K)
    if nblk:
        mx_wide.dequantize_rows_wide_kernel[(triton.cdiv(nblk, br),)](
            codes, scales, tables(sch.element.name, str(codes.device))[3], out.view(torch.int16) if bf16 else out,
            nblk, BR=br, K=K, OUT_BF16=bf16, num_warps=num_warps or cfg.dequant_warps)
    return out


def dequantize_hif4(packed, scales, e1_8, e1_16, *, BM=None, num_warps=None, config=None, out_dtype=torch.float32):
    """float32 (M, N) from HiF4 packed codes (M, N/2), E6M2 scale codes (M, G) and the
    micro-exponent bits (M, G, 8) and (M, G, 16), G = N/64, on one device (the layout
    quantize_packed returns): :func:`fp4spec.emulator.hif4.hif4_dequantize`, exact.
    ``out_dtype``: as :func:`dequantize_packed`'s."""
    cfg = resolve_config(config)
    bf16 = _out_bf16(out_dtype)
    packed, scales, e1_8, e1_16 = (t.contiguous() for t in (packed, scales, e1_8, e1_16))
    M, N = packed.shape[0], packed.shape[1] * 2
    out = torch.empty((M, N), dtype=out_dtype, device=packed.device)
    ngrp = M * N // 64
    br = BM or max(1, cfg.dequant_elements // 64)
    if ngrp:
        hif4.dequantize_hif4_kernel[(triton.cdiv(ngrp, br),)](
            packed.view(torch.int32), scales, e1_8, e1_16, out.view(torch.int16) if bf16 else out, ngrp, BR=br,
            OUT_BF16=bf16, num_warps=num_warps or cfg.dequant_warps)
    return out


def dequantize_if4(packed, scales, global_scale, *, BM=None, num_warps=None, config=None, out_dtype=torch.float32):
    """float32 (M, N) from IF4 packed codes (M, N/2), scale bytes (M, N/16, bit 7 set for INT4
    blocks) and the tensor scale S_dec, on one device: :func:`fp4spec.emulator.if4.dequantize_if4`.
    ``out_dtype``: as :func:`dequantize_packed`'s."""
    cfg = resolve_config(config)
    bf16 = _out_bf16(out_dtype)
    packed, scales = packed.contiguous(), scales.contiguous()
    M, N = packed.shape[0], packed.shape[1] * 2
    out = torch.empty((M, N), dtype=out_dtype, device=packed.device)
    nblk = M * N // 16
    br = BM or max(1, cfg.dequant_elements // 16)
    if nblk:
        if4.dequantize_if4_kernel[(triton.cdiv(nblk, br),)](
            packed.view(torch.int32), scales, _decode_scale(global_scale, packed.device),
            out.view(torch.int16) if bf16 else out, nblk, BR=br, OUT_BF16=bf16,
            num_warps=num_warps or cfg.dequant_warps)
    return out


# -- constants and buffers --------------------------------------------------------------------------------------


def _decode_scale(global_scale, dev):
    """The dequantize kernels' one-element float32 tensor S_dec: the tensor scale as held (a
    0-d float32 tensor on dev: a view, no copy), a number as float32, or 0 for MX (a cached
    tensor: the kernels only read it)."""
    if global_scale is None:
        return _zero(str(dev))
    if isinstance(global_scale, torch.Tensor) and global_scale.dtype == torch.float32 and global_scale.device == dev:
        return global_scale.reshape(1)
    return torch.as_tensor(global_scale if isinstance(global_scale, torch.Tensor) else tb.f32(global_scale),
                           dtype=torch.float32).reshape(1).to(dev)


@lru_cache(maxsize=None)
def _zero(dev: str):
    return torch.zeros(1, dtype=torch.float32, device=dev)


def call_constants(p: Plan):
    """(ts, S_dec or None): the float32 constants of a call -- [S_enc, S_dec, fp32(1/max_elem),
    2^sr_bits, the 128 TE element multipliers per scale code] -- after the tensor amax pass for
    two-level schemes without a given tensor scale."""
    if p.sch.structure != "two_level":
        return mx_consts(p.sch, p.dev, p.sr_bits), None
    amax = None
    if p.s_enc_dec is None:
        amax = (global_amax(p.x2, p.M, p.N, p.sxm, p.sxn, p.cfg) if p.rp is None
                else rht_global_amax(p.x2, p.M, p.N, p.sxm, p.sxn, p.rp, p.cfg))
    ts = two_level_consts(p.sch, p.dev, amax=amax, s_enc_dec=p.s_enc_dec, sr_bits=p.sr_bits)
    return ts, ts[1]


def scale_buffer(rows, cols, dev, layout):
    """(uint8 scale buffer, padded columns): plain (rows, cols), or the cuBLAS 128x4 blocked
    layout (1-D, zero padding; cpad its padded column count)."""
    from fp4spec.layouts import blocked_shape

    if layout == "plain":
        return torch.empty((rows, cols), dtype=torch.uint8, device=dev), 0
    rp, cp = blocked_shape(rows, cols)
    alloc = torch.zeros if (rp, cp) != (rows, cols) else torch.empty  # padding: zero bytes
    return alloc(rp * cp, dtype=torch.uint8, device=dev), cp


def philox_rbits(seed, shape, sr_bits: int = 8) -> np.ndarray:
    """The random bits the triton kernels draw on the device for ``rounding="sr"`` with a
    ``seed`` (no rbits), replayed on the CPU: uint32 integers in [0, 2^sr_bits) of ``shape``.

    Definition (Triton's ``tl.randint4x``, Philox4x32-10): element ``i`` of the flat
    row-major tensor gets word ``i % 4`` of ``philox(counter=(g mod 2^32, g >> 32, 0, 0),
    key=(seed mod 2^32, seed >> 32))`` with ``g = i // 4``, shifted right by ``32 - sr_bits``
    (its top bits). The element order is the input tensor's, whatever the quantized axis.
    The numpy implementation is :mod:`fp4spec.philox` (``fp4spec.draw_rbits(...,
    method="philox")``); here ``sr_bits`` is limited to the kernels' 1..24.
    """
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 24:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 24] (the triton kernels' range)")
    return _philox.philox_rbits(seed, shape, int(sr_bits))


def unpack_lo_first(packed):
    """uint8 codes (M, N) from packed bytes (M, N/2), low nibble first (torch)."""
    lo = packed & 15
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], -1)


__all__ = ["HIF4_VARIANTS", "IF4_VARIANTS", "VARIANTS", "WIDE_VARIANTS", "default_variant", "dequantize_hif4", "dequantize_if4", "dequantize_packed",
           "mx_consts", "philox_rbits", "quantize_packed", "two_level_consts", "unpack_lo_first"]
