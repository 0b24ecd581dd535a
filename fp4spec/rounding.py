"""Rounding modes and conversion policies: names, validation and the exact decision rule.

Rounding (which of two neighbours a value goes to) is kept apart from encoding (which code a
value gets): :func:`choose_neighbour` is the whole of rounding, stated on exact rationals.

Modes (the P3109 draft names in brackets):

* ``rne`` -- to nearest, ties to the neighbour with the even significand (NearestTiesToEven).
* ``rna`` -- to nearest, ties away from zero (NearestTiesToAway).
* ``rtz`` -- toward zero (TowardZero).
* ``rup`` -- toward +infinity (TowardPositive).
* ``rdn`` -- toward -infinity (TowardNegative).
* ``rto`` -- round to odd: exact values are kept, others go to the neighbour with the odd
  significand (ToOdd).
* ``sr``  -- stochastic rounding with explicit random bits (StochasticA with N = ``sr_bits``).

"Even" is the parity of the integral significand: for a float value ``v`` in binade ``e``
(``e`` clipped below at ``emin`` where there are subnormals) it is ``|v| / 2^(e - m)``; for
integers the value itself; for uniform grids the magnitude index. Zero is even. Formats with
no mantissa bits (E8M0) have odd significands everywhere, so a tie between two odd
neighbours goes to the larger magnitude (the kept bit is the implicit 1; ml_dtypes does the
same: 1.5 -> 2), and ``rto`` between two odd neighbours is round-toward-zero.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

ROUNDING_MODES = ("rne", "rna", "rtz", "rup", "rdn", "rto", "sr")

#: ``overflow=``: what a value beyond the finite range becomes (both ends of the range).
OVERFLOW_POLICIES = ("saturate", "nan", "inf", "error")
#: ``nan=``: what a NaN input becomes. ``"nan"`` needs a format with NaN; ``"auto"`` is
#: ``"nan"`` where the format has NaN and ``"error"`` where it has none.
NAN_POLICIES = ("auto", "nan", "error", "max", "zero", "signed_zero")
#: ``underflow=``: what a positive (non-zero) value below the smallest magnitude of a format
#: without zero (E8M0, E6M2) becomes: ``"overflow"`` -- what the ``overflow`` policy gives at
#: that end; ``"saturate"`` -- the smallest value, whatever ``overflow`` says (ml_dtypes 0.7's
#: E8M0 cast: tiny x -> 0x00, while 0 and overflows -> NaN). Zero and negative values in an
#: unsigned format always follow ``overflow``.
UNDERFLOW_POLICIES = ("overflow", "saturate")
#: ``neg_zero=``: what -0.0 and negative values that round to zero become.
NEG_ZERO_POLICIES = ("preserve", "flush")

DEFAULT_SR_BITS = 8


def check_choice(argument: str, value, allowed) -> str:
    """Raise a ValueError naming ``argument`` and the allowed values unless ``value`` is one."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{argument}: {value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def check_rounding(mode) -> str:
    return check_choice("rounding", mode, ROUNDING_MODES)


def choose_neighbour(a: Fraction, lo: Fraction, hi: Fraction, lo_even: bool, hi_even: bool,
                     mode: str, *, negative: bool = False, r: int | None = None,
                     sr_bits: int = DEFAULT_SR_BITS) -> Fraction:
    """Round the magnitude ``a`` to ``lo`` or ``hi`` (``0 <= lo <= a <= hi``, adjacent).

    ``negative`` is the sign of the value being rounded (directed modes depend on it);
    ``r`` is the random integer for ``sr``, in ``[0, 2^sr_bits)``.

    1. If ``a == lo`` (or ``a == hi``) the value is exact: return it.
    2. ``rtz`` returns ``lo``. ``rup`` returns ``hi`` for positive values, ``lo`` for negative;
       ``rdn`` the reverse.
    3. ``rne``/``rna``: compare ``a`` with the midpoint ``(lo + hi) / 2``; below returns ``lo``,
       above returns ``hi``. At the midpoint ``rna`` returns ``hi``; ``rne`` returns the even
       neighbour, or ``hi`` if neither (or both) is even.
    4. ``rto`` returns the odd neighbour, or ``lo`` if neither (or both) is odd.
    5. ``sr``: with ``frac = (a - lo) / (hi - lo)`` in ``(0, 1)``, return ``hi`` iff
       ``frac * 2^sr_bits + r >= 2^sr_bits``. So ``r = 0`` rounds toward zero, and over
       uniform ``r`` the probability of ``hi`` is ``floor(frac * 2^sr_bits) / 2^sr_bits``.
    """
    if a == lo:
        return lo
    if a == hi:
        return hi
    if mode == "rtz":
        return lo
    if mode == "rup":
        return lo if negative else hi
    if mode == "rdn":
        return hi if negative else lo
    if mode in ("rne", "rna"):
        mid = (lo + hi) / 2
        if a < mid:
            return lo
        if a > mid:
            return hi
        if mode == "rna" or lo_even == hi_even:
            return hi
        return lo if lo_even else hi
    if mode == "rto":
        if lo_even == hi_even:
            return lo
        return hi if lo_even else lo
    if mode == "sr":
        if r is None:
            raise ValueError("rbits: stochastic rounding needs a random integer per element")
        scale = 1 << sr_bits
        frac = (a - lo) / (hi - lo)
        return hi if frac * scale + r >= scale else lo
    raise ValueError(f"rounding: {mode!r} is not one of {', '.join(map(repr, ROUNDING_MODES))}")


def rounds_toward_zero(mode: str, negative: bool) -> bool:
    """True for the modes that, on this side of zero, never increase the magnitude."""
    return mode in ("rtz", "rto") or (mode == "rup" and negative) or (mode == "rdn" and not negative)


def check_rbits(rbits, shape, sr_bits: int) -> np.ndarray:
    """Validate random bits for ``sr``: integers in [0, 2^sr_bits) broadcastable to ``shape``."""
    if not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")
    if rbits is None:
        raise ValueError("rbits: rounding='sr' needs explicit random bits (an integer array in "
                         f"[0, 2**{sr_bits}) broadcastable to x), or seed= to draw them")
    arr = np.asarray(rbits)
    if arr.dtype.kind not in "ui":
        raise ValueError(f"rbits: dtype {arr.dtype} is not an integer dtype")
    if arr.size and (arr.min() < 0 or arr.max() >= (1 << int(sr_bits))):
        raise ValueError(f"rbits: values must be in [0, 2**{sr_bits}) = [0, {(1 << int(sr_bits)) - 1}], "
                         f"got [{arr.min()}, {arr.max()}]")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(f"rbits: shape {arr.shape} does not broadcast to x's shape {shape}") from None


