
from fp4spec.analysis import report
from fp4spec.analysis.report import FIGURES, FRAGMENTS, check, run_analyze

from ._helpers import block_quantizer, quantize_api


def _assert_written(out):
    for name in FIGURES:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    for name in FRAGMENTS + ("report.md",):
        assert (out / name).read_text().strip()


def test_quick_report_with_callables(tmp_path, capsys):
    path = run_analyze([block_quantizer("e2m1"), block_quantizer("e1m2")], tmp_path, quick=True)
    assert path == tmp_path / "report.md"
    _assert_written(tmp_path)
    text = path.read_text()
    assert "| e2m1 | 4 | [7/2, 5] | -1/4 |" in text
    assert "![sqnr](sqnr.png)" in text
    assert "[" in capsys.readouterr().err  # progress bar on stderr


def test_quick_report_real_schemes(tmp_path):
    quantize_api()
    path = run_analyze(["nvfp4", "mxfp4", "ufp4", "nvint4", "hif4"], tmp_path, quick=True, progress=False)
    _assert_written(tmp_path)
    assert "| student_t3 | hif4 |" in path.read_text()


def test_check_detects_stale_copy(tmp_path):
    schemes = [block_quantizer("e1m2")]
    run_analyze(schemes, tmp_path, quick=True, progress=False)
    assert check(tmp_path, schemes=schemes, quick=True, progress=False) == []
    (tmp_path / "sqnr.md").write_text("stale\n")
    (tmp_path / "depth.png").unlink()
    problems = check(tmp_path, schemes=schemes, quick=True, progress=False)
    assert any("sqnr.md" in p for p in problems) and any("depth.png" in p for p in problems)


def test_cli_parser_wiring(tmp_path, monkeypatch):
    import argparse

    parser = argparse.ArgumentParser(prog="fp4spec")
    sub = parser.add_subparsers(dest="command")
    report.add_analyze_parser(sub)
    args = parser.parse_args(["analyze", "--scheme", "nvfp4", "ufp4", "--out", str(tmp_path), "--quick"])
    assert args.scheme == ["nvfp4", "ufp4"] and args.quick and args.out == str(tmp_path)
    old = parser.parse_args(["analyze", "--schemes", "nvfp4", "ufp4"])  # the deprecated spelling still works
    assert old.scheme == ["nvfp4", "ufp4"]
    seen = {}
    monkeypatch.setattr(report, "run_analyze", lambda *a, **k: seen.update(a=a, k=k) or tmp_path / "report.md")
    assert args.func(args) == 0
    assert seen["a"] == (["nvfp4", "ufp4"], str(tmp_path)) and seen["k"]["quick"] is True


def test_committed_docs_copy_is_current():
    """docs/assets/analysis must equal a fresh full run (regenerate with
    ``python -m fp4spec.analysis.report --out docs/assets/analysis``)."""
    from pathlib import Path

    import pytest

    quantize_api()
    committed = Path(__file__).resolve().parents[2] / "docs" / "assets" / "analysis"
    if not committed.is_dir():
        pytest.skip("no docs/assets/analysis in this checkout")
    assert check(committed, progress=False) == []


def test_analyze_without_matplotlib_fails_at_once_naming_the_extra(tmp_path, monkeypatch, capsys):
    """`fp4spec analyze` without matplotlib: one line naming the extra, exit 2, before any work."""
    import sys

    from fp4spec.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setattr(report, "compare", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert main(["analyze", "--quick", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fp4spec analyze: error: the analysis report draws its figures with matplotlib, which is not "
                   "installed; install it with: pip install 'fp4spec[analysis]'"]
    assert not (tmp_path / "a").exists()
    import pytest

    with pytest.raises(report.MissingExtra, match=r"fp4spec\[analysis\]"):
        run_analyze(out_dir=tmp_path / "b", quick=True, progress=False)
