"""The terms of NVIDIA's fused steps (``fdpa``) per scale application: what the fast paths
need to know about each operand (:class:`Side`) and the integer step on output pairs.

Every ``fdpa`` step fuses terms ``T`` with assigned exponents ``e(T)`` and the accumulator
(:func:`fp4spec.gemm_reference.fdpa_step`). A term is a product of an A factor and a B factor:

* ``"product"`` (``sm100-mxf8f6f4``): per K element, ``(a sa) (b sb)``; e(T) = e(a) + e(sa) +
  e(b) + e(sb) (elements in their carrier, scales in theirs); |T| < 2^(e(T) + 4).
* ``"group"`` (``sm100-mxf4nvf4``): per group of G elements, ``(sum a_k b_k) sa sb``; e(T) =
  e(sa) + e(sb) (the scales only); |T| < G max|a| max|b| 2^(e(T) + 2).
* ``"*_operand"`` (``sm90-bf16``): per K element, ``a' b'`` with a' = carrier(a sa); e(T) =
  e(a') + e(b') (carrier exponents, emin -126); |T| < 2^(e(T) + 2).

A :class:`Side` holds, per row and step, an upper bound ``hi`` of the A part of e(T) and a lower
bound ``lo`` of lsb of the A part of T over the step's nonzero terms, so that for every term
of output (m, n) in step s: ``e(T) <= hi_A[m, s] + hi_B[n, s]`` and ``lsb(T) >= lo_A[m, s] +
lo_B[n, s]`` (for a group, lsb of a sum of products is at least the smallest lsb of its
elements' products). ``w`` is the exponent bound of the list above: |T| < 2^(e(T) + w).
Each Side also holds ``mag`` (every |factor| < 2^mag) and sums of squares per step, for
the magnitude bounds (E5 of :mod:`.gemm_float`).

The integer step (Tier 3) splits each term as ``N * 2^x`` with assigned exponent e and sums
``trunc(N * 2^(x + F - e_max))`` in int64 (:func:`~.gemm_core.fused`). Bounds (|.| < 2^62,
each checked from the operands' significands when the step is built, which refuses
(NotImplementedError, pointing to the scalar reference) what it cannot prove):

* ``"group"``: E2M1 elements times 2 are integers of magnitude <= 12, so a group sum of 16
  products is ``|D| <= 16 * 144 = 2304 < 2^12``; UE4M3 significands are integers < 16
  (E8M0: 1), so ``|N| < 2^12 * 2^8 = 2^20``; the largest left shift is ``F - 2 - 3 - 3 <=
  35`` (``e(T) <= e_max``), so each term is below 2^55; the accumulator term is below ``2^24 *
  2^(F - 23) = 2^36``; five terms sum to less than 2^58.
* ``"product"`` / ``"*_operand"``: ``|N| < 2^(pa+1) 2^(pb+1) 2^(sa+1) 2^(sb+1)`` (element and
  scale significand bits) and the left shift is at most ``F - pa - pb - sa - sb``, so each
  term is below 2^(F + 4); 33 terms sum to less than 2^35.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel, Carrier, element_carrier, format_carrier

from .gemm_core import (
    SENT,
    Operand,
    bits,
    check_bound,
    decompose,
    f32_terms,
    fp64_special,
    fused,
    max_significand,
    once,
    operands_rounded,
    present_values,
    quantum_exponent,
    scale_terms,
)
from .gemm_float import f32_exp_lsb, segment_reduce, square_sums
from .gemm_stats import (
    BAD,
    POS,
    element_stats,
    per_unit,
    rounding_is_exact,
    scale_stats,
    scaled_values,
)

_I64 = np.int64


@dataclasses.dataclass
class Side:
    """One operand as the fdpa fast paths see it (see the module docstring)."""

    vals: np.ndarray       # (R, K) float64: the operand's part of each term, 0 where not finite
    hi: np.ndarray         # (R, S) int64: SENT for no nonzero term, BAD for a non-finite factor
    lo: np.ndarray         # (R, S) int64: POS for no nonzero term
    mag: np.ndarray        # (R, S) int64: every |vals| of the step is below 2^mag
    sq: np.ndarray         # (R, S) float64: sums of squares of vals per step
    nan_rows: np.ndarray   # (R,) rows whose result is NaN whatever happens (group: a NaN scale)
    _abs: np.ndarray | None = None

    @property
    def absvals(self) -> np.ndarray:
        """|vals| (computed when first needed)."""
        if self._abs is None:
            self._abs = np.abs(self.vals)
        return self._abs


def _side(vals, hi, lo, mag, units_per_step: int, nan_rows=None, finite=None) -> Side:
    """A Side from per-unit bounds (units: runs of elements, or groups); ``finite``: whether
    ``vals`` is known to be finite (None: test it)."""
    if not (finite if finite is not None else np.isfinite(vals).all()):
        vals = np.where(np.isfinite(vals), vals, 0.0)
    if nan_rows is None:
        nan_rows = np.zeros(vals.shape[0], bool)
    step = vals.shape[1] // hi.shape[1] * units_per_step
    return Side(vals, segment_reduce(hi, units_per_step, np.maximum), segment_reduce(lo, units_per_step, np.minimum),
                segment_reduce(mag, units_per_step, np.maximum), square_sums(vals, step), nan_rows)


def product_side(op: Operand, model: AccumulatorModel) -> Side:
    unit = math.gcd(model.k_step, op.block)
    hi, lo = element_stats(op, unit, element_carrier(model, op.element).emin)
    se, sl = scale_stats(op, format_carrier(op.scale_format).emin)
    hi = hi + per_unit(se, op.block, unit)          # |a| < 2^(e(a) + 1), sa < 2^(e(sa) + 1)
    lo = lo + per_unit(sl, op.block, unit)
    return _side(scaled_values(op), hi, lo, hi + 2, model.k_step // unit, finite=not np.isnan(op.scales).any())


def product_step(a: Operand, b: Operand, model: AccumulatorModel) -> Callable:
    """The integer step on output pairs for ``"product"`` scales (terms split as the module
    docstring of :mod:`.gemm_core` says; the int64 bound of :func:`~.gemm_core.fused` checked
    here, refusing what it cannot prove)."""
    ca, cb = element_carrier(model, a.element), element_carrier(model, b.element)
    sca, scb = format_carrier(a.scale_format), format_carrier(b.scale_format)
    pa, pb = ca.man_bits + sca.man_bits, cb.man_bits + scb.man_bits
    ma_max = max_significand(present_values(a.values, a.codes, a.element.values), ca) * max_significand(a.scales, sca)
    mb_max = max_significand(present_values(b.values, b.codes, b.element.values), cb) * max_significand(b.scales, scb)
    check_bound(bits(ma_max * mb_max) + max(model.frac_bits - pa - pb, 0) + bits(model.k_step + 1), model.name)
    L = model.k_step

    def terms(op, car, scar):
        """(significand, exponent, zero) of every element times its scale, (R, K), and the
        float64 products (NaN for a NaN scale) for the special-value check."""
        m, e, z = decompose(op.values, car)
        sc = op.scales
        sm, se, sz = decompose(np.where(np.isnan(sc), 0.0, sc), scar)
        sm, se, sz = (np.repeat(x, op.block, axis=1) for x in (sm, se, sz))
        zz = z | sz
        return m * sm, np.where(zz, _I64(SENT), e + se), zz, scaled_values(op)

    ta, tb = once(lambda: terms(a, ca, sca)), once(lambda: terms(b, cb, scb))

    def step(mi, ni, s, acc):
        ks = slice(s * L, (s + 1) * L)
        ma, ea, za, va = (x[mi, ks] for x in ta())
        mb, eb, zb, vb = (x[ni, ks] for x in tb())
        e = ea + eb
        new = fused([(ma * mb, e - pa - pb, e, za | zb)], f32_terms(acc), model)
        return _special(new, va, vb, acc)

    return step


def _special(new: np.ndarray, va: np.ndarray, vb: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """MMA-Sim's float64 check on a step: an Inf sum gives that Inf, a NaN sum NaN."""
    nan, inf, s = fp64_special(va, vb, acc)
    with np.errstate(all="ignore"):
        new = np.where(inf, s.astype(np.float32), new)
    return np.where(nan, np.float32(np.nan), new).astype(np.float32)


