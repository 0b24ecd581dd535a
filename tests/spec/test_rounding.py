"""Hand-checked cases for every rounding mode and policy of the scalar reference."""

import math
from fractions import Fraction

import numpy as np
import pytest

import fp4spec
from fp4spec.elements import encode_scalar, magnitude_grid
from fp4spec.rounding import choose_neighbour


def codes(values, fmt, mode="rne", **kw):
    return [encode_scalar(v, fmt, mode, **kw) for v in values]


def test_e2m1_rne_decision_table():
    # formats.md 3.1: the ties 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 go to the even code.
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5]
    assert codes(ties, "e2m1") == [0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6]
    assert codes([-t for t in ties], "e2m1") == [0x8, 0xA, 0xA, 0xC, 0xC, 0xE, 0xE]
    assert codes([6.9, 7, 100, math.inf], "e2m1") == [0x7] * 4  # saturate (default)


def test_e2m1_other_modes_at_ties():
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5]
    assert codes(ties, "e2m1", "rna") == [0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7]
    assert codes(ties, "e2m1", "rtz") == [0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6]
    assert codes(ties, "e2m1", "rup") == [0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7]
    assert codes([-t for t in ties], "e2m1", "rup") == [0x8, 0x9, 0xA, 0xB, 0xC, 0xD, 0xE]
    assert codes([-t for t in ties], "e2m1", "rdn") == [0x9, 0xA, 0xB, 0xC, 0xD, 0xE, 0xF]
    # round to odd: inexact values take the neighbour with the odd significand
    assert codes([0.1, 0.6, 1.1, 2.2, 3.3, 4.4], "e2m1", "rto") == [0x1, 0x1, 0x3, 0x5, 0x5, 0x7]
    assert codes([0.5, 2.0, 4.0], "e2m1", "rto") == [0x1, 0x4, 0x6]  # exact values kept


def test_uniform_grid_ties():
    # formats.md 3.2, bias 0: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.25->2, 2.75->3, 3.25->3; 3.75 saturates
    got = [fp4spec.get_format("e1m2").values[c] for c in codes([0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 9], "e1m2")]
    assert got == [0, 1, 1, 2, 2, 3, 3, 3.5, 3.5]
    assert codes([2.5, 3.5, -2.5, 6.5, 7.5, -8.5, -8.6], "int4") == [0x2, 0x4, 0xE, 0x6, 0x7, 0x8, 0x8]


def test_e8m0_ties_go_up_like_ml_dtypes():
    assert codes([1.5, 3.0, 0.75, 1.4999], "e8m0") == [0x80, 0x81, 0x7F, 0x7F]
    # zero and negatives are below the range: saturate to 2^-127, or NaN as ml_dtypes does
    assert codes([0.0, -1.0], "e8m0") == [0x00, 0x00]
    assert codes([0.0, -1.0, 1e39], "e8m0", overflow="nan") == [0xFF, 0xFF, 0xFF]


def test_e4m3_overflow_policies():
    assert codes([448, 464, 465, 1e9], "e4m3") == [0x7E, 0x7E, 0x7E, 0x7E]
    assert codes([464, 465, math.inf, -465], "e4m3", overflow="nan") == [0x7E, 0x7F, 0x7F, 0xFF]
    # toward-zero modes never produce NaN/Inf for finite overflow, as IEEE 754
    assert codes([1e9], "e4m3", "rtz", overflow="nan") == [0x7E]
    with pytest.raises(OverflowError, match="overflow: 465.0 is outside the finite range"):
        encode_scalar(465.0, "e4m3", overflow="error")
    with pytest.raises(ValueError, match="overflow: 'inf' needs a format with Inf"):
        encode_scalar(1.0, "e4m3", overflow="inf")


def test_e5m2_ieee_overflow():
    assert codes([61439, 61440, math.inf, -math.inf], "e5m2", overflow="inf") == [0x7B, 0x7C, 0x7C, 0xFC]
    assert codes([61440, math.inf], "e5m2") == [0x7B, 0x7B]


def test_nan_policies():
    nan = float("nan")
    with pytest.raises(ValueError, match="nan: NaN input cannot be encoded in 'e2m1'.*nan='max'"):
        encode_scalar(nan, "e2m1")
    assert encode_scalar(nan, "e2m1", nan="max") == 0x7
    assert encode_scalar(-nan, "e2m1", nan="max") == 0x7
    assert encode_scalar(nan, "e2m1", nan="zero") == 0x0
    assert encode_scalar(nan, "e2m1", nan="signed_zero") == 0x8  # ml_dtypes: +NaN -> -0
    assert encode_scalar(-nan, "e2m1", nan="signed_zero") == 0x0
    assert encode_scalar(nan, "e4m3") == 0x7F and encode_scalar(-nan, "e4m3") == 0xFF
    assert encode_scalar(nan, "e5m2") == 0x7E  # the quiet NaN
    with pytest.raises(ValueError, match="nan: 'nan' needs a format with NaN"):
        encode_scalar(1.0, "int4", nan="nan")


