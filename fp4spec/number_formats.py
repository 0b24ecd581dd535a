"""Number-format descriptors: a few orthogonal fields per format, everything else derived.

Three kinds of format, one frozen dataclass each:

* :class:`FloatFormat` -- sign-magnitude minifloats ``ExMy`` with a bias (E2M1, E1M2, E4M3,
  E5M2, E2M3, E3M2, the unsigned scales UE4M3, E8M0 and E6M2, and IEEE P3109 draft formats).
* :class:`IntFormat` -- two's complement integers (``int4`` -8..7, ``int4_sym`` -7..7).
* :class:`UniformFormat` -- sign-magnitude uniform grids ``sign x {0, step, ..., (2^(bits-1)-1) step}``
  (the HiFloat4 element ``s1p2``; ``e0m3``, the sign-magnitude INT4 operand Blackwell's
  ``kind::mxf4nvf4`` MMA reportedly accepts).

Every descriptor derives its whole code table (:attr:`values`), its extremes and its
special codes from its fields; nothing is tabulated by hand. Code assignment: the sign (if
any) is the top bit, then the exponent field, then the mantissa field; integers use two's
complement.

Decoding a float code ``S E M`` (``e`` exponent bits, ``m`` mantissa bits, bias ``b``):

1. If the code is one of the format's NaN codes, the value is NaN; if it is an Inf code,
   the value is +-Inf.
2. If ``E == 0`` and the format has subnormals, the value is ``(-1)^S * 2^(1-b) * M/2^m``.
3. Otherwise the value is ``(-1)^S * 2^(E-b) * (1 + M/2^m)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from fractions import Fraction
from types import MappingProxyType
from typing import Mapping, Union

import numpy as np

#: How a float format spends its top codes on special values.
#:
#: * ``"none"``  -- every code is finite (E2M1, E1M2, E2M3, E3M2).
#: * ``"fn"``    -- the all-ones magnitude code is NaN, there is no Inf (E4M3FN, UE4M3, E8M0, E6M2).
#: * ``"ieee"``  -- the all-ones exponent is reserved: mantissa 0 is Inf, the rest NaN (E5M2).
#: * ``"p3109"`` -- IEEE P3109 draft: one NaN (the negative-zero code if signed, all ones if
#:   unsigned), no negative zero, Inf at the top magnitude code(s) in the extended domain.
SPECIALS = ("none", "fn", "ieee", "p3109")


@dataclasses.dataclass(frozen=True)
class CodeRow:
    """One row of a format's code table."""

    code: int
    hex: str
    sign: str
    exponent: str
    mantissa: str
    value: float


