"""Vectorized HiF4 (HiFloat4): :func:`fp4spec.hif4.hif4_quantize_group_scalar` over whole arrays.

Same steps, same results, no per-group Python loop: groups of 64 along ``axis`` are reshaped
to ``(..., n_groups, 16, 4)`` and every step is one numpy expression over all groups.

Arithmetic: with ``arith="float64"`` the products are evaluated in float64, where they are
exact (a float32 value times a bfloat16 value has at most 32 significant bits), so this
equals the exact-rational reference; with ``arith="float32"`` they are evaluated in float32,
which rounds exactly where the reference applies ``F32(.)``. ``BF16(.)`` is computed with
``frexp``/``ldexp`` and ``np.round`` (ties to even) in float64, which is exact.
"""

from __future__ import annotations


import ml_dtypes
import numpy as np

from fp4spec.hif4 import (
    ARITH_MODES,
    CONST_REC,
    E6M2_MAX,
    E6M2_MIN,
    E6M2_NAN_CODE,
    GROUP_SIZE,
    LEVEL2_SIZE,
    LEVEL3_SIZE,
    NONFINITE_POLICIES,
    S1P2_MAX_INDEX,
)
from fp4spec.rounding import check_choice
from fp4spec._checks import check_axis

_N16 = GROUP_SIZE // LEVEL3_SIZE  # 16 level-3 groups
_N8 = GROUP_SIZE // LEVEL2_SIZE  # 8 level-2 groups
_INPUT_DTYPES = tuple(np.dtype(t) for t in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64))


def bf16_rne(v: np.ndarray) -> np.ndarray:
    """``To_BF16`` of non-negative float64 values: 8 significant bits, ties to even, E >= -126."""
    _, ex = np.frexp(v)  # v = f * 2^ex with f in [0.5, 1): floor(log2 v) = ex - 1
    e = np.maximum(ex - 1, -126)
    return np.ldexp(np.round(np.ldexp(v, 7 - e)), e - 7)


