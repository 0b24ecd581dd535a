"""torchao 0.18 under its own profile: the verdicts of docs/divergences.md, from the real quantizers.

The backends (tests/conformance/torchao_backends.py) call torchao's ``to_mx`` and
``nvfp4_quantize`` on every input conform draws, with no fallback to fp4spec.
"""

import numpy as np
import pytest

pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")

from fp4spec.block_schemes import get_scheme  # noqa: E402
from fp4spec.conformance import run  # noqa: E402
from fp4spec.api.block_scaling import quantize  # noqa: E402
from tests.conformance import torchao_backends as T  # noqa: E402

TORCHAO_RCEIL_BUG = "known torchao bug: its eager RCEIL takes ceil(torch.log2(amax / max)) in float32"
TORCHAO_ZERO_SCALE_BUG = "known torchao bug: nvfp4_quantize divides by a zero per-tensor scale"


def causes(report):
    return [cause for cause, _ in report.findings()]


@pytest.mark.parametrize("backend", [T.TorchaoMxFloor, T.TorchaoMxCeil, T.TorchaoMxEven],
                         ids=lambda b: b.__name__)
def test_torchao_mx_conforms_under_profile_torchao(backend):
    """FLOOR (and CEIL, EVEN) for every MX element format, Inf/NaN inputs included: the NaN
    elements' codes (bit-level casts, host NaN propagation) are don't-care under the profile's
    element_nan='unspecified', counted, never failures."""
    report = run(backend)
    assert report.ok, causes(report)
    special = [r for r in report.results if r.property == "special_values"]
    assert special and all(r.status == "PASS" for r in special)
    assert sum(r.dont_care for r in report.results) > 0  # NaN inputs were drawn, and left open


def test_torchao_rceil_departs_with_its_log2_bug_named():
    report = run(T.TorchaoMxRceil)
    assert not report.ok
    found = causes(report)
    assert any(TORCHAO_RCEIL_BUG in c for c in found), found
    assert all(r.property != "special_values" or r.counterexample.matches.startswith("known torchao bug")
               for r in report.departures)  # its NaN blocks (every element NaN) are modelled, not failures
    assert sum(r.dont_care for r in report.results) > 0


def test_torchao_mx_claimed_as_ocp_departs_on_the_two_to_minus_127_blocks():
    report = run(T.TorchaoMxClaimedOcp)
    assert not report.ok
    assert any("mx_element_scaling='torchao'" in c for c in causes(report)), causes(report)
    # the smallest case: [2^-125, 0 x 31] -- OCP scale 2^-127 gives 4 (0x6); torchao clamps the
    # float scale to 2^-126 before dividing and gives 2 (0x4)
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 2.0 ** -125
    q = T.TorchaoMxClaimedOcp().quantize(x, get_scheme("mxfp4"))
    assert int(q.scales[0, 0]) == 0 == int(quantize(x, "mxfp4").scales[0, 0])
    assert int(q.codes[0, 0]) == 0x4 and int(quantize(x, "mxfp4").codes[0, 0]) == 0x6
    assert int(quantize(x, "mxfp4", profile="torchao").codes[0, 0]) == 0x4


def test_torchao_nvfp4_claimed_as_te_departs_with_the_torchao_chain_named():
    report = run(T.TorchaoNvfp4ClaimedTe)
    assert not report.ok
    assert any("NVFP4 scale chain of profile 'torchao'" in c for c in causes(report)), causes(report)


def test_torchao_nvfp4_under_its_profile_departs_only_by_its_zero_scale_bug():
    report = run(T.TorchaoNvfp4)
    assert not report.ok
    assert causes(report) == [f"matches: {r.counterexample.matches}" for r in report.departures][:1]
    assert all(TORCHAO_ZERO_SCALE_BUG in c for c in causes(report)), causes(report)
    x = np.zeros((2, 32), np.float32)
    q = T.TorchaoNvfp4().quantize(x, get_scheme("nvfp4", profile="torchao"))
    assert (np.asarray(q.scales) == 0xFF).all()  # NaN with the sign bit: outside UE4M3


def test_torchao_inf_only_and_zero_blocks():
    """divergences.md: torchao gives 0xFD (floor) / 0xFE (rceil) for an Inf-only MXFP4 block and
    0x00 for an all-zero block, as the torchao profile does."""
    x = np.zeros((2, 32), np.float32)
    x[0, 3] = np.inf
    for backend, want in ((T.TorchaoMxFloor, 0xFD), (T.TorchaoMxRceil, 0xFE)):
        sch = get_scheme("mxfp4", profile="torchao", scale_rule=backend.rule)
        q = backend().quantize(x, sch)
        assert list(np.asarray(q.scales)[:, 0]) == [want, 0x00]
        assert list(quantize(x, sch).scales[:, 0]) == [want, 0x00]
