"""Shared building blocks of the GEMM emulator: operands, integer alignment, exact roundings.

:mod:`fp4spec.emulator.gemm` runs every accumulator model in two ways: fast paths that let
BLAS compute sums that are provably exact (:mod:`.gemm_float`), and the integer algorithms
built from the blocks here, which run every case the fast paths cannot prove (the rare
ones: truncation that reaches single terms, non-finite values, sums wider than float32).

Representation. A nonzero value ``v`` in a carrier with ``p`` fraction bits and smallest
normal exponent ``emin`` is ``v = M * 2^(e - p)`` with ``e = max(floor(log2 |v|), emin)`` and
``M`` a signed integer, ``|M| < 2^(p+1)`` (:func:`decompose`; the split is exact because
``ldexp`` by a power of two is exact for values inside float64's range and ``M`` is checked
integral). A term of a fused sum is ``(N, x, e)``: value ``N * 2^x`` with assigned exponent
``e``; the aligned, truncated term is ``trunc(N * 2^(x + F - e_max))``, an integer in units
of ``2^(e_max - F)`` (:func:`shift_trunc`), and the fused sum is the int64 sum of those
(:func:`fused`). The bounds that keep every int64 below 2^62 are proved per model in the
modules that use them.

Rounding to float32 (:func:`round_int_to_f32`) drops bits of an integer with integer
operations (truncation or round-half-even on the remainder), so it is exact too; the result
``q * 2^(Er - 23)`` with ``q <= 2^24`` is exact in float64 and its float32 cast is exact, or
+-Inf when it is 2^128 or more.

The float32 FMA (:func:`fma32`) computes the product exactly in float64 (24 + 24 bits), the
sum with TwoSum (its exact error), and rounds to odd at 53 bits before the float32 cast;
rounding to odd at p + 2 or more bits and then to nearest at p bits is correctly rounded
(Boldo and Melquiond), here 53 >= 24 + 2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ml_dtypes
import numpy as np

from fp4spec.matmul_operands import MatmulOperands, datapath_scale_codes
from fp4spec.accumulator_models import (
    BF16,
    FP32,
    AccumulatorModel,
    Carrier,
    format_carrier,
)

#: Exponent of a zero term that never sets the largest exponent.
SENT = -(1 << 20)

_I64 = np.int64


# =====================================================================================
# Integer building blocks
# =====================================================================================

def decompose(values: np.ndarray, carrier: Carrier) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, e, zero) with ``values = M * 2^(e - man_bits)`` exactly; zeros get ``e = SENT``.

    ``values``: finite float64 values representable in the carrier (callers zero out NaN
    and Inf first). Raises ValueError if a value is not representable.
    """
    v = np.asarray(values, np.float64)
    zero = v == 0
    _, x = np.frexp(np.abs(v))
    e = np.maximum(x.astype(_I64) - 1, carrier.emin)
    m = np.ldexp(v, (carrier.man_bits - e).astype(np.int64))
    mi = m.astype(_I64)
    if not np.array_equal(mi, m):
        raise ValueError(f"decompose: values are not representable in {carrier.name}")
    return mi, np.where(zero, _I64(SENT), e), zero


def shift_trunc(n: np.ndarray, sh: np.ndarray) -> np.ndarray:
    """trunc(n * 2^sh), toward zero, for int64 n and integer shifts (bounds: see module)."""
    a = np.abs(n)
    r = np.where(sh >= 0, a << np.clip(sh, 0, 62), a >> np.clip(-sh, 0, 63))
    return np.where(n < 0, -r, r)


def shift_floor(n: np.ndarray, sh: np.ndarray) -> np.ndarray:
    """floor(n * 2^sh) for int64 n (arithmetic right shift is floor)."""
    return np.where(sh >= 0, n << np.clip(sh, 0, 62), n >> np.clip(-sh, 0, 63))


def bit_length(a: np.ndarray) -> np.ndarray:
    """Bit length of non-negative int64 values below 2^62 (0 for 0), exactly."""
    _, x = np.frexp(a.astype(np.float64))
    x = x.astype(_I64)
    # float64(a) can round up to the next power of two; then a >> (x - 1) is 0.
    over = (x > 0) & ((a >> np.clip(x - 1, 0, 63)) == 0)
    return x - over


