"""Vectorized GEMM accumulator models: :mod:`fp4spec.gemm_reference` over whole M x N tiles,
bit for bit, at BLAS speed where the arithmetic allows.

Same algorithms, same steps. The products of 4-, 6- and 8-bit elements and their scales
are exact in float64, and so are sums of them as long as they stay within 53 bits: each
model's fast path lets numpy's float64 matmul (BLAS) compute such sums, proves per output
and K chunk that the model's truncations and roundings leave them unchanged (or applies the
one rounding the model makes), and hands whatever it cannot prove to the integer algorithms
(exact integer arithmetic on aligned significands, as :mod:`.gemm_core` describes),
vectorized over the outputs that need them. Each module proves its claims:

* :mod:`.gemm_float` -- the float64 facts (exact products and sums, magnitude bounds,
  float32 rounding of float64 values) and their building blocks; :mod:`.gemm_stats` -- the
  exponents and lsbs of the operands that the exactness tests read;
* ``exact`` -- :mod:`.gemm_exact`: one BLAS product of the scaled operands, rounded once;
  the integer algorithm (Python integers where int64 does not fit) for outputs whose terms
  span more than 53 bits;
* ``fma`` (``fp32``) -- :mod:`.gemm_fma`: chunks of K as one BLAS product where no FMA of the
  chain rounds; FMAs one K element at a time (float64 and a cast, midpoints recomputed)
  elsewhere;
* ``fdpa`` (``sm100-mxf4nvf4``, ``sm100-mxf8f6f4``, ``sm90-bf16``) -- :mod:`.gemm_fdpa` and
  :mod:`.gemm_fdpa_terms`: chunks of steps as one BLAS product where no step truncates or
  rounds; steps one at a time from their BLAS dot products where no step truncates; the
  integer step elsewhere;
* ``fdpa2`` (``cdna3-fp8``) -- :mod:`.gemm_cdna3`: the exact block dot products, then the FMA
  chain as for ``fp32``.

Typical data (random FP4 operands, K in the thousands) takes the first tier everywhere;
adversarial data (scales 2^-127 next to 2^127, subnormal results, exact cancellations at the
truncation width) takes the integer paths, which are the earlier emulator's algorithms
restricted to the outputs that need them. Small problems (below
:data:`~.gemm_float.SMALL_WORK` multiply-adds) run the integer paths alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel
from fp4spec.matmul_operands import MatmulOperands

from .gemm_cdna3 import matmul_fdpa2
from .gemm_core import (
    SENT,
    Operand,
    bit_length,
    decompose,
    f32_terms,
    fma32,
    operand,
    operands_rounded,
    round_int_to_f32,
    shift_floor,
    shift_trunc,
    step_zero,
)
from .gemm_exact import matmul_exact, segment_dots
from .gemm_fdpa import matmul_fdpa, model_dot
from .gemm_fma import matmul_fma

#: Earlier private names, kept for callers outside the emulator.
_segment_dots = segment_dots
_operands_rounded = operands_rounded

_MATMULS = {"exact": matmul_exact, "fma": matmul_fma, "fdpa": matmul_fdpa, "fdpa2": matmul_fdpa2}


def matmul_emulated(qa, qb, model: AccumulatorModel, ops: MatmulOperands):
    """C = A . B^T (float32, M x N) with ``model``, for operands already checked
    (:func:`fp4spec.matmul_operands.check_operands`)."""
    return _MATMULS[model.algorithm](operand(qa, model), operand(qb, model), ops, model)


def matmul_block(qa, qb, model: AccumulatorModel, ops: MatmulOperands, rows, cols):
    """``matmul_emulated(...)[rows][:, cols]`` without computing the rest: every output depends
    only on its row of A, its row of B, its c and g. ``rows``, ``cols``: integer index arrays."""
    c = None if ops.c is None else np.asarray(ops.c)[np.ix_(rows, cols)]
    sub = dataclasses.replace(ops, m=len(rows), n=len(cols), c=c)
    return _MATMULS[model.algorithm](operand(qa, model, rows), operand(qb, model, cols), sub, model)


__all__ = [
    "SENT",
    "Operand",
    "bit_length",
    "decompose",
    "f32_terms",
    "fma32",
    "matmul_block",
    "matmul_emulated",
    "matmul_exact",
    "matmul_fdpa",
    "matmul_fdpa2",
    "matmul_fma",
    "model_dot",
    "operand",
    "round_int_to_f32",
    "shift_floor",
    "shift_trunc",
    "step_zero",
]
