"""E0M3, the sign-magnitude INT4 that Blackwell's kind::mxf4nvf4 MMA reportedly takes, and NV-INT4 with it.

* The format: +-{0, ..., 7}, code = sign << 3 | magnitude, 0x8 is -0; RNE ties go to the even
  magnitude; values past 7 saturate.
* ``nvint4_e0m3`` quantizes to the same values and scales as ``nvint4`` (two's complement codes),
  only the codes (and the sign of zero) differ.
* As an operand of ``sm100-mxf4nvf4`` -- E0M3 x E0M3 and mixed with E2M1, A and B independently
  -- the emulator equals the exact reference bit for bit, and an exact dot product of small
  integers comes out exact; ``int4_sym`` operands are refused with a pointer to E0M3.
"""

import numpy as np
import pytest

import fp4spec
from fp4spec.gemm_reference import matmul_reference
from fp4spec.api.gemm import matmul

E0M3 = fp4spec.get_format("e0m3")


def test_codes_and_values():
    assert list(E0M3.values[:8]) == list(range(8)) and list(E0M3.values[9:]) == [-k for k in range(1, 8)]
    assert E0M3.values[8] == 0 and np.signbit(E0M3.values[8])
    assert (E0M3.kind, E0M3.bits, E0M3.max, E0M3.min_positive) == ("uniform", 4, 7.0, 1.0)


def test_rounding_ties_to_even_magnitude_and_saturation():
    x = np.array([0.5, 1.5, 2.5, 6.5, -0.5, -2.5, 7.4, 100.0, -100.0, -0.2], np.float32)
    assert list(fp4spec.encode(x, "e0m3")) == [0x0, 0x2, 0x2, 0x6, 0x8, 0xA, 0x7, 0x7, 0xF, 0x8]
    assert list(fp4spec.encode(x, "e0m3", "rna")[:4]) == [0x1, 0x2, 0x3, 0x7]


def test_nvint4_e0m3_has_nvint4_values_in_sign_magnitude_codes():
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    a, b = fp4spec.quantize(x, "nvint4_e0m3"), fp4spec.quantize(x, "nvint4")
    assert np.array_equal(a.scales, b.scales) and a.global_scale == b.global_scale
    va = fp4spec.get_format("e0m3").values[a.codes]
    vb = fp4spec.get_format("int4_sym").values[b.codes]
    assert np.array_equal(va, vb)  # -0 == 0
    assert np.array_equal(fp4spec.dequantize(a), fp4spec.dequantize(b))
    neg = vb < 0
    assert np.array_equal(a.codes[neg], 0x8 | (-vb[neg]).astype(np.uint8))  # sign | magnitude
    assert np.array_equal(b.codes[neg], (vb[neg].astype(np.int8).view(np.uint8) & 0xF))  # two's complement


@pytest.mark.parametrize("a_scheme, b_scheme", [("nvint4_e0m3", "nvint4_e0m3"), ("nvint4_e0m3", "nvfp4"),
                                                ("nvfp4", "nvint4_e0m3")])
def test_sm100_mxf4nvf4_takes_e0m3_operands(a_scheme, b_scheme):
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((8, 128)).astype(np.float32)
    xb = rng.standard_normal((6, 128)).astype(np.float32)
    qa, qb = fp4spec.quantize(xa, a_scheme), fp4spec.quantize(xb, b_scheme)
    r = matmul_reference(qa, qb, accumulator="sm100-mxf4nvf4")
    e = matmul(qa, qb, accumulator="sm100-mxf4nvf4")
    assert np.array_equal(r.view(np.uint32), e.view(np.uint32))
    exact = matmul(qa, qb, accumulator="exact")
    assert np.allclose(e, exact, rtol=1e-5, atol=1e-6)  # a truncating datapath, not another result


def test_integer_dot_product_is_exact():
    """Tensor amax 448 * 7, so S_enc = S_dec = 1: the first block's scale is 448, the others' 1, every code
    +7. Products of small integers and powers of two: the truncating datapath loses nothing."""
    x = np.full((1, 64), 7.0, np.float32)
    x[0, 0] = 448 * 7  # tensor amax: S_enc = 448 * 7 / amax = 1
    q = fp4spec.quantize(x, "nvint4_e0m3")
    assert q.global_scale == 1.0
    out = matmul(q, q, accumulator="sm100-mxf4nvf4")
    assert out[0, 0] == float(fp4spec.matmul(q, q, accumulator="exact")[0, 0])


def test_two_complement_int4_is_refused_with_a_pointer():
    q = fp4spec.quantize(np.ones((1, 64), np.float32), "nvint4")
    with pytest.raises(ValueError, match="scheme 'nvint4_e0m3'"):
        matmul(q, q, accumulator="sm100-mxf4nvf4")
