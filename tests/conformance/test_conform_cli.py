"""``fp4spec conform`` (command.main): exit codes, the table, report files."""

import json

import pytest

from fp4spec.backends import Availability, NumpyBackend
from fp4spec.conformance.report import Counterexample, PropertyResult, Report, render_markdown, render_text
from fp4spec.conformance.command import main


def test_numpy_run_exits_0_and_prints_the_summary(capsys):
    assert main(["--backend", "numpy", "--scheme", "nvint4", "--rounding", "rne", "--max-examples", "1",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["scheme", "rows", "passed", "failed", "skipped", "s"]
    assert lines[2].split()[:5] == ["nvint4", "10", "9", "0", "1"]  # one line per scheme, no PASS rows
    assert "PASS" not in out and "rows not shown; --all shows every row" in out
    assert lines[-1].startswith("numpy: CONFORMS -- ") and " rows: " in lines[-1]


def test_all_lists_every_row(capsys):
    assert main(["--backend", "numpy", "--scheme", "nvint4", "--rounding", "rne", "--max-examples", "1",
                 "--no-progress", "--all", "--matmul-max-examples", "0"]) == 0
    out = capsys.readouterr().out
    assert "property        scheme  rounding  result  examples  first counterexample / note" in out
    assert "ties_to_even    nvint4  rne       PASS" in out


def test_departure_exits_1_and_writes_reports(tmp_path, capsys):
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    args = ["--backend", "tests.conformance.defects:E8M0ZeroBlockNaN", "--scheme", "mxfp4", "--rounding", "rne",
            "--property", "special_values", "--no-progress"]
    assert main(args + ["--report", str(md)]) == 1
    assert main(args + ["--report", str(js)]) == 1
    out = capsys.readouterr().out
    assert "E8M0 scale must be 0x00 (2^-127), got 0xFF" in out and "reproduce: fp4spec conform" in out
    assert "| special_values | mxfp4 | rne | FAIL |" in md.read_text()
    data = json.loads(js.read_text())
    assert data["counts"]["fail"] == 1 and data["results"][0]["counterexample"]["field"] == "scales"


class NeedsGpu(NumpyBackend):
    name = "needs-gpu"

    def is_available(self):
        return Availability.no("no CUDA device")


@pytest.mark.parametrize("argv, words", [
    (["--backend", "nope"], ["'nope'", "module:Name"]),
    (["--backend", "numpy", "--scheme", "mxfp9"], ["unknown scheme 'mxfp9'"]),
    (["--backend", "numpy", "--report", "out.txt"], [".json or .md"]),
    (["--backend", "numpy", "--max-examples", "-3"], ["negative"]),
    (["--backend", f"{__name__}:NeedsGpu"], ["'needs-gpu' is not available here: no CUDA device"]),
])
def test_usage_errors_exit_2(argv, words, capsys):
    assert main(argv + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err


def test_argparse_errors_and_help_exit_codes(capsys):
    assert main(["--backend", "numpy", "--rounding", "nearest"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0
    capsys.readouterr()


def test_list(capsys):
    assert main(["--backend", "numpy", "--list"]) == 0
    out = capsys.readouterr().out
    assert "nvfp4" in out and "ties_to_even" in out and "operations:" in out


def test_renderers_show_counterexample_details():
    cx = Counterexample("codes[0, 1]: x = 2.5, expected 0x4 (2), got 0x5 (3)", inputs=["1", "2.5"],
                        expected=["0x2", "0x4"], actual=["0x2", "0x5"], notes=["a tie"], context={"rounding": "rne"})
    rep = Report("demo", [PropertyResult("ties_to_even", "mxfp4", "rne", "FAIL", 3, counterexample=cx),
                          PropertyResult("packing", "*", "-", "SKIP", reason="operation 'pack' not claimed")])
    text = render_text(rep)
    assert "expected: 0x2 0x4" in text and "actual:   0x2 0x5" in text and "DEPARTS" in text
    assert "packing" not in text.split("Departures")[0] and "1 skipped" in text
    assert "operation 'pack' not claimed" in render_text(rep, skipped=True)
    md = render_markdown(rep)
    assert "### ties_to_even / mxfp4 / rne" in md and "| packing | * | - | SKIP |" in md
    assert rep.exit_code() == 1 and Report("ok", []).exit_code() == 0
