"""The conformance properties: what a backend must satisfy, each with the bug it would have caught.

A :class:`Property` has deterministic checks (exhaustive element tables, dense amax sweeps,
one input of every adversarial kind -- they run first, on every run) and a generator of
random examples (:class:`~fp4spec.conformance.gen.Gen`: numpy draws, or a hypothesis
strategy with ``--shrink``) whose examples are checked by the same function. A check raises
:class:`~fp4spec.conformance.compare.Departure` with the first counterexample.

=====================  ========  ==================================================================
property               scope     checks (bug it catches)
=====================  ========  ==================================================================
reference              rounding  codes, scale codes, tensor-scale bits (and HiF4 bits) equal the
                                 reference on every adversarial kind (divergences.md 17, 18)
decode_encode          rounding  encode(decode(c)) == c for every code; MX blocks of representable
                                 values quantize to themselves; dequantize is bit-exact (1, 6, 14)
monotonic              rounding  x <= y in one block => value(x) <= value(y) (4)
sign_symmetry          rounding  quantize(-x) == -quantize(x) (rup <-> rdn), scales equal (5)
saturation             rounding  finite input gives finite codes of the input's sign; values past
                                 the max saturate to +-max (7, 10)
ties_to_even           rne       scaled values exactly on a midpoint (and one ulp beside) round as
                                 RNE does; catches ties-away and divide-vs-reciprocal (2, 3)
selection              rne       IF4 and 4over6: blocks one float32 step from flipping their choice of
                                 candidate choose as the reference does (16)
scale_rule             scheme    scale codes follow the rule on a dense amax sweep; no finite block
                                 gets a NaN scale (9, 11)
special_values         scheme    all-zero, -0, NaN and Inf blocks (E8M0 zero block -> 0x00) (9, 14)
stochastic             sr        result is one of the two neighbours, a pure function of (x, rbits),
                                 unbiased, never all-zero for a non-zero block (8)
sr_statistics          sr        the same without replaying the random bits, for backends with their
                                 own generator: scales, adjacency, never all zero, unbiased, fresh (8)
packing                backend   low nibble first, golden byte (0x1, 0x7) -> 0x71 (13)
scale_layout           backend   cuBLAS 128x4 layout equals fp4spec.to_blocked, padding zero (12)
rht                    rne, sr   quantize(x, rht=) equals the reference for every claimed RHT spec
                                 (Capabilities.rht), rowwise and columnwise: float64 or reordered
                                 sums, a truncating BF16 conversion, amax before the transform
                                 (:mod:`~fp4spec.conformance.rht_properties`)
=====================  ========  ==================================================================

The reference for scheme properties is the numpy emulator (itself tested equal to the
scalar reference); element tables use :func:`fp4spec.elements.encode_scalar`.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import Any, Callable, Iterable

import numpy as np
from fp4spec.backends.base import Capabilities, as_numpy
from fp4spec.block_schemes import Scheme
from fp4spec.quantized import QuantizedTensor

from . import builders, chain, gen, rht_properties, selection, sr_statistics
from .compare import (
    Departure,
    compare_float32,
    compare_quantized,
    depart,
    tensor_record,
    tie_note,
    value_text,
)
from .env import Env, Target
from .report import Counterexample, code_hex, f32_hex, f32_text


@dataclasses.dataclass(frozen=True)
class Property:
    """One conformance property (see the module table)."""

    name: str
    title: str
    catches: str
    scope: str  # "rounding", "scheme" or "backend"
    check: Callable[[Env, Target, Any], None]
    explicit: Callable[[Env, Target, np.random.Generator], Iterable[Callable[[], None]]]
    strategy: Callable[[Env, Target], Any] = lambda env, t: None  # -> a gen.Gen or None
    applies: Callable[[Target, Capabilities], str | None] = lambda t, caps: None
    roundings: tuple[str, ...] | None = None  # rounding-scope properties: only these modes


# =====================================================================================================
# helpers
# =====================================================================================================

def _rbits(t: Target, shape, rng, style=None):
    return builders.build_rbits(rng, shape, t.sr_bits, style) if t.rounding == "sr" else None


def _bits_rng(x: np.ndarray) -> np.random.Generator:
    """A generator for the random bits of input x, seeded by x's bytes: drawing them does not move
    the generator the inputs come from, so ``sr`` rows check the same inputs as the others."""
    return np.random.default_rng(zlib.crc32(np.ascontiguousarray(x).tobytes()))


def _case(t: Target, x, rng, style=None) -> gen.Case:
    return gen.Case(x, _rbits(t, x.shape, _bits_rng(x), style))


def _tensor(rng, t: Target, kinds, rows=2, cols=2, spread=None, amax=None, typical: bool = True):
    """A deterministic input; ``typical``: tensor amax in 2^-3 .. 2^8 (so the first counterexample
    a kernel author sees has ordinary magnitudes), else anywhere in float32. Built once for all
    rounding modes (:func:`fp4spec.conformance.gen.memo`)."""
    key = ("tensor", t.spec, kinds if isinstance(kinds, str) else tuple(kinds), rows, cols, spread,
           None if amax is None else float(amax), typical)
    return gen.memo(rng, key, lambda r: _build_tensor(r, t, kinds, rows, cols, spread, amax, typical))


def _build_tensor(rng, t: Target, kinds, rows, cols, spread, amax, typical):
    if amax is None and typical:
        amax = builders.global_amax(rng, t.scheme, int(rng.integers(-3, 9)))
    if spread is None:
        spread = int(rng.choice(gen.SPREADS[:3] if typical else gen.SPREADS))
    if not isinstance(kinds, str):
        kinds = [kinds[i % len(kinds)] for i in range(rows * cols)]
    return builders.build_tensor(rng, t.scheme, kinds, block_rows=rows, block_cols=cols, amax=amax, spread=spread)


def _cases(env: Env, t: Target, tensors, *, constant_rbits=False) -> gen.Cases:
    return gen.Cases(t.scheme, t.rounding, tensors, sr_bits=t.sr_bits, constant_rbits=constant_rbits)


def _codes_of(q, x: np.ndarray, fmt, what: str) -> np.ndarray:
    """The backend's codes as int64, checked: x's shape, every entry a code of ``fmt``."""
    codes = as_numpy(getattr(q, "codes", None))
    if codes is None or codes.shape != x.shape:
        raise depart(f"{what}: codes of shape {None if codes is None else tuple(codes.shape)}, "
                     f"expected {tuple(x.shape)}", field="codes", tensor=tensor_record(x))
    c = codes.astype(np.int64)
    bad = (c < 0) | (c >= (1 << fmt.bits))
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise depart(f"{what}: codes{list(i)} = {int(c[i])} is not a {fmt.bits}-bit {fmt.name} code",
                     field="codes", tensor=tensor_record(x))
    return c


def _values(fmt, codes: np.ndarray) -> np.ndarray:
    return fmt.values[codes]


def _q_values(t: Target, q, codes: np.ndarray) -> np.ndarray:
    """Element values of a result's codes (IF4: by each block's flag, INT4 in E2M1 units)."""
    return chain.element_values(t.scheme, codes, as_numpy(getattr(q, "scales", None)))


def _block_inputs(x, scheme, row, col):
    k = scheme.block_size
    b = col // k
    return b, [f32_text(v) for v in x[row, b * k:(b + 1) * k]]


def _encode_cx(what, x, exp, act, fmt, rounding, r=None) -> Departure:
    i = int(np.argwhere(np.asarray(act).astype(np.int64) != np.asarray(exp).astype(np.int64))[0][0])
    notes = [n for n in [tie_note(np.float32(x[i]), fmt)] if n]
    ctx = {"rounding": rounding, **({} if r is None else {"rbits": int(np.asarray(r).ravel()[i])})}
    return depart(f"{what}: encode({f32_text(x[i])}, {fmt.name!r}, {rounding!r}) expected "
                  f"{code_hex(exp[i], fmt.bits)} ({value_text(fmt, exp[i])}), got {code_hex(act[i], fmt.bits)} "
                  f"({value_text(fmt, act[i])})", field="codes", inputs=[f32_text(x[i]), f32_hex(x[i])],
                  expected=[code_hex(exp[i], fmt.bits)], actual=[code_hex(act[i], fmt.bits)], notes=notes,
                  context=ctx)


def _check_encoded(env: Env, t: Target, x: np.ndarray, expected: np.ndarray, what: str, r=None) -> None:
    fmt = t.scheme.element
    act = as_numpy(env.encode(x, fmt.name, t.rounding, r, t.sr_bits))
    if act is None or act.shape != x.shape:
        raise depart(f"{what}: encode returned shape {None if act is None else act.shape}, expected {x.shape}",
                     field="codes")
    if not np.array_equal(act.astype(np.int64), expected.astype(np.int64)):
        raise _encode_cx(what, x, expected, act, fmt, t.rounding, r)


def _needs_encode(t: Target, caps: Capabilities) -> bool:
    return caps.supports("encode") and t.scheme.element.name in caps.element_formats()


def _raise_if(cx: Counterexample | None) -> None:
    if cx is not None:
        raise Departure(cx)


# =====================================================================================================
# reference: every field equals the reference
# =====================================================================================================

def check_reference(env: Env, t: Target, case: gen.Case) -> None:
    q_ref = env.ref_quantize(case.x, t, case.rbits)
    q = env.quantize(case.x, t, case.rbits)
    _raise_if(compare_quantized(q_ref, q, case.x, t.scheme, t.rounding, case.rbits, tally=env.tally))


def check_element_reference(env: Env, t: Target, rng) -> None:
    from fp4spec.api.elements import encode

    fmt = t.scheme.element
    x = builders.element_sweep(fmt)
    r = _rbits(t, x.shape, rng, "uniform")
    exp = encode(x, fmt, t.rounding, rbits=r, sr_bits=t.sr_bits)
    _check_encoded(env, t, x, exp, "element conversion", r)


#: Kinds the ``reference`` property also checks with a tensor amax anywhere in float32 (every
#: kind is checked with a typical one): those whose blocks follow the tensor amax's binade.
ATYPICAL_KINDS = ("ties", "binade_edge", "subnormal", "saturate", "random")


def explicit_reference(env: Env, t: Target, rng):
    for typical, kinds in ((True, builders.kinds_for(t.scheme)), (False, ATYPICAL_KINDS)):
        for kind in kinds:
            yield functools.partial(check_reference, env, t, _case(t, _tensor(rng, t, kind, typical=typical), rng))
    yield functools.partial(check_reference, env, t,
                            _case(t, _tensor(rng, t, builders.kinds_for(t.scheme)[:8], rows=4, cols=2, spread=250,
                                                 typical=False),
                                  rng))
    if _needs_encode(t, env.caps):
        yield functools.partial(check_element_reference, env, t, rng)


# =====================================================================================================
# decode_encode: identity on representable values; dequantize bit-exact
# =====================================================================================================

@dataclasses.dataclass(frozen=True)
class Representable:
    """MX input whose every value is an element value times its block scale (expected codes given)."""

    x: np.ndarray
    codes: np.ndarray
    scales: np.ndarray
    rbits: np.ndarray | None = None


def _representable(t: Target, rng) -> Representable:
    rows, cols = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    x, codes, scales = builders.representable_tensor(rng, t.scheme, rows, cols)
    return Representable(x, codes, scales, _rbits(t, x.shape, _bits_rng(x)))


def check_element_roundtrip(env: Env, t: Target, rng) -> None:
    fmt = t.scheme.element
    codes = np.array(fmt.finite_codes, np.int64)
    x = fmt.values[codes].astype(np.float32)
    r = _rbits(t, x.shape, rng, "uniform")
    _check_encoded(env, t, x, codes, "encode(decode(c)) identity", r)


def check_dequantize(env: Env, t: Target, case: gen.Case) -> None:
    q_ref = env.ref_quantize(case.x, t, case.rbits)
    expected = env.reference.dequantize(q_ref)
    got = env.dequantize(q_ref, case.x)
    diff = compare_float32(expected, got, "dequantize")
    if diff is None:
        return
    (row, col), e, a = diff[0], diff[1], diff[2]
    sch = t.scheme
    b = col // sch.block_size
    codes, scales = np.asarray(q_ref.codes), np.asarray(q_ref.scales)
    sc = int(scales[row, b]) if scales.ndim == 2 and scales.shape[-1] > b else None
    what = (f"dequantize[{row}, {col}]: code {code_hex(codes[row, col], sch.element.bits)} "
            f"({value_text(sch.element, codes[row, col])})"
            + ("" if sc is None else f", scale {code_hex(sc, sch.scale.bits)} ({value_text(sch.scale, sc)})")
            + f": expected {f32_text(e)} ({f32_hex(e)}), got {f32_text(a)} ({f32_hex(a)})")
    notes = []
    if sch.scale.name == "e8m0" and sc == 0:
        notes.append("E8M0 byte 0x00 is 2^-127, not zero (triton#11624)")
    g = getattr(q_ref, "global_scale", None)
    ctx = {"rounding": t.rounding} if g is None else {"rounding": t.rounding, "global_scale": f32_hex(g)}
    raise depart(what, field="dequantized", notes=notes, context=ctx, tensor=tensor_record(case.x, case.rbits))


def check_representable(env: Env, t: Target, ex: Representable) -> None:
    q = env.quantize(ex.x, t, ex.rbits)
    expected = QuantizedTensor(ex.codes, ex.scales, None, t.scheme, 1, ex.x.shape)
    cx = compare_quantized(expected, q, ex.x, t.scheme, t.rounding, ex.rbits, label="representable input")
    if cx is not None:
        cx.notes.append("every input is an element value times its block's power of two, with the block amax "
                        "where the scale rule gives exactly that power: quantizing must return exactly those codes")
        raise Departure(cx)


def check_decode_encode(env: Env, t: Target, ex) -> None:
    if isinstance(ex, Representable):
        check_representable(env, t, ex)
        if env.caps.supports("dequantize"):
            check_dequantize(env, t, gen.Case(ex.x, ex.rbits))
    else:
        check_dequantize(env, t, ex)


def explicit_decode_encode(env: Env, t: Target, rng):
    if _needs_encode(t, env.caps):
        yield functools.partial(check_element_roundtrip, env, t, rng)
    if t.scheme.structure == "mx":
        for _ in range(2):
            yield functools.partial(check_decode_encode, env, t, _representable(t, rng))
    if env.caps.supports("dequantize"):
        kinds = builders.kinds_for(t.scheme, ("subnormal", "single", "zero", "nonfinite", "random", "ties"))
        yield functools.partial(check_dequantize, env, t, _case(t, _tensor(rng, t, kinds, rows=2, cols=3), rng))


def strategy_decode_encode(env: Env, t: Target):
    if t.scheme.structure == "mx":
        return gen.Seeded(lambda rng: _representable(t, rng))
    if env.caps.supports("dequantize"):
        return _cases(env, t, gen.tensors(t.scheme))
    return None


def applies_decode_encode(t: Target, caps: Capabilities) -> str | None:
    if t.scheme.structure == "mx" or caps.supports("dequantize") or _needs_encode(t, caps):
        return None
    return "needs the 'encode' or 'dequantize' operation for a non-MX scheme"


# =====================================================================================================
# monotonic
# =====================================================================================================

def _unit(scheme: Scheme) -> int:
    """Elements that share one scale exactly: a block (HiF4: a level-3 group of 4)."""
    return 4 if scheme.structure == "hif4" else scheme.block_size


def check_monotonic(env: Env, t: Target, case: gen.Case) -> None:
    x = case.x
    q = env.quantize(x, t, case.rbits)
    fmt = t.scheme.element
    vals = _q_values(t, q, _codes_of(q, x, fmt, "monotonic"))
    u = _unit(t.scheme)
    xu, vu = x.reshape(-1, u), vals.reshape(-1, u)
    if np.isnan(vu).any():
        r, c = (int(v) for v in np.argwhere(np.isnan(vals))[0])
        raise depart(f"monotonic: x[{r}, {c}] = {f32_text(x[r, c])} (finite) gave a NaN code", field="codes",
                     tensor=tensor_record(x, case.rbits))
    order = np.argsort(xu, axis=1, kind="stable")
    xs, vs = np.take_along_axis(xu, order, 1), np.take_along_axis(vu, order, 1)
    bad = ((xs[:, 1:] > xs[:, :-1]) & (vs[:, 1:] < vs[:, :-1])) | ((xs[:, 1:] == xs[:, :-1]) & (vs[:, 1:] != vs[:, :-1]))
    if not bad.any():
        return
    unit, j = (int(v) for v in np.argwhere(bad)[0])
    i_lo, i_hi = unit * u + int(order[unit, j]), unit * u + int(order[unit, j + 1])
    cols = x.shape[1]
    (r1, c1), (r2, c2) = divmod(i_lo, cols), divmod(i_hi, cols)
    codes = np.asarray(q.codes)
    b, inputs = _block_inputs(x, t.scheme, r1, c1)
    raise depart(f"monotonic: x[{r1}, {c1}] = {f32_text(x[r1, c1])} <= x[{r2}, {c2}] = {f32_text(x[r2, c2])} in one "
                 f"block, but {code_hex(codes[r1, c1], fmt.bits)} ({value_text(fmt, codes[r1, c1])}) > "
                 f"{code_hex(codes[r2, c2], fmt.bits)} ({value_text(fmt, codes[r2, c2])})", field="codes",
                 inputs=inputs, where={"row": r1, "block": b}, context={"rounding": t.rounding},
                 tensor=tensor_record(x, case.rbits))


def check_element_monotonic(env: Env, t: Target, rng) -> None:
    fmt = t.scheme.element
    x = builders.element_sweep(fmt)
    x = x[np.isfinite(x)]
    r = None
    if t.rounding == "sr":
        r = np.full(x.shape, int(_bits_rng(x).integers(0, 1 << t.sr_bits)), np.uint32)
    act = as_numpy(env.encode(x, fmt.name, t.rounding, r, t.sr_bits))
    if act is None or act.shape != x.shape:
        raise depart(f"encode returned shape {None if act is None else act.shape}, expected {x.shape}")
    v = fmt.values[np.clip(act.astype(np.int64), 0, len(fmt.values) - 1)]
    bad = np.flatnonzero((v[1:] < v[:-1]) | np.isnan(v[1:]))
    if bad.size:
        i = int(bad[0])
        raise depart(f"monotonic: encode({f32_text(x[i])}) = {code_hex(act[i], fmt.bits)} "
                     f"({value_text(fmt, act[i])}) but the larger encode({f32_text(x[i + 1])}) = "
                     f"{code_hex(act[i + 1], fmt.bits)} ({value_text(fmt, act[i + 1])})", field="codes",
                     inputs=[f32_text(x[i]), f32_text(x[i + 1])], context={"rounding": t.rounding})


def explicit_monotonic(env: Env, t: Target, rng):
    if _needs_encode(t, env.caps):
        yield functools.partial(check_element_monotonic, env, t, rng)
    plan = [(k, True) for k in ("ties", "random", "binade_edge", "subnormal", "saturate")] + [("ties", False)]
    for kind, typical in plan:
        if kind not in builders.kinds_for(t.scheme):
            continue
        x = _tensor(rng, t, kind, typical=typical)
        r = None if t.rounding != "sr" else np.full(x.shape, int(_bits_rng(x).integers(0, 1 << t.sr_bits)), np.uint32)
        yield functools.partial(check_monotonic, env, t, gen.Case(x, r))


# =====================================================================================================
# sign symmetry
# =====================================================================================================

MIRROR = {"rup": "rdn", "rdn": "rup"}


def check_sign_symmetry(env: Env, t: Target, case: gen.Case) -> None:
    x = case.x
    with np.errstate(all="ignore"):
        neg = (-x).astype(np.float32)
    q1 = env.quantize(x, t, case.rbits)
    mirrored = MIRROR.get(t.rounding, t.rounding)
    q2 = env.quantize(neg, t, case.rbits, rounding=mirrored)
    fmt = t.scheme.element
    v1 = _q_values(t, q1, _codes_of(q1, x, fmt, "sign_symmetry"))
    v2 = _q_values(t, q2, _codes_of(q2, x, fmt, "sign_symmetry"))
    same = (v2 == -v1) | (np.isnan(v1) & np.isnan(v2))
    rule = f"quantize(-x, {mirrored!r}) must be -quantize(x, {t.rounding!r})"
    if not same.all():
        r, c = (int(v) for v in np.argwhere(~same)[0])
        b, inputs = _block_inputs(x, t.scheme, r, c)
        c1, c2 = np.asarray(q1.codes)[r, c], np.asarray(q2.codes)[r, c]
        raise depart(f"sign_symmetry: x[{r}, {c}] = {f32_text(x[r, c])} gives {code_hex(c1, fmt.bits)} "
                     f"({value_text(fmt, c1)}) but -x gives {code_hex(c2, fmt.bits)} ({value_text(fmt, c2)})",
                     field="codes", inputs=inputs, where={"row": r, "column": c, "block": b}, notes=[rule],
                     context={"rounding": t.rounding}, tensor=tensor_record(x, case.rbits))
    for name in ("scales", "global_scale", "e1_8", "e1_16"):
        a, b2 = as_numpy(getattr(q1, name, None)), as_numpy(getattr(q2, name, None))
        if a is None and b2 is None:
            continue
        if name == "global_scale":
            equal = a is not None and b2 is not None and f32_hex(a) == f32_hex(b2)
        else:
            equal = a is not None and b2 is not None and a.shape == b2.shape and np.array_equal(a, b2)
        if not equal:
            raise depart(f"sign_symmetry: {name} of -x differs from {name} of x (the amaxes are equal)",
                         field=name, notes=[rule], context={"rounding": t.rounding},
                         tensor=tensor_record(x, case.rbits))


def explicit_sign_symmetry(env: Env, t: Target, rng):
    for kind in builders.kinds_for(t.scheme, ("ties", "random", "single", "subnormal", "saturate")):
        yield functools.partial(check_sign_symmetry, env, t, _case(t, _tensor(rng, t, kind), rng))
    yield functools.partial(check_sign_symmetry, env, t,
                            _case(t, _tensor(rng, t, ("ties", "random"), rows=3, typical=False), rng))


# =====================================================================================================
# saturation
# =====================================================================================================

def check_saturation(env: Env, t: Target, case: gen.Case) -> None:
    x = case.x
    fmt = t.scheme.element
    q = env.quantize(x, t, case.rbits)
    q_ref = env.ref_quantize(x, t, case.rbits)
    codes = _codes_of(q, x, fmt, "saturation")
    v = _q_values(t, q, codes)
    ref_codes = np.asarray(q_ref.codes).astype(np.int64)
    v_ref = _q_values(t, q_ref, ref_codes)

    def fail(mask, why):
        r, c = (int(i) for i in np.argwhere(mask)[0])
        b, inputs = _block_inputs(x, t.scheme, r, c)
        raise depart(f"saturation: x[{r}, {c}] = {f32_text(x[r, c])}: {why}, got {code_hex(codes[r, c], fmt.bits)} "
                     f"({value_text(fmt, codes[r, c])}); the spec gives {code_hex(ref_codes[r, c], fmt.bits)} "
                     f"({value_text(fmt, ref_codes[r, c])})", field="codes", inputs=inputs,
                     where={"row": r, "column": c, "block": b}, context={"rounding": t.rounding},
                     tensor=tensor_record(x, case.rbits))

    fail_mask = ~np.isfinite(v) & np.isfinite(x)
    if fail_mask.any():
        fail(fail_mask, "a finite input must give a finite code (overflow saturates)")
    wrapped = (x != 0) & (v != 0) & (np.signbit(x) != np.signbit(v))
    if wrapped.any():
        fail(wrapped, "the code's sign differs from the input's (overflow into the sign bit?)")
    top = float(np.nanmax(np.abs(fmt.values[np.isfinite(fmt.values)])))  # IF4: 6 in both branches
    sat = (np.abs(v_ref) == top) & (codes != ref_codes)
    if sat.any():
        fail(sat, f"the value saturates to +-{top:g}")


def explicit_saturation(env: Env, t: Target, rng):
    for kinds in (("saturate",), ("binade_edge",), ("saturate", "ties", "random", "subnormal")):
        yield functools.partial(check_saturation, env, t, _case(t, _tensor(rng, t, kinds), rng))
    big = builders.global_amax(rng, t.scheme, 127, 2.0 - builders.ULP1)
    yield functools.partial(check_saturation, env, t, _case(t, _tensor(rng, t, "saturate", amax=big), rng))


def strategy_saturation(env: Env, t: Target):
    return _cases(env, t, gen.OneOf((gen.saturating_tensors(t.scheme), gen.extreme_amax_tensors(t.scheme))))


# =====================================================================================================
# ties to even
# =====================================================================================================

def check_element_ties(env: Env, t: Target, rng) -> None:
    from fp4spec.elements import encode_scalar

    fmt = t.scheme.element
    x = builders.element_tie_values(fmt)
    exp = np.array([encode_scalar(float(v), fmt, "rne") for v in x], np.int64)
    _check_encoded(env, t, x, exp, "ties_to_even (element)")


def explicit_ties(env: Env, t: Target, rng):
    if _needs_encode(t, env.caps):
        yield functools.partial(check_element_ties, env, t, rng)
    for kinds in ("ties", "scale_tie", ("ties", "scale_tie", "binade_edge", "ties")):
        yield functools.partial(check_reference, env, t, _case(t, _tensor(rng, t, kinds), rng))
    for kinds in ("ties", "scale_tie"):
        yield functools.partial(check_reference, env, t, _case(t, _tensor(rng, t, kinds, rows=4, cols=3, spread=40,
                                                                          typical=False), rng))


def applies_ties(t: Target, caps) -> str | None:
    if not chain.has_chain(t.scheme):
        return "HiF4 rounds ties away from zero by definition (its golden model); covered by 'reference'"
    return None


# =====================================================================================================
# scale rule
# =====================================================================================================

def amax_sweep(t: Target, rng, *, global_amax=None, exps=None) -> np.ndarray:
    """One block (tile) per amax: every exponent x every scale-rule edge significand."""
    sch = t.scheme
    sigs = np.array(builders.amax_significands(sch))
    if exps is None:
        exps = np.arange(-149, 128)
    exps = np.asarray(exps)[np.argsort(np.abs(np.asarray(exps)), kind="stable")]  # 2^0 first, then outward
    amaxes = np.ldexp(sigs[None, :], exps[:, None]).astype(np.float32).ravel()
    _, first = np.unique(amaxes, return_index=True)
    amaxes = amaxes[np.sort(first)]
    amaxes = amaxes[(amaxes > 0) & np.isfinite(amaxes)]
    if global_amax is not None:
        amaxes = np.concatenate([[np.float32(global_amax)], amaxes[amaxes <= global_amax]])
    return builders.random_blocks(rng, sch, amaxes)


def _mx_rule_exponent(amax: np.ndarray, scheme: Scheme):
    """The OCP formulas, restated exactly: floor/ceil(log2 amax) - emax_elem, clamped to [-127, 127]."""
    m, e = np.frexp(amax.astype(np.float64))  # amax = m * 2^e, m in [0.5, 1)
    fl = e - 1
    ce = np.where(m == 0.5, fl, fl + 1)
    base = fl if scheme.scale_rule == "floor" else ce
    return np.clip(base - scheme.element.emax, -127, 127)


SCALE_FIELDS = ("scales", "global_scale", "e1_8", "e1_16")


def check_scale_rule(env: Env, t: Target, case: gen.Case) -> None:
    x = case.x
    sch = t.scheme
    q = env.quantize(x, t, case.rbits)
    scales = as_numpy(getattr(q, "scales", None))
    k = sch.block_size
    nb = x.shape[1] // k
    if scales is None or scales.shape != (x.shape[0], nb):
        raise depart(f"scale_rule: scales of shape {None if scales is None else tuple(scales.shape)}, expected "
                     f"{(x.shape[0], nb)}", field="scales", tensor=tensor_record(x, case.rbits))
    s = scales.astype(np.int64)
    finite_block = np.isfinite(x.reshape(x.shape[0], nb, k)).all(axis=-1)
    nan_codes = set(sch.scale.nan_codes)
    bad = finite_block & (np.isin(s, list(nan_codes)) | (s < 0) | (s >= (1 << sch.scale.bits)))
    if bad.any():
        r, b = (int(i) for i in np.argwhere(bad)[0])
        raise depart(f"scale_rule: block {b} of row {r} is finite but its scale is {code_hex(s[r, b], sch.scale.bits)} "
                     f"({value_text(sch.scale, s[r, b]) if s[r, b] < len(sch.scale.values) else 'not a code'})",
                     field="scales", inputs=[f32_text(v) for v in x[r, b * k:(b + 1) * k]],
                     notes=["a finite block never gets the NaN scale (Model-Optimizer#1633)"],
                     tensor=tensor_record(x, case.rbits))
    if sch.structure == "mx" and sch.scale_rule in ("floor", "ceil"):
        amax = np.max(np.abs(x.reshape(x.shape[0], nb, k)), axis=-1)
        want = np.where(amax == 0, 0, _mx_rule_exponent(amax, sch) + 127)
        bad = finite_block & (s != want)
        if bad.any():
            r, b = (int(i) for i in np.argwhere(bad)[0])
            a = amax[r, b]
            raise depart(f"scale_rule: block amax {f32_text(a)} ({f32_hex(a)}): the {sch.scale_rule} rule gives "
                         f"E8M0 {code_hex(want[r, b], 8)} (2^{int(want[r, b]) - 127}), got {code_hex(s[r, b], 8)} "
                         f"(2^{int(s[r, b]) - 127})", field="scales",
                         inputs=[f32_text(v) for v in x[r, b * k:(b + 1) * k]],
                         notes=[f"X = 2^({sch.scale_rule}(log2 amax) - emax_elem) with emax_elem = "
                                f"{sch.element.emax} for {sch.element.name}, clamped to [-127, 127]"],
                         where={"row": r, "block": b}, tensor=tensor_record(x, case.rbits))
    q_ref = env.ref_quantize(x, t, case.rbits)
    _raise_if(compare_quantized(q_ref, q, x, sch, t.rounding, case.rbits, fields=SCALE_FIELDS))


def explicit_scale_rule(env: Env, t: Target, rng):
    sch = t.scheme
    if sch.structure == "two_level":
        for g in (np.float32(2688.0), np.float32(1.0), np.float32(3.0e38), np.float32(2.0 ** -120)):
            e = int(np.frexp(np.float64(g))[1]) - 1
            x = amax_sweep(t, rng, global_amax=g, exps=np.arange(max(e - 40, -149), e + 1))
            yield functools.partial(check_scale_rule, env, t, _case(t, x, rng))
    else:
        yield functools.partial(check_scale_rule, env, t, _case(t, amax_sweep(t, rng), rng))
    for kind in builders.kinds_for(sch, ("binade_edge", "scale_tie", "subnormal", "saturate")):
        yield functools.partial(check_scale_rule, env, t, _case(t, _tensor(rng, t, kind, rows=3, cols=2), rng))


def strategy_scale_rule(env: Env, t: Target):
    return _cases(env, t, gen.OneOf((gen.binade_edge_tensors(t.scheme), gen.finite_tensors(t.scheme),
                                     gen.extreme_amax_tensors(t.scheme))))


# =====================================================================================================
# special values
# =====================================================================================================

def check_special(env: Env, t: Target, case: gen.Case) -> None:
    x = case.x
    sch = t.scheme
    fmt = sch.element
    q = env.quantize(x, t, case.rbits)
    codes = _codes_of(q, x, fmt, "special_values")
    k = sch.block_size
    nb = x.shape[1] // k
    blocks = x.reshape(x.shape[0], nb, k)
    zero_block = (blocks == 0).all(axis=-1)
    vals = _q_values(t, q, codes).reshape(blocks.shape)
    nonzero = zero_block & (vals != 0).any(axis=-1)
    if nonzero.any():
        r, b = (int(i) for i in np.argwhere(nonzero)[0])
        raise depart(f"special_values: block {b} of row {r} is all zero but its codes are not",
                     field="codes", inputs=[f32_text(v) for v in blocks[r, b]],
                     actual=[code_hex(c, fmt.bits) for c in codes[r, b * k:(b + 1) * k]],
                     tensor=tensor_record(x, case.rbits))
    if sch.structure == "mx":
        scales = as_numpy(getattr(q, "scales", None))
        if scales is not None and scales.shape == zero_block.shape:
            wrong = zero_block & (scales.astype(np.int64) != 0)
            if wrong.any():
                r, b = (int(i) for i in np.argwhere(wrong)[0])
                raise depart(f"special_values: all-zero block {b} of row {r}: E8M0 scale must be 0x00 (2^-127), "
                             f"got {code_hex(scales[r, b], 8)}", field="scales",
                             inputs=[f32_text(v) for v in blocks[r, b]],
                             notes=["zero_block_scale: the rule gives e = -127 for amax = 0 (OCP, gfloat, TOSA); "
                                    "0xFF would be NaN and poison the block"], tensor=tensor_record(x, case.rbits))
            nan_block = np.isnan(blocks).any(axis=-1)
            if sch.policies["mx_nonfinite_block"] == "nan_scale":
                nan_block |= np.isinf(blocks).any(axis=-1)
            wrong = nan_block & (scales.astype(np.int64) != 0xFF)
            if wrong.any():
                r, b = (int(i) for i in np.argwhere(wrong)[0])
                raise depart(f"special_values: block {b} of row {r} holds NaN/Inf: its E8M0 scale must be 0xFF "
                             f"(NaN), got {code_hex(scales[r, b], 8)}", field="scales",
                             inputs=[f32_text(v) for v in blocks[r, b]], tensor=tensor_record(x, case.rbits))
    q_ref = env.ref_quantize(x, t, case.rbits)
    _raise_if(compare_quantized(q_ref, q, x, sch, t.rounding, case.rbits, tally=env.tally))


def _special_tensor(rng, t: Target, specials: list[float]) -> np.ndarray:
    sch = t.scheme
    ctx = builders.BlockContext(sch, (sch.tile_rows, sch.block_size), None)
    x = _tensor(rng, t, ("random", "zero"), rows=1, cols=2)
    ctx.ts = chain.tensor_scale_of_amax(np.nanmax(np.abs(np.array(specials + [1.0]))), sch)
    blk = builders.block_nonfinite(rng, ctx, np.max(np.abs(x)), specials)
    return np.concatenate([x, np.concatenate([blk, np.zeros_like(blk)], axis=1)], axis=0)


def explicit_special(env: Env, t: Target, rng):
    sch = t.scheme
    zero = np.zeros((sch.tile_rows * 2, sch.block_size * 2), np.float32)
    yield functools.partial(check_special, env, t, _case(t, zero, rng))
    yield functools.partial(check_special, env, t, _case(t, -zero, rng))
    mixed = zero.copy()
    mixed[:, ::3] = -0.0
    yield functools.partial(check_special, env, t, _case(t, mixed, rng))
    yield functools.partial(check_special, env, t, _case(t, _tensor(rng, t, ("zero", "single", "random", "zero")), rng))
    if sch.structure not in ("hif4", "if4"):  # both refuse NaN/Inf input
        for specials in ([np.nan], [np.inf], [-np.inf], [np.inf, -np.inf], [np.nan, np.inf]):
            yield functools.partial(check_special, env, t, _case(t, _special_tensor(rng, t, specials), rng))


def strategy_special(env: Env, t: Target):
    tensors = [gen.zero_tensors(t.scheme)]
    if t.scheme.structure not in ("hif4", "if4"):
        tensors.append(gen.nonfinite_tensors(t.scheme))
    return _cases(env, t, gen.OneOf(tuple(tensors)))


# =====================================================================================================
# stochastic rounding
# =====================================================================================================

def check_stochastic(env: Env, t: Target, case: gen.Case) -> None:
    x, r = case.x, case.rbits
    sch, fmt = t.scheme, t.scheme.element
    q = env.quantize(x, t, r)
    codes = _codes_of(q, x, fmt, "stochastic")
    again = env.quantize(x.copy(), t, None if r is None else r.copy())
    codes2 = _codes_of(again, x, fmt, "stochastic")
    if not np.array_equal(codes, codes2):
        rr, c = (int(i) for i in np.argwhere(codes != codes2)[0])
        b, inputs = _block_inputs(x, sch, rr, c)
        raise depart(f"stochastic: the same x and rbits gave {code_hex(codes[rr, c], fmt.bits)} then "
                     f"{code_hex(codes2[rr, c], fmt.bits)} at [{rr}, {c}]: SR must be a pure function of (x, rbits)",
                     field="codes", inputs=inputs, tensor=tensor_record(x, r))
    rtz = np.asarray(env.ref_quantize(x, t, rounding="rtz").codes).astype(np.int64)
    up = np.asarray(env.ref_quantize(x, t, rounding="rup").codes).astype(np.int64)
    dn = np.asarray(env.ref_quantize(x, t, rounding="rdn").codes).astype(np.int64)
    away = np.where(np.signbit(x), dn, up)
    if _one_candidate(sch):
        v, v_rtz, v_away = _values(fmt, codes), _values(fmt, rtz), _values(fmt, away)
        finite = np.isfinite(x)
        bad = finite & ~((v == v_rtz) | (v == v_away))
        if bad.any():
            rr, c = (int(i) for i in np.argwhere(bad)[0])
            b, inputs = _block_inputs(x, sch, rr, c)
            raise depart(f"stochastic: x[{rr}, {c}] = {f32_text(x[rr, c])} rounded to {code_hex(codes[rr, c], fmt.bits)} "
                         f"({value_text(fmt, codes[rr, c])}), not one of its neighbours "
                         f"{code_hex(rtz[rr, c], fmt.bits)} ({value_text(fmt, rtz[rr, c])}) and "
                         f"{code_hex(away[rr, c], fmt.bits)} ({value_text(fmt, away[rr, c])})", field="codes",
                         inputs=inputs, context={"rbits": int(np.asarray(r)[rr, c])}, tensor=tensor_record(x, r))
        k = sch.block_size
        nb = x.shape[1] // k
        blk_nonzero_rtz = (v_rtz.reshape(x.shape[0], nb, k) != 0).any(axis=-1)
        blk_zero = (v.reshape(x.shape[0], nb, k) == 0).all(axis=-1)
        bad = blk_nonzero_rtz & blk_zero
        if bad.any():
            rr, b = (int(i) for i in np.argwhere(bad)[0])
            raise depart(f"stochastic: block {b} of row {rr} came out all zero although rounding toward zero "
                         f"already gives non-zero codes", field="codes",
                         inputs=[f32_text(vv) for vv in x[rr, b * k:(b + 1) * k]],
                         notes=["TransformerEngine#3281: SR returned all-zero data"], tensor=tensor_record(x, r))
    _raise_if(compare_quantized(env.ref_quantize(x, t, r), q, x, sch, t.rounding, r, tally=env.tally))


def check_sr_statistics(env: Env, t: Target, rng, repeats: int = 256) -> None:
    """Over many independent random bits, each element rounds up with the spec's probability
    floor(frac * 2^N) / 2^N (z-test, |z| < 6: a correct backend fails with probability ~1e-9)."""
    sch, fmt = t.scheme, t.scheme.element
    base = _tensor(rng, t, "random", rows=1, cols=2, spread=0)
    reps = max(1, repeats // sch.tile_rows)
    x = np.tile(base, (reps, 1))
    r = builders.build_rbits(rng, x.shape, t.sr_bits, "uniform")
    q = env.quantize(x, t, r)
    codes = _codes_of(q, x, fmt, "stochastic")
    q_rtz = env.ref_quantize(x, t, rounding="rtz")
    rtz = np.asarray(q_rtz.codes).astype(np.int64)
    away = np.where(np.signbit(x), np.asarray(env.ref_quantize(x, t, rounding="rdn").codes),
                    np.asarray(env.ref_quantize(x, t, rounding="rup").codes)).astype(np.int64)
    lo, hi = np.abs(_values(fmt, rtz)), np.abs(_values(fmt, away))
    y = np.abs(chain.scaled_values(x, np.asarray(q_rtz.scales), sch).astype(np.float64))
    frac = np.where(hi > lo, (y - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0)
    scale = float(1 << t.sr_bits)
    p = np.floor(np.clip(frac, 0, 1) * scale) / scale
    went_up = (codes == away) & (away != rtz)
    n_up, expected = float(went_up.sum()), float(p.sum())
    var = float((p * (1 - p)).sum())
    if var < 1.0:
        return
    z = (n_up - expected) / np.sqrt(var)
    if abs(z) > 6.0:
        raise depart(f"stochastic: over {reps} repetitions of {base.size} values with uniform random bits, "
                     f"{int(n_up)} roundings went away from zero where the spec's probabilities give "
                     f"{expected:.0f} +- {np.sqrt(var):.0f} (z = {z:.1f}): SR is biased or ignores its random bits",
                     field="statistics", inputs=[f32_text(v) for v in base.ravel()[:sch.block_size]],
                     notes=["P(away from zero) = floor(frac * 2^N) / 2^N with frac the scaled value's position "
                            "between its two neighbours (StochasticA, N = sr_bits)"],
                     context={"sr_bits": t.sr_bits}, tensor=tensor_record(base))


def _one_candidate(sch: Scheme) -> bool:
    """False where a block chooses between candidates (4over6, IF4): rounding toward zero may choose
    another candidate than SR, so SR's neighbours are not those of the rtz/rup/rdn results."""
    return sch.scale_rule != "4over6" and sch.structure != "if4"


