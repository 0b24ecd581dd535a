"""The pytest plugin: inert without its option, the whole suite with it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest(tmp_path, *args):
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_plugin_is_registered_and_inert_without_its_option(tmp_path):
    proc = _pytest(tmp_path, "--co")
    assert proc.returncode == 0 and "fp4spec_conform" not in proc.stdout and "test_plain" in proc.stdout
    helptext = _pytest(tmp_path, "--help").stdout
    assert "--fp4spec-backend" in helptext
    light = subprocess.run([sys.executable, "-c", "import sys, fp4spec.conformance.pytest_plugin; "
                            "print('hypothesis' in sys.modules, 'fp4spec.conformance.runner' in sys.modules)"],
                           capture_output=True, text=True)
    assert light.stdout.split() == ["False", "False"]


def test_plugin_runs_the_suite_and_reports_departures(tmp_path):
    proc = _pytest(tmp_path, "--fp4spec-backend", "tests.conformance.defects:TiesAway", "--fp4spec-scheme", "nvfp4",
                   "--fp4spec-rounding", "rne")
    assert proc.returncode == 1
    assert "FAILED ::fp4spec_conform[ties_to_even-nvfp4-rne]" in proc.stdout
    assert "exactly the midpoint (a tie)" in proc.stdout and "reproduce: fp4spec conform" in proc.stdout
    assert "PASSED test_plain.py::test_plain" in proc.stdout


def test_plugin_passes_numpy_and_rejects_bad_backends(tmp_path):
    proc = _pytest(tmp_path, "--fp4spec-backend", "numpy", "--fp4spec-scheme", "mxfp4:scale_rule=rceil",
                   "--fp4spec-rounding", "rne", "--fp4spec-max-examples", "1")
    assert proc.returncode == 0, proc.stdout[-2000:]
    # 9 properties (rht included) + packing + scale_layout + test_plain, and the GEMM rows the
    # numpy backend claims: 7 case families x 6 accumulator models (mxfp4 operands)
    assert "54 passed" in proc.stdout
    proc = _pytest(tmp_path, "--fp4spec-backend", "no.such:Thing")
    assert proc.returncode == 4 and "cannot import module 'no.such'" in proc.stderr


def test_plugin_gemm_rows_pass_for_numpy_and_catch_a_planted_gemm_defect(tmp_path):
    proc = _pytest(tmp_path, "--fp4spec-backend", "numpy", "--fp4spec-property", "matmul/truncation",
                   "--fp4spec-property", "matmul/random", "--fp4spec-accumulator", "sm100-mxf4nvf4",
                   "--fp4spec-matmul-max-examples", "2")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "PASSED ::fp4spec_conform[matmul.truncation-mxfp4,nvfp4,nvint4_e0m3-acc=sm100-mxf4nvf4]" in proc.stdout
    assert "3 passed" in proc.stdout  # two GEMM rows + test_plain, no quantize rows
    proc = _pytest(tmp_path, "--fp4spec-backend", "tests.conformance.defects:Truncate34Gemm",
                   "--fp4spec-property", "matmul/truncation", "--fp4spec-matmul-max-examples", "2")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "FAILED ::fp4spec_conform[matmul.truncation-" in proc.stdout
    assert "reproduce: fp4spec conform" in proc.stdout and "--accumulator" in proc.stdout


def test_plugin_gemm_rows_skip_with_zero_examples(tmp_path):
    proc = _pytest(tmp_path, "--fp4spec-backend", "numpy", "--fp4spec-property", "matmul/random",
                   "--fp4spec-accumulator", "exact", "--fp4spec-matmul-max-examples", "0")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 passed, 1 skipped" in proc.stdout
