"""The GEMM emulator's fast paths (BLAS sums proved exact) equal the scalar reference bit for bit.

Three kinds of evidence:

* the float64 building blocks (:mod:`fp4spec.emulator.gemm_float`) against exact rational
  arithmetic, with the float32 midpoints and subnormals that need their special cases;
* constructed operands at each boundary of each exactness test (one term over 24 bits, an
  lsb of 2^-150, a truncation one bit below F, ...), each with the *planted defect* that
  moves that boundary by one: the reference must then tell the emulator apart, so the test
  can fail;
* random operands with scale spreads around every truncation width, per model, against
  the reference (hypothesis), and on typical data a check that the first tier did all the
  work (the speed claims depend on it).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from fp4spec.conformance.matmul_properties import (
    k_unit,
    make_operand,
    operand_from_values,
    schemes_for,
)
from fp4spec.emulator import gemm_cdna3, gemm_exact, gemm_fdpa, gemm_float, gemm_fma, gemm_stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fp4spec
from fp4spec import gemm_reference as ref
from fp4spec.accumulator_models import accumulators, get_accumulator
from fp4spec.api.gemm import matmul

MODELS = tuple(accumulators)
F32 = np.float32


@pytest.fixture(autouse=True)
def tiered(monkeypatch):
    """The operands here are small: without this, GEMMs below SMALL_WORK multiply-adds go to
    the integer algorithms directly and the fast paths would not be tested."""
    monkeypatch.setattr(gemm_float, "SMALL_WORK", 0)


def assert_same(got, want, msg=""):
    got, want = np.asarray(got, F32), np.asarray(want, F32)
    assert got.shape == want.shape, msg
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))
    assert not len(bad), f"{msg}: {len(bad)} differ, first {tuple(bad[0])}: {got[tuple(bad[0])]!r} vs " \
                         f"{want[tuple(bad[0])]!r}"


def differs(got, want) -> bool:
    return not np.array_equal(np.asarray(got, F32).view(np.uint32), np.asarray(want, F32).view(np.uint32))


# =====================================================================================
# Building blocks
# =====================================================================================

def _rand_f64(rng, n, emin=-200, emax=140):
    """float64 values with 1 to 53 significant bits over a wide exponent range."""
    nb = rng.integers(1, 54, n)
    sig = np.array([int(rng.integers(1 << (b - 1), 1 << b)) for b in nb], dtype=object)
    e = rng.integers(emin, emax, n)
    v = np.array([math.ldexp(float(s), int(x) - int(b)) for s, x, b in zip(sig, e, nb)])
    return v * np.where(rng.random(n) < 0.5, -1.0, 1.0)


def test_rz_and_rne_of_exact_float64_match_exact_rounding():
    rng = np.random.default_rng(0)
    s = _rand_f64(rng, 4000)
    s[:300] = _rand_f64(rng, 300, -190, -120)                     # float32 subnormals and below
    s[300:330] = np.ldexp(1.0, 128) * (1 - 2.0 ** -rng.integers(20, 53, 30))   # just below 2^128
    s[330:340] = [2.0 ** 128, -2.0 ** 128, 2.0 ** 130, 0.0, -0.0, 2.0 ** -149, 2.0 ** -150, -2.0 ** -151,
                  3 * 2.0 ** -150, -(2.0 ** 24 + 3)]
    for mode in ("rz", "rne"):
        got = gemm_float.round_f32(s, mode)
        want = np.array([ref.round_f32(Fraction(float(v)), mode) if v != 0 else float(v) for v in s], F32)
        assert_same(got, want, mode)


def test_fma32_f64_recomputes_float32_midpoints():
    """a * b + c where the float64 sum lands exactly on a float32 midpoint although the exact
    value does not: a = 1 + 2^-20, b = (1 - 2^-20) 2^(e - 24), so a b = 2^(e - 24) - 2^(e - 64),
    and c = (1 + 2^-23) 2^e (odd). The plain cast rounds the tie to even, one ulp too far."""
    e = np.arange(-100, 100, 7)
    a = np.full(e.shape, 1 + 2.0 ** -20)
    b = np.ldexp(1 - 2.0 ** -20, e - 24)
    c = np.ldexp(1 + 2.0 ** -23, e)
    want = np.array([ref.fma32(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], F32)
    assert differs((a * b + c).astype(F32), want)                  # the planted defect: no recomputation
    assert_same(gemm_float.fma32_f64(a, b, c), want)


def test_fma32_f64_matches_exact_fma():
    rng = np.random.default_rng(1)
    n = 4000
    bits = rng.integers(0, 1 << 32, (3, n), dtype=np.uint64).astype(np.uint32)
    with np.errstate(invalid="ignore"):     # signalling NaNs
        a, b, c = (x.view(F32).astype(np.float64) for x in bits)
    # operands of 8 significant bits and subnormal results, as the FMA chains see them
    a[:1000] = np.ldexp(rng.integers(-255, 256, 1000), rng.integers(-90, 40, 1000))
    b[:1000] = np.ldexp(rng.integers(-255, 256, 1000), rng.integers(-90, 40, 1000))
    c[:500] = -(a[:500] * b[:500]).astype(F32)
    got = gemm_float.fma32_f64(a, b, c).astype(F32)
    want = np.array([ref.fma32(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], F32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert_same(got[~nan], want[~nan])


def test_round_product_f32_rounds_once():
    rng = np.random.default_rng(2)
    s = _rand_f64(rng, 3000, -300, 200)
    for g in (F32(1 + 2.0 ** -23 * 4099) * F32(2.0 ** -90), F32(-3.0), F32(2.0 ** -149), F32(3e38)):
        got = gemm_float.round_product_f32(s, g)
        want = np.array([ref.round_f32(Fraction(float(v)) * Fraction(float(g))) for v in s], F32)
        assert_same(got, want, str(g))
    assert_same(gemm_float.round_product_f32(np.array([0.0, -0.0, -1.0]), F32(0.0)), np.zeros(3, F32))


def test_round_product_f32_midpoint_needs_the_error_term():
    """Products s g whose float64 rounding is a float32 midpoint m while the exact product is
    not: s is m / g rounded to float64, and its neighbours. The plain cast is wrong for some
    of them (the planted defect), the function for none."""
    rng = np.random.default_rng(3)
    wrong_cast, seen = 0, 0
    for _ in range(300):
        g = F32((1 + int(rng.integers(1, 1 << 23)) * 2.0 ** -23) * 2.0 ** int(rng.integers(-20, 20)))
        m = (2 * int(rng.integers(1 << 23, 1 << 24)) + 1) * 2.0 ** int(rng.integers(-60, 60))
        for s in np.nextafter(m / float(g), np.inf) * 0 + np.array([m / float(g)]) * (1 + np.arange(-3, 4) * 2.0 ** -52):
            p = s * float(g)
            if not gemm_float.is_f32_midpoint(np.array([p]))[0] or Fraction(s) * Fraction(float(g)) == Fraction(p):
                continue
            seen += 1
            want = F32(ref.round_f32(Fraction(s) * Fraction(float(g))))
            assert gemm_float.round_product_f32(np.array([s]), g)[0].view(np.uint32) == want.view(np.uint32)
            wrong_cast += F32(p).view(np.uint32) != want.view(np.uint32)
    assert seen > 50 and wrong_cast > 0


def test_is_f32_midpoint():
    x = np.array([1 + 2.0 ** -24, 1 + 3 * 2.0 ** -24, 1 + 2.0 ** -23, 1 + 2.0 ** -24 + 2.0 ** -52,
                  2.0 ** 128 - 2.0 ** 103, 2.0 ** -150, 3 * 2.0 ** -150, 2.0 ** -149, 0.0, np.inf, np.nan,
                  -(1 + 2.0 ** -24)])
    assert gemm_float.is_f32_midpoint(x).tolist() == [True, True, False, False, True, True, True, False, False,
                                                       False, False, True]


def test_exponents_and_lsbs():
    from fp4spec.reference import floor_log2

    rng = np.random.default_rng(4)
    x = rng.integers(0, 1 << 32, 3000, dtype=np.uint64).astype(np.uint32).view(F32)
    x[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    e, lsb = gemm_float.f32_exp_lsb(x)
    with np.errstate(invalid="ignore"):
        e64, lsb64 = gemm_stats.exp_lsb(x.astype(np.float64))
    for v, ei, li, e6, l6 in zip(x, e, lsb, e64, lsb64):
        if not np.isfinite(v):
            assert ei == gemm_stats.BAD and li == gemm_stats.POS
        elif v == 0:
            assert (ei, li, e6, l6) == (gemm_stats.SENT, gemm_stats.POS, gemm_stats.SENT, gemm_stats.POS)
        else:
            f = abs(Fraction(float(v)))
            assert e6 == floor_log2(f) and ei == max(e6, -126)
            odd = f / Fraction(2) ** int(l6)
            assert odd.denominator == 1 and odd.numerator % 2 == 1 and li == l6


def test_bounds_are_upper_bounds():
    rng = np.random.default_rng(5)
    a = np.ldexp(rng.integers(-15, 16, (7, 300)), rng.integers(-20, 20, (7, 300))).astype(np.float64)
    b = np.ldexp(rng.integers(-15, 16, (5, 300)), rng.integers(-20, 20, (5, 300))).astype(np.float64)
    exact = np.array([[sum(abs(Fraction(float(x)) * Fraction(float(y))) for x, y in zip(r, s)) for s in b] for r in a])
    sq = gemm_float.square_sums(a, 300), gemm_float.square_sums(b, 300)
    cb = gemm_float.cauchy_bound(sq[0], sq[1], 0.0)
    mag_a = np.array([[int(np.max(np.frexp(np.abs(r))[1]))] for r in a])
    mag_b = np.array([[int(np.max(np.frexp(np.abs(r))[1]))] for r in b])
    mb = gemm_float.magnitude_bound(mag_a, mag_b, 300, 0.0)
    ub = gemm_float.upper_bound(np.abs(a) @ np.abs(b).T, 0.0)
    for i in range(7):
        for j in range(5):
            assert exact[i, j] <= Fraction(float(ub[i, j])) <= Fraction(cb) and exact[i, j] <= Fraction(mb)


# =====================================================================================
# Constructed boundaries, each with the planted defect that moves it
# =====================================================================================

def _pad(rows, k):
    """Rows of values padded with zeros to length k."""
    return [list(r) + [0.0] * (k - len(r)) for r in rows]


def _check(qa, qb, model, c=None, *, defect=None, monkeypatch=None):
    """The emulator equals the reference; with ``defect`` (a function applying monkeypatches)
    it must differ."""
    want = ref.matmul_reference(qa, qb, accumulator=model, c=c)
    assert_same(matmul(qa, qb, accumulator=model, c=c), want, getattr(model, "name", model))
    if defect is not None:
        with monkeypatch.context() as mp:
            defect(mp)
            assert differs(matmul(qa, qb, accumulator=model, c=c), want), "the planted defect went unnoticed"


def test_fdpa_sum_of_25_bits_rounds(monkeypatch):
    """c = 2^24 - 1 plus four products of 1: the step's sum 2^24 + 3 needs 25 bits; Tier 1
    must not take it (RZ gives 2^24 + 2, the exact sum cast to float32 2^24 + 4)."""
    c = np.array([[2.0 ** 24 - 1]], F32)
    for model in ("sm90-bf16", "sm100-mxf8f6f4", "sm100-mxf4nvf4"):
        k = math.lcm(get_accumulator(model).k_step, 32)
        q = operand_from_values(_pad([[1.0] * 4], k), [[1.0] * (k // 32)], "mxfp4")
        _check(q, q, model, c, defect=lambda mp: mp.setattr(gemm_fdpa, "F32_SIG", 25), monkeypatch=monkeypatch)


def test_fdpa_lsb_below_float32_subnormals(monkeypatch):
    """One product 3 * 2^-150 (lsb 2^-150): RZ gives 2^-149; float32's nearest 2^-148."""
    qa = operand_from_values(_pad([[1.5]], 32), [[2.0 ** -76]], "mxfp4")
    qb = operand_from_values(_pad([[1.0]], 32), [[2.0 ** -73]], "mxfp4")
    _check(qa, qb, "sm90-bf16", defect=lambda mp: mp.setattr(gemm_fdpa, "F32_LSB_MIN", -150),
           monkeypatch=monkeypatch)


