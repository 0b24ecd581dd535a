"""HiF4 (HiFloat4): scalar reference == vectorized emulator == the golden model's arithmetic.

* The exact scalar reference (:mod:`fp4spec.hif4`) equals the vectorized emulator
  (:mod:`fp4spec.emulator.hif4`) on hypothesis-generated and adversarial groups, in both
  ``arith`` modes.
* The emulator equals, bit for bit (sign of zero included), a port of the golden NumPy model
  ``To_HiFX`` (global-computing-consortium/HiFloat4, hif4_gpu/HiF4_NVFP4_v14f16.py) --
  written here with numpy, the same operations (log2/floor exponents, ``np.round``,
  ``floor(q + 0.5)``, float64 products of float32 data) -- on 10k+ groups; and a float32 port
  of the torch variant ``quant_hifx`` (with the golden clamps) for ``arith="float32"``.
* Hand-computed groups, every S1P2 code, exact ties and thresholds, the E6M2 clamps, the
  error bound, input dtypes, errors.
"""

import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp4spec
from fp4spec.emulator.hif4 import bf16_rne, e6m2_decode, e6m2_encode, hif4_dequantize, hif4_quantize
from fp4spec.hif4 import (
    CONST_REC,
    E6M2_NAN_CODE,
    HiF4Group,
    e6m2_code,
    e6m2_reciprocal,
    e6m2_value,
    hif4_dequantize_group_scalar,
    hif4_quantize_group_scalar,
    to_bf16,
    to_float32,
)

ARITHS = ("float64", "float32")
F32_MAX = float(np.finfo(np.float32).max)


# -- oracles ---------------------------------------------------------------------------------

