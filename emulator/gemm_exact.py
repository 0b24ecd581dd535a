"""The ``exact`` accumulator model: one float64 BLAS product wherever it is provably exact.

:func:`matmul_exact` computes :func:`fp4spec.gemm_reference.dot_exact` for every output:
the exact sum ``c + sum_k (a_k sa_k)(b_k sb_k)``, times g, rounded once to float32.

Fast path (facts E1-E4 of :mod:`.gemm_float`):

1. A' = a * sa and B' = b * sb in float64 (exact, E1: elements and scales have at most 8
   significant bits each; NaN scales give 0 here and NaN at step 5).
2. Per row of A': lo_A = the smallest lsb of its nonzero values and h_A with every |A'| <
   2^h_A (from the elements' and scales' exponents: |a| < 2^(e(a) + 1), sa < 2^(e(sa) + 1));
   the same for B'; for c: lsb(c) (none for 0 and non-finite c).
3. Output (m, n) is *provable* when, with lo = min(lo_A + lo_B, lsb(c)) >= -1074, an upper
   bound U of ``|c| + sum_k |A'_k B'_k|`` lies below 2^(lo + 53): U = K 2^(h_A + h_B) + |c|,
   or by Cauchy-Schwarz U = sqrt(sum A'^2 sum B'^2) + |c| (E3's margin), each tried for the
   worst row and column at once before per output. Every term ``A'_k B'_k`` and c is then an
   integer multiple of 2^lo and their magnitudes sum to less than 2^(lo + 53), so S = c +
   A' B'^T from BLAS is exact (E2).
4. Round once: no g: the cast of S (E4); a finite g: :func:`round_product_f32` (S g,
   exact by a Veltkamp split and TwoSum, one rounding). An exact zero is +0.
5. Specials: NaN for a NaN scale anywhere in the row or column, a NaN c or g; an infinite c
   gives fp32(c * g); an infinite g gives NaN for a zero sum, else +-Inf.

Outputs that are not provable (scales or elements spread over more than about 53 - log2 K
bits in one row and column: E5M2 with its whole range, or scales 2^-127 next to 2^127) run
the integer algorithm, row by row on the columns that need it (:func:`exact_integer`):
per segment of constant scales an integer dot product of the element integers (int64 when
``max|a| max|b| segment < 2^62``, else Python integers), times the scale significands, the
segments summed exactly at their exponents (int64 when the exponent range plus the
significand bits fit 62 bits, else Python integers, still vectorized over the row), one
rounding.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel
from fp4spec.matmul_operands import MatmulOperands

from .gemm_core import (
    SENT,
    Operand,
    bits,
    canonical,
    epilogue,
    f32_terms,
    initial,
    quantum_exponent,
    round_int_to_f32,
    scale_terms,
)
from .gemm_float import MARGIN, cauchy_bound, magnitude_bound, pow2, round_product_f32, square_sums
from .gemm_stats import POS, element_stats, exp_lsb, scale_stats, scaled_values

_I64 = np.int64


# =====================================================================================
# Fast path
# =====================================================================================

def _scaled(op: Operand):
    """(A' (R, K) float64 with 0 for NaN-scale blocks, rows with a NaN scale, per row: lo =
    the smallest lsb of its nonzero values, h with every |A'| < 2^h)."""
    nan = np.isnan(op.scales)
    vals = scaled_values(op)
    if nan.any():
        vals = np.where(np.isnan(vals), 0.0, vals)
    hi, lo = element_stats(op, op.block)
    se, sl = scale_stats(op)
    se = np.where(nan, _I64(SENT), se)
    h = (hi + se + 2).max(axis=1, initial=SENT)      # |a| < 2^(hi + 1), sa < 2^(se + 1)
    return vals, nan.any(axis=1), (lo + sl).min(axis=1, initial=POS), h


def _specials(out, total, c, g, nan_rows, nan_cols):
    """Step 5 on a float32 result ``out`` whose exact (or sign-correct) sums are ``total``."""
    with np.errstate(all="ignore"):
        if g is not None and np.isinf(g):
            out = np.where((total > 0) == (g > 0), np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
            out = np.where(total == 0, np.float32(np.nan), out)
        out = np.where(np.isinf(c), epilogue(c, g), out)
        nan = nan_rows[:, None] | nan_cols[None, :] | np.isnan(c)
        if g is not None and np.isnan(g):
            nan = np.ones_like(nan)
        return np.where(nan, np.float32(np.nan), out).astype(np.float32)


def matmul_exact(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``exact``: the fast path of the module docstring, the integer algorithm where it cannot
    prove an output."""
    va, nan_a, lo_a, h_a = _scaled(a)
    vb, nan_b, lo_b, h_b = _scaled(b)
    total = va @ vb.T
    c = initial(ops)
    if ops.c is None:
        c_abs, lsb_c = 0.0, POS
    else:
        c64 = c.astype(np.float64)
        fin = np.isfinite(c64)
        c_abs = np.where(fin, np.abs(c64), 0.0)
        lsb_c = exp_lsb(c64)[1]                       # POS for 0 and non-finite c
        total += np.where(fin, c64, 0.0)
    provable = _provable(va, vb, h_a, h_b, lo_a, lo_b, c_abs, lsb_c)
    g = ops.g
    if g is None or not np.isfinite(g):
        with np.errstate(over="ignore"):
            out = (total + 0.0).astype(np.float32)
    else:
        out = round_product_f32(total, g)
    if nan_a.any() or nan_b.any() or ops.c is not None or (g is not None and not np.isfinite(g)):
        out = _specials(out, total, c, g, nan_a, nan_b)
    if provable is not True and not provable.all():
        for i in np.flatnonzero(~provable.all(axis=1)):       # the integer algorithm, row by row
            cols = np.flatnonzero(~provable[i])
            out[i, cols] = exact_integer(_rows(a, [i]), _rows(b, cols), c[i:i + 1, cols], g)[0]
    return canonical(out, model)


def _provable(va, vb, h_a, h_b, lo_a, lo_b, c_abs, lsb_c):
    """Step 3: True when every output is provable, else a boolean (M, N) array. The bound on
    sum |A'_k B'_k| is first K 2^(h_A + h_B) for the worst row and column, then Cauchy-
    Schwarz, sqrt(sum A'^2 sum B'^2), for the worst row and column and then per output
    (:func:`~.gemm_float.cauchy_bound`'s margin)."""
    k = va.shape[1]
    lo0 = min(int(lo_a.min(initial=POS)) + int(lo_b.min(initial=POS)), int(np.min(lsb_c)))
    limit = float(pow2(np.int64(lo0 + 53)))
    c_max = float(np.max(c_abs))
    if lo0 >= -1074 and magnitude_bound(h_a, h_b, k, c_max) < limit:
        return True
    sq_a, sq_b = square_sums(va, k)[:, 0], square_sums(vb, k)[:, 0]
    if lo0 >= -1074 and cauchy_bound(sq_a, sq_b, c_max) < limit:
        return True
    lo = np.minimum(lo_a[:, None] + lo_b[None, :], lsb_c)
    return (np.sqrt(sq_a[:, None] * sq_b[None, :]) * MARGIN + c_abs < pow2(lo + 53)) & (lo >= -1074)


def _rows(op: Operand, idx) -> Operand:
    return Operand(op.values[idx], op.scales[idx], op.block, op.element, op.scale_format)


# =====================================================================================
# Integer algorithm
# =====================================================================================

def segment_dots(ia: np.ndarray, ib: np.ndarray, seg: int) -> list:
    """Exact per-segment dot products of integer element arrays (int64 when provable)."""
    ma = int(np.max(np.abs(ia), initial=0))
    mb = int(np.max(np.abs(ib), initial=0))
    exact64 = bits(ma) + bits(mb) + bits(seg) <= 62
    out = []
    for k0 in range(0, ia.shape[1], seg):
        x, y = ia[:, k0:k0 + seg], ib[:, k0:k0 + seg]
        if exact64:
            out.append(x @ y.T)
        else:
            out.append(x.astype(object) @ y.T.astype(object))
    return out


def _round_object(s: np.ndarray, exp: int, mode: str = "rne") -> np.ndarray:
    """:func:`round_int_to_f32` for Python-integer object arrays (one scalar call per entry)."""
    from fp4spec.fused_steps import round_binary

    f = np.frompyfunc(lambda v: round_binary(Fraction(int(v)) * Fraction(2) ** exp, 23, -126, 127, mode), 1, 1)
    return np.asarray(f(s), np.float64).astype(np.float32)


def _exact_sum(terms, shape) -> tuple[np.ndarray, int]:
    """sum of N * 2^x over terms (N int64 or Python-integer object arrays, x int64), exactly,
    as (S, xmin) with the sum S * 2^xmin: int64 when every nonzero N fits together with the
    exponent range in 62 bits, else Python integers."""
    masks = [np.asarray(n != 0, bool) for n, _ in terms]
    xs = [x[m] for (_, x), m in zip(terms, masks) if m.any()]
    if not xs:
        return np.zeros(shape, _I64), 0
    xmin = min(int(v.min()) for v in xs)
    xmax = max(int(v.max()) for v in xs)
    nbits = max(bits(int(np.max(np.abs(n), initial=0))) for n, _ in terms)
    fits = all(n.dtype != object for n, _ in terms) and nbits + (xmax - xmin) + bits(len(terms)) <= 62
    total = np.zeros(shape, _I64 if fits else object)
    for (n, x), m in zip(terms, masks):
        sh = np.where(m, x - xmin, 0)
        if fits:
            total = total + (n << sh)
        else:
            total = total + np.left_shift(n.astype(object), sh.astype(object))
    return total, xmin


def exact_integer(a: Operand, b: Operand, c: np.ndarray, g) -> np.ndarray:
    """:func:`fp4spec.gemm_reference.dot_exact` on the whole tile in integer arithmetic
    (float32 result before NaN canonicalization).

    1. Segments where both block scales are constant (gcd of the block sizes); per segment
       the exact integer dot product of the element integers (``values * 2^q``).
    2. Each segment times both scale significands, at exponent ``xa + xb - qa - qb``.
    3. c as ``M_c * 2^(e_c - 23)``; all terms summed exactly at the smallest exponent (int64
       when it fits 62 bits, else Python integers).
    4. Times g's integer significand; one rounding to float32 (nearest even).
    5. Specials as in the module docstring.
    """
    qa, qb = quantum_exponent(a.values), quantum_exponent(b.values)
    ia = np.ldexp(a.values, qa).astype(_I64)
    ib = np.ldexp(b.values, qb).astype(_I64)
    sma, sea, _, nana, dsa = scale_terms(a)
    smb, seb, _, nanb, dsb = scale_terms(b)
    seg = math.gcd(a.block, b.block)
    terms = []     # (N, x): value N * 2^x, N int64 or object (M, N)
    for s, d in enumerate(segment_dots(ia, ib, seg)):
        ba, bb = (s * seg) // a.block, (s * seg) // b.block
        n = d * sma[:, ba, None] * smb[None, :, bb]
        x = (sea[:, ba, None] - dsa) + (seb[None, :, bb] - dsb) - qa - qb
        terms.append((n, x))
    mc, ec, _ = f32_terms(c)
    terms.append((mc, ec - 23))
    total, exp = _exact_sum(terms, c.shape)
    if g is not None and np.isfinite(g):
        mg, eg, _ = f32_terms(np.array([g], np.float32))
        mg, eg = int(mg[0]), int(eg[0]) - 23
        if total.dtype != object and bits(int(np.max(np.abs(total), initial=0))) + bits(abs(mg)) <= 62:
            total = total * _I64(mg)
        else:
            total = total.astype(object) * mg
        exp += eg
    out = round_int_to_f32(total, exp, "rne") if total.dtype != object else _round_object(total, exp)
    sign = np.where(total > 0, 1.0, np.where(total < 0, -1.0, 0.0)).astype(np.float64)
    return _specials(out, sign, c, g, nana.any(axis=1), nanb.any(axis=1))


__all__ = ["exact_integer", "matmul_exact", "segment_dots"]
