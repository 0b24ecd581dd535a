"""AMD CDNA3's two-stage steps with fp4spec's block-FMA wrapper (``fdpa2`` / ``block_fma``,
``cdna3-fp8``) at BLAS speed where the arithmetic allows.

The model (:func:`fp4spec.gemm_reference.dot_fdpa2`): per scale block, d = the MFMA chain
from +0 over its groups (:func:`fp4spec.gemm_reference.cdna3_step` on unscaled elements),
then ``acc = fma32(d, fp32(sa * sb), acc)``.

**Stage A is exact** for output (m, n) over a chunk when ``W = (hi_A + hi_B) - (lo_A + lo_B)
<= W_max = min(F, F2 - B - 1, Fc - B - 1, 22 - B)``, with hi the largest carrier exponent and
lo the smallest lsb of the row's nonzero (unscaled) elements in the chunk, B = ceil(log2
block) and F, F2, Fc the model's ``frac_bits``, ``realign_bits``, ``c_frac_bits``. Then every
product is a multiple of 2^lo (lo = lo_A + lo_B) with assigned exponent at most hi and
magnitude below 2^(hi + 2), and d (the exact partial sum of the block) is below 2^(hi + B + 2),
so e(d) <= hi + B + 1. In each step: the half sums' truncation to F bits below e_h <= hi is
exact (W <= F); the floor re-alignment to 2^(e_dot - F) too; with e2 = max(e_dot, e(c)) <=
hi + B + 1, the sum's floor to F2 bits below e2 (W <= F2 - B - 1) and c's floor to Fc bits
(W <= Fc - B - 1) are exact, and c is not dropped (e(c) >= lo >= e2 - (Fc + 1)); the total is a
multiple of 2^lo below 2^(hi + B + 2) <= 2^(lo + 24) (W <= 22 - B; lo >= -34 for FP8
elements): a float32, so the rounding returns it. So d is the block's exact dot product of
the unscaled elements (elementwise or BLAS, exact by E2 of :mod:`.gemm_float`). FP4
elements (W = 6) and FP6 (W <= 16) always pass; E5M2's whole range does not.

**Stage B** is the float32 FMA chain of :mod:`.gemm_fma` over the blocks, with terms
``d * fp32(sa sb)``. Where stage A is exact and both scale exponents lie in [-62, 62]
(so fp32(sa sb) = sa sb: at most 8 significant bits, between 2^-124 and 2^126), the term
is ``sum_{k in block} (a_k sa)(b_k sb)`` and a chunk of blocks is one BLAS product of the
scaled operands, under :mod:`.gemm_fma`'s proof. Other outputs run per block: d from the
exact block dot (where stage A is exact) or from the integer steps (:func:`cdna3_step`),
then :func:`~.gemm_float.fma32_f64`.

The integer steps' bounds (:func:`cdna3_step`, int64): FP8 significands are below 2^4, a
product's ``|N| < 2^8``, its left shift at most ``24 - 4``: each term is below 2^28, a half of
8 terms below 2^31, the re-aligned sum below 2^32 and, after the 7-bit left shift to 31
fractional bits, below 2^39; the accumulator at 24 bits is below 2^25, shifted by 7 below
2^32. Checked from the operands' significands for other parameters.
"""

from __future__ import annotations

import math

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel, element_carrier
from fp4spec.matmul_operands import MatmulOperands

from .gemm_core import (
    SENT,
    Operand,
    bits,
    canonical,
    check_bound,
    decompose,
    epilogue,
    f32_terms,
    initial,
    max_significand,
    once,
    present_values,
    round_int_to_f32,
    shift_floor,
    shift_trunc,
    step_zero,
)
from .gemm_float import fma32_f64, pair_step_dots, segment_reduce, step_dots
from .gemm_fma import PerTerm, chain_side, fma_chain
from .gemm_stats import BAD, POS, element_stats, scale_stats, scaled_values

_I64 = np.int64
#: Scale exponents whose pairwise products are exact float32 values.
_SCALE_EXP = 62


def cdna3_step(n, e, zero, pa, pb, d, model: AccumulatorModel) -> np.ndarray:
    """:func:`fp4spec.gemm_reference.cdna3_step` in int64: n, e, zero are (..., G) product
    significands, assigned exponents and zero flags, d the (...) float32 accumulators."""
    F, F2, Fc, il = model.frac_bits, model.realign_bits, model.c_frac_bits, model.interleave
    halves = []
    for h in range(il):
        nh, eh, zh = n[..., h::il], e[..., h::il], zero[..., h::il]
        e_h = np.where(zh, _I64(SENT), eh).max(axis=-1)
        s_h = shift_trunc(nh, (eh - pa - pb) + F - e_h[..., None]).sum(axis=-1)
        halves.append((s_h, e_h))
    e_dot = halves[0][1]
    for _, e_h in halves[1:]:
        e_dot = np.maximum(e_dot, e_h)
    s = sum(shift_floor(s_h, e_h - e_dot) for s_h, e_h in halves)
    mc, ec, zc = f32_terms(d)
    e2 = np.maximum(e_dot, ec)
    s2 = shift_floor(s, (F2 - F) + e_dot - e2)
    c2 = shift_floor(mc, (ec - 23) + Fc - e2)
    c2 = np.where(zc | (ec < e2 - (Fc + 1)), _I64(0), c2) << (F2 - Fc)
    return step_zero(round_int_to_f32(s2 + c2, e2 - F2, model.final_rounding), model)


def stage_a_width_limit(model: AccumulatorModel, block: int) -> int:
    """W_max of the module docstring: min(F, F2 - B - 1, Fc - B - 1, 22 - B), B = ceil(log2 block)."""
    b = math.ceil(math.log2(block))
    return min(model.frac_bits, model.realign_bits - b - 1, model.c_frac_bits - b - 1, 22 - b)


