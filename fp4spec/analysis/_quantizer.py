"""Turn a scheme name (or a callable) into ``q(x) -> dequantized float array`` along the last axis.

Block-scaled quantization lives in :mod:`fp4spec.api.block_scaling`; it is imported lazily so the
parts of :mod:`fp4spec.analysis` that need no scheme (exact shrinkage bias, RHT,
distributions) work without it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: The schemes the analysis compares by default, in report order.
SCHEMES = ("nvfp4", "mxfp4", "ufp4", "nvint4", "nvint4_e0m3", "hif4", "if4")


class QuantizeUnavailable(ImportError):
    """``fp4spec.api.block_scaling`` cannot be imported, so schemes cannot be used by name."""


def quantize_function():
    """``fp4spec.api.block_scaling.quantize``, or :class:`QuantizeUnavailable` naming the cause."""
    try:
        from fp4spec.api.block_scaling import quantize
    except ImportError as exc:
        raise QuantizeUnavailable(
            "fp4spec.api.block_scaling is not available, so schemes cannot be used by name "
            f"({exc}); pass a callable x -> dequantized x instead") from exc
    return quantize


def dequantize(qt) -> np.ndarray:
    """float64 values of a QuantizedTensor (``fp4spec.dequantize``)."""
    from fp4spec.api.block_scaling import dequantize as _dequantize

    return np.asarray(_dequantize(qt), dtype=np.float64)


def scheme_label(scheme) -> str:
    """A short name for tables: the scheme name, a descriptor's ``name``, or a callable's ``__name__``."""
    if isinstance(scheme, str):
        return scheme
    return str(getattr(scheme, "name", None) or getattr(scheme, "__name__", None) or repr(scheme))


def as_quantizer(scheme, *, rounding: str = "rne") -> Callable[[np.ndarray], np.ndarray]:
    """``q(x)``: quantize-dequantize along the last axis, returning float64.

    ``scheme`` is a scheme name or descriptor (quantized with
    ``fp4spec.dequantize(fp4spec.quantize(x, scheme, axis=-1, rounding=rounding))``)
    or a callable ``x -> dequantized x`` (used as is; ``rounding`` is then ignored).
    """
    if callable(scheme) and not isinstance(scheme, str) and not hasattr(scheme, "element"):
        def q(x):
            return np.asarray(scheme(np.asarray(x, dtype=np.float32)), dtype=np.float64)
        return q
    if not isinstance(scheme, str) and not hasattr(scheme, "name"):
        raise ValueError(f"scheme: {scheme!r} is not a scheme name ({', '.join(SCHEMES)}, ...), "
                         "a scheme descriptor or a callable")
    quantize = quantize_function()

    def q(x):
        qt = quantize(np.asarray(x, dtype=np.float32), scheme, axis=-1, rounding=rounding)
        return dequantize(qt)
    return q