def test_negative_zero_policies():
    assert codes([-0.0, -0.1, -1e-30], "e2m1") == [0x8, 0x8, 0x8]
    assert codes([-0.0, -0.1], "e2m1", neg_zero="flush") == [0x0, 0x0]
    assert codes([-0.0, -0.4], "int4") == [0x0, 0x0]
    assert encode_scalar(-0.0, "ue4m3") == 0x00
    assert encode_scalar(-1.0, "ue4m3") == 0x00  # unsigned: negatives saturate to the smallest value


def test_float64_is_rounded_exactly_not_through_float32():
    # 1.25 + 2^-40 rounds up under RNE; through float32 it would become the tie 1.25 and go down.
    x = 1.25 + 2.0**-40
    assert np.float32(x) == np.float32(1.25)
    assert encode_scalar(x, "e2m1") == 0x3
    assert fp4spec.encode(np.array([x]), "e2m1").tolist() == [0x3]


def test_stochastic_rounding_threshold():
    # 0.3 lies at frac = 0.6 between 0 and 0.5: away iff 0.6 * 256 + r >= 256, i.e. r >= 103
    got = [encode_scalar(0.3, "e2m1", "sr", r=r) for r in (0, 102, 103, 255)]
    assert got == [0x0, 0x0, 0x1, 0x1]
    assert [encode_scalar(0.3, "e2m1", "sr", r=r, sr_bits=1) for r in (0, 1)] == [0x0, 0x1]
    assert encode_scalar(0.5, "e2m1", "sr", r=255) == 0x1  # exact values never move
    with pytest.raises(ValueError, match=r"rbits: random integer 256 is not in \[0, 2\*\*8\)"):
        encode_scalar(0.3, "e2m1", "sr", r=256)


def test_stochastic_rounding_is_unbiased_up_to_truncation():
    fmt = fp4spec.get_format("e2m1")
    for x in (0.3, 1.1, 2.7, 4.9, -3.3):
        mean = np.mean([fmt.values[encode_scalar(x, fmt, "sr", r=r)] for r in range(256)])
        # E[Q] = lo + floor(frac * 256) / 256 * step: within one 256th of a step of x
        assert abs(mean - x) <= 2 / 256


def test_choose_neighbour_rejects_unknown_mode():
    with pytest.raises(ValueError, match="rounding: 'nearest' is not one of"):
        choose_neighbour(Fraction(1, 3), Fraction(0), Fraction(1), True, False, "nearest")


def test_magnitude_grid_extension_points():
    assert magnitude_grid(fp4spec.get_format("e2m1"), False)[-1] == 8
    assert magnitude_grid(fp4spec.get_format("e4m3"), False)[-1] == 480
    assert magnitude_grid(fp4spec.get_format("e5m2"), False)[-1] == 65536
    assert magnitude_grid(fp4spec.get_format("int4"), True)[-1] == 9
    assert magnitude_grid(fp4spec.get_format("int4"), False)[-1] == 8
    g = magnitude_grid(fp4spec.get_format("e8m0"), False)
    assert g[0] == Fraction(1, 2**128) and g[1] == Fraction(1, 2**127) and g[-1] == 2**128


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="rounding: 'rn' is not one of"):
        fp4spec.encode(np.array([1.0]), "e2m1", "rn")
    with pytest.raises(ValueError, match="overflow: 'clip' is not one of"):
        fp4spec.encode(np.array([1.0]), "e2m1", overflow="clip")
    with pytest.raises(TypeError, match="x: dtype int64 is not a float dtype"):
        fp4spec.encode(np.array([1, 2]), "e2m1")
    with pytest.raises(ValueError, match="rbits: rounding='sr' needs explicit random bits"):
        fp4spec.encode(np.array([1.0]), "e2m1", "sr")
    with pytest.raises(ValueError, match="rbits: values must be in"):
        fp4spec.encode(np.array([1.0]), "e2m1", "sr", rbits=np.array([256]))
    with pytest.raises(ValueError, match="rbits: shape"):
        fp4spec.encode(np.ones(4), "e2m1", "sr", rbits=np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="rbits: dtype float64"):
        fp4spec.encode(np.ones(4), "e2m1", "sr", rbits=np.zeros(4))
    with pytest.raises(ValueError, match="rbits: only used with rounding='sr'"):
        fp4spec.encode(np.ones(4), "e2m1", rbits=np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="codes: values must be 4-bit codes"):
        fp4spec.decode(np.array([16]), "e2m1")


def test_sr_with_seed_is_reproducible_and_returns_bits():
    x = np.linspace(-5, 5, 1001)
    c1, r1 = fp4spec.encode(x, "e2m1", "sr", seed=7, return_rbits=True)
    c2 = fp4spec.encode(x, "e2m1", "sr", seed=7)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(c1, fp4spec.encode(x, "e2m1", "sr", rbits=r1))
    assert r1.max() < 256 and len(np.unique(r1)) > 100
