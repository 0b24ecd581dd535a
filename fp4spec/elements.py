"""The normative scalar conversion: one value to one code, in exact rational arithmetic.

Slow and obviously correct; :mod:`fp4spec.emulator` is the fast version and is tested equal
to this on every code of every format, on every bfloat16 value and on generated inputs.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction
from functools import lru_cache

from .number_formats import FloatFormat, Format, IntFormat, get_format
from .rounding import (
    DEFAULT_SR_BITS,
    NAN_POLICIES,
    NEG_ZERO_POLICIES,
    OVERFLOW_POLICIES,
    UNDERFLOW_POLICIES,
    check_choice,
    check_rounding,
    choose_neighbour,
    rounds_toward_zero,
)


def floor_log2(v: Fraction) -> int:
    """Exact floor(log2(v)) of a positive rational."""
    e = v.numerator.bit_length() - v.denominator.bit_length()
    return e if Fraction(2) ** e <= v else e - 1


def significand_is_even(fmt: Format, v: Fraction) -> bool:
    """Parity of the integral significand of ``|v|`` (see :mod:`fp4spec.rounding`)."""
    v = abs(v)
    if v == 0:
        return True
    if fmt.kind == "int":
        return v.numerator % 2 == 0
    if fmt.kind == "uniform":
        return (v / Fraction(fmt.step)).numerator % 2 == 0
    e = floor_log2(v)
    if fmt.subnormals:
        e = max(e, fmt.emin)
    significand = v / Fraction(2) ** (e - fmt.mantissa_bits)
    return significand.numerator % 2 == 0


@lru_cache(maxsize=None)
def magnitude_grid(fmt: Format, negative: bool) -> tuple[Fraction, ...]:
    """Representable magnitudes for one sign, ascending, extended by one point at each open end.

    The extension points are where the values would continue if the exponent range (or the
    integer range) were unbounded: above the largest magnitude ``g_max`` comes ``g_max + u``
    with ``u`` the spacing at ``g_max``; below the smallest magnitude of a format without
    zero (E8M0, E6M2) comes the largest value of the next lower binade. A value rounded onto
    an extension point is out of range.
    """
    if negative and not fmt.signed:
        return ()
    mags = sorted({-v if negative else v for v, _ in fmt.grid if (v <= 0 if negative else v >= 0)})
    top = mags[-1]
    if isinstance(fmt, FloatFormat):
        spacing = Fraction(2) ** (floor_log2(top) - fmt.mantissa_bits)
    elif isinstance(fmt, IntFormat):
        spacing = Fraction(1)
    else:
        spacing = Fraction(fmt.step)
    mags.append(top + spacing)
    if mags[0] > 0:  # no zero: extend below with the predecessor of the smallest value
        low = mags[0]
        mags.insert(0, low - Fraction(2) ** (floor_log2(low) - 1 - fmt.mantissa_bits))
    return tuple(mags)


@lru_cache(maxsize=None)
def _codes_by_value(fmt: Format) -> dict[Fraction, int]:
    return dict(fmt.grid)


def _code_of(fmt: Format, value: Fraction) -> int:
    return _codes_by_value(fmt)[value]


@lru_cache(maxsize=None)
def negative_zero_code(fmt: Format) -> int:
    return next(c for c in range(1 << fmt.bits) if fmt._decode_exact(c)[0] == "negzero")


def canonical_nan_code(fmt: Format, negative: bool) -> int:
    """The NaN code an encoder produces: the quiet NaN with the input's sign where it exists."""
    codes = fmt.nan_codes
    if not codes:
        raise ValueError(f"format {fmt.name!r} has no NaN code")
    sign_bit = 1 << (fmt.bits - 1)
    same_sign = [c for c in codes if bool(c & sign_bit) == negative] if fmt.signed else list(codes)
    pool = same_sign or list(codes)
    quiet = [c for c in pool if fmt.mantissa_bits and (c >> (fmt.mantissa_bits - 1)) & 1]
    return min(quiet) if quiet else max(pool)


def inf_code(fmt: Format, negative: bool) -> int:
    for c in fmt.inf_codes:
        if (fmt.values[c] < 0) == negative:
            return c
    raise ValueError(f"format {fmt.name!r} has no {'-' if negative else '+'}Inf code")


