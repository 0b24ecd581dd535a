"""IF4 on the torch backend (:mod:`fp4spec.backends.torch_if4`) equals the numpy emulator bit
for bit: every UE4M3 block scale with elements on the E2M1 and INT4 midpoints, every
adversarial kind, selection near-ties, hypothesis tensors; every scale rule and rounding mode;
dequantize; non-finite input refused as the emulator refuses it. On CUDA when present (the
divisions are true divisions there too), else the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

torch = pytest.importorskip("torch")

import fp4spec  # noqa: E402
from fp4spec.conformance import builders, selection  # noqa: E402


RULES = ("mse", "mae", "abs_max")
ROUNDINGS = ("rne", "rna", "rtz", "rup", "rdn", "rto", "sr")

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _same(x, rule, rounding="rne", seed=0, scheme="if4"):
    sch = fp4spec.get_scheme(scheme, scale_rule=rule)
    rb = np.random.default_rng(seed).integers(0, 256, x.shape) if rounding == "sr" else None
    ref = fp4spec.quantize(x, sch, rounding=rounding, rbits=rb)
    q = fp4spec.quantize(torch.from_numpy(np.ascontiguousarray(x)).to(DEV), sch, rounding=rounding,
                         rbits=None if rb is None else torch.from_numpy(rb).to(DEV), backend="torch")
    assert q.equals(ref), (np.argwhere(q.to_numpy().codes != ref.codes)[:3], np.argwhere(q.to_numpy().scales != ref.scales)[:3])
    v, vr = fp4spec.dequantize(q).cpu().numpy(), fp4spec.dequantize(ref)
    assert np.array_equal(v.view(np.uint32), vr.view(np.uint32))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_every_scale_code(rule, rounding):
    _same(builders.if4_every_scale_code(np.random.default_rng(5)), rule, rounding)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ("rne", "rtz", "sr"))
def test_adversarial_kinds(rule, rounding):
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    rng = np.random.default_rng(6)
    for kind in builders.kinds_for(sch):
        g = builders.global_amax(rng, sch, int(rng.integers(-3, 9)))
        x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=3, amax=g, spread=20)
        _same(x, rule, rounding, seed=int(rng.integers(1 << 30)))


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_selection_near_ties(rule):
    rng = np.random.default_rng(7)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    for _ in range(2):
        _same(selection.near_tie_tensor(rng, sch), rule)


def test_zero_tensor_and_axis():
    _same(np.zeros((2, 32), np.float32), "mse")
    x = np.random.default_rng(1).standard_normal((48, 8)).astype(np.float32)
    q = fp4spec.quantize(torch.from_numpy(x).to(DEV), "if4", axis=0, backend="torch")
    assert q.equals(fp4spec.quantize(x, "if4", axis=0))


@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.sampled_from([16, 32, 48])),
                    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)),
       rule=st.sampled_from(RULES), rounding=st.sampled_from(ROUNDINGS))
def test_hypothesis(x, rule, rounding):
    _same(x, rule, rounding)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_is_refused(bad):
    x = np.ones((1, 32), np.float32)
    x[0, 5] = bad
    with pytest.raises(ValueError, match=r"IF4 is defined for finite input; x\[0, 5\]"):
        fp4spec.quantize(torch.from_numpy(x).to(DEV), "if4", backend="torch")


# -- 16 x 16 tiles (if4_2d) ------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("rounding", ("rne", "rtz", "sr"))
def test_2d_every_scale_code(rule, rounding):
    _same(builders.if4_every_scale_code(np.random.default_rng(5), tile_rows=16), rule, rounding, scheme="if4_2d")


@pytest.mark.parametrize("rule", RULES)
def test_2d_adversarial_kinds_and_near_ties(rule):
    sch = fp4spec.get_scheme("if4_2d", scale_rule=rule)
    rng = np.random.default_rng(6)
    for kind in builders.kinds_for(sch):
        x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=2, spread=20)
        _same(x, rule, "sr" if kind == "ties" else "rne", seed=int(rng.integers(1 << 30)), scheme="if4_2d")
    if rule != "abs_max":
        _same(selection.near_tie_tensor(rng, sch, rows=1, cols=3), rule, scheme="if4_2d")


@settings(max_examples=20, deadline=None)
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 2), st.sampled_from([16, 32]), st.sampled_from([16, 48])),
                    elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=True)),
       rule=st.sampled_from(RULES), rounding=st.sampled_from(ROUNDINGS))
def test_2d_hypothesis(x, rule, rounding):
    _same(x, rule, rounding, scheme="if4_2d")
