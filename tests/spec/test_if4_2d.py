"""IF4 with 16 x 16 tiles (``if4_2d``): hand-computed tiles, the 256-term error order, and scalar
reference == emulator bit for bit.

* A tile is one block of 256 values, row by row: one amax, one scale byte on each of its 16 rows,
  one E2M1/INT4 choice.
* The error of a tile adds its 256 terms in torch's CPU ``sum`` order (checked against torch).
* The scalar reference (:func:`fp4spec.if4.quantize_reference`) equals the emulator: every UE4M3
  scale code (one tile each), every adversarial kind, selection near-ties, hypothesis tensors.
* Errors: rows not a multiple of 16, a 1-d input, a tile shape other than 16 x 16.
"""

import numpy as np
import pytest
import test_if4  # the IF4 comparison helpers (a sibling test module)
from fp4spec.conformance import builders, selection
from fp4spec.emulator import if4 as E
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fp4spec
from fp4spec import if4
from fp4spec.scaling import torch_cpu_row_sum

F32 = np.float32
RULES = ("mse", "mae", "abs_max")


def _scheme(rule="mse"):
    return fp4spec.get_scheme("if4_2d", scale_rule=rule)


def _both(x, rule, rounding="rne", seed=0):
    return test_if4._both(x, rule, rounding, seed, name="if4_2d")


# -- the definition --------------------------------------------------------------------------------

def test_descriptor():
    s = fp4spec.get_scheme("if4_2d")
    assert (s.structure, s.block_shape, s.tile_rows, s.scale_rule, s.profile) == \
        ("if4", (16, 16), 16, "mse", "fouroversix")
    assert fp4spec.get_scheme("if4:block_shape=16x16") == s.__class__(**{**s.__dict__, "name": "if4"})


def test_a_tile_is_one_block():
    """A tile on the INT4 grid whose first row alone would prefer E2M1 takes INT4 as a whole: the
    scale byte of every row is the tile's, with the flag."""
    x = np.zeros((16, 32), np.float32)
    x[0, 16] = 2688.0  # the tensor amax in the second tile: S_enc = 1
    k = np.arange(-7, 8)
    x[:, :16] = (np.resize(k, (16, 16)) * F32(6 / 7) * F32(64.0 / 6)).astype(np.float32)
    x[0, :16] = [6 * 64 / 6, 4 * 64 / 6, 2 * 64 / 6] + [0.0] * 13  # an E2M1-grid first row
    q = fp4spec.quantize(x, "if4_2d")
    assert len(set(q.scales[:, 0].tolist())) == 1 and q.scales[0, 0] & 0x80
    assert len(set(q.scales[:, 1].tolist())) == 1 and not q.scales[0, 1] & 0x80
    test_if4._assert_same(if4.quantize_reference(x, _scheme()), q)
    q1 = fp4spec.quantize(x, "if4")
    assert not q1.scales[0, 0] & 0x80  # as 1 x 16 blocks the first row takes E2M1


def test_tiles_take_values_row_by_row():
    a = np.arange(2 * 32 * 3 * 16).reshape(2, 32, 3, 16)
    t = E.to_tiles(a, 16)
    assert t.shape == (2, 2, 3, 256)
    assert list(t[0, 1, 2, :18]) == list(a[0, 16, 2, :]) + list(a[0, 17, 2, :2])
    assert np.array_equal(E.from_tiles(t, 16), a)
    assert [list(b[:2]) for b in if4.tiles((32, 32), _scheme())][:3] == [[(0, 0), (0, 1)], [(0, 16), (0, 17)],
                                                                           [(16, 0), (16, 1)]]