class _FormatBase:
    """Derived properties shared by every format kind (requires ``_decode_exact``)."""

    name: str
    bits: int
    signed: bool

    # -- derived tables ----------------------------------------------------------------
    @functools.cached_property
    def values(self) -> np.ndarray:
        """float64 array of length 2**bits in code order (NaN for NaN codes, -0.0 for -0)."""
        out = np.empty(1 << self.bits, dtype=np.float64)
        for code in range(1 << self.bits):
            out[code] = self._decode_float(code)
        out.setflags(write=False)
        return out

    def _decode_float(self, code: int) -> float:
        kind, val = self._decode_exact(code)
        if kind == "nan":
            return math.nan
        if kind == "inf":
            return math.copysign(math.inf, val)
        if kind == "negzero":
            return -0.0
        return float(val)

    def decode_exact(self, code: int) -> Fraction | float:
        """Exact value of one code: a Fraction, or a float for NaN/+-Inf/-0."""
        kind, val = self._decode_exact(code)
        if kind == "finite":
            return val
        return self._decode_float(code)

    @functools.cached_property
    def finite_codes(self) -> tuple[int, ...]:
        """Codes with a finite value, in code order (the negative-zero code included)."""
        return tuple(c for c in range(1 << self.bits) if self._decode_exact(c)[0] in ("finite", "negzero"))

    @functools.cached_property
    def nan_codes(self) -> tuple[int, ...]:
        return tuple(c for c in range(1 << self.bits) if self._decode_exact(c)[0] == "nan")

    @functools.cached_property
    def inf_codes(self) -> tuple[int, ...]:
        return tuple(c for c in range(1 << self.bits) if self._decode_exact(c)[0] == "inf")

    @property
    def has_nan(self) -> bool:
        return bool(self.nan_codes)

    @property
    def has_inf(self) -> bool:
        return bool(self.inf_codes)

    @functools.cached_property
    def has_zero(self) -> bool:
        return any(self._decode_exact(c)[1] == 0 for c in self.finite_codes)

    @functools.cached_property
    def has_negative_zero(self) -> bool:
        return any(self._decode_exact(c)[0] == "negzero" for c in range(1 << self.bits))

    @functools.cached_property
    def max(self) -> float:
        """Largest finite value."""
        return float(max(self._decode_exact(c)[1] for c in self.finite_codes))

    @functools.cached_property
    def min(self) -> float:
        """Smallest (most negative) finite value (0.0 or the smallest value if unsigned)."""
        return float(min(self._decode_exact(c)[1] for c in self.finite_codes))

    @functools.cached_property
    def min_positive(self) -> float:
        """Smallest positive value (the minimum subnormal where there are subnormals)."""
        return float(min(v for c in self.finite_codes if (v := self._decode_exact(c)[1]) > 0))

    @functools.cached_property
    def max_code(self) -> int:
        """Code of the largest finite value."""
        return max(self.finite_codes, key=lambda c: self._decode_exact(c)[1])

    @functools.cached_property
    def grid(self) -> tuple[tuple[Fraction, int], ...]:
        """Finite values in increasing order with their codes (one code per value; +0 for 0).

        This is the table the scalar reference rounds against.
        """
        best: dict[Fraction, int] = {}
        for c in self.finite_codes:
            kind, v = self._decode_exact(c)
            if kind == "negzero":
                continue
            if v not in best:
                best[v] = c
        return tuple(sorted(best.items()))

    def code_table(self) -> list[CodeRow]:
        """Every code with its bit fields and value, in code order."""
        rows = []
        for code in range(1 << self.bits):
            s, e, m = self.fields(code)
            rows.append(CodeRow(code, f"0x{code:0{(self.bits + 3) // 4}X}", s, e, m, float(self.values[code])))
        return rows

    def fields(self, code: int) -> tuple[str, str, str]:
        """(sign, exponent, mantissa) bit strings of a code; empty where a field is absent."""
        raise NotImplementedError

    def describe(self) -> str:
        """One line: bits, bias, max, min normal/subnormal, specials."""
        specials = []
        if self.has_inf:
            specials.append("Inf " + ",".join(f"0x{c:X}" for c in self.inf_codes))
        if self.has_nan:
            specials.append("NaN " + ",".join(f"0x{c:X}" for c in self.nan_codes))
        if self.has_negative_zero:
            specials.append("-0")
        if not self.has_zero:
            specials.append("no zero")
        bias = getattr(self, "bias", None)
        return (
            f"{self.name:<10} {self.kind:<7} bits={self.bits} "
            f"bias={'-' if bias is None else bias} max={self.max:g} "
            f"min_normal={_g(self.min_normal)} min_subnormal={_g(self.min_subnormal)} "
            f"{'signed' if self.signed else 'unsigned'}"
            + (f" specials: {'; '.join(specials)}" if specials else "")
        )

    def check_code(self, code: int) -> int:
        if not isinstance(code, (int, np.integer)) or not 0 <= int(code) < (1 << self.bits):
            raise ValueError(f"code: {code!r} is not a {self.bits}-bit code of format {self.name!r} (0..{(1 << self.bits) - 1})")
        return int(code)


def _g(v):
    return "-" if v is None else f"{v:g}"


