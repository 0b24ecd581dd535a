"""Shrinkage bias of a grid (exact) and of a block-scaled scheme (measured), and attenuation.

The UFP4 paper (arXiv 2606.20381) calls the systematic negative rounding error of E2M1's
uneven grid *shrinkage bias*. Under round-to-nearest the inputs that round to a grid value
``v`` form the interval between the midpoints to its neighbours; when the gap above ``v`` is
wider than the gap below (E2M1 at 2 and 4), that interval extends further above ``v`` than
below, so for inputs spread evenly over it the rounded value is on average *smaller* than
the input. On a uniform grid (E1M2, INT4) the interval is centred on ``v`` and the bias is 0.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from fp4spec.number_formats import Format, get_format
from fp4spec.rounding import check_choice

from ._quantizer import as_quantizer, dequantize, quantize_function, scheme_label

#: Rounding modes for which the rounding interval of each grid value is an interval.
BIAS_ROUNDINGS = ("rne", "rna", "rtz", "rdn", "rup")


def rounding_interval(prev: Fraction, v: Fraction, nxt: Fraction, rounding: str) -> tuple[Fraction, Fraction]:
    """Closure of the set of positive inputs that ``rounding`` maps to ``v`` (neighbours ``prev < v < nxt``).

    * ``rne``, ``rna`` (to nearest): ``[(prev + v)/2, (v + nxt)/2]`` -- the tie rule only
      decides the endpoints, a set of measure zero.
    * ``rtz``, ``rdn`` (toward zero / -inf; the same for positive inputs): ``[v, nxt]``.
    * ``rup`` (toward +inf): ``[prev, v]``.
    """
    check_choice("rounding", rounding, BIAS_ROUNDINGS)
    if rounding in ("rne", "rna"):
        return (prev + v) / 2, (v + nxt) / 2
    if rounding in ("rtz", "rdn"):
        return v, nxt
    return prev, v


def shrinkage_bias(fmt: "str | Format", rounding: str = "rne", *, exact: bool = False) -> dict:
    """Expected signed rounding error at each interior positive grid value, for uniform inputs.

    Algorithm (exact, on :class:`fractions.Fraction`):

    1. Take the format's finite values (``get_format(fmt).grid``) that are >= 0, in
       increasing order: ``g_0 < g_1 < ... < g_n`` (``g_n`` is the max).
    2. For every ``v = g_i`` with ``0 < i < n`` and ``v > 0`` -- every positive value
       strictly between the smallest non-negative value and the max, so that it has a
       neighbour on each side -- take its rounding interval ``[lo, hi]`` under ``rounding``
       (:func:`rounding_interval`; RNE: ``[mid(g_{i-1}, v), mid(v, g_{i+1})]``).
    3. For inputs uniform over ``[lo, hi]`` the expected error ``E[q(x) - x]`` is
       ``v - (lo + hi) / 2``; under RNE that is ``(2v - g_{i-1} - g_{i+1}) / 4``.

    The max is excluded: under saturation its interval is unbounded above.

    Args:
        fmt: a format name or descriptor (``"e2m1"``, ``"e1m2"``, ``"int4"``, ...).
        rounding: ``"rne"`` (default), ``"rna"``, ``"rtz"``, ``"rdn"`` or ``"rup"``.
        exact: return Fractions instead of floats.

    Returns:
        ``{v: bias}`` in increasing ``v``. E2M1 under RNE: 0 at 0.5, 1, 1.5 and 3;
        -1/8 at 2; -1/4 at 4. Uniform grids (E1M2, INT4, S1P2): 0 everywhere.
    """
    check_choice("rounding", rounding, BIAS_ROUNDINGS)
    f = get_format(fmt)
    g = [v for v, _ in f.grid if v >= 0]
    out = {}
    for i in range(1, len(g) - 1):
        v = g[i]
        if v <= 0:
            continue
        lo, hi = rounding_interval(g[i - 1], v, g[i + 1], rounding)
        b = v - (lo + hi) / 2
        out[v if exact else float(v)] = b if exact else float(b)
    return out


def attenuation(x, xq) -> float:
    """The attenuation factor eta: the least-squares ``alpha`` in ``xq ~ alpha * x``.

    ``eta = <xq, x> / <x, x>`` over all elements, in float64. ``eta < 1`` means the
    quantized tensor is, in the least-squares sense, a shrunken copy of ``x``; for ``x``
    already on the grid ``xq == x`` and ``eta == 1`` exactly.

    Raises:
        ValueError: shapes differ, non-finite values, or ``x`` is all zero.
    """
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(xq, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"xq: shape {b.shape} differs from x's shape {a.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("x, xq: must be finite")
    den = float(np.dot(a.ravel(), a.ravel()))
    if den == 0:
        raise ValueError("x: is all zero, attenuation is undefined")
    return float(np.dot(b.ravel(), a.ravel())) / den


def grid_point_bias(x, xq, g) -> dict:
    """Measured error per grid point, in units of the scaled grid.

    ``g`` is each element's grid value (the decoded element code, before any scale), so
    ``xq = g * s`` with ``s`` the element's effective scale (block, tensor and, for HiF4,
    micro-exponent scales together). For every element with ``g != 0``:

    1. ``s = xq / g`` and ``u = x / s`` (the input in grid units);
    2. the error in grid units is ``sign(g) * (g - u)``: negative = pulled towards zero.

    Returns ``{|g|: (mean error, count)}`` in increasing ``|g|``; compare with
    :func:`shrinkage_bias`, which is the same quantity for inputs uniform in each
    rounding interval (real data is denser near zero, so the measured means differ).
    """
    x = np.asarray(x, dtype=np.float64)
    xq = np.asarray(xq, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    if not (x.shape == xq.shape == g.shape):
        raise ValueError(f"x, xq, g: shapes {x.shape}, {xq.shape}, {g.shape} differ")
    m = (g != 0) & np.isfinite(g) & (xq != 0)
    gm = g[m]
    u = x[m] * gm / xq[m]
    err = np.sign(gm) * (gm - u)
    mags = np.abs(gm)
    out = {}
    for v in np.unique(mags):
        sel = mags == v
        out[float(v)] = (float(err[sel].mean()), int(sel.sum()))
    return out


def _grid_values(qt, shape):
    """Decoded element codes of a QuantizedTensor (``qt.codes`` with ``qt.scheme.element``; IF4:
    each block by its flag, INT4 values times 6/7), or None."""
    codes = getattr(qt, "codes", None)
    sch = getattr(qt, "scheme", None)
    elem = getattr(sch, "element", None)
    if codes is None or elem is None:
        return None
    from fp4spec.api.elements import decode

    codes = np.asarray(codes)
    if codes.shape != tuple(shape):
        return None
    if sch.structure == "if4":
        return _if4_grid_values(qt)
    return decode(codes, elem)


def _if4_grid_values(qt) -> np.ndarray:
    from fp4spec.emulator.if4 import element_values

    m = qt.moved()
    c = np.asarray(m["codes"])
    k = qt.scheme.block_size
    blocks = c.reshape(c.shape[:-1] + (c.shape[-1] // k, k))
    flag = (np.asarray(m["scales"]).astype(np.int64) & 0x80) != 0
    v = element_values(blocks, m["scales"]).astype(np.float64)
    v = np.where(flag[..., None], v * (6.0 / 7.0), v).reshape(c.shape)
    return np.moveaxis(v, -1, qt.axis)


def scheme_bias(x, scheme, *, rounding: str = "rne") -> dict:
    """Measured bias of a whole block-scaled scheme on data ``x`` (blocks along the last axis).

    Steps:

    1. ``xq = dequantize(quantize(x, scheme, axis=-1, rounding=rounding))`` (or
       ``scheme(x)`` for a callable).
    2. ``mean_error = mean(xq - x)``; ``relative_shrinkage = sum(sign(x) * (xq - x)) /
       sum(|x|)``: the mean signed change of magnitude relative to the mean magnitude
       (negative = values pulled towards zero).
    3. ``eta = attenuation(x, xq)`` (:func:`attenuation`).
    4. For a scheme given by name or descriptor, whose quantized tensor exposes ``codes``
       and ``scheme.element``: ``grid_point_bias`` = :func:`grid_point_bias` of
       ``(x, xq, decode(codes, element))``.

    Returns:
        ``{"scheme", "mean_error", "relative_shrinkage", "eta"}`` and, where step 4 applies,
        ``"grid_point_bias"`` (``{|g|: (mean error in grid units, count)}``).
    """
    a = np.asarray(x, dtype=np.float32)
    a64 = a.astype(np.float64)
    g = None
    if callable(scheme) and not isinstance(scheme, str) and not hasattr(scheme, "element"):
        xq = as_quantizer(scheme)(a)
    else:
        if not isinstance(scheme, str) and not hasattr(scheme, "name"):
            as_quantizer(scheme)  # raises the argument error
        qt = quantize_function()(a, scheme, axis=-1, rounding=rounding)
        xq = dequantize(qt)
        g = _grid_values(qt, a.shape)
    err = xq - a64
    out = {
        "scheme": scheme_label(scheme),
        "mean_error": float(err.mean()),
        "relative_shrinkage": float(np.sum(np.sign(a64) * err) / np.sum(np.abs(a64))),
        "eta": attenuation(a64, xq),
    }
    if g is not None:
        out["grid_point_bias"] = grid_point_bias(a64, xq, g)
    return out
