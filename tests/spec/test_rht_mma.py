"""The tensor-core RHT arithmetic ``arith="mma:<model>"`` (fp4spec.rht, steps M1-M5).

Two implementations, one truth: :func:`fp4spec.rht.rht` (vectorized: ``model_dot`` of
:mod:`fp4spec.emulator.gemm` over rows) equals a slow scalar reference built here on
:mod:`fp4spec.gemm_reference` (exact Fractions: ``fdpa_step`` on ``_terms_operand`` per k
step, MMA-Sim's float64 special-value check, exact BF16 rounding), bit for bit, on
adversarial and hypothesis-generated BF16 rows. Also: where mma and fwht-fp32 agree and
differ, the errors, the inverse, quantize with the mma RHT, and the NaN bits.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp4spec
from fp4spec import gemm_reference as R
from fp4spec.accumulator_models import BF16, AccumulatorModel, get_accumulator, register_accumulator, \
    unregister_accumulator
from fp4spec.backends import NumpyBackend
from fp4spec.backends.base import BackendError, check_rht_spec
from fp4spec.emulator.gemm import model_dot
from fp4spec.rht import (ARITHS, MMA_SIZES, RHT, TE_SIGNS, arith_names, check_arith, inverse_rht, mma_model,
                         mma_transform_matrix, rht, rht_signs)

MMA = "mma:sm90-bf16"
M = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)  # 0x7F7F
TINY = 2.0 ** -133  # smallest BF16 subnormal
NAN32 = 0x7FFFFFFF


# -- the scalar reference ---------------------------------------------------------------------------

def ref_transform_row(x_row, t, model) -> list[float]:
    """One row through steps M4 (without the NaN canonicalization): per output j, the model's
    chained fused steps over k in ascending order from a +0 accumulator, in exact arithmetic
    (:func:`fp4spec.gemm_reference.fdpa_step`); a step whose float64 sum of products and
    accumulator is NaN or +-Inf gives that (:func:`fp4spec.gemm_reference._fp64_special`)."""
    size = len(x_row)
    out = []
    for j in range(size):
        acc = 0.0
        for k0 in range(0, size, model.k_step):
            a_ops = [float(x_row[k]) for k in range(k0, k0 + model.k_step)]
            b_ops = [float(t[k][j]) for k in range(k0, k0 + model.k_step)]
            special = R.fp64_special(list(zip(a_ops, b_ops)), acc)
            if special is not None:
                acc = special
            else:
                acc = R.fdpa_step(R.terms_operand(a_ops, b_ops, model, BF16), acc, model)
        out.append(acc)
    return out


def ref_rht_bits(x_rows, signs, model, out_dtype: str, inverse: bool = False) -> np.ndarray:
    """Steps M3-M5 by the scalar reference: float32 bits (uint32) or BF16 bits (uint16) per element."""
    size = len(signs)
    t = [[Fraction(int(signs[i]) * (1 if bin(i & j).count("1") % 2 == 0 else -1)) / int(math.isqrt(size))
          for j in range(size)] for i in range(size)]  # M3: diag(s) H / sqrt(size), exact
    if inverse:
        t = [list(col) for col in zip(*t)]
    t = [[float(v) for v in row] for row in t]
    rows = []
    with np.errstate(invalid="ignore"):  # signalling NaNs (hypothesis rows) stay NaNs
        x64 = np.asarray(x_rows, np.float32).astype(np.float64).reshape(-1, size)
    for x_row in x64:
        y = ref_transform_row(x_row, t, model)
        if out_dtype == "float32":
            rows.append([model.nan_bits if math.isnan(v) else int(np.float32(v).view(np.uint32)) for v in y])
        else:  # M5: RNE to BF16, exact; NaN -> nan_bits >> 16
            bits = []
            for v in y:
                if math.isnan(v):
                    bits.append(model.nan_bits >> 16)
                    continue
                r = v if math.isinf(v) else R.round_bf16(Fraction(v)) if v != 0 else v
                bits.append(int(np.float32(r).view(np.uint32)) >> 16)
            rows.append(bits)
    return np.array(rows, np.uint32 if out_dtype == "float32" else np.uint16)


def emu_bits(x_rows, signs, out_dtype: str, arith: str = MMA, inverse: bool = False) -> np.ndarray:
    f = inverse_rht if inverse else rht
    y = f(np.asarray(x_rows, np.float32), len(signs), signs=signs, arith=arith, out_dtype=out_dtype)
    return y.view(np.uint32 if out_dtype == "float32" else np.uint16).reshape(-1, len(signs))


def assert_rows_match(x_rows, signs, model_name: str = "sm90-bf16", inverse: bool = False):
    model = get_accumulator(model_name)
    x_rows = np.asarray(x_rows, np.float32).reshape(-1, len(signs))
    for out in ("float32", "bfloat16"):
        want = ref_rht_bits(x_rows, signs, model, out, inverse)
        got = emu_bits(x_rows, signs, out, "mma:" + model_name, inverse)
        bad = np.argwhere(want != got)
        assert not len(bad), (f"{out}: {len(bad)} differ, first row {bad[0][0]} col {bad[0][1]}: "
                              f"x={x_rows[bad[0][0]].tolist()} emulator 0x{int(got[tuple(bad[0])]):X} "
                              f"reference 0x{int(want[tuple(bad[0])]):X}")


def bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def row(*head, size: int = 16) -> np.ndarray:
    x = np.zeros(size, np.float32)
    x[:len(head)] = head
    return x


SEEDED64 = tuple(int(v) for v in rht_signs(64, seed=7))

ADVERSARIAL = [
    row(2.0 ** 24, 1, -2.0 ** 24),                 # a butterfly drops the 1; the fused sum keeps it
    row(2.0 ** 24, -1, 2.0 ** 24, 1),
    row(2.0 ** 30, 2.0 ** 5, -2.0 ** 30, 2.0 ** 4),  # beyond F = 25 bits: truncated
    row(1, 3 * 2.0 ** -25),                         # RZ: the sum truncates, RNE would round up
    row(1, -3 * 2.0 ** -25),
    row(-1, 3 * 2.0 ** -25),
    row(1, 1),                                      # cancellations to zero: +0
    row(1, -1, 1, -1),
    np.full(16, -0.0, np.float32),                 # every zero +0 (fwht-fp32: y_14 = -0.0)
    row(TINY, -TINY, 5 * TINY, 127 * TINY),        # BF16 subnormals
    row(2.0 ** -126, TINY, -2.0 ** -126),
    np.full(16, TINY, np.float32),
    row(np.inf),                                    # Inf, -Inf, Inf - Inf, NaN
    row(0, -np.inf, 1),
    row(np.inf, -np.inf),
    row(np.inf, np.nan),
    row(3, np.nan),
    np.full(16, M, np.float32),                    # max BF16: the sum overflows to Inf
    row(M, M, -M, M),                               # s * x = [M, M, -M, -M]: y_0 = +0, fwht-fp32 NaN
    row(M, M),
    row(M, 2.0 ** 100, -M),
    np.arange(-8, 8, dtype=np.float32),
    bf16(np.linspace(-3, 5, 16) * 2.0 ** np.arange(-30, 34, 4)),
]


@pytest.mark.parametrize("i", range(len(ADVERSARIAL)))
def test_adversarial_rows_equal_the_scalar_reference(i):
    assert_rows_match(ADVERSARIAL[i], TE_SIGNS)
    assert_rows_match(ADVERSARIAL[i], TE_SIGNS, inverse=True)


def test_signalling_nan_rows():
    assert_rows_match(np.stack([_bf16_from_bits([0x7F81] + [0x3F80] * 15), _bf16_from_bits([0xFF81, 0x7F80] * 8)]),
                      TE_SIGNS)


def test_adversarial_rows_size_64():
    with np.errstate(over="ignore"):
        rows = np.stack([np.concatenate([x, x[::-1] * 2.0 ** 12, -x, np.roll(x, 3)]) for x in ADVERSARIAL[::2]])
    assert_rows_match(rows, SEEDED64)
    assert_rows_match(rows[:3], SEEDED64, inverse=True)


def _bf16_from_bits(bits) -> np.ndarray:
    return np.asarray(bits, np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


any_bf16_bits = st.integers(0, 0xFFFF)
# a narrower exponent window: sums where many terms matter (sign, exponent 118..135, mantissa)
near_bf16_bits = st.builds(lambda s, e, m: (s << 15) | (e << 7) | m, st.integers(0, 1), st.integers(118, 135),
                           st.integers(0, 127))
sparse_bf16_bits = st.one_of(st.just(0), st.just(0x8000), near_bf16_bits, any_bf16_bits)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(any_bf16_bits, near_bf16_bits), min_size=16, max_size=16),
       st.lists(sparse_bf16_bits, min_size=16, max_size=16))
def test_hypothesis_bf16_rows_equal_the_scalar_reference(a, b):
    assert_rows_match(np.stack([_bf16_from_bits(a), _bf16_from_bits(b)]), TE_SIGNS)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(near_bf16_bits, sparse_bf16_bits), min_size=64, max_size=64))
def test_hypothesis_bf16_rows_size_64(a):
    assert_rows_match(_bf16_from_bits(a), SEEDED64)


def test_a_registered_bf16_model():
    """``mma:<model>`` for a user's model (another step, F, rounding and zero sign) equals the
    reference too; an unregistered name is refused again afterwards."""
    m = AccumulatorModel("test-bf16-k8", "fdpa", "bf16_operand", k_step=8, frac_bits=20, final_rounding="rne",
                         e_zero=None, nan_bits=0x7FC00000, zero_sign="signed")
    register_accumulator(m)
    try:
        assert "mma:test-bf16-k8" in arith_names() and check_arith("mma:test-bf16-k8") == "mma:test-bf16-k8"
        rows = np.stack([ADVERSARIAL[i] for i in (0, 2, 3, 8, 9, 14, 17, 21, 22)])
        assert_rows_match(rows, TE_SIGNS, "test-bf16-k8")
        r = RHT.te(arith="mma:test-bf16-k8")
        assert r.spec == "16/mma:test-bf16-k8" and mma_model(r.arith) is m
        y = rht(row(np.nan), signs="te", arith="mma:test-bf16-k8", out_dtype="bfloat16")
        assert np.all(y.view(np.uint16) == 0x7FC0)
    finally:
        unregister_accumulator("test-bf16-k8")
    with pytest.raises(ValueError, match="names no registered accumulator model"):
        check_arith("mma:test-bf16-k8")


# -- mma against fwht-fp32 ------------------------------------------------------------------------------

@pytest.mark.parametrize("size", MMA_SIZES)
@pytest.mark.parametrize("out", ["bfloat16", "float32", "float64"])
def test_mma_equals_fwht_when_every_partial_sum_is_exact(size, out):
    rng = np.random.default_rng(size)
    # non-zero small integers: no zero input that a sign flips to -0.0 (fwht-fp32 keeps -0.0 sums, mma gives +0)
    x = (rng.integers(1, 9, (50, 4 * size)) * rng.choice([-1, 1], (50, 4 * size))).astype(np.float32)
    r = RHT.te if size == 16 else (lambda **kw: RHT.from_seed(3, 64, **kw))
    a = r(arith=MMA, out_dtype=out).apply(x)
    b = r(arith="fwht-fp32", out_dtype=out).apply(x)
    assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def test_mma_differs_from_fwht_on_the_documented_examples():
    """The examples of ``rht``'s docstring, TE signs, float32 output:

    * ``x = [2^24, 1, -2^24, 0, ...]``: mma y_0 = 0.25 (exact; fwht-fp32: 0) and
      y_3 = 2^23 - 0.5 (RZ of 2^23 - 0.25; fwht-fp32 and float64: 2^23);
    * ``x = [1, 3 * 2^-25, 0, ...]``: mma y_0 = 0.25 (RZ), fwht-fp32 0.25 + 2^-25;
    * ``x = [M, M, -M, M, 0, ...]`` (M = max BF16): mma y_0 = +0, fwht-fp32 NaN (Inf - Inf);
    * an all -0.0 row: mma every y_j = +0, fwht-fp32 y_14 = -0.0.
    """
    def both(x):
        with np.errstate(all="ignore"):
            return (rht(x, signs="te", arith=MMA, out_dtype="float32"),
                    rht(x, signs="te", arith="fwht-fp32", out_dtype="float32"))

    mma, fw = both(row(2.0 ** 24, 1, -2.0 ** 24))
    assert mma[0] == 0.25 and fw[0] == 0.0
    assert mma[3] == 2.0 ** 23 - 0.5 and fw[3] == 2.0 ** 23
    mma, fw = both(row(1, 3 * 2.0 ** -25))
    assert mma[0] == 0.25 and fw[0] == 0.25 + 2.0 ** -25
    mma, fw = both(row(M, M, -M, M))
    assert mma[0] == 0 and not np.signbit(mma[0]) and np.isnan(fw[0])
    mma, fw = both(np.full(16, -0.0, np.float32))
    assert not np.signbit(mma).any() and np.signbit(fw[14])
    for text in ("2^24, 1, -2^24", "3 * 2^-25", "[M, M, -M, M", "y_14 = -0.0"):
        assert text in rht.__doc__


# -- errors ---------------------------------------------------------------------------------------------

def test_input_must_hold_bf16_values():
    bad = row(1 + 2.0 ** -8)
    with pytest.raises(ValueError, match=r"x: arith 'mma:sm90-bf16' .* operand is bfloat16; x\[0\] = 1.00390625 "
                                         r"\(float32\) is not a bfloat16 value"):
        rht(bad, signs="te", arith=MMA)
    for x in (np.full(16, 1 + 2.0 ** -30), np.full(16, 1e300), row(2.0 ** -140).astype(np.float64),
              np.full(16, 1 + 2.0 ** -10, np.float16), np.full(16, 257, np.int32)):
        with pytest.raises(ValueError, match="x: arith 'mma:sm90-bf16'"):
            rht(x, signs="te", arith=MMA)
    with pytest.raises(ValueError, match="x: arith 'mma:sm90-bf16'"):
        RHT.te(arith=MMA).inverse(RHT.te(arith=MMA, out_dtype="float32").apply(row(1, 3 * 2.0 ** -25)))
    # accepted: bf16, and float16/float32/float64/integers holding bf16 values (NaN, +-Inf too)
    want = rht(row(1, -2, 0.5, np.inf, np.nan), signs="te", arith=MMA)
    for x in (row(1, -2, 0.5, np.inf, np.nan).astype(ml_dtypes.bfloat16), row(1, -2, 0.5, np.inf, np.nan).astype(np.float64),
              row(1, -2, 0.5, np.inf, np.nan).astype(np.float16)):
        assert np.array_equal(rht(x, signs="te", arith=MMA).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(rht(np.arange(16), signs="te", arith=MMA), rht(np.arange(16.0), signs="te", arith=MMA))


def test_size_arith_and_model_errors():
    for size in (32, 128):
        with pytest.raises(ValueError, match=f"size: {size} with arith 'mma:sm90-bf16': the mma arithmetic takes "
                                             f"size 16 or 64 only"):
            rht(np.zeros(size), size, seed=1, arith=MMA)
        with pytest.raises(ValueError, match=f"size: {size} with arith 'mma:sm90-bf16'"):
            RHT.from_seed(1, size, arith=MMA)
    with pytest.raises(ValueError, match=r"arith: 'mma:nope' names no registered accumulator model \('nope'\); "
                                         r"allowed: 'float64', 'fwht-fp32', 'mma:sm90-bf16'"):
        rht(np.zeros(16), signs="te", arith="mma:nope")
    with pytest.raises(ValueError, match="arith: 'mma:sm100-mxf8f6f4': accumulator model 'sm100-mxf8f6f4' has "
                                         "algorithm 'fdpa' and scales 'product', not a bf16 tensor-core model"):
        RHT.te(arith="mma:sm100-mxf8f6f4")
    with pytest.raises(ValueError, match="arith: 'mma:fp32': accumulator model 'fp32' has algorithm 'fma'"):
        rht(np.zeros(16), signs="te", arith="mma:fp32")
    register_accumulator(AccumulatorModel("test-fma-bf16", "fma", "bf16_operand", k_step=1))
    register_accumulator(AccumulatorModel("test-bf16-k32", "fdpa", "bf16_operand", k_step=32, frac_bits=25))
    try:
        with pytest.raises(ValueError, match="arith: 'mma:test-fma-bf16': accumulator model 'test-fma-bf16' has "
                                             "algorithm 'fma' and scales 'bf16_operand'"):
            rht(np.zeros(16), signs="te", arith="mma:test-fma-bf16")
        with pytest.raises(ValueError, match="accumulator: 'test-fma-bf16' has algorithm 'fma'"):
            model_dot(np.zeros((1, 16)), np.zeros((16, 1)), np.zeros((1, 1), np.float32), "test-fma-bf16")
        with pytest.raises(ValueError, match="size: 16 with arith 'mma:test-bf16-k32': the model's step "
                                             "k_step=32 does not divide the size"):
            RHT.te(arith="mma:test-bf16-k32")
        RHT.from_seed(1, 64, arith="mma:test-bf16-k32").apply(np.ones(64, np.float32))
    finally:
        unregister_accumulator("test-fma-bf16")
        unregister_accumulator("test-bf16-k32")
    with pytest.raises(ValueError, match="accumulator: unknown model 'nope'"):
        model_dot(np.zeros((1, 16)), np.zeros((16, 1)), np.zeros((1, 1), np.float32), "nope")


def test_backend_specs():
    assert ARITHS == ("float64", "fwht-fp32", MMA) and MMA_SIZES == (16, 64)
    assert check_rht_spec(" 16/mma:sm90-bf16/bfloat16") == "16/mma:sm90-bf16/bfloat16"
    assert check_rht_spec(RHT.from_seed(1, 64, arith=MMA)) == "64/mma:sm90-bf16"
    for bad in ("32/mma:sm90-bf16", "128/mma:sm90-bf16", "16/mma:fp32", "16/mma:nope"):
        with pytest.raises(BackendError, match="is not an RHT spec"):
            check_rht_spec(bad)
    caps = NumpyBackend().capabilities()
    assert "16/mma:sm90-bf16" in caps.rht and "64/mma:sm90-bf16" in caps.rht
    assert not any(s.startswith(("32/mma", "128/mma")) for s in caps.rht)


# -- the inverse, the matrix, the value -------------------------------------------------------------------

@pytest.mark.parametrize("r", [RHT.te(arith=MMA), RHT.from_seed(11, 64, arith=MMA)])
def test_inverse_recovers_exact_inputs(r):
    """Small integers: every output is exact in BF16 and every sum exact, so T^T undoes T."""
    x = np.random.default_rng(2).integers(-8, 9, (6, 2 * r.size)).astype(np.float32)
    y = r.apply(x)
    assert y.dtype == ml_dtypes.bfloat16
    back = r.inverse(y)
    assert back.dtype == np.float32 and np.array_equal(back, x)
    yc = r.apply(np.ascontiguousarray(x.T), axis=0)  # columns
    assert np.array_equal(yc.view(np.uint16), np.ascontiguousarray(y.T).view(np.uint16))
    assert np.array_equal(r.inverse(yc, axis=0), x.T)


def test_transform_matrix_and_value():
    t = mma_transform_matrix(16, TE_SIGNS)
    assert t.dtype == np.float32 and set(np.abs(t).ravel()) == {0.25}
    assert np.array_equal(t.astype(ml_dtypes.bfloat16).astype(np.float32), t)
    assert np.array_equal(mma_transform_matrix(16, TE_SIGNS, inverse=True), t.T)
    assert set(np.abs(mma_transform_matrix(64, SEEDED64)).ravel()) == {0.125}
    r = RHT.te(arith=MMA)
    assert r.spec == "16/mma:sm90-bf16" and str(r) == "RHT 16/mma:sm90-bf16, signs 0xD7E8 (TE), out bfloat16"
    assert r.apply(np.zeros(16, np.float32)).dtype == ml_dtypes.bfloat16
    assert rht(np.zeros(16), signs="te", arith=MMA).dtype == np.float32  # None: float32 (as fwht-fp32)
    assert rht(np.zeros(16), signs="te", arith=MMA, out_dtype="float64").dtype == np.float64
    assert mma_model("fwht-fp32") is None and mma_model(MMA) is get_accumulator("sm90-bf16")


def test_nan_bits():
    """NaN outputs are the model's NaN: 0x7FFFFFFF (float32), 0x7FFF (BF16), whatever NaN came in."""
    nan_in = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    for x in (row(np.nan), row(np.nan, 1, np.inf), row(*nan_in)):
        assert np.all(rht(x, signs="te", arith=MMA, out_dtype="bfloat16").view(np.uint16) == 0x7FFF)
        assert np.all(rht(x, signs="te", arith=MMA, out_dtype="float32").view(np.uint32) == NAN32)
        assert np.all(np.isnan(rht(x, signs="te", arith=MMA, out_dtype="float64")))
    y = rht(row(np.inf, -np.inf), signs="te", arith=MMA, out_dtype="bfloat16").view(np.uint16)
    assert y.tolist() == [0x7FFF, 0x7F80] * 8  # NaN where Inf - Inf meets, else Inf (TE: s_0 = s_1 = 1)
    y32 = rht(row(np.inf, -np.inf), signs="te", arith=MMA, out_dtype="float32").view(np.uint32)
    assert y32.tolist() == [NAN32, 0x7F800000] * 8


