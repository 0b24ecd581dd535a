"""The table-driven encoder equals the general threshold encoder, bit for bit, and runs only where it is proven.

The general encoder equals the scalar reference exhaustively (test_elements_equivalence.py);
here the tables equal the general encoder on every bfloat16 and float16 pattern, on every
float32 high half with the low halves that decide a rounding (0, 1, 0x7FFF, 0x8000,
0xFFFF), and on random float32 patterns, for every format and deterministic mode they
cover; and against the scalar reference directly for E2M1 and E3M2.
"""

import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp4spec
from fp4spec.emulator import encode_table
from fp4spec.emulator.elements import encode, encode_general
from fp4spec.elements import encode_scalar
from fp4spec.rounding import ROUNDING_MODES

TABLE_FORMATS = [n for n in fp4spec.formats if fp4spec.get_format(n).bits <= encode_table.MAX_BITS]
OTHER_FORMATS = [n for n in fp4spec.formats if n not in TABLE_FORMATS]
DETERMINISTIC = [m for m in ROUNDING_MODES if m != "sr"]
PATTERNS = np.arange(1 << 16, dtype=np.uint32)
# every float32 high half with the low halves around which a rounding can change
F32_EDGES = np.concatenate([(PATTERNS << 16) | low for low in (0, 1, 0x7FFF, 0x8000, 0xFFFF)]).view(np.float32)
F32_RANDOM = np.random.default_rng(0).integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
ALL_BF16 = PATTERNS.astype(np.uint16).view(ml_dtypes.bfloat16)
ALL_F16 = PATTERNS.astype(np.uint16).view(np.float16)
encode_module = sys.modules["fp4spec.emulator.elements"]  # the package's name 'encode' is the function


def policy_sets(fmt):
    """(nan, neg_zero, underflow) combinations valid for fmt (overflow: 'saturate')."""
    f = fp4spec.get_format(fmt)
    nans = ["max"] + (["zero", "signed_zero"] if f.has_zero else []) + (["nan"] if f.has_nan else [])
    return [(nan, nz, uf) for nan in nans for nz in ("preserve", "flush") for uf in ("overflow", "saturate")]


def general(x, fmt, mode, nan="max", neg_zero="preserve", underflow="overflow", overflow="saturate"):
    f = fp4spec.get_format(fmt)
    return encode_general(np.asarray(x), f, mode, None, 8, overflow, nan, neg_zero, underflow)


def by_table(x, fmt, mode, **kw):
    f = fp4spec.get_format(fmt)
    nan = kw.get("nan", "max")
    t = encode_table.tables(f, mode, "saturate", nan, kw.get("neg_zero", "preserve"), kw.get("underflow", "overflow"),
                            general=encode_general)
    assert t is not None, (fmt, mode, kw)
    return encode_table.encode_by_table(np.asarray(x), t, lambda c: general(c, fmt, mode, **kw))


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_tables_equal_general_encoder_on_every_16bit_pattern_and_float32_edge(fmt, mode):
    for nan, nz, uf in policy_sets(fmt):
        kw = dict(nan=nan, neg_zero=nz, underflow=uf)
        for x in (ALL_BF16, ALL_F16, F32_EDGES, F32_RANDOM):
            got, want = by_table(x, fmt, mode, **kw), general(x, fmt, mode, **kw)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (fmt, mode, kw, x.dtype, f"{x.view(f'u{x.itemsize}')[bad[0]]:#x}")


@pytest.mark.parametrize("fmt,mode", [("e2m1", "rne"), ("e2m1", "rto"), ("e3m2", "rne"), ("int4", "rdn")])
def test_tables_equal_the_scalar_reference_on_every_bfloat16(fmt, mode):
    """Every bfloat16 pattern, NaN and Inf included, through the public encode (table path)."""
    got = encode(ALL_BF16, fmt, mode, nan="signed_zero")
    with np.errstate(invalid="ignore"):  # signalling NaNs
        values = ALL_BF16.astype(np.float64)
    want = [encode_scalar(float(v), fmt, mode, nan="signed_zero") for v in values]
    np.testing.assert_array_equal(got, want)


def test_e2m1_equals_ml_dtypes_on_float32_edges_and_random_patterns():
    for x in (F32_EDGES, F32_RANDOM):
        np.testing.assert_array_equal(encode(x, "e2m1", nan="signed_zero"),
                                      x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8))


# -- which path runs ------------------------------------------------------------------------------

@pytest.fixture
def paths(monkeypatch):
    """Records 'table' or 'general' for each encode call."""
    taken = []
    by_table_, chunks = encode_table.encode_by_table, encode_module._encode_chunks

    def spy_table(*a, **k):
        taken.append("table")
        return by_table_(*a, **k)

    def spy_general(*a, **k):
        taken.append("general")
        return chunks(*a, **k)

    monkeypatch.setattr(encode_table, "encode_by_table", spy_table)
    monkeypatch.setattr(encode_module, "_encode_chunks", spy_general)
    return taken


BIG = encode_table.MIN_ELEMENTS


