"""``fp4spec conform --jobs N``: the same rows and verdicts as one process (the rows are seeded
from the run seed and themselves, not from their order), a planted defect departs the same
way, and the options that cannot combine with it say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFECTS = str(Path(__file__).with_name("defects.py"))


def _conform(tmp_path, name, *args):
    report = tmp_path / f"{name}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "fp4spec", "conform", "--no-progress", "--report", str(report), *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    rows = json.loads(report.read_text())["results"] if report.exists() else []
    return proc, sorted((r["property"], r["scheme"], r["rounding"], r["status"], r["examples"]) for r in rows)


def test_jobs_gives_the_rows_of_one_process(tmp_path):
    args = ["--backend", "numpy", "--scheme", "nvfp4", "mxfp4", "--max-examples", "1", "--matmul-max-examples", "1"]
    one, rows_one = _conform(tmp_path, "one", *args)
    two, rows_two = _conform(tmp_path, "two", *args, "--jobs", "2")
    assert one.returncode == two.returncode == 0, two.stderr
    assert rows_one and rows_two == rows_one


def test_jobs_rejects_a_planted_defect(tmp_path):
    args = ["--backend", f"{DEFECTS}:TiesAway", "--scheme", "mxfp4", "--max-examples", "1",
            "--matmul-max-examples", "0"]
    one, rows_one = _conform(tmp_path, "one", *args)
    two, rows_two = _conform(tmp_path, "two", *args, "--jobs", "2")
    assert one.returncode == two.returncode == 1
    assert rows_two == rows_one and any(r[3] == "FAIL" for r in rows_two)


@pytest.mark.parametrize("extra,words", [(["--jobs", "0"], "jobs: 0"), (["--jobs", "2", "--fail-fast"], "fail-fast")])
def test_bad_combinations(tmp_path, extra, words):
    proc, _ = _conform(tmp_path, "bad", "--backend", "numpy", "--scheme", "nvfp4", *extra)
    assert proc.returncode == 2 and words in proc.stderr
