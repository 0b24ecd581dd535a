"""The built wheel holds every package of the source tree (a normal install, not editable).

A folder with an ``__init__.py`` anywhere in the source tree (outside tests/, benchmarks/,
docs/) is a package and must be in the wheel: ``fp4spec/x`` as ``fp4spec/x``, any other
top-level ``folder/x`` as ``fp4spec/folder/x``. Written from the layout, not from setup.py.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_SOURCE = {"tests", "benchmarks", "docs", "build", "dist", "site", "node_modules"}


def source_packages() -> dict[str, Path]:
    """Wheel path -> source folder, for every package folder of the source tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = Path(dirpath).relative_to(ROOT)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__")) and not d.endswith(".egg-info")
                       and not (rel == Path(".") and d in NOT_SOURCE)]
        if "__init__.py" in filenames and rel != Path("."):
            parts = rel.parts if rel.parts[0] == "fp4spec" else ("fp4spec", *rel.parts)
            out["/".join(parts)] = Path(dirpath)
    return out


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory):
    # From a clean copy: setuptools would pick up stale files of an earlier build/ folder.
    src = tmp_path_factory.mktemp("src") / "fp4spec"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".*", "build", "dist", "site", "*.egg-info",
                                                             "__pycache__", "tests", "benchmarks"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    (whl,) = out.glob("fp4spec-*.whl")
    with zipfile.ZipFile(whl) as z:
        return set(z.namelist())


@pytest.mark.slow
def test_every_source_package_is_in_the_wheel(wheel_files):
    pkgs = source_packages()
    assert {"fp4spec", "fp4spec/emulator", "fp4spec/backends", "fp4spec/conformance", "fp4spec/analysis"} <= set(pkgs)
    missing = [p for p in sorted(pkgs) if f"{p}/__init__.py" not in wheel_files]
    assert not missing, f"packages missing from the wheel (setup.py's discovery): {missing}"


@pytest.mark.slow
def test_every_module_is_in_the_wheel(wheel_files):
    for pkg, folder in source_packages().items():
        for module in folder.glob("*.py"):
            assert f"{pkg}/{module.name}" in wheel_files, f"{pkg}/{module.name} is not in the wheel"
