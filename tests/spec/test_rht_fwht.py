"""The pinned RHT arithmetic ``fwht-fp32`` (fp4spec.rht, steps F1-F5) and the RHT value.

The vectorized numpy butterfly is checked against an obviously-correct scalar version:
Python floats with every operation rounded to float32 by ``struct`` (a binary64 sum, difference
or product of two binary32 values rounded to binary32 is the correctly rounded binary32
result: 53 >= 2 * 24 + 2, so the double rounding is innocuous).
"""

import math
import struct
from decimal import Decimal, getcontext

import ml_dtypes
import numpy as np
import pytest

from fp4spec.rht import (ARITHS, RHT, TE_SIGNS, fwht_fp32, fwht_scale, hadamard, inverse_rht, resolve_rht, rht,
                         rht_signs)

BF16 = ml_dtypes.bfloat16


# -- the scalar version ------------------------------------------------------------------------------

def f32(v: float) -> float:
    """RNE to binary32 (overflow to +-inf), as a Python float."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def bf16_rne(v: float) -> float:
    """RNE of a binary32 value to bfloat16, on the bits (NaN stays NaN)."""
    if math.isnan(v):
        return v
    b = f32_bits(v)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def exact_scale(size: int) -> float:
    """RNE to binary32 of the real 1/sqrt(size), from 60 decimal digits."""
    getcontext().prec = 60
    r = 1 / Decimal(size).sqrt()
    lo = f32(float(r))
    cands = [np.float32(lo), np.nextafter(np.float32(lo), np.float32(0)), np.nextafter(np.float32(lo), np.float32(1))]
    return float(min(cands, key=lambda c: abs(Decimal(float(c)) - r)))


def scalar_fwht_row(row, signs, out: str = "float32") -> list:
    """Steps F2-F5 on one row of binary32 values (Python floats), one operation at a time."""
    size = len(row)
    u = [f32(s * x) for s, x in zip(signs, row)]
    d = 1
    while d < size:
        new = list(u)
        for i in range(size):
            if i & d == 0:
                new[i], new[i + d] = f32(u[i] + u[i + d]), f32(u[i] - u[i + d])
        u = new
        d *= 2
    c = exact_scale(size)
    y = [f32(v * c) for v in u]
    return [bf16_rne(v) for v in y] if out == "bfloat16" else y


def scalar_rht(x, size, signs, out="float32") -> np.ndarray:
    x32 = np.asarray(x).astype(np.float32)
    rows = x32.reshape(-1, size)
    y = np.array([scalar_fwht_row([float(v) for v in r], signs, out) for r in rows], dtype=np.float32)
    return y.reshape(x32.shape)


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    na, nb = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    return bool(np.array_equal(na, nb) and np.array_equal(a.view(width)[~na], b.view(width)[~nb]))


def wide_span(rng, rows, size, span_log2=40):
    """Rows whose magnitudes span up to 2^span_log2: float32 values with random exponents and signs."""
    mant = rng.uniform(1, 2, (rows, size))
    exp = rng.integers(-span_log2 // 2, span_log2 // 2, (rows, size))
    sign = rng.choice([-1.0, 1.0], (rows, size))
    return (sign * mant * np.exp2(exp)).astype(np.float32)


# -- fwht-fp32 equals the scalar version -------------------------------------------------------------

@pytest.mark.parametrize("size", [16, 32, 64, 128])
@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_vectorized_equals_scalar_random(size, out):
    rng = np.random.default_rng(size)
    signs = tuple(int(s) for s in rht_signs(size, seed=size + 1))
    x = np.concatenate([rng.standard_t(3, (3, size)).astype(np.float32),
                        rng.standard_normal((2, size)).astype(BF16).astype(np.float32),
                        wide_span(rng, 3, size)])
    got = rht(x, size, signs=signs, arith="fwht-fp32", out_dtype=out)
    want = scalar_rht(x, size, signs, out)
    assert same_bits(np.asarray(got, np.float32), want)
    assert got.dtype == (BF16 if out == "bfloat16" else np.float32)


def test_vectorized_equals_scalar_special_values():
    f = np.finfo(np.float32)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, f.max, -f.max, f.tiny, f.smallest_subnormal, -f.smallest_subnormal,
            2.0 ** -140, 1.0, -1.0, 2.0 ** 24, 1.0 + 2 ** -23, 3.0]
    rng = np.random.default_rng(0)
    x = np.array([rng.permutation(vals) for _ in range(24)], dtype=np.float32)
    x = np.concatenate([x, np.zeros((1, 16), np.float32), -np.zeros((1, 16), np.float32),
                        np.full((1, 16), f.max, np.float32), np.full((1, 16), f.smallest_subnormal, np.float32)])
    for out in ("float32", "bfloat16"):
        with np.errstate(invalid="ignore", over="ignore"):
            got = rht(x, 16, signs="te", arith="fwht-fp32", out_dtype=out)
        assert same_bits(np.asarray(got, np.float32), scalar_rht(x, 16, TE_SIGNS, out))


def test_signed_zeros_follow_ieee():
    # all -0.0: s_i * -0.0 gives +-0; (+0) + (-0) = +0 and (-0) + (-0) = -0 under RNE
    x = -np.zeros(16, np.float32)
    got = rht(x, 16, signs=[1] * 16, arith="fwht-fp32")
    assert np.all(np.signbit(got[:1])) and not np.any(np.signbit(got[1:]))  # -0-(-0) = +0
    assert same_bits(got, scalar_rht(x, 16, [1] * 16))


def test_scale_constant_is_rne_of_the_real():
    assert fwht_scale(16) == 0.25 and fwht_scale(64) == 0.125
    for n in (16, 32, 64, 128):
        assert float(fwht_scale(n)) == exact_scale(n) and fwht_scale(n).dtype == np.float32
    assert fwht_scale(32).view(np.uint32) == 0x3E3504F3 and fwht_scale(128).view(np.uint32) == 0x3DB504F3


def test_butterfly_is_the_hadamard_product_when_exact():
    # small integers: every fp32 sum exact, so u = x @ H exactly
    rng = np.random.default_rng(1)
    for size in (16, 32, 64, 128):
        x = rng.integers(-100, 100, (4, size)).astype(np.float32)
        assert np.array_equal(fwht_fp32(x), (x.astype(np.int64) @ hadamard(size).astype(np.int64)).astype(np.float32))
    with pytest.raises(ValueError, match="blocks: expected float32"):
        fwht_fp32(np.zeros((1, 16)))


def test_stays_float32_no_promotion():
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    assert rht(x, 64, seed=1, arith="fwht-fp32").dtype == np.float32
    assert rht(x.astype(np.float64), 64, seed=1, arith="fwht-fp32").dtype == np.float32  # None -> float32
    assert rht(x, 64, seed=1, arith="fwht-fp32", out_dtype="float64").dtype == np.float64


def test_step_f1_rounds_float64_to_float32_first():
    x = np.random.default_rng(3).standard_normal((8, 32))  # float64 with bits below float32
    a = rht(x, 32, seed=0, arith="fwht-fp32")
    b = rht(x.astype(np.float32), 32, seed=0, arith="fwht-fp32")
    assert same_bits(a, b)
    big = np.full((1, 16), 1e300)
    with np.errstate(invalid="ignore"):
        assert np.all(np.isinf(rht(big, 16, signs=[1] * 16, arith="fwht-fp32")[0, :1]))
    for dt in (np.float16, BF16):
        xs = x.astype(dt)
        assert same_bits(rht(xs, 32, seed=0, arith="fwht-fp32"),
                         rht(xs.astype(np.float32), 32, seed=0, arith="fwht-fp32"))


def test_axis_and_leading_dims():
    x = np.random.default_rng(4).standard_normal((2, 32, 3)).astype(np.float32)
    y = rht(x, 16, seed=0, axis=1, arith="fwht-fp32", out_dtype="bfloat16")
    want = np.moveaxis(rht(np.moveaxis(x, 1, -1), 16, seed=0, arith="fwht-fp32", out_dtype="bfloat16"), -1, 1)
    assert same_bits(y, want)


# -- relation to the float64 arithmetic ----------------------------------------------------------------

@pytest.mark.parametrize("size", [16, 64])
@pytest.mark.parametrize("out", ["float32", "bfloat16"])
def test_equals_float64_in_the_exact_regime(size, out):
    # BF16 values with magnitudes in [1, 2^8): 8 + 8 + log2(size) <= 24 bits, every fp32 sum exact
    rng = np.random.default_rng(size)
    mags = np.exp2(rng.uniform(0, 8, (64, size)))
    x = (rng.choice([-1.0, 1.0], (64, size)) * mags).astype(BF16)
    for kw in ({"signs": "te"} if size == 16 else {"seed": 5}, {"seed": 9}):
        a = rht(x, size, arith="fwht-fp32", out_dtype=out, **kw)
        b = rht(x, size, arith="float64", out_dtype=out, **kw)
        assert same_bits(a, b)


def test_documented_example_differs():
    # rht() docstring: x = [2^24, 1, -2^24, 0...], TE signs: exactly y_0 = 1/4; fp32(2^24 + 1) = 2^24 gives 0
    x = np.zeros(16, BF16)
    x[0], x[1], x[2] = 2.0 ** 24, 1.0, -(2.0 ** 24)
    fast = rht(x, 16, signs="te", arith="fwht-fp32", out_dtype="bfloat16")
    ref = rht(x, 16, signs="te", arith="float64", out_dtype="bfloat16")
    assert float(fast[0]) == 0.0 and float(ref[0]) == 0.25
    assert float(scalar_rht(x, 16, TE_SIGNS, "bfloat16")[0]) == 0.0


def test_wide_span_blocks_differ():
    rng = np.random.default_rng(5)
    # float32 output: wide-span blocks lose low bits in the butterfly that float64 keeps
    x = wide_span(rng, 200, 16, span_log2=40).astype(BF16)
    a = rht(x, 16, signs="te", arith="fwht-fp32", out_dtype="float32")
    b = rht(x, 16, signs="te", arith="float64", out_dtype="float32")
    assert np.any(a != b, axis=1).sum() > 100
    # BF16 output: the lost bits must matter after rounding to 8 bits; a cancelling pair makes them matter
    big = np.exp2(rng.integers(25, 40, 50))  # span < 2^53: float64 exact.astype(np.float32)
    t = (rng.uniform(1, 2, 50) * np.exp2(rng.integers(-8, 0, 50))).astype(BF16).astype(np.float32)
    x = np.zeros((50, 16), np.float32)
    x[:, 0], x[:, 1], x[:, 2] = big, t, -big  # TE signs s_0 = s_1 = s_2 = +1
    a = rht(x.astype(BF16), 16, signs="te", arith="fwht-fp32", out_dtype="bfloat16")
    b = rht(x.astype(BF16), 16, signs="te", arith="float64", out_dtype="bfloat16")
    assert np.all(a[:, 0].astype(np.float32) == 0) and np.array_equal(b[:, 0].astype(np.float32), t / 4)


def test_sizes_32_and_128_round_the_constant():
    # exact sums, but c = fp32(1/sqrt(32)) is rounded: the two arithmetics may differ in the last bit
    for size in (32, 128):
        x = np.zeros((1, size), np.float32)
        x[0, 0] = 9.0  # u_j = 9 for every j
        a = rht(x, size, signs=[1] * size, arith="fwht-fp32")
        b = rht(x, size, signs=[1] * size, arith="float64")
        assert np.all(a == np.float32(9) * fwht_scale(size))
        assert np.all(a != b) and np.all(b == np.float32(9 / math.sqrt(size)))


@pytest.mark.parametrize("size", [16, 32, 64, 128])
def test_inverse_roundtrip(size):
    rng = np.random.default_rng(size)
    x = rng.standard_normal((8, 2 * size)).astype(np.float32)
    y = rht(x, size, seed=3, arith="fwht-fp32")
    back = inverse_rht(y, size, seed=3, arith="fwht-fp32")
    assert back.dtype == np.float32
    assert np.max(np.abs(back - x)) <= 8 * np.finfo(np.float32).eps * np.max(np.abs(x))
    # small integers times a power of two: everything exact for 16 and 64
    if size in (16, 64):
        xi = rng.integers(-50, 50, (4, size)).astype(np.float32)
        assert np.array_equal(inverse_rht(rht(xi, size, seed=1, arith="fwht-fp32"), size, seed=1, arith="fwht-fp32"), xi)


def test_arith_errors():
    with pytest.raises(ValueError, match="arith: 'fp32' is not one of 'float64', 'fwht-fp32', 'mma:sm90-bf16'"):
        rht(np.zeros(16), 16, signs="te", arith="fp32")
    with pytest.raises(ValueError, match="arith"):
        inverse_rht(np.zeros(16), 16, signs="te", arith=None)
    assert ARITHS == ("float64", "fwht-fp32", "mma:sm90-bf16")


# -- the RHT value -------------------------------------------------------------------------------------

def test_rht_te():
    r = RHT.te()
    assert r == RHT() and r.size == 16 and r.signs == TE_SIGNS and r.arith == "fwht-fp32"
    assert r.out_dtype == "bfloat16" and r.sign_mask() == 0xD7E8 and r.spec == "16/fwht-fp32" and r.is_te
    assert str(r) == "RHT 16/fwht-fp32, signs 0xD7E8 (TE), out bfloat16"
    assert hash(r) == hash(RHT.from_signs("te"))
    assert RHT.te(out_dtype="float32").out_dtype == "float32"


def test_rht_from_seed_and_signs():
    r = RHT.from_seed(7, size=32, arith="float64")
    assert r.signs == tuple(int(s) for s in rht_signs(32, seed=7)) and r.spec == "32/float64"
    assert all(type(s) is int for s in r.signs) and not r.is_te
    assert str(r).startswith("RHT 32/float64, signs 0x") and len(str(r).split()[3]) == len("0x12345678,")
    s = [1, -1] * 32
    assert RHT.from_signs(s, size=64).signs == tuple(s)
    assert RHT.from_signs(np.array(s, np.int8), 64).sign_mask() == sum(1 << i for i in range(1, 64, 2))
    assert RHT(16, list(TE_SIGNS)) == RHT.te()


def test_rht_apply_is_rht():
    x = np.random.default_rng(6).standard_normal((4, 64)).astype(np.float32)
    for r in (RHT.te(), RHT.from_seed(1, 64, out_dtype="float32"), RHT.from_seed(2, 32, arith="float64")):
        want = rht(x, r.size, signs=r.signs, arith=r.arith, out_dtype=r.out_dtype)
        assert same_bits(r.apply(x), want)
        assert same_bits(r.apply(x.T.copy(), axis=0), np.ascontiguousarray(want.T))
    y = RHT.te(out_dtype="float32").apply(x)
    assert np.max(np.abs(RHT.te().inverse(y) - x)) < 1e-5


@pytest.mark.parametrize("kwargs,match", [
    ({"size": 8}, "size: 8 is not one of 16, 32, 64, 128"),
    ({"size": 32}, "signs: 16 entries given but size is 32"),
    ({"signs": (1,) * 15}, "signs: 15 entries given"),
    ({"signs": (1,) * 15 + (0,)}, "signs: every entry must be"),
    ({"signs": (1,) * 15 + (True,)}, "signs: every entry must be"),
    ({"signs": "te"}, "signs: 'te' is a preset name"),
    ({"signs": 3}, "signs: expected a sequence"),
    ({"arith": "float32"}, "arith: 'float32' is not one of"),
    ({"out_dtype": "float16"}, "out_dtype: 'float16' is not one of"),
])
def test_rht_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RHT(**kwargs)


def test_rht_constructor_errors():
    with pytest.raises(ValueError, match="seed"):
        RHT.from_seed("x")
    with pytest.raises(ValueError, match="signs: preset 'te' has 16 entries but size is 32"):
        RHT.from_signs("te", size=32)
    with pytest.raises(ValueError, match="size"):
        RHT.from_seed(0, size=48)


def test_resolve_rht():
    assert resolve_rht(None) is None
    r = RHT.from_seed(3)
    assert resolve_rht(r) is r
    assert resolve_rht("te") == RHT.te()
    assert resolve_rht(5) == RHT.from_seed(5) and resolve_rht(np.int64(5)) == RHT.from_seed(5)
    for bad in (True, "TE", 1.5, 16, [1] * 16):
        if bad == 16:
            continue  # an int is a seed
        with pytest.raises(ValueError, match="rht: .* is not None, an RHT"):
            resolve_rht(bad)
