"""fp4spec's IF4 against fouroversix's own PyTorch reference (PyPI ``fouroversix`` 1.0.5), bit for bit.

fouroversix is installed without its CUDA extension (``SKIP_CUDA_BUILD=1``, see
tests/conformance/fouroversix_backends.py, which loads its reference quantizers without the
package ``__init__``); CI installs it in ``.ci/run``. Without it these tests skip and say why.

* Ordinary tensors: equal codes, scale bytes and decode scale, every scale rule.
* Adversarial tensors (every kind of the conformance builders, tensor amaxes anywhere in
  float32): fouroversix equals fp4spec with fouroversix's departures switched on
  (:func:`fp4spec.conformance.if4_mistakes.quantize` with ``fouroversix=True``) -- so every
  difference from the spec is one of the departures docs/divergences.md lists.
* Near-ties of the selection: equal (the error order is torch's CPU sum).
* The smallest inputs of each departure.
"""

import numpy as np
import pytest

from tests.conformance import fouroversix_backends as F

_reason = F.unavailable_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)
if F.version() != F.VERSION:
    pytest.skip(f"fouroversix {F.version()} is installed; these tests pin the reference of {F.VERSION}",
                allow_module_level=True)

import fp4spec  # noqa: E402
from fp4spec.conformance import builders, if4_mistakes, selection  # noqa: E402

F32 = np.float32
RULES = ("mse", "mae", "abs_max")


def _theirs(x, rule):
    codes, scales, amax = F.quantize(x, "if4", rule)
    return codes, scales, F.decode_scale(amax, 448.0, 6.0)


def _equal(x, rule, want) -> bool:
    codes, scales, g = _theirs(x, rule)
    return (np.array_equal(codes, np.asarray(want.codes)) and np.array_equal(scales, np.asarray(want.scales))
            and F32(g).view(np.uint32) == F32(want.global_scale).view(np.uint32))


@pytest.mark.parametrize("rule", RULES)
def test_ordinary_tensors_equal(rule):
    rng = np.random.default_rng(0)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    int_blocks = 0
    for _ in range(40):
        x = (rng.standard_normal((8, 64)) * np.exp2(rng.integers(-6, 6, (8, 64)))).astype(np.float32)
        x *= F32(2.0 ** int(rng.integers(-20, 20)))
        q = fp4spec.quantize(x, sch)
        assert _equal(x, rule, q)
        int_blocks += int((q.scales >= 0x80).sum())
    assert int_blocks > 100  # both branches exercised


@pytest.mark.parametrize("rule", RULES)
def test_adversarial_tensors_equal_the_spec_or_its_named_departures(rule):
    rng = np.random.default_rng(1)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    departing = 0
    for kind in builders.kinds_for(sch):
        for _ in range(12):
            x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=4, spread=40)
            model = if4_mistakes.quantize(x, sch, fouroversix=True)
            assert _equal(x, rule, model), kind
            departing += not _equal(x, rule, fp4spec.quantize(x, sch))
    assert departing > 0  # the departures are reached, and modelled


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_selection_near_ties_equal(rule):
    """Blocks one float32 step from flipping E2M1 <-> INT4: fouroversix adds the 16 error terms in
    the spec's order (torch's CPU sum)."""
    rng = np.random.default_rng(2)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    other_order = 0
    for _ in range(6):
        x = selection.near_tie_tensor(rng, sch)
        assert _equal(x, rule, fp4spec.quantize(x, sch))
        other_order += not _equal(x, rule, if4_mistakes.quantize(x, sch, element_order=True))
    assert other_order > 0  # the blocks tell the orders apart


def test_smallest_input_rounding_to_eight():
    """[2688, 0 x 15 | 0.01640625, 0 x 15]: the second block's scale 0.01640625 / 6 = 1.4 * 2^-9
    rounds down to 2^-9 (UE4M3 0x01), so its amax scales to 8.4. fp4spec saturates to 6 (0x7);
    fouroversix rounds to 8 and packs 8 as 0x8, which decodes as -0."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16] = 2688.0, 0.01640625
    codes, scales, _ = _theirs(x, "mse")
    q = fp4spec.quantize(x, "if4")
    assert list(scales[0]) == list(q.scales[0]) == [0x7E, 0x01]
    assert codes[0, 16] == 0x8 and q.codes[0, 16] == 0x7
    assert F.quantize(x, "nvfp4", "static_6")[0][0, 16] == 0x8  # its NVFP4 too


def test_smallest_input_tiny_tensor():
    """[1e-36, 0 x 15]: 2688 / 1e-36 overflows float32; fouroversix's scale is the saturated cast of
    +Inf (0x7E) and every code NaN's (0xB here); fp4spec clamps S_enc to FLT_MAX."""
    x = np.zeros((1, 16), np.float32)
    x[0, 0] = 1e-36
    codes, scales, g = _theirs(x, "mse")
    q = fp4spec.quantize(x, "if4")
    assert scales[0, 0] == 0x7E and g == 0
    assert set(codes[0]) <= {0x3, 0xB}
    assert q.codes[0, 0] == 0x7 and np.isfinite(fp4spec.dequantize(q)).all()
