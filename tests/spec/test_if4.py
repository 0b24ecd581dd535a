"""IF4: hand-computed blocks, the rules of fp4spec.if4, and scalar reference == emulator.

* Hand-computed blocks (tensor amax 2688, so S_enc = S_dec = 1 and the block scale is amax / 6):
  a block on the INT4 grid takes INT4, one on the E2M1 grid E2M1, a tie E2M1.
* The error order is torch's CPU ``sum`` over 16 (checked against torch where installed).
* The scalar reference (:mod:`fp4spec.if4`) equals the emulator (:mod:`fp4spec.emulator.if4`)
  bit for bit: every UE4M3 block scale with elements on every E2M1 and INT4 midpoint (and one
  ulp beside), every adversarial kind of the conformance builders, near-ties of the selection,
  hypothesis tensors; every scale rule and rounding mode.
* Errors name the argument: non-finite input, fixed scheme fields.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp4spec
from fp4spec import if4
from fp4spec.conformance import builders, selection
from fp4spec.emulator import if4 as E

F32 = np.float32
RULES = ("mse", "mae", "abs_max")
ROUNDINGS = ("rne", "rna", "rtz", "rup", "rdn", "rto", "sr")


def _scheme(rule="mse", name="if4"):
    return fp4spec.get_scheme(name, scale_rule=rule)


def _both(x, rule, rounding="rne", seed=0, name="if4"):
    """(scalar reference, emulator) of x under scheme ``name``, with random bits for ``sr``."""
    sch = _scheme(rule, name)
    rb = np.random.default_rng(seed).integers(0, 256, x.shape) if rounding == "sr" else None
    return (if4.quantize_reference(x, sch, rounding=rounding, rbits=rb),
            fp4spec.quantize(x, sch, rounding=rounding, rbits=rb))


def _assert_same(a, b):
    assert np.array_equal(a.codes, b.codes), np.argwhere(a.codes != b.codes)[:3]
    assert np.array_equal(a.scales, b.scales), np.argwhere(a.scales != b.scales)[:3]
    assert F32(a.global_scale).view(np.uint32) == F32(b.global_scale).view(np.uint32)


def _anchored(*blocks):
    """One row: a block holding the tensor amax 2688 (S_enc = 1), then ``blocks``."""
    anchor = np.zeros(16, np.float32)
    anchor[0] = 2688.0
    return np.concatenate([anchor, *[np.asarray(b, np.float32) for b in blocks]])[None]


# -- hand-computed blocks --------------------------------------------------------------------------

def test_int_grid_block_takes_int4_and_sets_the_flag():
    k = np.array([-7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 0])
    block = (k * (6.0 / 7.0)).astype(np.float32)  # block amax 6: scale fp32(6 / 6) * 1 = 1.0, E4M3 0x38
    q = fp4spec.quantize(_anchored(block), "if4")
    assert q.global_scale == 1.0 and q.scales[0, 0] == 0x7E  # 2688 / 6 = 448
    assert q.scales[0, 1] == 0x38 | 0x80  # UE4M3 1.0, flagged INT4
    assert list(q.codes[0, 16:]) == [int(v) & 0xF for v in k]  # two's complement
    values = fp4spec.dequantize(q)[0, 16:]
    assert np.array_equal(values, (k * F32(6.0 / 7.0)).astype(np.float32))  # fp32(fp32(k * fp32(1 * 6/7)) * 1)


def test_e2m1_grid_block_takes_e2m1():
    block = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6, 0], np.float32)
    q = fp4spec.quantize(_anchored(block), "if4")
    assert q.scales[0, 1] == 0x38
    assert list(q.codes[0, 16:]) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 0]


def test_equal_errors_take_e2m1():
    """[6, -6, 0, ...]: E2M1 is exact; INT4 +-7 dequantizes to fp32(fp32(7 * 2688) * fp32(6/7)) / 2688 = 6
    exactly: both errors are 0, and a tie takes E2M1 (step 15, strict <)."""
    block = np.zeros(16, np.float32)
    block[:2] = (6.0, -6.0)
    assert if4.dequantized_int(0x7, F32(1.0), F32(2688.0)) == 6.0
    for rule in RULES:
        q = fp4spec.quantize(_anchored(block), "if4", scale_rule=rule)
        assert q.scales[0, 1] == 0x38 and list(q.codes[0, 16:18]) == [0x7, 0xF]


def test_zero_tensor():
    """fouroversix: 2688 / 0 = +Inf, S_dec = 0; every scale 0, every code 0 (E2M1)."""
    q = fp4spec.quantize(np.zeros((2, 32), np.float32), "if4")
    assert q.global_scale == 0 and not q.scales.any() and not q.codes.any()
    q = fp4spec.quantize(-np.zeros((1, 16), np.float32), "if4")
    assert not q.codes.any()  # -0.0 gives +0 (torch.sign(-0.0) is 0)


def test_negative_values_rounding_to_zero_keep_the_sign():
    block = np.zeros(16, np.float32)
    block[0], block[1] = 6.0, -0.2  # E2M1 -0 (code 0x8); INT4: -0.2 * 7/6 rounds to 0 (code 0)
    q = fp4spec.quantize(_anchored(block), "if4")
    assert q.scales[0, 1] == 0x38 and q.codes[0, 17] == 0x8


def test_subnormal_scale_saturates_where_fouroversix_packs_0x8():
    """Block amax 0.01640625: scale 0.01640625 / 6 = 1.4 * 2^-9 rounds down to 2^-9, y = 8.4 > 6.
    The spec saturates (0x7); fouroversix 1.0.5 rounds to 8 and packs 0x8 (docs/divergences.md)."""
    block = np.zeros(16, np.float32)
    block[0] = 0.01640625
    q = fp4spec.quantize(_anchored(block), "if4")
    assert q.scales[0, 1] == 0x01 and q.codes[0, 16] == 0x7


def test_element_values_and_block_multiplier():
    assert if4.element_value(0x9, 0x80 | 0x38) == Fraction(-7) * Fraction(6, 7)
    assert if4.element_value(0x9, 0x38) == Fraction(-1, 2)
    assert if4.block_multiplier(0xB8) == F32(F32(1.0) * if4.INT_DOWN)
    assert if4.is_int_block(0x80) and not if4.is_int_block(0x7F)


# -- the error order ---------------------------------------------------------------------------------

def test_error_sum_is_pairs_then_sequential():
    t = [F32(v) for v in np.random.default_rng(3).random(16)]
    p = [F32(t[j] + t[j + 8]) for j in range(8)]
    acc = F32(0)
    for v in p:
        acc = F32(acc + v)
    assert if4.error_sum(t) == acc


def test_error_sum_is_torch_cpu_sum():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((20000, 16)) * np.exp2(rng.integers(-20, 20, (20000, 16)))).astype(np.float32)
    want = torch.from_numpy(np.abs(x)).sum(-1).numpy()
    got = E.block_errors(np.zeros_like(x), x, "mae")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


# -- scalar reference == emulator ------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_every_scale_code_reference_equals_emulator(rule, rounding):
    x = builders.if4_every_scale_code(np.random.default_rng(5))
    ref, emu = _both(x, rule, rounding)
    _assert_same(ref, emu)
    assert set(ref.scales.ravel() & 0x7F) == set(range(1, 127))
    assert (ref.scales >= 0x80).any() and (ref.scales < 0x80).any()


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_adversarial_kinds_reference_equals_emulator(rule, rounding):
    sch = _scheme(rule)
    rng = np.random.default_rng(6)
    for kind in builders.kinds_for(sch):
        for typical in (True, False):
            g = builders.global_amax(rng, sch, int(rng.integers(-3, 9))) if typical else None
            x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=3, amax=g, spread=20)
            _assert_same(*_both(x, rule, rounding, seed=int(rng.integers(1 << 30))))
    for _ in range(2):
        x = builders.build_tensor(rng, sch, builders.kinds_for(sch), block_rows=2, block_cols=4, spread=250)
        _assert_same(*_both(x, rule, rounding))


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_selection_near_ties_reference_equals_emulator(rule):
    """Blocks one float32 step from flipping between E2M1 and INT4: the same choice, and the block
    sits on the side its margin says."""
    sch = _scheme(rule)
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = selection.near_tie_tensor(rng, sch)
        _assert_same(*_both(x, rule))


def test_dequantize_reference_equals_emulator():
    rng = np.random.default_rng(8)
    sch = _scheme()
    x = builders.build_tensor(rng, sch, builders.kinds_for(sch), block_rows=2, block_cols=4, spread=30)
    q = fp4spec.quantize(x, sch)
    assert (q.scales >= 0x80).any()
    a, b = if4.dequantize_reference(q), fp4spec.dequantize(q)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@settings(max_examples=60, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.sampled_from([16, 32, 48])),
                    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)),
       rule=st.sampled_from(RULES), rounding=st.sampled_from(ROUNDINGS))
def test_hypothesis_reference_equals_emulator(x, rule, rounding):
    _assert_same(*_both(x, rule, rounding))


# -- errors and the descriptor ----------------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_refused(bad):
    x = np.ones((1, 32), np.float32)
    x[0, 5] = bad
    with pytest.raises(ValueError, match=r"x: IF4 is defined for finite input; x\[0, 5\]"):
        fp4spec.quantize(x, "if4")
    with pytest.raises(ValueError, match="x: IF4 is defined for finite input"):
        if4.quantize_reference(x, _scheme())


@pytest.mark.parametrize("override, words", [
    ({"block_size": 32}, "block_shape: IF4 blocks are 1 x 16"),
    ({"element": "e1m2"}, "element: IF4 is defined with 'e2m1' only"),
    ({"scale": "ue4m3"}, "scale: IF4 is defined with 'e4m3' only"),
    ({"element_max": 4.0}, "element_max: IF4 fixes it"),
    ({"scale_rule": "4over6"}, "scale_rule: '4over6' is not one of 'mse', 'mae', 'abs_max'"),
    ({"profile": "te"}, "profile: 'te' cannot drive a 'if4' scheme"),
])
def test_fixed_fields_are_refused(override, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        fp4spec.get_scheme("if4", **override)


def test_descriptor():
    s = fp4spec.get_scheme("if4")
    assert (s.structure, s.element.name, s.scale.name, s.block_shape, s.scale_rule, s.profile, s.global_scale) == \
        ("if4", "e2m1", "e4m3", (16,), "mse", "fouroversix", "fp32")
    assert fp4spec.get_scheme("if4:scale_rule=abs_max").scale_rule == "abs_max"


def test_axis_and_padding():
    x = np.random.default_rng(9).standard_normal((20, 3)).astype(np.float32)
    q = fp4spec.quantize(x, "if4", axis=0, pad=True)
    assert q.codes.shape == (32, 3) and q.scales.shape == (2, 3)
    ref = if4.quantize_reference(x, _scheme(), axis=0, pad=True)
    _assert_same(ref, q)
    assert fp4spec.dequantize(q).shape == (20, 3)
