"""Conformance properties of a block-scaled GEMM: bit-exact equality with a named accumulator model.

A backend claims one accumulator model (:mod:`fp4spec.accumulator_models`), e.g. a Blackwell
``tcgen05`` kernel claims ``"sm100-mxf4nvf4"``; :func:`check_matmul` then draws operands
from the families below (reproducible numpy generators, drawn from a seed or, to shrink, by
hypothesis) and
requires the backend's result to equal :func:`fp4spec.matmul` with that model, bit for bit,
NaN bit patterns included.

Case families (:data:`FAMILIES`), each aimed at a place where accumulator models differ:

* ``random`` -- uniform finite element codes (a third zeros), scales near 1, small c.
* ``wide_scales`` -- scale codes over the whole scale range (E8M0 2^-127 .. 2^127, UE4M3
  including 0), a third of them from each end: operand and result overflow and underflow,
  truncation of small blocks next to large ones; c of any exponent.
* ``cancellation`` -- products that cancel in pairs and against c, leaving a small residue
  that truncation or rounding can lose.
* ``nan_scales`` -- NaN block scales (E8M0 0xFF, UE4M3 0x7F) and NaN/Inf c.
* ``alignment`` -- c placed at exponent offsets around +-F of the largest product, with a
  full 24-bit significand: the cases where the alignment to F fractional bits, the final
  RZ/RNE and the position of c in the chain change the result.
* ``subnormal`` -- scales so small that results land in the float32 subnormal range (the
  exponent given to zero terms, ``e_zero``, and the sign of zero matter here).
* ``truncation`` -- in every K step two equal and opposite large terms cancel exactly and
  the small terms about 2^-F below them are what remains, so the alignment width F shows
  in the result's low bits (one fractional bit more or less changes it; the other families
  see F only by chance).
* ``scale_sign_bit`` -- UE4M3 scale bytes with bit 7 set (a ``float8_e4m3fn`` sign bit;
  0x80 and 0xFF among them), drawn only from schemes with UE4M3 block scales. Under the
  model's ``ue4m3_sign_bit="ignore"`` the result must equal the model's (the low 7 bits
  read); under ``"reject"`` the backend must refuse the operands with a ValueError
  (:func:`expects_refusal`).

A backend is a callable ``backend_matmul(qa, qb, *, accumulator, c) -> float32 (M, N)``.
The generators are plain numpy functions of a seed so that :mod:`.matmul_vectors` can write
the same cases to files.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel, get_accumulator
from fp4spec.matmul_operands import check_operands
from fp4spec.block_schemes import Scheme, get_scheme
from fp4spec.quantized import QuantizedTensor

FAMILIES = ("random", "wide_scales", "cancellation", "nan_scales", "alignment", "subnormal", "truncation",
            "scale_sign_bit")

#: Schemes tried for every model (those the model rejects are skipped).
CANDIDATE_SCHEMES = ("mxfp4", "nvfp4", "ufp4", "nvint4", "nvint4_e0m3", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3",
                     "mxfp6_e3m2")


# =====================================================================================
# Building operands
# =====================================================================================

def make_operand(codes, scale_codes, scheme: "str | Scheme", global_scale=None) -> QuantizedTensor:
    """A 2-d QuantizedTensor (rows x K, blocked along K) from raw element and scale codes."""
    sch = get_scheme(scheme)
    codes = np.asarray(codes, np.uint8)
    scale_codes = np.asarray(scale_codes, np.uint8)
    if codes.ndim != 2 or scale_codes.shape != (codes.shape[0], codes.shape[1] // sch.block_size) \
            or codes.shape[1] % sch.block_size:
        raise ValueError(f"codes, scale_codes: shapes {codes.shape} and {scale_codes.shape} do not fit blocks of "
                         f"{sch.block_size}")
    g = None if global_scale is None else np.float32(global_scale)
    if sch.global_scale and g is None:
        g = np.float32(1.0)
    return QuantizedTensor(codes, scale_codes, g, sch, 1, codes.shape)


def _code_of(fmt, value: float) -> int:
    for c in range(1 << fmt.bits):
        v = fmt.values[c]
        if v == value and math.copysign(1.0, v) == math.copysign(1.0, value):
            return c
    raise ValueError(f"value: {value!r} is not exactly representable in {fmt.name}")


def operand_from_values(values, scales, scheme: "str | Scheme", global_scale=None) -> QuantizedTensor:
    """A 2-d QuantizedTensor from exactly representable element values (rows x K) and block
    scale values (rows x K/block; ``nan`` for a NaN scale). Raises if a value is not exact."""
    sch = get_scheme(scheme)
    vals = np.asarray(values, np.float64)
    sc = np.asarray(scales, np.float64)
    codes = np.vectorize(lambda v: _code_of(sch.element, v), otypes=[np.uint8])(vals)
    nan = sch.scale.nan_codes[0] if sch.scale.nan_codes else None

    def scode(v):
        if math.isnan(v):
            if nan is None:
                raise ValueError(f"scales: {sch.scale.name} has no NaN")
            return nan
        return _code_of(sch.scale, v)

    scodes = np.vectorize(scode, otypes=[np.uint8])(sc)
    return make_operand(codes, scodes, sch, global_scale)


# =====================================================================================
# Reproducible case generators (numpy)
# =====================================================================================

@dataclasses.dataclass(frozen=True)
class MatmulCase:
    """One matmul input: operands, the initial accumulator c (None: +0) and its family."""

    family: str
    qa: QuantizedTensor
    qb: QuantizedTensor
    c: np.ndarray | None

    def describe(self) -> str:
        def op(q):
            return (f"{q.scheme.name}(block {q.scheme.block_size}) {q.shape} codes="
                    f"{np.asarray(q.codes).tolist()} scales={np.asarray(q.scales).tolist()} g={q.global_scale}")
        cs = None if self.c is None else [hex(int(b)) for b in self.c.view(np.uint32).ravel()]
        return f"family={self.family}\n  A: {op(self.qa)}\n  B: {op(self.qb)}\n  c bits: {cs}"


def k_unit(model: AccumulatorModel, scheme: Scheme) -> int:
    """The smallest K that fits whole blocks and whole steps of ``model``."""
    step = model.k_step if model.algorithm in ("fdpa", "fdpa2") else 1
    return math.lcm(step, scheme.block_size, model.group_size)


def schemes_for(model: "str | AccumulatorModel") -> tuple[str, ...]:
    """The candidate schemes ``model`` takes (A and B the same scheme)."""
    model = get_accumulator(model)
    out = []
    for name in CANDIDATE_SCHEMES:
        sch = get_scheme(name)
        k = k_unit(model, sch)
        z = make_operand(np.zeros((1, k)), np.full((1, k // sch.block_size), _unit_scale(sch)), sch)
        try:
            check_operands(model, z, z)
        except ValueError:
            continue
        if model.algorithm == "fdpa2":
            # every finite element value must fit the FP8 carrier, not only zero
            try:
                fin = np.array(sch.element.finite_codes, np.uint8)
                kk = math.lcm(k, len(fin))
                full = make_operand(np.resize(fin, (1, kk)), np.full((1, kk // sch.block_size), _unit_scale(sch)), sch)
                check_operands(model, full, full)
            except ValueError:
                continue
        out.append(name)
    return tuple(out)


def _unit_scale(sch: Scheme) -> int:
    return _code_of(sch.scale, 1.0)


def _valid_scale_codes(sch: Scheme) -> np.ndarray:
    nan = set(sch.scale.nan_codes)
    return np.array([c for c in range(1 << sch.scale.bits) if c not in nan], np.uint8)


def _elements(rng, sch: Scheme, shape, zero_p=0.33) -> np.ndarray:
    fin = np.array(sch.element.finite_codes, np.uint8)
    codes = rng.choice(fin, shape).astype(np.uint8)
    codes[rng.random(shape) < zero_p] = 0
    return codes


def _scales_near_one(rng, sch: Scheme, shape, spread=6) -> np.ndarray:
    valid = _valid_scale_codes(sch)
    vals = sch.scale.values[valid]
    logv = np.log2(np.where(vals > 0, vals, 2.0 ** -200))
    near = valid[np.abs(logv) <= spread]
    return rng.choice(near, shape).astype(np.uint8)


def _global(rng, sch: Scheme, wide=False):
    if not sch.global_scale:
        return None
    e = int(rng.integers(-60, 60)) if wide else int(rng.integers(-8, 8))
    return np.float32(np.float32(1.0 + rng.integers(0, 1 << 23) / (1 << 23)) * np.float32(2.0 ** e))


def _random_f32(rng, shape, emin=-30, emax=30) -> np.ndarray:
    man = rng.integers(0, 1 << 23, shape)
    e = rng.integers(emin, emax + 1, shape)
    v = np.ldexp(1.0 + man / float(1 << 23), e) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return v.astype(np.float32)


def _c_maybe(rng, m, n, emin=-20, emax=20):
    if rng.random() < 0.3:
        return None
    c = _random_f32(rng, (m, n), emin, emax)
    c[rng.random((m, n)) < 0.2] = 0.0
    return c


def gen_random(rng, model, sch, m, n, k):
    a = make_operand(_elements(rng, sch, (m, k)), _scales_near_one(rng, sch, (m, k // sch.block_size)), sch,
                     _global(rng, sch))
    b = make_operand(_elements(rng, sch, (n, k)), _scales_near_one(rng, sch, (n, k // sch.block_size)), sch,
                     _global(rng, sch))
    return MatmulCase("random", a, b, _c_maybe(rng, m, n))


def _extreme_scales(rng, sch: Scheme, shape) -> np.ndarray:
    """A third uniform over every valid scale code, a third from the 8 smallest, a third
    from the 8 largest (operand underflow and overflow, e.g. in a bf16 or fp32 upcast)."""
    valid = _valid_scale_codes(sch)
    order = valid[np.argsort(sch.scale.values[valid])]
    pick = rng.integers(0, 3, shape)
    return np.where(pick == 0, rng.choice(valid, shape),
                    np.where(pick == 1, rng.choice(order[:8], shape), rng.choice(order[-8:], shape))).astype(np.uint8)


def gen_wide_scales(rng, model, sch, m, n, k):
    nb = k // sch.block_size
    a = make_operand(_elements(rng, sch, (m, k)), _extreme_scales(rng, sch, (m, nb)), sch,
                     _global(rng, sch, wide=True))
    b = make_operand(_elements(rng, sch, (n, k)), _extreme_scales(rng, sch, (n, nb)), sch,
                     _global(rng, sch, wide=True))
    c = None if rng.random() < 0.3 else _random_f32(rng, (m, n), -149, 127)
    return MatmulCase("wide_scales", a, b, c)


def _dequant64(q: QuantizedTensor) -> np.ndarray:
    """Exact float64 values element * block scale (tensor scale not applied)."""
    sch = q.scheme
    v = sch.element.values[np.asarray(q.codes, np.intp)]
    s = np.repeat(sch.scale.values[np.asarray(q.scales, np.intp)], sch.block_size, axis=1)
    return v * s


def gen_cancellation(rng, model, sch, m, n, k):
    """Pairs a_{2j} = a_{2j+1}, b_{2j+1} = -b_{2j} cancel exactly; a few residue elements
    survive; c cancels the leading part of the exact sum when possible."""
    nb = k // sch.block_size
    fmt = sch.element
    ea = _elements(rng, sch, (m, k), zero_p=0.1)
    ea[:, 1::2] = ea[:, 0::2]
    eb = _elements(rng, sch, (n, k), zero_p=0.1)
    neg = None
    if fmt.signed:
        neg = np.arange(1 << fmt.bits, dtype=np.uint8)
        for code in fmt.finite_codes:
            if fmt.values[code] != 0:
                neg[code] = _code_of(fmt, -fmt.values[code])
    if neg is not None:
        eb[:, 1::2] = neg[eb[:, 0::2]]
    # residues: one element per row replaced at random
    for row in (ea, eb):
        idx = rng.integers(0, k, row.shape[0])
        row[np.arange(row.shape[0]), idx] = _elements(rng, sch, (row.shape[0],), zero_p=0.0)
    sa = _scales_near_one(rng, sch, (m, nb), spread=20)
    sb = _scales_near_one(rng, sch, (n, nb), spread=20)
    a = make_operand(ea, sa, sch, _global(rng, sch))
    b = make_operand(eb, sb, sch, _global(rng, sch))
    c = None
    if rng.random() < 0.7:
        exact = _dequant64(a) @ _dequant64(b).T     # may be inexact in float64: only a target
        c = (-exact * (1.0 + rng.choice([0.0, 2.0 ** -20, -(2.0 ** -30)]))).astype(np.float32)
    return MatmulCase("cancellation", a, b, c)


def gen_nan_scales(rng, model, sch, m, n, k):
    case = gen_random(rng, model, sch, m, n, k)
    nan = sch.scale.nan_codes[0]
    sa, sb = np.array(case.qa.scales), np.array(case.qb.scales)
    for s in (sa, sb):
        hit = rng.random(s.shape) < 0.15
        s[hit] = nan
    c = case.c
    if c is not None:
        c = c.copy()
        specials = np.array([np.nan, np.inf, -np.inf], np.float32)
        hit = rng.random(c.shape) < 0.2
        c[hit] = rng.choice(specials, int(hit.sum()))
    a = make_operand(case.qa.codes, sa, sch, case.qa.global_scale)
    b = make_operand(case.qb.codes, sb, sch, case.qb.global_scale)
    return MatmulCase("nan_scales", a, b, c)


def _frac_bits(model: AccumulatorModel) -> int:
    return model.frac_bits if model.frac_bits is not None else 24


def gen_alignment(rng, model, sch, m, n, k):
    """c = +-(1 + r 2^-23) * 2^(e_P + d), e_P the exponent of the largest |product|, d drawn
    around +-F; element products spread over a few binades."""
    case = gen_random(rng, model, sch, m, n, k)
    pa, pb = _dequant64(case.qa), _dequant64(case.qb)
    big = np.max(np.abs(pa[:, None, :] * pb[None, :, :]), axis=-1)
    big = np.where(big > 0, big, 1.0)
    F = _frac_bits(model)
    d = rng.integers(-F - 3, F + 4, (m, n))
    man = rng.integers(0, 1 << 23, (m, n))
    e = np.clip(np.floor(np.log2(big)).astype(np.int64) + d, -149, 127)
    c = np.ldexp(1.0 + man / float(1 << 23), e) * np.where(rng.random((m, n)) < 0.5, -1.0, 1.0)
    return MatmulCase("alignment", case.qa, case.qb, c.astype(np.float32))


def gen_subnormal(rng, model, sch, m, n, k):
    """Results in the float32 subnormal range. E8M0: scale products 2^-254 .. 2^-114, so
    that with c = +0 the exponent given to zero terms (e_zero) can be the largest; UE4M3:
    small block scales and tiny tensor scales."""
    nb = k // sch.block_size
    valid = _valid_scale_codes(sch)
    if sch.scale.name == "e8m0":
        sa = rng.integers(0, 51, (m, nb)).astype(np.uint8)
        sb = rng.integers(0, 91, (n, nb)).astype(np.uint8)
        ga = gb = None
    else:
        vals = sch.scale.values[valid]
        sa = rng.choice(valid[vals <= np.quantile(vals, 0.1)], (m, nb))
        sb = rng.choice(valid[vals <= 1.0], (n, nb))
        ga, gb = np.float32(2.0 ** -100), np.float32(2.0 ** -40)
    a = make_operand(_elements(rng, sch, (m, k)), sa, sch, ga)
    b = make_operand(_elements(rng, sch, (n, k)), sb, sch, gb)
    c = None if rng.random() < 0.5 else _random_f32(rng, (m, n), -149, -120)
    return MatmulCase("subnormal", a, b, c)


def _negation(fmt) -> np.ndarray | None:
    """code -> code of the negated value (None for an unsigned format)."""
    if not fmt.signed:
        return None
    neg = np.arange(1 << fmt.bits, dtype=np.uint8)
    for code in fmt.finite_codes:
        if fmt.values[code] != 0:
            neg[code] = _code_of(fmt, -fmt.values[code])
    return neg


def _nearest_scale_codes(sch: Scheme, log2_target: np.ndarray) -> np.ndarray:
    """The positive, non-NaN scale code whose log2 value is nearest each target."""
    valid = _valid_scale_codes(sch)
    vals = sch.scale.values[valid]
    valid, logv = valid[vals > 0], np.log2(vals[vals > 0])
    return valid[np.argmin(np.abs(logv[None, :] - np.ravel(log2_target)[:, None]), axis=1)].reshape(
        np.shape(log2_target)).astype(np.uint8)


def gen_truncation(rng, model, sch, m, n, k):
    """Every K step starts with two equal and opposite large terms (2u products, u the
    model's products per term: its group for ``"group"`` scales, else 1), which cancel
    exactly; the rest of the step is small terms about 2^-F below them (F the model's
    fractional bits; block scales and small element values set the distance, a few bits
    either side). The result is the sum of the small terms as the alignment cut leaves them,
    so F (and the truncation of the accumulator) shows in its low bits: one fractional bit
    more or less changes it. c is +0 or about as small as the small terms."""
    F = _frac_bits(model)
    fmt, blk, ku = sch.element, sch.block_size, k_unit(model, sch)
    u = model.group_size if model.scales == "group" else 1
    fin = np.array([c for c in fmt.finite_codes if fmt.values[c] != 0], np.uint8)
    mag = np.abs(fmt.values[fin])
    large, small = fin[mag >= np.median(mag)], fin[mag <= np.median(mag)]
    large_pos = large[fmt.values[large] > 0]
    neg = _negation(fmt)
    # the large blocks' scale: 2^[-2, 2] for E8M0, the top of the range for small-range scales
    valid = _valid_scale_codes(sch)
    top = valid[np.argsort(sch.scale.values[valid])][-4:]
    big_code = int(rng.choice(top)) if sch.scale.name != "e8m0" else int(127 + rng.integers(-2, 3))
    big_log2 = float(np.log2(sch.scale.values[big_code]))

    def operand(rows, negate):
        codes = _elements(rng, sch, (rows, k), zero_p=0.2)
        scales = np.empty((rows, k // blk), np.uint8)
        # each row's share of the distance: F/2 give or take a few bits
        t = np.rint((F + rng.integers(-6, 3, rows)) / 2.0)
        small_codes = _nearest_scale_codes(sch, big_log2 - t[:, None] + rng.integers(-1, 2, (rows, k // blk)))
        for p0 in range(0, k, ku):
            first = rng.choice(large_pos, (rows, u))
            codes[:, p0:p0 + u] = first
            codes[:, p0 + u:p0 + 2 * u] = neg[first] if (negate and neg is not None) else first
            big_blocks = range(p0 // blk, (p0 + 2 * u - 1) // blk + 1)
            for b in range(p0 // blk, (p0 + ku) // blk):
                scales[:, b] = big_code if b in big_blocks else small_codes[:, b]
            # elements sharing a large block's scale but not in the pair: small values
            lo, hi = p0 + 2 * u, min(p0 + ku, (big_blocks[-1] + 1) * blk)
            if hi > lo:
                codes[:, lo:hi] = rng.choice(small, (rows, hi - lo))
        return make_operand(codes, scales, sch, _global(rng, sch))

    a = operand(m, negate=False)
    b = operand(n, negate=True)
    c = None
    if rng.random() < 0.5:
        pa, pb = _dequant64(a)[:, :u], _dequant64(b)[:, :u]
        big = np.abs(pa @ pb.T)
        e = np.floor(np.log2(np.where(big > 0, big, 1.0))).astype(np.int64)
        d = np.clip(e - F + rng.integers(-3, 8, (m, n)), -149, 127)
        man = rng.integers(0, 1 << 23, (m, n))
        c = (np.ldexp(1.0 + man / float(1 << 23), d) * np.where(rng.random((m, n)) < 0.5, -1.0, 1.0)).astype(
            np.float32)
    return MatmulCase("truncation", a, b, c)


def gen_scale_sign_bit(rng, model, sch, m, n, k):
    """A ``random`` case whose UE4M3 scale bytes get bit 7 (A's half the time, B's a fifth,
    so that a block rarely has it on both sides, where reading it as a sign would cancel),
    one byte of A 0x80 (zero once bit 7 is cleared) and, in a third of the cases, one byte
    0xFF (0x7F, NaN) in an operand of more than one row (never every output NaN)."""
    if sch.scale.name != "ue4m3":
        raise ValueError(f"scheme: family 'scale_sign_bit' needs UE4M3 block scales; {sch.name!r} has "
                         f"{sch.scale.name}")
    case = gen_random(rng, model, sch, m, n, k)
    sa, sb = np.array(case.qa.scales), np.array(case.qb.scales)
    for s, p in ((sa, 0.5), (sb, 0.2)):
        s[rng.random(s.shape) < p] |= 0x80
    sa.flat[int(rng.integers(sa.size))] = 0x80
    tall = [s for s in (sa, sb) if s.shape[0] > 1]
    if tall and rng.random() < 1 / 3:
        s = tall[int(rng.integers(len(tall)))]
        s.flat[int(rng.integers(s.size))] = 0xFF
    return MatmulCase("scale_sign_bit", make_operand(case.qa.codes, sa, sch, case.qa.global_scale),
                      make_operand(case.qb.codes, sb, sch, case.qb.global_scale), case.c)


GENERATORS: dict[str, Callable] = {
    "random": gen_random,
    "wide_scales": gen_wide_scales,
    "cancellation": gen_cancellation,
    "nan_scales": gen_nan_scales,
    "alignment": gen_alignment,
    "subnormal": gen_subnormal,
    "truncation": gen_truncation,
    "scale_sign_bit": gen_scale_sign_bit,
}


def family_schemes(family: str, schemes) -> tuple[str, ...]:
    """The schemes (names or specs) a family draws A and B from: ``scale_sign_bit`` only
    those with UE4M3 block scales, the other families all of them."""
    if family != "scale_sign_bit":
        return tuple(schemes)
    return tuple(s for s in schemes if get_scheme(s).scale.name == "ue4m3")


def expects_refusal(model: AccumulatorModel, case: MatmulCase) -> bool:
    """True where ``model`` refuses the case's operands: a ``scale_sign_bit`` case under
    ``ue4m3_sign_bit="reject"`` (:func:`fp4spec.matmul` raises ValueError; a conforming
    backend raises ValueError too)."""
    return case.family == "scale_sign_bit" and model.ue4m3_sign_bit == "reject"


def refusal_failure(backend_matmul, case: MatmulCase, model: AccumulatorModel) -> str | None:
    """None when the backend refuses a case :func:`expects_refusal` says the model refuses
    (it raises ValueError), else what it did instead."""
    try:
        backend_matmul(case.qa, case.qb, accumulator=model.name, c=case.c)
    except ValueError:
        return None
    except Exception as err:  # noqa: BLE001 -- named in the failure
        return (f"raised {type(err).__name__}: {err}; accumulator {model.name!r} refuses a UE4M3 scale byte with "
                f"bit 7 set (ue4m3_sign_bit='reject'): expected a ValueError")
    byte = next(int(b) for q in (case.qa, case.qb) for b in np.ravel(q.scales) if int(b) & 0x80)
    return (f"accepted UE4M3 scale byte 0x{byte:02X} (bit 7 set), which accumulator {model.name!r} refuses "
            f"(ue4m3_sign_bit='reject'): expected a ValueError, got a result")


def generate_case(family: str, model: "str | AccumulatorModel", scheme: "str | Scheme", *, seed: int,
                  m: int = 3, n: int = 3, steps: int = 2) -> MatmulCase:
    """One reproducible case of ``family`` for ``model`` and ``scheme`` (A and B): M x K and
    N x K operands with K = ``steps`` times :func:`k_unit`."""
    if family not in GENERATORS:
        raise ValueError(f"family: {family!r} is not one of {', '.join(map(repr, FAMILIES))}")
    model = get_accumulator(model)
    sch = get_scheme(scheme)
    rng = np.random.default_rng(seed)
    return GENERATORS[family](rng, model, sch, m, n, steps * k_unit(model, sch))


# =====================================================================================
# Hypothesis strategies and the property check
# =====================================================================================

def draw_matmul_case(rng, model, family: str, schemes, max_dim: int = 4, max_steps: int = 3) -> MatmulCase:
    """One case drawn with numpy as :func:`matmul_cases` draws it with hypothesis."""
    s = schemes[int(rng.integers(len(schemes)))]
    m, n = int(rng.integers(1, max_dim + 1)), int(rng.integers(1, max_dim + 1))
    steps = int(rng.integers(1, max_steps + 1))
    return generate_case(family, model, s, seed=int(rng.integers(2 ** 32)), m=m, n=n, steps=steps)


def matmul_cases(model: "str | AccumulatorModel", family: str, schemes=None, max_dim: int = 4, max_steps: int = 3):
    """Hypothesis strategy of :class:`MatmulCase` for one family (scheme, shape and seed drawn)."""
    from hypothesis import strategies as st

    model = get_accumulator(model)
    schemes = tuple(schemes or schemes_for(model))
    return st.builds(
        lambda s, m, n, steps, seed: generate_case(family, model, s, seed=seed, m=m, n=n, steps=steps),
        st.sampled_from(schemes), st.integers(1, max_dim), st.integers(1, max_dim), st.integers(1, max_steps),
        st.integers(0, 2 ** 32 - 1))


def first_mismatch(expected: np.ndarray, got) -> str | None:
    """None when ``got`` equals ``expected`` bit for bit (float32, same shape), else a message."""
    got = np.asarray(got)
    if got.shape != expected.shape or got.dtype != np.float32:
        return f"expected a float32 array of shape {expected.shape}, got {got.dtype} {got.shape}"
    e, g = expected.view(np.uint32), got.view(np.uint32)
    bad = np.argwhere(e != g)
    if not len(bad):
        return None
    i, j = map(int, bad[0])
    return (f"{len(bad)} of {e.size} outputs differ; first at ({i}, {j}): expected 0x{int(e[i, j]):08X} "
            f"({float(expected[i, j])!r}), got 0x{int(g[i, j]):08X} ({float(got[i, j])!r})")


@dataclasses.dataclass(frozen=True)
class MatmulPropertyResult:
    """Outcome of one property over ``examples`` generated cases: ``status`` is ``"PASS"``,
    ``"FAIL"`` (a result differs, or a refused operand was accepted; ``failure`` holds the
    first mismatch and the shrunk case), ``"ERROR"`` (the backend raised; ``failure`` holds
    the exception) or ``"SKIP"`` (no scheme the family draws from; ``failure`` says why).

    ``case`` is the failing :class:`MatmulCase`, ``expected`` and ``actual`` the reference's
    and the backend's outputs for it (None where they do not exist)."""

    name: str
    accumulator: str
    status: str
    examples: int
    schemes: tuple[str, ...] = ()
    failure: str | None = None
    case: MatmulCase | None = None
    expected: np.ndarray | None = None
    actual: np.ndarray | None = None

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def __str__(self) -> str:
        head = f"{self.status} matmul[{self.accumulator}] {self.name} ({self.examples} examples)"
        return head if self.passed else f"{head}\n{self.failure}"


def check_matmul(backend_matmul: Callable, accumulator: "str | AccumulatorModel", *, seed: int = 0,
                 max_examples: int = 25, families=FAMILIES, schemes=None,
                 shrink: bool = True) -> list[MatmulPropertyResult]:
    """Check a backend's GEMM against ``fp4spec.matmul(..., accumulator=...)``, bit for bit.

    For every family (:data:`FAMILIES`) one property: for cases drawn by :func:`matmul_cases`
    (hypothesis, seeded by ``seed``, ``max_examples`` each, A and B from ``schemes``, default
    every scheme the model takes), ``backend_matmul(qa, qb, accumulator=name, c=c)`` equals
    :func:`fp4spec.matmul` in every bit (NaN patterns included). ``shrink=False`` draws the
    cases with numpy from ``seed`` (:func:`draw_matmul_case`; no hypothesis needed) and reports
    the first failing case as drawn. Returns one :class:`MatmulPropertyResult` per family. An
    exception from the reference itself propagates.
    """
    model = get_accumulator(accumulator)
    schemes = tuple(schemes or schemes_for(model))
    results = []
    for family in families:
        fs = family_schemes(family, schemes)
        if not fs:
            results.append(MatmulPropertyResult(family, model.name, "SKIP", 0, (), no_schemes_reason(family, schemes)))
        elif not shrink:
            results.append(_check_family_numpy(backend_matmul, model, family, fs, seed, max_examples))
        else:
            results += _check_families_hypothesis(backend_matmul, model, (family,), fs, seed, max_examples)
    return results


def no_schemes_reason(family: str, schemes) -> str:
    """Why a family has no scheme to draw from (``scale_sign_bit``: none with UE4M3 scales)."""
    return f"family {family!r} needs UE4M3 block scales; none among {', '.join(schemes) or 'the schemes checked'}"


def _check_family_numpy(backend_matmul, model, family, schemes, seed, max_examples) -> MatmulPropertyResult:
    from fp4spec.api.gemm import matmul

    rng = np.random.default_rng(seed)
    for i in range(max_examples):
        case = draw_matmul_case(rng, model, family, schemes)
        if expects_refusal(model, case):
            msg = refusal_failure(backend_matmul, case, model)
            if msg is not None:
                return MatmulPropertyResult(family, model.name, "FAIL", i + 1, schemes, f"{msg}\n{case.describe()}",
                                            case)
            continue
        want = matmul(case.qa, case.qb, accumulator=model, c=case.c)
        try:
            got = backend_matmul(case.qa, case.qb, accumulator=model.name, c=case.c)
        except Exception as err:  # noqa: BLE001 -- the backend raised: reported with the case
            return MatmulPropertyResult(family, model.name, "ERROR", i + 1, schemes,
                                        f"{type(err).__name__}: {err}\n{case.describe()}", case)
        msg = first_mismatch(want, got)
        if msg is not None:
            return MatmulPropertyResult(family, model.name, "FAIL", i + 1, schemes, f"{msg}\n{case.describe()}",
                                        case, want, np.asarray(got))
    return MatmulPropertyResult(family, model.name, "PASS", max_examples, schemes)


def _check_families_hypothesis(backend_matmul, model, families, schemes, seed, max_examples):
    """The hypothesis driver of :func:`check_matmul` (``shrink=True``)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed

    from fp4spec.api.gemm import matmul

    results = []
    for family in families:
        count = [0]
        last = [None]     # (message, case, expected, actual) of the latest failing case
        error = [None]    # (message, case) of a backend exception

        @hseed(seed)
        @settings(max_examples=max_examples, database=None, deadline=None, derandomize=False,
                  phases=(Phase.generate, Phase.shrink),
                  suppress_health_check=list(HealthCheck), print_blob=False, verbosity=Verbosity.quiet,
                  report_multiple_bugs=False)
        @given(matmul_cases(model, family, schemes))
        def prop(case):
            if error[0] is not None:        # a backend that raises is reported once, not shrunk
                return
            count[0] += 1
            if expects_refusal(model, case):
                msg = refusal_failure(backend_matmul, case, model)
                if msg is not None:
                    last[0] = (f"{msg}\n{case.describe()}", case, None, None)
                    raise AssertionError(last[0][0])
                return
            want = matmul(case.qa, case.qb, accumulator=model, c=case.c)
            try:
                got = backend_matmul(case.qa, case.qb, accumulator=model.name, c=case.c)
            except Exception as err:
                error[0] = (f"{type(err).__name__}: {err}\n{case.describe()}", case)
                return
            msg = first_mismatch(want, got)
            if msg is not None:
                last[0] = (f"{msg}\n{case.describe()}", case, want, got)
                raise AssertionError(last[0][0])

        def failed(note=None):
            msg, case, want, got = last[0]
            return MatmulPropertyResult(family, model.name, "FAIL", count[0], schemes,
                                        msg if note is None else f"{msg}\n{note}", case, want,
                                        None if got is None else np.asarray(got))

        try:
            prop()
            if error[0] is None:
                results.append(MatmulPropertyResult(family, model.name, "PASS", count[0], schemes))
            else:
                results.append(MatmulPropertyResult(family, model.name, "ERROR", count[0], schemes, error[0][0],
                                                    error[0][1]))
        except AssertionError:
            results.append(failed())
        except Exception:
            if last[0] is None:             # not a departure: a bug of the suite or of the reference
                raise
            # e.g. hypothesis' Flaky: the backend answered differently when the case was replayed
            results.append(failed("the backend's answer for this case was not reproducible on a replay"))
    return results


# =====================================================================================
# Counterexamples for the conformance report
# =====================================================================================

def _hex_row(codes, bits: int) -> str:
    width = 1 if bits <= 4 else 2
    return "".join(f"{int(v):0{width}X}" for v in np.ravel(codes))


def case_record(case: MatmulCase) -> dict:
    """The whole case as plain lists (JSON reports): element and scale codes, tensor scales
    (float32 bit patterns), c bits (None: +0); enough to replay it with :func:`make_operand`."""
    def g(q):
        return None if q.global_scale is None else f"0x{int(np.float32(q.global_scale).view(np.uint32)):08X}"

    return {"family": case.family, "scheme": case.qa.scheme.name, "scheme_b": case.qb.scheme.name,
            "a_codes": np.asarray(case.qa.codes).tolist(), "a_scales": np.asarray(case.qa.scales).tolist(),
            "a_global_bits": g(case.qa),
            "b_codes": np.asarray(case.qb.codes).tolist(), "b_scales": np.asarray(case.qb.scales).tolist(),
            "b_global_bits": g(case.qb),
            "c_bits": None if case.c is None else [[f"0x{int(b):08X}" for b in row]
                                                   for row in np.asarray(case.c, np.float32).view(np.uint32)]}


def _case_notes(case: MatmulCase, i: int | None = None, j: int | None = None) -> list[str]:
    from .report import f32_hex, f32_text

    qa, qb = case.qa, case.qb
    (m, k), n = np.shape(qa.codes), np.shape(qb.codes)[0]
    notes = [f"family {case.family}: A {qa.scheme.name} {m} x {k}, B {qb.scheme.name} {n} x {k}, "
             f"c {'given' if case.c is not None else '+0'}"]
    if i is None:
        return notes
    ea, eb = qa.scheme.element.bits, qb.scheme.element.bits
    notes.append(f"A row {i}: codes {_hex_row(qa.codes[i], ea)}, scales {_hex_row(qa.scales[i], 8)}")
    notes.append(f"B row {j}: codes {_hex_row(qb.codes[j], eb)}, scales {_hex_row(qb.scales[j], 8)}")
    if qa.global_scale is not None or qb.global_scale is not None:
        notes.append("tensor scales: " + ", ".join(
            f"{name} = {f32_text(q.global_scale)} ({f32_hex(q.global_scale)})"
            for name, q in (("gA", qa), ("gB", qb)) if q.global_scale is not None))
    if case.c is not None:
        notes.append(f"c[{i}, {j}] = {f32_text(case.c[i, j])} ({f32_hex(case.c[i, j])})")
    return notes


def mismatch_counterexample(case: MatmulCase, expected: np.ndarray, actual, accumulator: str, *,
                            prefix: str = "", where: dict | None = None):
    """A report :class:`~fp4spec.conformance.report.Counterexample` for a GEMM output that
    differs (None if ``actual`` equals ``expected`` bit for bit): the first differing output
    ``d[i, j]`` (row-major order) with both bit patterns and values, how many differ, row i of A and row j of B (element and scale codes in
    hex, one digit per 4-bit code), c[i, j], the tensor scales, and what the ``exact`` model
    gives there; the whole case in ``tensor`` (JSON reports)."""
    from fp4spec.api.gemm import matmul

    from .report import Counterexample, f32_hex, f32_text

    msg = first_mismatch(expected, actual)
    if msg is None:
        return None
    got = np.asarray(actual)
    ctx = {"accumulator": accumulator}
    if got.shape != expected.shape or got.dtype != np.float32:
        return Counterexample(prefix + msg, field="matmul", where=dict(where or {}), notes=_case_notes(case),
                              context=ctx, tensor=case_record(case))
    e, g = expected.view(np.uint32), got.view(np.uint32)
    bad = np.argwhere(e != g)
    i, j = map(int, bad[0])
    what = (f"{prefix}d[{i}, {j}]: expected 0x{int(e[i, j]):08X} ({f32_text(expected[i, j])}), got "
            f"0x{int(g[i, j]):08X} ({f32_text(got[i, j])}); {len(bad)} of {e.size} outputs differ")
    notes = _case_notes(case, i, j)
    try:
        x = matmul(case.qa, case.qb, accumulator="exact", c=case.c)[i, j]
        notes.append(f"the exact sum rounded once (model 'exact') is {f32_text(x)} ({f32_hex(x)})")
    except (ValueError, NotImplementedError):
        pass
    return Counterexample(what, field="matmul", expected=[f"0x{int(e[i, j]):08X}"],
                          actual=[f"0x{int(g[i, j]):08X}"], where={**(where or {}), "row": i, "column": j},
                          notes=notes, context=ctx, tensor=case_record(case))


def to_report_rows(results: list[MatmulPropertyResult]) -> list:
    """The results as rows of the conformance report
    (:class:`fp4spec.conformance.report.PropertyResult`): property ``matmul/<family>``,
    scheme the schemes drawn (comma-separated), rounding ``acc=<model>``.

    A backend that raised (``ERROR`` here) is a departure in the report: status ``FAIL``
    with a counterexample of field ``exception`` (the report keeps ``ERROR`` for failures of
    the suite itself). A differing result gives field ``matmul``
    (:func:`mismatch_counterexample`).
    """
    from .report import FAIL, SKIP, Counterexample, PropertyResult

    rows = []
    for r in results:
        if r.status == "SKIP":
            rows.append(PropertyResult(f"matmul/{r.name}", "*", f"acc={r.accumulator}", SKIP, reason=r.failure or ""))
            continue
        cx = None
        status = FAIL if r.status == "ERROR" else r.status
        if r.status == "FAIL" and r.case is not None and r.expected is not None:
            cx = mismatch_counterexample(r.case, r.expected, r.actual, r.accumulator)
            if r.failure and r.failure.endswith("not reproducible on a replay"):
                cx.notes.append(r.failure.rsplit("\n", 1)[-1])
        elif r.failure:
            first, _, rest = r.failure.partition("\n")
            field = "exception" if r.status == "ERROR" else "matmul"
            if field == "exception":
                first = f"matmul raised {first}"
            notes = _case_notes(r.case) if r.case is not None else \
                [line.strip() for line in rest.splitlines() if line.strip()]
            cx = Counterexample(first, field=field, notes=notes, context={"accumulator": r.accumulator},
                                tensor=None if r.case is None else case_record(r.case))
        rows.append(PropertyResult(f"matmul/{r.name}", ",".join(r.schemes), f"acc={r.accumulator}", status,
                                   examples=r.examples, counterexample=cx))
    return rows


__all__ = [
    "CANDIDATE_SCHEMES",
    "FAMILIES",
    "GENERATORS",
    "MatmulCase",
    "MatmulPropertyResult",
    "case_record",
    "check_matmul",
    "expects_refusal",
    "family_schemes",
    "first_mismatch",
    "generate_case",
    "k_unit",
    "make_operand",
    "matmul_cases",
    "mismatch_counterexample",
    "no_schemes_reason",
    "operand_from_values",
    "refusal_failure",
    "schemes_for",
    "to_report_rows",
]
