"""The block quantizer's fast paths equal the scalar reference, bit for bit.

The fast paths: element codes by lookup table (forced on for small tensors here), block
amax by halving over bit patterns, float16/bfloat16 input widened chunk by chunk (and
reduced on its own patterns), dequantize chunk by chunk into one output.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp4spec
from fp4spec.block_schemes import get_scheme
from fp4spec.emulator import encode_table, scaling
from fp4spec.api.block_scaling import quantize
from fp4spec.scaling import dequantize_reference, quantize_reference

from tests.emulator.test_scaling import adversarial, same_bits_nan_aware

F32 = np.float32
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def fast_paths_everywhere(monkeypatch):
    """Tables for every size, and chunks small enough that a test tensor spans several."""
    monkeypatch.setattr(encode_table, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(encode_table, "CHUNK_ELEMENTS", 50)
    monkeypatch.setattr(scaling, "CHUNK_ELEMENTS", 200)


def to_bf16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(ml_dtypes.bfloat16)


CASES = [("mxfp4", {}), ("mxfp4", {"scale_rule": "rceil", "profile": "torchao"}), ("mxfp6_e3m2", {}),
         ("mxfp8_e4m3", {}), ("nvfp4", {}), ("nvfp4", {"profile": "torchao"}), ("nvfp4", {"scale_rule": "4over6"}),
         ("nvfp4_2d", {}), ("ufp4", {}), ("nvint4", {})]


@pytest.mark.parametrize("name,overrides", CASES)
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rto"])
@SETTINGS
@given(seed=st.integers(0, 2 ** 32 - 1), specials=st.booleans(), bf16=st.booleans())
def test_fast_paths_equal_reference(fast_paths_everywhere, name, overrides, rounding, seed, specials, bf16):
    s = get_scheme(name, **overrides)
    x = adversarial(seed, (32, 64) if s.is_2d else (4, 96), s, specials)
    if bf16:
        x = to_bf16(x)
    q = quantize(x, s, rounding=rounding)
    r = quantize_reference(x, s, rounding=rounding)
    assert q.equals(r), (s.describe(), np.argwhere(q.codes != r.codes)[:5], np.argwhere(q.scales != r.scales)[:5])
    assert same_bits_nan_aware(fp4spec.dequantize(q), dequantize_reference(q))


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "nvfp4_2d", "nvint4"])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_16bit_input_equals_its_float32_widening(name, dtype):
    """Every bfloat16 / float16 pattern (NaN and Inf included, in their own blocks) quantizes as
    its exact float32 value does; large enough for the table path and several chunks."""
    patterns = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    x = np.tile(patterns, 8).reshape(256, -1)
    rng = np.random.default_rng(0)
    x = x[rng.permutation(256)][:, rng.permutation(x.shape[1])]
    with np.errstate(invalid="ignore"):
        x32 = x.astype(np.float32)
    for axis in (-1, 0):
        assert quantize(x, name, axis=axis).equals(quantize(x32, name, axis=axis)), (name, dtype, axis)


def test_16bit_input_with_padding_and_rbits_equals_float32():
    x = to_bf16(np.random.default_rng(1).standard_normal((20, 70)).astype(F32))
    rb = np.random.default_rng(2).integers(0, 256, x.shape)
    for name in ("mxfp4", "nvfp4", "nvfp4_2d"):
        a = quantize(x, name, pad=True, rounding="sr", rbits=rb)
        b = quantize(x.astype(np.float32), name, pad=True, rounding="sr", rbits=rb)
        assert a.equals(b), name


# -- amax --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 16, 32, 64, 24, 3])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_abs_max_last_equals_numpy_max_of_abs(k, dtype):
    rng = np.random.default_rng(k)
    x = (rng.standard_normal((300, k)) * 2.0 ** rng.integers(-140, 120, (300, k))).astype(np.float32)
    x[rng.random(x.shape) < 0.02] = np.nan
    x[rng.random(x.shape) < 0.02] = -np.inf
    x[rng.random(x.shape) < 0.05] = -0.0
    x[5] = -0.0
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    with np.errstate(invalid="ignore"):
        want = np.max(np.abs(x.astype(np.float32)), axis=-1)
    got = scaling.abs_max_last(x)
    assert got.dtype == np.float32
    assert same_bits_nan_aware(got, want)
    assert got[5] == 0 and not np.signbit(got[5])


def test_max_of_aligned_groups_halves_down_to_the_groups():
    flat = np.random.default_rng(0).integers(0, 1 << 31, 64 * 32, dtype=np.uint32)
    for k in (1, 2, 4, 32, 64):
        np.testing.assert_array_equal(scaling.max_of_aligned_groups(flat, k), flat.reshape(-1, k).max(axis=1))


# -- dequantize ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,overrides", CASES)
@pytest.mark.parametrize("chunk", [1, 100, 1 << 18])
def test_chunked_dequantize_equals_reference(monkeypatch, name, overrides, chunk):
    s = get_scheme(name, **overrides)
    x = adversarial(5, (32, 64) if s.is_2d else (6, 96), s, True)
    q = quantize(x, s)
    monkeypatch.setattr(scaling, "CHUNK_ELEMENTS", chunk)
    assert same_bits_nan_aware(fp4spec.dequantize(q), dequantize_reference(q))
    qt = quantize(x.T.copy(), s, axis=0, pad=True)  # the blocked axis first: a strided view of the codes
    assert same_bits_nan_aware(fp4spec.dequantize(qt), dequantize_reference(qt))


def test_dequantize_every_mx_scale_and_element_code():
    """Every (E8M0 scale, E2M1 code) pair against ml_dtypes' decode times 2^(scale - 127)."""
    codes = np.tile(np.arange(16, dtype=np.uint8), 256 * 2).reshape(256, 32)
    scales = np.arange(256, dtype=np.uint8)[:, None]
    s = get_scheme("mxfp4")
    got = scaling.dequantize_mx(codes[:, None, :], scales, s)[:, 0, :]
    with np.errstate(over="ignore", invalid="ignore"):  # 2^128 for byte 0xFF (NaN below)
        want = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32) * np.ldexp(F32(1), scales.astype(np.int32) - 127)
    want[255] = np.nan
    assert same_bits_nan_aware(got, want.astype(np.float32))


# -- the paths the benchmark times ------------------------------------------------------------------------

def test_large_quantize_takes_the_table_path(monkeypatch):
    calls = []
    real = encode_table.encode_by_table
    monkeypatch.setattr(encode_table, "encode_by_table", lambda *a: calls.append(1) or real(*a))
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(F32)
    for name in ("mxfp4", "nvfp4"):
        for xin in (x, to_bf16(x)):
            calls.clear()
            quantize(xin, name)
            assert calls, (name, xin.dtype)