def test_fdpa_group_term_that_cancels_sets_the_exponent(monkeypatch):
    """A group whose products cancel (sum 0) still has its scales' exponent 0 and sets e_max;
    with F = 23 a term of 2^-24 in another group is truncated to 0. Tier 1 sees the sums'
    magnitudes, not that exponent: its test H <= lo + F is the one that refuses."""
    model = dataclasses.replace(get_accumulator("sm100-mxf4nvf4"), name="group-f23", frac_bits=23)
    qa = operand_from_values([[0.5, 0.5] + [0.0] * 30 + [0.5] + [0.0] * 31], [[1.0, 2.0 ** -11]], "mxfp4")
    qb = operand_from_values([[0.5, -0.5] + [0.0] * 30 + [0.5] + [0.0] * 31], [[1.0, 2.0 ** -11]], "mxfp4")
    orig = gemm_fdpa._tier1

    def loose(mp):
        mp.setattr(gemm_fdpa, "_tier1", lambda *args: orig(*args[:-2], args[-2] + 1, args[-1]))

    _check(qa, qb, model, defect=loose, monkeypatch=monkeypatch)


def test_fdpa_zero_term_exponent(monkeypatch):
    """A model whose zero terms have exponent -100: a product of 2^-126 next to a zero product
    is truncated to 0 (Tier 1's test e_zero <= lo + F refuses it)."""
    model = dataclasses.replace(get_accumulator("sm90-bf16"), name="ez-100", e_zero=-100)
    q = operand_from_values(_pad([[0.5]], 32), [[2.0 ** -62]], "mxfp4")
    orig = gemm_fdpa._tier1

    def loose(mp):
        mp.setattr(gemm_fdpa, "_tier1", lambda *args: orig(*args[:-1], args[-1] - 1))

    _check(q, q, model, defect=loose, monkeypatch=monkeypatch)


