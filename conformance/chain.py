"""The reference's scaling chain, exposed: which float32 value each element is rounded from.

Every MX and two-level scheme rounds ``y = fp32(x * m)`` to the element format, where ``m``
is one float32 multiplier per block, derived from the block's scale code (and the tensor
scale). The conformance suite needs ``m`` and ``y`` for two things: to *construct* inputs
whose ``y`` is exactly a rounding tie (or one ulp beside one), and to *explain* a departure
("the scaled value 2.5 is a tie between 0x4 and 0x5"). The arithmetic here restates
:func:`fp4spec.scaling.mx_scaled_element`, :func:`fp4spec.scaling.two_level_element_multiplier`
and :func:`fp4spec.scaling.two_level_element_code`; the conformance tests check that the
numpy backend agrees with it on every tie the builders make. HiF4 has no single multiplier
per block; its functions return None.
"""

from __future__ import annotations

import numpy as np

from fp4spec.block_schemes import Scheme
from fp4spec.scaling import TensorScale, two_level_tensor_scale

F32 = np.float32


def has_chain(scheme: Scheme) -> bool:
    """True for the structures with one float32 multiplier per block (MX and two-level)."""
    return scheme.structure in ("mx", "two_level")


def tensor_scale(x: np.ndarray, scheme: Scheme) -> TensorScale | None:
    """The two-level tensor scale of float32 ``x`` (None for other structures)."""
    if scheme.structure != "two_level":
        return None
    with np.errstate(invalid="ignore"):
        gmax = np.max(np.abs(x)) if x.size else F32(0.0)
    return two_level_tensor_scale(F32(gmax), scheme)


def tensor_scale_of_amax(global_amax, scheme: Scheme) -> TensorScale | None:
    if scheme.structure != "two_level":
        return None
    return two_level_tensor_scale(F32(global_amax), scheme)


def mx_multipliers(scale_codes: np.ndarray, scheme: Scheme) -> np.ndarray:
    """float32 multiplier per MX block from its E8M0 scale code (0 for the NaN code 0xFF; NaN
    under torchao's RCEIL, which multiplies a NaN block by its NaN descale)."""
    codes = np.asarray(scale_codes).astype(np.int64)
    e = codes - 127
    if scheme.policies["mx_element_scaling"] == "exact":
        shift = -e
    elif scheme.scale_rule == "rceil":
        shift = np.where(e == -127, 0, -e)
    else:
        shift = -np.maximum(e, -126)
    m = np.ldexp(np.ones(codes.shape, np.float32), shift.astype(np.int32))
    torchao_rceil = scheme.policies["mx_element_scaling"] == "torchao" and scheme.scale_rule == "rceil"
    return np.where(codes == 0xFF, F32(np.nan) if torchao_rceil else F32(0.0), m).astype(np.float32)


def multipliers(scale_codes: np.ndarray, scheme: Scheme, ts: TensorScale | None) -> np.ndarray | None:
    """float32 multiplier per block from scale codes (None for HiF4)."""
    if scheme.structure == "mx":
        return mx_multipliers(scale_codes, scheme)
    if scheme.structure == "two_level":
        from fp4spec.emulator.blockscale import element_multipliers

        return element_multipliers(np.asarray(scale_codes, np.uint8), ts, scheme).astype(np.float32)
    return None


def nominal_scale_codes(vec_max: np.ndarray, scheme: Scheme, ts: TensorScale | None) -> np.ndarray | None:
    """Scale code per block from its amax, by the scheme's rule (4over6: the map-to-6 candidate)."""
    vec_max = np.asarray(vec_max, np.float32)
    if scheme.structure == "mx":
        from fp4spec.emulator.blockscale import mx_exponents

        e, nan_scale = mx_exponents(vec_max, scheme)
        return np.where(nan_scale, 0xFF, e + 127).astype(np.uint8)
    if scheme.structure == "two_level":
        from fp4spec.emulator.blockscale import block_scale_codes

        return block_scale_codes(vec_max, ts, scheme, 1.0)
    return None


def block_scale_value(vec_max: np.ndarray, scheme: Scheme, ts: TensorScale, candidate: float = 1.0) -> np.ndarray:
    """Two-level: the float32 block scale *before* its cast to the scale format (the value
    :func:`fp4spec.scaling.two_level_block_scale` rounds), per block amax."""
    from fp4spec.emulator.blockscale import block_scale_values

    return block_scale_values(vec_max, ts, scheme, candidate)


def scaled(x: np.ndarray, m, scheme: Scheme) -> np.ndarray:
    """``y = fp32(x * m)`` as the element encoder sees it (two-level: clamped to +-element_max,
    and -0.0 made +0.0 under ``nv_negative_zero="positive"``)."""
    with np.errstate(all="ignore"):
        y = (np.asarray(x, np.float32) * np.asarray(m, np.float32)).astype(np.float32)
        if scheme.structure == "two_level":
            top = F32(scheme.max_elem)
            if top < scheme.element.max:
                y = np.clip(y, -top, top)
            if scheme.policies["nv_negative_zero"] == "positive":
                y = (y + F32(0.0)).astype(np.float32)
    return y


def scaled_values(x2d: np.ndarray, scale_codes: np.ndarray, scheme: Scheme) -> np.ndarray | None:
    """The value every element of a 2-D float32 tensor is rounded from, given the scale codes
    a quantization produced (``(rows, n_blocks)``). None for HiF4."""
    if not has_chain(scheme):
        return None
    ts = tensor_scale(x2d, scheme)
    m = multipliers(scale_codes, scheme, ts)
    k = scheme.block_size
    return scaled(x2d, np.repeat(m, k, axis=-1), scheme)


__all__ = ["block_scale_value", "has_chain", "mx_multipliers", "multipliers", "nominal_scale_codes", "scaled", "scaled_values",
           "tensor_scale", "tensor_scale_of_amax"]
