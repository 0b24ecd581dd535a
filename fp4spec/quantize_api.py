"""The public block-scaling API: ``fp4spec.quantize``, ``fp4spec.dequantize``, ``fp4spec.get_scheme``.

These run the vectorized emulator (:mod:`fp4spec.emulator.blockscale`), which is tested
equal, bit for bit, to the scalar reference :mod:`fp4spec.scaling`. HiF4 dispatches to
:mod:`fp4spec.emulator.hif4`.
"""

from __future__ import annotations

import importlib

import numpy as np

from .block_schemes import Scheme, get_scheme, schemes
from .quantized import QuantizedTensor
from .rounding import DEFAULT_SR_BITS
from .scaling import prepare_input


def _hif4_module():
    try:
        return importlib.import_module("fp4spec.emulator.hif4")
    except ModuleNotFoundError as err:
        if err.name not in ("fp4spec.emulator.hif4",):
            raise
        raise NotImplementedError(
            "quantize: the 'hif4' scheme needs fp4spec.emulator.hif4 (hif4_quantize / hif4_dequantize), "
            "which is not available in this installation") from None


def quantize(x, scheme: "str | Scheme", *, axis: int = -1, rounding: str = "rne", rbits=None,
             sr_bits: int = DEFAULT_SR_BITS, pad: bool = False, **overrides) -> QuantizedTensor:
    """Quantize x with a block-scaling scheme.

    Args:
        x: float16, bfloat16 (ml_dtypes), float32 or float64 array (at least 1-d).
        scheme: a scheme name (``fp4spec.schemes``: mxfp4, mxfp6_e2m3, mxfp6_e3m2,
            mxfp8_e4m3, mxfp8_e5m2, nvfp4, nvfp4_2d, ufp4, nvint4, hif4) or a
            :class:`~fp4spec.block_schemes.Scheme`.
        axis: the axis the blocks run along (default: the last). 2D tiles cover this axis
            and the one before it (after moving ``axis`` last).
        rounding: element rounding: ``"rne"`` (default), ``"rna"``, ``"rtz"``, ``"rup"``,
            ``"rdn"``, ``"rto"`` or ``"sr"``. Scales are always computed as the scheme says.
        rbits: for ``"sr"``: one random integer in [0, 2**sr_bits) per element,
            broadcastable to x (see :func:`fp4spec.draw_rbits`).
        sr_bits: random bits per element for ``"sr"`` (default 8, as Blackwell ``cvt.rs``).
        pad: pad the blocked axis (and for tiles the axis before it) with zeros to whole
            blocks instead of raising ValueError.
        **overrides: scheme fields, see :func:`~fp4spec.block_schemes.get_scheme`
            (``scale_rule``, ``profile``, ``block_size``, ``element_max``...).

    Returns:
        A :class:`~fp4spec.quantized.QuantizedTensor`.

    Normative algorithm:

    1. Resolve the scheme (``get_scheme(scheme, **overrides)``).
    2. Prepare x (:func:`fp4spec.scaling.prepare_input`): validate, convert to float32 (RNE
       from float64, exact from float16/bfloat16), move ``axis`` last, check or pad the
       length.
    3. MX schemes: per block of k, :func:`fp4spec.scaling.quantize_block_mx`.
       Two-level schemes: the tensor scale from the amax of all of x
       (:func:`fp4spec.scaling.two_level_tensor_scale`), then per block or tile
       :func:`fp4spec.scaling.quantize_tile_two_level`. HiF4: ``hif4_quantize``.
    4. Move the blocked axis back to ``axis``.
    """
    sch = get_scheme(scheme, **overrides)
    prep = prepare_input(x, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, pad=pad)
    if sch.structure == "hif4":
        return _quantize_hif4(prep, sch, rounding)
    from .emulator import blockscale

    xp = prep.x
    k = sch.block_size
    blocks = xp.reshape(xp.shape[:-1] + (xp.shape[-1] // k, k))
    rb = None if prep.rbits is None else prep.rbits.reshape(blocks.shape)
    if sch.structure == "mx":
        codes, scales = blockscale.quantize_mx(blocks, sch, rounding, rb, sr_bits)
        global_scale = None
    else:
        codes, scales, ts = blockscale.quantize_two_level(blocks, sch, rounding, rb, sr_bits)
        global_scale = ts.decode
    return QuantizedTensor.from_moved(codes.reshape(xp.shape), scales, global_scale, sch, prep.axis, prep.shape)


def _quantize_hif4(prep, sch: Scheme, rounding: str) -> QuantizedTensor:
    if rounding != "rne":
        raise ValueError(f"rounding: HiF4 rounds its elements as its golden model does (ties away); "
                         f"rounding={rounding!r} cannot be applied")
    mod = _hif4_module()
    out = mod.hif4_quantize(prep.x)
    return QuantizedTensor.from_moved(np.asarray(out["codes"], np.uint8), np.asarray(out["scales"]), None, sch,
                                      prep.axis, prep.shape, e1_8=out.get("e1_8"), e1_16=out.get("e1_16"))


def dequantize(q: QuantizedTensor) -> np.ndarray:
    """float32 values of a :class:`~fp4spec.quantized.QuantizedTensor`, in the quantized x's shape.

    MX: ``fp32(P * 2^(s - 127))`` (NaN where the scale code is 0xFF). Two-level, by the
    profile's ``nv_dequant_order``: TE ``fp32(fp32(P * s) * S_dec)``, torchao
    ``fp32(P * fp32(pts * s))`` (s = the decoded UE4M3 scale, NaN for 0x7F). HiF4:
    ``hif4_dequantize``. Padding is cropped.
    """
    if not isinstance(q, QuantizedTensor):
        raise TypeError(f"q: expected a QuantizedTensor, got {type(q).__name__}")
    sch = q.scheme
    m = q.moved()
    if sch.structure == "hif4":
        mod = _hif4_module()
        out = np.asarray(mod.hif4_dequantize(codes=m["codes"], scales=m["scales"], e1_8=m["e1_8"],
                                             e1_16=m["e1_16"]), dtype=np.float32)
    else:
        from .emulator import blockscale

        codes = m["codes"]
        k = sch.block_size
        blocks = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // k, k))
        if sch.structure == "mx":
            out = blockscale.dequantize_mx(blocks, m["scales"], sch)
        else:
            out = blockscale.dequantize_two_level(blocks, m["scales"], q.global_scale, sch)
        out = out.reshape(codes.shape)
    out = np.moveaxis(out, -1, q.axis)
    return np.ascontiguousarray(out[tuple(slice(0, n) for n in q.shape)])


__all__ = ["QuantizedTensor", "Scheme", "dequantize", "get_scheme", "quantize", "schemes"]
