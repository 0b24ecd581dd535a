"""fouroversix 1.0.5 under its own profile: the verdicts of docs/divergences.md, from its real reference.

The backends (tests/conformance/fouroversix_backends.py) call fouroversix's PyTorch
``quantize_to_fp4`` on every input conform draws, with no fallback to fp4spec. Skipped, with
the reason, where fouroversix is not installed (CI installs it: .ci/run).
"""

import pytest

from tests.conformance import fouroversix_backends as F

_reason = F.unavailable_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)

from fp4spec.conformance import run  # noqa: E402

FOUROVERSIX_BUG = "known fouroversix bug"


def causes(report):
    return [cause for cause, _ in report.findings()]


@pytest.mark.parametrize("backend", [F.FouroversixIf4, F.FouroversixIf4Mae, F.FouroversixIf4AbsMax],
                         ids=lambda b: b.__name__)
def test_fouroversix_if4_departs_only_by_its_named_bugs(backend):
    """IF4 under profile 'fouroversix': every departing row matches fouroversix's modelled departures
    (tiny tensors, |y| >= 7 under subnormal scales); the selection near-ties and every other
    property agree bit for bit."""
    report = run(backend)
    assert not report.ok
    assert all(c.startswith(f"matches: {FOUROVERSIX_BUG}") for c in causes(report)), causes(report)
    passed = {r.property for r in report.results if r.status == "PASS"}
    assert {"selection", "monotonic"} <= passed


@pytest.mark.parametrize("backend", F.TWO_LEVEL_AND_MX, ids=lambda b: b.__name__)
def test_fouroversix_nvfp4_nvint4_mxfp4_depart_only_by_their_named_bugs(backend):
    """NVFP4 (static_6, static_4, mse, mae, abs_max), NVINT4 and MXFP4 under profile 'fouroversix': the
    profile's policies hold everywhere else; 4over6 near-ties choose as the profile says (torch's order)."""
    report = run(backend)
    assert all(c.startswith(f"matches: {FOUROVERSIX_BUG}") for c in causes(report)), causes(report)
    passed = {r.property for r in report.results if r.status == "PASS"}
    assert "monotonic" in passed
    if "4over6" in backend().scheme:
        assert "selection" in passed
