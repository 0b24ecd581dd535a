"""Every format x rounding mode x overflow policy against an independent IEEE 754 rounding.

The expected codes come from a second implementation written here from IEEE 754-2019 and the
OCP format definitions, sharing nothing with fp4spec but the catalogue's names: each input is
split exactly into an integer significand and a power of two; it is rounded to an integer
multiple of the quantum of its binade as if the exponent range were unbounded below the top
(IEEE 754 4.3, 7.4: "were the exponent range unbounded"); the rounded value is then checked
against the format's range and mapped to the policy's code (IEEE 7.4: roundTowardZero carries
an overflow to the largest finite number, roundTowardPositive a negative overflow to -max and
roundTowardNegative a positive one; the nearest modes to Inf; an infinite input is exact).
Codes are assembled from their fields here, not looked up in fp4spec's tables.

Inputs: every bfloat16 and every float16 bit pattern (Inf and NaN included).
"""

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import fp4spec
from fp4spec.elements import encode_scalar

SR_BITS = 8


@dataclasses.dataclass(frozen=True)
class Spec:
    """A format as its definition states it (OCP MX v1.0 / OCP FP8 / IEEE 754 style)."""

    kind: str             # "float", "int" (two's complement), "uniform" (sign-magnitude k * step)
    ebits: int = 0
    mbits: int = 0
    bias: int = 0
    signed: bool = True
    subnormals: bool = True
    top: tuple = None     # (E, M) fields of the largest finite magnitude
    nan: tuple = ()       # (code for +NaN, code for -NaN)
    inf: tuple = ()       # (code for +Inf, code for -Inf)
    lo: int = 0           # integer formats: most negative value produced
    hi: int = 0           # integer formats / uniform: largest magnitude index


SPECS = {
    "e2m1": Spec("float", 2, 1, 1, top=(3, 1)),
    "e1m2": Spec("float", 1, 2, 0, top=(1, 3)),
    "e1m2_b1": Spec("float", 1, 2, 1, top=(1, 3)),
    "e2m3": Spec("float", 2, 3, 1, top=(3, 7)),
    "e3m2": Spec("float", 3, 2, 3, top=(7, 3)),
    "e4m3": Spec("float", 4, 3, 7, top=(15, 6), nan=(0x7F, 0xFF)),
    "e5m2": Spec("float", 5, 2, 15, top=(30, 3), nan=(0x7E, 0xFE), inf=(0x7C, 0xFC)),
    "ue4m3": Spec("float", 4, 3, 7, signed=False, top=(15, 6), nan=(0x7F, 0x7F)),
    "e8m0": Spec("float", 8, 0, 127, signed=False, subnormals=False, top=(254, 0), nan=(0xFF, 0xFF)),
    "e6m2": Spec("float", 6, 2, 48, signed=False, subnormals=False, top=(63, 2), nan=(0xFF, 0xFF)),
    "int4": Spec("int", lo=-8, hi=7),
    "int4_sym": Spec("int", lo=-7, hi=7),
    "s1p2": Spec("uniform", mbits=3, hi=7, bias=2),  # k * 2^-2, k = 0..7
    "e0m3": Spec("uniform", mbits=3, hi=7, bias=0),  # k, k = 0..7 (sign-magnitude INT4)
}

MODES = ("rne", "rna", "rtz", "rup", "rdn", "rto", "sr")