def _tier2_defect(which):
    orig = gemm_fdpa._tier2_tests

    def patched(hi, lo, F, ez):
        ok_a, q, t = orig(hi, lo, F, ez)
        if which == "a":
            ok_a = lo + F + 1 >= np.maximum(hi, ez)
        if which == "b":
            q = np.zeros_like(q)
        if which == "c":
            t = np.full_like(t, np.inf)
        return ok_a, q, t

    return lambda mp: mp.setattr(gemm_fdpa, "_tier2_tests", patched)


def test_fdpa_product_truncated_by_one_bit(monkeypatch):
    """256 * 256 and -2^-9 * 0.5 in one step of sm90-bf16: e_max = 16, F = 25, so -2^-10 lies
    one bit below the alignment and is truncated away; Tier 2's test (a) refuses."""
    qa = operand_from_values(_pad([[256.0, -2.0 ** -9]], 32), [[1.0]], "mxfp8_e4m3")
    qb = operand_from_values(_pad([[256.0, 0.5]], 32), [[1.0]], "mxfp8_e4m3")
    _check(qa, qb, "sm90-bf16", defect=_tier2_defect("a"), monkeypatch=monkeypatch)


def test_fdpa_accumulator_below_the_alignment(monkeypatch):
    """Products 1 and -1 cancel; c = 2^-30 lies below 2^(e_max - F) and is truncated: +0.
    Tier 2's test (b) refuses."""
    qa = operand_from_values(_pad([[1.0, 1.0]], 32), [[1.0]], "mxfp4")
    qb = operand_from_values(_pad([[1.0, -1.0]], 32), [[1.0]], "mxfp4")
    c = np.array([[2.0 ** -30]], F32)
    _check(qa, qb, "sm100-mxf8f6f4", c, defect=_tier2_defect("b"), monkeypatch=monkeypatch)


