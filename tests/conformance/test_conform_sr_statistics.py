"""SR checked by its statistics, for backends that draw their own random numbers (sr_source="own").

A correct backend of that kind conforms; each planted defect -- all-zero SR (TransformerEngine
#3281), a biased draw, a frozen generator, a coin flip -- is caught by ``sr_statistics`` with a
counterexample that says what is wrong. Backends with ``sr_source="own"`` skip the rows that
replay rbits. The 16/17 headroom keeps SR from clipping.
"""

import numpy as np
import pytest

import fp4spec
from fp4spec.backends import Capabilities
from fp4spec.backends.base import BackendError
from fp4spec.conformance import run
from tests.conformance import defects as D

SCHEMES = ["mxfp4", "nvfp4", "nvint4", "ufp4", "mxfp8_e4m3"]


def test_own_sr_backend_conforms_and_skips_replaying_rows():
    report = run(D.OwnSr, schemes=SCHEMES, rounding=["sr"])
    assert report.ok
    sr_rows = [r for r in report.results if r.rounding == "sr"]
    assert {r.property for r in sr_rows if r.status == "PASS"} == {"sr_statistics"}
    skipped = [r for r in sr_rows if r.status == "SKIP" and r.property == "reference"]
    assert skipped and "sr_source='own'" in skipped[0].reason


@pytest.mark.parametrize("defect, words", [
    (D.OwnSrAllZero, "came out all zero"),
    (D.OwnSrBiased, "the rounding is biased"),
    (D.OwnSrFrozen, "does not take fresh random numbers"),
    (D.OwnSrCoinFlip, "the rounding is biased"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_own_sr_defects_are_caught_and_said(defect, words):
    report = run(defect, schemes=["mxfp4", "nvfp4"], rounding=["sr"])
    assert not report.ok
    rows = [r for r in report.departures if r.property == "sr_statistics"]
    assert {r.scheme for r in rows} == {"mxfp4", "nvfp4"}
    assert all(words in r.counterexample.what for r in rows), [r.counterexample.what for r in rows]


def test_explicit_rbits_backends_pass_sr_statistics_too():
    report = run("numpy", schemes=["nvfp4", "mxfp4"], rounding=["sr"], properties=["sr_statistics"])
    assert report.ok and all(r.status == "PASS" for r in report.results if r.property == "sr_statistics")


def test_candidate_schemes_skip_sr_statistics():
    report = run("numpy", schemes=["if4", "nvfp4:scale_rule=4over6"], rounding=["sr"], properties=["sr_statistics"])
    assert all(r.status == "SKIP" for r in report.results)


def test_sr_source_is_validated():
    with pytest.raises(BackendError, match="sr_source: 'device' is not one of 'rbits', 'own'"):
        Capabilities(schemes=["mxfp4"], sr_source="device")


# -- the 16/17 headroom -----------------------------------------------------------------------------

def test_sr_headroom_keeps_sr_from_clipping():
    """Blocks with normal UE4M3 scales: under element_max = fp32(6 * 16/17) no scaled value passes 6,
    so SR never saturates; under element_max = 6 the E4M3 rounding pushes some past 6."""
    from fp4spec.conformance import chain

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((512, 64)) * np.exp2(rng.integers(-2, 3, (512, 64)))).astype(np.float32)
    plain = fp4spec.get_scheme("nvfp4")
    room = fp4spec.get_scheme("nvfp4", sr_headroom="16/17")
    assert room.element_max == float(np.float32(96 / 17))
    ys = {}
    for s in (plain, room):
        q = fp4spec.quantize(x, s)
        y = np.asarray(x, np.float32) * np.repeat(chain.multipliers(q.scales, s, chain.tensor_scale(x, s)), 16, axis=-1)
        ys[s.element_max] = np.abs(y.astype(np.float32))
    assert ys[room.element_max].max() <= 6.0 and ys[None].max() > 6.0


def test_sr_headroom_spec_and_errors():
    assert fp4spec.get_scheme("nvfp4:sr_headroom=16/17") == fp4spec.get_scheme("nvfp4", sr_headroom="16/17")
    with pytest.raises(ValueError, match="sr_headroom: '1/2' is not one of '16/17'"):
        fp4spec.get_scheme("nvfp4", sr_headroom="1/2")
    with pytest.raises(ValueError, match="sr_headroom, element_max: pass one of them"):
        fp4spec.get_scheme("nvfp4", sr_headroom="16/17", element_max=5.0)
    with pytest.raises(ValueError, match="only two-level schemes"):
        fp4spec.get_scheme("mxfp4", sr_headroom="16/17")
