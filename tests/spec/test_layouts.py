"""The cuBLAS 128x4 blocked scale layout (conformance property 12: round trip and zero padding)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4spec.layouts import blocked_offset, blocked_shape, from_blocked, to_blocked

SHAPES = [(300, 11), (128, 4), (1, 1), (5, 3), (127, 2), (129, 5), (256, 8), (64, 17), (130, 1), (3, 40)]


def _scales(rows, cols, seed=0):
    # non-zero, distinct-ish bytes (1..254) so a misplaced entry or a missing pad is visible;
    # zero never appears in the data, so zeros in the output can only be padding
    rng = np.random.default_rng(seed + rows * 1000 + cols)
    return rng.integers(1, 255, size=(rows, cols), dtype=np.uint8)


def _reference_by_formula(s):
    rows, cols = s.shape
    rp, cp = blocked_shape(rows, cols)
    out = np.zeros(rp * cp, dtype=np.uint8)
    for r in range(rows):
        for c in range(cols):
            out[blocked_offset(r, c, cols)] = s[r, c]
    return out


def _torchao_to_blocked(s):
    """Transcription of torchao's to_blocked reshape sequence (prototype/mx_formats/utils.py)."""
    rows, cols = s.shape
    nrb, ncb = -(-rows // 128), -(-cols // 4)
    padded = np.zeros((nrb * 128, ncb * 4), dtype=np.uint8)
    padded[:rows, :cols] = s
    blocks = padded.reshape(nrb, 128, ncb, 4).transpose(0, 2, 1, 3)
    rearranged = blocks.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1, 32, 16)
    return rearranged.reshape(-1)


def test_blocked_shape():
    assert blocked_shape(300, 11) == (384, 12)
    assert blocked_shape(128, 4) == (128, 4)
    assert blocked_shape(1, 1) == (128, 4)
    assert blocked_shape(129, 5) == (256, 8)
    assert blocked_shape(0, 0) == (0, 0)


def test_worked_example():
    assert blocked_offset(130, 5, 11) == 2081
    s = _scales(300, 11)
    assert to_blocked(s)[2081] == s[130, 5]


def test_offset_formula_spot_values():
    assert blocked_offset(0, 0, 4) == 0
    assert blocked_offset(0, 3, 4) == 3
    assert blocked_offset(32, 0, 4) == 4  # next 32-row group goes to the next 4 bytes
    assert blocked_offset(1, 0, 4) == 16  # next row of a 32-row group goes 16 bytes on
    assert blocked_offset(0, 4, 8) == 512  # next tile column
    assert blocked_offset(128, 0, 8) == 1024  # next tile row (2 tile columns)


def test_single_tile_matches_triton_interleave():
    # the interleave named in facebookexperimental/triton#917: dest[row%32*16 + row//32*4 + col]
    for r in range(128):
        for c in range(4):
            assert blocked_offset(r, c, 4) == r % 32 * 16 + r // 32 * 4 + c


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_to_blocked_matches_formula(rows, cols):
    s = _scales(rows, cols)
    out = to_blocked(s)
    rp, cp = blocked_shape(rows, cols)
    assert out.dtype == np.uint8 and out.shape == (rp * cp,)
    np.testing.assert_array_equal(out, _reference_by_formula(s))
    np.testing.assert_array_equal(out, _torchao_to_blocked(s))


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_offsets_are_a_bijection(rows, cols):
    rp, cp = blocked_shape(rows, cols)
    offs = sorted(blocked_offset(r, c, cols if c < cols else cp) for r in range(rp) for c in range(cp))
    assert offs == list(range(rp * cp))


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_padding_is_zero(rows, cols):
    s = _scales(rows, cols)
    out = to_blocked(s)
    rp, cp = blocked_shape(rows, cols)
    data_offsets = {blocked_offset(r, c, cols) for r in range(rows) for c in range(cols)}
    pad = np.ones(out.size, dtype=bool)
    pad[list(data_offsets)] = False
    assert pad.sum() == rp * cp - rows * cols
    assert not out[pad].any()
    assert (out == 0).sum() == rp * cp - rows * cols  # data bytes are never zero here
    if (rows, cols) == (300, 11):
        assert pad.sum() == 1308


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_round_trip(rows, cols):
    s = _scales(rows, cols)
    back = from_blocked(to_blocked(s), rows, cols, check_padding=True)
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, s)
    # the (R', C') allocation of the same bytes is accepted too
    rp, cp = blocked_shape(rows, cols)
    np.testing.assert_array_equal(from_blocked(to_blocked(s).reshape(rp, cp), rows, cols), s)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, 300), cols=st.integers(0, 20), seed=st.integers(0, 2**16))
