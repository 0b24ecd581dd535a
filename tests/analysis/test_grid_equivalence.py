"""The facts the uniform-grid proposal (docs/proposal.md) rests on, checked exactly."""

import ml_dtypes
import numpy as np
import pytest

import fp4spec


def _values(name):
    return sorted({v for v, _ in fp4spec.get_format(name).grid})


def test_uniform_grids_equal_up_to_powers_of_two():
    e1m2 = _values("e1m2")
    assert _values("int4_sym") == [2 * v for v in e1m2]
    assert _values("s1p2") == [v / 2 for v in e1m2]
    assert _values("e1m2_b1") == _values("s1p2")
    assert e1m2 == [k / 2 for k in range(-7, 8)]


def test_e4m3_scale_same_mantissa_for_amax_over_3_5_and_7():
    amax = np.random.default_rng(0).lognormal(0, 1.5, 20000).astype(np.float32)
    a = (amax / np.float32(3.5)).astype(np.float32)
    b = (amax / np.float32(7.0)).astype(np.float32)
    normal = (b >= 2.0 ** -6) & (a <= 448)
    ea = a[normal].astype(ml_dtypes.float8_e4m3fn)
    eb = b[normal].astype(ml_dtypes.float8_e4m3fn)
    assert np.all(ea.astype(np.float64) == 2 * eb.astype(np.float64))
    # same 3 mantissa bits, exponent field one apart
    ca, cb = ea.view(np.uint8), eb.view(np.uint8)
    assert np.all((ca & 7) == (cb & 7)) and np.all((ca >> 3) == (cb >> 3) + 1)
    assert normal.mean() > 0.9


@pytest.mark.parametrize("name", ["e1m2", "int4_sym", "s1p2"])
def test_rne_ties_on_uniform_grid_fall_on_odd_half_steps(name):
    f = fp4spec.get_format(name)
    step = _values(name)[-1] / 7
    for k in range(0, 7):
        tie = (k + 0.5) * step
        q = fp4spec.decode(fp4spec.encode(np.array([tie]), name), name)[0]
        assert q / step == (k if k % 2 == 0 else k + 1)
    assert f.max == 7 * step