def e6m2_encode(sf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step 6 on float64 scale factors: (uint8 codes, float64 values)."""
    x = np.maximum(np.minimum(sf, float(E6M2_MAX)), float(E6M2_MIN))
    _, ex = np.frexp(x)
    e = ex - 1
    r = np.round(np.ldexp(x, 2 - e))  # 4..8, ties to even
    carry = r == 8
    e = e + carry
    r = np.where(carry, 4.0, r)
    codes = ((e + 48) << 2) | (r.astype(np.int64) - 4)
    return codes.astype(np.uint8), np.ldexp(r, e - 2)


def e6m2_decode(codes: np.ndarray) -> np.ndarray:
    """float64 values of E6M2 codes (``0xFF`` -> NaN)."""
    codes = codes.astype(np.int64)
    val = np.ldexp(1.0 + (codes & 3) / 4.0, (codes >> 2) - 48)
    return np.where(codes == E6M2_NAN_CODE, np.nan, val)


def _as_input(x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype not in _INPUT_DTYPES:
        raise TypeError(f"x: dtype {arr.dtype} is not supported; pass float16, bfloat16 (ml_dtypes), "
                        f"float32 or float64 values")
    return arr


def _to_float32(arr: np.ndarray) -> np.ndarray:
    """Step 1: float16/bfloat16 widen exactly, float64 rounds to nearest even (overflow: +-Inf)."""
    with np.errstate(over="ignore"):
        return arr.astype(np.float32)


def hif4_quantize(x, *, axis: int = -1, arith: str = "float64", pad: bool = False,
                  nonfinite: str = "error") -> dict:
    """Quantize ``x`` to HiF4 in groups of 64 consecutive values along ``axis``.

    Args:
        x: float16, bfloat16 (ml_dtypes), float32 or float64 array. float64 values are
            rounded to float32 first (RNE), as in :func:`fp4spec.hif4.hif4_quantize_group_scalar`.
        axis: the axis along which groups of 64 are formed (default: the last one).
        arith: ``"float64"`` (default; the golden NumPy model, exact) or ``"float32"``.
        pad: if True, a length along ``axis`` that is not a multiple of 64 is zero-padded to
            one for the computation and the codes are cropped back (zeros never raise a
            maximum, so the last group's metadata depends on its real values only); if False
            such a length is an error.
        nonfinite: ``"error"`` (default) or ``"propagate"`` (see the scalar reference).

    Returns:
        A dict with, for ``n_groups = ceil(length / 64)`` and ``lead`` = x's shape without
        ``axis``:

        * ``"codes"``: uint8 S1P2 codes, x's shape.
        * ``"scales"``: uint8 E6M2 codes, shape ``lead + (n_groups,)``.
        * ``"e1_8"``: uint8 bits, shape ``lead + (n_groups, 8)``.
        * ``"e1_16"``: uint8 bits, shape ``lead + (n_groups, 16)``.
    """
    check_choice("arith", arith, ARITH_MODES)
    check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
    if not isinstance(pad, (bool, np.bool_)):
        raise ValueError(f"pad: expected True or False, got {pad!r}")
    arr = _as_input(x)
    ax = check_axis(axis, arr.ndim, "x")
    x32 = np.moveaxis(_to_float32(arr), ax, -1)
    lead, length = x32.shape[:-1], x32.shape[-1]
    n_groups = -(-length // GROUP_SIZE)
    if length % GROUP_SIZE:
        if not pad:
            raise ValueError(f"x: length {length} along axis {axis} is not a multiple of {GROUP_SIZE}; "
                             f"pass pad=True to zero-pad the last group")
        widths = [(0, 0)] * len(lead) + [(0, n_groups * GROUP_SIZE - length)]
        x32 = np.pad(x32, widths)
    g = x32.reshape(lead + (n_groups, _N16, LEVEL3_SIZE))

    # Step 2: non-finite groups
    finite = np.isfinite(g)
    bad = ~finite.all(axis=(-2, -1))
    if bad.any():
        if nonfinite == "error":
            _raise_nonfinite(arr, ax, finite)
        g = np.where(bad[..., None, None], np.float32(0), g)

    # Step 3
    neg = g < 0
    a = np.abs(g)
    # Step 4
    v16 = a.max(axis=-1)
    v8 = v16.reshape(lead + (n_groups, _N8, 2)).max(axis=-1)
    vmax = v8.max(axis=-1)
    f32 = arith == "float32"
    cdt = np.float32 if f32 else np.float64
    const_rec = cdt(float(CONST_REC))
    # Step 5
    sf = bf16_rne((vmax.astype(cdt) * const_rec).astype(np.float64))
    # Step 6
    scales, scale_val = e6m2_encode(sf)
    # Step 7
    rec = bf16_rne(1.0 / scale_val).astype(cdt)
    # Step 8
    e1_8 = v8.astype(cdt) * rec[..., None] >= 4
    e1_8x2 = np.repeat(e1_8, 2, axis=-1)
    # Step 9
    e1_16 = np.ldexp(v16.astype(cdt) * rec[..., None], -e1_8x2.astype(np.int32)) >= 2
    # Step 10
    de = e1_8x2.astype(np.int32) + e1_16
    # Step 11
    q = np.ldexp(a.astype(cdt) * rec[..., None, None], (2 - de)[..., None])
    m4 = np.minimum(np.floor(q + cdt(0.5)), S1P2_MAX_INDEX).astype(np.uint8)
    # Step 12
    codes = (neg.astype(np.uint8) << 3) | m4

    if bad.any():
        scales = np.where(bad, np.uint8(E6M2_NAN_CODE), scales)
        codes[bad] = 0
        e1_8[bad] = False
        e1_16[bad] = False
    codes = codes.reshape(lead + (n_groups * GROUP_SIZE,))[..., :length]
    return {
        "codes": np.moveaxis(codes, -1, ax),
        "scales": scales.astype(np.uint8),
        "e1_8": e1_8.astype(np.uint8),
        "e1_16": e1_16.astype(np.uint8),
    }


def _raise_nonfinite(arr: np.ndarray, ax: int, finite: np.ndarray):
    moved = np.moveaxis(arr, ax, -1)
    flat_finite = finite.reshape(finite.shape[:-3] + (-1,))[..., :moved.shape[-1]]
    idx = tuple(int(i[0]) for i in np.nonzero(~flat_finite))
    value = float(moved[idx])
    why = " (a float64 value beyond the float32 range)" if np.isfinite(value) else ""
    index = idx[:-1][:ax] + (idx[-1],) + idx[:-1][ax:]
    raise ValueError(f"x: element {index} is {value!r}{why}; HiF4 has no encoding for NaN or Inf "
                     f"values; pass nonfinite='propagate' to get NaN groups (scale code 0xFF), "
                     f"as in the golden model's output")


def _as_codes(v, name: str, max_value: int) -> np.ndarray:
    arr = np.asarray(v)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected an integer array, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() > max_value):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"{name}: every entry must lie in 0..{max_value}, found {int(bad)}")
    return arr.astype(np.int64)


def hif4_dequantize(codes, scales, e1_8, e1_16, *, axis: int = -1) -> np.ndarray:
    """Decode HiF4 data: float32 values of ``codes``' shape (exact; NaN for scale code ``0xFF``).

    Value of element i in level-3 group j of its group:
    ``(-1)^(code >> 3) * E6M2(scale) * 2^(e1_8[j // 2] + e1_16[j]) * (code & 7) / 4``.
    The arrays are laid out as :func:`hif4_quantize` returns them; the length of ``codes``
    along ``axis`` may be shorter than ``64 * n_groups`` (a padded, cropped last group).
    """
    c = _as_codes(codes, "codes", 15)
    s = _as_codes(scales, "scales", 255)
    b8 = _as_codes(e1_8, "e1_8", 1)
    b16 = _as_codes(e1_16, "e1_16", 1)
    ax = check_axis(axis, c.ndim, "codes")
    c = np.moveaxis(c, ax, -1)
    lead, length = c.shape[:-1], c.shape[-1]
    if s.shape[:-1] != lead or s.ndim != c.ndim:
        raise ValueError(f"scales: shape {s.shape} does not match codes (expected {lead} + (n_groups,))")
    n_groups = s.shape[-1]
    if -(-length // GROUP_SIZE) != n_groups:
        raise ValueError(f"scales: {n_groups} groups along the last axis, but codes have length {length} "
                         f"along axis {axis}, which needs {-(-length // GROUP_SIZE)}")
    for name, bits, n in (("e1_8", b8, _N8), ("e1_16", b16, _N16)):
        if bits.shape != s.shape + (n,):
            raise ValueError(f"{name}: shape {bits.shape} does not match scales {s.shape} "
                             f"(expected {s.shape + (n,)})")
    c = np.pad(c, [(0, 0)] * len(lead) + [(0, n_groups * GROUP_SIZE - length)])
    c = c.reshape(lead + (n_groups, _N16, LEVEL3_SIZE))
    de = np.repeat(b8, 2, axis=-1) + b16
    scale = np.ldexp(e6m2_decode(s)[..., None], de)  # exact in float64
    mag = (c & 7) / 4.0 * scale[..., None]
    val = np.where(c >> 3 == 1, -mag, mag).astype(np.float32)
    val = val.reshape(lead + (n_groups * GROUP_SIZE,))[..., :length]
    return np.moveaxis(val, -1, ax)


__all__ = ["hif4_quantize", "hif4_dequantize", "bf16_rne", "e6m2_encode", "e6m2_decode"]