def test_fdpa_accumulator_above_the_products(monkeypatch):
    """c = 2^30 + 128 sets e_max = 30: the products 112 and 16 (lsb 2^4) are truncated to 96
    and 0, so RZ keeps c; their exact sum would reach c + 128. Tier 2's test (c) refuses."""
    qa = operand_from_values(_pad([[112.0, 16.0]], 32), [[1.0]], "mxfp8_e4m3")
    qb = operand_from_values(_pad([[1.0, 1.0]], 32), [[1.0]], "mxfp8_e4m3")
    c = np.array([[2.0 ** 30 + 128]], F32)
    _check(qa, qb, "sm90-bf16", c, defect=_tier2_defect("c"), monkeypatch=monkeypatch)


def test_fma_chain_boundaries(monkeypatch):
    """fp32: c = 2^24 - 1 plus four products of 1 rounds at every FMA (2^24); products of
    2^-150 round to 0 one by one; -0 stays -0 only if every product is -0."""
    one = operand_from_values(_pad([[1.0] * 4], 32), [[1.0]], "mxfp4")
    _check(one, one, "fp32", np.array([[2.0 ** 24 - 1]], F32),
           defect=lambda mp: mp.setattr(gemm_fma, "F32_SIG", 25), monkeypatch=monkeypatch)
    tiny = operand_from_values(_pad([[0.5, 0.5]], 32), [[2.0 ** -74]], "mxfp4")
    _check(tiny, tiny, "fp32", defect=lambda mp: mp.setattr(gemm_fma, "F32_LSB_MIN", -150),
           monkeypatch=monkeypatch)
    neg = operand_from_values([[-0.0] * 32], [[1.0]], "mxfp4")
    pos = operand_from_values([[0.0] * 32], [[1.0]], "mxfp4")
    _check(neg, pos, "fp32", np.array([[-0.0]], F32),
           defect=lambda mp: mp.setattr(gemm_fma, "has_negative_zero", lambda acc: False), monkeypatch=monkeypatch)


