import math

import ml_dtypes
import numpy as np
import pytest

from fp4spec.rht import TE_SIGNS, hadamard, inverse_rht, rht, rht_matrix, rht_signs


@pytest.mark.parametrize("size", [16, 32, 64, 128])
def test_hadamard_is_sylvester(size):
    h = hadamard(size).astype(np.int64)
    assert np.array_equal(h @ h, size * np.eye(size, dtype=np.int64))
    assert np.array_equal(h, h.T)
    assert h[3, 5] == (-1) ** bin(3 & 5).count("1")
    half = hadamard(size // 2) if size > 16 else None
    if half is not None:
        assert np.array_equal(h, np.block([[half, half], [half, -half]]))


def test_te_signs_preset():
    assert tuple(rht_signs(16, signs="te")) == TE_SIGNS
    mask = sum(1 << i for i, s in enumerate(TE_SIGNS) if s == -1)
    assert mask == 0xD7E8


def test_te_definition_single_row():
    # y_j = 1/4 * sum_i s_i x_i H[i][j] (schemes.md section 4, step 4)
    x = np.arange(16, dtype=np.float32) - 7.5
    h = hadamard(16)
    want = np.array([sum(TE_SIGNS[i] * float(x[i]) * int(h[i, j]) for i in range(16)) / 4 for j in range(16)])
    assert np.array_equal(rht(x, signs="te"), want.astype(np.float32))


def test_seeded_signs_rule_and_reproducible():
    s = rht_signs(32, seed=7)
    bits = np.random.default_rng(7).integers(0, 2, 32)
    assert np.array_equal(s, 1 - 2 * bits)
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    assert np.array_equal(rht(x, 32, seed=7), rht(x, 32, seed=7))
    assert not np.array_equal(rht(x, 32, seed=7), rht(x, 32, seed=8))


@pytest.mark.parametrize("size", [16, 32, 64, 128])
@pytest.mark.parametrize("axis", [-1, 0])
def test_orthogonal_roundtrip_and_norms(size, axis):
    x = np.random.default_rng(size).standard_t(3, (256, 256)).astype(np.float32)
    y = rht(x, size, seed=1, axis=axis)
    assert y.dtype == np.float32 and y.shape == x.shape
    back = inverse_rht(y, size, seed=1, axis=axis)
    eps = np.finfo(np.float32).eps
    # within float32 rounding of the output (two roundings, relative to the block norm)
    assert np.max(np.abs(back - x)) <= 4 * eps * np.max(np.abs(x))
    moved = np.moveaxis(x, axis, -1).reshape(-1, size).astype(np.float64)
    ymoved = np.moveaxis(y, axis, -1).reshape(-1, size).astype(np.float64)
    assert np.allclose(np.linalg.norm(moved, axis=1), np.linalg.norm(ymoved, axis=1), rtol=4 * eps, atol=0)


def test_float64_roundtrip_is_tight():
    x = np.random.default_rng(0).standard_normal((8, 128))
    y = rht(x, 128, seed=3)
    assert y.dtype == np.float64
    assert np.max(np.abs(inverse_rht(y, 128, seed=3) - x)) < 1e-14


def test_matches_matrix_form():
    x = np.random.default_rng(0).standard_normal((4, 64))
    t = rht_matrix(64, seed=5)
    assert np.allclose(rht(x, 64, seed=5), (x.reshape(4, 1, 64) @ t).reshape(4, 64), rtol=0, atol=1e-14)
    assert np.allclose(t @ t.T, np.eye(64), atol=1e-15)


def test_bfloat16_output_is_rounded_float64_result():
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    y = rht(x, 16, signs="te", out_dtype="bfloat16")
    assert y.dtype == ml_dtypes.bfloat16
    exact = rht(x.astype(np.float64), 16, signs="te")
    assert np.array_equal(y, exact.astype(ml_dtypes.bfloat16))


def test_axis_and_leading_dims():
    x = np.random.default_rng(0).standard_normal((2, 32, 3)).astype(np.float32)
    y = rht(x, 16, seed=0, axis=1)
    want = np.moveaxis(rht(np.moveaxis(x, 1, -1), 16, seed=0), -1, 1)
    assert np.array_equal(y, want)


@pytest.mark.parametrize("kwargs,match", [
    ({"size": 8, "seed": 0}, "size"),
    ({"size": 48, "seed": 0}, "size"),
    ({"seed": 0, "out_dtype": "float16"}, "out_dtype"),
    ({}, "seed, signs"),
    ({"seed": 0, "signs": "te"}, "seed, signs"),
    ({"signs": "nope"}, "signs"),
    ({"size": 32, "signs": "te"}, "signs"),
    ({"signs": [1] * 15}, "signs"),
    ({"signs": [2] * 16}, "signs"),
    ({"seed": 0, "axis": 2}, "axis"),
])
def test_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rht(np.zeros((2, 128), np.float32), **kwargs)


def test_length_not_multiple():
    with pytest.raises(ValueError, match="not a multiple of size 16"):
        rht(np.zeros((2, 40)), 16, seed=0)
    with pytest.raises(ValueError, match="not a multiple"):
        inverse_rht(np.zeros(40), 16, seed=0)


def test_energy_of_a_spike_spreads_evenly():
    x = np.zeros(16)
    x[5] = 8.0
    y = rht(x, 16, signs="te")
    assert np.all(np.abs(y) == 2.0) and math.isclose(float(np.sum(y * y)), 64.0)
