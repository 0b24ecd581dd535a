"""Compounding: how attenuation multiplies through a chain of quantized matmuls.

A per-layer attenuation ``eta_k < 1`` (the least-squares gain of a quantized matmul against
the exact one, :func:`fp4spec.analysis.attenuation`) multiplies along the depth of a
network: after K layers the signal is scaled by about ``prod(eta_k)``. This module measures
that on a chain of random square layers with both GEMM operands quantized.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np

from fp4spec.rht import check_size, rht as _rht

from ._quantizer import SCHEMES, as_quantizer, scheme_label
from .bias import attenuation
from .distributions import check_distribution, rng_for, sample


@dataclasses.dataclass(frozen=True)
class DepthCurve:
    """One scheme's chain: per-layer eta, their running product, and the end-to-end eta."""

    scheme: str
    rht: "int | None"
    eta: tuple  # eta_k for k = 1..K
    cumulative: tuple  # prod_{j<=k} eta_j
    end_to_end: tuple  # attenuation(reference chain h_k, quantized chain hq_k)


def _layer_weights(k: int, width: int, seed: int) -> np.ndarray:
    g = rng_for(f"layer{k}", seed)
    return (g.standard_normal((width, width)) / math.sqrt(width)).astype(np.float32)


def _quantized_matmul(a: np.ndarray, w: np.ndarray, q, rht, rht_kw) -> np.ndarray:
    if rht is not None:
        a = _rht(a, rht, axis=-1, **rht_kw)
        w = _rht(w, rht, axis=0, **rht_kw)
    aq = q(a)
    wq = q(np.ascontiguousarray(w.T)).T  # blocks along the contraction dimension
    return aq @ wq


def attenuation_vs_depth(schemes: Sequence = SCHEMES, depth: int = 16, *, width: int = 256, batch: int = 256,
                         seed: int = 0, rht=None, rht_signs=None, distribution: str = "gaussian",
                         rounding: str = "rne",
                         progress: "Callable[[str], None] | None" = None) -> dict:
    """Attenuation through ``depth`` chained quantized matmuls, per scheme.

    Model (every array float32 unless stated):

    1. ``h_0 = sample(distribution, (batch, width), seed)``; the reference chain starts at
       ``r_0 = h_0``.
    2. Layer ``k = 1..depth`` has weights ``W_k = N(0, 1) / sqrt(width)``, shape
       ``(width, width)``, drawn from ``rng_for("layer{k}", seed)`` (the same for every
       scheme), so the expected norm is preserved.
    3. With ``rht=size``, both operands are rotated along the contraction dimension:
       ``A = rht(h_{k-1}, axis=-1)``, ``B = rht(W_k, axis=0)`` (so ``A @ B = h_{k-1} @ W_k``
       exactly); otherwise ``A = h_{k-1}``, ``B = W_k``. Signs: ``rht_signs`` or ``seed``.
    4. Both operands are quantized with blocks along the contraction dimension:
       ``Aq = Q(A)`` (last axis), ``Bq = Q(B^T)^T``; ``h_k = Aq @ Bq`` (float64 product,
       then float32).
    5. ``eta_k = attenuation(h_{k-1} @ W_k, h_k)``: the gain of this layer against the exact
       product of the *same* input; ``cumulative_k = prod_{j<=k} eta_j``.
    6. ``r_k = r_{k-1} @ W_k`` (exact chain, float64) and
       ``end_to_end_k = attenuation(r_k, h_k)``.

    Returns:
        ``{scheme label: DepthCurve}``.
    """
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth: {depth!r} is not a positive int")
    check_distribution(distribution)
    if rht is not None:
        check_size(rht)
    rht_kw = {} if rht is None else ({"signs": rht_signs} if rht_signs is not None else {"seed": seed})
    h0 = sample(distribution, (batch, width), seed)
    weights = [_layer_weights(k, width, seed) for k in range(1, depth + 1)]
    out = {}
    for s in schemes:
        q = as_quantizer(s, rounding=rounding)
        h = h0
        r = h0.astype(np.float64)
        eta, cum, e2e = [], [], []
        for w in weights:
            exact = h.astype(np.float64) @ w.astype(np.float64)
            hk = _quantized_matmul(h, w, q, rht, rht_kw)
            eta.append(attenuation(exact, hk))
            cum.append((cum[-1] if cum else 1.0) * eta[-1])
            r = r @ w.astype(np.float64)
            h = hk.astype(np.float32)
            e2e.append(attenuation(r, h))
        lab = scheme_label(s)
        out[lab] = DepthCurve(lab, rht, tuple(eta), tuple(cum), tuple(e2e))
        if progress:
            progress(f"depth {lab} {'none' if rht is None else f'RHT{rht}'}")
    return out