def check_policies(fmt: Format, overflow: str, nan: str, neg_zero: str) -> str:
    """Validate the policy arguments for ``fmt``; return the effective NaN policy."""
    check_choice("overflow", overflow, OVERFLOW_POLICIES)
    check_choice("nan", nan, NAN_POLICIES)
    check_choice("neg_zero", neg_zero, NEG_ZERO_POLICIES)
    if overflow == "inf" and not fmt.has_inf:
        raise ValueError(f"overflow: 'inf' needs a format with Inf and {fmt.name!r} has none; "
                         f"use one of 'saturate', 'error'{', ' + repr('nan') if fmt.has_nan else ''}")
    if overflow == "nan" and not fmt.has_nan:
        raise ValueError(f"overflow: 'nan' needs a format with NaN and {fmt.name!r} has none; "
                         f"use one of 'saturate', 'error'")
    if nan == "auto":
        nan = "nan" if fmt.has_nan else "error"
    if nan == "nan" and not fmt.has_nan:
        raise ValueError(f"nan: 'nan' needs a format with NaN and {fmt.name!r} has none; "
                         f"use one of 'error', 'max', 'zero', 'signed_zero'")
    if nan in ("zero", "signed_zero") and not fmt.has_zero:
        raise ValueError(f"nan: {nan!r} needs a format with zero and {fmt.name!r} has none")
    return nan


def nan_error(fmt: Format) -> ValueError:
    return ValueError(
        f"nan: NaN input cannot be encoded in {fmt.name!r}, which has no NaN; pass nan='max' "
        f"(+max, as CUDA satfinite), nan='zero' (+0) or nan='signed_zero' (ml_dtypes: the zero "
        f"of the opposite sign)")


def overflow_error(fmt: Format, x) -> OverflowError:
    return OverflowError(
        f"overflow: {x!r} is outside the finite range [{fmt.min:g}, {fmt.max:g}] of {fmt.name!r}; "
        f"pass overflow='saturate' to clamp")


def nan_input_code(fmt: Format, policy: str, negative: bool) -> int:
    """Step 2 of :func:`encode_scalar`: the code of a NaN input under a resolved NaN policy."""
    if policy == "nan":
        return canonical_nan_code(fmt, negative)
    if policy == "max":
        return fmt.max_code
    if policy == "zero":
        return _code_of(fmt, Fraction(0))
    if policy == "signed_zero":
        # ml_dtypes: the quiet NaN of a NaN-less format is its -0 code, negated for -NaN.
        if fmt.has_negative_zero and not negative:
            return negative_zero_code(fmt)
        return _code_of(fmt, Fraction(0))
    raise nan_error(fmt)


def out_of_range_code(fmt: Format, x, negative: bool, high: bool, mode: str, overflow: str,
                       infinite: bool = False) -> int:
    """Step 7 of :func:`encode_scalar` (``infinite``: x is +-Inf, which is not rounded)."""
    if overflow == "error":
        raise overflow_error(fmt, x)
    if high:
        mag = magnitude_grid(fmt, negative)[-2]
        end = -mag if negative else mag
    elif negative and not fmt.signed:
        end = fmt.grid[0][0]  # the smallest value of an unsigned format
    else:  # below the smallest magnitude of a format without zero
        mag = magnitude_grid(fmt, negative)[1]
        end = -mag if negative else mag
    if overflow == "saturate" or (high and not infinite and rounds_toward_zero(mode, negative)):
        return _code_of(fmt, end)
    if overflow == "inf":
        return inf_code(fmt, negative) if high else _code_of(fmt, end)
    return canonical_nan_code(fmt, negative)


