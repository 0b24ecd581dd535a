"""The ``rht`` property's inputs do what they claim, and the torch backend (columnwise too) conforms."""

import ml_dtypes
import numpy as np
import pytest

from fp4spec.backends import Capabilities, NumpyBackend
from fp4spec.block_schemes import get_scheme
from fp4spec.conformance import run
from fp4spec.conformance.rht_properties import (RHT_KINDS, _takes_axis, claimed_rhts, rht_shape, rht_tensor,
                                                rhts_for_spec)
from fp4spec.rht import RHT

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_claimed_transforms():
    assert rhts_for_spec("16/fwht-fp32") == [RHT.te(), RHT.from_seed(1016, 16), RHT.te(out_dtype="float32"),
                                            RHT.from_seed(1017, 16, out_dtype="float32")]
    assert rhts_for_spec("32/fwht-fp32/bfloat16") == [RHT.from_seed(1032, 32)]
    assert rhts_for_spec("16/mma:sm90-bf16")[0] == RHT.te(arith="mma:sm90-bf16")
    assert rhts_for_spec("64/mma:sm90-bf16") == [RHT.from_seed(1064, 64, arith="mma:sm90-bf16"),
                                                RHT.from_seed(1065, 64, arith="mma:sm90-bf16", out_dtype="float32")]
    # 16: float64, fwht-fp32, mma (4 each); 32 and 128: float64, fwht-fp32; 64: the three (2 each)
    assert len(claimed_rhts(NumpyBackend().capabilities())) == 3 * 4 + 4 * 2 + 3 * 2
    assert claimed_rhts(Capabilities()) == []


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "nvfp4_2d"])
@pytest.mark.parametrize("size", [16, 32, 64, 128])
def test_shapes_are_whole_blocks_and_rht_rows(scheme, size):
    sch = get_scheme(scheme)
    for kind in RHT_KINDS:
        rows, cols = rht_shape(sch, size, kind)
        assert cols % sch.block_size == 0 and cols % size == 0 and cols >= 2 * size and rows % sch.tile_rows == 0
        x = rht_tensor(np.random.default_rng(0), sch, RHT.from_seed(0, size), kind)
        assert x.dtype == np.float32 and x.shape == (rows, cols) and x.flags.c_contiguous
    with pytest.raises(ValueError, match="kind: 'ties' is not one of"):
        rht_tensor(np.random.default_rng(0), sch, RHT.te(), "ties")


@pytest.mark.parametrize("r", [RHT.te(out_dtype="float32"), RHT.from_seed(3, 64, out_dtype="float32")])
def test_bf16_ties_are_exact_midpoints(r):
    x = rht_tensor(np.random.default_rng(1), get_scheme("nvfp4"), r, "bf16_ties")
    y = r.apply(x)
    low = y.view(np.uint32) & 0xFFFF
    assert np.mean(low == 0x8000) > 0.6  # halfway between two BF16 values (the rest: ordinary values)
    bf = y.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.all((bf.view(np.uint32)[low == 0x8000] >> 16) % 2 == 0)  # RNE: to the even neighbour


def test_element_ties_after_the_transform():
    sch = get_scheme("mxfp4")
    x = rht_tensor(np.random.default_rng(2), sch, RHT.te(out_dtype="float32"), "element_ties")
    y = RHT.te(out_dtype="float32").apply(x).reshape(x.shape[0], -1, 32)
    scaled = y / np.max(np.abs(y), axis=-1, keepdims=True) * 6  # the MX scale puts each block's amax at 6
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    assert np.isin(np.abs(scaled), mids).mean() > 0.3


@pytest.mark.parametrize("r", [RHT.te(), RHT.from_seed(5, 32)])
def test_wide_span_separates_the_arithmetics(r):
    x = rht_tensor(np.random.default_rng(3), get_scheme("nvfp4"), r, "wide_span")
    fast = r.apply(x)
    exact = RHT(r.size, r.signs, "float64", r.out_dtype).apply(x)
    assert not np.array_equal(fast.view(np.uint16), exact.view(np.uint16))


