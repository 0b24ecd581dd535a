"""TritonConfig (every tunable of the triton backend, frozen) and the sub-package's layout: the
kernels import no host code, importing the package imports neither triton nor a kernel."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import subprocess
import sys

import pytest

from fp4spec.backends.triton.config import DEFAULT_CONFIG, TritonConfig, resolve_config

PKG = pathlib.Path(__file__).resolve().parents[2] / "backends" / "triton"


def test_frozen_and_read_only():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_CONFIG.rows_bf16_blocks = 256
    with pytest.raises(TypeError):
        DEFAULT_CONFIG.cols_fast[16] = (256, 4, 4)
    cfg = dataclasses.replace(DEFAULT_CONFIG, cols_fast={16: (256, 4, 4), 32: (128, 4, 2)})
    with pytest.raises(TypeError):
        cfg.cols_fast[32] = (1, 1, 1)
    assert cfg.cols_fast[16] == (256, 4, 4) and DEFAULT_CONFIG.cols_fast[16] == (128, 4, 4)


@pytest.mark.parametrize("field,value,match", [
    ("rows_bf16_blocks", 0, "rows_bf16_blocks: 0 is not a positive integer"),
    ("rows_mx", ("tb", 256, 8), "rows_mx: .* is not \\(variant 'rows' or 'rows_split'"),
    ("cols_variant", "cols3", "cols_variant: 'cols3' is not 'cols' or 'cols_tile'"),
    ("cols_fast", {16: (128, 4, 3), 32: (128, 4, 2)}, "cols_fast\\[16\\]: 3 blocks per program is not 1, 2 or 4"),
    ("cols_fast", {16: (128, 4, 4)}, "cols_fast: no entry for block size 32"),
    ("rht_bf16_cvt", 3, "rht_bf16_cvt: 3 is not None, 0, 1 or 2"),
    ("mma_rows", 48, "mma_rows: 48 is not a power of two >= 16"),
    ("amax_tile", (64, 256, 0), "amax_tile: 0 is not a positive integer"),
    ("dequant_warps", True, "dequant_warps: True is not a positive integer"),
])
def test_bad_values_name_the_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(DEFAULT_CONFIG, **{field: value})


def test_resolve():
    assert resolve_config(None) is DEFAULT_CONFIG
    cfg = TritonConfig(rows_bf16_warps=8)
    assert resolve_config(cfg) is cfg
    with pytest.raises(TypeError, match="config: expected a TritonConfig"):
        resolve_config({"rows_bf16_warps": 8})


def test_kernels_import_no_host_code():
    """kernels/*.py import triton and each other only (host code is one level up)."""
    for path in (PKG / "kernels").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1 or node.module is None, (path.name, node.module)
                assert node.level == 1 or node.module in ("__future__", "triton", "triton.language"), \
                    (path.name, node.module)
            elif isinstance(node, ast.Import):
                assert all(a.name in ("triton", "triton.language", "inspect") for a in node.names), path.name


def test_import_is_light():
    code = ("import sys, fp4spec.backends.triton as t, fp4spec.backends as b; "
            "assert b.TritonBackend is t.TritonBackend; "
            "print('triton' in sys.modules, any(m.startswith('fp4spec.backends.triton.kernels') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
