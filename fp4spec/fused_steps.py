"""One fused dot-product-add step of a tensor core, in exact rational arithmetic.

The primitives of the GEMM accumulator models (MMA-Sim's, arXiv 2511.10909), shared by the
scalar GEMM reference (:mod:`fp4spec.gemm_reference`) and the tensor-core RHT arithmetic
(:mod:`fp4spec.rht`, step M4): a value split into significand and exponent, the truncated
fused sum, one exact rounding to a binary format, and NVIDIA's fused step with its
special-value check. Every value is a :class:`fractions.Fraction` or a Python float.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable, Sequence

from .accumulator_models import FP32, AccumulatorModel, Carrier
from .elements import floor_log2

TWO = Fraction(2)
NAN = math.nan


def sig_exp(v: Fraction, emin: int, e_zero: int | None) -> tuple[Fraction, int | None]:
    """A value as (significand, exponent) in a carrier whose smallest normal exponent is ``emin``.

    1. If v is 0, return (0, e_zero) (``e_zero`` None: the zero never sets a largest exponent).
    2. e = max(floor(log2 |v|), emin) (subnormals are normalized at emin).
    3. Return (v / 2^e, e): |significand| is in [1, 2), or below 1 for a subnormal.
    """
    if v == 0:
        return Fraction(0), e_zero
    e = max(floor_log2(abs(v)), emin)
    return v / TWO ** e, e


def _trunc(x: Fraction) -> int:
    return math.trunc(x)


def fused_sum(terms: Iterable[tuple[Fraction, int | None]], frac_bits: int,
              rounding: str = "rz") -> tuple[Fraction, int | None]:
    """MMA-Sim's fused sum of terms ``(s_t, e_t)`` (value ``s_t * 2^e_t``) with F fractional bits.

    1. e_max = the largest exponent among the terms (terms with exponent None are zeros that
       never set it; if every term has None, return (0, None)).
    2. Align every term to e_max and round it to F fractional bits:
       ``s_t' = R(s_t * 2^(F + e_t - e_max)) * 2^-F``, R = truncation toward zero
       (``rounding="rz"``) or floor (``"floor"``, AMD's re-alignment).
    3. Sum the aligned terms exactly.
    4. Return (sum, e_max); the caller rounds ``sum * 2^e_max`` to the output format.
    """
    if rounding not in ("rz", "floor"):
        raise ValueError(f"rounding: {rounding!r} is not one of 'rz', 'floor'")
    terms = list(terms)
    exps = [e for _, e in terms if e is not None]
    if not exps:
        return Fraction(0), None
    e_max = max(exps)
    r = _trunc if rounding == "rz" else math.floor
    total = Fraction(0)
    for s, e in terms:
        if e is None or s == 0:
            continue
        total += Fraction(r(s * TWO ** (frac_bits + e - e_max)), 1 << frac_bits)
    return total, e_max


def round_binary(x: Fraction, man_bits: int, emin: int, emax: int, mode: str) -> float:
    """x rounded once to a binary format with ``man_bits`` fraction bits, subnormals at
    ``emin`` and largest exponent ``emax``, as a Python float.

    1. If x is 0, return +0.0.
    2. e = max(floor(log2 |x|), emin); q = |x| / 2^(e - man_bits); i = floor(q).
    3. ``"rne"``: i += 1 if q - i > 1/2, or q - i == 1/2 and i is odd. ``"rz"``: keep i.
    4. v = i * 2^(e - man_bits); if v >= 2^(emax + 1) the result is Inf (in both modes,
       as MMA-Sim's RZ output conversion does).
    5. Apply the sign of x (a negative x whose magnitude rounds to 0 gives -0.0).
    """
    if x == 0:
        return 0.0
    if mode not in ("rne", "rz"):
        raise ValueError(f"mode: {mode!r} is not one of 'rne', 'rz'")
    a = abs(x)
    e = max(floor_log2(a), emin)
    q = a / TWO ** (e - man_bits)
    i = math.floor(q)
    if mode == "rne":
        r = q - i
        if r > Fraction(1, 2) or (r == Fraction(1, 2) and i % 2 == 1):
            i += 1
    v = Fraction(i) * TWO ** (e - man_bits)
    out = math.inf if v >= TWO ** (emax + 1) else float(v)
    return -out if x < 0 else out


def round_f32(x: Fraction, mode: str = "rne") -> float:
    """:func:`round_binary` to float32 (23 fraction bits, emin -126, emax 127)."""
    return round_binary(x, 23, -126, 127, mode)


def round_bf16(x: Fraction, mode: str = "rne") -> float:
    """:func:`round_binary` to bfloat16 (7 fraction bits, emin -126, emax 127)."""
    return round_binary(x, 7, -126, 127, mode)


def _c_term(c: float, e_zero: int | None) -> tuple[Fraction, int | None]:
    return sig_exp(Fraction(c), FP32.emin, e_zero)


def terms_operand(a_ops: Sequence[float], b_ops: Sequence[float], model: AccumulatorModel, carrier: Carrier):
    """``"*_operand"`` terms: per K element (sig(a') sig(b'), e(a') + e(b')) of the rounded
    operands; a zero product is (0, e_zero)."""
    terms = []
    for x, y in zip(a_ops, b_ops):
        (sx, ex), (sy, ey) = sig_exp(Fraction(x), carrier.emin, None), sig_exp(Fraction(y), carrier.emin, None)
        terms.append((Fraction(0), model.e_zero) if ex is None or ey is None else (sx * sy, ex + ey))
    return terms


def step_zero(x: float, model: AccumulatorModel) -> float:
    """The sign of a fused step's zero result (``model.zero_sign``): ``"positive"`` makes
    every zero +0.0; ``"signed"`` keeps the sign the rounding gave (-0.0 for a negative sum
    that rounds to zero)."""
    return 0.0 if x == 0 and model.zero_sign == "positive" else x


def fdpa_step(terms: list, c: float, model: AccumulatorModel) -> float:
    """One NVIDIA fused step (T-/ST-/GST-FDPA) on finite inputs.

    1. The accumulator term: (s_c, e_c) = :func:`sig_exp` (c, -126, e_zero).
    2. (S, e_max) = :func:`fused_sum` (terms + [c term], F, truncation).
    3. Return S * 2^e_max rounded to float32 (``final_rounding``; an exact 0 is +0; a
       nonzero S that rounds to 0 gives a zero with the sign of S).
    4. ``zero_sign="positive"``: a zero result is +0.0 (:func:`step_zero`).
    """
    s, e = fused_sum(terms + [_c_term(c, model.e_zero)], model.frac_bits, "rz")
    if e is None or s == 0:
        return 0.0
    return step_zero(round_f32(s * TWO ** e, model.final_rounding), model)


def fp64_special(pairs: Iterable[tuple[float, float]], c: float) -> float | None:
    """MMA-Sim's special-value check: the float64 sum of the products and c if it is NaN or
    +-Inf, else None. (Products of carried values cannot overflow float64, so the sum is
    NaN exactly when a product or c is NaN or Infs of both signs meet, and +-Inf exactly
    when some product or c is an Inf of that sign.)"""
    vals = [x * y for x, y in pairs] + [c]
    if any(math.isnan(v) for v in vals):
        return NAN
    signs = {math.copysign(1.0, v) for v in vals if math.isinf(v)}
    if len(signs) == 2:
        return NAN
    if signs:
        return math.copysign(math.inf, signs.pop())
    return None


__all__ = ["fdpa_step", "fp64_special", "fused_sum", "round_binary", "round_bf16", "round_f32", "sig_exp",
           "step_zero", "terms_operand"]
