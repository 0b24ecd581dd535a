"""Scalar reference of the GEMM accumulator models, in exact rational arithmetic.

Slow and obviously correct: one output element at a time, Python loops over K, every value
a :class:`fractions.Fraction`. :mod:`fp4spec.emulator.gemm` is the fast version and is tested
equal to this, bit for bit, on every model (``tests/emulator/test_gemm.py``).

Building blocks (each a small pure function with numbered steps):

* :func:`sig_exp` -- a value as (significand, exponent) in a carrier format;
* :func:`fused_sum` -- MMA-Sim's truncated fused sum (the primitive of every tensor-core model);
* :func:`round_binary` / :func:`round_f32` -- one exact rounding to a binary format;
* :func:`fma32`, :func:`mul32` -- exact float32 fused multiply-add and multiply.

Models (``accumulator=`` names, see :mod:`fp4spec.accumulator_models`): :func:`dot_exact`,
:func:`dot_fma`, :func:`dot_fdpa` (NVIDIA ``sm100-*``, ``sm90-bf16``), :func:`dot_fdpa2`
(AMD ``cdna3-fp8``); :func:`matmul_reference` runs one of them for every output element.

Values that are NaN are represented by ``None`` (scales) or Python ``nan`` (floats);
infinities by Python ``inf``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Sequence

import numpy as np

from .accumulator_models import (
    BF16,
    FP32,
    AccumulatorModel,
    Carrier,
    element_carrier,
    format_carrier,
    get_accumulator,
)
from .fused_steps import (
    NAN,
    TWO,
    fdpa_step,
    fp64_special,
    fused_sum,
    round_binary,
    round_bf16,
    round_f32,
    sig_exp,
    step_zero,
    terms_operand,
)
from .matmul_operands import check_operands, datapath_scale_codes


# =====================================================================================
# Building blocks
# =====================================================================================

def _finite(*xs) -> bool:
    return all(math.isfinite(x) for x in xs)


def mul32(a: float, b: float) -> float:
    """float32 product of two float32 values (IEEE, nearest even).

    1. If a or b is not finite: the IEEE float64 product (exact for float32 inputs), as float32.
    2. If the exact product is 0: a zero with the sign sign(a) xor sign(b).
    3. Otherwise round the exact product once to float32.
    """
    if not _finite(a, b):
        return float(np.float32(a * b))
    p = Fraction(a) * Fraction(b)
    if p == 0:
        return math.copysign(0.0, math.copysign(1.0, a) * math.copysign(1.0, b))
    return round_f32(p)


def fma32(a: float, b: float, c: float) -> float:
    """float32 fused multiply-add ``a * b + c`` of float32 values, rounded once (nearest even).

    1. If any input is not finite: IEEE float64 ``a * b + c`` (exact product), as float32.
    2. x = a * b + c exactly.
    3. If x is 0: -0.0 when the product and c are both zeros and both negative, else +0.0.
    4. Otherwise round x once to float32.
    """
    if not _finite(a, b, c):
        return float(np.float32(a * b + c))
    p = Fraction(a) * Fraction(b)
    x = p + Fraction(c)
    if x == 0:
        p_neg = math.copysign(1.0, a) * math.copysign(1.0, b) < 0
        neg = p == 0 and c == 0 and p_neg and math.copysign(1.0, c) < 0
        return -0.0 if neg else 0.0
    return round_f32(x)


def carrier_round(x: Fraction, negative_zero: bool, carrier: Carrier) -> float:
    """x rounded once (nearest even) to an operand carrier (fp32 or bf16); ``negative_zero``
    gives the sign of a zero x."""
    if x == 0:
        return -0.0 if negative_zero else 0.0
    if carrier is FP32:
        return round_f32(x)
    if carrier is BF16:
        return round_bf16(x)
    raise ValueError(f"carrier: {carrier.name!r} is not an operand rounding format")


def nan_value(model: AccumulatorModel) -> np.float32:
    """The model's NaN as a float32 (``model.nan_bits``)."""
    return np.array([model.nan_bits], np.uint32).view(np.float32)[0]


# =====================================================================================
# Operands
# =====================================================================================

