"""Differential tests against ml_dtypes casts, with the policies that match ml_dtypes.

ml_dtypes' ``astype`` is RNE with these implementation-defined choices (formats.md 5):
e2m1/e2m3/e3m2 saturate and map NaN to the zero of the opposite sign; e4m3 and e8m0 map
overflow (and Inf) to NaN; e5m2 overflows to Inf; e8m0 maps tiny positive values to 0x00
but 0 to NaN. fp4spec's defaults differ (saturate; NaN into a NaN-less format is an error);
the divergence tests pin that.

Version-aware: the expectations follow :func:`fp4spec.profiles.ml_dtypes.policies_for` of the
installed release (0.7 changed the bf16, e8m0 and int4 casts); CI runs this file against the
oldest and the newest allowed ml_dtypes.
"""

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fp4spec
from fp4spec.profiles import ml_dtypes as ml_profile

POLICIES = ml_profile.policies_for(ml_dtypes.__version__)
E8M0 = dict(overflow="nan", underflow="saturate")

ML = {
    "e2m1": (ml_dtypes.float4_e2m1fn, dict(overflow="saturate", nan="signed_zero")),
    "e2m3": (ml_dtypes.float6_e2m3fn, dict(overflow="saturate", nan="signed_zero")),
    "e3m2": (ml_dtypes.float6_e3m2fn, dict(overflow="saturate", nan="signed_zero")),
    "e4m3": (ml_dtypes.float8_e4m3fn, dict(overflow="nan")),
    "e5m2": (ml_dtypes.float8_e5m2, dict(overflow="inf")),
    "e8m0": (ml_dtypes.float8_e8m0fnu, E8M0),
}

ALL_BF16 = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)


def ml_codes(x, dtype):
    with np.errstate(invalid="ignore"):  # NaN inputs: ml_dtypes casts them, numpy warns
        return np.asarray(x).astype(dtype).view(np.uint8)


def fp4spec_codes(x, fmt):
    """fp4spec's codes under ml_dtypes' policies of the installed release."""
    dtype, policy = ML[fmt]
    codes = fp4spec.encode(x, fmt, **policy)
    if fmt == "e8m0" and POLICIES["e8m0_cast"] == "rne_subnormals_up":  # 0.5.1 - 0.6.x
        x32 = np.asarray(x, np.float32)
        tiny = (x32 > 0) & (x32 < 2.0**-126)
        codes = np.where(tiny, np.where(x32 <= 2.0**-127, 0x00, 0x01), codes).astype(np.uint8)
    return codes


@pytest.mark.parametrize("fmt", sorted(ML))
def test_every_bfloat16(fmt):
    dtype, _ = ML[fmt]
    x = ALL_BF16
    got = fp4spec_codes(x, fmt)
    expected = ml_codes(x.astype(np.float32), dtype)
    mismatch = np.flatnonzero(got != expected)
    assert mismatch.size == 0, f"first mismatch at x={x[mismatch[0]]}: ml_dtypes {expected[mismatch[0]]:#x}, fp4spec {got[mismatch[0]]:#x}"


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
    if fmt == "e8m0":  # and every float32 subnormal scale
        x = np.concatenate([x, rng.integers(1, 1 << 23, 100_000, dtype=np.uint32).view(np.float32)])
    np.testing.assert_array_equal(fp4spec_codes(x, fmt), ml_codes(x, dtype))


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


def test_e8m0_tiny_values_saturate_but_zero_is_nan():
    """ml_dtypes (every allowed release): 0 < x below 2^-127 -> 0x00, 0 and -0.0 -> NaN 0xFF;
    expressible as encode(x, "e8m0", overflow="nan", underflow="saturate")."""
    x = np.array([2.0**-149, 2.0**-130, 1.4 * 2.0**-128, 2.0**-128, 0.0, -0.0], np.float32)
    assert ml_codes(x, ml_dtypes.float8_e8m0fnu).tolist() == [0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF]
    assert fp4spec.encode(x, "e8m0", **E8M0).tolist() == [0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF]
    assert fp4spec.encode(x, "e8m0", overflow="nan").tolist() == [0xFF] * 6  # below the range -> NaN
    assert POLICIES["e8m0_underflow"] == "saturate" and POLICIES["e8m0_zero"] == "nan"


def test_e8m0_between_two_to_minus_127_and_minus_126():
    """0.7 rounds on the exact value (1.4 * 2^-127 -> 2^-127, 1.5 * 2^-127 ties up to 2^-126);
    0.5.1 - 0.6.x round up from float32 subnormals (1.4 * 2^-127 -> 2^-126)."""
    x = np.array([1.4 * 2.0**-127, 1.5 * 2.0**-127], np.float32)
    old = POLICIES["e8m0_cast"] == "rne_subnormals_up"
    assert ml_codes(x, ml_dtypes.float8_e8m0fnu).tolist() == ([0x01, 0x01] if old else [0x00, 0x01])
    assert fp4spec.encode(x, "e8m0", **E8M0).tolist() == [0x00, 0x01]


def int4_by_policy(x: np.ndarray, policy: str) -> list[int]:
    t = np.trunc(x)
    if policy == "truncate_wrap":
        return [int((v + 8) % 16 - 8) for v in t]
    return [int(v) if -8 <= v <= 7 else 0 for v in t]


def test_int4_ml_dtypes_truncates():
    """ml_dtypes' int4 cast truncates toward zero: 0.5.1 - 0.6 wrap mod 16 (9.0 -> -7), 0.7 gives 0
    outside -8..7 (9.0 -> 0); fp4spec rounds and saturates."""
    x = np.array([9.0, 7.9, -2.5, -8.5, 16.0, -9.0], np.float32)
    with np.errstate(invalid="ignore"):
        assert x.astype(ml_dtypes.int4).astype(np.int8).tolist() == int4_by_policy(x, POLICIES["int4_cast"])
    assert fp4spec.decode(fp4spec.encode(x, "int4"), "int4").tolist() == [7, 7, -2, -8, 7, -8]
    assert fp4spec.decode(fp4spec.encode(x, "int4", "rtz"), "int4").tolist() == [7, 7, -2, -8, 7, -8]


def test_bf16_from_float64():
    """0.7 rounds float64 -> bfloat16 once; 0.5.1 - 0.6 go through float32 (a double rounding)."""
    v = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8, 1 + 3 * 2**-8])
    once = [1 + 2**-7, -(1 + 2**-7), 1.0, 1 + 2**-6]
    twice = [1.0, -1.0, 1.0, 1 + 2**-6]
    got = v.astype(ml_dtypes.bfloat16).astype(np.float64).tolist()
    assert got == (twice if POLICIES["bf16_cast"] == "via_float32" else once)


def test_pyproject_allows_exactly_the_described_releases():
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"ml_dtypes{ml_profile.VERSIONS}" in deps
    with pytest.raises(ValueError, match="outside the releases"):
        ml_profile.policies_for("0.5.0")
    assert ml_profile.policies_for("0.6.0")["int4_cast"] == "truncate_wrap"
    assert ml_profile.policies_for("0.7.0") == dict(ml_profile.PROFILE.policies)
