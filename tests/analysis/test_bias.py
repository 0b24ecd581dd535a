from fractions import Fraction as F

import numpy as np
import pytest

import fp4spec
from fp4spec.analysis import attenuation, grid_point_bias, rounding_interval, scheme_bias, shrinkage_bias

from ._helpers import quantize_api


def test_e2m1_exact_shrinkage_bias():
    b = shrinkage_bias("e2m1", exact=True)
    assert b == {F(1, 2): 0, F(1): 0, F(3, 2): 0, F(2): F(-1, 8), F(3): 0, F(4): F(-1, 4)}
    assert all(isinstance(k, F) and isinstance(v, F) for k, v in b.items())


def test_e2m1_float_values():
    assert shrinkage_bias("e2m1") == {0.5: 0.0, 1.0: 0.0, 1.5: 0.0, 2.0: -0.125, 3.0: 0.0, 4.0: -0.25}


@pytest.mark.parametrize("fmt", ["e1m2", "e1m2_b1", "int4", "int4_sym", "s1p2"])
def test_uniform_grids_have_no_bias(fmt):
    b = shrinkage_bias(fmt, exact=True)
    assert b and all(v == 0 for v in b.values())


def test_uniform_grid_points():
    assert list(shrinkage_bias("e1m2")) == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert list(shrinkage_bias("int4_sym")) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_rna_equals_rne_and_directed_modes():
    assert shrinkage_bias("e2m1", "rna") == shrinkage_bias("e2m1", "rne")
    # toward zero: interval [v, next) -> bias (v - next) / 2
    assert shrinkage_bias("e2m1", "rtz", exact=True)[F(4)] == F(-1)
    assert shrinkage_bias("e2m1", "rdn") == shrinkage_bias("e2m1", "rtz")
    assert shrinkage_bias("e1m2", "rup", exact=True)[F(2)] == F(1, 4)


def test_bias_is_expected_error_of_dense_uniform_samples():
    # the closed form against an empirical mean over a fine uniform grid of inputs
    lo, hi = rounding_interval(F(3), F(4), F(6), "rne")
    assert (lo, hi) == (F(7, 2), F(5))
    x = np.linspace(float(lo), float(hi), 200001)[1:-1]
    q = fp4spec.decode(fp4spec.encode(x, "e2m1"), "e2m1")
    assert np.all(q == 4.0)
    assert abs((q - x).mean() - (-0.25)) < 1e-6


def test_bias_errors_name_argument():
    with pytest.raises(ValueError, match="rounding"):
        shrinkage_bias("e2m1", "sr")
    with pytest.raises(ValueError, match="format"):
        shrinkage_bias("e9m9")


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4_sym"])
def test_eta_is_one_on_grid(fmt):
    f = fp4spec.get_format(fmt)
    x = np.tile(np.array([float(v) for v, _ in f.grid]), 7)
    xq = fp4spec.decode(fp4spec.encode(x, fmt), fmt)
    assert attenuation(x, xq) == 1.0


def test_eta_is_least_squares_gain():
    x = np.random.default_rng(1).standard_normal(1000)
    assert attenuation(x, 0.75 * x) == pytest.approx(0.75, abs=1e-15)
    noise = np.random.default_rng(2).standard_normal(1000)
    alpha = attenuation(x, 0.5 * x + noise)
    assert alpha == pytest.approx(np.linalg.lstsq(x[:, None], 0.5 * x + noise, rcond=None)[0][0], rel=1e-12)


def test_eta_errors():
    with pytest.raises(ValueError, match="xq"):
        attenuation(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="x"):
        attenuation(np.zeros(3), np.zeros(3))


def test_scheme_bias_with_callable(e2m1_q, e1m2_q):
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    a, b = scheme_bias(x, e2m1_q), scheme_bias(x, e1m2_q)
    assert a["eta"] < 0.998 and abs(b["eta"] - 1) < 0.002
    assert a["scheme"] == "e2m1_b16"


@pytest.mark.parametrize("scheme", ["nvfp4", "ufp4"])
def test_scheme_bias_on_quantized_input_is_one(scheme):
    quantize = quantize_api()
    x = np.random.default_rng(3).standard_normal((16, 256)).astype(np.float32)
    y = np.asarray(fp4spec.dequantize(quantize(x, scheme)), dtype=np.float32)
    assert scheme_bias(y, scheme)["eta"] == pytest.approx(1.0, abs=1e-3)


def test_grid_point_bias_units():
    # scale 2: inputs 3.6 and 4.4 (grid units 1.8, 2.2) both round to g = 2
    x = np.array([3.6, 4.4, -3.6, 1.0])
    xq = np.array([4.0, 4.0, -4.0, 0.0])
    g = np.array([2.0, 2.0, -2.0, 0.0])
    b = grid_point_bias(x, xq, g)
    assert list(b) == [2.0]
    mean, count = b[2.0]
    assert count == 3 and mean == pytest.approx((0.2 - 0.2 + 0.2) / 3)


def test_grid_point_bias_matches_exact_for_uniform_inputs():
    # inputs uniform over [0, 5] in grid units, scale 1: measured per-point bias -> exact
    x = np.linspace(0, 5, 500001)
    g = fp4spec.decode(fp4spec.encode(x, "e2m1"), "e2m1")
    b = grid_point_bias(x, g, g)
    exact = shrinkage_bias("e2m1")
    for v in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0):
        assert b[v][0] == pytest.approx(exact[v], abs=1e-4)