def test_specials_cover_signed_zeros_and_nonfinite():
    x = rht_tensor(np.random.default_rng(4), get_scheme("nvfp4"), RHT.te(), "specials")
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    assert (x == 0).any() and np.signbit(x[x == 0]).any()
    assert (np.abs(x) > 1e38).any() and ((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)).any()
    y = RHT.te(out_dtype="float32").apply(x)
    assert np.isinf(y[np.isfinite(x).all(axis=1)]).any()  # overflow inside the butterfly


def test_torch_backend_conforms_rowwise_and_columnwise():
    from fp4spec.backends.torch_backend import TorchBackend

    assert _takes_axis(TorchBackend()) and not _takes_axis(NumpyBackend())
    report = run(TorchBackend, schemes=["nvfp4", "mxfp4"], properties=["rht"], max_examples=3)
    assert report.ok and {r.status for r in report.results} == {"PASS"} and len(report.results) == 4


def test_backend_without_rht_claim_skips():
    class Plain(NumpyBackend):
        name = "plain"

        def capabilities(self):
            return Capabilities(schemes=("nvfp4",), rounding=("rne",))

    (row,) = run(Plain, properties=["rht"]).results
    assert row.status == "SKIP" and "no RHT claimed" in row.reason


@pytest.mark.parametrize("r", [RHT.te(arith="mma:sm90-bf16"), RHT.from_seed(3, 64, arith="mma:sm90-bf16")])
@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_mma_inputs_are_bf16_values(r, scheme):
    for kind in RHT_KINDS:
        x = rht_tensor(np.random.default_rng(6), get_scheme(scheme), r, kind)
        assert x.dtype == np.float32 and np.all((x.view(np.uint32) & 0xFFFF)[~np.isnan(x)] == 0), kind
        r.apply(x)  # accepted (step M1)


@pytest.mark.parametrize("r", [RHT.te(arith="mma:sm90-bf16", out_dtype="float32"),
                               RHT.from_seed(3, 64, arith="mma:sm90-bf16", out_dtype="float32")])
def test_mma_kinds_keep_their_point(r):
    rng = np.random.default_rng(7)
    y = r.apply(rht_tensor(rng, get_scheme("nvfp4"), r, "bf16_ties"))
    assert np.mean((y.view(np.uint32) & 0xFFFF) == 0x8000) > 0.5  # BF16 ties of the output rounding
    y = r.apply(rht_tensor(rng, get_scheme("mxfp4"), r, "element_ties")).reshape(-1, 32)
    scaled = y / np.max(np.abs(y), axis=-1, keepdims=True) * 6
    assert np.isin(np.abs(scaled), [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]).mean() > 0.3
    x = rht_tensor(rng, get_scheme("nvfp4"), r, "specials")
    assert ((x != 0) & (np.abs(x) < 2.0 ** -126)).any()  # BF16 subnormals, not rounded away
    with np.errstate(all="ignore"):
        x = rht_tensor(rng, get_scheme("nvfp4"), r, "wide_span")
        fwht = RHT(r.size, r.signs, "fwht-fp32", r.out_dtype).apply(x)
    assert not np.array_equal(r.apply(x).view(np.uint32), fwht.view(np.uint32))


def test_a_butterfly_claimed_as_mma_fails_with_its_diagnosis():
    import dataclasses

    class ButterflyForMma(NumpyBackend):
        name = "butterfly_for_mma"

        def capabilities(self):
            return dataclasses.replace(super().capabilities(), rht=("16/mma:sm90-bf16",))

        def quantize(self, x, scheme, *, rht=None, **kw):
            q = super().quantize(x, scheme, rht=dataclasses.replace(rht, arith="fwht-fp32"), **kw)
            return q.replace(rht=rht)

    (row,) = run(ButterflyForMma, schemes=["nvfp4"], rounding=["rne"], properties=["rht"], max_examples=5).results
    assert row.status == "FAIL"
    assert any("it equals the result with arith='fwht-fp32'" in n for n in row.counterexample.notes)
