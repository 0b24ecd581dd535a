"""QuantizedTensor validates on construction; arbitrary bytes never crash (only ValueError / TypeError)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fp4spec
from fp4spec import QuantizedTensor


def valid(scheme="mxfp4", shape=(2, 64), **kw):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    q = fp4spec.quantize(x, scheme, **kw)
    return dict(codes=q.codes, scales=q.scales, global_scale=q.global_scale, scheme=q.scheme, axis=q.axis,
                shape=q.shape, e1_8=q.e1_8, e1_16=q.e1_16), q


@pytest.mark.parametrize("change, error, words", [
    (dict(codes=np.full((2, 64), 0xFF, np.uint8)), ValueError, "codes: e2m1 codes are 4-bit (0..15); found 255"),
    (dict(codes=np.zeros((2, 64), np.float32)), TypeError, "codes: expected uint8, got dtype float32"),
    (dict(codes=np.zeros((2, 64), np.int64)), TypeError, "codes: expected uint8, got dtype int64"),
    (dict(scales=np.zeros((2, 3), np.uint8)), ValueError, "scales: expected shape (2, 2)"),
    (dict(scales=np.zeros((2, 2), np.int16)), TypeError, "scales: expected uint8"),
    (dict(shape=(2, 30)), ValueError, "shape: (2, 30) does not match the codes (2, 64) along the blocked axis"),
    (dict(shape=(3, 64)), ValueError, "shape: (3, 64) does not match the codes (2, 64) along the rows before it"),
    (dict(shape=(2,)), ValueError, "shape: expected 2 non-negative integers"),
    (dict(axis=2), ValueError, "axis: 2 is not an axis of the 2-d codes"),
    (dict(global_scale=1.0), ValueError, "global_scale: scheme 'mxfp4' has no tensor scale"),
    (dict(scheme="mxfp9"), ValueError, "scheme: unknown scheme 'mxfp9'"),
    (dict(scheme=3), TypeError, "scheme: expected a scheme name"),
    (dict(e1_8=np.zeros((2, 2, 8), np.uint8)), ValueError, "e1_8: only HiF4 has micro-exponent bits"),
    (dict(codes=None), ValueError, "codes: scheme 'mxfp4' needs it"),
])
def test_mxfp4_field_errors(change, error, words):
    fields, _ = valid()
    fields.update(change)
    with pytest.raises(error) as err:
        QuantizedTensor(**fields)
    assert words in str(err.value)


def test_tensor_scale_present_iff_the_scheme_has_one():
    fields, q = valid("nvfp4")
    with pytest.raises(ValueError, match="global_scale: scheme 'nvfp4' has a float32 tensor scale; got None"):
        QuantizedTensor(**{**fields, "global_scale": None})
    with pytest.raises(TypeError, match="global_scale: expected one real number"):
        QuantizedTensor(**{**fields, "global_scale": "1.0"})
    assert QuantizedTensor(**{**fields, "global_scale": float(q.global_scale)}).equals(q)


def test_scheme_names_and_specs_are_resolved():
    fields, q = valid("mxfp4", scale_rule="rceil")
    r = QuantizedTensor(**{**fields, "scheme": "mxfp4:scale_rule=rceil"})
    assert r.scheme == q.scheme and r.equals(q)
    np.testing.assert_array_equal(fp4spec.dequantize(r), fp4spec.dequantize(q))


def test_negative_axis_and_list_shape_are_normalized():
    fields, q = valid("nvfp4_2d", shape=(32, 48), axis=0)
    r = QuantizedTensor(**{**fields, "axis": -2, "shape": [32, 48]})
    assert r.axis == 0 and r.shape == (32, 48) and r.equals(q)


def test_padding_is_less_than_one_block_along_each_tiled_axis():
    fields, q = valid("nvfp4_2d", shape=(20, 40), pad=True)
    assert q.codes.shape == (32, 48)
    with pytest.raises(ValueError, match="along the rows before it"):
        QuantizedTensor(**{**fields, "shape": (16, 40)})
    with pytest.raises(ValueError, match="along the blocked axis"):
        QuantizedTensor(**{**fields, "shape": (20, 32)})


def test_hif4_bits_are_checked():
    fields, q = valid("hif4", shape=(2, 128))
    with pytest.raises(ValueError, match="e1_16: expected shape"):
        QuantizedTensor(**{**fields, "e1_16": fields["e1_16"][..., :8]})
    with pytest.raises(ValueError, match="e1_8: expected bits"):
        QuantizedTensor(**{**fields, "e1_8": fields["e1_8"] * 2 + 2})
    with pytest.raises(ValueError, match="e1_8: scheme 'hif4' needs it"):
        QuantizedTensor(**{**fields, "e1_8": None})


def test_ue4m3_scale_bytes_with_bit_7_are_kept_but_not_dequantized():
    """torchao emits 0xFF UE4M3 scale bytes; the QuantizedTensor keeps them, dequantize says why it cannot."""
    fields, q = valid("nvfp4", shape=(1, 16))
    bad = QuantizedTensor(**{**fields, "scales": np.full((1, 1), 0xFF, np.uint8)})
    with pytest.raises(ValueError, match="scales: ue4m3 scale codes are 7-bit .* found 0xff, .* ue4m3_sign_bit"):
        fp4spec.dequantize(bad)


SCHEMES = sorted(fp4spec.schemes)
DTYPES = [np.uint8, np.uint8, np.uint8, np.int8, np.uint16, np.int64, np.float32]


@st.composite
def near_valid_fields(draw):
    """Fields of a random scheme, each aspect wrong with probability 1/6 (bytes arbitrary)."""
    def wrong():
        return draw(st.integers(0, 5)) == 0

    sch = fp4spec.get_scheme(draw(st.sampled_from(SCHEMES)))
    k, r = sch.block_size, sch.tile_rows
    lead = draw(st.integers(1, 3)) * r
    nb = draw(st.integers(1, 3))
    codes_shape = (lead, nb * k)
    shape = (lead - draw(st.integers(0, r - 1)), nb * k - draw(st.integers(0, k - 1)))
    if wrong():
        shape = draw(st.tuples(st.integers(0, 70), st.integers(0, 200)))

    def arr(shape, fit_bits):
        raw = np.frombuffer(draw(st.binary(min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                            np.uint8).reshape(shape)
        if not wrong():
            raw = raw & ((1 << fit_bits) - 1)
        return raw.astype(draw(st.sampled_from(DTYPES)) if wrong() else np.uint8)

    codes = arr(codes_shape, sch.element.bits)
    scales_shape = (lead, draw(st.integers(0, 4))) if wrong() else (lead, nb)
    scales = arr(scales_shape, 8)
    e1 = {}
    if (sch.structure == "hif4") != wrong():
        e1 = {f"e1_{n}": arr(scales_shape + (n,), 1) for n in (8, 16)}
    g = None
    if (sch.global_scale is not None) != wrong():
        g = draw(st.floats(width=32, allow_nan=True, allow_infinity=True))
    axis = draw(st.sampled_from([-2, 0, 2])) if wrong() else draw(st.sampled_from([1, -1]))
    return dict(codes=codes, scales=scales, global_scale=g, scheme=sch.name, axis=axis, shape=shape, **e1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_valid_fields())
def test_construction_and_dequantize_of_arbitrary_bytes(fields):
    try:
        q = QuantizedTensor(**fields)
    except (ValueError, TypeError) as exc:
        assert str(exc).split(":")[0].strip() in (*fields, "codes", "scales", "global_scale", "e1_8", "e1_16"), exc
        return
    try:
        out = fp4spec.dequantize(q)
    except ValueError as exc:
        assert str(exc).startswith("scales: ue4m3"), exc
        return
    assert out.shape == q.shape and out.dtype == np.float32


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(fp4spec.formats)), st.sampled_from(DTYPES),
       st.binary(min_size=0, max_size=64))
def test_decode_of_arbitrary_bytes(fmt, dtype, data):
    codes = np.frombuffer(data, np.uint8).astype(dtype)
    try:
        values = fp4spec.decode(codes, fmt)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("codes:"), exc
        return
    assert values.shape == codes.shape


def test_padded_does_not_unpack():
    """``padded`` reads the stored shape: it must not unpack (and cache) the codes, a full-size
    temporary per dequantize of packed device tensors."""
    import fp4spec

    x = np.ones((4, 40), np.float32)
    q = fp4spec.quantize(x, "nvfp4", pad=True)
    packed = QuantizedTensor(q.storage, q.scales, q.global_scale, q.scheme, q.axis, q.shape)
    assert packed.is_packed and packed.padded and packed.padded_shape == (4, 48)
    assert packed._codes is None
    full = fp4spec.quantize(np.ones((4, 32), np.float32), "nvfp4")
    assert not full.padded and full.padded_shape == (4, 32)
