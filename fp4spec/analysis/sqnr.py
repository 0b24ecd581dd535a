"""Signal-to-quantization-noise ratio of block-scaled schemes, with and without an RHT.

Where the error is measured with an RHT: in the *original* domain,
``x - inverse_rht(Q(rht(x)))``. A GEMM that rotates both operands along the contraction
dimension sees exactly this error, and numbers with and without an RHT are then about the
same tensor. Because the transform is orthogonal the rotated-domain SQNR,
``||rht(x)||^2 / ||rht(x) - Q(rht(x))||^2``, is the same number up to float rounding
(the tests check both agree to 1e-6 dB).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np

from fp4spec.rht import check_size, inverse_rht as _inverse_rht, rht as _rht

from fp4spec.rounding import check_choice

from ._quantizer import SCHEMES, as_quantizer, scheme_label
from .bias import attenuation
from .distributions import DEFAULT_SHAPE, DISTRIBUTIONS, check_distribution, sample


def sqnr_db(x, xq) -> float:
    """``10 log10(sum x^2 / sum (x - xq)^2)`` in float64 (``inf`` when ``xq == x``)."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(xq, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"xq: shape {b.shape} differs from x's shape {a.shape}")
    sig = float(np.sum(a * a))
    noise = float(np.sum((a - b) ** 2))
    if sig == 0:
        raise ValueError("x: is all zero, SQNR is undefined")
    return math.inf if noise == 0 else 10.0 * math.log10(sig / noise)


def quantize_roundtrip(x, scheme, *, rht=None, rht_seed: int = 0, rht_signs=None, rht_dtype=None,
                       rounding: str = "rne") -> np.ndarray:
    """``x`` after quantize-dequantize along the last axis, optionally inside an RHT (float64).

    1. Without ``rht``: ``Q(x)``.
    2. With ``rht=size``: ``y = rht(x, size, signs or seed, out_dtype=rht_dtype)``, then
       ``inverse_rht(Q(y))`` in float64.
    """
    q = as_quantizer(scheme, rounding=rounding)
    a = np.asarray(x, dtype=np.float32)
    if rht is None:
        return q(a)
    kw = _sign_kwargs(rht, rht_seed, rht_signs)
    y = _rht(a, rht, out_dtype=rht_dtype, **kw).astype(np.float32)
    return _inverse_rht(q(y), rht, out_dtype="float64", **kw)


def _sign_kwargs(size, rht_seed, rht_signs) -> dict:
    check_size(size)
    return {"signs": rht_signs} if rht_signs is not None else {"seed": rht_seed}


def sqnr(x, scheme, *, rht=None, rht_seed: int = 0, rht_signs=None, rht_dtype=None,
         rounding: str = "rne") -> float:
    """SQNR in dB of ``scheme`` on ``x`` (blocks along the last axis), optionally with an RHT.

    ``10 log10(sum x^2 / sum (x - deq)^2)`` with ``deq = quantize_roundtrip(x, ...)``:

    1. ``rht=None``: ``deq = Q(x)``.
    2. ``rht=size`` (16, 32, 64, 128): ``deq = inverse_rht(Q(rht(x)))``, the error measured
       in the original domain (module docstring). The signs are ``rht_signs`` (e.g.
       ``"te"``) if given, else drawn from ``rht_seed`` (default 0); ``rht_dtype="bfloat16"``
       rounds the rotated tensor to BF16 before quantizing, as TransformerEngine does.

    Args:
        x: the tensor; its last axis must be a multiple of the block and RHT sizes.
        scheme: a scheme name (``"nvfp4"``, ``"mxfp4"``, ``"ufp4"``, ``"nvint4"``,
            ``"hif4"``), a scheme descriptor, or a callable ``x -> dequantized x``.
    """
    a = np.asarray(x, dtype=np.float32)
    return sqnr_db(a, quantize_roundtrip(a, scheme, rht=rht, rht_seed=rht_seed, rht_signs=rht_signs,
                                         rht_dtype=rht_dtype, rounding=rounding))


def rht_label(size) -> str:
    return "none" if size is None else f"RHT{size}"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """SQNR (dB) for every (distribution, scheme, RHT size); produced by :func:`compare`."""

    schemes: tuple
    distributions: tuple
    rht_sizes: tuple
    seed: int
    shape: tuple
    values: dict  # (distribution, scheme label, rht size or None) -> SQNR in dB
    eta: dict  # same keys -> attenuation(x, deq) (fp4spec.analysis.attenuation)

    def get(self, distribution: str, scheme: str, rht=None) -> float:
        """The SQNR in dB of one cell."""
        return self.values[(distribution, scheme, rht)]

    def to_markdown(self, digits: int = 2, *, what: str = "sqnr") -> str:
        """One row per (distribution, scheme), one column per RHT setting.

        ``what="sqnr"``: SQNR in dB with ``digits`` decimals; ``what="eta"``: the
        attenuation factor with ``digits + 2`` decimals.
        """
        check_choice("what", what, ("sqnr", "eta"))
        table, unit, dig = (self.values, " (dB)", digits) if what == "sqnr" else (self.eta, " eta", digits + 2)
        cols = [rht_label(r) for r in self.rht_sizes]
        lines = ["| distribution | scheme | " + " | ".join(f"{c}{unit}" for c in cols) + " |",
                 "|---|---|" + "---:|" * len(cols)]
        for d in self.distributions:
            for s in self.schemes:
                cells = [f"{table[(d, s, r)]:.{dig}f}" for r in self.rht_sizes]
                lines.append(f"| {d} | {s} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def compare(schemes: Sequence = SCHEMES, distributions: Sequence[str] = DISTRIBUTIONS, *, seed: int = 0,
            rht_sizes: Sequence = (None, 16), shape=DEFAULT_SHAPE, rht_signs=None,
            progress: "Callable[[str], None] | None" = None) -> Comparison:
    """SQNR of every scheme on every distribution, before and after each RHT size.

    1. For each distribution ``d``: ``x = sample(d, shape, seed)``
       (:func:`fp4spec.analysis.distributions.sample`).
    2. For each scheme and each entry ``r`` of ``rht_sizes`` (``None`` = no RHT):
       ``deq = quantize_roundtrip(x, scheme, rht=r, rht_seed=seed, rht_signs=rht_signs)``;
       the SQNR is ``sqnr_db(x, deq)`` (= :func:`sqnr`) and the attenuation
       ``attenuation(x, deq)``.

    ``progress``, if given, is called with a short label after each measurement.
    """
    distributions = tuple(check_distribution(d) for d in distributions)
    rht_sizes = tuple(None if r is None else check_size(r) for r in rht_sizes)
    schemes = tuple(schemes)
    labels = tuple(scheme_label(s) for s in schemes)
    values, eta = {}, {}
    for d in distributions:
        x = sample(d, shape, seed)
        for s, lab in zip(schemes, labels):
            q = as_quantizer(s)
            for r in rht_sizes:
                deq = quantize_roundtrip(x, q, rht=r, rht_seed=seed, rht_signs=rht_signs)
                values[(d, lab, r)] = sqnr_db(x, deq)
                eta[(d, lab, r)] = attenuation(x, deq)
                if progress:
                    progress(f"sqnr {d} {lab} {rht_label(r)}")
    return Comparison(labels, distributions, rht_sizes, seed, tuple(shape), values, eta)
