"""MS-EDEN, vectorized: :mod:`fp4spec.eden`'s steps over whole arrays (the correction's exact sums
per group with ``math.fsum``, every other step one numpy float32 operation)."""

from __future__ import annotations

import math

import numpy as np

from fp4spec.eden import BLOCK, E2M1, ONE_CODE, SCALES_MAX, UE4M3, VAL_MAX, check_arguments

from .elements import encode

F32 = np.float32
_UE4M3 = UE4M3.values.astype(np.float32)
_E2M1 = E2M1.values.astype(np.float64)


def _corrections(y: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Step 5 per group: rows of ``(n_groups, group)`` float64 y and q -> float32 c."""
    out = np.ones(y.shape[0], np.float32)
    for i in range(y.shape[0]):
        den = math.fsum(y[i] * q[i])
        if den != 0:
            out[i] = F32(math.fsum(y[i] * y[i]) / den)
    return out


def ms_eden_quantize(x, *, group: int = 128, rbits, sr_bits: int = 8):
    """:func:`fp4spec.eden.quantize_reference`, vectorized: a QuantizedTensor of scheme ``nvfp4``."""
    from fp4spec.block_schemes import get_scheme
    from fp4spec.quantized import QuantizedTensor

    x = np.asarray(x, np.float32)
    rb = check_arguments(x, group, rbits, sr_bits)
    rows, n = x.shape
    blocks = x.reshape(rows, n // BLOCK, BLOCK)
    amax = np.max(np.abs(blocks), axis=-1)
    top = np.max(amax) if amax.size else F32(0.0)
    with np.errstate(all="ignore"):
        d = F32(F32(top / SCALES_MAX) / VAL_MAX)
        d = F32(1.0) if d == 0 else d
        scaled_amax = ((amax / VAL_MAX).astype(np.float32) / d).astype(np.float32)
        code = encode(scaled_amax, UE4M3, "rne", overflow="saturate").astype(np.uint8)
        code = np.where(code == 0, ONE_CODE, code).astype(np.uint8)
        s = _UE4M3[code]
        y = ((blocks / s[..., None]).astype(np.float32) / d).astype(np.float32)
    q = encode(y, E2M1, "rne", overflow="saturate")
    per = group // BLOCK
    c = _corrections(y.reshape(-1, group).astype(np.float64), _E2M1[q].reshape(-1, group))
    c = np.repeat(c.reshape(rows, n // group), per, axis=-1)
    with np.errstate(all="ignore"):
        t = (s * c).astype(np.float32)
    new = encode(t, UE4M3, "sr", rbits=rb, sr_bits=sr_bits, overflow="saturate").astype(np.uint8)
    return QuantizedTensor(q.reshape(rows, n).astype(np.uint8), new, d, get_scheme("nvfp4"), 1, x.shape)


__all__ = ["ms_eden_quantize"]