def encode_scalar(x, fmt: "str | Format", rounding: str = "rne", *, r: int | None = None,
                  sr_bits: int = DEFAULT_SR_BITS, overflow: str = "saturate", nan: str = "auto",
                  neg_zero: str = "preserve", underflow: str = "overflow") -> int:
    """Encode one real value into one code of ``fmt`` (the normative algorithm).

    ``x`` is any Python/numpy float (or a Fraction); it is read exactly, never through a
    narrower type. ``r`` is the random integer for ``rounding="sr"``.

    1. Read ``x`` exactly as a rational. Let ``negative`` be its sign bit (so -0.0 is negative)
       and ``a = |x|``.
    2. NaN: apply the ``nan`` policy -- ``"nan"``: the format's quiet NaN with x's sign;
       ``"max"``: the code of +max; ``"zero"``: +0; ``"signed_zero"``: the zero of the opposite
       sign (ml_dtypes); ``"error"``: raise. (``"auto"``: ``"nan"`` if the format has NaN, else
       ``"error"``.)
    3. A negative non-zero ``x`` in an unsigned format is out of range below (step 7).
    4. An infinite ``x`` is not rounded: it is out of range above, whatever the rounding mode
       (step 7, the directed-mode exception does not apply). Otherwise take the magnitudes
       representable with x's sign, extended by one point beyond each open end
       (:func:`magnitude_grid`). If ``a`` lies at or beyond an extension point, it is out of
       range (step 7).
    5. Otherwise find adjacent magnitudes ``lo <= a <= hi`` and round with
       :func:`fp4spec.rounding.choose_neighbour`. A result on an extension point is out of
       range (step 7).
    6. The code is that of ``-result`` if ``negative`` else ``result``; a zero result with
       ``negative`` gives the negative-zero code if the format has one and
       ``neg_zero="preserve"``, else +0.
    7. Out of range, by the ``overflow`` policy: ``"saturate"`` gives the nearest finite end
       of the range (+-max; the smallest value at the low end of an unsigned or zero-less
       format); ``"inf"`` gives +-Inf and ``"nan"`` the quiet NaN, except that a *finite* x
       rounded by a mode rounding toward zero on that side (``rtz``, ``rto``, ``rup`` for
       negatives, ``rdn`` for positives) gives +-max, as IEEE 754 does (an infinite x is exact,
       so +-Inf stays +-Inf, or becomes the NaN, in every mode); ``"error"`` raises
       OverflowError. With ``underflow="saturate"`` a non-zero ``x`` below the smallest
       magnitude of a format without zero gives the smallest value whatever ``overflow`` says
       (zero, and negative values in an unsigned format, still follow ``overflow``).
    """
    fmt = get_format(fmt)
    mode = check_rounding(rounding)
    nan_policy = check_policies(fmt, overflow, nan, neg_zero)
    check_choice("underflow", underflow, UNDERFLOW_POLICIES)
    if mode == "sr":
        if r is None or not 0 <= int(r) < (1 << sr_bits):
            raise ValueError(f"rbits: random integer {r!r} is not in [0, 2**{sr_bits})")
        r = int(r)
    # Step 1
    if isinstance(x, Fraction):
        negative, value = x < 0, x
    else:
        xf = float(x)
        if math.isnan(xf):
            return nan_input_code(fmt, nan_policy, math.copysign(1.0, xf) < 0)  # step 2
        negative = math.copysign(1.0, xf) < 0
        value = None if math.isinf(xf) else Fraction(xf)
    a = None if value is None else abs(value)
    # Step 3
    if negative and not fmt.signed and (a is None or a != 0):
        return out_of_range_code(fmt, x, negative, high=False, mode=mode, overflow=overflow)
    grid = magnitude_grid(fmt, negative and fmt.signed)
    # Step 4
    if a is None:
        return out_of_range_code(fmt, x, negative, high=True, mode=mode, overflow=overflow, infinite=True)
    if a >= grid[-1]:
        return out_of_range_code(fmt, x, negative, high=True, mode=mode, overflow=overflow)
    has_low_ext = grid[0] > 0
    low_policy = "saturate" if underflow == "saturate" and a != 0 else overflow  # step 7
    if has_low_ext and a <= grid[0]:
        return out_of_range_code(fmt, x, negative, high=False, mode=mode, overflow=low_policy)
    # Step 5
    i = bisect.bisect_right(grid, a) - 1
    lo, hi = grid[i], grid[min(i + 1, len(grid) - 1)]
    result = choose_neighbour(a, lo, hi, significand_is_even(fmt, lo), significand_is_even(fmt, hi),
                              mode, negative=negative, r=r, sr_bits=sr_bits)
    if result == grid[-1]:
        return out_of_range_code(fmt, x, negative, high=True, mode=mode, overflow=overflow)
    if has_low_ext and result == grid[0]:
        return out_of_range_code(fmt, x, negative, high=False, mode=mode, overflow=low_policy)
    # Step 6
    if result == 0:
        if negative and fmt.has_negative_zero and neg_zero == "preserve":
            return negative_zero_code(fmt)
        return _code_of(fmt, Fraction(0))
    return _code_of(fmt, -result if negative else result)


def decode_scalar(code: int, fmt: "str | Format") -> float:
    """The value of one code as a float (exact for every catalogued format)."""
    fmt = get_format(fmt)
    return float(fmt.values[fmt.check_code(code)])
