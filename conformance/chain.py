"""The reference's scaling chain, exposed: which float32 value each element is rounded from.

Every MX and two-level scheme rounds ``y = fp32(x * m)`` to the element format, where ``m``
is one float32 multiplier per block, derived from the block's scale code (and the tensor
scale). The conformance suite needs ``m`` and ``y`` for two things: to *construct* inputs
whose ``y`` is exactly a rounding tie (or one ulp beside one), and to *explain* a departure
("the scaled value 2.5 is a tie between 0x4 and 0x5"). The arithmetic here restates
:func:`fp4spec.scaling.mx_scaled_element`, :func:`fp4spec.scaling.two_level_element_multiplier`
and :func:`fp4spec.scaling.two_level_element_code`; the conformance tests check that the
numpy backend agrees with it on every tie the builders make. HiF4 has no single multiplier
per block; its functions return None. IF4 has one (:func:`fp4spec.if4.element_multiplier`):
``y`` here is the value its E2M1 candidate rounds; its INT4 candidate rounds fp32(y * 7/6).
"""

from __future__ import annotations

import numpy as np

from fp4spec.block_schemes import Scheme
from fp4spec.scaling import TensorScale, two_level_tensor_scale

F32 = np.float32


def has_chain(scheme: Scheme) -> bool:
    """True for the structures with one float32 multiplier per block (MX, two-level, IF4)."""
    return scheme.structure in ("mx", "two_level", "if4")


def tensor_scale(x: np.ndarray, scheme: Scheme) -> TensorScale | None:
    """The two-level (or IF4) tensor scale of float32 ``x`` (None for other structures)."""
    if scheme.structure not in ("two_level", "if4"):
        return None
    with np.errstate(invalid="ignore"):
        gmax = np.max(np.abs(x)) if x.size else F32(0.0)
    return tensor_scale_of_amax(gmax, scheme)


def tensor_scale_of_amax(global_amax, scheme: Scheme) -> TensorScale | None:
    if scheme.structure == "if4":
        from fp4spec.if4 import tensor_scales

        amax = F32(global_amax)
        return TensorScale(*tensor_scales(amax)) if np.isfinite(amax) else None
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
        from fp4spec.emulator.scaling import element_multipliers

        return element_multipliers(np.asarray(scale_codes, np.uint8), ts, scheme).astype(np.float32)
    if scheme.structure == "if4":
        from fp4spec.emulator.if4 import multipliers as if4_multipliers

        return if4_multipliers(np.asarray(scale_codes).astype(np.uint8) & np.uint8(0x7F), ts.decode)
    return None


def nominal_scale_codes(vec_max: np.ndarray, scheme: Scheme, ts: TensorScale | None) -> np.ndarray | None:
    """Scale code per block from its amax, by the scheme's rule (4over6: the map-to-6 candidate)."""
    vec_max = np.asarray(vec_max, np.float32)
    if scheme.structure == "mx":
        from fp4spec.emulator.scaling import mx_exponents

        e, nan_scale = mx_exponents(vec_max, scheme)
        return np.where(nan_scale, 0xFF, e + 127).astype(np.uint8)
    if scheme.structure == "two_level":
        from fp4spec.emulator.scaling import block_scale_codes

        return block_scale_codes(vec_max, ts, scheme, 1.0)
    if scheme.structure == "if4":
        from fp4spec.emulator.if4 import block_scale_codes as if4_scale_codes

        return if4_scale_codes(vec_max, ts.encode)
    return None


def block_scale_value(vec_max: np.ndarray, scheme: Scheme, ts: TensorScale, candidate: float = 1.0) -> np.ndarray:
    """Two-level (and IF4): the float32 block scale *before* its cast to the scale format (the
    value :func:`fp4spec.scaling.two_level_block_scale` rounds), per block amax."""
    if scheme.structure == "if4":
        from fp4spec.if4 import FP_MAX

        with np.errstate(all="ignore"):
            return ((np.asarray(vec_max, np.float32) / FP_MAX).astype(np.float32) * F32(ts.encode)).astype(np.float32)
    from fp4spec.emulator.scaling import block_scale_values

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
        elif scheme.structure == "if4":
            y = (y + F32(0.0)).astype(np.float32)
    return y


def scaled_values(x2d: np.ndarray, scale_codes: np.ndarray, scheme: Scheme) -> np.ndarray | None:
    """The value every element of a 2-D float32 tensor is rounded from, given the scale codes
    a quantization produced (``(rows, n_blocks)``). None for HiF4 (and for IF4 on non-finite x)."""
    if not has_chain(scheme):
        return None
    ts = tensor_scale(x2d, scheme)
    if scheme.structure == "if4" and ts is None:
        return None
    m = multipliers(scale_codes, scheme, ts)
    k = scheme.block_size
    return scaled(x2d, np.repeat(m, k, axis=-1), scheme)


def element_values(scheme: Scheme, codes: np.ndarray, scales) -> np.ndarray:
    """float64 element values of 2-D ``codes`` (before block and tensor scales). IF4: E2M1 values in
    E2M1 blocks, int4(code) * 6/7 in INT4 blocks (the flag is bit 7 of the block's scale byte);
    ``scales`` of another shape than one per block reads every block as E2M1."""
    codes = np.asarray(codes).astype(np.int64)
    fmt = scheme.element
    if scheme.structure != "if4":
        return fmt.values[codes]
    k = scheme.block_size
    s = None if scales is None else np.asarray(scales).astype(np.int64)
    if s is None or codes.ndim != 2 or s.shape != (codes.shape[0], codes.shape[1] // k):
        return fmt.values[codes]
    from fp4spec.if4 import INT4

    flag = np.repeat((s & 0x80) != 0, k, axis=-1)
    return np.where(flag, INT4.values[codes] * (6.0 / 7.0), fmt.values[codes])


__all__ = ["block_scale_value", "element_values", "has_chain", "mx_multipliers", "multipliers", "nominal_scale_codes", "scaled", "scaled_values",
           "tensor_scale", "tensor_scale_of_amax"]
