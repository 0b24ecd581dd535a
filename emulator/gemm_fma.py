"""Chains of float32 FMAs (the ``fp32`` model; the outer chain of ``cdna3-fp8``) at BLAS speed
where no step rounds.

``acc <- fma32(x_k, y_k, acc)`` for k ascending rounds once per term. Over a chunk of terms
(:data:`CHUNK`) an output is *provable* when, with lo = min(lo_A + lo_B over the chunk,
lsb(acc)) (lo_A: the smallest lsb of A's nonzero factors in the chunk),
lo >= -149, acc != -0 and ``|acc| + sum |x_k y_k| < 2^min(lo + 24, 128)`` (E5 of
:mod:`.gemm_float` for the whole tile, else E3's BLAS product on |A|, |B| per output).
Then every partial sum is a multiple of 2^lo below 2^(lo + 24): a float32 (lo >= -149
covers the subnormals, and it is below 2^128), so no FMA of the chunk rounds, and the chunk's result is acc + A B^T (BLAS, exact by E2),
+0 if zero: an IEEE sum is -0 only when both addends are -0, and the accumulator is not -0.

The other outputs run the FMAs one term at a time (on their pairs, or on the whole tile
when more than a quarter of it needs it): where every sum of the chunk is exact in float64
(:func:`_sums_exact`) a plain float32 cast is the FMA's rounding; elsewhere
:func:`~.gemm_float.fma32_f64` (float64 arithmetic and a cast, the float32 midpoints
recomputed). All outputs of problems below :data:`~.gemm_float.SMALL_WORK` multiply-adds
take that path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from fp4spec.accumulator_models import BF16, FP32, AccumulatorModel, Carrier
from fp4spec.matmul_operands import MatmulOperands

from . import gemm_float
from .gemm_core import Operand, canonical, epilogue, initial, operands_rounded
from .gemm_float import (
    F32_LSB_MIN,
    F32_SIG,
    cauchy_bound,
    f32_exp_lsb,
    fma32_f64,
    magnitude_bound,
    pow2,
    segment_reduce,
    square_sums,
    tiles,
    upper_bound,
)
from .gemm_stats import (
    BAD,
    POS,
    element_stats,
    exp_lsb,
    per_unit,
    rounding_is_exact,
    scale_stats,
    scaled_values,
)

#: K elements per chunk of the float32 chain.
CHUNK = 256
#: Outputs per tile.
TILE = 1 << 16


@dataclasses.dataclass
class ChainSide:
    """One operand of an FMA chain: its factors, their smallest lsb and a magnitude bound
    per chunk."""

    vals: np.ndarray     # (R, K) float64 factors, 0 where not finite
    lo: np.ndarray       # (R, chunks) int64; very negative where a factor is not finite (never provable)
    mag: np.ndarray      # (R, chunks) int64: every |factor| of the chunk is below 2^mag
    sq: np.ndarray       # (R, chunks) float64: sums of squares of the factors per chunk
    _abs: np.ndarray | None = None

    @property
    def absvals(self) -> np.ndarray:
        """|vals| (computed when first needed)."""
        if self._abs is None:
            self._abs = np.abs(self.vals)
        return self._abs


def chain_side(vals: np.ndarray, lo: np.ndarray, mag: np.ndarray, units_per_chunk: int) -> ChainSide:
    """A ChainSide from float64 factors and, per run of elements (R, U), the smallest lsb
    (POS for no nonzero factor, -BAD where one is not finite) and a magnitude bound."""
    if not np.isfinite(vals).all():
        vals = np.where(np.isfinite(vals), vals, 0.0)
    chunk = vals.shape[1] // lo.shape[1] * units_per_chunk
    return ChainSide(vals, segment_reduce(lo, units_per_chunk, np.minimum),
                     segment_reduce(mag, units_per_chunk, np.maximum), square_sums(vals, chunk))


def rounded_chain_side(op: Operand, carrier: Carrier, chunk: int):
    """(ChainSide, the factors as float64 with non-finite values kept) for factors
    ``carrier(a sa)`` (:func:`~.gemm_fdpa_terms.rounded_operand`'s reasoning for the lsbs)."""
    if rounding_is_exact(op, carrier):
        unit = math.gcd(chunk, op.block)
        hi, lo = element_stats(op, unit)
        se, sl = scale_stats(op)
        lo = lo + per_unit(np.where(se == BAD, -BAD, sl), op.block, unit)
        vals = scaled_values(op)
        return chain_side(vals, lo, hi + per_unit(se, op.block, unit) + 2, chunk // unit), vals
    x = operands_rounded(op, carrier)
    e, lsb = f32_exp_lsb(x)
    vals = x.astype(np.float64)
    return chain_side(vals, np.where(e == BAD, -BAD, lsb), e + 1, chunk), vals


@dataclasses.dataclass(frozen=True)
class PerTerm:
    """The chain one term at a time over a K range [k0, k1): ``pairs(mi, ni, k0, k1, acc,
    exact)`` for output pairs (acc of shape (P,)), ``tile(rows, cols, k0, k1, acc, exact)``
    for a whole tile (rows and columns slices, acc (rows, cols)); accumulators are float64
    holding float32 values; ``exact``: :func:`_sums_exact` holds for the tile and chunk."""

    pairs: Callable
    tile: Callable


def fma_chain(a: ChainSide, b: ChainSide, acc0: np.ndarray, chunk: int, per_term: PerTerm,
              extra_ok: Callable | None = None, acc0_zero: bool = False) -> np.ndarray:
    """The chain of the module docstring, (M, N) float32 from ``acc0`` (``acc0_zero``: +0
    everywhere). Outputs it cannot prove for a chunk run ``per_term`` (on their pairs, or on
    the whole tile when more than a quarter of it needs it); ``extra_ok(rows, cols, ci)``
    adds a model's own condition for chunk ci (True, or a boolean array of the tile's shape)
    or is None."""
    m, n = acc0.shape
    k = a.vals.shape[1]
    out = np.empty((m, n), np.float32)
    neg_zero = has_negative_zero(acc0)
    small = m * n * k < gemm_float.SMALL_WORK
    for rows, cols in tiles(m, n, TILE):
        acc = acc0[rows, cols].astype(np.float64)
        lsb_acc = POS if acc0_zero else exp_lsb(acc)[1]      # a lower bound of lsb(acc)
        for ci, k0 in enumerate(range(0, k, chunk)):
            ks = slice(k0, min(k, k0 + chunk))
            if small:
                acc = per_term.tile(rows, cols, ks.start, ks.stop, acc, False)
                continue
            acc_max = 0.0 if acc0_zero and ci == 0 else float(np.abs(acc).max(initial=0.0))
            cheap = min(magnitude_bound(a.mag[rows, ci], b.mag[cols, ci], ks.stop - ks.start, acc_max),
                        cauchy_bound(a.sq[rows, ci], b.sq[cols, ci], acc_max))

            def bound(acc=acc, ks=ks, rows=rows, cols=cols):
                return upper_bound(a.absvals[rows, ks] @ b.absvals[cols, ks].T, np.abs(acc))

            ok, lo, tile_bound = _provable(a.lo[rows, ci], b.lo[cols, ci], lsb_acc, cheap, bound)
            if neg_zero:
                ok = ok & ~((acc == 0) & np.signbit(acc))
            if extra_ok is not None:
                ok = ok & extra_ok(rows, cols, ci)
            d = a.vals[rows, ks] @ b.vals[cols, ks].T
            if ok is True:
                acc, lsb_acc = acc + d + 0.0, lo
                continue
            fail = ~ok
            exact = _sums_exact(a.lo[rows, ci], b.lo[cols, ci], lsb_acc, tile_bound)
            if fail.sum() * 4 > fail.size:
                new = per_term.tile(rows, cols, ks.start, ks.stop, acc, exact)
                acc = np.where(ok, acc + d + 0.0, new)
                lsb_acc = np.where(ok, lo, exp_lsb(new)[1])
                continue
            acc = np.where(ok, acc + d + 0.0, acc)
            lsb_acc = np.where(ok, lo, lsb_acc)
            if fail.any():
                fi, fj = np.nonzero(fail)
                new = per_term.pairs(fi + rows.start, fj + cols.start, ks.start, ks.stop, acc[fi, fj], exact)
                acc[fi, fj] = new
                lsb_acc[fi, fj] = exp_lsb(new)[1]
        out[rows, cols] = acc
    return out


def has_negative_zero(acc: np.ndarray) -> bool:
    """Whether an accumulator holds -0 (then the chain's -0 rule needs the per-term path)."""
    return bool(np.any((acc == 0) & np.signbit(acc)))


def _provable(la, lb, lsb_acc, cheap: float, bound: Callable):
    """(ok, lo, u): ok True when every output of the tile is provable for the chunk (lo then
    a scalar lower bound of every lo), else a boolean array (lo an array); u an upper bound
    of |acc| + sum |x y| over the tile. ``cheap``: such a bound for the whole tile;
    ``bound()``: such bounds per output."""
    lo0 = min(int(la.min(initial=POS)) + int(lb.min(initial=POS)), int(np.min(lsb_acc)))
    limit = float(pow2(np.int64(min(lo0 + F32_SIG, 128))))
    if lo0 >= F32_LSB_MIN and cheap < limit:
        return True, lo0, cheap
    per_output = bound()
    u = min(cheap, float(per_output.max(initial=0.0)))
    if lo0 >= F32_LSB_MIN and u < limit:
        return True, lo0, u
    lo = np.minimum(la[:, None] + lb[None, :], lsb_acc)
    return (lo >= F32_LSB_MIN) & (per_output < pow2(np.minimum(lo + F32_SIG, 128))), lo, u


def _sums_exact(la, lb, lsb_acc, u: float) -> bool:
    """Whether every FMA of the chunk has an exact float64 sum, for the whole tile: the
    factors' products and the accumulator are multiples of 2^lo (lo the tile's smallest, at
    least -1074) and u (1 + 2^-15) < 2^(lo + 53). The accumulators along the chunk are
    float32 roundings of partial sums, each at most 1 + 2^-24 times the exact sum of
    magnitudes it rounds, so over at most 256 terms at most u (1 + 2^-15); and a float32
    rounding of a multiple of 2^lo is again one. So each a b + acc is such a multiple below
    2^(lo + 53): a float64 (E2), and its float32 cast is the FMA's one rounding (E4)."""
    lo0 = min(int(la.min(initial=POS)) + int(lb.min(initial=POS)), int(np.min(lsb_acc)))
    return lo0 >= -1074 and u * (1 + 2.0 ** -15) < float(pow2(np.int64(min(lo0 + 53, 1024))))


def fma_steps(xa: np.ndarray, xb: np.ndarray) -> PerTerm:
    """One float32 FMA per K element: ``xa``, ``xb`` the (R, K) operands as float64
    (non-finite values as they are). ``exact``: every sum of the range is exact in float64
    (:func:`_sums_exact`), so a plain cast rounds it."""

    def run(pa, pb, acc, exact):
        for j in range(pa.shape[0]):
            if exact:
                acc = (pa[j] * pb[j] + acc).astype(np.float32).astype(np.float64)
            else:
                acc = fma32_f64(pa[j], pb[j], acc)
        return acc

    def pairs(mi, ni, k0, k1, acc, exact):
        return run(np.ascontiguousarray(xa[mi, k0:k1].T), np.ascontiguousarray(xb[ni, k0:k1].T), acc, exact)

    def tile(rows, cols, k0, k1, acc, exact):
        pa = np.ascontiguousarray(xa[rows, k0:k1].T)[:, :, None]
        pb = np.ascontiguousarray(xb[cols, k0:k1].T)[:, None, :]
        return run(pa, pb, acc, exact)

    return PerTerm(pairs, tile)


def matmul_fma(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``fma``: acc = c; for k ascending: acc = fma32(a'_k, b'_k, acc); then the epilogue
    (a'_k: the element times its block scale rounded to the model's carrier)."""
    car = FP32 if model.scales == "fp32_operand" else BF16
    sa, xa = rounded_chain_side(a, car, CHUNK)
    sb, xb = rounded_chain_side(b, car, CHUNK)
    acc = fma_chain(sa, sb, initial(ops), CHUNK, fma_steps(xa, xb), acc0_zero=ops.c is None)
    return canonical(epilogue(acc, ops.g), model)


__all__ = ["ChainSide", "PerTerm", "chain_side", "fma_chain", "fma_steps", "matmul_fma", "rounded_chain_side"]
