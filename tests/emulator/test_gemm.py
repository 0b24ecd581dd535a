"""The vectorized GEMM emulator equals the scalar reference, bit for bit, for every model;
its integer building blocks equal the reference's exact ones; the matmul conformance
properties and vectors work end to end."""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from fractions import Fraction

import numpy as np
import pytest

import fp4spec
from fp4spec import gemm_reference as ref
from fp4spec.accumulator_models import FP32, accumulators, format_carrier, get_accumulator
from fp4spec.conformance.matmul_properties import (
    FAMILIES,
    check_matmul,
    expects_refusal,
    family_schemes,
    generate_case,
    make_operand,
    operand_from_values,
    schemes_for,
    to_report_rows,
)
from fp4spec.conformance.matmul_vectors import (
    check_matmul_vectors,
    generate_matmul_vectors,
    load_matmul_vectors,
    run_matmul_vectors,
    save_matmul_vectors,
    vector_case,
)
from fp4spec.emulator import gemm
from fp4spec.api.gemm import matmul

MODELS = tuple(accumulators)


def ref_backend(qa, qb, *, accumulator, c):
    return ref.matmul_reference(qa, qb, accumulator=accumulator, c=c)


def assert_same(a, b, msg=""):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert a.shape == b.shape, msg
    bad = np.argwhere(a.view(np.uint32) != b.view(np.uint32))
    assert not len(bad), f"{msg}: {len(bad)} differ, first {tuple(bad[0])}: {a[tuple(bad[0])]!r} vs {b[tuple(bad[0])]!r}"


# =====================================================================================
# Building blocks
# =====================================================================================

def test_round_int_to_f32_matches_exact_rounding():
    rng = np.random.default_rng(0)
    n = 3000
    nbits = rng.integers(0, 62, n)
    s = np.array([int(rng.integers(0, 1 << int(b))) if b else 0 for b in nbits], np.int64)
    # planted ties and near-ties: 24 kept bits, then 10..0..01 or 10..0 dropped
    s[:500] = (rng.integers(1 << 23, 1 << 24, 500) << 20) + np.array([1 << 19, (1 << 19) + 1, (1 << 19) - 1, 0, 1] * 100)
    s *= np.where(rng.random(n) < 0.5, -1, 1)
    e = rng.integers(-260, 120, n)
    e[:200] = rng.integers(-190, -150, 200)           # results around the subnormal range
    for mode in ("rne", "rz"):
        got = gemm.round_int_to_f32(s, e, mode)
        want = np.array([ref.round_f32(Fraction(int(x)) * Fraction(2) ** int(y), mode) for x, y in zip(s, e)],
                        np.float32)
        assert_same(got, want, mode)


def _random_f32(rng, n):
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    x = b.view(np.float32).copy()
    m = rng.random(n)
    x[m < 0.3] = (rng.standard_normal(int((m < 0.3).sum())) * 2.0 ** rng.integers(-30, 30, int((m < 0.3).sum()))
                  ).astype(np.float32)
    x[(m > 0.3) & (m < 0.35)] = 0.0
    x[(m > 0.35) & (m < 0.4)] = -0.0
    return x