def round_int_to_f32(s: np.ndarray, exp: np.ndarray, mode: str) -> np.ndarray:
    """``s * 2^exp`` (int64 s, |s| < 2^62) rounded once to float32: ``"rz"`` or ``"rne"``.

    1. Er = max(bitlen(|s|) - 1 + exp, -126): the result's binade (subnormals at -126).
    2. Drop d = Er - 23 - exp bits of |s| (q = |s| >> d, or |s| << -d): at most 24 bits remain.
    3. ``"rne"``: add 1 when the dropped remainder is above half, or exactly half and q is odd.
    4. v = q * 2^(Er - 23) (exact in float64), cast to float32 (exact, or +-Inf at 2^128 or
       above), with the sign of s (-0.0 for a negative s that rounds to 0; +0.0 for s = 0).
    """
    s = np.asarray(s, _I64)
    exp = np.broadcast_to(np.asarray(exp, _I64), s.shape)
    a = np.abs(s)
    er = np.maximum(bit_length(a) - 1 + exp, -126)
    d = er - 23 - exp
    q = np.where(d > 0, a >> np.clip(d, 0, 63), a << np.clip(-d, 0, 40))
    if mode == "rne":
        dd = np.clip(d, 1, 62)
        rem = a & ((_I64(1) << dd) - 1)
        half = _I64(1) << (dd - 1)
        up = (d > 0) & (d <= 62) & ((rem > half) | ((rem == half) & ((q & 1) == 1)))
        q = q + up
    elif mode != "rz":
        raise ValueError(f"mode: {mode!r} is not one of 'rne', 'rz'")
    with np.errstate(over="ignore"):
        v = np.ldexp(q.astype(np.float64), (er - 23).astype(np.int64)).astype(np.float32)
    v = np.where(a == 0, np.float32(0.0), v)
    return np.where(s < 0, -v, v).astype(np.float32)


def step_zero(out: np.ndarray, model: AccumulatorModel) -> np.ndarray:
    """:func:`fp4spec.gemm_reference.step_zero` on an array: with ``zero_sign="positive"``
    every zero (-0.0 from a negative sum that rounded to 0) becomes +0.0."""
    if model.zero_sign == "positive":
        return np.where(out == 0, np.float32(0.0), out).astype(np.float32)
    return out