@dataclasses.dataclass(frozen=True)
class FloatFormat(_FormatBase):
    """A sign-magnitude minifloat ExMy.

    Fields:
        name: catalogue name.
        exponent_bits, mantissa_bits: field widths (the sign bit, if any, is extra).
        bias: exponent bias; normal values are 2^(E - bias) * (1 + M/2^m).
        signed: whether there is a sign bit (UE4M3, E8M0, E6M2 are unsigned).
        subnormals: whether E == 0 encodes zero and subnormals (False: E == 0 is a normal binade).
        specials: one of :data:`SPECIALS`.
        domain: for ``specials="p3109"``: ``"finite"`` or ``"extended"`` (with +-Inf).
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    signed: bool = True
    subnormals: bool = True
    specials: str = "none"
    domain: str = "finite"
    kind = "float"

    def __post_init__(self):
        if self.exponent_bits < 0 or self.mantissa_bits < 0:
            raise ValueError("exponent_bits and mantissa_bits must be >= 0")
        if self.specials not in SPECIALS:
            raise ValueError(f"specials: {self.specials!r} is not one of {SPECIALS}")
        if self.domain not in ("finite", "extended"):
            raise ValueError(f"domain: {self.domain!r} is not one of ('finite', 'extended')")
        if not 2 <= self.bits <= 16:
            raise ValueError(f"a format must have 2..16 bits, {self.name!r} has {self.bits}")

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    # -- exponent range ----------------------------------------------------------------
    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal binade."""
        return (1 if self.subnormals else 0) - self.bias

    @functools.cached_property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite value (OCP's emax_elem)."""
        return math.floor(math.log2(self.max))

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float | None:
        if not self.subnormals or self.mantissa_bits == 0:
            return None
        return 2.0 ** (self.emin - self.mantissa_bits)

    # -- decoding ----------------------------------------------------------------------
    def fields(self, code: int) -> tuple[str, str, str]:
        code = self.check_code(code)
        m, e = self.mantissa_bits, self.exponent_bits
        sign = format(code >> (e + m), "b") if self.signed else ""
        exp = format((code >> m) & ((1 << e) - 1), f"0{e}b") if e else ""
        man = format(code & ((1 << m) - 1), f"0{m}b") if m else ""
        return sign, exp, man

    def _decode_exact(self, code: int):
        code = self.check_code(code)
        m, e = self.mantissa_bits, self.exponent_bits
        mag_bits = e + m
        negative = self.signed and bool(code >> mag_bits)
        mag = code & ((1 << mag_bits) - 1)
        all_ones = (1 << mag_bits) - 1
        E, M = mag >> m, mag & ((1 << m) - 1)
        sp = self.specials
        if sp == "fn" and mag == all_ones:
            return "nan", None
        if sp == "ieee" and E == (1 << e) - 1:
            return ("inf", -1 if negative else 1) if M == 0 else ("nan", None)
        if sp == "p3109":
            if self.signed and negative and mag == 0:
                return "nan", None
            if not self.signed and mag == all_ones:
                return "nan", None
            if self.domain == "extended":
                inf_mag = all_ones if self.signed else all_ones - 1
                if mag == inf_mag:
                    return "inf", -1 if negative else 1
        if E == 0 and self.subnormals:
            val = Fraction(M, 1 << m) * Fraction(2) ** (1 - self.bias)
        else:
            val = (1 + Fraction(M, 1 << m)) * Fraction(2) ** (E - self.bias)
        if negative:
            if val == 0:
                return "negzero", Fraction(0)
            val = -val
        return "finite", val


class _IndexedGrid(_FormatBase):
    """Fields shared by the integer-grid kinds: a sign bit over a magnitude index, no
    exponent field (so no bias and no normal/subnormal distinction)."""

    bias = None
    exponent_bits = 0
    min_normal = None

    @property
    def mantissa_bits(self) -> int:
        return self.bits - 1

    def fields(self, code: int) -> tuple[str, str, str]:
        code = self.check_code(code)
        return format(code >> (self.bits - 1), "b"), "", format(code & ((1 << (self.bits - 1)) - 1), f"0{self.bits - 1}b")


@dataclasses.dataclass(frozen=True)
class IntFormat(_IndexedGrid):
    """A two's complement integer format.

    Fields:
        name, bits: as usual.
        symmetric: if True the most negative code (-2^(bits-1)) is never produced by
            encoding (the range is symmetric, -(2^(bits-1)-1)..2^(bits-1)-1); decoding it still
            gives -2^(bits-1).
    """

    name: str
    int_bits: int
    symmetric: bool = False
    kind = "int"
    signed = True

    @property
    def bits(self) -> int:
        return self.int_bits

    min_subnormal = None

    def _decode_exact(self, code: int):
        code = self.check_code(code)
        v = code - (1 << self.bits) if code >> (self.bits - 1) else code
        return "finite", Fraction(v)

    @functools.cached_property
    def finite_codes(self) -> tuple[int, ...]:
        codes = range(1 << self.bits)
        if self.symmetric:
            return tuple(c for c in codes if c != 1 << (self.bits - 1))
        return tuple(codes)


@dataclasses.dataclass(frozen=True)
class UniformFormat(_IndexedGrid):
    """A sign-magnitude uniform grid: sign bit plus magnitude index k, value k * step.

    Fields:
        name, bits: as usual; the magnitudes are ``{0, step, ..., (2^(bits-1) - 1) * step}``.
        step: the grid spacing, a power of two (as a float).
    """

    name: str
    uniform_bits: int
    step: float
    kind = "uniform"
    signed = True

    def __post_init__(self):
        if self.step <= 0 or math.frexp(self.step)[0] != 0.5:
            raise ValueError(f"step: {self.step!r} must be a positive power of two")

    @property
    def bits(self) -> int:
        return self.uniform_bits

    @property
    def min_subnormal(self) -> float:
        return self.step

    def _decode_exact(self, code: int):
        code = self.check_code(code)
        k = code & ((1 << (self.bits - 1)) - 1)
        v = k * Fraction(self.step)
        if code >> (self.bits - 1):
            return ("negzero", Fraction(0)) if k == 0 else ("finite", -v)
        return "finite", v


Format = Union[FloatFormat, IntFormat, UniformFormat]


# -- the catalogue ---------------------------------------------------------------------------

def _catalogue() -> dict[str, Format]:
    fmts: list[Format] = [
        # 4-bit elements
        FloatFormat("e2m1", 2, 1, bias=1),
        FloatFormat("e1m2", 1, 2, bias=0),
        FloatFormat("e1m2_b1", 1, 2, bias=1),
        IntFormat("int4", 4),
        IntFormat("int4_sym", 4, symmetric=True),
        UniformFormat("s1p2", 4, step=0.25),
        # sign + 3-bit integer magnitude, +-{0, ..., 7}: the undocumented E0M3 operand of Blackwell's
        # tcgen05.mma kind::mxf4nvf4 (flashinfer-ai/flashinfer#3934) [secondary source]
        UniformFormat("e0m3", 4, step=1.0),
        # 6- and 8-bit elements (MXFP6, MXFP8)
        FloatFormat("e2m3", 2, 3, bias=1),
        FloatFormat("e3m2", 3, 2, bias=3),
        FloatFormat("e4m3", 4, 3, bias=7, specials="fn"),
        FloatFormat("e5m2", 5, 2, bias=15, specials="ieee"),
        # scales
        FloatFormat("ue4m3", 4, 3, bias=7, signed=False, specials="fn"),
        FloatFormat("e8m0", 8, 0, bias=127, signed=False, subnormals=False, specials="fn"),
        FloatFormat("e6m2", 6, 2, bias=48, signed=False, subnormals=False, specials="fn"),
    ]
    return {f.name: f for f in fmts}


_FORMATS: dict[str, Format] = _catalogue()

#: Read-only mapping of every catalogued format, by name.
formats: Mapping[str, Format] = MappingProxyType(_FORMATS)


#: IEEE P3109 draft names, ``binary{K}p{P}{s|u}{e|f}`` (:func:`p3109_format`).
P3109_NAME = re.compile(r"binary(\d+)p(\d+)([su])([ef])")


def get_format(name: "str | Format") -> Format:
    """Look up a format by name (a descriptor passes through unchanged): a catalogued name,
    or an IEEE P3109 draft name such as ``"binary4p2sf"`` (:func:`p3109_format`)."""
    if isinstance(name, (FloatFormat, IntFormat, UniformFormat)):
        return name
    try:
        return _FORMATS[name]
    except (KeyError, TypeError):
        pass
    m = P3109_NAME.fullmatch(name) if isinstance(name, str) else None
    if m:
        k, p, s, d = m.groups()
        return p3109_format(int(k), int(p), "signed" if s == "s" else "unsigned", "extended" if d == "e" else "finite")
    raise ValueError(f"format: unknown format {name!r}; known formats: {', '.join(_FORMATS)}, or an IEEE P3109 "
                     f"draft name binary{{K}}p{{P}}{{s|u}}{{e|f}} (e.g. 'binary4p2sf')") from None


def float_format(spec: str, *, bias: int | None = None, signed: bool = True, subnormals: bool = True,
                 specials: str = "none", name: str | None = None) -> FloatFormat:
    """Define a minifloat in one line: ``float_format("e3m0", bias=3)``.

    ``spec`` is ``"eXmY"``; the bias defaults to the IEEE choice 2^(X-1) - 1.
    """
    s = spec.lower()
    try:
        e_str, m_str = s[1:].split("m")
        e, m = int(e_str), int(m_str)
        if not s.startswith("e"):
            raise ValueError
    except ValueError:
        raise ValueError(f"spec: {spec!r} is not of the form 'eXmY' (e.g. 'e2m1')") from None
    default_bias = (1 << (e - 1)) - 1 if e > 0 else 0
    if bias is None:
        bias = default_bias
    name = name or (s if bias == default_bias else f"{s}_b{bias}")
    return FloatFormat(name, e, m, bias, signed=signed, subnormals=subnormals, specials=specials)


def p3109_format(k: int, p: int, signedness: str = "signed", domain: str = "finite") -> FloatFormat:
    """An IEEE P3109 draft (interim report v4.0) format ``Binary{K}p{P}{s|u}{e|f}``.

    Aligned with the draft's parameterisation, not a conformance claim. The bias is derived
    (signed: 2^(K-P-1), unsigned: 2^(K-P)); there is one NaN (signed: the code 2^(K-1);
    unsigned: 2^K - 1), no negative zero, subnormals whenever P > 1, and in the extended
    domain +-Inf at the top magnitude code.
    """
    if signedness not in ("signed", "unsigned"):
        raise ValueError(f"signedness: {signedness!r} is not one of ('signed', 'unsigned')")
    if domain not in ("finite", "extended"):
        raise ValueError(f"domain: {domain!r} is not one of ('finite', 'extended')")
    signed = signedness == "signed"
    if not (k >= 2 and 0 < p < k + (0 if signed else 1)):
        raise ValueError(f"p: precision {p} is out of range for K={k} ({signedness})")
    m = p - 1
    e = k - int(signed) - m
    bias = 2 ** (k - p - 1) if signed else 2 ** (k - p)
    name = f"binary{k}p{p}{'s' if signed else 'u'}{'e' if domain == 'extended' else 'f'}"
    # E == 0 holds zero (and, for P > 1, the subnormals): the draft always has zero at code 0.
    return FloatFormat(name, e, m, bias, signed=signed, subnormals=True, specials="p3109", domain=domain)


def register_format(fmt: Format, *, replace: bool = False) -> Format:
    """Add a user-defined format to the catalogue so it can be used by name."""
    if fmt.name in _FORMATS and not replace:
        raise ValueError(f"format: {fmt.name!r} is already in the catalogue (pass replace=True)")
    _FORMATS[fmt.name] = fmt
    return fmt