# =====================================================================================
# "group" (sm100-mxf4nvf4)
# =====================================================================================

def group_side(op: Operand, model: AccumulatorModel) -> Side:
    G = model.group_size
    hi_el, lo_el = element_stats(op, G)
    se, sl = scale_stats(op, format_carrier(op.scale_format).emin)
    se, sl = per_unit(se, op.block, G), per_unit(sl, op.block, G)
    empty = (lo_el == POS) | (se == SENT) | (se == BAD)   # a zero term for every B (or NaN)
    hi = np.where(empty, _I64(SENT), se)
    lo = np.where(empty, _I64(POS), lo_el + sl)
    nan_rows = np.isnan(op.scales).any(axis=1)
    return _side(scaled_values(op), hi, lo, np.where(empty, _I64(SENT), hi_el + se + 2), model.k_step // G,
                 nan_rows, finite=not nan_rows.any())


def group_w(a: Operand, b: Operand, model: AccumulatorModel) -> int:
    """|T| < 2^(e(T) + w) for a group term: G max|a| max|b| times two scale significands < 2."""
    ma = float(np.max(np.abs(np.asarray(a.element.values, np.float64)[list(a.element.finite_codes)])))
    mb = float(np.max(np.abs(np.asarray(b.element.values, np.float64)[list(b.element.finite_codes)])))
    return int(np.ceil(np.log2(model.group_size * ma * mb))) + 2