@pytest.mark.parametrize("fmt", TABLE_FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_table_path_runs_for_small_formats_deterministic_modes_and_16_32_bit_floats(paths, fmt, dtype, mode):
    x = np.linspace(-8, 8, BIG).astype(dtype)
    encode(x, fmt, mode, nan="max")
    assert paths == ["table"]


@pytest.mark.parametrize("case", [
    dict(fmt="e2m1", rounding="sr", rbits=np.zeros(BIG, np.uint8)),  # stochastic rounding
    dict(fmt="e2m1", overflow="error"),  # raising overflow policy
    dict(fmt="e4m3"), dict(fmt="e5m2"), dict(fmt="ue4m3"), dict(fmt="e8m0"),  # codes wider than 6 bits
    dict(fmt="e2m1", dtype=np.float64),  # float64 input
    dict(fmt="e2m1", n=BIG - 1),  # too small to pay for a table
])
def test_general_path_runs_elsewhere(paths, case):
    case = dict(case)
    x = np.linspace(0, 6, case.pop("n", BIG)).astype(case.pop("dtype", np.float32))
    encode(x, case.pop("fmt"), **case)
    assert paths == ["general"]


# -- raising policies and special values through the table path --------------------------------------

def test_nan_error_raises_from_the_table_path_and_inf_still_encodes():
    x = np.ones(3 * BIG, np.float32)
    x[2 * BIG + 5] = np.inf
    assert encode(x, "e2m1")[2 * BIG + 5] == 0x7  # saturates (nan="auto" is 'error' for e2m1)
    x[BIG + 7] = np.nan
    with pytest.raises(ValueError, match="nan: NaN input cannot be encoded in 'e2m1'"):
        encode(x, "e2m1")
    for dtype in (ml_dtypes.bfloat16, np.float16):
        with pytest.raises(ValueError, match="nan: NaN input"):
            encode(x.astype(dtype), "e2m1")


@pytest.mark.parametrize("fmt", ["e2m1", "e3m2", "int4"])
@pytest.mark.parametrize("mode", ["rne", "rdn"])
def test_nan_error_tables_encode_every_other_pattern(fmt, mode):
    """nan='error' (the default for formats without NaN): tables built with a stand-in
    policy, NaN entries special; every non-NaN pattern encodes as with any other NaN policy."""
    for x in (ALL_BF16, ALL_F16, F32_EDGES):
        with np.errstate(invalid="ignore"):
            x = x[~np.isnan(x.astype(np.float32))]
        np.testing.assert_array_equal(encode(x, fmt, mode), general(x, fmt, mode))


def test_overflow_error_names_the_first_element_in_input_order_across_chunks():
    x = np.zeros(5 * encode_module.CHUNK_ELEMENTS, np.float32)
    x[3 * encode_module.CHUNK_ELEMENTS + 1] = 100.0
    x[4 * encode_module.CHUNK_ELEMENTS] = np.inf
    with pytest.raises(OverflowError, match="100.0"):
        encode(x, "e2m1", overflow="error")


def test_nan_and_overflow_errors_keep_their_precedence_in_large_arrays():
    x = np.zeros(3 * encode_module.CHUNK_ELEMENTS, np.float32)
    x[3] = np.nan
    x[-1] = 100.0
    with pytest.raises(OverflowError):  # an overflow anywhere before a NaN anywhere, as for one array
        encode(x, "e2m1", overflow="error", nan="error")


def test_no_table_when_a_decision_point_is_inside_a_bfloat16_interval(monkeypatch):
    """Step 3's check: if the codes of low halves 1 and 0xFFFF differ anywhere, no table."""
    real = encode_module.encode_general

    def perturbed(x, *a):
        out = real(x, *a)
        if x.dtype == np.float32:
            out[(x.view(np.uint32) & 0xFFFF) == 0xFFFF] ^= 1
        return out

    encode_table.tables.cache_clear()
    try:
        assert encode_table.tables(fp4spec.get_format("e2m1"), "rne", "saturate", "max", "preserve", "overflow",
                                   general=perturbed) is None
    finally:
        encode_table.tables.cache_clear()


# -- chunking -------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(encode_table, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(encode_table, "CHUNK_ELEMENTS", 7)
    monkeypatch.setattr(encode_module, "CHUNK_ELEMENTS", 5)


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4", "e3m2", "e4m3"])
@pytest.mark.parametrize("mode", ROUNDING_MODES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=hnp.arrays(np.float32, st.integers(1, 60), elements=st.floats(width=32, allow_nan=True)),
       dtype=st.sampled_from([np.float32, ml_dtypes.bfloat16, np.float16, np.float64]))
def test_chunked_paths_equal_one_general_pass(tiny_chunks, fmt, mode, x, dtype):
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    f = fp4spec.get_format(fmt)
    rbits = np.arange(x.size, dtype=np.uint32) * 37 % 256 if mode == "sr" else None
    nan = "nan" if f.has_nan else "signed_zero"
    want = encode_general(x, f, mode, rbits, 8, "saturate", nan, "preserve", "overflow")
    np.testing.assert_array_equal(encode(x, fmt, mode, rbits=rbits, nan=nan), want)
    if x.size % 2 == 0:  # 2-D, random bits broadcast along a row
        x2, r2 = x.reshape(2, -1), None if rbits is None else rbits[: x.size // 2]
        want2 = encode_general(x2, f, mode, None if r2 is None else np.broadcast_to(r2, x2.shape), 8, "saturate",
                               nan, "preserve", "overflow")
        np.testing.assert_array_equal(encode(x2, fmt, mode, rbits=r2, nan=nan), want2)
