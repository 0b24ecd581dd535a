"""Make the repository root importable, so ``tests.conformance.defects`` names the planted-defect
backends here exactly as ``fp4spec conform --backend tests.conformance.defects:TiesAway`` does."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