def golden_to_hifx(x):
    """The golden ``To_HiFX`` (N=4, M=2, G=64) arithmetic, vectorized over rows of 64 float32.

    The golden model groups 64 consecutive rows of one column; here a group is a row. Its
    scalar steps become array steps; every operation is the golden one, in the same order
    and precision (NumPy >= 2: a float32 array times a float64 scalar is float64).
    """
    x = np.asarray(x, np.float32).reshape(-1, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sign = np.where(x < 0, -1.0, 1.0)
        a = np.abs(x)
        v16 = a.reshape(-1, 16, 4).max(axis=-1).astype(np.float64)
        v8 = v16.reshape(-1, 8, 2).max(axis=-1)
        vmax = v8.max(axis=-1)

        def to_bf16_golden(v):
            e = np.maximum(np.floor(np.log2(np.abs(v) + 2.0 ** -1000)), -126)
            return np.round(v * 2.0 ** (-e + 7)) * 2.0 ** (e - 7)

        const_rec = to_bf16_golden(np.float64(1 / 7.0))
        sf = to_bf16_golden(vmax * const_rec)
        sf = np.where(sf > 2.0 ** 15 * 1.5, 2.0 ** 15 * 1.5, sf)
        sf = np.where(sf < 2.0 ** -48, 2.0 ** -48, sf)
        e = np.floor(np.log2(sf))
        e6m2 = np.round(sf * 2.0 ** (-e + 2)) * 2.0 ** (-2 + e)
        rec = to_bf16_golden(1 / e6m2)
        e1_8 = (v8 * rec[:, None] >= 4).astype(np.float64)
        e1_8x2 = np.repeat(e1_8, 2, axis=1)
        e1_16 = (v16 * rec[:, None] * 2.0 ** (-e1_8x2) >= 2).astype(np.float64)
        de64 = np.repeat(e1_16 + e1_8x2, 4, axis=1)
        in_grp = np.floor(a * rec[:, None] * 2.0 ** (-de64 + 2) + 0.5) * 2.0 ** -2
        in_grp[in_grp >= 2] = 2 - 2.0 ** -2
        return sign * e6m2[:, None] * 2.0 ** de64 * in_grp


def torch_style_float32(x):
    """The torch variant ``quant_hifx`` in float32 (numpy float32 ops), with the golden clamps."""
    x = np.asarray(x, np.float32).reshape(-1, 64)
    f = np.float32
    a = np.abs(x)
    v16 = a.reshape(-1, 16, 4).max(axis=-1)
    v8 = v16.reshape(-1, 8, 2).max(axis=-1)
    vmax = v8.max(axis=-1)
    div7 = f(1.0 / 7.0).astype(ml_dtypes.bfloat16).astype(f)
    sf = (vmax * div7).astype(ml_dtypes.bfloat16).astype(f)  # float32 product, then RNE to bf16
    sf = np.clip(sf, f(2.0 ** -48), f(49152))
    e = np.floor(np.log2(sf))
    sf = np.round(sf * np.exp2(f(2) - e)) * np.exp2(e - f(2))
    rec = (f(1) / sf).astype(ml_dtypes.bfloat16).astype(f)
    lv2 = np.exp2(np.floor(np.clip(v8 * rec[:, None], 0, 4) / f(4)))
    lv2x2 = np.repeat(lv2, 2, axis=1)
    lv3 = np.exp2(np.floor(np.clip(v16 * rec[:, None] / lv2x2, 0, 2) / f(2)))
    scale64 = np.repeat(lv2x2 * lv3, 4, axis=1)
    mant = a / scale64 * rec[:, None]
    mant = np.floor(mant * f(4) + f(0.5)) / f(4)
    mant[mant >= 2] = f(1.75)
    return np.where(x < 0, f(-1), f(1)) * mant * scale64 * sf[:, None]


def _vector_groups(x, arith="float64"):
    """The emulator's result for rows of 64 as HiF4Group objects."""
    r = hif4_quantize(np.asarray(x).reshape(-1, 64), arith=arith)
    return [HiF4Group(tuple(int(c) for c in r["codes"][i]), int(r["scales"][i, 0]),
                      tuple(int(b) for b in r["e1_8"][i, 0]), tuple(int(b) for b in r["e1_16"][i, 0]))
            for i in range(r["codes"].shape[0])]


def _assert_scalar_equals_vector(x, arith):
    x = np.asarray(x).reshape(-1, 64)
    for row, vec in zip(x, _vector_groups(x, arith)):
        assert hif4_quantize_group_scalar(row, arith=arith) == vec, row.tolist()


def _bits(a):
    return np.asarray(a, np.float64).view(np.int64)


# -- adversarial data ----------------------------------------------------------------------

def _f32_near(v, ulps):
    """The float32 nearest to ``v``, moved by ``ulps`` units in the last place."""
    y = np.float32(v)
    step = np.float32(np.inf if ulps > 0 else 0)
    for _ in range(abs(ulps)):
        y = np.nextafter(y, step)
    return y


def adversarial_groups(n, seed=0):
    """Groups built around exact ties (q = k + 1/2), the E1 thresholds 4 and 2, the E6M2 clamps,
    bfloat16 ties of the scale factor, huge dynamic range, zeros and single non-zeros."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, 64), np.float32)
    for g in range(n):
        kind = rng.integers(0, 8)
        e = int(rng.integers(-52, 18))
        if kind == 0:  # an E6M2 scale with M = 0: REC is exact, ties are exact
            vmax = np.float32(7 * 2.0 ** e)
        elif kind == 1:  # at the clamps
            vmax = _f32_near(rng.choice([49152 * 512 / 73, 2.0 ** -48 * 512 / 73, 1e38, 1e-30, 3e5, 4e5]),
                             int(rng.integers(-3, 4)))
        elif kind == 2:  # Vmax * Const_rec near a bfloat16 tie
            b = rng.integers(128, 256) + 0.5
            vmax = _f32_near(b * 2.0 ** (e - 7) * 512 / 73, int(rng.integers(-3, 4)))
        elif kind == 3:  # huge dynamic range
            out[g] = (rng.standard_normal(64) * np.exp2(rng.uniform(-120, 120, 64))).astype(np.float32)
            continue
        elif kind == 4:  # a single non-zero
            out[g, rng.integers(0, 64)] = np.float32(rng.choice([-1, 1]) * np.exp2(rng.uniform(-160, 127)))
            continue
        else:
            vmax = np.float32(rng.uniform(4, 9) * 2.0 ** e)
        vmax = np.float32(min(float(vmax), F32_MAX))
        code = e6m2_code(to_bf16(Fraction(float(vmax)) * CONST_REC))
        rec = float(e6m2_reciprocal(code))
        cands = [0.0, 4 / rec, 2 / rec, 4 / rec / 2, 8 / rec / 2]
        cands += [(k + 0.5) * 2.0 ** (de - 2) / rec for k in range(8) for de in range(3)]
        vals = [float(_f32_near(c, int(u))) for c in cands for u in (-2, -1, 0, 1, 2) if c < 3e38]
        vals = [v for v in vals if v <= vmax]
        row = np.array(rng.choice(vals, 64), np.float32)
        row[rng.random(64) < 0.3] = 0
        for lvl2 in range(8):  # silence some level-2 groups entirely: E1_8 = 0 there
            if rng.random() < 0.25:
                row[8 * lvl2:8 * lvl2 + 8] *= np.float32(2.0 ** -int(rng.integers(1, 4)))
        row[rng.integers(0, 64)] = vmax
        out[g] = row * rng.choice(np.array([-1, 1], np.float32), 64)
    return out


def special_groups():
    """The groups where float32 evaluation changes a result (see test_arith_modes_differ...),
    at several magnitudes."""
    rows = []
    for k in (-45, -20, 0, 13):
        for pos, val, vmax in ((8, 0.125 - 2.0 ** -27, 7), (8, 4 / 0.5703125, 12.25),
                               (12, 2 / 0.5703125, 12.25), (1, 0, 7.917808532714844),
                               (1, 0, 11.424657821655273)):
            x = np.zeros(64, np.float32)
            x[0], x[pos] = vmax, val
            rows.append(np.ldexp(x, k))
    return np.stack(rows).astype(np.float32)


ADVERSARIAL = np.concatenate([special_groups(), adversarial_groups(2000, seed=1)])


def random_groups(n_per_kind=1700, seed=2):
    """Several distributions, each group with its own magnitude: >= 10k groups."""
    rng = np.random.default_rng(seed)
    shape = (n_per_kind, 64)
    scale = np.exp2(rng.uniform(-60, 60, (n_per_kind, 1)))
    kinds = [
        rng.standard_normal(shape) * scale,
        rng.uniform(-1, 1, shape) * scale,
        rng.laplace(size=shape) * scale,
        rng.standard_t(2, size=shape) * scale,  # heavy tails
        rng.lognormal(0, 3, shape) * rng.choice([-1, 1], shape) * scale,
        rng.standard_normal(shape) * (rng.random(shape) < 0.1) * scale,  # sparse
        rng.standard_normal(shape) * np.exp2(rng.uniform(-140, 124, shape)),  # any magnitude
    ]
    return np.concatenate(kinds).astype(np.float32)


RANDOM = random_groups()


# -- the building blocks -------------------------------------------------------------------

def test_constants():
    assert CONST_REC == Fraction(73, 512) == Fraction(0.142578125)
    assert e6m2_code(Fraction(0)) == 0 and e6m2_value(0) == Fraction(1, 2 ** 48)
    assert e6m2_value(0xFE) == 49152


def test_e6m2_values_and_reciprocals_every_code():
    fmt = fp4spec.get_format("e6m2")
    codes = np.arange(255)
    assert np.array_equal(e6m2_decode(codes), fmt.values[:255])
    assert np.isnan(e6m2_decode(np.array([0xFF])))[0]
    vec_rec = bf16_rne(1.0 / e6m2_decode(codes))
    for c in range(255):
        rec = e6m2_reciprocal(c)
        # the hardware E6M2_REC table: 7-bit mantissas 0, 77, 43, 18 for M = 0..3
        e6, m = (c >> 2) - 48, c & 3
        table = Fraction(2) ** (-e6 if m == 0 else -e6 - 1) * (1 + Fraction([0, 77, 43, 18][m], 128))
        assert rec == table == Fraction(float(vec_rec[c]))
        assert rec == to_bf16(to_float32(1 / e6m2_value(c)))  # float32 division first: same


def test_e6m2_code_every_bfloat16_scale_factor():
    """Step 6 on every non-negative finite bfloat16: scalar == vectorized == fp4spec.encode(saturate)."""
    v = np.arange(0, 0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    ref = np.array([e6m2_code(Fraction(float(x))) for x in v])
    codes, vals = e6m2_encode(v)
    assert np.array_equal(codes, ref)
    assert np.array_equal(vals, fp4spec.get_format("e6m2").values[ref])
    assert np.array_equal(fp4spec.encode(v, "e6m2", "rne", overflow="saturate"), ref)


def test_bf16_rounding_equals_ml_dtypes():
    """To_BF16 is IEEE bfloat16 RNE (subnormals included) on float32 values below bf16 overflow."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 0x7F7F0000, 200_000, dtype=np.uint32)
    bits[:4] = [0, 1, 0x00800000, 0x7F7F0000]
    v = bits.view(np.float32)
    want = v.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(bf16_rne(v.astype(np.float64)), want)
    for x, w in zip(v[:2000], want[:2000]):
        assert to_bf16(Fraction(float(x))) == Fraction(float(w))


def test_float32_rounding_equals_numpy():
    rng = np.random.default_rng(4)
    bits = rng.integers(0, 0x47EFFFFFE0000000, 3000, dtype=np.uint64)  # up to just below float32 max
    bits[:3] = [1, 0x3690000000000000, 0x36A0000000000001]  # float32 subnormal range, ties
    for x in bits.view(np.float64):
        assert to_float32(Fraction(float(x))) == Fraction(float(np.float32(x)))


# -- hand-computed groups ------------------------------------------------------------------

HAND_1 = [7, -5, 0.3, 0, 2.5, 1, -1, 0.1,  # level-2 group 0: V8 = 7 >= 4, DE = 2 then 1
          1.75, 0.5, -0.25, 0.125, 0.0625, 0, -0.0, -0.01,  # group 1: DE = 0; 0.125 is a tie
          3, 2.25, -0.375, 0.625, 1.9, -1.875, 0.3125, 0] + [0] * 40  # group 2: DE = 1 then 0


def test_hand_computed_group_scale_one():
    """Vmax = 7: SF = BF16(7 * 73/512 = 511/512) = 1 (a bf16 tie, to even), E6M2 = 1 (code
    0xC0 = (48 << 2) | 0), REC = 1; E1_8[0] = [7 >= 4]; E1_16[0] = [7/2 >= 2], E1_16[1] =
    [2.5/2 >= 2] = 0, E1_16[4] = [3 >= 2]; m4 = floor(|x| * 2^(2 - DE) + 1/2), max 7."""
    g = hif4_quantize_group_scalar(HAND_1)
    assert g.scale_code == 0xC0
    assert g.e1_8 == (1, 0, 0, 0, 0, 0, 0, 0)
    assert g.e1_16 == (1, 0, 0, 0, 1, 0) + (0,) * 10
    assert g.de[:6] == (2, 1, 0, 0, 1, 0)
    assert g.codes[:24] == (7, 13, 0, 0, 5, 2, 10, 0,
                            7, 2, 9, 1, 0, 0, 0, 8,  # 0.125 * 4 = 0.5: tie, up; -0.0 -> +0; -0.01 -> -0
                            6, 5, 9, 1, 7, 15, 1, 0)  # 2.25 * 2 = 4.5 -> 5; 1.9 * 4 = 7.6 -> 8 -> 7
    assert g.codes[24:] == (0,) * 40
    dec = hif4_dequantize_group_scalar(g)
    assert dec[:24] == [7, -5, 0, 0, 2.5, 1, -1, 0, 1.75, 0.5, -0.25, 0.25, 0, 0, 0, -0.0,
                        3, 2.5, -0.5, 0.5, 1.75, -1.75, 0.25, 0]
    assert [math.copysign(1, v) for v in dec[13:16]] == [1, 1, -1]
    assert _vector_groups(np.array([HAND_1], np.float32))[0] == g
    assert np.array_equal(_bits(golden_to_hifx(np.array(HAND_1, np.float32))[0]), _bits(dec))


def test_hand_computed_group_scale_one_and_a_half():
    """The worked example of docs/schemes/hif4.md.

    Vmax = 10: 10 * 73/512 = 1.42578125 -> BF16 1.421875 (tie 54.5/128 -> 54) -> E6M2 1.5
    (code 0xC2); REC = BF16(2/3) = 171/256, not 2/3. 10 * 171/256 = 6.68 >= 4 and /2 >= 2:
    DE = 2, m4 = floor(6.68 + 1/2) = 7: 10 decodes to 1.5 * 4 * 1.75 = 10.5."""
    x = [10, -6, 3, 1, 2.9, 1, 0, 0, 0.75, -0.01, 0, 0.3] + [0] * 52
    g = hif4_quantize_group_scalar(x)
    assert to_bf16(10 * CONST_REC) == Fraction(91, 64)
    assert g.scale_code == 0xC2 and e6m2_reciprocal(0xC2) == Fraction(171, 256)
    assert g.e1_8 == (1,) + (0,) * 7 and g.e1_16 == (1,) + (0,) * 15
    # q = |x| * 171/256 * 2^(2 - DE): 6.68, 4.008, 2.004, 0.668 | 3.874, 1.336 | 2.004, 0.027, 0.80
    assert g.codes[:12] == (0x7, 0xC, 0x2, 0x1, 0x4, 0x1, 0x0, 0x0, 0x2, 0x8, 0x0, 0x1)
    assert g.codes[12:] == (0,) * 52
    dec = hif4_dequantize_group_scalar(g)
    assert dec[:12] == [10.5, -6, 3, 1.5, 3, 0.75, 0, 0, 0.75, -0.0, 0, 0.375]
    assert math.copysign(1, dec[9]) == -1
    assert _vector_groups(np.array([x], np.float32))[0] == g


def test_single_value_is_not_reproduced():
    """A lone 1.0: SF = 73/512, E6M2 = 0.15625 (M = 1), REC = 6.40625, q = 6.40625 -> m4 = 6:
    it decodes to 0.15625 * 4 * 1.5 = 0.9375 although 1.0 is representable."""
    x = [1.0] + [0.0] * 63
    g = hif4_quantize_group_scalar(x)
    assert (g.scale_code, g.codes[0], g.de[0]) == ((45 << 2) | 1, 6, 2)
    assert hif4_dequantize_group_scalar(g)[0] == 0.9375


def test_zero_groups():
    for x in ([0.0] * 64, [-0.0] * 64):
        g = hif4_quantize_group_scalar(x)
        assert g == HiF4Group((0,) * 64, 0, (0,) * 8, (0,) * 16)
        assert hif4_dequantize_group_scalar(g) == [0.0] * 64
    r = hif4_quantize(np.zeros((3, 128), np.float32))
    assert not r["codes"].any() and not r["scales"].any() and not r["e1_8"].any() and not r["e1_16"].any()


# -- scalar == vectorized ------------------------------------------------------------------

@st.composite
def group_strategy(draw):
    kind = draw(st.sampled_from(["any", "scaled", "sparse"]))
    if kind == "any":
        finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
        return draw(hnp.arrays(np.float32, 64, elements=finite))
    base = draw(hnp.arrays(np.float32, 64, elements=st.floats(-8, 8, width=32)))
    if kind == "sparse":
        base = base * draw(hnp.arrays(np.bool_, 64))
    e0 = draw(st.integers(-160, 124))
    return np.ldexp(base, e0).astype(np.float32)


@pytest.mark.parametrize("arith", ARITHS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=group_strategy())
def test_scalar_equals_vectorized_hypothesis(x, arith):
    _assert_scalar_equals_vector(x, arith)


@pytest.mark.parametrize("arith", ARITHS)
def test_scalar_equals_vectorized_adversarial(arith):
    _assert_scalar_equals_vector(ADVERSARIAL[:250], arith)
    _assert_scalar_equals_vector(RANDOM[::200], arith)


# -- the golden model ----------------------------------------------------------------------

def test_golden_model_port_bit_exact():
    """10k+ random groups of several distributions and 2000 adversarial groups: the emulator's
    decoded values equal the golden arithmetic bit for bit (signed zeros included)."""
    for x in (RANDOM, ADVERSARIAL):
        assert x.shape[0] >= 2000
        dec = hif4_dequantize(**hif4_quantize(x))
        assert np.array_equal(_bits(dec), _bits(golden_to_hifx(x)))


def test_float32_mode_equals_torch_style_float32_port():
    for x in (RANDOM, ADVERSARIAL):
        dec = hif4_dequantize(**hif4_quantize(x, arith="float32"))
        want = torch_style_float32(x)
        assert np.array_equal(dec, want)
        assert np.array_equal(np.signbit(dec), np.signbit(want))


def test_arith_modes_differ_where_float32_rounds():
    """Three places where float32 evaluation changes the result (all in ADVERSARIAL)."""
    # (a) q + 1/2 rounds up to 1 in float32: scale 1 (Vmax = 7), DE = 0, x = 0.125 - 2^-27,
    #     q = 0.5 - 2^-25; exact: floor(1 - 2^-25) = 0; float32: 1 - 2^-25 is a tie -> 1.0.
    x = np.zeros(64, np.float32)
    x[0], x[8] = 7, 0.125 - 2.0 ** -27
    assert hif4_quantize_group_scalar(x).codes[8] == 0
    assert hif4_quantize_group_scalar(x, arith="float32").codes[8] == 1
    # (b) V8 * REC just below 4 rounds to 4 in float32 (E1_8 flips). Only one float32
    #     significand does this: 4 / REC rounded to float32 with REC = 73/128 (M = 3), where
    #     V8 * REC = 4 - 2^-25; for M = 1, 2 the nearest products miss the rounding window.
    rec = e6m2_reciprocal(0xC3)  # Vmax = 12.25: E6M2 = 1.75, REC = 73/128
    x = np.zeros(64, np.float32)
    x[0], x[8] = 12.25, np.float32(4 / float(rec))
    assert 4 - Fraction(float(x[8])) * rec == Fraction(1, 2 ** 25)
    assert hif4_quantize_group_scalar(x).e1_8[:2] == (1, 0)
    assert hif4_quantize_group_scalar(x, arith="float32").e1_8[:2] == (1, 1)
    for r in (e6m2_reciprocal(0xC1), e6m2_reciprocal(0xC2)):
        v = np.float32(4 / float(r))
        below = v if Fraction(float(v)) * r < 4 else np.nextafter(v, np.float32(0))
        assert to_float32(Fraction(float(below)) * r) < 4
    # (c) the scale: Vmax * 73/512 rounded to float32 lands on a bfloat16 tie and the tie
    #     goes to the even neighbour, which rounds to another E6M2. Up to powers of two
    #     only two float32 significands do this: SF 145 -> 144 (x 2^-7) and 209 -> 208.
    for vmax, exact, rounded in ((7.917808532714844, 0xC1, 0xC0), (11.424657821655273, 0xC3, 0xC2)):
        x = np.zeros(64, np.float32)
        x[0] = vmax
        assert hif4_quantize_group_scalar(x).scale_code == exact
        assert hif4_quantize_group_scalar(x, arith="float32").scale_code == rounded


# -- properties ----------------------------------------------------------------------------

def test_every_s1p2_code_is_reached():
    codes = hif4_quantize(RANDOM)["codes"]
    assert set(np.unique(codes).tolist()) == set(range(16))
    assert set(hif4_quantize_group_scalar(HAND_1).codes) >= {0, 1, 2, 5, 6, 7, 8, 9, 10, 13, 15}


def test_decoded_values_are_exact_in_float32():
    r = hif4_quantize(ADVERSARIAL[:100])
    dec = hif4_dequantize(**r)
    assert dec.dtype == np.float32
    for i, row in enumerate(ADVERSARIAL[:100]):
        ref = hif4_dequantize_group_scalar(hif4_quantize_group_scalar(row))
        assert np.array_equal(_bits(dec[i]), _bits(ref))
    # and each value is an s1p2 value times E6M2 * 2^DE
    s1p2 = fp4spec.get_format("s1p2").values
    scale = e6m2_decode(r["scales"])[..., None] * 2.0 ** (np.repeat(r["e1_8"], 2, -1) + r["e1_16"])
    assert np.array_equal(dec, (s1p2[r["codes"]].reshape(-1, 1, 16, 4) * scale[..., None]).reshape(dec.shape))


@settings(max_examples=100, deadline=None)
@given(x=group_strategy())
def test_error_bound(x):
    """Unsaturated elements (q < 7.5) are within half a step, up to REC's rounding.

    With step = E6M2 * 2^DE / 4 and rho = REC * E6M2 (1 for M = 0, else 1 + 1/1024,
    1 + 1/512 or 1 - 1/512): |dequant - x| <= step * (1/2 + q * |1/rho - 1|) <= 0.5147 step.
    The plain half-step bound holds exactly when M = 0.
    """
    x = x.astype(np.float32)
    g = hif4_quantize_group_scalar(x)
    dec = hif4_dequantize_group_scalar(g)
    scale, rec = e6m2_value(g.scale_code), e6m2_reciprocal(g.scale_code)
    slack = abs(1 / (rec * scale) - 1)
    for i, (xi, di) in enumerate(zip(x.tolist(), dec)):
        de = g.de[i // 4]
        step = scale * 2 ** de / 4
        q = abs(Fraction(xi)) * rec * Fraction(2) ** (2 - de)
        if q < Fraction(15, 2):
            err = abs(Fraction(di) - Fraction(xi))
            assert err <= step * (Fraction(1, 2) + q * slack)
            if g.scale_code & 3 == 0:
                assert err <= step / 2


def test_half_step_bound_fails_without_exact_reciprocal():
    """Vmax = 12.25 gives E6M2 = 1.75 (M = 3) and REC = 73/128 = 1/1.75 * 0.998: x = 11.39 has
    q = 6.496 -> m4 = 6, decodes to 10.5, error 0.89 > step/2 = 0.875."""
    x = np.zeros(64, np.float32)
    x[0], x[1] = 12.25, 11.39
    g = hif4_quantize_group_scalar(x)
    assert g.scale_code == 0xC3 and g.de[0] == 2 and g.codes[1] == 6
    assert abs(hif4_dequantize_group_scalar(g)[1] - float(x[1])) > 1.75 / 2


def test_exact_ties_round_away_from_zero():
    # scale 1 (Vmax = 7 in group 0); group 1: DE = 0, q = 4|x|: ties at x = (k + 1/2) / 4
    x = np.zeros(64, np.float32)
    x[0] = 7
    ties = [(k + 0.5) / 4 for k in range(7)]
    x[8:15] = ties
    x[16:23] = [-t for t in ties]  # same ties, negative, in group 2
    g = hif4_quantize_group_scalar(x)
    assert g.e1_8[1:3] == (0, 0) and g.de[2:6] == (0, 0, 0, 0)
    assert g.codes[8:15] == tuple(range(1, 8))
    assert g.codes[16:23] == tuple(8 | k for k in range(1, 8))
    # just below each tie rounds down
    x[8:15] = [np.nextafter(np.float32(t), np.float32(0)) for t in ties]
    assert hif4_quantize_group_scalar(x).codes[8:15] == tuple(range(0, 7))


def test_exact_thresholds():
    """V8 * REC = 4 exactly sets E1_8; V16 * REC * 2^-E1_8 = 2 exactly sets E1_16."""
    x = np.zeros(64, np.float32)
    x[0] = 7  # scale 1: REC = 1
    x[8], x[16], x[24] = 4, np.nextafter(np.float32(4), np.float32(0)), 2
    x[32], x[36] = 4, 2  # level-2 group 4 with E1_8 = 1: V16 = 4 -> 4/2 >= 2; 2 -> 1 < 2
    g = hif4_quantize_group_scalar(x)
    assert g.e1_8[:5] == (1, 1, 0, 0, 1)
    assert g.e1_16[2] == 1 and g.e1_16[4] == 1 and g.e1_16[6] == 1  # 4/2 = 2; 3.99.. >= 2; 2 >= 2
    assert g.e1_16[8] == 1 and g.e1_16[9] == 0
    assert _vector_groups(x)[0] == g


@pytest.mark.parametrize("sf, code", [
    (2.0 ** 15 * 1.25, 0xFD), (2.0 ** 15 * 1.375, 0xFE),  # a tie: 5.5 -> 6 (even)
    (2.0 ** 15 * 1.5, 0xFE), (2.0 ** 15 * 1.75, 0xFE), (2.0 ** 16, 0xFE),  # clamped to 49152
    (2.0 ** -48, 0x00), (2.0 ** -48 * 1.125, 0x00), (2.0 ** -48 * 1.375, 0x02),  # ties to even
    (2.0 ** -48 * 1.25, 0x01), (2.0 ** -48 * 0.875, 0x00), (2.0 ** -60, 0x00)])  # clamped to 2^-48
def test_e6m2_clamps(sf, code):
    """Vmax = sf * 512/73 in float32 gives SF = BF16(Vmax * 73/512) = sf exactly."""
    x = np.zeros(64, np.float32)
    x[0] = sf * 512 / 73
    g = hif4_quantize_group_scalar(x)
    assert to_bf16(Fraction(float(x[0])) * CONST_REC) == Fraction(sf)
    assert g.scale_code == code
    assert _vector_groups(x)[0] == g


def test_extreme_groups():
    big = np.zeros(64, np.float32)
    big[0], big[63] = 1e30, -3e38
    g = hif4_quantize_group_scalar(big)
    assert g.scale_code == 0xFE and g.de[0] == 2 and g.codes[0] == 7 and g.codes[63] == 15  # saturated
    assert hif4_dequantize_group_scalar(g)[0] == 344064  # the largest HiF4 magnitude: 49152 * 4 * 1.75
    tiny = np.zeros(64, np.float32)
    tiny[0], tiny[1] = 2.0 ** -47, 1e-45
    g = hif4_quantize_group_scalar(tiny)
    # SF ~ 2^-50 is clamped to 2^-48 (code 0), REC = 2^48: V8 * REC = 2 < 4, V16 * REC = 2 >= 2
    assert (g.scale_code, g.e1_8[0], g.e1_16[0], g.codes[:2]) == (0, 0, 1, (4, 0))
    assert hif4_dequantize_group_scalar(g)[0] == 2.0 ** -47
    _assert_scalar_equals_vector(np.stack([big, tiny]), "float64")


# -- inputs --------------------------------------------------------------------------------

def test_input_dtypes():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 64)) * np.exp2(rng.uniform(-20, 12, (64, 1)))
    for dt in (np.float16, ml_dtypes.bfloat16):
        xd = x.astype(dt)
        got = hif4_quantize(xd)
        ref = hif4_quantize(xd.astype(np.float32))
        for k in ref:
            assert np.array_equal(got[k], ref[k])
        assert _vector_groups(xd.astype(np.float32)[:2])[0] == hif4_quantize_group_scalar(xd[0])


