"""Packing two 4-bit codes per byte (conformance property 13: round trip and nibble order)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fp4spec.packing import ORDERS, pack, unpack

ALL_PAIRS = np.array([(a, b) for a in range(16) for b in range(16)], dtype=np.uint8)  # (256, 2)


def test_golden_byte_lo_first():
    # E2M1 codes 0x1 (0.5) and 0x7 (6.0): NVIDIA/PyTorch/Triton put the first in the low nibble
    out = pack([0x1, 0x7])
    assert out.dtype == np.uint8
    assert out.tolist() == [0x71]
    assert unpack(np.array([0x71], dtype=np.uint8)).tolist() == [0x1, 0x7]


def test_golden_byte_hi_first():
    assert pack([0x1, 0x7], order="hi_first").tolist() == [0x17]
    assert unpack([0x17], order="hi_first").tolist() == [0x1, 0x7]


def test_exhaustive_lo_first():
    packed = pack(ALL_PAIRS)  # pairs along the last axis
    assert packed.shape == (256, 1)
    expected = [a | (b << 4) for a, b in ALL_PAIRS.tolist()]
    assert packed[:, 0].tolist() == expected
    assert sorted(expected) == list(range(256))  # a bijection onto bytes
    np.testing.assert_array_equal(unpack(packed), ALL_PAIRS)


def test_exhaustive_hi_first():
    packed = pack(ALL_PAIRS, order="hi_first")
    expected = [(a << 4) | b for a, b in ALL_PAIRS.tolist()]
    assert packed[:, 0].tolist() == expected
    np.testing.assert_array_equal(unpack(packed, order="hi_first"), ALL_PAIRS)


def test_exhaustive_unpack_all_bytes():
    b = np.arange(256, dtype=np.uint8)
    for order in ORDERS:
        codes = unpack(b, order=order)
        assert codes.shape == (512,)
        np.testing.assert_array_equal(pack(codes, order=order), b)
    lo = unpack(b).reshape(256, 2)
    np.testing.assert_array_equal(lo[:, 0], b & 0xF)
    np.testing.assert_array_equal(lo[:, 1], b >> 4)


def test_orders_differ_by_nibble_swap():
    p_lo = pack(ALL_PAIRS)
    p_hi = pack(ALL_PAIRS, order="hi_first")
    np.testing.assert_array_equal(p_hi, ((p_lo & 0xF) << 4) | (p_lo >> 4))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint16, np.uint64])
def test_any_integer_dtype(dtype):
    assert pack(np.array([1, 7, 15, 0], dtype=dtype)).tolist() == [0x71, 0x0F]
    assert unpack(np.array([0x71, 0x0F], dtype=dtype)).tolist() == [1, 7, 15, 0]


def test_lists_and_nested_lists():
    assert pack([[1, 7], [2, 3]]).tolist() == [[0x71], [0x32]]
    assert pack([]).shape == (0,)
    assert unpack([]).shape == (0,)


def test_axis():
    codes = np.arange(24, dtype=np.uint8).reshape(4, 6) % 16
    p0 = pack(codes, axis=0)
    assert p0.shape == (2, 6)
    assert p0[0, 0] == codes[0, 0] | (codes[1, 0] << 4)
    np.testing.assert_array_equal(p0, pack(codes.T).T)
    np.testing.assert_array_equal(unpack(p0, axis=0), codes)
    np.testing.assert_array_equal(pack(codes, axis=-2), p0)
    assert pack(codes, axis=1).shape == (4, 3)
    assert p0.flags.c_contiguous


def test_does_not_modify_input():
    codes = np.array([1, 7, 3, 4], dtype=np.int64)
    before = codes.copy()
    pack(codes)
    np.testing.assert_array_equal(codes, before)


@pytest.mark.parametrize("bad", [[16, 0], [0, -1], [0, 255], [0, 1 << 40]])
def test_rejects_out_of_range_codes(bad):
    with pytest.raises(ValueError, match=r"codes: .*0\.\.15"):
        pack(bad)


@pytest.mark.parametrize("bad", [np.array([0.0, 1.0]), np.array([True, False]), ["a", "b"], [0.5, 1]])
def test_rejects_non_integer(bad):
    with pytest.raises(ValueError, match="codes: expected an integer array"):
        pack(bad)
    with pytest.raises(ValueError, match="packed: expected an integer array"):
        unpack(bad)


def test_rejects_odd_length():
    with pytest.raises(ValueError, match="codes: length 3 .* odd"):
        pack([1, 2, 3])
    with pytest.raises(ValueError, match="odd"):
        pack(np.zeros((3, 4), dtype=np.uint8), axis=0)


@pytest.mark.parametrize("order", ["lo", "LO_FIRST", None, "unpacked"])
def test_rejects_unknown_order(order):
    with pytest.raises(ValueError, match=r"order: .*'lo_first', 'hi_first'"):
        pack([1, 2], order=order)
    with pytest.raises(ValueError, match="order: "):
        unpack([1], order=order)


def test_rejects_bad_axis_and_bytes():
    with pytest.raises(ValueError, match="axis: 2 is out of range"):
        pack(np.zeros((2, 2), dtype=np.uint8), axis=2)
    with pytest.raises(ValueError, match="axis: "):
        pack([1, 2], axis=0.0)
    with pytest.raises(ValueError, match="0-d"):
        pack(np.uint8(3))
    with pytest.raises(ValueError, match=r"packed: .*0\.\.255"):
        unpack([256])
    with pytest.raises(ValueError, match=r"packed: .*0\.\.255"):
        unpack([-1])


shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shape=shapes, order=st.sampled_from(ORDERS))
def test_roundtrip_codes(data, shape, order):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = list(shape)
    shape[axis] *= 2
    codes = data.draw(hnp.arrays(np.uint8, tuple(shape), elements=st.integers(0, 15)))
    packed = pack(codes, order=order, axis=axis)
    assert packed.dtype == np.uint8
    assert packed.shape[axis] == shape[axis] // 2
    np.testing.assert_array_equal(unpack(packed, order=order, axis=axis), codes)


@settings(max_examples=60, deadline=None)
@given(packed=hnp.arrays(np.uint8, shapes), order=st.sampled_from(ORDERS))
def test_roundtrip_bytes(packed, order):
    np.testing.assert_array_equal(pack(unpack(packed, order=order), order=order), packed)