def test_fma32_matches_exact_fma():
    rng = np.random.default_rng(1)
    n = 4000
    a, b, c = _random_f32(rng, n), _random_f32(rng, n), _random_f32(rng, n)
    # planted cancellations: c = -fp32(a*b) (+- a few ulps)
    k = slice(0, 1000)
    with np.errstate(all="ignore"):
        c[k] = -(a[k] * b[k])
        c[k] = np.nextafter(c[k], np.float32(np.inf) * rng.choice([-1, 1], 1000).astype(np.float32))
    got = gemm.fma32(a, b, c)
    want = np.array([ref.fma32(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert_same(got[~nan], want[~nan], "fma32")


def test_bit_length_at_powers_of_two():
    k = np.arange(1, 62)
    a = np.concatenate([(np.int64(1) << k) - 1, np.int64(1) << k, (np.int64(1) << k) + 1, [0]])
    want = np.array([int(x).bit_length() for x in a])
    assert np.array_equal(gemm.bit_length(a), want)


@pytest.mark.parametrize("fmt", ["e2m1", "e1m2", "int4_sym", "e4m3", "e5m2", "e2m3", "e3m2", "ue4m3", "e8m0"])
def test_decompose_is_exact_and_matches_sig_exp(fmt):
    f = fp4spec.get_format(fmt)
    car = format_carrier(f)
    vals = f.values[list(f.finite_codes)]
    m, e, zero = gemm.decompose(vals, car)
    for v, mi, ei, z in zip(vals, m, e, zero):
        s, ee = ref.sig_exp(Fraction(float(v)), car.emin, None)
        if z:
            assert v == 0 and ee is None
        else:
            assert ee == ei and Fraction(int(mi), 1 << car.man_bits) == s


def test_f32_terms_matches_sig_exp():
    rng = np.random.default_rng(2)
    x = _random_f32(rng, 2000)
    x = x[np.isfinite(x)]
    m, e, zero = gemm.f32_terms(x)
    for v, mi, ei, z in zip(x, m, e, zero):
        s, ee = ref.sig_exp(Fraction(float(v)), FP32.emin, None)
        assert z == (v == 0)
        if not z:
            assert ee == ei and Fraction(int(mi), 1 << 23) == s


# =====================================================================================
# Emulator == reference
# =====================================================================================

@pytest.mark.parametrize("model", MODELS)
def test_emulator_equals_reference_every_family_and_scheme(model):
    seed = 0
    for family in FAMILIES:
        for scheme in family_schemes(family, schemes_for(model)):
            seed += 1
            steps = 1 if model == "sm100-mxf8f6f4" else 2
            case = generate_case(family, model, scheme, seed=seed, m=2, n=3, steps=steps)
            if expects_refusal(get_accumulator(model), case):   # both refuse the operands
                for impl in (ref.matmul_reference, matmul):
                    with pytest.raises(ValueError, match="bit 7 set"):
                        impl(case.qa, case.qb, accumulator=model, c=case.c)
                continue
            want = ref.matmul_reference(case.qa, case.qb, accumulator=model, c=case.c)
            got = matmul(case.qa, case.qb, accumulator=model, c=case.c)
            assert_same(got, want, f"{model} {family} {scheme}\n{case.describe()}")


@pytest.mark.parametrize("model", MODELS)
def test_emulator_equals_reference_hypothesis(model):
    n = 3 if model == "sm100-mxf8f6f4" else 6
    results = check_matmul(ref_backend, model, seed=11, max_examples=n,
                           families=("cancellation", "alignment", "wide_scales"))
    for r in results:
        assert r.passed, str(r)


def test_exact_python_integer_path():
    """E5M2 elements with scales 2^-127 and 2^127 in one row need more than 62 bits: the
    exact model falls back to Python integers (and still equals the reference)."""
    rng = np.random.default_rng(4)
    sch = fp4spec.get_scheme("mxfp8_e5m2")
    fin = np.array(sch.element.finite_codes, np.uint8)
    qa = make_operand(rng.choice(fin, (2, 64)), np.array([[0, 254], [254, 1]], np.uint8), sch)
    qb = make_operand(rng.choice(fin, (2, 64)), np.array([[3, 250], [127, 0]], np.uint8), sch)
    c = np.array([[1.0, -3e38], [2.0 ** -149, 0.0]], np.float32)
    exact = get_accumulator("exact")
    a_op, b_op = gemm.operand(qa, exact), gemm.operand(qb, exact)
    dots = gemm._segment_dots(np.ldexp(a_op.values, 16).astype(np.int64),
                              np.ldexp(b_op.values, 16).astype(np.int64), 32)
    assert dots[0].dtype == object                       # e5m2 x e5m2 integers overflow int64
    assert_same(matmul(qa, qb, c=c), ref.matmul_reference(qa, qb, c=c))


def test_models_are_distinct_on_wide_data():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((8, 256)) * np.repeat(2.0 ** rng.uniform(-20, 20, (8, 8)), 32, axis=1)).astype(np.float32)
    y = (rng.standard_normal((8, 256)) * np.repeat(2.0 ** rng.uniform(-20, 20, (8, 8)), 32, axis=1)).astype(np.float32)
    qa, qb = fp4spec.quantize(x, "mxfp4"), fp4spec.quantize(y, "mxfp4")
    c = (rng.standard_normal((8, 8)) * 1e3).astype(np.float32)
    out = {m: matmul(qa, qb, accumulator=m, c=c).view(np.uint32) for m in MODELS}
    for a, b in itertools.combinations(MODELS, 2):
        assert (out[a] != out[b]).any(), (a, b)


def test_speed():
    rng = np.random.default_rng(6)
    qa = fp4spec.quantize(rng.standard_normal((64, 1024)).astype(np.float32), "nvfp4")
    qb = fp4spec.quantize(rng.standard_normal((64, 1024)).astype(np.float32), "nvfp4")
    for model in ("exact", "sm100-mxf4nvf4", "fp32"):
        t = time.perf_counter()
        matmul(qa, qb, accumulator=model)
        assert time.perf_counter() - t < 3.0, model


def test_padded_k():
    """pad=True operands: the K loop runs over the stored codes; padding is +0."""
    rng = np.random.default_rng(8)
    qa = fp4spec.quantize(rng.standard_normal((2, 40)).astype(np.float32), "mxfp4", pad=True)
    qb = fp4spec.quantize(rng.standard_normal((3, 40)).astype(np.float32), "mxfp4", pad=True)
    for model in ("exact", "fp32", "sm90-bf16", "sm100-mxf8f6f4", "cdna3-fp8"):
        assert_same(matmul(qa, qb, accumulator=model), ref.matmul_reference(qa, qb, accumulator=model), model)


def test_padded_rows():
    """2-d tiles with pad=True: A is 20 x 120 (stored 32 x 128), B 3 x 120 (16 x 128); the
    result is 20 x 3, equal to the reference, for every model that takes the scheme."""
    rng = np.random.default_rng(9)
    qa = fp4spec.quantize(rng.standard_normal((20, 120)).astype(np.float32), "nvfp4_2d", pad=True)
    qb = fp4spec.quantize(rng.standard_normal((3, 120)).astype(np.float32), "nvfp4_2d", pad=True)
    assert qa.codes.shape == (32, 128) and qb.codes.shape == (16, 128)
    c = rng.standard_normal((20, 3)).astype(np.float32)
    for model in MODELS:
        if "nvfp4_2d" not in schemes_for(model) and "nvfp4" not in schemes_for(model):
            continue
        got = matmul(qa, qb, accumulator=model, c=c)
        assert got.shape == (20, 3), model
        assert_same(got, ref.matmul_reference(qa, qb, accumulator=model, c=c), model)
    assert gemm.operand(qa, get_accumulator("exact")).values.shape == (20, 128)


def test_step_zero():
    x = np.array([-0.0, 0.0, -1.0, 2.0 ** -149], np.float32)
    pos = dataclasses.replace(get_accumulator("sm90-bf16"), zero_sign="positive")
    sig = dataclasses.replace(pos, zero_sign="signed")
    assert gemm.step_zero(x, pos).view(np.uint32).tolist() == [0, 0, 0xBF800000, 1]
    assert gemm.step_zero(x, sig).view(np.uint32).tolist() == [0x80000000, 0, 0xBF800000, 1]
    for v in (-0.0, 0.0, -1.0):
        assert math.copysign(1, ref.step_zero(v, pos)) == (1 if v == 0 else -1)
        assert math.copysign(1, ref.step_zero(v, sig)) == math.copysign(1, v)


@pytest.mark.parametrize("name", ["sm90-bf16", "sm100-mxf4nvf4", "sm100-mxf8f6f4", "cdna3-fp8"])
def test_emulator_equals_reference_both_zero_signs(name):
    """Products of about 2^-162 .. 2^-149 with random signs and c = +0: many step sums are
    tiny negatives that round to zero. Both zero_sign values, emulator == reference; the
    NVIDIA models give -0.0 under 'signed' and +0.0 under 'positive' there (cdna3-fp8's
    steps see unscaled FP8 products, never that small: no difference)."""
    rng = np.random.default_rng(3)

    def op(rows, lo, hi):
        return make_operand(rng.integers(0, 16, (rows, 128)), 127 + rng.integers(lo, hi, (rows, 4)), "mxfp4")

    qa, qb = op(4, -82, -76), op(5, -80, -74)
    out = {}
    for zs in ("signed", "positive"):
        model = dataclasses.replace(get_accumulator(name), name=f"{name}/{zs}", zero_sign=zs)
        out[zs] = matmul(qa, qb, accumulator=model)
        assert_same(out[zs], ref.matmul_reference(qa, qb, accumulator=model), model.name)
    sig, pos = out["signed"].view(np.uint32), out["positive"].view(np.uint32)
    differ = sig != pos
    assert (sig[differ] == 0x80000000).all() and (pos[differ] == 0).all()
    assert differ.any() == (name != "cdna3-fp8")
    assert not (pos == 0x80000000).any()


@pytest.mark.parametrize("name", [m for m in MODELS if "nvfp4" in schemes_for(m)])
def test_ue4m3_bit_7_as_the_policy_says(name):
    """nvfp4 operands whose scale bytes have bit 7 set a third of the time (0xFF and 0x80
    among them). Under ue4m3_sign_bit='ignore' (the catalogue's where it says so, else a
    variant of the model: every algorithm reads the bytes through the same step) the emulator
    equals the scalar reference and equals the same GEMM of the bytes with bit 7 cleared,
    on a small case and on one large enough for the fast paths; under 'reject' both refuse."""
    model = get_accumulator(name)
    rng = np.random.default_rng(11)

    def op(rows, k):
        sc = rng.integers(0x28, 0x48, (rows, k // 16)).astype(np.uint8)
        sc[rng.random(sc.shape) < 0.33] |= 0x80
        sc.flat[rng.integers(sc.size)] = 0xFF if rows > 4 else 0x80
        return make_operand(rng.choice(np.array([0, 1, 2, 3, 10, 11, 15], np.uint8), (rows, k)), sc, "nvfp4")

    def masked(q):
        return q.replace(scales=np.asarray(q.scales) & 0x7F)

    ignore = model if model.ue4m3_sign_bit == "ignore" else \
        dataclasses.replace(model, name=f"{name}/ignore", ue4m3_sign_bit="ignore")
    qa, qb = op(3, 64), op(2, 64)
    c = rng.standard_normal((3, 2)).astype(np.float32)
    got = matmul(qa, qb, accumulator=ignore, c=c)
    assert_same(got, ref.matmul_reference(qa, qb, accumulator=ignore, c=c), ignore.name)
    assert_same(got, matmul(masked(qa), masked(qb), accumulator=ignore, c=c), ignore.name)
    qa, qb = op(16, 256), op(24, 256)
    assert_same(matmul(qa, qb, accumulator=ignore), matmul(masked(qa), masked(qb), accumulator=ignore), ignore.name)
    if model.ue4m3_sign_bit == "reject":
        for impl in (matmul, ref.matmul_reference):
            with pytest.raises(ValueError, match="has bit 7 set"):
                impl(qa, qb, accumulator=model)


def test_unprovable_parameters_are_refused():
    import dataclasses

    wide = dataclasses.replace(get_accumulator("sm100-mxf4nvf4"), name="wide", elements=None, scale_blocks=None,
                               k_step=256, group_size=256, frac_bits=40)
    q = fp4spec.quantize(np.ones((1, 256), np.float32), "mxfp8_e5m2", block_size=256)
    with pytest.raises(NotImplementedError, match="matmul_reference"):
        matmul(q, q, accumulator=wide)


# =====================================================================================
# Conformance: properties and vectors
# =====================================================================================

def test_check_matmul_detects_a_wrong_model():
    def fp32_backend(qa, qb, *, accumulator, c):
        return matmul(qa, qb, accumulator="fp32", c=c)

    fams = ("random", "alignment")
    res = check_matmul(fp32_backend, "sm100-mxf4nvf4", seed=0, max_examples=10, families=fams)
    assert [r.name for r in res] == list(fams)
    assert not all(r.passed for r in res)
    bad = next(r for r in res if not r.passed)
    assert bad.status == "FAIL" and "differ" in bad.failure and "family=" in bad.failure
    rows = to_report_rows(res)
    assert rows[0].property.startswith("matmul/") and rows[0].rounding == "acc=sm100-mxf4nvf4"
    assert any(r.counterexample is not None for r in rows)


def test_check_matmul_reports_backend_errors():
    def broken(qa, qb, *, accumulator, c):
        raise RuntimeError("no kernel")

    res = check_matmul(broken, "exact", seed=0, max_examples=5, families=("random",))
    assert res[0].status == "ERROR" and "no kernel" in res[0].failure and res[0].examples == 1


def test_check_matmul_passes_the_emulator():
    for model in ("exact", "cdna3-fp8"):
        def backend(qa, qb, *, accumulator, c):
            return matmul(qa, qb, accumulator=accumulator, c=c)

        assert all(r.passed for r in check_matmul(backend, model, seed=3, max_examples=5))


def test_vectors_roundtrip(tmp_path):
    vec = generate_matmul_vectors("nvfp4", "sm100-mxf4nvf4", "smoke", seed=1)
    assert int(vec["n_cases"]) == 2 * len(FAMILIES)
    path = tmp_path / "v.npz"
    save_matmul_vectors(path, vec)
    vec2 = load_matmul_vectors(path)
    assert str(vec2["scheme"]) == "nvfp4" and str(vec2["accumulator"]) == "sm100-mxf4nvf4"
    good = run_matmul_vectors(vec2, lambda qa, qb, *, accumulator, c: matmul(qa, qb, accumulator=accumulator, c=c))
    np.savez(tmp_path / "r.npz", **good)
    with np.load(tmp_path / "r.npz") as f:
        rep = check_matmul_vectors(vec2, f)
    assert rep.passed and rep.n_passed == rep.n_cases
    # the same operands give the same expected bits from the scalar reference
    case = vector_case(vec2, 3)
    assert_same(ref.matmul_reference(case.qa, case.qb, accumulator="sm100-mxf4nvf4", c=case.c),
                vec2["0003/d_bits"].view(np.float32))
    # results as a list; bits instead of floats; a wrong model; a missing result
    as_list = [good[f"{i:04d}/d"] for i in range(rep.n_cases)]
    assert check_matmul_vectors(vec2, as_list).passed
    as_bits = {k + "_bits": v.view(np.uint32) for k, v in good.items()}
    assert check_matmul_vectors(vec2, as_bits).passed
    exact = dataclasses.replace(get_accumulator("exact"), name="exact/ignore", ue4m3_sign_bit="ignore")
    wrong = run_matmul_vectors(vec2, lambda qa, qb, *, accumulator, c: matmul(qa, qb, accumulator=exact, c=c))
    bad = check_matmul_vectors(vec2, wrong)
    assert not bad.passed and "bit-exact" in bad.summary()
    del as_list[-1]
    assert check_matmul_vectors(vec2, as_list).failures[-1][2] == "no result"


def test_vectors_with_block_override_and_bad_files(tmp_path):
    sch = fp4spec.get_scheme("mxfp4", block_size=16)
    vec = generate_matmul_vectors(sch, "sm100-mxf4nvf4", "smoke", seed=2)
    assert str(vec["scheme"]).startswith("mxfp4:")
    assert vector_case(vec, 0).qa.scheme.block_size == 16
    with pytest.raises(ValueError, match="not taken"):
        generate_matmul_vectors("nvfp4", "sm100-mxf8f6f4", "smoke")
    with pytest.raises(ValueError, match="level"):
        generate_matmul_vectors("nvfp4", "exact", "huge")
    exact = generate_matmul_vectors("nvfp4", "exact", 0)
    assert str(exact["level"]) == "smoke"
    # a file holds results, not refusals: no scale_sign_bit cases where the model rejects them
    families = {str(v) for k, v in exact.items() if k.endswith("/family")}
    assert "scale_sign_bit" not in families and "random" in families
    families = {str(v) for k, v in generate_matmul_vectors("nvfp4", "sm90-bf16", 0).items() if k.endswith("/family")}
    assert families == set(FAMILIES)
    np.savez(tmp_path / "x.npz", format=np.array("something else"))
    with pytest.raises(ValueError, match="fp4spec-matmul-vectors"):
        load_matmul_vectors(tmp_path / "x.npz")


def test_operand_from_values_rejects_inexact():
    with pytest.raises(ValueError, match="not exactly representable in e2m1"):
        operand_from_values([[5.0] * 32], [[1.0]], "mxfp4")
    q = operand_from_values([[-0.0] + [0.5] * 31], [[math.nan]], "mxfp4")
    assert q.codes[0, 0] == 8 and q.scales[0, 0] == 0xFF