def _sides(op: Operand, model: AccumulatorModel, chunk: int):
    """(w, stage B's ChainSide): w = hi - lo of the row's nonzero unscaled elements per chunk
    (very negative if none); the ChainSide holds the factors a * sa, with the smallest lsb
    per block -BAD (never provable) where a scale is NaN or its exponent lies outside
    [-62, 62]."""
    hi, lo = element_stats(op, op.block)
    per = chunk // op.block
    emin = element_carrier(model, op.element).emin
    hi_c = np.where(hi == SENT, hi, np.maximum(hi, emin))
    hic, loc = segment_reduce(hi_c, per, np.maximum), segment_reduce(lo, per, np.minimum)
    w = np.where(loc == POS, _I64(SENT), hic - loc)
    se, sl = scale_stats(op)
    far = (se == BAD) | ((se != SENT) & (np.abs(se) > _SCALE_EXP))
    return w, chain_side(scaled_values(op), np.where(far, -BAD, lo + sl), hi + se + 2, per)


def matmul_fdpa2(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``fdpa2`` with ``block_fma`` (``cdna3-fp8``): per block, the MFMA chain from +0 over
    groups of ``group_size``, then acc = fma32(d, fp32(sa * sb), acc); then the epilogue."""
    ca, cb = element_carrier(model, a.element), element_carrier(model, b.element)
    pa, pb = ca.man_bits, cb.man_bits
    ma_max = max_significand(present_values(a.values, a.codes, a.element.values), ca)
    mb_max = max_significand(present_values(b.values, b.codes, b.element.values), cb)
    check_bound(bits(ma_max * mb_max) + model.frac_bits - pa - pb + bits(model.group_size)
                + model.realign_bits - model.frac_bits + 1, model.name)
    blk = a.block
    chunk = blk * max(1, 256 // blk)
    w_max = stage_a_width_limit(model, blk)
    wa, side_a = _sides(a, model, chunk)
    wb, side_b = _sides(b, model, chunk)
    sa32, sb32 = a.scales.astype(np.float32), b.scales.astype(np.float32)

    def exact_a(rows, cols, ci):
        if wa[rows, ci].max(initial=SENT) + wb[cols, ci].max(initial=SENT) <= w_max:
            return True
        return wa[rows, ci, None] + wb[None, cols, ci] <= w_max

    terms_a = once(lambda: decompose(a.values, ca))
    terms_b = once(lambda: decompose(b.values, cb))

    def blocks(d, slow, da, db, s, k0, acc):
        """Stage A's d where it is not exact (``slow``; ``da()``, ``db()`` give the decomposed
        elements), then stage B's FMA per block."""
        if np.any(slow):
            d = np.where(slow, _integer_d(da(), db(), k0, d.shape[0], blk, (ca, cb), model), d)
        for j in range(d.shape[0]):
            acc = fma32_f64(d[j] + 0.0, s(k0 // blk + j), acc)
        return acc

    def pairs(mi, ni, k0, k1, acc, exact):
        ci, ks = k0 // chunk, slice(k0, k1)
        d = pair_step_dots(a.values[mi, ks], b.values[ni, ks], blk)      # (blocks, P), exact where stage A is
        def da():
            return tuple(x[mi, ks] for x in terms_a())

        def db():
            return tuple(x[ni, ks] for x in terms_b())

        return blocks(d, wa[mi, ci] + wb[ni, ci] > w_max, da, db, lambda j: _f32_product(sa32[mi, j], sb32[ni, j]),
                      k0, acc)

    def tile(rows, cols, k0, k1, acc, exact):
        ci, ks = k0 // chunk, slice(k0, k1)
        d = step_dots(a.values[rows, ks], b.values[cols, ks], blk)        # (blocks, rows, cols)
        def da():
            return tuple(x[rows, None, ks] for x in terms_a())

        def db():
            return tuple(x[None, cols, ks] for x in terms_b())

        slow = wa[rows, ci, None] + wb[None, cols, ci] > w_max
        return blocks(d, slow, da, db, lambda j: _f32_product(sa32[rows, j, None], sb32[None, cols, j]), k0, acc)

    acc = fma_chain(side_a, side_b, initial(ops), chunk, PerTerm(pairs, tile), exact_a, ops.c is None)
    return canonical(epilogue(acc, ops.g), model)


def _f32_product(x, y) -> np.ndarray:
    """fp32(sa * sb) of float32 scales (NaN, 0 and Inf as IEEE gives them), as float64."""
    with np.errstate(all="ignore"):
        return (x * y).astype(np.float64)


def _integer_d(da, db, k0, n_blocks, blk, carriers, model: AccumulatorModel) -> np.ndarray:
    """(blocks, ...): stage A's d per block by the integer steps, from the decomposed
    elements (M, e, zero) of A and B over K from k0, in shapes that broadcast (output pairs:
    (P, K); a tile: (rows, 1, K) and (1, cols, K)); one group at a time."""
    ca, cb = carriers
    G = model.group_size
    out = []
    for b0 in range(0, n_blocks * blk, blk):
        d = None
        for g0 in range(b0, b0 + blk, G):
            sl = slice(g0, g0 + G)
            n = da[0][..., sl] * db[0][..., sl]
            e = da[1][..., sl] + db[1][..., sl]
            zero = da[2][..., sl] | db[2][..., sl]
            if d is None:
                d = np.zeros(n.shape[:-1], np.float32)
            d = cdna3_step(n, e, zero, ca.man_bits, cb.man_bits, d, model)
        out.append(d.astype(np.float64))
    return np.array(out)


__all__ = ["cdna3_step", "matmul_fdpa2", "stage_a_width_limit"]
