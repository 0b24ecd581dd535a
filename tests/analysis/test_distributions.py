import numpy as np
import pytest

from fp4spec.analysis.distributions import DISTRIBUTIONS, sample


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_reproducible_float32(name):
    a, b = sample(name, (16, 128), seed=3), sample(name, (16, 128), seed=3)
    assert a.dtype == np.float32 and a.shape == (16, 128)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, sample(name, (16, 128), seed=4))


def test_distributions_are_independent_for_one_seed():
    assert not np.allclose(sample("gaussian", (64,), 0), sample("channel_outliers", (64,), 0))


def test_outlier_models():
    x = sample("channel_outliers", (512, 256), 0)
    col_rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=0))
    assert np.sum(col_rms > 10) == 256 // 64
    y = sample("sparse_outliers", (512, 256), 0)
    frac = np.mean(np.abs(y) >= 16)
    assert 0.5 / 256 < frac < 2 / 256


def test_errors():
    with pytest.raises(ValueError, match="distribution"):
        sample("cauchy")
    with pytest.raises(ValueError, match="seed"):
        sample("gaussian", seed=-1)
