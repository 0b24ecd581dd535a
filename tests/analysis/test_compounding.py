import numpy as np
import pytest

from fp4spec.analysis import attenuation_vs_depth

from ._helpers import block_quantizer, quantize_api


def identity(x):
    return np.asarray(x, dtype=np.float64)


def shrink(x):
    return 0.9 * np.asarray(x, dtype=np.float64)


def test_identity_chain_has_no_attenuation():
    c = attenuation_vs_depth([identity], depth=3, width=32, batch=16)["identity"]
    assert np.allclose(c.eta, 1, atol=1e-6) and np.allclose(c.end_to_end, 1, atol=1e-5)


@pytest.mark.parametrize("rht", [None, 16])
def test_shrink_compounds(rht):
    c = attenuation_vs_depth([shrink], depth=4, width=32, batch=16, rht=rht)["shrink"]
    # both operands shrink: 0.81 per layer
    assert np.allclose(c.eta, 0.81, atol=1e-6)
    assert np.allclose(c.cumulative, 0.81 ** np.arange(1, 5), rtol=1e-5)
    assert np.allclose(c.end_to_end, c.cumulative, rtol=1e-4)


def test_e2m1_attenuates_uniform_does_not():
    res = attenuation_vs_depth([block_quantizer("e2m1"), block_quantizer("e1m2")], depth=8, width=128, batch=128)
    fp, uni = res["e2m1_b16"], res["e1m2_b16"]
    assert fp.cumulative[-1] < 0.96
    assert abs(uni.cumulative[-1] - 1) < 0.02


def test_errors():
    with pytest.raises(ValueError, match="depth"):
        attenuation_vs_depth([identity], depth=0)
    with pytest.raises(ValueError, match="size"):
        attenuation_vs_depth([identity], depth=1, rht=12)


def test_real_schemes_attenuation():
    quantize_api()
    res = attenuation_vs_depth(["nvfp4", "ufp4"], depth=4, width=128, batch=64)
    assert res["nvfp4"].cumulative[-1] < res["ufp4"].cumulative[-1]
