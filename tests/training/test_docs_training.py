"""docs/training.md quotes the code: the presets table and the GEMM's normative steps."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fp4spec.training import linear  # noqa: E402
from fp4spec.training.recipe import presets_table  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def test_presets_table_is_the_codes():
    assert presets_table() in PAGE.read_text()


def test_normative_steps_are_the_modules():
    doc = inspect.getdoc(linear)
    steps = doc[doc.index("1. For each operand"):].strip().replace("``", "`")
    page = " ".join(PAGE.read_text().split())
    assert " ".join(steps.split()) in page
