"""Exponent and lsb statistics of GEMM operands, for the fast paths' exactness tests.

``lsb(v)`` is the exponent of the lowest set bit of a nonzero dyadic ``v`` (``v`` is an odd
integer times ``2^lsb(v)``). The fast paths (:mod:`.gemm_exact`, :mod:`.gemm_fma`,
:mod:`.gemm_fdpa`, :mod:`.gemm_cdna3`) need, per row and run of K elements, the largest
exponent and the smallest lsb of the nonzero factors; they come from int8 tables of the
element codes (one table lookup per element, then a reduction per run) and from the block
scales, combined exactly: lsb(a sa) = lsb(a) + lsb(sa), and floor(log2 |a sa|) is
floor(log2 |a|) + floor(log2 sa) or one more.

Sentinels: a run with no nonzero value has exponent :data:`SENT` and lsb :data:`POS`; a
value that is not finite has exponent :data:`BAD`. Sums of a few of them with real
exponents (below 2^10 in magnitude) stay in their class (below -2^19, above 2^19, above
2^29), so the tests that compare such sums stay conservative.
"""

from __future__ import annotations

import functools

import numpy as np

from fp4spec.accumulator_models import Carrier, format_carrier

from .gemm_core import SENT, Operand

_I64 = np.int64

#: lsb of a zero: larger than any real one, so it never sets a minimum.
POS = 1 << 20
#: Exponent of a value that is not finite: larger than any sum of real exponents, so every
#: exactness test that involves it fails. (SENT, POS and BAD keep their meaning under sums
#: of a few of them with real exponents, which stay below 2^10 in magnitude.)
BAD = 1 << 30


def exp_lsb(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(floor(log2 |v|), lsb(v)) of float64 values, exactly, as int64; zeros and non-finite
    values get (SENT, POS). lsb(v) is the exponent of v's lowest set bit.

    1. |v| = m * 2^x with m in [1/2, 1) (frexp, exact).
    2. m * 2^53 is an integer (a float64 has at most 53 significant bits); its lowest set bit
       2^t is ``i & -i``, whose frexp exponent is t + 1.
    3. floor(log2 |v|) = x - 1 and lsb(v) = x - 53 + t.
    """
    a = np.abs(np.asarray(v, np.float64))
    ok = np.isfinite(a) & (a != 0)
    m, x = np.frexp(np.where(ok, a, 1.0))
    i = np.ldexp(m, 53).astype(_I64)
    _, t1 = np.frexp((i & -i).astype(np.float64))
    x = x.astype(_I64)
    e = np.where(ok, x - 1, _I64(SENT))
    lsb = np.where(ok, x - 54 + t1.astype(_I64), _I64(POS))
    return e, lsb


@functools.cache
def _code_stats(values: tuple):
    """int8 tables per code: floor(log2 |v|) and lsb; zeros -128 / 127 (None, None when a
    value lies outside int8's comfortable range)."""
    e, lsb = exp_lsb(np.array(values, np.float64))
    real = (e != SENT) & (lsb != POS)
    if np.any(np.abs(e[real]) > 100) or np.any(np.abs(lsb[real]) > 100):
        return None, None
    return (np.where(e == SENT, -128, e).astype(np.int8), np.where(lsb == POS, 127, lsb).astype(np.int8))


def element_stats(op: Operand, unit: int, emin: int | None = None, hi: bool = True) -> tuple:
    """(hi, lo) int64 (R, K // unit): per row and run of ``unit`` elements, the largest
    exponent (``max(floor(log2 |a|), emin)``; ``emin`` None: no clamp) and the smallest lsb
    of the nonzero elements, SENT and POS when there are none (hi None when not asked for).
    From int8 tables of the codes when the codes are known (the clamp is applied to the
    runs' maxima: it is monotone)."""
    starts = np.arange(0, op.values.shape[1], unit)
    e8 = None
    if op.codes is not None and len(op.element.values) <= 256:
        e8, l8 = _code_stats(tuple(np.asarray(op.element.values, np.float64).tolist()))
    if e8 is not None:
        lo = np.minimum.reduceat(np.take(l8, op.codes), starts, axis=1).astype(_I64)
        lo = np.where(lo == 127, _I64(POS), lo)
        h = np.maximum.reduceat(np.take(e8, op.codes), starts, axis=1).astype(_I64) if hi else None
        h = None if h is None else np.where(h == -128, _I64(SENT), h)
    else:
        e, lsb = exp_lsb(op.values)
        h = np.maximum.reduceat(e, starts, axis=1) if hi else None
        lo = np.minimum.reduceat(lsb, starts, axis=1)
    if h is not None and emin is not None:
        h = np.where(h == SENT, h, np.maximum(h, emin))
    return h, lo


def scale_stats(op: Operand, emin: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(e, lsb) int64 (R, nb) of the block scales: ``max(floor(log2 s), emin)`` and lsb(s);
    zeros (SENT, POS), NaN (BAD, POS)."""
    nan = np.isnan(op.scales)
    e, lsb = exp_lsb(np.where(nan, 0.0, op.scales))
    if emin is not None:
        e = np.where(e == SENT, e, np.maximum(e, emin))
    return np.where(nan, _I64(BAD), e), lsb


def per_unit(arr: np.ndarray, block: int, unit: int) -> np.ndarray:
    """A per-block array (R, nb) repeated to runs of ``unit`` elements (``unit`` divides
    ``block``)."""
    return np.repeat(arr, block // unit, axis=1) if block != unit else arr


def scaled_values(op: Operand) -> np.ndarray:
    """a * sa in float64, NaN where the scale is NaN (exact: at most 8 + 8 significant bits
    between 2^-300 and 2^300)."""
    r, k = op.values.shape
    return (op.values.reshape(r, -1, op.block) * op.scales[:, :, None]).reshape(r, k)


def rounding_is_exact(op: Operand, carrier: Carrier) -> bool:
    """True when every element * block scale of ``op`` is exactly a normal ``carrier`` value
    (or zero, or NaN for a NaN scale): significant bits of the element format plus those of
    the scale format fit the carrier's, and every nonzero product lies in [2^emin, 2^128).
    Then :func:`operands_rounded` returns the float64 products unchanged, and their
    exponents and lsbs follow from the elements' and the scales'."""
    fmt, sfmt = op.element, op.scale_format
    if format_carrier(fmt).man_bits + format_carrier(sfmt).man_bits + 2 > carrier.man_bits + 1:
        return False
    ev = np.abs(np.asarray(fmt.values, np.float64)[list(fmt.finite_codes)])
    ev = ev[ev > 0]
    sv = op.scales[np.isfinite(op.scales) & (op.scales > 0)]
    if not ev.size or not sv.size:
        return True
    return bool(ev.min() * sv.min() >= 2.0 ** carrier.emin and ev.max() * sv.max() < 2.0 ** 128)