def test_float64_is_rounded_to_float32_first():
    x64 = np.zeros(64, np.float64)
    x64[0], x64[8] = 7, 0.125 - 2.0 ** -40  # exact: below the tie 0.125; float32: the tie
    g = hif4_quantize_group_scalar(x64)
    assert np.float32(x64[8]) == 0.125 and g.codes[8] == 1
    assert g == hif4_quantize_group_scalar(x64.astype(np.float32))
    assert _vector_groups(x64)[0] == g
    xr = RANDOM[:50].astype(np.float64) * 1.1
    r64, r32 = hif4_quantize(xr), hif4_quantize(xr.astype(np.float32))
    for k in r64:
        assert np.array_equal(r64[k], r32[k])
    # a finite float64 beyond the float32 range is Inf there: an error by default
    x64[3] = 1e39
    with pytest.raises(ValueError, match="float32 range"):
        hif4_quantize_group_scalar(x64)
    with pytest.raises(ValueError, match=r"x: element \(3,\).*float32 range"):
        hif4_quantize(x64)


def test_nonfinite_policies():
    x = np.tile(RANDOM[:1], (4, 1))
    x[1, 5], x[2, 63], x[3, 0] = np.nan, np.inf, -np.inf
    for bad in (1, 2, 3):
        with pytest.raises(ValueError, match="nonfinite='propagate'"):
            hif4_quantize_group_scalar(x[bad])
    with pytest.raises(ValueError, match=r"x: element \(1, 5\) is nan"):
        hif4_quantize(x)
    r = hif4_quantize(x, nonfinite="propagate")
    assert r["scales"][:, 0].tolist()[1:] == [E6M2_NAN_CODE] * 3
    assert not r["codes"][1:].any() and not r["e1_8"][1:].any() and not r["e1_16"][1:].any()
    for i in range(4):
        assert hif4_quantize_group_scalar(x[i], nonfinite="propagate") == HiF4Group(
            tuple(int(c) for c in r["codes"][i]), int(r["scales"][i, 0]),
            tuple(int(b) for b in r["e1_8"][i, 0]), tuple(int(b) for b in r["e1_16"][i, 0]))
    dec = hif4_dequantize(**r)
    gold = golden_to_hifx(x)  # the golden model turns such a group NaN as a whole
    assert np.array_equal(np.isnan(dec), np.isnan(gold)) and np.isnan(dec[1:]).all()
    assert np.array_equal(dec[0], hif4_dequantize(**hif4_quantize(x[:1]))[0])
    g = hif4_quantize_group_scalar(x[2], nonfinite="propagate")
    assert all(math.isnan(v) for v in hif4_dequantize_group_scalar(g))


