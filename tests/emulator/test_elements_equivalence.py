"""Two implementations, one truth: the vectorized emulator equals the scalar reference.

Exhaustive over every code of every format and every finite bfloat16 value, for every
rounding mode; hypothesis-generated float32/float64 inputs for every mode and policy.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp4spec
from fp4spec.emulator import encode
from fp4spec.elements import encode_scalar
from fp4spec.rounding import ROUNDING_MODES

FORMATS = list(fp4spec.formats)
DETERMINISTIC = [m for m in ROUNDING_MODES if m != "sr"]


def nan_policy(fmt):
    return "auto" if fp4spec.get_format(fmt).has_nan else "max"


ALL_BF16 = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)
FINITE_BF16 = ALL_BF16[np.isfinite(ALL_BF16.astype(np.float32))]
FINITE_BF16_F64 = FINITE_BF16.astype(np.float64).tolist()
SR_PATTERN = (np.arange(len(FINITE_BF16)) * 37 % 256).astype(np.uint8)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ROUNDING_MODES)
def test_every_code_round_trips(fmt, mode):
    """encode(decode(c)) == c for every finite code, decode(encode(v)) == v for every value."""
    f = fp4spec.get_format(fmt)
    codes = np.array(f.finite_codes)
    values = f.values[codes]
    rbits = np.full(len(values), 255, np.uint8) if mode == "sr" else None
    got = encode(values, f, mode, rbits=rbits)
    np.testing.assert_array_equal(got, codes)
    for c, v in zip(codes.tolist(), values.tolist()):
        assert encode_scalar(v, f, mode, r=255 if mode == "sr" else None) == c


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ROUNDING_MODES)
def test_every_finite_bfloat16(fmt, mode):
    nan = nan_policy(fmt)
    rbits = SR_PATTERN if mode == "sr" else None
    got = encode(FINITE_BF16, fmt, mode, rbits=rbits, nan=nan)
    expected = [encode_scalar(v, fmt, mode, r=None if rbits is None else int(rbits[i]), nan=nan)
                for i, v in enumerate(FINITE_BF16_F64)]
    mismatch = np.flatnonzero(got != np.array(expected))
    assert mismatch.size == 0, (
        f"{mismatch.size} mismatches, first x={FINITE_BF16_F64[mismatch[0]]!r}: "
        f"expected {expected[mismatch[0]]:#x}, got {got[mismatch[0]]:#x}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_and_inf_inputs_every_policy(fmt):
    f = fp4spec.get_format(fmt)
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    overflow_policies = ["saturate", "error"] + (["nan"] if f.has_nan else []) + (["inf"] if f.has_inf else [])
    nan_policies = (["nan"] if f.has_nan else []) + ["max"] + (["zero", "signed_zero"] if f.has_zero else [])
    for ov in overflow_policies:
        for nan in nan_policies:
            for nz in ("preserve", "flush"):
                for mode in DETERMINISTIC:
                    kw = dict(overflow=ov, nan=nan, neg_zero=nz)
                    try:
                        expected = [encode_scalar(float(v), f, mode, **kw) for v in x]
                    except OverflowError:
                        with pytest.raises(OverflowError):
                            encode(x, f, mode, **kw)
                        continue
                    np.testing.assert_array_equal(encode(x, f, mode, **kw), expected, err_msg=str((mode, kw)))


def _policy_strategy(fmt):
    f = fp4spec.get_format(fmt)
    return st.fixed_dictionaries({
        "overflow": st.sampled_from(["saturate"] + (["nan"] if f.has_nan else []) + (["inf"] if f.has_inf else [])),
        "nan": st.sampled_from((["nan"] if f.has_nan else []) + ["max"] + (["zero", "signed_zero"] if f.has_zero else [])),
        "neg_zero": st.sampled_from(["preserve", "flush"]),
    })


@st.composite
def cases(draw, width):
    fmt = draw(st.sampled_from(FORMATS))
    mode = draw(st.sampled_from(ROUNDING_MODES))
    sr_bits = draw(st.integers(1, 12))
    policy = draw(_policy_strategy(fmt))
    f = fp4spec.get_format(fmt)
    # values concentrated around the format's range, plus anything
    scale = draw(st.sampled_from([f.max, f.min_positive, 1.0, f.max * 2]))
    near = st.floats(-2.25, 2.25, width=width).map(lambda v: v * scale)
    xs = draw(st.lists(st.one_of(near, st.floats(width=width)), min_size=1, max_size=40))
    rbits = draw(st.lists(st.integers(0, (1 << sr_bits) - 1), min_size=len(xs), max_size=len(xs)))
    return fmt, mode, sr_bits, policy, xs, rbits


@pytest.mark.parametrize("width,dtype", [(32, np.float32), (64, np.float64)])
def test_hypothesis_float_inputs(width, dtype):
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases(width))
    def check(case):
        fmt, mode, sr_bits, policy, xs, rbits = case
        x = np.array(xs, dtype=dtype)
        r = np.array(rbits, np.uint32) if mode == "sr" else None
        got = encode(x, fmt, mode, rbits=r, sr_bits=sr_bits, **policy)
        expected = [encode_scalar(float(v), fmt, mode, r=None if r is None else int(r[i]), sr_bits=sr_bits, **policy)
                    for i, v in enumerate(x)]
        np.testing.assert_array_equal(got, expected)

    check()


def test_float16_and_python_scalars():
    x16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    x16 = x16[np.isfinite(x16)]
    got = encode(x16, "e2m1")
    expected = [encode_scalar(float(v), "e2m1") for v in x16]
    np.testing.assert_array_equal(got, expected)
    assert int(fp4spec.encode(2.5, "e2m1")) == 0x4
    assert fp4spec.encode(2.5, "e2m1").shape == ()


def test_shapes_are_preserved():
    x = np.linspace(-7, 7, 24, dtype=np.float32).reshape(2, 3, 4)
    got = encode(x, "e2m1")
    assert got.shape == x.shape and got.dtype == np.uint8
    np.testing.assert_array_equal(got.ravel(), encode(x.ravel(), "e2m1"))
    rb = np.arange(4, dtype=np.uint8)  # broadcast along the last axis
    assert encode(x, "e2m1", "sr", rbits=rb).shape == x.shape


def test_decode_is_the_value_table():
    for fmt in FORMATS:
        f = fp4spec.get_format(fmt)
        codes = np.arange(1 << f.bits)
        got = fp4spec.decode(codes, f)
        assert all((math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
                   for a, b in zip(got, f.values))
