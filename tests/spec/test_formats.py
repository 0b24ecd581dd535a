"""Format descriptors: every code of every format, derived from a few fields."""

import math

import numpy as np
import pytest

import fp4spec
from fp4spec import float_format, get_format, p3109_format

CATALOGUE = [
    "e2m1", "e1m2", "e1m2_b1", "int4", "int4_sym", "s1p2", "e0m3",
    "e2m3", "e3m2", "e4m3", "ue4m3", "e5m2", "e8m0", "e6m2",
]


def test_catalogue_lists_every_format():
    assert list(fp4spec.formats) == [n for n in fp4spec.formats]
    assert set(CATALOGUE) == set(fp4spec.formats)
    for name in CATALOGUE:
        assert get_format(name).name == name


def test_unknown_format_error_names_argument_and_choices():
    with pytest.raises(ValueError, match=r"format: unknown format 'e9m9'.*e2m1"):
        get_format("e9m9")


# The OCP / issue tables, code order: sign in the top bit, then exponent, then mantissa.
E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
EXPECTED = {
    "e2m1": E2M1 + [-v for v in E2M1],
    "e1m2": [k * 0.5 for k in range(8)] + [-k * 0.5 for k in range(8)],
    "e1m2_b1": [k * 0.25 for k in range(8)] + [-k * 0.25 for k in range(8)],
    "s1p2": [k * 0.25 for k in range(8)] + [-k * 0.25 for k in range(8)],
    "e0m3": list(range(8)) + [-k for k in range(8)],
    "int4": list(range(8)) + list(range(-8, 0)),
    "int4_sym": list(range(8)) + list(range(-8, 0)),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_four_bit_value_tables(name):
    values = get_format(name).values
    assert values.dtype == np.float64 and len(values) == 16
    np.testing.assert_array_equal(values, EXPECTED[name])
    if name not in ("int4", "int4_sym"):
        assert math.copysign(1, values[0x8]) == -1  # the negative-zero code


def test_int4_sym_never_encodes_minus_eight_but_decodes_it():
    fmt = get_format("int4_sym")
    assert fmt.values[0x8] == -8
    assert 0x8 not in fmt.finite_codes
    assert fmt.min == -7
    assert fp4spec.encode(np.array([-100.0, -7.6, -7.5]), fmt).tolist() == [0x9, 0x9, 0x9]


@pytest.mark.parametrize("name,bits,mx,min_normal,min_sub,emax", [
    ("e2m1", 4, 6, 1, 0.5, 2),
    ("e1m2", 4, 3.5, 2, 0.5, 1),
    ("e1m2_b1", 4, 1.75, 1, 0.25, 0),
    ("e2m3", 6, 7.5, 1, 0.125, 2),
    ("e3m2", 6, 28, 0.25, 0.0625, 4),
    ("e4m3", 8, 448, 2**-6, 2**-9, 8),
    ("ue4m3", 7, 448, 2**-6, 2**-9, 8),
    ("e5m2", 8, 57344, 2**-14, 2**-16, 15),
    ("e8m0", 8, 2.0**127, 2.0**-127, None, 127),
    ("e6m2", 8, 49152, 2.0**-48, None, 15),
])
def test_derived_parameters(name, bits, mx, min_normal, min_sub, emax):
    fmt = get_format(name)
    assert (fmt.bits, fmt.max, fmt.min_normal, fmt.min_subnormal, fmt.emax) == (bits, mx, min_normal, min_sub, emax)


def test_special_codes():
    assert get_format("e4m3").nan_codes == (0x7F, 0xFF)
    assert get_format("ue4m3").nan_codes == (0x7F,)
    assert get_format("e5m2").inf_codes == (0x7C, 0xFC)
    assert get_format("e5m2").nan_codes == (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF)
    e8m0 = get_format("e8m0")
    assert e8m0.nan_codes == (0xFF,) and not e8m0.has_zero
    assert e8m0.values[0] == 2.0**-127 and e8m0.values[0xFE] == 2.0**127
    np.testing.assert_array_equal(e8m0.values[:255], 2.0 ** (np.arange(255) - 127))
    e6m2 = get_format("e6m2")
    assert e6m2.nan_codes == (0xFF,) and not e6m2.has_zero
    assert e6m2.values[0] == 2.0**-48 and e6m2.values[0xFE] == 2**15 * 1.5 == e6m2.max
    for name in ("e2m1", "e1m2", "int4", "s1p2", "e2m3", "e3m2"):
        fmt = get_format(name)
        assert not fmt.has_nan and not fmt.has_inf and np.all(np.isfinite(fmt.values))


@pytest.mark.parametrize("name", CATALOGUE)
def test_values_agree_with_exact_decode_and_fields(name):
    fmt = get_format(name)
    rows = fmt.code_table()
    assert len(rows) == 1 << fmt.bits
    for row in rows:
        assert row.code == int(row.hex, 16)
        v = fmt.values[row.code]
        assert (math.isnan(v) and math.isnan(row.value)) or v == row.value
        bits = row.sign + row.exponent + row.mantissa
        assert int(bits, 2) == row.code and len(bits) == fmt.bits


def test_e2m1_fields():
    assert get_format("e2m1").fields(0x7) == ("0", "11", "1")
    assert get_format("e8m0").fields(0x80) == ("", "10000000", "")


def test_bad_code():
    with pytest.raises(ValueError, match="code: 16 is not a 4-bit code"):
        get_format("e2m1").fields(16)


def test_one_line_custom_formats():
    e3m0 = float_format("e3m0", bias=3)
    assert e3m0.bits == 4 and e3m0.max == 16
    e2m1 = float_format("e2m1")
    np.testing.assert_array_equal(e2m1.values, get_format("e2m1").values)
    e1m2b0 = float_format("e1m2", bias=0)
    np.testing.assert_array_equal(e1m2b0.values, get_format("e1m2").values)
    with pytest.raises(ValueError, match="spec"):
        float_format("x2m1")


def test_p3109_binary4p2sf():
    # Annex B Table 5 (as quoted in the reference notes): E2M1 values halved, 0x8 = NaN, no -0.
    f = p3109_format(4, 2, "signed", "finite")
    assert f.name == "binary4p2sf"
    v = f.values
    assert math.isnan(v[0x8])
    np.testing.assert_array_equal(v[:8], [0, 0.25, 0.5, 0.75, 1, 1.5, 2, 3])
    np.testing.assert_array_equal(v[9:], [-0.25, -0.5, -0.75, -1, -1.5, -2, -3])
    assert not f.has_negative_zero


def test_p3109_extended_and_unsigned():
    f = p3109_format(8, 3, "signed", "extended")
    assert f.inf_codes == (0x7F, 0xFF) and f.nan_codes == (0x80,) and f.bias == 16
    u = p3109_format(8, 1, "unsigned", "finite")  # Binary8p1uf: code c = 2^(c - 128), 0 = zero
    assert u.values[0] == 0 and u.values[1] == 2.0**-127 and u.values[0xFE] == 2.0**126
    assert u.nan_codes == (0xFF,)
    with pytest.raises(ValueError, match="signedness"):
        p3109_format(8, 3, "maybe")
    with pytest.raises(ValueError, match="precision"):
        p3109_format(4, 4, "signed")


def test_register_format():
    from fp4spec.number_formats import _FORMATS

    fmt = float_format("e2m2", bias=1, name="my_e2m2_test")
    fp4spec.register_format(fmt)
    try:
        assert get_format("my_e2m2_test") is fmt
        assert fp4spec.encode(np.array([1.3]), "my_e2m2_test").tolist() == [0b0_01_01]
        with pytest.raises(ValueError, match="already"):
            fp4spec.register_format(fmt)
    finally:
        del _FORMATS["my_e2m2_test"]


def test_p3109_names_resolve_in_the_spec():
    """A P3109 draft name is a format name wherever one is taken (get_format, encode, schemes)."""
    import fp4spec

    f = fp4spec.get_format("binary4p2sf")
    assert f == fp4spec.p3109_format(4, 2, "signed", "finite") and f.name == "binary4p2sf"
    assert fp4spec.get_format("binary8p3ue") == fp4spec.p3109_format(8, 3, "unsigned", "extended")
    assert list(fp4spec.encode([1.0, 2.5], "binary4p2sf")) == [4, 6]
    with pytest.raises(ValueError, match="IEEE P3109 draft name"):
        fp4spec.get_format("binary4q2sf")
