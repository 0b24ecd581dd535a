"""The suite passes the reference backend -- every property, scheme, rounding -- and its runs are reproducible."""

import numpy as np
import pytest

from fp4spec.backends import Availability, BackendError, Capabilities, NumpyBackend
from fp4spec.conformance import PROPERTIES, run
from fp4spec.conformance.runner import BackendUnavailable


def _failures(report):
    return "\n".join(f"{r.property}/{r.scheme}/{r.rounding}: " + (r.counterexample.what if r.counterexample
                                                                   else r.reason) for r in report.departures)


def test_numpy_conforms_on_everything_it_claims():
    report = run("numpy", max_examples=2)
    assert report.ok, _failures(report)
    caps = NumpyBackend().capabilities()
    quantize = [r for r in report.results if not r.property.startswith("matmul")]
    assert {r.scheme for r in quantize} == set(caps.schemes) | {"*"}
    assert {r.property for r in quantize} == set(PROPERTIES)
    # the GEMM rows (tests/conformance/test_conform_matmul.py): every claimed accumulator model
    assert {r.rounding for r in report.results if r.property.startswith("matmul/")} == \
        {f"acc={a}" for a in caps.accumulators}
    skipped = [(r.property, r.scheme) for r in report.results if r.status == "SKIP"]
    assert {s for s in skipped if s[0] != "selection"} == {("ties_to_even", "hif4"), ("rht", "hif4"), ("rht", "if4"),
                                                            ("sr_statistics", "if4"), ("rht", "if4_2d"),
                                                            ("sr_statistics", "if4_2d"),
                                                            ("matmul/scale_sign_bit", "*")}  # sm100-mxf8f6f4: E8M0 only
    assert {s for p, s in skipped if p == "selection"} == set(caps.schemes) - {"if4", "if4_2d"}  # IF4 chooses candidates
    rht_rows = [r for r in quantize if r.property == "rht" and r.status == "PASS"]
    assert {r.rounding for r in rht_rows} == {"rne", "sr"} and {"nvfp4", "mxfp4"} <= {r.scheme for r in rht_rows}


@pytest.mark.parametrize("spec", [
    "mxfp4:scale_rule=ceil", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even", "mxfp4:profile=torchao",
    "mxfp8_e4m3:scale_rule=rceil", "nvfp4:profile=torchao", "nvfp4:scale_rule=4over6",
    "nvfp4_2d:scale_rule=4over6,error_mode=mse", "ufp4:block_shape=32", "if4:scale_rule=mae",
    "if4:scale_rule=abs_max",
])
def test_numpy_conforms_on_scheme_variants(spec):
    report = run("numpy", schemes=[spec], rounding=["rne", "rtz", "sr"], max_examples=2)
    assert report.ok, _failures(report)


def test_same_seed_same_report_and_subsets_do_not_change_rows():
    from tests.conformance.defects import TiesAway

    def rows(rep):
        return {(r.property, r.scheme, r.rounding): (r.status, r.examples,
                                                     r.counterexample and r.counterexample.to_dict())
                for r in rep.results}

    a = rows(run(TiesAway, schemes=["mxfp4", "nvfp4"], rounding=["rne"], max_examples=5, seed=7))
    b = rows(run(TiesAway, schemes=["mxfp4", "nvfp4"], rounding=["rne"], max_examples=5, seed=7))
    c = rows(run(TiesAway, schemes=["nvfp4"], rounding=["rne"], properties=["ties_to_even"], max_examples=5, seed=7))
    assert a == b
    key = ("ties_to_even", "nvfp4", "rne")
    assert c[key] == a[key] and a[key][0] == "FAIL"


def test_usage_errors():
    with pytest.raises(BackendError, match="'hif4:scale_rule=x'|scale_rule"):
        run("numpy", schemes=["hif4:scale_rule=x"])
    with pytest.raises(BackendError, match="rounding: 'nearest' is not one of"):
        run("numpy", rounding=["nearest"])
    with pytest.raises(BackendError, match="property: 'speed'"):
        run("numpy", properties=["speed"])
    with pytest.raises(BackendError, match="max_examples"):
        run("numpy", max_examples=-1)


class OnlyNvfp4(NumpyBackend):
    name = "only-nvfp4"

    def capabilities(self):
        return Capabilities(schemes=("nvfp4",), rounding=("rne",))


def test_only_claims_are_checked():
    report = run(OnlyNvfp4, max_examples=1)
    assert report.ok
    assert {r.scheme for r in report.results} == {"nvfp4", "*"}
    assert {r.status for r in report.results if r.scheme == "*"} == {"SKIP"}  # pack, to_blocked not claimed
    with pytest.raises(BackendError, match="not claimed by backend 'only-nvfp4'; it claims nvfp4"):
        run(OnlyNvfp4, schemes=["mxfp4"])
    with pytest.raises(BackendError, match="rounding: 'sr' is not claimed"):
        run(OnlyNvfp4, rounding=["sr"])


class Unavailable(NumpyBackend):
    name = "needs-a-gpu"

    def is_available(self):
        return Availability.no("no CUDA device")


def test_unavailable_backend_is_a_usage_error():
    with pytest.raises(BackendUnavailable, match="needs-a-gpu.*no CUDA device"):
        run(Unavailable)


class Crashes(NumpyBackend):
    name = "crashes"

    def quantize(self, x, scheme, **kw):
        if scheme.name == "nvfp4" and not np.isfinite(x).all():
            raise RuntimeError("kernel does not handle NaN")
        return super().quantize(x, scheme, **kw)


def test_a_backend_exception_is_a_departure_with_its_input():
    report = run(Crashes, schemes=["nvfp4"], rounding=["rne"], properties=["special_values"], max_examples=2)
    (row,) = report.results[:1]
    assert row.status == "FAIL" and row.counterexample.field == "exception"
    assert "RuntimeError: kernel does not handle NaN" in row.counterexample.what
    assert row.counterexample.tensor["float32_bits"]