def all_inputs() -> np.ndarray:
    """Every bfloat16 and every float16 value, as float32 (exact)."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([bits.view(ml_dtypes.bfloat16).astype(np.float32), bits.view(np.float16).astype(np.float32)])


X = all_inputs()
RBITS = ((np.arange(X.size, dtype=np.uint64) * 2654435761) % (1 << SR_BITS)).astype(np.uint32)


def split(x: np.ndarray):
    """|x| = M * 2^E exactly, M an integer below 2^24 (0 for zeros); non-finite entries give 0."""
    f, e = np.frexp(np.where(np.isfinite(x), np.abs(x), 0).astype(np.float64))
    m = (f * 2.0**24).astype(np.int64)
    return m, e.astype(np.int64) - 24


def round_to_quantum(m, shift, negative, mode, r):
    """The integer n = round(m / 2^shift) by ``mode`` (IEEE 754 4.3; sr: up iff
    frac * 2^N + r >= 2^N). Exact in int64: a shift past 40 leaves m far below half a quantum."""
    s = np.clip(shift, 0, 40)
    n_lo = np.where(shift > 0, m >> s, m << np.clip(-shift, 0, 30))  # past 2^54: out of range anyway
    rem = np.where(shift > 0, m - (n_lo << s), 0)
    half = np.where(s > 0, 1 << np.maximum(s - 1, 0), 1)
    inexact = rem > 0
    if mode == "rne":
        up = (rem > half) | ((rem == half) & inexact & (n_lo % 2 == 1))
    elif mode == "rna":
        up = inexact & (rem >= half)
    elif mode == "rtz":
        up = np.zeros_like(inexact)
    elif mode == "rup":
        up = inexact & ~negative
    elif mode == "rdn":
        up = inexact & negative
    elif mode == "rto":
        up = inexact & (n_lo % 2 == 0)
    else:  # sr
        up = inexact & (rem * (1 << SR_BITS) + r.astype(np.int64) * (1 << s) >= (1 << (SR_BITS + s)))
    return n_lo + up


def toward_zero(mode: str, negative):
    """IEEE 7.4: which overflows go to the largest finite number rather than to Inf."""
    if mode in ("rtz", "rto"):
        return np.ones_like(negative)
    if mode == "rup":
        return negative
    if mode == "rdn":
        return ~negative
    return np.zeros_like(negative)


def expected(name: str, x: np.ndarray, mode: str, overflow: str, r=None, underflow: str = "overflow"):
    """(codes, status) with status 0 in range, 1 above the range, -1 below it, 2 NaN input."""
    sp = SPECS[name]
    negative = np.signbit(x)
    isnan, isinf = np.isnan(x), np.isinf(x)
    m, e = split(x)
    zero = (m == 0) & ~isinf
    if sp.kind == "float":
        ev = e + 23  # the binade of |x|: 2^ev <= |x| < 2^(ev + 1), as m has its top bit at 2^23
        emin = (1 if sp.subnormals else 0) - sp.bias
        qe = (np.maximum(ev, emin) if sp.subnormals else ev) - sp.mbits
        n = round_to_quantum(m, qe - e, negative, mode, r)
        carry = n == 1 << (sp.mbits + 1)  # rounded up into the next binade
        n, qe = np.where(carry, n >> 1, n), np.where(carry, qe + 1, qe)
        normal = n >= 1 << sp.mbits
        E = np.where(normal, qe + sp.mbits + sp.bias, 0)
        M = np.where(normal, n - (1 << sp.mbits), n)
        above = (E > sp.top[0]) | ((E == sp.top[0]) & (M > sp.top[1]))
        below = (E < 0) | ((not sp.subnormals) & zero)
        mag = (E << sp.mbits) | M
        top_code = (sp.top[0] << sp.mbits) | sp.top[1]
        min_code = 0
        bits = int(sp.signed) + sp.ebits + sp.mbits
        neg_code = (1 << (bits - 1)) | mag
    else:
        step = 0 if sp.kind == "int" else sp.bias  # quantum 2^-step
        n = round_to_quantum(m, -step - e, negative, mode, r)
        limit = np.where(negative, -sp.lo, sp.hi) if sp.kind == "int" else sp.hi
        above, below = n > limit, np.zeros_like(zero)
        mag = n
        top_code, min_code = sp.hi, 0
        neg_code = ((-n) & 0xF) if sp.kind == "int" else (n | 8)
    if sp.signed:
        code = np.where(negative, neg_code, mag)
        if sp.kind == "int":
            code = np.where(n == 0, 0, code)
        low_code = min_code
    else:
        below = below | (negative & ~zero)  # a negative value in an unsigned format
        code = mag
        low_code = min_code
    above = (above | isinf) & ~(below & negative & ~sp.signed)
    below &= ~isnan
    above &= ~isnan
    tiny = below & ~zero & ~(negative & (not sp.signed)) & (underflow == "saturate")  # underflow="saturate"
    below &= ~tiny
    # Out of range, by the policy
    if overflow == "saturate":
        hi_code = np.where(negative & sp.signed, (1 << (bits - 1) if sp.kind == "float" else 0) | top_code, top_code)
        if sp.kind == "int":
            hi_code = np.where(negative, (sp.lo & 0xF), sp.hi)
        if sp.kind == "uniform":
            hi_code = np.where(negative, 8 | sp.hi, sp.hi)
        code = np.where(above, hi_code, code)
        code = np.where(below, low_code, code)
    elif overflow in ("inf", "nan"):
        special = sp.inf if overflow == "inf" else sp.nan
        big = np.where(negative, special[1], special[0])
        maxc = np.where(negative & sp.signed, (1 << (bits - 1)) | top_code, top_code)
        finite_tz = toward_zero(mode, negative) & ~isinf
        code = np.where(above, np.where(finite_tz, maxc, big), code)
        low = np.where(negative, sp.nan[1], sp.nan[0]) if overflow == "nan" else low_code
        code = np.where(below, low, code)
    code = np.where(tiny, low_code, code)
    status = np.where(above, 1, np.where(below, -1, 0))
    status = np.where(isnan, 2, status)
    return code, status


def policies(name: str):
    fmt = fp4spec.get_format(name)
    return ["saturate", "error"] + (["nan"] if fmt.has_nan else []) + (["inf"] if fmt.has_inf else [])


def nan_expected(name: str, negative: np.ndarray, policy: str) -> np.ndarray:
    """The NaN policies (fp4spec's, stated in docs/rounding.md): codes of NaN inputs."""
    sp = SPECS[name]
    if policy == "nan":
        return np.where(negative, sp.nan[1], sp.nan[0])
    if policy == "max":
        return np.full(negative.shape, sp.hi if sp.kind != "float" else (sp.top[0] << sp.mbits) | sp.top[1])
    neg_zero = {"float": 1 << (sp.ebits + sp.mbits), "uniform": 8}.get(sp.kind)
    if policy == "signed_zero" and sp.signed and neg_zero is not None:
        return np.where(negative, 0, neg_zero)
    return np.zeros(negative.shape, np.int64)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_catalogue_is_covered(name):
    assert set(SPECS) == set(fp4spec.formats), "a catalogued format has no independent spec here"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_bf16_and_fp16_input(name, mode):
    fmt = fp4spec.get_format(name)
    r = RBITS if mode == "sr" else None
    kw = dict(rbits=r, sr_bits=SR_BITS) if mode == "sr" else {}
    for overflow in policies(name):
        want, status = expected(name, X, mode, overflow, r)
        keep = status != 2
        if overflow == "error":
            ok = keep & (status == 0)
            got = fp4spec.encode(X[ok], name, mode, overflow="error", nan="max",
                                 **({**kw, "rbits": r[ok]} if r is not None else {}))
            np.testing.assert_array_equal(got, want[ok], err_msg=f"{name} {mode} error, in range")
            bad = np.flatnonzero(keep & (status != 0))
            if bad.size:
                one = bad[:: max(1, bad.size // 8)]
                for i in one:
                    with pytest.raises(OverflowError, match="overflow"):
                        fp4spec.encode(X[i: i + 1], name, mode, overflow="error",
                                       **({**kw, "rbits": r[i: i + 1]} if r is not None else {}))
            continue
        got = fp4spec.encode(X[keep], name, mode, overflow=overflow, nan="max" if not fmt.has_nan else "auto",
                             **({**kw, "rbits": r[keep]} if r is not None else {}))
        bad = np.flatnonzero(got != want[keep])
        assert bad.size == 0, (f"{name} {mode} overflow={overflow}: x={X[keep][bad[0]]!r} expected "
                               f"{int(want[keep][bad[0]]):#x}, got {int(got[bad[0]]):#x} ({bad.size} differ)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["e8m0", "e6m2"])
def test_underflow_saturate(name, mode):
    """underflow="saturate": tiny positive values give the smallest value, zero and negatives NaN."""
    r = RBITS if mode == "sr" else None
    kw = dict(rbits=r, sr_bits=SR_BITS) if mode == "sr" else {}
    want, status = expected(name, X, mode, "nan", r, underflow="saturate")
    got = fp4spec.encode(X, name, mode, overflow="nan", underflow="saturate", **kw)
    keep = status != 2  # NaN inputs: test_nan_inputs_every_policy
    np.testing.assert_array_equal(got[keep], want[keep])
    assert (status == -1).any() and ((want == 0) & (X > 0) & (X < 2.0**-127)).any()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_nan_inputs_every_policy(name):
    fmt = fp4spec.get_format(name)
    nans = X[np.isnan(X)]
    negative = np.signbit(nans)
    choices = ["nan"] if fmt.has_nan else ["max", "zero"] + (["signed_zero"] if fmt.has_negative_zero else [])
    if not fmt.has_nan and fmt.signed and not fmt.has_negative_zero:
        choices.append("signed_zero")
    for policy in choices:
        for mode in MODES:
            kw = dict(rbits=np.zeros(nans.shape, np.uint32)) if mode == "sr" else {}
            got = fp4spec.encode(nans, name, mode, nan=policy, **kw)
            np.testing.assert_array_equal(got, nan_expected(name, negative, policy), err_msg=f"{name} {mode} {policy}")
    if not fmt.has_nan:
        with pytest.raises(ValueError, match="nan:"):
            fp4spec.encode(nans, name)


SPECIALS = np.array([np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 7.0, -7.0, 448.0, 464.0, 480.0, -480.0, 57344.0,
                     61440.0, 2.0**127, 1.5 * 2.0**127, 2.0**-127, 2.0**-128, 1.5 * 2.0**-128, 2.0**-130,
                     2.0**-149, -2.0**-149, 3.75, 1.875, 7.5, -8.5, 8.5], np.float32)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_scalar_reference_on_edges_and_a_sample(name):
    """The normative scalar algorithm on Inf, zeros, the range ends and every 509th input."""
    x = np.concatenate([SPECIALS, X[::509]])
    x = x[~np.isnan(x)]
    rb = (np.arange(x.size) * 37 % (1 << SR_BITS)).astype(np.uint32)
    for mode in MODES:
        for overflow in policies(name):
            if overflow == "error":
                continue
            want, _ = expected(name, x, mode, overflow, rb if mode == "sr" else None)
            for i, v in enumerate(x):
                got = encode_scalar(float(v), name, mode, overflow=overflow, r=int(rb[i]) if mode == "sr" else None)
                assert got == want[i], f"{name} {mode} overflow={overflow}: x={v!r} expected {int(want[i]):#x}, got {got:#x}"
        if not fp4spec.get_format(name).has_zero:
            want, _ = expected(name, x, mode, "nan", rb if mode == "sr" else None, underflow="saturate")
            got = [encode_scalar(float(v), name, mode, overflow="nan", underflow="saturate",
                                 r=int(rb[i]) if mode == "sr" else None) for i, v in enumerate(x)]
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {mode} underflow=saturate")


@pytest.mark.parametrize("mode", ["rtz", "rup", "rdn", "rto", "rne"])
def test_infinity_is_exact_under_directed_rounding(mode):
    """IEEE 754: +-Inf converts exactly; the directed-mode rule is for finite overflows only."""
    inf = np.array([np.inf, -np.inf], np.float32)
    assert fp4spec.encode(inf, "e5m2", mode, overflow="inf").tolist() == [0x7C, 0xFC]
    assert fp4spec.encode(inf, "e4m3", mode, overflow="nan").tolist() == [0x7F, 0xFF]
    assert fp4spec.encode(inf, "e8m0", mode, overflow="nan").tolist() == [0xFF, 0xFF]
    assert int(fp4spec.encode(np.inf, "e5m2", mode, overflow="inf")) == 0x7C
    assert encode_scalar(float("inf"), "e5m2", mode, overflow="inf") == 0x7C
    assert fp4spec.encode(inf, "e5m2", mode).tolist() == [0x7B, 0xFB]  # saturate: +-max