@dataclasses.dataclass(frozen=True)
class RefRow:
    """One row of a quantized operand (K elements): exact values and their block scales.

    ``values[k]``: exact element value; ``negative[k]``: its sign bit (for -0);
    ``scales[b]``: exact block-scale value, None for a NaN scale; ``block``: block size.
    """

    values: tuple[Fraction, ...]
    negative: tuple[bool, ...]
    scales: tuple[Fraction | None, ...]
    block: int
    element: object
    scale_format: object

    def scale(self, k: int) -> Fraction | None:
        """The block scale of element k."""
        return self.scales[k // self.block]


def if4_ref_row(codes, scale_bytes, scheme) -> RefRow:
    """One row of an IF4 operand as the GEMM models read it: element k is e2m1(code), or the
    integer int4(code) in an INT4 block; the block scale is the block's multiplier
    :func:`fp4spec.if4.block_multiplier` -- s, or fp32(s * fp32(6/7)) for INT4 blocks (6/7
    rounded once into the float32 scale, as fouroversix's IF4 MAC and fp4spec's dequantize do),
    None where s is NaN (low bits 0x7F)."""
    from . import if4

    vals, negs = [], []
    for k, code in enumerate(codes):
        fmt = if4.INT4 if if4.is_int_block(scale_bytes[k // scheme.block_size]) else if4.E2M1
        v = fmt.decode_exact(int(code))
        negs.append(math.copysign(1.0, float(v)) < 0)
        vals.append(Fraction(v))
    scales = []
    for sb in scale_bytes:
        m = float(if4.block_multiplier(int(sb)))
        scales.append(None if math.isnan(m) else Fraction(m))
    return RefRow(tuple(vals), tuple(negs), tuple(scales), scheme.block_size, if4.GEMM_ELEMENTS, FP32)


def ref_rows(q, model: AccumulatorModel) -> list[RefRow]:
    """The rows of a 2-d QuantizedTensor blocked along its last axis, decoded exactly: its
    own ``q.shape[0]`` rows (rows that ``quantize(pad=True)`` added to fill 2-d tiles are not
    part of the operand), each of the stored, padded K. A scale byte is decoded as the code
    ``model``'s datapath reads (:func:`~fp4spec.matmul_operands.datapath_scale_codes`: a
    UE4M3 byte's low 7 bits under ``ue4m3_sign_bit="ignore"``)."""
    sch = q.scheme
    fmt, sfmt = sch.element, sch.scale
    n = q.shape[0]
    if sch.structure == "if4":
        return [if4_ref_row(c, s, sch) for c, s in zip(np.asarray(q.codes)[:n], np.asarray(q.scales)[:n])]
    rows = []
    for codes, scodes in zip(np.asarray(q.codes)[:n], np.asarray(q.scales)[:n]):
        vals, negs = [], []
        for code in codes:
            v = fmt.decode_exact(int(code))
            negs.append(math.copysign(1.0, float(v)) < 0)
            vals.append(Fraction(v))
        scales = []
        for sc in scodes:
            s = sfmt.decode_exact(datapath_scale_codes(model, sfmt, int(sc)))
            scales.append(None if isinstance(s, float) and math.isnan(s) else Fraction(s))
        rows.append(RefRow(tuple(vals), tuple(negs), tuple(scales), sch.block_size, fmt, sfmt))
    return rows


# =====================================================================================
# Models (one output element)
# =====================================================================================

def _epilogue(acc: float, g: float | None) -> float:
    """The tensor-scale epilogue of the hardware models: fp32(acc * g) (or acc if no g)."""
    return acc if g is None else mul32(acc, g)


def dot_exact(a: RefRow, b: RefRow, c: float, g: float | None) -> float:
    """``exact``: the exact sum of all scaled products plus c, times g, rounded once.

    1. NaN if c is NaN, g is NaN, or any block scale of row a or row b is NaN.
    2. If c is +-Inf: fp32(c * g) (IEEE; c if there is no g).
    3. S = c + sum_k (a_k * sa_k) * (b_k * sb_k), exactly.
    4. No g: round S once to float32 (nearest even; an exact 0 is +0).
       With g: g = +-Inf gives NaN for S = 0 and +-Inf otherwise; else round S * g once.
    """
    if math.isnan(c) or (g is not None and math.isnan(g)) or None in a.scales or None in b.scales:
        return NAN
    if math.isinf(c):
        return _epilogue(c, g)
    total = Fraction(c)
    for k in range(len(a.values)):
        total += a.values[k] * a.scale(k) * b.values[k] * b.scale(k)
    if g is None:
        return round_f32(total)
    if math.isinf(g):
        return NAN if total == 0 else math.copysign(math.inf, g) * (1 if total > 0 else -1)
    return round_f32(total * Fraction(g))


def operand(row: RefRow, k: int, carrier: Carrier) -> float:
    """fp32 or bf16 (``carrier``) of element k times its block scale: NaN for a NaN scale,
    +-Inf on overflow, a zero keeps the element's sign."""
    s = row.scale(k)
    if s is None:
        return NAN
    return carrier_round(row.values[k] * s, row.negative[k], carrier)


def _operand_carrier(model: AccumulatorModel) -> Carrier:
    return FP32 if model.scales == "fp32_operand" else BF16


def dot_fma(a: RefRow, b: RefRow, c: float, g: float | None, model: AccumulatorModel) -> float:
    """``fma`` (``fp32``): sequential float32 FMA over dequantized operands.

    1. a'_k = fp32(a_k * sa_k), b'_k = fp32(b_k * sb_k) (:func:`operand`).
    2. acc = c; for k = 0, 1, ..., K-1: acc = fma32(a'_k, b'_k, acc).
    3. Return fp32(acc * g) (acc if there is no g).
    """
    car = _operand_carrier(model)
    acc = c
    for k in range(len(a.values)):
        acc = fma32(operand(a, k, car), operand(b, k, car), acc)
    return _epilogue(acc, g)


def _terms_group(a: RefRow, b: RefRow, ks: range, model: AccumulatorModel):
    """``"group"`` terms of one step: per group of G, (s_g * sig(sa) * sig(sb), e(sa) + e(sb))
    with s_g the exact sum of the G element products; a group whose products are all zero
    or with a zero scale gets (0, e_zero)."""
    ca, cb = format_carrier(a.scale_format), format_carrier(b.scale_format)
    terms = []
    for k0 in range(ks.start, ks.stop, model.group_size):
        idx = range(k0, k0 + model.group_size)
        s_g = sum((a.values[k] * b.values[k] for k in idx), Fraction(0))
        all_zero = all(a.values[k] * b.values[k] == 0 for k in idx)
        ssa, esa = sig_exp(a.scale(k0), ca.emin, None)
        ssb, esb = sig_exp(b.scale(k0), cb.emin, None)
        if all_zero or esa is None or esb is None:
            terms.append((Fraction(0), model.e_zero))
        else:
            terms.append((s_g * ssa * ssb, esa + esb))
    return terms


def _terms_product(a: RefRow, b: RefRow, ks: range, model: AccumulatorModel):
    """``"product"`` terms: per K element (sig(a) sig(b) sig(sa) sig(sb), e(a) + e(b) + e(sa) + e(sb)),
    elements split in their own format and scales in theirs; a zero product is (0, e_zero)."""
    ca, cb = element_carrier(model, a.element), element_carrier(model, b.element)
    sa_c, sb_c = format_carrier(a.scale_format), format_carrier(b.scale_format)
    terms = []
    for k in ks:
        parts = [sig_exp(a.values[k], ca.emin, None), sig_exp(b.values[k], cb.emin, None),
                 sig_exp(a.scale(k), sa_c.emin, None), sig_exp(b.scale(k), sb_c.emin, None)]
        if any(e is None for _, e in parts):
            terms.append((Fraction(0), model.e_zero))
        else:
            terms.append((math.prod(s for s, _ in parts), sum(e for _, e in parts)))
    return terms


def fdpa_chain_step(a: RefRow, b: RefRow, ks: range, c: float, model: AccumulatorModel) -> float:
    """One K step of an ``fdpa`` model, specials included.

    ``"group"`` (Blackwell mxf4nvf4): NaN if a block scale of this step or c is NaN; an
    infinite c is returned unchanged (fp4spec's assumption). Other scale applications:
    MMA-Sim's float64 check (:func:`~fp4spec.fused_steps.fp64_special`) on the products (with scales) and c.
    Otherwise :func:`fdpa_step`.
    """
    if model.scales == "group":
        if math.isnan(c) or any(a.scale(k) is None or b.scale(k) is None for k in ks):
            return NAN
        if math.isinf(c):
            return c
        return fdpa_step(_terms_group(a, b, ks, model), c, model)
    if model.scales == "product":
        def f(row, k):
            s = row.scale(k)
            return NAN if s is None else float(row.values[k]) * float(s)
        special = fp64_special([(f(a, k), f(b, k)) for k in ks], c)
        if special is not None:
            return special
        return fdpa_step(_terms_product(a, b, ks, model), c, model)
    car = _operand_carrier(model)
    a_ops = [operand(a, k, car) for k in ks]
    b_ops = [operand(b, k, car) for k in ks]
    special = fp64_special(list(zip(a_ops, b_ops)), c)
    if special is not None:
        return special
    return fdpa_step(terms_operand(a_ops, b_ops, model, car), c, model)


def dot_fdpa(a: RefRow, b: RefRow, c: float, g: float | None, model: AccumulatorModel) -> float:
    """``fdpa`` (``sm100-mxf4nvf4``, ``sm100-mxf8f6f4``, ``sm90-bf16``): chained fused steps.

    1. acc = c (+0 when no c is given).
    2. For each step of ``k_step`` elements in ascending K: acc = :func:`fdpa_chain_step`.
    3. Return fp32(acc * g) (acc if there is no g).
    """
    acc = c
    for k0 in range(0, len(a.values), model.k_step):
        acc = fdpa_chain_step(a, b, range(k0, k0 + model.k_step), acc, model)
    return _epilogue(acc, g)


def cdna3_step(a_vals: Sequence[Fraction], b_vals: Sequence[Fraction], c: float,
               model: AccumulatorModel, ca: Carrier, cb: Carrier) -> float:
    """One AMD two-stage step (CDNA3 FP8 MFMA, ``amd_fused_dot_add(is_fp8=True)``) on a group
    of products of unscaled elements and a finite float32 accumulator c.

    1. Product terms (sig(a) sig(b), e(a) + e(b)) in the FP8 carriers; zero products never
       set a largest exponent.
    2. Stage 1: for h = 0 .. interleave-1, (S_h, e_h) = :func:`fused_sum` of the products
       with index = h (mod interleave), F bits, truncation.
    3. e = max e_h; s = sum_h floor(S_h * 2^(F + e_h - e)) * 2^-F.
    4. (s_c, e_c) = sig_exp(c, -126); e2 = max(e, e_c);
       s'' = floor(s * 2^(F2 + e - e2)) * 2^-F2 (F2 = ``realign_bits``);
       c'' = floor(s_c * 2^(Fc + e_c - e2)) * 2^-Fc (Fc = ``c_frac_bits``), or 0 when
       e_c < e2 - (Fc + 1).
    5. Return (s'' + c'') * 2^e2 rounded to float32 (``final_rounding``, RNE for CDNA3); a
       zero result as :func:`step_zero` says (``zero_sign``).
    """
    terms = []
    for x, y in zip(a_vals, b_vals):
        (sx, ex), (sy, ey) = sig_exp(x, ca.emin, None), sig_exp(y, cb.emin, None)
        terms.append((Fraction(0), None) if ex is None or ey is None else (sx * sy, ex + ey))
    F, F2, Fc, il = model.frac_bits, model.realign_bits, model.c_frac_bits, model.interleave
    halves = [fused_sum(terms[h::il], F, "rz") for h in range(il)]
    exps = [e for _, e in halves if e is not None]
    e = max(exps) if exps else None
    s = Fraction(0)
    for s_h, e_h in halves:
        if e_h is not None:
            s += Fraction(math.floor(s_h * TWO ** (F + e_h - e)), 1 << F)
    s_c, e_c = sig_exp(Fraction(c), FP32.emin, None)
    cand = [x for x in (e, e_c) if x is not None]
    if not cand:
        return 0.0
    e2 = max(cand)
    s2 = Fraction(math.floor(s * TWO ** (F2 + e - e2)), 1 << F2) if e is not None else Fraction(0)
    c2 = Fraction(0)
    if e_c is not None and e_c >= e2 - (Fc + 1):
        c2 = Fraction(math.floor(s_c * TWO ** (Fc + e_c - e2)), 1 << Fc)
    total = s2 + c2
    if total == 0:
        return 0.0
    return step_zero(round_f32(total * TWO ** e2, model.final_rounding), model)


def dot_fdpa2(a: RefRow, b: RefRow, c: float, g: float | None, model: AccumulatorModel) -> float:
    """``fdpa2`` with ``block_fma`` scales (``cdna3-fp8``).

    1. acc = c (+0 when no c is given).
    2. For each scale block in ascending K:
       1. d = +0; for each group of ``group_size`` in the block: d = :func:`cdna3_step`
          (the group's unscaled elements, d).
       2. s = fp32(sa * sb) (NaN if a scale is NaN; may underflow to 0 or overflow to Inf).
       3. acc = fma32(d, s, acc).
    3. Return fp32(acc * g) (acc if there is no g).
    """
    ca, cb = element_carrier(model, a.element), element_carrier(model, b.element)
    acc = c
    for blk in range(len(a.scales)):
        d = 0.0
        k0 = blk * a.block
        for g0 in range(k0, k0 + a.block, model.group_size):
            idx = range(g0, g0 + model.group_size)
            d = cdna3_step([a.values[k] for k in idx], [b.values[k] for k in idx], d, model, ca, cb)
        sa, sb = a.scales[blk], b.scales[blk]
        s = NAN if sa is None or sb is None else mul32(float(sa), float(sb))
        acc = fma32(d, s, acc)
    return _epilogue(acc, g)


_DOTS = {"exact": lambda a, b, c, g, m: dot_exact(a, b, c, g), "fma": dot_fma, "fdpa": dot_fdpa,
         "fdpa2": dot_fdpa2}


def dot_reference(a: RefRow, b: RefRow, c: float, g: float | None, model: AccumulatorModel) -> np.float32:
    """One output element of ``model`` as a float32, NaN replaced by ``model.nan_bits``."""
    out = np.float32(_DOTS[model.algorithm](a, b, c, g, model))
    return nan_value(model) if np.isnan(out) else out


def matmul_reference(qa, qb, *, accumulator: "str | AccumulatorModel" = "exact", c=None) -> np.ndarray:
    """The scalar reference of :func:`fp4spec.matmul`: C = A . B^T, one element at a time.

    1. Resolve the model and check the operands (:func:`fp4spec.matmul_operands.check_operands`).
    2. Decode every row of A and B exactly (:func:`ref_rows`; scale bytes as the model's
       datapath reads them).
    3. For every (m, n): :func:`dot_reference` with c[m, n] (+0 when c is None) and
       g = fp32(gA * gB) (None for MX operands).
    """
    model = get_accumulator(accumulator)
    ops = check_operands(model, qa, qb, c)
    rows_a, rows_b = ref_rows(qa, model), ref_rows(qb, model)
    g = None if ops.g is None else float(ops.g)
    out = np.empty((ops.m, ops.n), np.float32)
    for i, ra in enumerate(rows_a):
        for j, rb in enumerate(rows_b):
            ci = 0.0 if ops.c is None else float(ops.c[i, j])
            out[i, j] = dot_reference(ra, rb, ci, g, model)
    return out


__all__ = [
    "RefRow",
    "carrier_round",
    "cdna3_step",
    "dot_exact",
    "dot_fdpa",
    "dot_fdpa2",
    "dot_fma",
    "dot_reference",
    "fdpa_chain_step",
    "fdpa_step",
    "fma32",
    "fused_sum",
    "if4_ref_row",
    "matmul_reference",
    "mul32",
    "nan_value",
    "operand",
    "ref_rows",
    "round_bf16",
    "round_binary",
    "round_f32",
    "sig_exp",
    "step_zero",
]