def test_cdna3_block_sum_of_25_bits(monkeypatch):
    """E5M2 rows {56, 2^-4}: W = (5 + 5) - (-4 - 4) = 18 > W_max = 17 for blocks of 32. The
    block's 31 products 3136 and one 2^-8 sum to 97216 + 2^-8: 25 bits, RNE to 97216 (a tie).
    With c = 2^-9 the FMA then gives 97216; from the exact sum it would give 97216 + 2^-7."""
    a = [[56.0] * 15 + [2.0 ** -4] + [56.0] * 16]
    qa = operand_from_values(a, [[1.0]], "mxfp8_e5m2")
    c = np.array([[2.0 ** -9]], F32)
    _check(qa, qa, "cdna3-fp8", c, defect=lambda mp: mp.setattr(
        gemm_cdna3, "stage_a_width_limit", lambda model, block: 18), monkeypatch=monkeypatch)


def test_cdna3_scale_product_underflows(monkeypatch):
    """Scales 2^-76 on both sides: fp32(sa sb) = fp32(2^-152) = 0, so the block adds 0 although
    16 * 2^-152 = 2^-148 is a float32. Stage B's scale-range test refuses the BLAS sum."""
    q = operand_from_values(_pad([[4.0]], 32), [[2.0 ** -76]], "mxfp4")
    _check(q, q, "cdna3-fp8", defect=lambda mp: mp.setattr(gemm_cdna3, "_SCALE_EXP", 1000), monkeypatch=monkeypatch)