def test_axis_and_padding():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 130, 2)).astype(np.float32)
    with pytest.raises(ValueError, match="x: length 130 along axis 1 is not a multiple of 64; pass pad=True"):
        hif4_quantize(x, axis=1)
    r = hif4_quantize(x, axis=1, pad=True)
    assert r["codes"].shape == x.shape and r["codes"].dtype == np.uint8
    assert r["scales"].shape == (3, 2, 3) and r["scales"].dtype == np.uint8
    assert r["e1_8"].shape == (3, 2, 3, 8) and r["e1_16"].shape == (3, 2, 3, 16)
    padded = np.moveaxis(np.pad(x, [(0, 0), (0, 62), (0, 0)]), 1, -1)  # (3, 2, 192)
    rp = hif4_quantize(padded)
    assert np.array_equal(np.moveaxis(r["codes"], 1, -1), rp["codes"][..., :130])
    for k in ("scales", "e1_8", "e1_16"):
        assert np.array_equal(r[k], rp[k])
    dec = hif4_dequantize(**r, axis=1)
    assert dec.shape == x.shape
    assert np.array_equal(np.moveaxis(dec, 1, -1), hif4_dequantize(**rp)[..., :130])
    # axis=-2 is the same axis
    r2 = hif4_quantize(x, axis=-2, pad=True)
    assert all(np.array_equal(r[k], r2[k]) for k in r)
    assert np.array_equal(hif4_dequantize(**r, axis=-2), dec)


