"""The adversarial generators do what they claim: exact ties, honoured amaxes, representable blocks."""

import numpy as np
import pytest
from hypothesis import given, settings

import fp4spec
from fp4spec.backends import resolve_scheme
from fp4spec.conformance import builders, chain
from fp4spec.conformance import strategies as fst
from fp4spec.emulator.elements import encode
from fp4spec.scaling import element_nan_policy

CHAIN_SCHEMES = ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "nvfp4", "nvfp4_2d", "ufp4", "nvint4",
                 "mxfp4:scale_rule=rceil", "mxfp4:profile=torchao", "nvfp4:profile=torchao"]


def _midpoints(sch):
    g = builders.element_grid(sch)
    return (g[:-1] + g[1:]) / 2


@pytest.mark.parametrize("spec", CHAIN_SCHEMES)
def test_tie_blocks_are_exact_ties_under_the_reference(spec):
    sch = resolve_scheme(spec)
    rng = np.random.default_rng(1)
    ties = total = 0
    for _ in range(10):
        x = builders.build_tensor(rng, sch, "ties", block_rows=2, block_cols=2, spread=4)
        q = fp4spec.quantize(x, sch)
        y = chain.scaled_values(x, q.scales, sch)
        ties += np.isin(np.abs(y), _midpoints(sch)).sum()
        total += y.size
    assert ties / total > 0.25


@pytest.mark.parametrize("spec", CHAIN_SCHEMES + ["nvfp4:scale_rule=4over6"])
def test_chain_restates_the_emulator(spec):
    """chain.scaled_values, rounded with the element encoder, gives the emulator's codes."""
    sch = resolve_scheme(spec)
    rng = np.random.default_rng(2)
    for kinds in ("random", "ties", "subnormal", "saturate", ("zero", "nonfinite", "single", "ties")):
        x = builders.build_tensor(rng, sch, kinds, block_rows=2, block_cols=2, spread=40)
        q = fp4spec.quantize(x, sch)
        y = chain.scaled_values(x, q.scales, sch)
        codes = encode(y, sch.element, "rne", overflow="saturate", nan=element_nan_policy(sch.element))
        assert np.array_equal(codes, q.codes)


def test_scale_tie_blocks_hit_ue4m3_midpoints():
    sch = resolve_scheme("nvfp4")
    rng = np.random.default_rng(3)
    svals = np.unique(sch.scale.values[np.isfinite(sch.scale.values)])
    mids = (svals[:-1] + svals[1:]) / 2
    hits = 0
    for _ in range(20):
        x = builders.build_tensor(rng, sch, "scale_tie", block_rows=2, block_cols=2, spread=4)
        ts = chain.tensor_scale(x, sch)
        vec_max = np.max(np.abs(x.reshape(2, 2, 16)), axis=-1)
        hits += np.isin(chain.block_scale_value(vec_max, sch, ts), mids).sum()
    assert hits >= 10


@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4", "nvfp4_2d", "hif4", "nvint4"])
def test_tensors_honour_the_global_amax_and_shape(spec):
    sch = resolve_scheme(spec)
    rng = np.random.default_rng(4)
    for kind in builders.kinds_for(sch, builders.FINITE_KINDS):
        g = builders.global_amax(rng, sch)
        x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=3, amax=g, spread=8)
        assert x.dtype == np.float32 and x.shape == (2 * sch.tile_rows, 3 * sch.block_size)
        assert np.all(np.isfinite(x))
        if kind != "zero":
            assert np.max(np.abs(x)) == g


@pytest.mark.parametrize("spec", ["mxfp4", "mxfp6_e2m3", "mxfp8_e5m2", "mxfp4:scale_rule=ceil",
                                  "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even", "mxfp4:profile=torchao"])
@pytest.mark.parametrize("rounding", fp4spec.ROUNDING_MODES)
def test_representable_tensors_quantize_to_themselves(spec, rounding):
    sch = resolve_scheme(spec)
    rng = np.random.default_rng(5)
    for _ in range(3):
        x, codes, scales = builders.representable_tensor(rng, sch, 3, 2)
        rb = fp4spec.draw_rbits(x.shape, seed=0) if rounding == "sr" else None
        q = fp4spec.quantize(x, sch, rounding=rounding, rbits=rb)
        assert np.array_equal(q.scales, scales) and np.array_equal(q.codes, codes)


def test_element_sweeps():
    fmt = fp4spec.get_format("e2m1")
    s = builders.element_sweep(fmt)
    assert s.dtype == np.float32 and np.all(np.diff(s) >= 0)
    assert np.isin(fmt.values, s).all()
    zeros = s[s == 0]
    assert set(np.signbit(zeros)) == {True, False}
    assert np.isinf(s).sum() == 2
    t = builders.element_tie_values(fmt)
    assert {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0} <= set(np.abs(t).tolist())


@settings(max_examples=15, deadline=None)
@given(fst.cases("nvfp4_2d", "sr"))
def test_strategies_are_reusable_in_given(case):
    assert case.x.dtype == np.float32 and case.x.shape[0] % 16 == 0 and case.x.shape[1] % 16 == 0
    assert case.rbits.shape == case.x.shape and case.rbits.max() < 256
    fp4spec.quantize(case.x, "nvfp4_2d", rounding="sr", rbits=case.rbits)


@settings(max_examples=10, deadline=None)
@given(fst.tie_tensors("mxfp4"), fst.element_ties("e2m1"))
def test_tie_strategies(x, v):
    assert x.shape[1] % 32 == 0 and np.isfinite(x).all()
    assert fp4spec.encode(np.float32(v), "e2m1") in range(16)
