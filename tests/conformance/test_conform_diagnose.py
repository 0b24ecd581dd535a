"""conform names the mistake: one planted defect per named mistake, diagnosed by name in a default run.

The mistakes are those issue 17 lists: division vs multiplication by the reciprocal, every MX
scale rule, ties away vs to even, the TE vs torchao NVFP4 scale chain, the E4M3 scale floor,
the RHT on the wrong axis, low/high nibbles swapped, scales not in the cuBLAS layout, the
NaN-block policy of another profile (and a float log2 scale, float64 RHT sums).
"""

import json

import numpy as np
import pytest

from fp4spec.conformance import diagnose, run
from fp4spec.conformance.report import render_json, render_markdown, render_text
from tests.conformance import defects as D


@pytest.mark.parametrize("defect, schemes, rounding, words", D.DIAGNOSED, ids=[d[0].__name__ for d in D.DIAGNOSED])
def test_conform_names_the_mistake(defect, schemes, rounding, words):
    report = run(defect, schemes=schemes, rounding=rounding)
    assert not report.ok
    causes = [cause for cause, _ in report.findings()]
    assert any(cause.startswith("matches: ") and words in cause for cause in causes), causes
    text = render_text(report)
    assert "matches:  " in text and words in text  # the one-line diagnosis under the counterexample
    md = render_markdown(report)
    assert "## Findings" in md and words in md
    data = json.loads(render_json(report))
    assert any(words in (r["counterexample"] or {}).get("matches", "") for r in data["results"])
    assert any(words in f["cause"] for f in data["findings"])


def test_one_cause_failing_several_properties_is_one_finding():
    report = run(D.MxCeilRule, schemes=["mxfp4"], rounding=["rne"])
    (cause, rows), *_ = report.findings()
    assert cause == "matches: ceil scale rule (floor expected)"
    assert len({r.property for r in rows}) >= 2  # scale_rule, reference, decode_encode ...
    assert "1 finding" in report.summary() or "findings" in report.summary()


def test_a_reference_row_shows_the_backends_scale_beside_the_expected_one():
    report = run(D.MxCeilRule, schemes=["mxfp4"], rounding=["rne"], properties=["reference"])
    (row,) = report.departures
    cx = row.counterexample
    if cx.field == "codes":
        assert "the block scale differs too: expected 0x" in cx.what and ", got 0x" in cx.what
        assert any(n.startswith("block scale: expected 0x") and "the scale is wrong" in n for n in cx.notes)
    else:
        assert cx.field == "scales" and "expected 0x" in cx.what and "got 0x" in cx.what


def test_no_diagnosis_where_the_backend_agrees_with_the_spec():
    """Random data does not tell many mistakes apart (no ties, no binade edges): a diagnosis is only
    made where the backend's answer on the replayed input differs from the spec's."""
    from fp4spec.backends import get_backend
    from fp4spec.backends.base import resolve_scheme
    from fp4spec.conformance.compare import tensor_record
    from fp4spec.conformance.env import Env, Target
    from fp4spec.conformance.report import Counterexample

    be = get_backend("numpy")
    env = Env(be, be, be.capabilities())
    t = Target(resolve_scheme("nvfp4"), "nvfp4", "rne")
    x = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
    assert "ties away from zero (ties to even expected)" in diagnose.matching(env, t, x, None, env.quantize(x, t))
    assert diagnose.explain(env, t, Counterexample("codes[0, 0]", tensor=tensor_record(x))) == ""


def test_every_named_mistake_has_a_planted_defect():
    named = {words for *_, words in D.DIAGNOSED}
    for words in ("division by the block scale", "ceil scale rule", "rceil scale rule", "even scale rule",
                  "floor scale rule", "ties away from zero", "NVFP4 scale chain", "E4M3 scale floor",
                  "the RHT applied along the wrong axis", "high nibble first", "row-major", "NaN-block policy"):
        assert any(words in n for n in named), words
