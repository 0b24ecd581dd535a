"""MS-EDEN: the scalar reference equals the emulator; the correction makes the estimate unbiased.

* fp4spec.eden (scalar, per group) == fp4spec.emulator.eden (vectorized) bit for bit: random,
  heavy-tailed, all-zero and tiny tensors, group sizes 16 to 128, several ``sr_bits``.
* After a random rotation, <Q(y), y> / <y, y> averages to 1 (the EDEN property; round-to-nearest
  NVFP4 stays below); the result is an NVFP4 tensor (dequantize, matmul).
* Arguments are checked by name.
"""

import numpy as np
import pytest

import fp4spec
from fp4spec import eden
from fp4spec.analysis import attenuation
from fp4spec.emulator.eden import ms_eden_quantize
from fp4spec.rht import rht


def _rbits(x, seed, sr_bits=8):
    return np.random.default_rng(seed).integers(0, 1 << sr_bits, (x.shape[0], x.shape[1] // 16))


@pytest.mark.parametrize("group", [16, 32, 128])
@pytest.mark.parametrize("sr_bits", [1, 8, 12])
def test_reference_equals_emulator(group, sr_bits):
    rng = np.random.default_rng(group + sr_bits)
    for x in (rng.standard_normal((3, 256)), rng.standard_t(3, (3, 256)) * 1e-30, np.zeros((2, 128)),
              np.where(rng.random((2, 256)) < 0.8, 0.0, rng.standard_normal((2, 256)) * 1e4)):
        x = np.asarray(x, np.float32)
        rb = _rbits(x, group, sr_bits)
        a = eden.quantize_reference(x, group=group, rbits=rb, sr_bits=sr_bits)
        b = ms_eden_quantize(x, group=group, rbits=rb, sr_bits=sr_bits)
        assert a.equals(b)


def test_the_correction_makes_the_estimate_unbiased():
    rng = np.random.default_rng(0)
    x = rng.standard_t(3, (8, 256)).astype(np.float32)
    eta_eden, eta_rtn = [], []
    for seed in range(40):
        y = rht(x, 128, seed=seed).astype(np.float32)
        q = ms_eden_quantize(y, group=128, rbits=_rbits(y, 1000 + seed))
        eta_eden.append(attenuation(y, fp4spec.dequantize(q)))
        eta_rtn.append(attenuation(y, fp4spec.dequantize(fp4spec.quantize(y, "nvfp4"))))
    assert abs(np.mean(eta_eden) - 1) < 3e-3 < 1 - np.mean(eta_rtn)


def test_an_nvfp4_tensor():
    x = np.random.default_rng(1).standard_normal((4, 128)).astype(np.float32)
    q = ms_eden_quantize(x, group=128, rbits=_rbits(x, 2))
    d = np.float32(np.float32(np.max(np.abs(x)) / np.float32(255.99)) / np.float32(96 / 17))
    assert q.scheme.name == "nvfp4" and q.global_scale == d
    assert fp4spec.matmul(q, q, accumulator="sm100-mxf4nvf4").shape == (4, 4)


@pytest.mark.parametrize("kwargs, words", [
    ({"group": 24}, "group: 24 is not a positive multiple of 16"),
    ({"group": 256}, "is not a multiple of group=256"),
    ({"rbits": np.zeros((2, 3), int)}, "rbits: expected integers in \\[0, 2\\^8\\) of shape \\(2, 8\\)"),
    ({"sr_bits": 0}, "sr_bits: 0 is not an integer in \\[1, 32\\]"),
])
def test_argument_errors(kwargs, words):
    x = np.ones((2, 128), np.float32)
    args = {"group": 128, "rbits": np.zeros((2, 8), int), **kwargs}
    with pytest.raises(ValueError, match=words):
        ms_eden_quantize(x, **args)
    with pytest.raises(ValueError, match="x: MS-EDEN is defined for finite input"):
        ms_eden_quantize(np.full((2, 128), np.inf, np.float32), group=128, rbits=np.zeros((2, 8), int))
