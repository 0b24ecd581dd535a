"""Every planted defect is rejected by a default run (default max_examples and seed).

Runs are restricted to the schemes and rounding modes a defect affects, to keep this file
fast. Each (property, scheme, rounding) row gets its seed from the run seed and its own
names, so these rows are exactly the rows of a full default ``fp4spec conform`` run
(test_conform_numpy checks that subsets do not change rows).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fp4spec
from fp4spec.conformance import run
from tests.conformance import defects as D

ROOT = Path(__file__).resolve().parents[2]

# defect, schemes, roundings (None: all claimed), properties that must report it
CASES = [
    (D.TiesAway, ["mxfp4", "nvfp4"], ["rne"], {"ties_to_even", "reference"}),
    (D.MxCeilRule, ["mxfp4", "mxfp8_e4m3"], ["rne", "sr"], {"scale_rule", "reference", "decode_encode"}),
    (D.SrIgnoresBits, ["mxfp4", "nvfp4"], ["sr"], {"stochastic", "reference"}),
    (D.SwappedNibbles, ["mxfp4"], ["rne"], {"packing"}),
    (D.DivideNotReciprocal, ["nvfp4"], ["rne"], {"ties_to_even", "reference"}),
    (D.WrongGlobalScale, ["nvfp4"], ["rne"], {"scale_rule", "reference"}),
    (D.E8M0ZeroBlockNaN, ["mxfp4"], ["rne"], {"special_values", "reference"}),
    (D.FlushNegativeZero, ["mxfp4"], ["rne", "rtz"], {"special_values", "decode_encode", "reference"}),
    # not listed in the issue: bugs from the catalogue
    (D.FloatLog2Scale, ["mxfp4"], ["rne"], {"scale_rule"}),
    (D.StalePadding, ["mxfp4"], ["rne"], {"scale_layout"}),
    (D.ByteZeroDequantizesToZero, ["mxfp4"], ["rne"], {"decode_encode"}),
    (D.SrStrictCompare, ["mxfp4", "nvfp4"], ["sr"], {"stochastic"}),
    (D.Bf16Input, ["nvfp4"], ["rne"], {"reference", "scale_rule"}),
    (D.ScaleCastTruncates, ["nvfp4"], ["rne"], {"scale_rule", "reference"}),
    # the RHT (fp4spec.rht, arith="fwht-fp32"): quantize(x, rht=) departs
    (D.RhtStagesReversed, ["nvfp4", "mxfp4"], ["rne", "sr"], {"rht"}),
    (D.RhtFloat64Sums, ["nvfp4", "mxfp4"], ["rne"], {"rht"}),
    (D.RhtAmaxBeforeTransform, ["nvfp4"], ["rne", "sr"], {"rht"}),
    (D.RhtWrongAxis, ["nvfp4", "mxfp4"], ["rne"], {"rht"}),
    # one per mistake fp4spec.conformance.diagnose names (test_conform_diagnose checks the names)
    (D.MxRceilForFloor, ["mxfp4"], ["rne"], {"scale_rule", "reference"}),
    (D.MxEvenForFloor, ["mxfp4"], ["rne"], {"scale_rule", "reference"}),
    (D.MxFloorForRceil, ["mxfp4:scale_rule=rceil"], ["rne"], {"scale_rule", "reference"}),
    (D.TorchaoChainForTe, ["nvfp4"], ["rne"], {"reference"}),
    (D.E4M3ScaleFloor, ["nvfp4"], ["rne"], {"saturation"}),
    (D.NanOnlyBlocks, ["mxfp4"], ["rne"], {"special_values"}),
    (D.PlainScaleLayout, ["mxfp4"], ["rne"], {"scale_layout"}),
    # IF4: one per rule of the scheme
    (D.If4TiesTakeInt, ["if4"], ["rne"], {"reference"}),
    (D.If4IntDivides, ["if4"], ["rne"], {"ties_to_even"}),
    (D.If4ErrorsInElementOrder, ["if4", "if4:scale_rule=mae"], ["rne"], {"selection"}),
    (D.If4FlagInverted, ["if4"], ["rne"], {"reference", "monotonic", "sign_symmetry"}),
    # 4over6: the candidates' errors computed another way
    (D.FourOverSixDecodeScaleError, ["nvfp4:scale_rule=4over6", "nvfp4:scale_rule=4over6,error_mode=mse"], ["rne"],
     {"selection"}),
    (D.FourOverSixTorchOrder, ["nvfp4:scale_rule=4over6", "nvfp4:scale_rule=4over6,error_mode=mse"], ["rne"],
     {"selection"}),
]


@pytest.mark.parametrize("defect, schemes, rounding, caught_by", CASES, ids=[c[0].__name__ for c in CASES])
def test_default_run_rejects_planted_defect(defect, schemes, rounding, caught_by):
    report = run(defect, schemes=schemes, rounding=rounding)
    assert not report.ok and report.exit_code() == 1
    departing = {r.property for r in report.departures}
    assert caught_by <= departing, f"{defect.__name__}: caught by {departing}, expected {caught_by}"
    assert all(r.status == "FAIL" for r in report.departures)  # departures, not suite errors
    for r in report.departures:
        assert r.counterexample is not None and r.counterexample.what


def test_listed_defects_are_all_covered():
    assert {c[0] for c in CASES} >= set(D.LISTED) | set(D.UNLISTED) | set(D.RHT_DEFECTS) | set(D.IF4_DEFECTS)
    assert {c[0] for c in CASES} >= {d[0] for d in D.DIAGNOSED}


@pytest.mark.parametrize("defect", D.RHT_DEFECTS, ids=lambda d: d.__name__)
def test_rht_defects_break_only_the_rht(defect):
    """Without rht= each RHT defect is the numpy backend: only the rht property departs."""
    report = run(defect, schemes=["nvfp4", "mxfp4"], rounding=["rne", "sr"], max_examples=2)
    assert {r.property for r in report.departures} == {"rht"}
    row = next(r for r in report.departures if r.scheme == "nvfp4" and r.rounding == "rne")
    cx = row.counterexample
    assert cx.what.startswith("rht 16/") and cx.context["rht"].startswith("16/") and cx.tensor is not None
    assert any("after the RHT" in n for n in cx.notes)
    diagnosis = {D.RhtFloat64Sums: "summed in float64", D.RhtAmaxBeforeTransform: "amax must be taken after",
                 D.RhtWrongAxis: "ran down the columns"}
    if defect in diagnosis:
        assert any(diagnosis[defect] in n for n in cx.notes), cx.notes


def test_cli_subprocess_reports_ties_away(tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "fp4spec.conformance.command", "--backend", "tests.conformance.defects:TiesAway",
         "--scheme", "mxfp4", "nvfp4", "--rounding", "rne", "--report", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    table = proc.stdout
    assert re.search(r"ties_to_even +mxfp4 +rne +FAIL", table) and "exactly the midpoint (a tie)" in table
    assert " PASS " not in table  # passing rows only with --all
    assert "expected 0x" in table and "got 0x" in table
    assert "matches:  ties away from zero (ties to even expected)" in table
    assert "1. matches: ties away from zero (ties to even expected)" in table  # one finding for four rows
    assert re.search(r"\[10/\d+\] checks: mxfp4: 6 passed, 2 failed, 2 skipped", proc.stderr)  # a line per scheme
    data = json.loads(out.read_text())
    assert data["conforms"] is False and data["backend"] == "ties-away"
    assert data["findings"][0]["cause"] == "matches: ties away from zero (ties to even expected)"
    # replay the counterexample from the report's float32 bits
    row = next(r for r in data["results"] if r["property"] == "ties_to_even" and r["scheme"] == "nvfp4")
    cx = row["counterexample"]
    bits = np.array([int(b, 16) for b in cx["tensor"]["float32_bits"]], np.uint32)
    x = bits.view(np.float32).reshape(cx["tensor"]["shape"])
    r, c = cx["where"]["row"], cx["where"]["column"]
    assert fp4spec.quantize(x, "nvfp4").codes[r, c] != D.TiesAway().quantize(x, fp4spec.get_scheme("nvfp4")).codes[r, c]


def test_fp4spec_conform_cli_once_wired(tmp_path):
    from fp4spec import cli

    parser = cli.build_parser()
    sub = next((a for a in parser._actions if a.dest == "command"), None)
    if sub is None or "conform" not in getattr(sub, "choices", {}):
        pytest.skip("fp4spec.cli does not have the 'conform' command yet")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "fp4spec", "conform", "--backend",
                           "tests.conformance.defects:TiesAway", "--scheme", "mxfp4", "--rounding", "rne", "--no-progress"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "ties_to_even" in proc.stdout
