"""The public GEMM: ``fp4spec.matmul(qa, qb, accumulator=..., c=...)``.

Runs the vectorized emulator (:mod:`fp4spec.emulator.gemm`), which is tested equal, bit for
bit, to the scalar reference :func:`fp4spec.gemm_reference.matmul_reference`.
"""

from __future__ import annotations

import numpy as np

from .accumulator_models import AccumulatorModel, get_accumulator
from .matmul_operands import check_operands


def matmul(qa, qb, *, accumulator: "str | AccumulatorModel" = "exact", c=None) -> np.ndarray:
    """C = A . B^T of two block-quantized operands, bit-exact under a named accumulator model.

    Args:
        qa: A (M x K), a :class:`~fp4spec.quantized.QuantizedTensor` blocked along K (the
            last axis), e.g. ``fp4spec.quantize(A, "nvfp4")``.
        qb: B (N x K), blocked along K the same way.
        accumulator: a model name from :data:`fp4spec.accumulator_models` -- ``"exact"``
            (default), ``"fp32"``, ``"sm100-mxf4nvf4"``, ``"sm100-mxf8f6f4"``,
            ``"sm90-bf16"``, ``"cdna3-fp8"`` -- or an
            :class:`~fp4spec.accumulator_models.AccumulatorModel`.
        c: optional float32 (M x N) initial accumulator (default +0). It enters as the
            accumulator's value before the first K step (the ``exact`` model adds it to the
            exact sum); with tensor scales it is multiplied by ``fp32(gA * gB)`` with the rest.

    Returns:
        float32 array (M x N), ``M = qa.shape[0]``, ``N = qb.shape[0]``: the operands' own
        rows (the rows ``quantize(..., pad=True)`` stores to fill 2-d tiles are not part of
        A or B; padding along K is +0 and runs through the K steps).

    Normative algorithm:

    1. Resolve the model (:func:`~fp4spec.accumulator_models.get_accumulator`).
    2. Check the operands (:func:`~fp4spec.matmul_operands.check_operands`): rank 2, blocked
       along K, equal K, schemes and block sizes the model takes, K a multiple of its step;
       ``g = fp32(gA * gB)`` when a scheme carries a tensor scale.
    3. Accumulate every output element as the model's algorithm says
       (:mod:`fp4spec.gemm_reference` states each one in numbered steps), starting from c.
    4. With tensor scales: the result is ``fp32(acc * g)`` (``exact``: the exact sum times
       g, rounded once to nearest even).
    5. NaN results carry the model's NaN bit pattern (``model.nan_bits``).
    """
    model = get_accumulator(accumulator)
    ops = check_operands(model, qa, qb, c)
    from .emulator import gemm

    return gemm.matmul_emulated(qa, qb, model, ops)


__all__ = ["matmul"]