def test_round_trip_hypothesis(rows, cols, seed):
    s = np.random.default_rng(seed).integers(0, 256, size=(rows, cols), dtype=np.uint8)
    out = to_blocked(s)
    assert out.size == np.prod(blocked_shape(rows, cols))
    np.testing.assert_array_equal(from_blocked(out, rows, cols), s)
    if rows and cols:
        r, c = rows - 1, cols - 1
        assert out[blocked_offset(r, c, cols)] == s[r, c]


@pytest.mark.parametrize("rows,cols", [(128, 4), (300, 11), (256, 8), (64, 17)])
def test_plain_reshape_is_not_the_layout(rows, cols):
    # the known bug (facebookexperimental/triton#917): a plain row-major reshape of the padded matrix
    s = _scales(rows, cols)
    rp, cp = blocked_shape(rows, cols)
    padded = np.zeros((rp, cp), dtype=np.uint8)
    padded[:rows, :cols] = s
    plain = padded.reshape(-1)
    assert plain.size == to_blocked(s).size
    assert not np.array_equal(plain, to_blocked(s))
    assert not np.array_equal(from_blocked(plain, rows, cols), s)


def test_from_blocked_check_padding():
    s = _scales(5, 3)
    buf = to_blocked(s)
    buf[blocked_offset(5, 0, 3)] = 0xFF  # a stale E8M0 NaN in a padded row
    np.testing.assert_array_equal(from_blocked(buf, 5, 3), s)  # not checked by default
    with pytest.raises(ValueError, match=r"blocked: padded position \(r=5, c=0\).*0xFF"):
        from_blocked(buf, 5, 3, check_padding=True)
    buf = to_blocked(s)
    buf[blocked_offset(0, 3, 4)] = 0x7F  # a stale UE4M3 NaN in the padded column
    with pytest.raises(ValueError, match="c=3"):
        from_blocked(buf, 5, 3, check_padding=True)


def test_accepts_other_integer_dtypes_and_lists():
    s = [[1, 2, 3], [4, 5, 6]]
    out = to_blocked(s)
    np.testing.assert_array_equal(out, to_blocked(np.array(s, dtype=np.int64)))
    np.testing.assert_array_equal(from_blocked(out.astype(np.int32), 2, 3), np.array(s, dtype=np.uint8))


def test_errors():
    with pytest.raises(ValueError, match="scales: expected a 2-D"):
        to_blocked(np.zeros((2, 3, 4), dtype=np.uint8))
    with pytest.raises(ValueError, match="scales: expected a 2-D"):
        to_blocked(np.zeros(4, dtype=np.uint8))
    with pytest.raises(ValueError, match="scales: expected an integer array"):
        to_blocked(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match=r"scales: .*0\.\.255, found 256"):
        to_blocked([[256]])
    with pytest.raises(ValueError, match=r"blocked: has 511 bytes.*\(128, 4\) -> 512 bytes"):
        from_blocked(np.zeros(511, dtype=np.uint8), 1, 1)
    with pytest.raises(ValueError, match="rows: expected a non-negative int"):
        blocked_shape(-1, 4)
    with pytest.raises(ValueError, match="cols: expected a non-negative int"):
        blocked_shape(4, 2.0)
    with pytest.raises(ValueError, match="c: column 11 is out of range"):
        blocked_offset(0, 11, 11)
