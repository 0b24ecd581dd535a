"""Step M4 of the tensor-core RHT arithmetic (``arith="mma:<model>"``), vectorized.

:func:`fp4spec.rht.rht` defines step M4 (``x_row . T`` as the model's chained fused steps)
by the scalar reference :func:`fp4spec.rht.mma_dot_reference`. :func:`mma_dot` computes the
same bits over whole arrays with :func:`fp4spec.emulator.gemm.model_dot` and is installed
as step M4 when this module is imported (:func:`fp4spec.rht.install_mma_dot`; the emulator
package imports it, and ``import fp4spec`` imports the emulator). Tested equal to the
reference in ``tests/spec/test_rht_mma.py``.
"""

from __future__ import annotations

import numpy as np

from fp4spec.rht import install_mma_dot

from .gemm import model_dot

#: Rows of one :func:`model_dot` call (bounds the temporaries' memory).
CHUNK_ELEMENTS = 1 << 16


def mma_dot(rows: np.ndarray, t: np.ndarray, model) -> np.ndarray:
    """``rows . T`` (float32 rows of bf16 values, R x size) under ``model``, from a +0
    accumulator: :func:`model_dot` in chunks of rows (each row is independent)."""
    size = t.shape[0]
    out = np.empty(rows.shape, np.float32)
    step = max(1, CHUNK_ELEMENTS // size)
    for r0 in range(0, rows.shape[0], step):
        chunk = rows[r0:r0 + step]
        out[r0:r0 + step] = model_dot(chunk, t, np.zeros((chunk.shape[0], size), np.float32), model)
    return out


install_mma_dot(mma_dot)

__all__ = ["CHUNK_ELEMENTS", "mma_dot"]
