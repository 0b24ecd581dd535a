"""HiF4 (HiFloat4) block quantization: the normative scalar algorithm for one group of 64 values.

HiF4 (Huawei, arXiv 2602.11287) stores 64 values as 64 S1P2 elements (sign + 3-bit
magnitude index, value ``m`` in {0, 0.25, ..., 1.75}) plus 32 bits of shared metadata: one
E6M2 scale (8 bits), one micro-exponent bit per 8 elements (``E1_8``, 8 bits) and one per 4
elements (``E1_16``, 16 bits) -- 4.5 bits per value. The decoded value of element ``i`` in
level-3 group ``j = i // 4`` is::

    (-1)^sign * E6M2 * 2^(E1_8[j // 2] + E1_16[j]) * m

This module is the normative algorithm, stated on exact rationals: the golden NumPy model
``To_HiFX`` (N = 4, M = 2, G = 64) of github.com/global-computing-consortium/HiFloat4
(``hif4_gpu/HiF4_NVFP4_v14f16.py``), step by step. It is slow and obviously correct;
:func:`fp4spec.emulator.hif4.hif4_quantize` is the fast vectorized version, tested equal to it.

Codes (fp4spec's choices; the hardware bit encoding is not published):

* element code = ``(sign << 3) | (4 * m)``: the ``s1p2`` format of
  :mod:`fp4spec.number_formats` (code 8 is -0).
* scale code = ``(E << 2) | M``, an ``e6m2`` byte: value ``2^(E - 48) * (1 + M/4)``, E in
  0..63, M in 0..3, no zero, ``0xFF`` (E = 63, M = 3) is NaN. The placement of E and M in
  the byte is **unknown** for the hardware; this is the placement fp4spec uses everywhere.
* ``e1_8[k]`` (k = 0..7) covers elements ``8k .. 8k+7``; ``e1_16[j]`` (j = 0..15) covers
  elements ``4j .. 4j+3``. How these 24 bits are packed next to the scale byte is unknown;
  fp4spec keeps them as separate bit tuples.

Decisions (the golden model leaves them open):

* **Input precision.** The algorithm's input is float32. float16 and bfloat16 values are
  exact in float32; float64 values are first rounded to float32 (round to nearest even, as
  ``numpy.astype(float32)``), and a finite float64 beyond the float32 range becomes +-Inf.
  Reason: the golden model run on float32 data (its own GPU check does) computes every
  product exactly, so the result is a function of the float32 value; on float64 data its
  products round in float64 and the result would depend on that rounding.
* **Arithmetic** (``arith``): ``"float64"`` (default) is the golden model as it runs under
  NumPy >= 2 on float32 data. Every product there is exact (a float32 value times a
  bfloat16 value has at most 32 significant bits), so ``"float64"`` is *exact arithmetic*.
  ``"float32"`` rounds every product and the ``+ 1/2`` of the element rounding to float32
  (RNE), as a float32 kernel does (the torch variant ``quant_hifx``); the steps of
  :func:`hif4_quantize_group_scalar` say where. Both modes keep the clamps of step 6 (the
  torch variant drops them).
  Beware: under NumPy 1.x the golden model itself is a third variant -- NumPy's value-based
  casting makes ``float32 array * np.float64 scalar`` a float32 product, so only the element
  product ``|x| * REC`` rounds to float32 there (thresholds and ``+ 1/2`` stay exact).
* **Non-finite inputs** (``nonfinite``): the golden model turns a whole group NaN when it
  contains a NaN or +-Inf (``log2(inf)`` makes the scale NaN). ``"error"`` (default) raises
  ValueError; ``"propagate"`` reproduces the golden output: scale code ``0xFF`` (E6M2 NaN),
  element codes and micro-exponent bits 0, so all 64 values decode to NaN.
* **Sign of zero.** As in the golden model, the sign bit is ``x < 0``: -0.0 encodes as +0
  (code 0), and a negative value whose magnitude rounds to 0 keeps its sign (code 8, -0).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from fractions import Fraction
from typing import Sequence

import ml_dtypes
import numpy as np

from .number_formats import get_format
from .elements import floor_log2
from .rounding import check_choice

#: Elements per HiF4 group (level 1, one E6M2 scale).
GROUP_SIZE = 64
#: Elements per level-2 group (one ``E1_8`` bit).
LEVEL2_SIZE = 8
#: Elements per level-3 group (one ``E1_16`` bit).
LEVEL3_SIZE = 4
#: ``arith=``: precision of the products (see the module docstring).
ARITH_MODES = ("float64", "float32")
#: ``nonfinite=``: what a group holding NaN or +-Inf becomes.
NONFINITE_POLICIES = ("error", "propagate")

#: Smallest and largest E6M2 value: the clamps of step 6.
E6M2_MIN = Fraction(1, 2**48)
E6M2_MAX = Fraction(49152)  # 2^15 * 1.5; 2^15 * 1.75 is the NaN code
#: The E6M2 NaN code (E = 63, M = 3), used by ``nonfinite="propagate"``.
E6M2_NAN_CODE = 0xFF
#: Largest S1P2 magnitude index (m = 1.75).
S1P2_MAX_INDEX = 7

_FLOAT32_OVERFLOW = Fraction(2) ** 128


def round_to_bits(v: Fraction, bits: int, emin: int) -> Fraction:
    """Round ``v >= 0`` to ``bits`` significant bits, ties to even, exponent floored at ``emin``.

    1. If ``v == 0`` the result is 0.
    2. ``E = max(floor(log2 v), emin)``; the quantum is ``q = 2^(E - bits + 1)``.
    3. The result is ``round_half_even(v / q) * q`` (it may carry into the next binade).

    There is no overflow handling: the result can be any size.
    """
    if v < 0:
        raise ValueError(f"v: {v} must be >= 0")
    if v == 0:
        return Fraction(0)
    e = max(floor_log2(v), emin)
    quantum = Fraction(2) ** (e - bits + 1)
    return round(v / quantum) * quantum  # Fraction.__round__ rounds half to even


def to_bf16(v: Fraction) -> Fraction:
    """The golden model's ``To_BF16`` on a non-negative value: 8 significant bits, RNE, E >= -126.

    Equal to IEEE bfloat16 RNE for every value below the bfloat16 overflow threshold
    (including bfloat16 subnormals: the quantum stops at 2^-133).
    """
    return round_to_bits(v, 8, -126)


def to_float32(v: Fraction) -> Fraction:
    """IEEE float32 round-to-nearest-even of ``v >= 0`` (subnormals included, no overflow check)."""
    return round_to_bits(v, 24, -126)


#: ``Const_rec = BF16(1/7) = 73/512 = 0.142578125``: 7 = 2^2 * 1.75 is the largest product of
#: the level-2, level-3 and element multipliers.
CONST_REC = to_bf16(Fraction(1, 7))


def e6m2_code(sf: Fraction) -> int:
    """Step 6: the E6M2 code of a scale factor ``sf >= 0`` (the golden ``BF16_to_E6MX``, M = 2).

    1. Clamp: ``x = min(sf, 49152)``, then ``x = max(x, 2^-48)``.
    2. ``E = floor(log2 x)``; ``r = round_half_even(x * 2^(2 - E))``, an integer in 4..8.
    3. If ``r == 8`` the value carried into the next binade: ``E += 1``, ``r = 4``.
    4. The value is ``2^E * r/4``; the code is ``((E + 48) << 2) | (r - 4)``.
    """
    x = min(sf, E6M2_MAX)
    x = max(x, E6M2_MIN)
    e = floor_log2(x)
    r = round(x * Fraction(2) ** (2 - e))
    if r == 8:
        e, r = e + 1, 4
    code = ((e + 48) << 2) | (r - 4)
    assert 0 <= code < E6M2_NAN_CODE, code
    return code


def e6m2_value(code: int) -> Fraction:
    """Exact value of a finite E6M2 code: ``2^(E - 48) * (1 + M/4)`` with ``code = (E << 2) | M``."""
    code = _check_int("scale_code", code, 0, E6M2_NAN_CODE - 1)
    return get_format("e6m2").decode_exact(code)


def e6m2_reciprocal(code: int) -> Fraction:
    """Step 7: ``REC = BF16(1 / E6M2)`` (the hardware's ``E6M2_REC`` table gives the same)."""
    return to_bf16(1 / e6m2_value(code))


@dataclasses.dataclass(frozen=True)
class HiF4Group:
    """One quantized HiF4 group: 64 element codes and 32 bits of metadata.

    Fields:
        codes: 64 S1P2 codes, ``(sign << 3) | (4 * m)``.
        scale_code: the E6M2 byte ``(E << 2) | M`` (``0xFF``: NaN, a non-finite group).
        e1_8: 8 bits; ``e1_8[k]`` doubles elements ``8k .. 8k+7``.
        e1_16: 16 bits; ``e1_16[j]`` doubles elements ``4j .. 4j+3``.
    """

    codes: tuple[int, ...]
    scale_code: int
    e1_8: tuple[int, ...]
    e1_16: tuple[int, ...]

    def __post_init__(self):
        for name, seq, n, hi in (("codes", self.codes, GROUP_SIZE, 15),
                                 ("e1_8", self.e1_8, GROUP_SIZE // LEVEL2_SIZE, 1),
                                 ("e1_16", self.e1_16, GROUP_SIZE // LEVEL3_SIZE, 1)):
            if not isinstance(seq, tuple) or len(seq) != n:
                raise ValueError(f"{name}: expected a tuple of {n} ints, got {seq!r}")
            for v in seq:
                _check_int(name, v, 0, hi)
        _check_int("scale_code", self.scale_code, 0, 255)

    @property
    def de(self) -> tuple[int, ...]:
        """The 16 fused exponent offsets ``DE[j] = E1_8[j // 2] + E1_16[j]`` (0, 1 or 2)."""
        return tuple(self.e1_8[j // 2] + self.e1_16[j] for j in range(GROUP_SIZE // LEVEL3_SIZE))


def _check_int(name: str, v, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
        raise ValueError(f"{name}: {v!r} is not an integer in {lo}..{hi}")
    return int(v)


def _read_input(v) -> float:
    """Step 1 for one value: its float32 value, as a Python float (+-inf on float32 overflow)."""
    if isinstance(v, np.generic) and v.dtype == ml_dtypes.bfloat16:
        v = float(v)  # exact; bfloat16 scalars are not registered as numbers.Real
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise TypeError(f"values: {v!r} is not a real number")
    if isinstance(v, numbers.Rational):
        exact = Fraction(v)
        negative = exact < 0
    else:
        f = float(v)  # exact for float16, float32 and float64 scalars
        if not math.isfinite(f):
            return f
        exact, negative = Fraction(f), math.copysign(1.0, f) < 0
    r = to_float32(abs(exact))
    mag = math.inf if r >= _FLOAT32_OVERFLOW else float(r)
    return -mag if negative else mag


def _f32(v: Fraction, arith: str) -> Fraction:
    """The rounding a float32 evaluation applies to a product (none with ``arith="float64"``)."""
    return to_float32(v) if arith == "float32" else v


def hif4_quantize_group_scalar(values: Sequence, *, arith: str = "float64",
                               nonfinite: str = "error") -> HiF4Group:
    """Quantize one group of 64 values to HiF4 (the normative algorithm, golden ``To_HiFX``).

    ``values`` holds 64 real numbers (Python floats or numpy float16/bfloat16/float32/float64
    scalars). All arithmetic is exact on rationals; ``F32(.)`` marks a rounding to float32
    (RNE) applied only with ``arith="float32"`` (with ``"float64"`` it is the identity,
    because the golden model's float64 products of float32 data are exact).

    1. Read each value as float32: float16/bfloat16/float32 exactly, float64 rounded to
       float32 (RNE; beyond the float32 range: +-Inf).
    2. If a value is NaN or +-Inf: ``nonfinite="error"`` raises ValueError;
       ``"propagate"`` returns scale code ``0xFF`` (NaN) with all codes and bits 0.
    3. ``s_i = 1 if x_i < 0 else 0``; ``a_i = |x_i|``.
    4. ``V16[j] = max(a[4j .. 4j+3])`` (j = 0..15); ``V8[k] = max(V16[2k], V16[2k+1])``
       (k = 0..7); ``Vmax = max_k V8[k]``.
    5. ``SF = BF16(F32(Vmax * Const_rec))`` with ``Const_rec = BF16(1/7) = 73/512`` and
       ``BF16`` = round to 8 significant bits, ties to even, exponent floored at -126.
    6. E6M2 (:func:`e6m2_code`): clamp ``SF`` to ``[2^-48, 49152]``, round to 2 mantissa
       bits (ties to even). An all-zero group gets ``2^-48`` (code 0).
    7. ``REC = BF16(1 / E6M2)`` (not exactly ``1/E6M2`` unless M = 0).
    8. ``E1_8[k] = 1 if F32(V8[k] * REC) >= 4 else 0``.
    9. ``E1_16[j] = 1 if F32(V16[j] * REC) * 2^-E1_8[j // 2] >= 2 else 0``.
    10. ``DE[j] = E1_8[j // 2] + E1_16[j]`` (0, 1 or 2).
    11. For element i in level-3 group j: ``q = F32(a_i * REC) * 2^(2 - DE[j])``,
        ``m4 = floor(F32(q + 1/2))`` (round half up: ties away from zero on the magnitude),
        then ``m4 = min(m4, 7)`` (saturate at m = 1.75).
    12. ``code_i = (s_i << 3) | m4``.

    Raises:
        ValueError: wrong number of values, a bad ``arith``/``nonfinite``, or a non-finite
            value with ``nonfinite="error"``.
        TypeError: a value that is not a real number.
    """
    check_choice("arith", arith, ARITH_MODES)
    check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
    values = list(values)
    if len(values) != GROUP_SIZE:
        raise ValueError(f"values: a HiF4 group has exactly {GROUP_SIZE} values, got {len(values)}")
    # Step 1
    xs = [_read_input(v) for v in values]
    # Step 2
    bad = [i for i, v in enumerate(xs) if not math.isfinite(v)]
    if bad:
        i = bad[0]
        if nonfinite == "error":
            shown = values[i] if isinstance(values[i], numbers.Rational) else float(values[i])
            why = "" if shown != shown or shown in (math.inf, -math.inf) else " (beyond the float32 range)"
            raise ValueError(f"values: element {i} is {shown!r}{why}; HiF4 has no encoding for "
                             f"NaN or Inf values; pass nonfinite='propagate' to get a NaN group "
                             f"(scale code 0xFF), as in the golden model's output")
        return HiF4Group((0,) * GROUP_SIZE, E6M2_NAN_CODE, (0,) * 8, (0,) * 16)
    # Step 3
    signs = [1 if v < 0 else 0 for v in xs]
    a = [abs(Fraction(v)) for v in xs]
    # Step 4
    v16 = [max(a[LEVEL3_SIZE * j:LEVEL3_SIZE * (j + 1)]) for j in range(16)]
    v8 = [max(v16[2 * k], v16[2 * k + 1]) for k in range(8)]
    vmax = max(v8)
    # Step 5
    sf = to_bf16(_f32(vmax * CONST_REC, arith))
    # Step 6
    scale_code = e6m2_code(sf)
    # Step 7
    rec = e6m2_reciprocal(scale_code)
    # Step 8
    e1_8 = tuple(int(_f32(v8[k] * rec, arith) >= 4) for k in range(8))
    # Step 9
    e1_16 = tuple(int(_f32(v16[j] * rec, arith) / 2 ** e1_8[j // 2] >= 2) for j in range(16))
    # Steps 10-12
    codes = []
    for i in range(GROUP_SIZE):
        j = i // LEVEL3_SIZE
        de = e1_8[j // 2] + e1_16[j]
        q = _f32(a[i] * rec, arith) * Fraction(2) ** (2 - de)
        m4 = min(math.floor(_f32(q + Fraction(1, 2), arith)), S1P2_MAX_INDEX)
        codes.append((signs[i] << 3) | m4)
    return HiF4Group(tuple(codes), scale_code, e1_8, e1_16)


def hif4_dequantize_group_scalar(group: HiF4Group) -> list[float]:
    """The 64 decoded values of a group, as (exact) Python floats.

    1. If ``scale_code == 0xFF`` (NaN) every value is NaN.
    2. Otherwise value ``i`` (level-3 group ``j = i // 4``) is
       ``(-1)^s * E6M2 * 2^(E1_8[j // 2] + E1_16[j]) * m4 / 4`` with ``s = code >> 3`` and
       ``m4 = code & 7``; ``m4 = 0`` with ``s = 1`` is -0.0.

    Every value is exact in float32 as well: at most 5 significant bits, magnitudes in
    ``{0} U [2^-50, 344064]``.
    """
    if not isinstance(group, HiF4Group):
        raise TypeError(f"group: expected a HiF4Group, got {type(group).__name__}")
    if group.scale_code == E6M2_NAN_CODE:
        return [math.nan] * GROUP_SIZE
    scale = e6m2_value(group.scale_code)
    de = group.de
    out = []
    for i, code in enumerate(group.codes):
        mag = float(scale * 2 ** de[i // LEVEL3_SIZE] * Fraction(code & 7, 4))
        out.append(-mag if code >> 3 else mag)
    return out


__all__ = [
    "ARITH_MODES",
    "CONST_REC",
    "E6M2_MAX",
    "E6M2_MIN",
    "E6M2_NAN_CODE",
    "GROUP_SIZE",
    "HiF4Group",
    "LEVEL2_SIZE",
    "LEVEL3_SIZE",
    "NONFINITE_POLICIES",
    "e6m2_code",
    "e6m2_reciprocal",
    "e6m2_value",
    "hif4_dequantize_group_scalar",
    "hif4_quantize_group_scalar",
    "round_to_bits",
    "to_bf16",
    "to_float32",
]
