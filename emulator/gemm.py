"""Vectorized GEMM accumulator models: :mod:`fp4spec.gemm_reference` over whole M x N tiles.

Same algorithms, same steps; the Python loop runs per K step (or per K element for the
``fma`` model, per scale segment for ``exact``), never per output element. Exactness comes
from integer arithmetic on aligned significands, with every bound proved below.

Representation. A nonzero value ``v`` in a carrier with ``p`` fraction bits and smallest
normal exponent ``emin`` is ``v = M * 2^(e - p)`` with ``e = max(floor(log2 |v|), emin)`` and
``M`` a signed integer, ``|M| < 2^(p+1)`` (:func:`decompose`; the split is exact because
``ldexp`` by a power of two is exact for values inside float64's range and ``M`` is checked
integral). A term of a fused sum is ``(N, x, e)``: value ``N * 2^x`` with assigned exponent
``e``; the aligned, truncated term is ``trunc(N * 2^(x + F - e_max))``, an integer in units
of ``2^(e_max - F)`` (:func:`shift_trunc`), and the fused sum is the int64 sum of those.

Bounds (|.| < 2^62 everywhere, so int64 never overflows):

* ``sm100-mxf4nvf4`` (``"group"``): E2M1 elements times 2 are integers of magnitude <= 12,
  so a group sum of 16 products is ``|D| <= 16 * 144 = 2304 < 2^12``; UE4M3 significands are
  integers < 16 (E8M0: 1), so ``|N| < 2^12 * 2^8 = 2^20``; the largest left shift is
  ``F - 2 - 3 - 3 <= 35`` (``e_t <= e_max``), so ``|T| < 2^55``; the accumulator term is
  ``< 2^24 * 2^(F - 23) = 2^36``; five terms sum to ``< 2^58``. For other parameters
  :func:`_check_bound` computes the same bound and refuses (NotImplementedError, pointing to
  the scalar reference) when it exceeds 2^62.
* ``"product"`` / ``"*_operand"`` (``sm100-mxf8f6f4``, ``sm90-bf16``): ``|N| < 2^(pa+1) *
  2^(pb+1) * 2^(sa+1) * 2^(sb+1)`` and the left shift is at most ``F - pa - pb - sa - sb``,
  so ``|T| < 2^(F + 4)``; 33 terms sum to ``< 2^35``.
* ``cdna3-fp8``: FP8 significands are < 2^4, ``|N| < 2^8``, shift <= ``24 - 4``: ``|T| < 2^28``,
  a half of 8 terms < 2^31, the re-aligned sum < 2^32 and after the 7-bit left shift to 31
  fractional bits < 2^39; the accumulator at 24 bits < 2^25, then shifted by 7: < 2^32.
* ``exact``: each scale segment's dot product is an int64 matmul of element integers
  (bound checked: ``max|a| * max|b| * segment < 2^62``, else Python integers), times the
  scale significands; the segments are then summed at their exponents in int64 when the
  exponent range plus the significand bits fit 62 bits, else in Python integers (object
  arrays, vectorized over the M x N tile).

Rounding to float32 (:func:`round_int_to_f32`) drops bits of an integer with integer
operations (truncation or round-half-even on the remainder), so it is exact too; the result
``q * 2^(Er - 23)`` with ``q <= 2^24`` is exact in float64 and its float32 cast is exact, or
+-Inf when it is 2^128 or more.

The ``fma`` model's float32 FMA (:func:`fma32`) computes the product exactly in float64
(24 + 24 bits), the sum with TwoSum (its exact error), and rounds to odd at 53 bits before
the float32 cast; rounding to odd at p + 2 or more bits and then to nearest at p bits is
correctly rounded (Boldo and Melquiond), here 53 >= 24 + 2.
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

from fp4spec.accumulator_models import (
    BF16,
    FP32,
    AccumulatorModel,
    Carrier,
    element_carrier,
    format_carrier,
    get_accumulator,
)
from fp4spec.matmul_operands import MatmulOperands

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

    @property
    def scale_nan(self) -> np.ndarray:
        return np.isnan(self.scales)

    def scale_per_k(self, arr: np.ndarray) -> np.ndarray:
        """A per-block array (R, nb) repeated to (R, K)."""
        return np.repeat(arr, self.block, axis=1)


def operand(q) -> Operand:
    """A 2-d QuantizedTensor blocked along its last axis, decoded: its own rows
    (``q.shape[0]``; rows that ``quantize(pad=True)`` added to fill 2-d tiles are not part of
    the operand) by the stored, padded K."""
    sch = q.scheme
    m = q.moved()
    rows = q.shape[0]
    values = sch.element.values[np.asarray(m["codes"], np.intp)[:rows]]
    scales = sch.scale.values[np.asarray(m["scales"], np.intp)[:rows]]
    return Operand(values.astype(np.float64), scales.astype(np.float64), sch.block_size, sch.element, sch.scale)


def quantum_exponent(values: np.ndarray) -> int:
    """The smallest q >= 0 with every value * 2^q an integer (values: finite, exact)."""
    for q in range(0, 200):
        v = np.ldexp(values, q)
        if np.array_equal(v, np.round(v)):
            return q
    raise ValueError("quantum_exponent: values are not dyadic with a small denominator")


def _scale_terms(op: Operand):
    """(M, e, zero, nan, man_bits) of the block scales in their own format."""
    car = format_carrier(op.scale_format)
    nan = op.scale_nan
    m, e, zero = decompose(np.where(nan, 0.0, op.scales), car)
    return m, e, zero, nan, car.man_bits


def _bits(x: int) -> int:
    return max(int(x), 1).bit_length()


def _check_bound(bits: int, what: str):
    if bits > 62:
        raise NotImplementedError(f"{what}: the int64 emulator cannot prove this model exact ({bits} bits); "
                                  f"use fp4spec.gemm_reference.matmul_reference")


def _canonical(out: np.ndarray, model: AccumulatorModel) -> np.ndarray:
    nan = np.array([model.nan_bits], np.uint32).view(np.float32)[0]
    return np.where(np.isnan(out), nan, out).astype(np.float32)


def _epilogue(acc: np.ndarray, g) -> np.ndarray:
    if g is None:
        return acc
    with np.errstate(all="ignore"):
        return (acc * np.float32(g)).astype(np.float32)


def _initial(ops: MatmulOperands) -> np.ndarray:
    if ops.c is None:
        return np.zeros((ops.m, ops.n), np.float32)
    return np.array(ops.c, np.float32, copy=True)


# =====================================================================================
# exact
# =====================================================================================

def _segment_dots(ia: np.ndarray, ib: np.ndarray, seg: int) -> list:
    """Exact per-segment dot products of integer element arrays (int64 when provable)."""
    ma = int(np.max(np.abs(ia), initial=0))
    mb = int(np.max(np.abs(ib), initial=0))
    exact64 = _bits(ma) + _bits(mb) + _bits(seg) <= 62
    out = []
    for k0 in range(0, ia.shape[1], seg):
        a, b = ia[:, k0:k0 + seg], ib[:, k0:k0 + seg]
        if exact64:
            out.append(a @ b.T)
        else:
            out.append(a.astype(object) @ b.T.astype(object))
    return out


def _round_object(s: np.ndarray, exp: int, mode: str = "rne") -> np.ndarray:
    """:func:`round_int_to_f32` for Python-integer object arrays (one scalar call per entry)."""
    from fp4spec.gemm_reference import round_binary
    from fractions import Fraction

    f = np.frompyfunc(lambda v: round_binary(Fraction(int(v)) * Fraction(2) ** exp, 23, -126, 127, mode), 1, 1)
    return np.asarray(f(s), np.float64).astype(np.float32)


def _exact_sum(terms, shape) -> tuple[np.ndarray, int]:
    """sum of N * 2^x over terms (N int64 or Python-integer object arrays, x int64), exactly,
    as (S, xmin) with the sum S * 2^xmin: int64 when every nonzero N fits together with the
    exponent range in 62 bits, else Python integers."""
    masks = [np.asarray(n != 0, bool) for n, _ in terms]
    xs = [x[m] for (_, x), m in zip(terms, masks) if m.any()]
    if not xs:
        return np.zeros(shape, _I64), 0
    xmin = min(int(v.min()) for v in xs)
    xmax = max(int(v.max()) for v in xs)
    nbits = max(_bits(int(np.max(np.abs(n), initial=0))) for n, _ in terms)
    fits = all(n.dtype != object for n, _ in terms) and nbits + (xmax - xmin) + _bits(len(terms)) <= 62
    total = np.zeros(shape, _I64 if fits else object)
    for (n, x), m in zip(terms, masks):
        sh = np.where(m, x - xmin, 0)
        if fits:
            total = total + (n << sh)
        else:
            total = total + np.left_shift(n.astype(object), sh.astype(object))
    return total, xmin


def matmul_exact(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``exact``: :func:`fp4spec.gemm_reference.dot_exact` on the whole tile.

    1. Segments where both block scales are constant (gcd of the block sizes); per segment
       the exact integer dot product of the element integers (``values * 2^q``).
    2. Each segment times both scale significands, at exponent ``xa + xb - qa - qb``.
    3. c as ``M_c * 2^(e_c - 23)``; all terms summed exactly at the smallest exponent (int64
       when it fits 62 bits, else Python integers).
    4. Times g's integer significand; one rounding to float32 (nearest even).
    5. Specials: NaN for a NaN scale anywhere in the row or column, a NaN c or g; an infinite
       c gives fp32(c * g); an infinite g gives NaN for a zero sum, else +-Inf.
    """
    qa, qb = quantum_exponent(a.values), quantum_exponent(b.values)
    ia = np.ldexp(a.values, qa).astype(_I64)
    ib = np.ldexp(b.values, qb).astype(_I64)
    sma, sea, _, nana, dsa = _scale_terms(a)
    smb, seb, _, nanb, dsb = _scale_terms(b)
    seg = math.gcd(a.block, b.block)
    dots = _segment_dots(ia, ib, seg)
    terms = []     # (N, x): value N * 2^x, N int64 or object (M, N)
    for s, d in enumerate(dots):
        ba, bb = (s * seg) // a.block, (s * seg) // b.block
        n = d * sma[:, ba, None] * smb[None, :, bb]
        x = (sea[:, ba, None] - dsa) + (seb[None, :, bb] - dsb) - qa - qb
        terms.append((n, x))
    c = _initial(ops)
    mc, ec, zc = f32_terms(c)
    terms.append((mc, ec - 23))
    total, exp = _exact_sum(terms, (ops.m, ops.n))
    g = None if ops.g is None else np.float32(ops.g)
    if g is not None and np.isfinite(g):
        mg, eg, _ = f32_terms(np.array([g], np.float32))
        mg, eg = int(mg[0]), int(eg[0]) - 23
        if total.dtype != object and _bits(int(np.max(np.abs(total), initial=0))) + _bits(abs(mg)) <= 62:
            total = total * _I64(mg)
        else:
            total = total.astype(object) * mg
        exp += eg
    out = round_int_to_f32(total, exp, "rne") if total.dtype != object else _round_object(total, exp)
    # 5. specials
    with np.errstate(all="ignore"):
        if g is not None and np.isinf(g):
            pos = (total > 0).astype(bool)
            out = np.where(pos == (g > 0), np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
            out = np.where((total == 0).astype(bool), np.float32(np.nan), out)
        out = np.where(np.isinf(c), _epilogue(c, ops.g), out)
        nan = nana.any(axis=1)[:, None] | nanb.any(axis=1)[None, :] | np.isnan(c)
        if g is not None and np.isnan(g):
            nan = np.ones_like(nan)
        out = np.where(nan, np.float32(np.nan), out)
    return _canonical(out, model)


# =====================================================================================
# fma
# =====================================================================================

def _operands_rounded(op: Operand, carrier: Carrier) -> np.ndarray:
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


def matmul_fma(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``fma``: acc = c; for k ascending: acc = fma32(a'_k, b'_k, acc); then the epilogue."""
    car = FP32 if model.scales == "fp32_operand" else BF16
    xa, xb = _operands_rounded(a, car), _operands_rounded(b, car)
    acc = _initial(ops)
    for k in range(xa.shape[1]):
        acc = fma32(xa[:, k, None], xb[None, :, k], acc)
    return _canonical(_epilogue(acc, ops.g), model)


# =====================================================================================
# fdpa (NVIDIA)
# =====================================================================================

def _ez(model: AccumulatorModel) -> int:
    return SENT if model.e_zero is None else model.e_zero


def _fused(terms, c_terms, model: AccumulatorModel) -> np.ndarray:
    """One fused step on (M, N): terms is a list of (N, x, e, zero) arrays broadcastable to
    (M, N, L) (last axis summed) or (M, N); c_terms = (Mc, e_c, zero_c) of the accumulator.

    1. e_max = the largest assigned exponent (zero terms: e_zero).
    2. S = sum of trunc(N * 2^(x + F - e_max)) (integers in units of 2^(e_max - F)).
    3. Round S * 2^(e_max - F) to float32 (``final_rounding``); the sign of a zero result
       as :func:`step_zero` says (``zero_sign``).
    """
    mc, ec, zc = c_terms
    ez = _ez(model)
    F = model.frac_bits
    e_max = np.where(zc, ez, ec)
    for n, x, e, zero in terms:
        ee = np.where(zero, ez, e)
        e_max = np.maximum(e_max, ee.max(axis=-1) if ee.ndim == 3 else ee)
    total = shift_trunc(mc, (ec - 23) + F - e_max)
    for n, x, e, zero in terms:
        if n.ndim == 3:
            total = total + shift_trunc(n, x + F - e_max[..., None]).sum(axis=-1)
        else:
            total = total + shift_trunc(n, x + F - e_max)
    return step_zero(round_int_to_f32(total, e_max - F, model.final_rounding), model)


def _fdpa_group(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``"group"`` scales (``sm100-mxf4nvf4``): :func:`fp4spec.gemm_reference.fdpa_chain_step`
    per 64-element step over the whole tile."""
    qa, qb = quantum_exponent(a.values), quantum_exponent(b.values)
    ia = np.ldexp(a.values, qa).astype(_I64)
    ib = np.ldexp(b.values, qb).astype(_I64)
    nza, nzb = (ia != 0).astype(_I64), (ib != 0).astype(_I64)
    sma, sea, sza, nana, dsa = _scale_terms(a)
    smb, seb, szb, nanb, dsb = _scale_terms(b)
    G, L = model.group_size, model.k_step
    n_bits = _bits(G * int(np.max(np.abs(ia), initial=1)) * int(np.max(np.abs(ib), initial=1))
                   * int(np.max(sma, initial=1)) * int(np.max(smb, initial=1)))
    _check_bound(n_bits + max(model.frac_bits - qa - qb - dsa - dsb, 0) + _bits(L // G + 1), model.name)
    _check_bound(24 + max(model.frac_bits - 23, 0) + _bits(L // G + 1), model.name)
    acc = _initial(ops)
    for k0 in range(0, ia.shape[1], L):
        blocks_a = range(k0 // a.block, (k0 + L - 1) // a.block + 1)
        blocks_b = range(k0 // b.block, (k0 + L - 1) // b.block + 1)
        nan = (nana[:, blocks_a].any(axis=1)[:, None] | nanb[:, blocks_b].any(axis=1)[None, :]
               | np.isnan(acc))
        terms = []
        for g0 in range(k0, k0 + L, G):
            sl = slice(g0, g0 + G)
            d = ia[:, sl] @ ib[:, sl].T
            cnt = nza[:, sl] @ nzb[:, sl].T
            ba, bb = g0 // a.block, g0 // b.block
            n = d * sma[:, ba, None] * smb[None, :, bb]
            e = sea[:, ba, None] + seb[None, :, bb]
            zero = (cnt == 0) | sza[:, ba, None] | szb[None, :, bb]
            terms.append((n, e - dsa - dsb - qa - qb, e, zero))
        new = _fused(terms, f32_terms(acc), model)
        new = np.where(np.isinf(acc), acc, new)
        acc = np.where(nan, np.float32(np.nan), new).astype(np.float32)
    return acc


def _fp64_special(va: np.ndarray, vb: np.ndarray, acc: np.ndarray):
    """MMA-Sim's float64 check per output: (nan mask, inf mask, the float64 sum)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = (va[:, None, :] * vb[None, :, :]).sum(axis=-1) + acc.astype(np.float64)
    return np.isnan(s), np.isinf(s), s


def _fdpa_terms(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``"product"`` and ``"*_operand"`` scales (``sm100-mxf8f6f4``, ``sm90-bf16``): one term
    per product, chained steps of ``k_step``."""
    if model.scales == "product":
        ca, cb = element_carrier(model, a.element), element_carrier(model, b.element)
        ma, ea, za = decompose(a.values, ca)
        mb, eb, zb = decompose(b.values, cb)
        sma, sea, sza, _, dsa = _scale_terms(a)
        smb, seb, szb, _, dsb = _scale_terms(b)
        sma, sea, sza = a.scale_per_k(sma), a.scale_per_k(sea), a.scale_per_k(sza)
        smb, seb, szb = b.scale_per_k(smb), b.scale_per_k(seb), b.scale_per_k(szb)
        ma, mb = ma * sma, mb * smb
        ea, eb = np.where(za | sza, _I64(SENT), ea + sea), np.where(zb | szb, _I64(SENT), eb + seb)
        za, zb = za | sza, zb | szb
        pa, pb = ca.man_bits + dsa, cb.man_bits + dsb
        with np.errstate(invalid="ignore"):
            va = a.values * a.scale_per_k(a.scales)
            vb = b.values * b.scale_per_k(b.scales)
    else:
        car = FP32 if model.scales == "fp32_operand" else BF16
        va = _operands_rounded(a, car).astype(np.float64)
        vb = _operands_rounded(b, car).astype(np.float64)
        ma, ea, za = decompose(np.where(np.isfinite(va), va, 0.0), car)
        mb, eb, zb = decompose(np.where(np.isfinite(vb), vb, 0.0), car)
        pa = pb = car.man_bits
    _check_bound(_bits(int(np.max(np.abs(ma), initial=1)) * int(np.max(np.abs(mb), initial=1)))
                 + max(model.frac_bits - pa - pb, 0) + _bits(model.k_step + 1), model.name)
    return _chained_steps((ma, ea, za), (mb, eb, zb), pa + pb, va, vb, _initial(ops), model)


def _chained_steps(da, db, frac, va, vb, acc, model: AccumulatorModel) -> np.ndarray:
    """The chained fused steps of one term per product: for each ``k_step`` slice in ascending
    k, the products ``M_a M_b * 2^(e_a + e_b - frac)`` of the decomposed operands ``da``,
    ``db`` (``(M, e, zero)`` of a (M x K) and of b^T (N x K)) and the accumulator go through
    :func:`_fused`; then MMA-Sim's float64 check on the values ``va``, ``vb`` (same shapes):
    an Inf sum gives that Inf, a NaN sum NaN."""
    ma, ea, za = da
    mb, eb, zb = db
    L = model.k_step
    for k0 in range(0, ma.shape[1], L):
        sl = slice(k0, k0 + L)
        n = ma[:, None, sl] * mb[None, :, sl]
        e = ea[:, None, sl] + eb[None, :, sl]
        zero = za[:, None, sl] | zb[None, :, sl]
        new = _fused([(n, e - frac, e, zero)], f32_terms(acc), model)
        nan, inf, s = _fp64_special(va[:, sl], vb[:, sl], acc)
        with np.errstate(all="ignore"):
            new = np.where(inf, s.astype(np.float32), new)
        acc = np.where(nan, np.float32(np.nan), new).astype(np.float32)
    return acc


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

    1. Split every finite operand as ``M * 2^(e - 7)`` (:func:`decompose`, bf16 carrier;
       NaN and Inf count as 0 here).
    2. For k0 = 0, k_step, 2 k_step, ... in ascending order: the step's products
       ``a[m, k] * b[k, n]`` (exact terms ``M_a M_b * 2^(e_a + e_b - 14)``) and the running
       accumulator go through one fused step (:func:`_fused`: align to the largest exponent,
       truncate to F fractional bits, exact sum, ``final_rounding`` to float32, the model's
       ``zero_sign``); the result is the next step's accumulator.
    3. Special values per step, as MMA-Sim checks them: the float64 sum of the step's
       products and the accumulator; if it is +-Inf the step gives that Inf, if it is NaN
       (a NaN operand or accumulator, Inf * 0, Infs of both signs) the step gives NaN.

    NaN results are float32 NaNs with numpy's bits (callers that need the model's NaN,
    ``model.nan_bits``, canonicalize; :func:`fp4spec.rht.rht` does). The loop is
    :func:`_fdpa_terms`' (:func:`_chained_steps`) on operands already rounded to bf16."""
    model = get_accumulator(accumulator)
    if model.algorithm != "fdpa" or model.scales != "bf16_operand":
        raise ValueError(f"accumulator: {model.name!r} has algorithm {model.algorithm!r} and scales "
                         f"{model.scales!r}; model_dot needs a bf16 tensor-core model: algorithm 'fdpa' with scales "
                         f"'bf16_operand' (e.g. 'sm90-bf16')")
    with np.errstate(invalid="ignore"):  # a signalling NaN stays a NaN
        va = np.asarray(a, np.float32).astype(np.float64)
        vb = np.asarray(b, np.float32).astype(np.float64).T
    acc = np.asarray(acc, np.float32)
    if va.ndim != 2 or vb.ndim != 2 or va.shape[1] != vb.shape[1] or acc.shape != (va.shape[0], vb.shape[0]):
        raise ValueError(f"a, b, acc: expected a (M x K), b (K x N) and acc (M x N), got shapes "
                         f"{np.shape(a)}, {np.shape(b)} and {acc.shape}")
    if va.shape[1] % model.k_step:
        raise ValueError(f"a: K = {va.shape[1]} is not a multiple of the model's step {model.k_step}")
    da = decompose(np.where(np.isfinite(va), va, 0.0), BF16)
    db = decompose(np.where(np.isfinite(vb), vb, 0.0), BF16)
    return _chained_steps(da, db, 2 * BF16.man_bits, va, vb, acc, model)


def matmul_fdpa(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``fdpa``: chained fused steps, then the epilogue fp32(acc * g)."""
    acc = _fdpa_group(a, b, ops, model) if model.scales == "group" else _fdpa_terms(a, b, ops, model)
    return _canonical(_epilogue(acc, ops.g), model)


# =====================================================================================
# fdpa2 (AMD CDNA3)
# =====================================================================================

def _cdna3_step(n, e, zero, pa, pb, d, model: AccumulatorModel) -> np.ndarray:
    """:func:`fp4spec.gemm_reference.cdna3_step` on (M, N): n, e, zero are (M, N, G)."""
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


def matmul_fdpa2(a: Operand, b: Operand, ops: MatmulOperands, model: AccumulatorModel) -> np.ndarray:
    """``fdpa2`` with ``block_fma`` (``cdna3-fp8``): per block, the MFMA chain from +0 over
    groups of ``group_size``, then acc = fma32(d, fp32(sa * sb), acc); then the epilogue."""
    ca, cb = element_carrier(model, a.element), element_carrier(model, b.element)
    ma, ea, za = decompose(a.values, ca)
    mb, eb, zb = decompose(b.values, cb)
    pa, pb = ca.man_bits, cb.man_bits
    _check_bound(_bits(int(np.max(np.abs(ma), initial=1)) * int(np.max(np.abs(mb), initial=1)))
                 + model.frac_bits - pa - pb + _bits(model.group_size) + model.realign_bits - model.frac_bits + 1,
                 model.name)
    sa32, sb32 = a.scales.astype(np.float32), b.scales.astype(np.float32)
    acc = _initial(ops)
    G = model.group_size
    for blk in range(a.scales.shape[1]):
        d = np.zeros((ops.m, ops.n), np.float32)
        for g0 in range(blk * a.block, (blk + 1) * a.block, G):
            sl = slice(g0, g0 + G)
            n = ma[:, None, sl] * mb[None, :, sl]
            e = ea[:, None, sl] + eb[None, :, sl]
            zero = za[:, None, sl] | zb[None, :, sl]
            d = _cdna3_step(n, e, zero, pa, pb, d, model)
        with np.errstate(all="ignore"):
            s = sa32[:, blk, None] * sb32[None, :, blk]
        acc = fma32(d, s, acc)
    return _canonical(_epilogue(acc, ops.g), model)


_MATMULS = {"exact": matmul_exact, "fma": matmul_fma, "fdpa": matmul_fdpa, "fdpa2": matmul_fdpa2}


def matmul_emulated(qa, qb, model: AccumulatorModel, ops: MatmulOperands) -> np.ndarray:
    """C = A . B^T (float32, M x N) with ``model``, for operands already checked
    (:func:`fp4spec.matmul_operands.check_operands`)."""
    return _MATMULS[model.algorithm](operand(qa), operand(qb), ops, model)


__all__ = [
    "Operand",
    "bit_length",
    "decompose",
    "f32_terms",
    "fma32",
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