def test_errors():
    x = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="arith: 'fp16' is not one of 'float64', 'float32'"):
        hif4_quantize(x, arith="fp16")
    with pytest.raises(ValueError, match="arith"):
        hif4_quantize_group_scalar(x, arith="fp16")
    with pytest.raises(ValueError, match="nonfinite: 'zero' is not one of 'error', 'propagate'"):
        hif4_quantize(x, nonfinite="zero")
    with pytest.raises(ValueError, match="nonfinite"):
        hif4_quantize_group_scalar(x, nonfinite="zero")
    with pytest.raises(TypeError, match="x: dtype int32"):
        hif4_quantize(np.zeros(64, np.int32))
    with pytest.raises(ValueError, match="x: a 0-d array"):
        hif4_quantize(np.float32(1))
    with pytest.raises(ValueError, match="axis: 2 is out of range"):
        hif4_quantize(np.zeros((2, 64), np.float32), axis=2)
    with pytest.raises(ValueError, match="pad"):
        hif4_quantize(x, pad="yes")
    with pytest.raises(ValueError, match="values: a HiF4 group has exactly 64 values, got 63"):
        hif4_quantize_group_scalar([0.0] * 63)
    with pytest.raises(TypeError, match="values"):
        hif4_quantize_group_scalar(["a"] * 64)
    with pytest.raises(ValueError, match="e1_8"):
        HiF4Group((0,) * 64, 0, (0,) * 7, (0,) * 16)
    with pytest.raises(ValueError, match="codes"):
        HiF4Group((16,) + (0,) * 63, 0, (0,) * 8, (0,) * 16)
    with pytest.raises(TypeError, match="group"):
        hif4_dequantize_group_scalar((0,) * 64)
    r = hif4_quantize(np.zeros((2, 128), np.float32))
    with pytest.raises(ValueError, match="codes: every entry must lie in 0..15, found 16"):
        hif4_dequantize(r["codes"] + 16, r["scales"], r["e1_8"], r["e1_16"])
    with pytest.raises(TypeError, match="scales: expected an integer array"):
        hif4_dequantize(r["codes"], r["scales"].astype(float), r["e1_8"], r["e1_16"])
    with pytest.raises(ValueError, match="e1_16: every entry must lie in 0..1"):
        hif4_dequantize(r["codes"], r["scales"], r["e1_8"], r["e1_16"] + 2)
    with pytest.raises(ValueError, match="scales: 2 groups"):
        hif4_dequantize(r["codes"][:, :64], r["scales"], r["e1_8"], r["e1_16"])
    with pytest.raises(ValueError, match="e1_8: shape"):
        hif4_dequantize(r["codes"], r["scales"], r["e1_8"][..., :4], r["e1_16"])


def test_empty_and_lead_shapes():
    r = hif4_quantize(np.zeros((0, 64), np.float32))
    assert r["codes"].shape == (0, 64) and r["scales"].shape == (0, 1) and r["e1_16"].shape == (0, 1, 16)
    assert hif4_dequantize(**r).shape == (0, 64)
    r = hif4_quantize(np.zeros((2, 0), np.float32))
    assert r["scales"].shape == (2, 0) and hif4_dequantize(**r).shape == (2, 0)
