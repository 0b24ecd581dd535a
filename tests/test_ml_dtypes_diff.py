"""Differential tests against ml_dtypes casts, with the policies that match ml_dtypes.

ml_dtypes' ``astype`` is RNE with these implementation-defined choices (formats.md 5):
e2m1/e2m3/e3m2 saturate and map NaN to the zero of the opposite sign; e4m3 and e8m0 map
overflow (and Inf) to NaN; e5m2 overflows to Inf. fp4spec's defaults differ (saturate;
NaN into a NaN-less format is an error); the divergence tests pin that.
"""

import ml_dtypes
import numpy as np
import pytest

import fp4spec

ML = {
    "e2m1": (ml_dtypes.float4_e2m1fn, dict(overflow="saturate", nan="signed_zero")),
    "e2m3": (ml_dtypes.float6_e2m3fn, dict(overflow="saturate", nan="signed_zero")),
    "e3m2": (ml_dtypes.float6_e3m2fn, dict(overflow="saturate", nan="signed_zero")),
    "e4m3": (ml_dtypes.float8_e4m3fn, dict(overflow="nan")),
    "e5m2": (ml_dtypes.float8_e5m2, dict(overflow="inf")),
    "e8m0": (ml_dtypes.float8_e8m0fnu, dict(overflow="nan")),
}

ALL_BF16 = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)


def ml_codes(x, dtype):
    with np.errstate(invalid="ignore"):  # NaN inputs: ml_dtypes casts them, numpy warns
        return np.asarray(x).astype(dtype).view(np.uint8)


def e8m0_comparable(x32):
    """Inputs where ml_dtypes' e8m0 cast is a plain RNE: not below 2^-127 (see the divergence test)."""
    return ~((np.abs(x32) < 2.0**-126) & (x32 != 0))


@pytest.mark.parametrize("fmt", sorted(ML))
def test_every_bfloat16(fmt):
    dtype, policy = ML[fmt]
    x = ALL_BF16
    keep = np.ones(len(x), bool) if fmt != "e8m0" else e8m0_comparable(x.astype(np.float32))
    got = fp4spec.encode(x[keep], fmt, **policy)
    expected = ml_codes(x[keep].astype(np.float32), dtype)
    mismatch = np.flatnonzero(got != expected)
    assert mismatch.size == 0, f"first mismatch at x={x[keep][mismatch[0]]}: ml_dtypes {expected[mismatch[0]]:#x}, fp4spec {got[mismatch[0]]:#x}"


@pytest.mark.parametrize("fmt", sorted(ML))
def test_random_float32(fmt):
    dtype, policy = ML[fmt]
    rng = np.random.default_rng(0)
    f = fp4spec.get_format(fmt)
    x = np.concatenate([
        rng.standard_normal(200_000).astype(np.float32) * np.float32(f.max / 3),
        rng.uniform(-2 * f.max, 2 * f.max, 100_000).astype(np.float32),
        (rng.standard_normal(100_000) * 2.0 ** rng.integers(-40, 40, 100_000)).astype(np.float32),
    ])
    if fmt == "e8m0":
        x = x[e8m0_comparable(x)]
    np.testing.assert_array_equal(fp4spec.encode(x, fmt, **policy), ml_codes(x, dtype))


def test_divergence_defaults_differ_from_ml_dtypes():
    """fp4spec's defaults saturate and refuse NaN; ml_dtypes does not. Pinned here and in the docs."""
    x = np.array([465.0, np.inf], np.float32)
    assert ml_codes(x, ml_dtypes.float8_e4m3fn).tolist() == [0x7F, 0x7F]  # NaN
    assert fp4spec.encode(x, "e4m3").tolist() == [0x7E, 0x7E]  # saturate at 448
    y = np.array([1e6, np.inf], np.float32)
    assert ml_codes(y, ml_dtypes.float8_e5m2).tolist() == [0x7C, 0x7C]  # Inf
    assert fp4spec.encode(y, "e5m2").tolist() == [0x7B, 0x7B]
    nan = np.array([np.nan], np.float32)
    assert ml_codes(nan, ml_dtypes.float4_e2m1fn).tolist() == [0x8]
    with pytest.raises(ValueError, match="nan:"):
        fp4spec.encode(nan, "e2m1")
    z = np.array([0.0, -1.0], np.float32)
    assert ml_codes(z, ml_dtypes.float8_e8m0fnu).tolist() == [0xFF, 0xFF]
    assert fp4spec.encode(z, "e8m0").tolist() == [0x00, 0x00]  # saturate to 2^-127


def test_divergence_e8m0_below_two_to_minus_126():
    """ml_dtypes rounds tiny e8m0 inputs up from float32 subnormals: 2^-128 -> 2^-127 and
    1.4 * 2^-127 -> 2^-126. fp4spec rounds on the exact value: 1.4 * 2^-127 -> 2^-127, and
    2^-128 is an RNE tie with the predecessor 2^-128 itself, i.e. below the range."""
    x = np.array([2.0**-128, 1.4 * 2.0**-127], np.float32)
    assert ml_codes(x, ml_dtypes.float8_e8m0fnu).tolist() == [0x00, 0x01]
    assert fp4spec.encode(x, "e8m0", overflow="nan").tolist() == [0xFF, 0x00]
    assert fp4spec.encode(x, "e8m0").tolist() == [0x00, 0x00]


def test_int4_ml_dtypes_truncates_and_wraps():
    """ml_dtypes' int4 cast truncates toward zero and wraps mod 16 (9.0 -> -7); fp4spec rounds and saturates."""
    x = np.array([9.0, 7.9, -2.5], np.float32)
    assert x.astype(ml_dtypes.int4).astype(np.int8).tolist() == [-7, 7, -2]
    assert fp4spec.decode(fp4spec.encode(x, "int4"), "int4").tolist() == [7, 7, -2]
    assert fp4spec.decode(fp4spec.encode(x, "int4", "rtz"), "int4").tolist() == [7, 7, -2]
