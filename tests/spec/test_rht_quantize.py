"""``fp4spec.quantize(..., rht=)``: the RHT as step 3 of the normative algorithm (numpy, the emulator).

x' = rht.apply(x prepared, axis=-1) as float32, after padding; the tensor amax is over x', rbits
index the elements of x'; the QuantizedTensor records the RHT and holds rotated values.
"""


import ml_dtypes
import numpy as np
import pytest

import fp4spec
from fp4spec.backends import Backend, BackendError, Capabilities, NumpyBackend
from fp4spec.rht import RHT, TE_SIGNS

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _x(seed=0, shape=(8, 64), dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, shape) * np.exp2(rng.integers(-4, 4, shape))
    return x.astype(dtype)


def _rotated(x, r: RHT, axis=-1):
    return np.ascontiguousarray(r.apply(x.astype(np.float32), axis=axis).astype(np.float32))


RHTS = [RHT.te(), RHT.from_seed(11, 32), RHT.from_seed(3, 64, out_dtype="float32"),
        RHT.from_seed(5, 16, arith="float64")]


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "nvfp4_2d", "ufp4", "mxfp8_e4m3", "hif4"])
@pytest.mark.parametrize("r", RHTS, ids=lambda r: f"{r.spec}-{r.out_dtype}")
def test_rht_is_a_step_before_the_scheme(scheme, r):
    x = _x(1, (16, 128))
    q = fp4spec.quantize(x, scheme, rht=r)
    ref = fp4spec.quantize(_rotated(x, r), scheme)
    assert q.rht == r and ref.rht is None
    assert q.equals(ref.replace(rht=r)) and not q.equals(ref)  # equals compares the RHT
    if ref.global_scale is not None:  # the tensor amax is over x' (TE: global amax after the RHT)
        assert q.global_scale.view(np.uint32) == ref.global_scale.view(np.uint32)


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_sr_rbits_index_the_rotated_elements(scheme):
    x = _x(2)
    rb = fp4spec.draw_rbits(x.shape, 8, 7)
    q = fp4spec.quantize(x, scheme, rounding="sr", rbits=rb, rht="te")
    ref = fp4spec.quantize(_rotated(x, RHT.te()), scheme, rounding="sr", rbits=rb)
    assert np.array_equal(q.codes, ref.codes) and np.array_equal(q.scales, ref.scales)


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_axis0_runs_the_rht_along_the_blocked_axis(scheme):
    x = _x(3, (64, 6))
    rb = fp4spec.draw_rbits(x.shape, 8, 1)
    q = fp4spec.quantize(x, scheme, axis=0, rht=9, rounding="sr", rbits=rb)
    ref = fp4spec.quantize(np.ascontiguousarray(x.T), scheme, rht=9, rounding="sr", rbits=np.ascontiguousarray(rb.T))
    assert q.axis == 0 and q.shape == x.shape
    assert np.array_equal(q.codes, ref.codes.T) and np.array_equal(q.scales, ref.scales.T)


def test_resolved_forms():
    x = _x(4)
    assert fp4spec.quantize(x, "nvfp4", rht="te").rht == RHT.te()
    assert fp4spec.quantize(x, "nvfp4", rht=5).rht == RHT.from_seed(5)
    assert fp4spec.quantize(x, "nvfp4").rht is None
    for bad in ("TE", 1.0, True, [1] * 16):
        with pytest.raises(ValueError, match="rht: .* is not None, an RHT"):
            fp4spec.quantize(x, "nvfp4", rht=bad)


def test_input_dtypes_are_prepared_first():
    x64 = _x(5, dtype=np.float64)
    q = fp4spec.quantize(x64, "nvfp4", rht="te")
    assert q.equals(fp4spec.quantize(x64.astype(np.float32), "nvfp4", rht="te"))
    xb = x64.astype(ml_dtypes.bfloat16)
    assert fp4spec.quantize(xb, "nvfp4", rht="te").equals(fp4spec.quantize(xb.astype(np.float32), "nvfp4", rht="te"))
    # arith float64 sees the prepared float32 values too, not the float64 input
    r = RHT.te(arith="float64", out_dtype="float64")
    assert fp4spec.quantize(x64, "nvfp4", rht=r).equals(fp4spec.quantize(x64.astype(np.float32), "nvfp4", rht=r))