def group_step(a: Operand, b: Operand, model: AccumulatorModel) -> Callable:
    """The integer step on output pairs for ``"group"`` scales (sum of G products exact in
    int64, times both scale significands; bounds checked as the module docstring of
    :mod:`fp4spec.emulator.gemm` says)."""
    va = present_values(a.values, a.codes, a.element.values)
    vb = present_values(b.values, b.codes, b.element.values)
    qa, qb = quantum_exponent(va), quantum_exponent(vb)
    sma, sea, sza, nana, dsa = scale_terms(a)
    smb, seb, szb, nanb, dsb = scale_terms(b)
    G, L = model.group_size, model.k_step
    ia_max = int(np.max(np.abs(np.ldexp(va, qa)), initial=1))
    ib_max = int(np.max(np.abs(np.ldexp(vb, qb)), initial=1))
    n_bits = bits(G * ia_max * ib_max * int(np.max(sma, initial=1)) * int(np.max(smb, initial=1)))
    check_bound(n_bits + max(model.frac_bits - qa - qb - dsa - dsb, 0) + bits(L // G + 1), model.name)
    check_bound(24 + max(model.frac_bits - 23, 0) + bits(L // G + 1), model.name)
    x0 = -dsa - dsb - qa - qb

    def step(mi, ni, s, acc):
        ks = slice(s * L, (s + 1) * L)
        p = len(mi)
        ia = np.ldexp(a.values[mi, ks], qa).astype(_I64).reshape(p, L // G, G)
        ib = np.ldexp(b.values[ni, ks], qb).astype(_I64).reshape(p, L // G, G)
        d = (ia * ib).sum(axis=-1)
        cnt = ((ia != 0) & (ib != 0)).sum(axis=-1)
        ba = np.arange(ks.start, ks.stop, G) // a.block
        bb = np.arange(ks.start, ks.stop, G) // b.block
        n = d * sma[mi][:, ba] * smb[ni][:, bb]
        e = sea[mi][:, ba] + seb[ni][:, bb]
        zero = (cnt == 0) | sza[mi][:, ba] | szb[ni][:, bb]
        new = fused([(n, e + x0, e, zero)], f32_terms(acc), model)
        new = np.where(np.isinf(acc), acc, new)
        nan = nana[mi][:, ba].any(axis=1) | nanb[ni][:, bb].any(axis=1) | np.isnan(acc)
        return np.where(nan, np.float32(np.nan), new).astype(np.float32)

    return step


# =====================================================================================
# "fp32_operand" / "bf16_operand" (sm90-bf16)
# =====================================================================================

def operand_side(x: np.ndarray, k_step: int) -> Side:
    """From rounded operands x (float32, R x K; NaN and Inf allowed)."""
    e, lsb = f32_exp_lsb(x)
    with np.errstate(invalid="ignore"):  # a signalling NaN stays a NaN
        return _side(x.astype(np.float64), e, lsb, e + 1, k_step)


def rounded_operand(op: Operand, carrier: Carrier, k_step: int):
    """(Side, the rounded operands as float32 or a function returning them) for operands
    ``carrier(a sa)``. When the rounding is exact (:func:`rounding_is_exact`) the Side comes
    from the element and scale statistics: e(a') = floor(log2 |a sa|) <= floor(log2 |a|) +
    floor(log2 sa) + 1 (+ 0 when every scale is a power of two) and lsb(a') = lsb(a) +
    lsb(sa); the normal range makes the carrier's emin irrelevant."""
    if not rounding_is_exact(op, carrier):
        x = operands_rounded(op, carrier)
        return operand_side(x, k_step), x
    unit = math.gcd(k_step, op.block)
    hi, lo = element_stats(op, unit)
    se, sl = scale_stats(op)
    hi = hi + per_unit(se, op.block, unit)
    carry = 0 if format_carrier(op.scale_format).man_bits == 0 else 1
    vals = scaled_values(op)
    side = _side(vals, hi + carry, lo + per_unit(sl, op.block, unit), hi + 2, k_step // unit,
                 finite=not np.isnan(op.scales).any())
    return side, lambda: vals.astype(np.float32)


def operand_step(xa, xb, carrier: Carrier, model: AccumulatorModel) -> Callable:
    """The integer step on output pairs for operands rounded to ``carrier`` (``xa``, ``xb``:
    float32 arrays, or functions returning them when first needed)."""
    L = model.k_step
    check_bound(2 * (carrier.man_bits + 1) + max(model.frac_bits - 2 * carrier.man_bits, 0) + bits(L + 1),
                model.name)

    def terms(x):
        with np.errstate(invalid="ignore"):
            v = (x() if callable(x) else x).astype(np.float64)
        m, e, z = decompose(np.where(np.isfinite(v), v, 0.0), carrier)
        return m, e, z, v

    ta, tb = once(lambda: terms(xa)), once(lambda: terms(xb))

    def step(mi, ni, s, acc):
        ks = slice(s * L, (s + 1) * L)
        ma, ea, za, va = (x[mi, ks] for x in ta())
        mb, eb, zb, vb = (x[ni, ks] for x in tb())
        e = ea + eb
        new = fused([(ma * mb, e - 2 * carrier.man_bits, e, za | zb)], f32_terms(acc), model)
        return _special(new, va, vb, acc)

    return step


__all__ = ["Side", "group_side", "group_step", "group_w", "operand_side", "operand_step", "product_side",
           "product_step", "rounded_operand"]