def f32_terms(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(M, e, zero) of finite float32 values: ``c = M * 2^(e - 23)``, e = max(exponent, -126).

    Non-finite entries give M = 0 (their result is set by the special-value rules)."""
    bits = np.ascontiguousarray(c, np.float32).view(np.uint32).astype(_I64)
    be = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    finite = be != 0xFF
    m = np.where(be > 0, man | (1 << 23), man)
    m = np.where(finite, m, 0)
    m = np.where(bits >> 31 == 1, -m, m)
    zero = m == 0
    e = np.where(be > 0, be - 127, -126)
    return m, np.where(zero, _I64(SENT), e), zero


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Elementwise float32 ``a * b + c`` rounded once (nearest even), IEEE specials.

    1. p = a * b in float64 (exact: 24 + 24 significand bits, no overflow).
    2. s = fl64(p + c) and its exact error err (TwoSum).
    3. Round s to odd: where err != 0, step s one ulp toward zero if it lies beyond the exact
       sum, then set its last bit.
    4. Cast to float32 (round to nearest even). Non-finite s (Inf/NaN inputs) is cast as is.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.asarray(a, np.float32).astype(np.float64)
        b = np.asarray(b, np.float32).astype(np.float64)
        c64 = np.asarray(c, np.float32).astype(np.float64)
        p = a * b
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        inexact = np.isfinite(s) & (err != 0)
        bits = s.view(_I64)
        mag = bits & _I64(0x7FFFFFFFFFFFFFFF)
        beyond = inexact & (np.signbit(err) != np.signbit(s))
        mag = (mag - beyond) | inexact
        ro = np.where(inexact, ((bits & ~_I64(0x7FFFFFFFFFFFFFFF)) | mag).view(np.float64), s)
        return ro.astype(np.float32)


# =====================================================================================
# Operands
# =====================================================================================

@dataclasses.dataclass(frozen=True)
class Operand:
    """One quantized operand, rows x K, decoded: exact float64 element values, block scales
    (NaN for NaN codes) and the formats."""

    values: np.ndarray        # (R, K) float64, exact (-0.0 kept)
    scales: np.ndarray        # (R, nb) float64, NaN for NaN scale codes
    block: int
    element: object
    scale_format: object
    codes: np.ndarray | None = None        # (R, K) element codes (None: not known)
    scale_codes: np.ndarray | None = None  # (R, nb) scale codes

    @property
    def scale_nan(self) -> np.ndarray:
        return np.isnan(self.scales)

    def scale_per_k(self, arr: np.ndarray) -> np.ndarray:
        """A per-block array (R, nb) repeated to (R, K)."""
        return np.repeat(arr, self.block, axis=1)


def operand(q, model: AccumulatorModel, rows=None) -> Operand:
    """A 2-d QuantizedTensor blocked along its last axis, decoded: its own rows
    (``q.shape[0]``; rows that ``quantize(pad=True)`` added to fill 2-d tiles are not part of
    the operand), or those of the index array ``rows``, by the stored, padded K; scale bytes
    as ``model``'s datapath reads them (:func:`fp4spec.matmul_operands.datapath_scale_codes`)."""
    sch = q.scheme
    m = q.moved()
    rows = slice(0, q.shape[0]) if rows is None else rows
    if sch.structure == "if4":
        return if4_operand(np.asarray(m["codes"])[rows], np.asarray(m["scales"])[rows], sch.block_size)
    codes = np.asarray(m["codes"])[rows]
    scodes = datapath_scale_codes(model, sch.scale, np.asarray(m["scales"])[rows])
    values = np.take(np.asarray(sch.element.values, np.float64), codes)
    scales = np.take(np.asarray(sch.scale.values, np.float64), scodes)
    return Operand(values, scales, sch.block_size, sch.element, sch.scale, codes, scodes)


def if4_operand(codes: np.ndarray, scale_bytes: np.ndarray, block: int) -> Operand:
    """An IF4 operand as :func:`fp4spec.gemm_reference.if4_ref_row` reads it: e2m1 values or
    INT4 integers, and the float32 block multipliers (s, or fp32(s * fp32(6/7)))."""
    from fp4spec.if4 import GEMM_ELEMENTS

    from .if4 import block_multipliers, element_values

    r, k = codes.shape
    values = element_values(codes.reshape(r, -1, block), scale_bytes).reshape(r, k).astype(np.float64)
    return Operand(values, block_multipliers(scale_bytes).astype(np.float64), block, GEMM_ELEMENTS, FP32)


def quantum_exponent(values: np.ndarray) -> int:
    """The smallest q >= 0 with every value * 2^q an integer (values: finite, exact)."""
    for q in range(200):
        v = np.ldexp(values, q)
        if np.array_equal(v, np.round(v)):
            return q
    raise ValueError("quantum_exponent: values are not dyadic with a small denominator")


def scale_terms(op: Operand):
    """(M, e, zero, nan, man_bits) of the block scales in their own format."""
    car = format_carrier(op.scale_format)
    nan = op.scale_nan
    m, e, zero = decompose(np.where(nan, 0.0, op.scales), car)
    return m, e, zero, nan, car.man_bits


def bits(x: int) -> int:
    """Bit length of a non-negative integer, at least 1."""
    return max(int(x), 1).bit_length()


def check_bound(nbits: int, what: str):
    """Refuse (NotImplementedError, pointing to the scalar reference) an int64 path whose
    proved bound exceeds 2^62."""
    if nbits > 62:
        raise NotImplementedError(f"{what}: the int64 emulator cannot prove this model exact ({nbits} bits); "
                                  f"use fp4spec.gemm_reference.matmul_reference")


def canonical(out: np.ndarray, model: AccumulatorModel) -> np.ndarray:
    """Every NaN as the model's NaN bits."""
    nan = np.array([model.nan_bits], np.uint32).view(np.float32)[0]
    return np.where(np.isnan(out), nan, out).astype(np.float32)


def epilogue(acc: np.ndarray, g) -> np.ndarray:
    """The tensor-scale epilogue fp32(acc * g) (acc when there is no g)."""
    if g is None:
        return acc
    with np.errstate(all="ignore"):
        return (acc * np.float32(g)).astype(np.float32)


def initial(ops: MatmulOperands) -> np.ndarray:
    """The accumulator's initial value: c (a float32 copy) or +0."""
    if ops.c is None:
        return np.zeros((ops.m, ops.n), np.float32)
    return np.array(ops.c, np.float32, copy=True)




def once(make: Callable) -> Callable:
    """``make()`` computed on the first call and kept (the integer path's full-operand arrays,
    built only when some output needs that path)."""
    kept = []

    def get():
        if not kept:
            kept.append(make())
        return kept[0]

    return get


def present_values(values: np.ndarray, codes, table) -> np.ndarray:
    """The distinct values of an operand (from the codes that occur, when known)."""
    if codes is not None:
        return np.asarray(table, np.float64)[np.flatnonzero(np.bincount(codes.ravel(), minlength=len(table)))]
    return np.unique(values)


def max_significand(values: np.ndarray, car: Carrier) -> int:
    """The largest |M| of the finite values split in ``car`` (:func:`decompose`)."""
    v = np.asarray(values, np.float64).ravel()
    m, _, _ = decompose(v[np.isfinite(v)], car)
    return int(np.max(np.abs(m), initial=1))


def operands_rounded(op: Operand, carrier: Carrier) -> np.ndarray:
    """carrier(element * block scale), nearest even, as float32 (float64 product is exact;
    for bf16 the float32 value is exact too -- every element-scale product of the catalogue
    has at most 8 significant bits and lies above 2^-149 -- so the bf16 cast rounds once)."""
    with np.errstate(all="ignore"):
        x64 = op.values * op.scale_per_k(op.scales)
        x = x64.astype(np.float32)
        if carrier is BF16:
            fin = np.isfinite(x)
            if not np.array_equal(x[fin].astype(np.float64), x64[fin]):
                raise NotImplementedError("bf16 operands: an element * scale product is not exact in float32, so "
                                          "the two-step bf16 cast could round twice; use "
                                          "fp4spec.gemm_reference.matmul_reference")
            x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    return x


def e_zero(model: AccumulatorModel) -> int:
    """The exponent of a zero term (:data:`SENT` when zero terms never set the largest one)."""
    return SENT if model.e_zero is None else model.e_zero


def fused(terms, c_terms, model: AccumulatorModel) -> np.ndarray:
    """One fused step: ``terms`` is a list of (N, x, e, zero) arrays of shape (..., L) (the
    last axis is summed), ``c_terms`` = (Mc, e_c, zero_c) of the accumulator, shape (...).

    1. e_max = the largest assigned exponent (zero terms: e_zero).
    2. S = sum of trunc(N * 2^(x + F - e_max)) (integers in units of 2^(e_max - F)).
    3. Round S * 2^(e_max - F) to float32 (``final_rounding``); the sign of a zero result
       as :func:`step_zero` says (``zero_sign``).
    """
    mc, ec, zc = c_terms
    ez = e_zero(model)
    F = model.frac_bits
    e_max = np.where(zc, ez, ec)
    for n, x, e, zero in terms:
        e_max = np.maximum(e_max, np.where(zero, ez, e).max(axis=-1))
    total = shift_trunc(mc, (ec - 23) + F - e_max)
    for n, x, e, zero in terms:
        total = total + shift_trunc(n, x + F - e_max[..., None]).sum(axis=-1)
    return step_zero(round_int_to_f32(total, e_max - F, model.final_rounding), model)


def fp64_special(va: np.ndarray, vb: np.ndarray, acc: np.ndarray):
    """MMA-Sim's float64 check per output on (..., L) operand values and (...) accumulators:
    (nan mask, inf mask, the float64 sum of the products and the accumulator)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = (va * vb).sum(axis=-1) + acc.astype(np.float64)
    return np.isnan(s), np.isinf(s), s