def test_padding_then_rht():
    x = _x(6, (4, 48))
    q = fp4spec.quantize(x, "mxfp4", pad=True, rht="te")  # padded to 64, then rotated: 48 % 16 == 0
    padded = np.pad(x, ((0, 0), (0, 16)))
    ref = fp4spec.quantize(_rotated(padded, RHT.te()), "mxfp4")
    assert np.array_equal(q.codes, ref.codes) and np.array_equal(q.scales, ref.scales) and q.shape == x.shape
    # a ragged length mixes data and padding in one RHT row: still the padded tensor, rotated
    x = _x(7, (4, 40))
    q = fp4spec.quantize(x, "nvfp4", pad=True, rht="te")
    ref = fp4spec.quantize(_rotated(np.pad(x, ((0, 0), (0, 8))), RHT.te()), "nvfp4")
    assert np.array_equal(q.codes, ref.codes) and np.array_equal(q.scales, ref.scales)
    with pytest.raises(ValueError, match="x: length 48 along axis -1 .* not a multiple of the RHT size 32"):
        fp4spec.quantize(_x(8, (2, 48)), "nvfp4", rht=RHT.from_seed(0, 32))
    with pytest.raises(ValueError, match="not a multiple of the nvfp4 block size"):
        fp4spec.quantize(_x(8, (2, 40)), "nvfp4", rht="te")


def test_dequantize_stays_in_the_rotated_basis():
    x = _x(9, (8, 64))
    q = fp4spec.quantize(x, "nvfp4", rht="te")
    deq = fp4spec.dequantize(q)
    assert np.array_equal(deq.view(np.uint32),
                          fp4spec.dequantize(fp4spec.quantize(_rotated(x, RHT.te()), "nvfp4")).view(np.uint32))
    back = q.rht.inverse(deq, axis=q.axis)
    err_rot = np.linalg.norm(back - x) / np.linalg.norm(x)
    assert err_rot < 0.2 and np.linalg.norm(deq - x) / np.linalg.norm(x) > err_rot


def test_zero_rows_with_seeded_signs_keep_ieee_signed_zeros():
    # RHT of an all-+0 row: u_i = s_i * 0 is -0 where s_i = -1; (-0) - (+0) = -0 survives some butterflies
    r = RHT.from_seed(0, 32)
    y = r.apply(np.zeros(32, np.float32)).astype(np.float32)
    assert np.signbit(y).any()
    q = fp4spec.quantize(np.zeros((1, 32), np.float32), "mxfp4", rht=r)
    assert np.array_equal(q.codes[0] == 0x8, np.signbit(y))  # E2M1 -0 is code 0x8


def test_quantized_tensor_rht_field():
    q = fp4spec.quantize(_x(10), "nvfp4", rht="te")
    assert "rht='RHT 16/fwht-fp32, signs 0xD7E8 (TE), out bfloat16'" in repr(q)
    with pytest.raises(ValueError, match="rht: expected None or an fp4spec.rht.RHT"):
        q.replace(rht="te")
    assert q.to_numpy() is q


def test_interface_backends_receive_the_rht():
    seen = {}

    class Spy(NumpyBackend):
        name = "spy"

        def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, rht=None):
            seen["rht"], seen["shape"] = rht, x.shape
            return super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)

    x = _x(11, (64, 8))
    q = fp4spec.quantize(x, "nvfp4", axis=0, rht="te", backend=Spy())
    assert seen == {"rht": RHT.te(), "shape": (8, 64)} and q.backend == "spy" and q.rht == RHT.te()
    assert q.equals(fp4spec.quantize(x, "nvfp4", axis=0, rht="te"))
    fp4spec.quantize(x, "nvfp4", axis=0, backend=Spy())
    assert seen["rht"] is None

    class NoRht(Backend):  # claims no RHT and takes no rht keyword: fine without rht=
        name = "no-rht"

        def capabilities(self):
            return Capabilities(schemes=("nvfp4",))

        def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
            return NumpyBackend().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)

    x = np.ascontiguousarray(x.T)
    assert fp4spec.quantize(x, "nvfp4", backend=NoRht()).backend == "no-rht"
    with pytest.raises(BackendError, match=r"'no-rht' cannot quantize nvfp4 with rounding='rne' and "
                                           r"rht=16/fwht-fp32: rht 16/fwht-fp32 with bfloat16 output is not"):
        fp4spec.quantize(x, "nvfp4", backend=NoRht(), rht="te")


def test_numpy_backend_claims_every_rht():
    caps = NumpyBackend().capabilities()
    assert len(caps.rht) == 10 and caps.supports_rht(RHT.from_seed(1, 128, arith="float64"))
    # the mma arithmetic at its sizes only (16 and 64)
    assert [s for s in caps.rht if "mma" in s] == ["16/mma:sm90-bf16", "64/mma:sm90-bf16"]
    assert caps.supports_rht(RHT.te(arith="mma:sm90-bf16"))


def test_te_signs_are_the_default_rht():
    assert RHT() == RHT.te() and RHT().signs == TE_SIGNS
