"""The RHT's NaN outputs are pinned (positive NaN 0x7FFFFFFF, BF16 0x7FFF) in every arithmetic
and backend: the sign of a NaN is the host's otherwise, and E4M3 / E5M2 codes keep it
(`fp4spec conform --backend torch --scheme mxfp8_e4m3 --property rht` departed on it)."""

import numpy as np
import pytest

import fp4spec
from fp4spec.rht import NAN_BITS, rht

NEG_NAN = np.array([0xFFC00000], np.uint32).view(np.float32)[0]


def nan_rows():
    x = np.ones((3, 16), np.float32)
    x[0] = np.nan
    x[1] = NEG_NAN
    x[2, 3] = NEG_NAN
    return x


def bits(y):
    y = np.asarray(y)
    return y.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[y.dtype.itemsize])


@pytest.mark.parametrize("arith", ["fwht-fp32", "float64", "mma:sm90-bf16"])
@pytest.mark.parametrize("out", ["float32", "bfloat16", "float64"])
def test_every_nan_output_is_the_pinned_nan(arith, out):
    y = rht(nan_rows(), 16, signs="te", out_dtype=out, arith=arith)
    want = {"float32": NAN_BITS, "bfloat16": NAN_BITS >> 16,
            "float64": np.array([NAN_BITS], np.uint32).view(np.float32).astype(np.float64).view(np.uint64)[0]}[out]
    nan = np.isnan(np.asarray(y, np.float64))
    assert nan.sum() == 48 and (bits(y)[nan] == want).all()


@pytest.mark.parametrize("scheme", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"])
def test_nan_block_codes_after_rht_every_backend(scheme):
    x = np.concatenate([nan_rows(), nan_rows()], axis=1)
    want = fp4spec.quantize(x, scheme, rht="te")
    nan_code = {"mxfp8_e4m3": 0x7F, "mxfp8_e5m2": 0x7E, "mxfp4": 0x0}[scheme]
    assert (np.asarray(want.codes)[:2, :16] == nan_code).all()
    torch = pytest.importorskip("torch")
    got = fp4spec.quantize(torch.from_numpy(x), scheme, rht="te", backend="torch")
    assert got.equals(want)
    y = fp4spec.backends.torch_backend.apply_rht(torch.from_numpy(nan_rows()), fp4spec.RHT.te())
    assert (y.view(torch.int16).numpy().view(np.uint16)[:2] == NAN_BITS >> 16).all()
    assert y.dtype == torch.bfloat16
