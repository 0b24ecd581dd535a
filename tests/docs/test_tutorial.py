"""The "Write your backend" tutorial runs: its two files conform, run as a reader runs them, and
the page includes exactly those files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = {"mxfp4_torch.py": "TorchMXFP4", "nvfp4_torch.py": "TorchNVFP4"}


def test_the_page_includes_the_tested_files():
    page = (ROOT / "docs" / "tutorial.md").read_text()
    for name in FILES:
        assert f'--8<-- "docs/tutorial/{name}"' in page
        assert f"fp4spec conform --backend docs/tutorial/{name}:{FILES[name]}" in page


@pytest.mark.parametrize("name", FILES)
def test_the_tutorial_backend_conforms(name):
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "fp4spec", "conform", "--backend",
                           f"docs/tutorial/{name}:{FILES[name]}", "--no-progress"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert ": CONFORMS -- " in proc.stdout