def test_exact_sum_wider_than_float64(monkeypatch):
    """E5M2 products 2^25, 2 and 2^-32: the exact sum 2^25 + 2 + 2^-32 lies just above a float32
    midpoint; float64 drops 2^-32 and the tie goes to even. Not provable: the integer path."""
    qa = operand_from_values(_pad([[2.0 ** 15, 2.0, 2.0 ** -16]], 32), [[1.0]], "mxfp8_e5m2")
    qb = operand_from_values(_pad([[2.0 ** 10, 1.0, 2.0 ** -16]], 32), [[1.0]], "mxfp8_e5m2")
    _check(qa, qb, "exact", defect=lambda mp: mp.setattr(gemm_exact, "_provable", lambda *args: True),
           monkeypatch=monkeypatch)


# =====================================================================================
# Random operands: every model against the reference, scale spreads around each width
# =====================================================================================

def _scale_codes(rng, sch, shape, center, spread):
    fmt = sch.scale
    valid = np.array([c for c in range(1 << fmt.bits) if c not in set(fmt.nan_codes)])
    vals = np.asarray(fmt.values, np.float64)[valid]
    lv = np.log2(np.where(vals > 0, vals, 2.0 ** -300))
    target = center + rng.uniform(-spread / 2, spread / 2, shape)
    codes = valid[np.abs(lv[None, :] - target.reshape(-1, 1)).argmin(axis=1)].reshape(shape)
    if rng.random() < 0.15 and fmt.nan_codes:
        codes = np.where(rng.random(shape) < 0.05, fmt.nan_codes[0], codes)
    return codes.astype(np.uint8)


def _elements(rng, sch, shape):
    fin = np.array(sch.element.finite_codes, np.uint8)
    vals = np.abs(np.asarray(sch.element.values, np.float64)[fin])
    kind = rng.integers(0, 3)
    if kind == 1:       # the largest and the smallest magnitudes only: widest products
        fin = fin[(vals == vals.max()) | (vals == vals[vals > 0].min())]
    codes = rng.choice(fin, shape)
    return np.where(rng.random(shape) < rng.choice([0.0, 0.3, 0.9]), 0, codes).astype(np.uint8)


def _random_case(seed: int, model_name: str):
    rng = np.random.default_rng(seed)
    model = get_accumulator(model_name)
    schemes = schemes_for(model)
    sch = fp4spec.get_scheme(schemes[int(rng.integers(len(schemes)))])
    m, n = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    k = k_unit(model, sch) * int(rng.integers(1, 4))
    center = float(rng.choice([rng.uniform(-8, 8), rng.uniform(-130, 130)]))
    spread = float(rng.choice([0, 4, 12, 20, 24, 26, 34, 36, 60]))
    nb = k // sch.block_size
    sa = _scale_codes(rng, sch, (m, nb), center + rng.uniform(-spread, spread, (m, 1)), spread)
    sb = _scale_codes(rng, sch, (n, nb), center + rng.uniform(-spread, spread, (n, 1)), spread)
    g = (lambda: F32(2.0 ** rng.integers(-30, 30))) if sch.global_scale else (lambda: None)
    qa = make_operand(_elements(rng, sch, (m, k)), sa, sch, g())
    qb = make_operand(_elements(rng, sch, (n, k)), sb, sch, g())
    c = None
    if rng.random() < 0.7:
        e = rng.integers(int(2 * center) - 40, int(2 * center) + 40, (m, n))
        with np.errstate(over="ignore"):
            c = (np.ldexp(1.0 + rng.integers(0, 1 << 23, (m, n)) / 2.0 ** 23, e)
                 * np.where(rng.random((m, n)) < 0.5, -1, 1)).astype(F32)
        c[rng.random((m, n)) < 0.1] = -0.0
    return qa, qb, c