def explicit_stochastic(env: Env, t: Target, rng):
    if _one_candidate(t.scheme):
        yield functools.partial(check_sr_statistics, env, t, rng)
    for kind in builders.kinds_for(t.scheme, ("random", "ties", "subnormal")):
        yield functools.partial(check_stochastic, env, t, _case(t, _tensor(rng, t, kind), rng, "uniform"))


# =====================================================================================================
# packing and scale layout (backend-wide)
# =====================================================================================================

def check_packing(env: Env, t: Target, codes: np.ndarray) -> None:
    from fp4spec.packing import pack, unpack

    codes = np.asarray(codes, np.uint8)
    exp = pack(codes)
    act = as_numpy(env.pack(codes))
    if act is None or act.shape != exp.shape:
        raise depart(f"packing: pack of codes {codes.shape} returned shape {None if act is None else act.shape}, "
                     f"expected {exp.shape} (two codes per byte along the last axis)", field="packed")
    if not np.array_equal(act.astype(np.int64), exp.astype(np.int64)):
        idx = tuple(int(i) for i in np.argwhere(act.astype(np.int64) != exp.astype(np.int64))[0])
        a, b = codes[idx[:-1] + (2 * idx[-1],)], codes[idx[:-1] + (2 * idx[-1] + 1,)]
        got = int(act[idx])
        swapped = np.array_equal(act.astype(np.int64), pack(codes, order="hi_first").astype(np.int64))
        raise depart(f"packing: codes ({code_hex(a, 4)}, {code_hex(b, 4)}) at {list(idx[:-1]) + [2 * idx[-1]]} "
                     f"packed to {code_hex(got, 8)}, expected {code_hex(exp[idx], 8)}", field="packed",
                     inputs=[code_hex(a, 4), code_hex(b, 4)], expected=[code_hex(exp[idx], 8)],
                     actual=[code_hex(got, 8)],
                     notes=["the first (even-index) element goes in the low nibble: (0x1, 0x7) -> 0x71 "
                            "(pytorch/ao#2939)"],
                     matches="the nibbles swapped: high nibble first (low nibble first expected; pytorch/ao#2939)"
                     if swapped else "")
    if not np.array_equal(unpack(act), codes):
        raise depart("packing: unpack(pack(codes)) != codes", field="packed")