def test_error_sum_of_256_is_torch_cpu_sum():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4000, 256)) * np.exp2(rng.integers(-20, 20, (4000, 256)))).astype(np.float32)
    want = torch.from_numpy(np.abs(x)).sum(-1).numpy()
    got = E.block_errors(np.zeros_like(x), x, "mae")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert all(torch_cpu_row_sum(np.abs(x[i])) == want[i] for i in range(20))
    seq = np.zeros(len(x), np.float32)
    for j in range(256):
        seq = (seq + np.abs(x[:, j])).astype(np.float32)
    assert (seq != want).any()  # element order is another order


def test_torch_cpu_row_sum_refuses_unmodelled_lengths():
    with pytest.raises(ValueError, match="terms: torch's CPU row order is modelled for 8 <= n < 512"):
        torch_cpu_row_sum([1.0] * 12)


# -- scalar reference == emulator ------------------------------------------------------------------

@pytest.mark.parametrize("rule, rounding", [(r, "rne") for r in RULES] + [("mse", "sr"), ("mae", "rtz")])
def test_every_scale_code_reference_equals_emulator(rule, rounding):
    x = builders.if4_every_scale_code(np.random.default_rng(5), tile_rows=16)
    ref, emu = _both(x, rule, rounding)
    test_if4._assert_same(ref, emu)
    assert set(ref.scales[0] & 0x7F) == set(range(1, 127))
    assert (ref.scales >= 0x80).any() and (ref.scales < 0x80).any()


@pytest.mark.parametrize("rule", RULES)
def test_adversarial_kinds_reference_equals_emulator(rule):
    sch = _scheme(rule)
    rng = np.random.default_rng(6)
    for kind in builders.kinds_for(sch):
        g = builders.global_amax(rng, sch, int(rng.integers(-3, 9)))
        x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=2, amax=g, spread=20)
        test_if4._assert_same(*_both(x, rule, "sr" if kind == "ties" else "rne", seed=int(rng.integers(1 << 30))))


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_selection_near_ties_reference_equals_emulator(rule):
    rng = np.random.default_rng(7)
    x = selection.near_tie_tensor(rng, _scheme(rule), rows=1, cols=3)
    test_if4._assert_same(*_both(x, rule))


def test_dequantize_reference_equals_emulator():
    x = builders.if4_every_scale_code(np.random.default_rng(8), tile_rows=16)[:, :512]
    q = fp4spec.quantize(x, "if4_2d")
    a, b = if4.dequantize_reference(q), fp4spec.dequantize(q)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@settings(max_examples=15, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.sampled_from([16, 32]), st.sampled_from([16, 32])),
                    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)),
       rule=st.sampled_from(RULES), rounding=st.sampled_from(("rne", "rna", "rtz", "sr")))
def test_hypothesis_reference_equals_emulator(x, rule, rounding):
    test_if4._assert_same(*_both(x, rule, rounding))


# -- errors ----------------------------------------------------------------------------------------

def test_rows_must_fill_tiles_or_pad():
    x = np.ones((20, 16), np.float32)
    with pytest.raises(ValueError, match="x: 20 rows .* is not a multiple of the if4_2d tile height 16"):
        fp4spec.quantize(x, "if4_2d")
    q = fp4spec.quantize(x, "if4_2d", pad=True)
    assert q.codes.shape == (32, 16) and q.scales.shape == (32, 1)
    test_if4._assert_same(if4.quantize_reference(x, _scheme(), pad=True), q)
    assert fp4spec.dequantize(q).shape == (20, 16)
    with pytest.raises(ValueError, match="x: if4_2d uses 16x16 tiles over the last two axes; x has one dimension"):
        fp4spec.quantize(np.ones(16, np.float32), "if4_2d")


def test_other_tile_shapes_are_refused():
    with pytest.raises(ValueError, match="block_shape: IF4 blocks are 1 x 16 elements or 16 x 16 tiles"):
        fp4spec.get_scheme("if4_2d", block_shape=(16, 32))
    with pytest.raises(ValueError, match="block_shape: IF4 blocks are 1 x 16 elements or 16 x 16 tiles"):
        fp4spec.get_scheme("if4", block_shape=(8, 16))