@pytest.mark.parametrize("model", MODELS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_random_spreads_equal_the_reference(model, seed):
    qa, qb, c = _random_case(seed, model)
    want = ref.matmul_reference(qa, qb, accumulator=model, c=c)
    assert_same(matmul(qa, qb, accumulator=model, c=c), want, f"{model} seed={seed}")
    small, gemm_float.SMALL_WORK = gemm_float.SMALL_WORK, 1 << 40       # the integer algorithms alone
    try:
        assert_same(matmul(qa, qb, accumulator=model, c=c), want, f"{model} seed={seed}, integer path")
    finally:
        gemm_float.SMALL_WORK = small


def _counting(monkeypatch):
    """Count the outputs that leave Tier 1 (fdpa, fma chains) or the exact model's BLAS sum."""
    counts = {"tier2": 0, "integer": 0}
    steps, chain_steps, integer = gemm_fdpa._steps, gemm_fma.fma_chain, gemm_exact.exact_integer

    def fdpa_steps(a, b, mi, *rest):
        counts["tier2"] += len(mi)
        return steps(a, b, mi, *rest)

    def fma_chain(a, b, acc0, chunk, per_term, *rest, **kw):
        def counted(mi, *r):
            counts["tier2"] += len(mi)
            return per_term(mi, *r)
        return chain_steps(a, b, acc0, chunk, counted, *rest, **kw)

    def exact_integer(a, b, c, g):
        counts["integer"] += c.size
        return integer(a, b, c, g)

    monkeypatch.setattr(gemm_fdpa, "_steps", fdpa_steps)
    monkeypatch.setattr(gemm_fma, "fma_chain", fma_chain)
    monkeypatch.setattr(gemm_cdna3, "fma_chain", fma_chain)
    monkeypatch.setattr(gemm_exact, "exact_integer", exact_integer)
    return counts


@pytest.mark.parametrize("model", MODELS)
def test_typical_data_takes_the_first_tier(model, monkeypatch):
    """Normal random operands, 48 x 2048 by 40 x 2048: every output is proved in the first tier
    (the speed of the emulator rests on it); sampled outputs equal the reference."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((48, 2048)).astype(F32)
    y = rng.standard_normal((40, 2048)).astype(F32)
    counts = _counting(monkeypatch)
    for scheme in [s for s in ("nvfp4", "mxfp4") if s in schemes_for(model)]:
        qa, qb = fp4spec.quantize(x, scheme), fp4spec.quantize(y, scheme)
        got = matmul(qa, qb, accumulator=model)
        assert counts == {"tier2": 0, "integer": 0}, (model, scheme, counts)
        rows, cols = [0, 17, 47], [3, 39]
        sub_a = make_operand(np.asarray(qa.codes)[rows], np.asarray(qa.scales)[rows], qa.scheme, qa.global_scale)
        sub_b = make_operand(np.asarray(qb.codes)[cols], np.asarray(qb.scales)[cols], qb.scheme, qb.global_scale)
        assert_same(got[np.ix_(rows, cols)], ref.matmul_reference(sub_a, sub_b, accumulator=model), model)


def test_fdpa_operand_exponent_carry(monkeypatch):
    """bf16 operands from E4M3 elements and UE4M3 scales: 1.5 * 1.5 = 2.25 has exponent 1, one
    more than the elements' and scales' exponents add to; the statistics add that carry. With
    it, e_max = 1 and the product -1.5 * 2^-24 (lsb 2^-25) is truncated to -2^-24; c = 1.25 *
    2^-22 makes the truncated sum exactly 2.25 + 2^-22, the exact one just below it."""
    sch = fp4spec.get_scheme("nvfp4", element="e4m3")
    qa = operand_from_values(_pad([[1.5, 2.0 ** -9]], 16), [[1.5]], sch, 1.0)
    qb = operand_from_values(_pad([[64.0, -2.0 ** -9]], 16), [[2.0 ** -6]], sch, 1.0)
    c = np.array([[1.25 * 2.0 ** -22]], F32)
    orig = gemm_fdpa.rounded_operand

    def no_carry(mp):
        def side(op, carrier, k_step):
            s, x = orig(op, carrier, k_step)
            s.hi = s.hi - 1
            return s, x
        mp.setattr(gemm_fdpa, "rounded_operand", side)

    _check(qa, qb, "sm90-bf16", c, defect=no_carry, monkeypatch=monkeypatch)


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4_sym", "e2m3", "e3m2", "e4m3", "e5m2"])
def test_element_and_scale_statistics(fmt):
    """element_stats and scale_stats against the exponents and lsbs of every value."""
    from fp4spec.emulator import gemm_core

    from fp4spec.reference import floor_log2

    f = fp4spec.get_format(fmt)
    rng = np.random.default_rng(8)
    codes = rng.choice(np.array(f.finite_codes, np.uint8), (5, 64))
    codes[0, :16] = next(c for c in f.finite_codes if f.values[c] == 0)
    vals = np.asarray(f.values, np.float64)[codes]
    scales = np.ldexp(1.0 + rng.integers(0, 8, (5, 2)) / 8, rng.integers(-130, 120, (5, 2)))
    scales[1, 1], scales[2, 0] = 0.0, np.nan
    op = gemm_core.Operand(vals, scales, 32, f, fp4spec.get_format("e8m0"), codes, None)
    for emin in (None, -2):
        hi, lo = gemm_stats.element_stats(op, 16, emin)
        for r in range(5):
            for u in range(4):
                nz = [Fraction(float(v)) for v in vals[r, 16 * u:16 * u + 16] if v != 0]
                if not nz:
                    assert hi[r, u] == gemm_stats.SENT and lo[r, u] == gemm_stats.POS
                    continue
                e = max(floor_log2(abs(v)) for v in nz)
                assert hi[r, u] == (e if emin is None else max(e, emin))
                assert lo[r, u] == min(int(gemm_stats.exp_lsb(np.array([float(v)]))[1][0]) for v in nz)
    se, _ = gemm_stats.scale_stats(op)
    assert se[1, 1] == gemm_stats.SENT and se[2, 0] == gemm_stats.BAD
    assert se[0, 0] == floor_log2(Fraction(float(scales[0, 0])))


def test_fma_steps_plain_cast_only_when_sums_are_exact():
    """The per-term FMA path casts a b + acc directly only when the chunk's sums are exact in
    float64 (``_sums_exact``). Products of 24-bit operands, a = 1 + 2^-20 and b = (1 - 2^-20)
    2^-24, with acc = 1 + 2^-23: the float64 sum lands on a float32 midpoint the exact one
    is below; the test refuses the plain cast (lo = -64, sums near 1 do not fit 53 bits),
    and the plain cast (the planted defect) would be one ulp off."""
    a = np.array([[1 + 2.0 ** -20]])
    b = np.array([[(1 - 2.0 ** -20) * 2.0 ** -24]])
    acc = np.array([1 + 2.0 ** -23])
    steps = gemm_fma.fma_steps(a, b)
    idx = np.array([0])
    lo_a, lo_b = np.array([-20]), np.array([-44])
    assert not gemm_fma._sums_exact(lo_a, lo_b, -23, 2.0)
    want = ref.fma32(float(a[0, 0]), float(b[0, 0]), float(acc[0]))
    assert steps.pairs(idx, idx, 0, 1, acc, False)[0] == want
    assert steps.tile(slice(0, 1), slice(0, 1), 0, 1, acc.reshape(1, 1), False)[0, 0] == want
    assert steps.pairs(idx, idx, 0, 1, acc, True)[0] != want
    assert gemm_fma._sums_exact(np.array([-10]), np.array([-10]), -23, 2.0 ** 29)
    assert not gemm_fma._sums_exact(np.array([-10]), np.array([-10]), -23, 2.0 ** 30)