def test_many_rows_in_chunks():
    """More rows than one model_dot chunk: rows are independent."""
    x = bf16(np.random.default_rng(5).standard_t(3, (5000, 64)) * 100)
    r = RHT.te(arith=MMA, out_dtype="float32")
    whole = r.apply(x)
    assert np.array_equal(whole[4000:].view(np.uint32), r.apply(x[4000:]).view(np.uint32))


# -- quantize ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4"])
def test_quantize_with_the_mma_rht_is_the_composition(scheme):
    rng = np.random.default_rng(3)
    x = bf16(rng.standard_t(3, (8, 128)) * np.exp2(rng.integers(-6, 7, (8, 1))))
    x[0, :3] = (2.0 ** 24, 1, -2.0 ** 24)
    r = RHT.te(arith=MMA)
    y = r.apply(x).astype(np.float32)  # bf16(rht(x))
    want = fp4spec.quantize(y, scheme)
    for xin in (x, x.astype(ml_dtypes.bfloat16), x.astype(np.float64)):
        q = fp4spec.quantize(xin, scheme, rht=r)
        assert q.rht == r and q.rht.spec == "16/mma:sm90-bf16"
        assert np.array_equal(q.codes, want.codes) and np.array_equal(q.scales, want.scales)
        assert (q.global_scale is None) == (want.global_scale is None)
        if q.global_scale is not None:
            assert np.float32(q.global_scale).view(np.uint32) == np.float32(want.global_scale).view(np.uint32)
    q64 = fp4spec.quantize(x, scheme, rht=RHT.from_seed(2, 64, arith=MMA), backend="numpy")
    assert q64.rht.spec == "64/mma:sm90-bf16"
    with pytest.raises(ValueError, match="x: arith 'mma:sm90-bf16'"):
        fp4spec.quantize(x + np.float32(2.0 ** -12), scheme, rht=r)


def test_step_m4_the_emulator_installs_equals_the_spec_reference():
    """The spec defines step M4 by its scalar reference (fp4spec.rht.mma_dot_reference); the
    emulator installs its vectorized twin (fp4spec.emulator.rht.mma_dot) when imported. Both,
    on every adversarial row and both transform matrices: the same float32 bits (NaN as NaN)."""
    import sys

    from fp4spec.emulator.rht import mma_dot

    spec_rht = sys.modules["fp4spec.rht"]  # the module; fp4spec.rht is the function

    assert spec_rht._mma_dot is mma_dot  # import fp4spec installed it
    model = get_accumulator("sm90-bf16")
    rows = np.stack(ADVERSARIAL)
    for inverse in (False, True):
        t = mma_transform_matrix(16, TE_SIGNS, inverse)
        want = spec_rht.mma_dot_reference(rows, t, model)
        got = mma_dot(rows, t, model)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got.view(np.uint32)[ok], want.view(np.uint32)[ok])
