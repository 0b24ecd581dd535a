"""NVIDIA's chained fused steps (``fdpa``: ``sm100-mxf4nvf4``, ``sm100-mxf8f6f4``,
``sm90-bf16``) at BLAS speed where the arithmetic allows.

A step fuses its terms and the FP32 accumulator c: e_max = the largest assigned exponent
(zero terms: e_zero), each term truncated to F fractional bits below e_max, an exact sum,
one rounding to float32 (:func:`fp4spec.gemm_reference.fdpa_step`). The step is *exact* when
no truncation drops a bit: every nonzero term, c included, is a multiple of 2^(e_max - F).
Then its result is the exact sum rounded once. Three tiers, per output and K chunk
(:data:`CHUNK` elements, whole steps), in this order; E1-E4 are the facts of
:mod:`.gemm_float`, hi/lo/w the bounds of :mod:`.gemm_fdpa_terms`; F >= 23 throughout (the
fast tiers are off otherwise; c then needs its own test).

**Tier 1: a chunk of steps as one BLAS product.** With lo = min(lo_A + lo_B over the chunk,
lsb(c)) and ``H = max over the chunk of hi_A + max of hi_B``: if H <= lo + F, e_zero <= lo + F,
lo >= -149 and ``|c| + sum |T| < 2^min(lo + 24, 128)`` (E5's bounds for the tile, else
E3's BLAS product on |A|, |B| per output), the chunk's result is c + sum T = c + A B^T
(BLAS, exact by E2), and +0 if zero. The test runs first for the whole tile with its worst
row and column (the smallest lo, the largest H), then per output.
Proof, by induction over the steps: the accumulator entering a step is c plus the terms so
far, a multiple of 2^lo below 2^(lo + 24) in magnitude. So its exponent is at most lo + 23
(lo >= -149 keeps that true for float32 subnormals, whose exponent is -126), and every
assigned exponent is at most H, e_zero, or lo + 23: e_max <= lo + F. Every term and c is a
multiple of 2^lo, hence of 2^(e_max - F): the step is exact; its sum is a multiple of 2^lo
below 2^(lo + 24), lo >= -149: a float32 (below 2^128), so either rounding returns it. An
exact zero sum gives +0 in every model. The bound also keeps every partial sum inside
float64's 53 bits (E2).

**Tier 2: one step at a time, from the BLAS dot products of the steps.** For an output that
Tier 1 could not prove, per step with ``V = max(hi_A + hi_B, e_zero)`` and ``X = lo_A + lo_B + F``:
the step is exact if (a) ``X >= V``, (b) c is a multiple of 2^(V - F) and (c) c = 0 or
e(c) <= X. Proof: e_max = max(V', e(c)) with V' <= V the largest exponent of the products and
zero terms. If e(c) <= V: e_max <= V, products are multiples of 2^(lo_A + lo_B) and
lo_A + lo_B >= V - F >= e_max - F by (a), c by (b). If e(c) > V: e_max = e(c), products by (c),
and c has 24 significant bits, lsb(c) >= e(c) - 23 >= e_max - F. The exact sum c + D (D the
step's BLAS dot product) is then rounded once (E4 / :func:`rz_f32`). It is exact in float64:
with E = max(e(c), V), all terms are multiples of 2^(E - F) and |c + D| < 2^(E+1) + n 2^(V+w),
at most F + w + bits(n) + 1 <= 53 bits, checked per model (n terms per step). (c) reads
``|c| < 2^(X+1)`` when X >= -126 (float32's smallest exponent), else c = 0.

**Tier 3: the integer step** (:mod:`.gemm_fdpa_terms`; :func:`~.gemm_core.fused`) for the
(output, step) pairs Tier 2 could not prove, and for non-finite values (NaN and Inf operands
and accumulators, MMA-Sim's float64 special-value check, the ``group`` model's infinite
accumulator), vectorized over those pairs.

The ``group`` model's NaN (a NaN scale anywhere in the row or column, or a NaN c) is set
at the end: once NaN, the accumulator stays NaN. Problems below
:data:`~.gemm_float.SMALL_WORK` multiply-adds run Tier 3 alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fp4spec.accumulator_models import BF16, FP32, AccumulatorModel, get_accumulator
from fp4spec.matmul_operands import MatmulOperands

from . import gemm_float
from .gemm_core import SENT, Operand, bits, canonical, e_zero, epilogue, initial, operands_rounded
from .gemm_fdpa_terms import (
    Side,
    group_side,
    group_step,
    group_w,
    operand_side,
    operand_step,
    product_side,
    product_step,
    rounded_operand,
)
from .gemm_float import (
    F32_EMIN,
    F32_LSB_MIN,
    F32_SIG,
    cauchy_bound,
    magnitude_bound,
    pair_step_dots,
    pow2,
    round_f32,
    segment_reduce,
    step_dots,
    tiles,
    upper_bound,
)
from .gemm_stats import POS, exp_lsb

#: K elements per Tier-1 chunk (rounded to whole steps).
CHUNK = 256
#: Outputs per tile.
TILE = 1 << 16

_I64 = np.int64


def fdpa_chain(a: Side, b: Side, acc0: np.ndarray, model: AccumulatorModel, step3: Callable, w: int,
               n_terms: int, acc0_zero: bool = False) -> np.ndarray:
    """The chained steps of the module docstring: (M, N) float32 from the initial
    accumulator ``acc0`` (``acc0_zero``: it is +0 everywhere); ``step3(mi, ni, s, acc)`` is
    Tier 3 on output pairs (mi, ni)."""
    m, n = acc0.shape
    S = a.hi.shape[1]
    L = a.vals.shape[1] // S if S else 1
    F = model.frac_bits
    fast = F >= 23 and F + w + bits(n_terms) + 1 <= 53 and m * n * a.vals.shape[1] >= gemm_float.SMALL_WORK
    spc = max(1, CHUNK // L)
    chunks = [(s0, min(S, s0 + spc)) for s0 in range(0, S, spc)]
    hia, hib = segment_reduce(a.hi, spc, np.maximum), segment_reduce(b.hi, spc, np.maximum)
    loa, lob = segment_reduce(a.lo, spc, np.minimum), segment_reduce(b.lo, spc, np.minimum)
    maga, magb = segment_reduce(a.mag, spc, np.maximum), segment_reduce(b.mag, spc, np.maximum)
    sqa, sqb = segment_reduce(a.sq, spc, np.add), segment_reduce(b.sq, spc, np.add)
    ez = e_zero(model)
    out = np.empty((m, n), np.float32)
    for rows, cols in tiles(m, n, TILE):
        acc = acc0[rows, cols].astype(np.float64)
        lsb_acc = POS if acc0_zero else exp_lsb(acc)[1]      # a lower bound of lsb(acc)
        for ci, (s0, s1) in enumerate(chunks):
            ks = slice(s0 * L, s1 * L)
            ok = False
            if fast:
                acc_max = 0.0 if acc0_zero and ci == 0 else float(np.abs(acc).max(initial=0.0))
                cheap = min(magnitude_bound(maga[rows, ci], magb[cols, ci], ks.stop - ks.start, acc_max),
                            cauchy_bound(sqa[rows, ci], sqb[cols, ci], acc_max))

                def bound(acc=acc, ks=ks, rows=rows, cols=cols):
                    return upper_bound(a.absvals[rows, ks] @ b.absvals[cols, ks].T, np.abs(acc))

                ok, lo = _tier1(loa[rows, ci], lob[cols, ci], hia[rows, ci], hib[cols, ci], lsb_acc, cheap, bound,
                                F, ez)
                d = a.vals[rows, ks] @ b.vals[cols, ks].T
                acc = acc + d + 0.0 if ok is True else np.where(ok, acc + d + 0.0, acc)
                lsb_acc = lo if ok is True else np.where(ok, lo, lsb_acc)
            if ok is not True:
                fail = np.ones(acc.shape, bool) if ok is False else ~ok
                fi, fj = np.nonzero(fail)
                mi, ni = fi + rows.start, fj + cols.start
                dots = _pair_dots(a, b, rows, cols, fi, fj, ks, L) if fast else None
                new = _steps(a, b, mi, ni, range(s0, s1), acc[fi, fj], dots, model, step3)
                acc[fi, fj] = new
                lsb_acc = np.broadcast_to(lsb_acc, acc.shape).copy()
                lsb_acc[fi, fj] = exp_lsb(new)[1]
        out[rows, cols] = acc
    nan = a.nan_rows[:, None] | b.nan_rows[None, :]
    return np.where(nan, np.float32(np.nan), out).astype(np.float32) if nan.any() else out


def _tier1(la, lb, ha, hb, lsb_acc, cheap: float, bound: Callable, F: int, ez: int):
    """Tier 1's test for a tile and chunk: (ok, lo) with ok True when every output passes
    (lo then a scalar lower bound of every output's lo), else a boolean array (and lo an
    array). la, lb, ha, hb: the rows' and columns' lo and hi over the chunk; lsb_acc: lower
    bounds of lsb(acc) (scalar or array); ``cheap``: an upper bound of |acc| + sum |T| for
    the whole tile; ``bound()``: such bounds per output (E3: a BLAS product on |A|, |B|)."""
    lo0 = min(int(la.min(initial=POS)) + int(lb.min(initial=POS)), int(np.min(lsb_acc)))
    if (int(ha.max(initial=SENT)) + int(hb.max(initial=SENT)) <= lo0 + F and lo0 >= F32_LSB_MIN
            and ez <= lo0 + F):
        limit = float(pow2(np.int64(min(lo0 + F32_SIG, 128))))
        if cheap < limit:
            return True, lo0
        per_output = bound()
        if float(per_output.max(initial=0.0)) < limit:
            return True, lo0
    else:
        per_output = bound()
    lo = np.minimum(la[:, None] + lb[None, :], lsb_acc)
    ok = ha[:, None] + hb[None, :] <= lo + F
    ok &= (lo >= F32_LSB_MIN) & (ez <= lo + F)
    ok &= per_output < pow2(np.minimum(lo + F32_SIG, 128))
    return ok, lo


def _pair_dots(a: Side, b: Side, rows, cols, fi, fj, ks, L) -> np.ndarray:
    """(steps, P): each step's dot product for the output pairs, by BLAS over the tile when
    many pairs need them, else elementwise on the gathered rows (both exact where Tier 2
    uses them, E2)."""
    if len(fi) * 16 > (rows.stop - rows.start) * (cols.stop - cols.start):
        d = step_dots(a.vals[rows, ks], b.vals[cols, ks], L)
        return d[:, fi, fj] + 0.0
    return pair_step_dots(a.vals[fi + rows.start, ks], b.vals[fj + cols.start, ks], L) + 0.0


def _tier2_tests(hi: np.ndarray, lo: np.ndarray, F: int, ez: int):
    """Tier 2's tests per output pair and step from hi = hi_A + hi_B and lo = lo_A + lo_B:
    (ok_a, q, t) with (a) ok_a, (b) c exact when c * q is an integer, (c) when |c| < t."""
    v = np.maximum(hi, ez)
    x = lo + F
    q = pow2(F - np.clip(v, -400, 600))
    t = pow2(np.where(x >= F32_EMIN, x + 1, F32_LSB_MIN - 1))
    return x >= v, q, t


def _steps(a: Side, b: Side, mi, ni, steps: range, acc: np.ndarray, dots, model: AccumulatorModel,
           step3: Callable) -> np.ndarray:
    """Tiers 2 and 3 for output pairs (mi, ni) over ``steps``, from accumulators ``acc``
    (float64 holding float32 values); ``dots`` from :func:`_pair_dots` (None: Tier 3 only)."""
    if dots is not None:
        sl = slice(steps.start, steps.stop)
        ok_a, q, t = _tier2_tests(a.hi[mi, sl] + b.hi[ni, sl], a.lo[mi, sl] + b.lo[ni, sl], model.frac_bits,
                                  e_zero(model))
    for j, s in enumerate(steps):
        if dots is not None:
            cq = acc * q[:, j]
            ok = ok_a[:, j] & (cq == np.floor(cq)) & (np.abs(acc) < t[:, j])
            new = round_f32(acc + dots[j], model.final_rounding)
            if model.zero_sign == "positive":
                new += np.float32(0.0)
        else:
            ok = np.zeros(len(mi), bool)
            new = np.empty(len(mi), np.float32)
        if not ok.all():
            i = np.flatnonzero(~ok)
            new[i] = step3(mi[i], ni[i], s, acc[i].astype(np.float32))
        acc = new.astype(np.float64)
    return acc


# =====================================================================================
# Entry points
# =====================================================================================

def matmul_fdpa(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``fdpa``: chained fused steps, then the epilogue fp32(acc * g)."""
    acc0 = initial(ops)
    small = ops.m * ops.n * a.values.shape[1] < gemm_float.SMALL_WORK
    zero = ops.c is None
    if model.scales == "group":
        step3 = group_step(a, b, model)
        if small:
            acc = _integer_chain(acc0, model, step3, a.values.shape[1])
        else:
            acc = fdpa_chain(group_side(a, model), group_side(b, model), acc0, model, step3,
                             group_w(a, b, model), model.k_step // model.group_size, zero)
        acc = np.where(np.isnan(acc0), np.float32(np.nan), acc)
    elif model.scales == "product":
        step3 = product_step(a, b, model)
        if small:
            acc = _integer_chain(acc0, model, step3, a.values.shape[1])
        else:
            acc = fdpa_chain(product_side(a, model), product_side(b, model), acc0, model, step3, 4, model.k_step,
                             zero)
    else:
        car = FP32 if model.scales == "fp32_operand" else BF16
        if small:
            step3 = operand_step(operands_rounded(a, car), operands_rounded(b, car), car, model)
            acc = _integer_chain(acc0, model, step3, a.values.shape[1])
        else:
            sa, xa = rounded_operand(a, car, model.k_step)
            sb, xb = rounded_operand(b, car, model.k_step)
            acc = fdpa_chain(sa, sb, acc0, model, operand_step(xa, xb, car, model), 2, model.k_step, zero)
    return canonical(epilogue(acc, ops.g), model)


def _integer_chain(acc0: np.ndarray, model: AccumulatorModel, step3: Callable, k: int) -> np.ndarray:
    """Every step by the integer algorithm, for all outputs at once (small problems)."""
    mi, ni = (x.ravel() for x in np.indices(acc0.shape))
    acc = acc0.ravel()
    for s in range(k // model.k_step):
        acc = step3(mi, ni, s, acc)
    return acc.reshape(acc0.shape)


def model_dot(a, b, acc, accumulator="sm90-bf16") -> np.ndarray:
    """float32 ``acc + a . b`` as the accumulator model's chained fused steps (k_step = 16
    for ``sm90-bf16``): what one tensor-core dot of bf16 operands with an FP32 accumulator
    computes (one Triton ``tl.dot`` on Hopper), in numpy.

    ``a`` (M x K) and ``b`` (K x N) hold exact bf16 values (NaN and +-Inf allowed); they
    are read as float32 (bfloat16 exactly, float64 rounded to float32 first) and a value
    that is then not a bf16 value raises ValueError. ``acc`` is float32 (M x N); K is a
    multiple of the model's step. ``accumulator``: a
    registered model (or an :class:`~fp4spec.accumulator_models.AccumulatorModel`) with
    algorithm ``"fdpa"`` and scales ``"bf16_operand"``; anything else raises ValueError.

    1. Split every finite operand as ``M * 2^(e - 7)`` (bf16 carrier; NaN and Inf count as
       0 here).
    2. For k0 = 0, k_step, 2 k_step, ... in ascending order: the step's products
       ``a[m, k] * b[k, n]`` (exact terms ``M_a M_b * 2^(e_a + e_b - 14)``) and the running
       accumulator go through one fused step (align to the largest exponent, truncate to F
       fractional bits, exact sum, ``final_rounding`` to float32, the model's
       ``zero_sign``); the result is the next step's accumulator.
    3. Special values per step, as MMA-Sim checks them: the float64 sum of the step's
       products and the accumulator; if it is +-Inf the step gives that Inf, if it is NaN
       (a NaN operand or accumulator, Inf * 0, Infs of both signs) the step gives NaN.

    NaN results are float32 NaNs with numpy's bits (callers that need the model's NaN,
    ``model.nan_bits``, canonicalize; :func:`fp4spec.rht.rht` does). Computed by the tiers
    of the module docstring on operands already rounded to bf16."""
    model = get_accumulator(accumulator)
    if model.algorithm != "fdpa" or model.scales != "bf16_operand":
        raise ValueError(f"accumulator: {model.name!r} has algorithm {model.algorithm!r} and scales "
                         f"{model.scales!r}; model_dot needs a bf16 tensor-core model: algorithm 'fdpa' with scales "
                         f"'bf16_operand' (e.g. 'sm90-bf16')")
    with np.errstate(invalid="ignore"):  # a signalling NaN stays a NaN
        xa = np.asarray(a, np.float32)
        xb = np.ascontiguousarray(np.asarray(b, np.float32).T)
    acc = np.asarray(acc, np.float32)
    if xa.ndim != 2 or xb.ndim != 2 or xa.shape[1] != xb.shape[1] or acc.shape != (xa.shape[0], xb.shape[0]):
        raise ValueError(f"a, b, acc: expected a (M x K), b (K x N) and acc (M x N), got shapes "
                         f"{np.shape(a)}, {np.shape(b)} and {acc.shape}")
    if xa.shape[1] % model.k_step:
        raise ValueError(f"a: K = {xa.shape[1]} is not a multiple of the model's step {model.k_step}")
    for name, x in (("a", xa), ("b", xb)):
        fin = np.isfinite(x)
        bits16 = x[fin].view(np.uint32) & 0xFFFF
        if bits16.any():
            raise ValueError(f"{name}: values must be exact bf16 values (the low 16 bits of a float32 value "
                             f"are not zero)")
    step3 = operand_step(xa, xb, BF16, model)
    return fdpa_chain(operand_side(xa, model.k_step), operand_side(xb, model.k_step), acc, model, step3, 2,
                      model.k_step)


__all__ = ["CHUNK", "TILE", "fdpa_chain", "matmul_fdpa", "model_dot"]