def explicit_packing(env: Env, t: Target, rng):
    yield functools.partial(check_packing, env, t, np.array([[0x1, 0x7]], np.uint8))
    a, b = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    yield functools.partial(check_packing, env, t, np.stack([a.ravel(), b.ravel()], axis=1).astype(np.uint8))
    yield functools.partial(check_packing, env, t, rng.integers(0, 16, (5, 34)).astype(np.uint8))


def strategy_packing(env: Env, t: Target):
    return gen.Seeded(lambda rng: rng.integers(0, 16, (int(rng.integers(1, 9)), 2 * int(rng.integers(1, 41))))
                      .astype(np.uint8))


def check_scale_layout(env: Env, t: Target, scales: np.ndarray) -> None:
    from fp4spec.layouts import blocked_shape, to_blocked

    rows, cols = scales.shape
    exp = to_blocked(scales)
    act = as_numpy(env.to_blocked(scales))
    if act is None or act.size != exp.size:
        rp, cp = blocked_shape(rows, cols)
        raise depart(f"scale_layout: to_blocked of a {rows} x {cols} scale matrix returned "
                     f"{None if act is None else act.size} bytes, expected {exp.size} = {rp} x {cp} (padded to "
                     f"128 x 4 tiles)", field="blocked")
    flat = act.reshape(-1).astype(np.int64)
    if np.array_equal(flat, exp.astype(np.int64)):
        return
    off = int(np.argwhere(flat != exp)[0][0])
    rp, cp = blocked_shape(rows, cols)
    idx = np.arange(rp * cp).reshape(rp, cp)
    inv = np.empty(rp * cp, np.int64)
    tiles = idx.reshape(rp // 128, 4, 32, cp // 4, 4).transpose(0, 3, 2, 1, 4).reshape(-1)
    inv[np.arange(rp * cp)] = tiles
    r, c = divmod(int(inv[off]), cp)
    padding = r >= rows or c >= cols
    what = (f"scale_layout: byte {off} of the blocked buffer ({'padding at' if padding else 'scale'} [{r}, {c}]) "
            f"expected {code_hex(exp[off], 8)}, got {code_hex(flat[off], 8)}")
    notes = ["padded entries must be zero bytes (vllm#45741, #48898)"] if padding else \
        ["offset(r, c) = ((r//128)*(C'/4) + c//4)*512 + (r%32)*16 + ((r%128)//32)*4 + c%4 (triton#917)"]
    raise depart(what, field="blocked", where={"offset": off, "row": r, "column": c}, notes=notes,
                 context={"shape": f"{rows}x{cols}"}, matches=_layout_mistake(scales, flat))


def _layout_mistake(scales: np.ndarray, flat: np.ndarray) -> str:
    """Which wrong layout a blocked buffer is: plain row-major, padded or not, or transposed."""
    from fp4spec.layouts import blocked_shape, to_blocked

    rows, cols = scales.shape
    rp, cp = blocked_shape(rows, cols)
    padded = np.zeros((rp, cp), np.int64)
    padded[:rows, :cols] = scales
    candidates = [(padded.reshape(-1), "plain row-major scales padded to 128 x 4 tiles, not swizzled (the cuBLAS "
                                       "128x4 layout expected)"),
                  (scales.reshape(-1).astype(np.int64), "plain row-major scales, neither padded nor swizzled (the "
                                                        "cuBLAS 128x4 layout expected)"),
                  (padded.T.reshape(-1), "the padded scale matrix in column-major order (the cuBLAS 128x4 layout "
                                         "expected)")]
    if rows <= 128 * 4 and cols <= 128:
        candidates.append((to_blocked(np.ascontiguousarray(scales.T)).astype(np.int64),
                           "the cuBLAS layout of the transposed scale matrix (rows and columns swapped)"))
    for want, text in candidates:
        if flat.size == want.size and np.array_equal(flat, want):
            return text
    return ""


def _scale_bytes(rng, rows, cols):
    return rng.integers(1, 255, (rows, cols)).astype(np.uint8)  # never 0: a zero must mean padding


def explicit_scale_layout(env: Env, t: Target, rng):
    for shape in ((1, 1), (128, 4), (129, 5), (300, 11), (33, 2), (256, 8)):
        yield functools.partial(check_scale_layout, env, t, _scale_bytes(rng, *shape))


def strategy_scale_layout(env: Env, t: Target):
    return gen.Seeded(lambda rng: _scale_bytes(rng, int(rng.integers(1, 301)), int(rng.integers(1, 13))))


def _applies_op(op):
    def applies(t: Target, caps: Capabilities) -> str | None:
        return None if caps.supports(op) else f"operation {op!r} not claimed"
    return applies


def _applies_packing(t: Target, caps: Capabilities) -> str | None:
    if not caps.supports("pack"):
        return "operation 'pack' not claimed"
    return None


# =====================================================================================================
# the registry
# =====================================================================================================

def _general_strategy(kind_strategy):
    def strategy(env: Env, t: Target):
        return _cases(env, t, kind_strategy(t.scheme))
    return strategy


PROPERTIES: dict[str, Property] = {p.name: p for p in [
    Property("reference", "codes, scale codes and tensor-scale bits equal the reference, on every adversarial kind",
             "any departure in any field (divergences.md 17, 18)", "rounding", check_reference, explicit_reference,
             _general_strategy(gen.adversarial_tensors)),
    Property("decode_encode", "encode(decode(c)) == c; representable MX blocks are kept; dequantize is bit-exact",
             "tt-metal#51971, brevitas#1126, triton#11624", "rounding", check_decode_encode, explicit_decode_encode,
             strategy_decode_encode, applies_decode_encode),
    Property("monotonic", "x <= y within a block gives value(x) <= value(y)", "gfloat#49", "rounding",
             check_monotonic, explicit_monotonic,
             lambda env, t: _cases(env, t, gen.finite_tensors(t.scheme), constant_rbits=True)),
    Property("sign_symmetry", "quantize(-x) == -quantize(x) (rup <-> rdn), equal scales", "QPyTorch#48", "rounding",
             check_sign_symmetry, explicit_sign_symmetry, _general_strategy(gen.finite_tensors)),
    Property("saturation", "finite input gives finite codes of its sign; overflow saturates to +-max",
             "ml_dtypes#400, ao#436, microxcaling#4", "rounding", check_saturation, explicit_saturation,
             strategy_saturation),
    Property("ties_to_even", "scaled values on a midpoint (or one ulp beside) round as RNE does",
             "aiter#3992, QPyTorch#23, arch-com#905 (divide vs reciprocal)", "rounding", check_reference,
             explicit_ties, _general_strategy(gen.tie_tensors), applies_ties, roundings=("rne",)),
    Property("selection", "blocks one float32 step from flipping their candidate choose as the reference does",
             "flashinfer#3448, miles#1261 (an equal error in another float32 order)", "rounding", check_reference,
             lambda env, t, rng: selection.explicit(env, t, rng, check_reference), selection.strategy,
             selection.applies, roundings=("rne",)),
    Property("scale_rule", "scale codes follow the rule on a dense amax sweep; finite blocks get finite scales",
             "FlyDSL#590, mase#321, mlxcel#1769, Model-Optimizer#1633", "scheme", check_scale_rule,
             explicit_scale_rule, strategy_scale_rule),
    Property("special_values", "all-zero, -0, NaN and Inf blocks; E8M0 zero block -> 0x00",
             "triton#11624, torchao/TOSA NaN blocks", "scheme", check_special, explicit_special, strategy_special),
    Property("stochastic", "one of the two neighbours, pure in (x, rbits), unbiased, never all-zero",
             "TransformerEngine#3281, brevitas#1294", "rounding", check_stochastic, explicit_stochastic,
             _general_strategy(gen.finite_tensors), roundings=("sr",)),
    Property("sr_statistics", "SR by its statistics (no replay): scales, neighbours, never all zero, unbiased, fresh",
             "TransformerEngine#3281 (all-zero SR on sm_120), biased or frozen hardware SR", "rounding",
             sr_statistics.check, sr_statistics.explicit, sr_statistics.strategy, sr_statistics.applies,
             roundings=("sr",)),
    Property("packing", "two codes per byte, first element in the low nibble", "pytorch/ao#2939", "backend",
             check_packing, explicit_packing, strategy_packing, _applies_packing),
    Property("scale_layout", "cuBLAS 128x4 blocked layout, padding zero", "vllm#45741, triton#917", "backend",
             check_scale_layout, explicit_scale_layout, strategy_scale_layout, _applies_op("to_blocked")),
    Property("rht", "quantize(x, rht=) equals the reference for each claimed RHT (TE and seeded signs, "
             "rowwise and columnwise)", "float64 or reordered RHT sums, truncating BF16 output, amax before the RHT",
             "rounding", rht_properties.check_rht, rht_properties.explicit_rht, rht_properties.strategy_rht,
             rht_properties.applies_rht, roundings=rht_properties.RHT_ROUNDINGS),
]}


def get_property(name: str) -> Property:
    try:
        return PROPERTIES[name]
    except KeyError:
        raise ValueError(f"property: {name!r} is not one of {', '.join(PROPERTIES)}") from None


__all__ = ["Env", "MIRROR", "PROPERTIES", "Property", "Representable", "Target", "amax_sweep", "get_property"]
