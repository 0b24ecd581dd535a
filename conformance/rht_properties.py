"""The ``rht`` conformance property: ``quantize(x, rht=)`` equals the reference bit for bit.

For every RHT spec a backend claims (``Capabilities.rht``, e.g. ``"16/fwht-fp32"``) and every
scheme and rounding (rne, sr) it claims, the backend's ``quantize(x, scheme, rht=r)`` must give
the reference's codes, scale codes and tensor-scale bits, and record ``r`` in the result. The
transforms checked: TransformerEngine's signs (size 16) and seeded signs, with each output dtype
the spec claims (a ``"size/arith"`` claim covers BF16 and float32 output).

Inputs (:func:`rht_tensor`, one kind each; x is float32, rows of ``lcm(k, size)`` elements):

==============  ==================================================================================
kind            what it is aimed at
==============  ==================================================================================
student_t       heavy-tailed data, half of it BF16-valued (TE's wgrad input): the ordinary case
wide_span       magnitudes spanning 2^40 and a cancelling pair ``(B, t, -B)`` at a butterfly
                pair: fwht-fp32 drops ``t`` where exact or reordered sums keep it (float64 sums,
                stages in another order, an MMA with another accumulation order)
bf16_ties       transformed values exactly halfway between two BF16 values (sizes 16, 64):
                catches a truncating or ties-away BF16 conversion of the RHT output
element_ties    transformed blocks whose scaled values are element-grid midpoints (MX; near them
                for two-level): the quantizer's ties, after the transform
specials        rows of +0, -0, NaN, +-Inf, values that overflow inside the butterfly, subnormal
                results (no flush to zero), signed-zero sums
==============  ==================================================================================

The bf16/element tie kinds are built backwards from the transformed values: integer targets
``w`` give ``x = s * (H w) / size``, so that the butterfly of ``s * x`` is exactly ``w`` and
``y = fp32(w * c)`` (exact for sizes 16 and 64).

Tensor-core arithmetics (``"mma:<model>"`` specs, e.g. ``"16/mma:sm90-bf16"``) take BF16
input only (:func:`fp4spec.rht.rht`, step M1), so every input is rounded to BF16 (RNE), and
the kinds whose point would not survive that rounding are built from BF16 values instead:
``bf16_ties`` and ``element_ties`` from rows with two non-zero entries ``u_0, u_q`` of
``u = s * x`` (every output is ``c * (u_0 +- u_q)``: with ``u_0 = a * 2^k``, ``u_q = 2^(k-1)``
each output is an odd 9-bit integer times a power of two, a BF16 tie; with ``c (u_0 +- u_q)``
= (grid top, a midpoint) half of the outputs are element midpoints), ``specials``' subnormal
rows from BF16 subnormals (multiples of 2^-133). ``wide_span`` keeps its cancelling pairs
``(B, t, -B)``: the fused MMA step keeps ``t`` when ``B / t`` is below about 2^25, which the
butterfly never does.

Backends whose ``quantize`` takes an ``axis`` keyword (torch, triton) are also checked
columnwise: ``quantize(x.T, axis=0, rht=r)`` -- TE's wgrad path -- must equal the rowwise
reference.
"""

from __future__ import annotations

import functools
import inspect
import math
import zlib
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from fp4spec.backends.base import Capabilities, as_numpy
from fp4spec.rht import MMA_PREFIX, RHT, hadamard

from . import builders, gen
from .compare import Departure, compare_quantized, depart, tensor_record
from .report import f32_hex

#: Input kinds of :func:`rht_tensor`.
RHT_KINDS = ("student_t", "wide_span", "bf16_ties", "element_ties", "specials")

#: Rounding modes the property runs for (among those a backend claims).
RHT_ROUNDINGS = ("rne", "sr")


# -- which transforms ------------------------------------------------------------------------------------

def rhts_for_spec(spec: str) -> list[RHT]:
    """The transforms checked for one claimed spec ``size/arith[/out_dtype]``: TE's signs (size
    16) and seeded signs, with the claimed output dtype or BF16 and float32; the first one
    (TE's with BF16 output for size 16) is the primary, checked on every input kind."""
    parts = spec.split("/")
    size, arith = int(parts[0]), parts[1]
    dtypes = (parts[2],) if len(parts) == 3 else ("bfloat16", "float32")
    out = []
    for i, dt in enumerate(dtypes):
        if size == 16:
            out.append(RHT.te(arith=arith, out_dtype=dt))
        out.append(RHT.from_seed(1000 + size + i, size, arith=arith, out_dtype=dt))
    return out


def claimed_rhts(caps: Capabilities) -> list[RHT]:
    """Every transform checked for a backend's claims (:func:`rhts_for_spec` of each claimed spec)."""
    return [r for spec in caps.rht for r in rhts_for_spec(spec)]


def applies_rht(t, caps: Capabilities) -> str | None:
    if not caps.rht:
        return "no RHT claimed (Capabilities.rht)"
    if t.scheme.structure not in ("mx", "two_level"):
        return f"RHT checked for MX and two-level schemes, not {t.scheme.structure}"
    return None


def _takes_axis(backend) -> bool:
    try:
        params = inspect.signature(backend.quantize).parameters
    except (TypeError, ValueError):
        return False
    return "axis" in params


# -- inputs ---------------------------------------------------------------------------------------------

def rht_shape(scheme, size: int, kind: str = "") -> tuple[int, int]:
    """(rows, cols): whole tiles (4 rows for 1 x k blocks, 8 for ``specials``: one per special
    kind; 16 for size 16, so that a transform down the columns -- the wrong axis -- is a
    16-point RHT too and can be recognized), and rows of lcm(k, size) elements, at least two
    RHT rows each."""
    k = scheme.block_size
    unit = k * size // math.gcd(k, size)
    cols = unit * max(1, (2 * size) // unit)
    want = 16 if size == 16 else 8 if kind == "specials" else 4
    rows = -(-want // scheme.tile_rows) * scheme.tile_rows
    return rows, cols


def _signs(r: RHT) -> np.ndarray:
    return np.array(r.signs, np.float64)


def _is_mma(r: RHT) -> bool:
    """True for a tensor-core arithmetic (``"mma:<model>"``: BF16 input only)."""
    return r.arith.startswith(MMA_PREFIX)


def _bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to BF16 (RNE), as float32."""
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _two_term_rows(rng, shape, r, u0, uq) -> np.ndarray:
    """x whose every RHT row has ``s * x`` = ``u0`` at position 0 and ``uq`` at a random
    position q > 0 (zeros elsewhere): each output is ``c * (u0 +- uq)`` (``H[0, j] = 1``).
    ``u0``, ``uq``: arrays of one value per RHT row."""
    rows, cols = shape
    n = r.size
    u = np.zeros((rows * cols // n, n))
    q = rng.integers(1, n, u.shape[0])
    u[:, 0] = u0
    u[np.arange(u.shape[0]), q] = uq
    return (u * _signs(r)).reshape(shape)


def _from_targets(w: np.ndarray, r: RHT) -> np.ndarray:
    """x with ``butterfly(s * x) == w`` exactly, rows of r.size along the last axis (w integers < 2^12)."""
    h = hadamard(r.size).astype(np.float64)
    rows = w.reshape(-1, r.size).astype(np.float64)
    x = (rows @ h) / r.size * _signs(r)  # H w / size: multiples of 1/size, exact in float32
    return x.reshape(w.shape)


def _scale_pow2(rng, x: np.ndarray, lo: int = -20, hi: int = 20) -> np.ndarray:
    """x times one power of two per row (exact: keeps ties ties)."""
    e = rng.integers(lo, hi, (x.shape[0], 1))
    return (x * np.exp2(e)).astype(np.float32)


def _student_t(rng, shape, r, scheme):
    x = rng.standard_t(3, shape) * np.exp2(rng.integers(-8, 9, (shape[0], 1)))
    x = x.astype(np.float32)
    half = rng.random(shape[0]) < 0.5
    x[half] = x[half].astype(ml_dtypes.bfloat16).astype(np.float32)
    return x


def _wide_span(rng, shape, r, scheme):
    rows, cols = shape
    n = r.size
    mant = rng.uniform(1, 2, shape)
    x = mant * np.exp2(rng.integers(-20, 20, shape)) * rng.choice([-1.0, 1.0], shape)
    s = np.tile(_signs(r), cols // n)
    for i in range(rows):
        if i % 2 == 0:
            continue  # even rows: random exponents over 2^40
        t_scale = np.exp2(float(rng.integers(-10, 10)))
        row = rng.standard_normal(cols) * t_scale  # the rest at t's scale, so t shows after rounding
        for c0 in range(0, cols, n):
            q = int(rng.integers(0, n // 4)) * 4
            big = np.exp2(float(rng.integers(24, 40))) * t_scale
            t = float(np.float32(rng.uniform(0.5, 1.5) * t_scale))
            row[c0 + q:c0 + q + 3] = (big, t, -big)  # the u-domain pattern: fp32(B + t) = B, then B - B
        x[i] = row * s  # u = s * x: the pattern sits in u
    return x.astype(np.float32)


def _bf16_ties_mma(rng, shape, r, scheme):
    # u0 = a * 2^k (a: 8 bits, 129..255), uq = +-2^(k-1): u0 +- uq = (2a +- 1) * 2^(k-1), odd 9-bit
    nrows = shape[0] * shape[1] // r.size
    k = rng.integers(0, 4, nrows)
    u0 = rng.integers(129, 256, nrows) * np.exp2(k) * rng.choice([-1.0, 1.0], nrows)
    uq = np.exp2(k - 1) * rng.choice([-1.0, 1.0], nrows)
    x = _two_term_rows(rng, shape, r, u0, uq)
    plain = rng.random(nrows) < 0.2  # some ordinary BF16 rows between them
    x.reshape(nrows, r.size)[plain] = _bf16(rng.standard_normal((int(plain.sum()), r.size)) * 64)
    return _scale_pow2(rng, x, -30, 30)


def _bf16_ties(rng, shape, r, scheme):
    if _is_mma(r):
        return _bf16_ties_mma(rng, shape, r, scheme)
    # w: odd 9-significant-bit integers times 2^0..3 -> y = w * c halfway between two BF16 values
    w = (256 + 2 * rng.integers(0, 128, shape) + 1) * np.exp2(rng.integers(0, 3, shape))
    w *= rng.choice([-1.0, 1.0], shape)
    w[:, ::5] = rng.integers(-300, 300, w[:, ::5].shape)  # some ordinary values between them
    return _scale_pow2(rng, _from_targets(w, r), -30, 30)


def _element_ties(rng, shape, r, scheme):
    grid = builders.element_grid(scheme)
    grid = grid[np.isfinite(grid) & (grid > 0)]
    top = float(np.max(grid))
    mids = (grid[:-1] + grid[1:]) / 2
    c = 1.0 / math.sqrt(r.size)
    if _is_mma(r):  # outputs c * (u0 +- uq) = +-top and +-m: each block's amax at the top, half midpoints
        nrows = shape[0] * shape[1] // r.size
        m = rng.choice(mids, nrows)
        sign = rng.choice([-1.0, 1.0], nrows)
        x = _two_term_rows(rng, shape, r, sign * (top + m) / (2 * c), sign * (top - m) / (2 * c))
        return _scale_pow2(rng, x, -10, 10)
    y = rng.choice(np.concatenate([mids, grid]), shape) * rng.choice([-1.0, 1.0], shape)
    k = scheme.block_size
    y.reshape(shape[0], -1, k)[:, :, 0] = top  # each block's amax at the grid's top: MX scale 2^0
    w = np.round(y / c * 4) / 4  # targets on a 1/4 grid; for sizes 16 and 64 exactly y / c
    return _scale_pow2(rng, _from_targets(w, r), -10, 10)


def _specials(rng, shape, r, scheme):
    rows, cols = shape
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    n = r.size
    plan = ["zero", "negzero", "nan", "inf", "overflow", "subnormal", "mixed_zero", "ninf"]
    f = np.finfo(np.float32)
    first = int(rng.integers(0, len(plan)))
    for i in range(rows):
        kind = plan[(i + first) % len(plan)]
        c0 = int(rng.integers(0, cols // n)) * n
        seg = slice(c0, c0 + n)
        if kind == "zero":
            x[i, seg] = 0.0
        elif kind == "negzero":
            x[i, seg] = -0.0
        elif kind == "mixed_zero":
            x[i, seg] = np.where(rng.random(n) < 0.5, np.float32(-0.0), np.float32(0.0))
        elif kind == "nan":
            x[i, c0 + int(rng.integers(0, n))] = np.nan
        elif kind == "inf":
            x[i, c0 + int(rng.integers(0, n))] = np.inf
        elif kind == "ninf":
            x[i, c0 + int(rng.integers(0, n))] = -np.inf
            x[i, c0 + int(rng.integers(0, n))] = np.inf  # inf - inf in a butterfly: NaN
        elif kind == "overflow":
            x[i, seg] = f.max * np.float32(0.75) * rng.choice([-1.0, 1.0], n).astype(np.float32)
        elif kind == "subnormal":  # mma: BF16 subnormals (multiples of 2^-133)
            tiny = np.float32(2.0 ** -133) if _is_mma(r) else f.smallest_subnormal
            x[i, seg] = tiny * rng.integers(-40, 40, n).astype(np.float32)
    return x


_BUILDERS = {"student_t": _student_t, "wide_span": _wide_span, "bf16_ties": _bf16_ties,
             "element_ties": _element_ties, "specials": _specials}


def rht_tensor(rng, scheme, r: RHT, kind: str) -> np.ndarray:
    """A float32 input of :data:`RHT_KINDS` ``kind`` for scheme and transform r (:func:`rht_shape`);
    for a tensor-core arithmetic (``"mma:<model>"``) every value is a BF16 value (RNE)."""
    if kind not in _BUILDERS:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(RHT_KINDS)}")
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.asarray(_BUILDERS[kind](rng, rht_shape(scheme, r.size, kind), r, scheme), np.float32)
        if _is_mma(r):
            x = _bf16(x)
    return np.ascontiguousarray(x, np.float32)


# -- the check ------------------------------------------------------------------------------------------

class RhtCase(SimpleNamespace):
    """One check: x (float32, blocked along the last axis), its random bits, the RHT, the kind,
    and whether the backend is asked columnwise (``axis=0`` on x.T)."""


def _call(env, fn, *args, _x=None, _rbits=None, **kw):
    return env._call("quantize", fn, *args, _x=_x, _rbits=_rbits, **kw)


def _ref(env, t, x, r, rbits, rounding=None):
    rnd = rounding or t.rounding
    kw = {} if r is None else {"rht": r}
    return env.reference.quantize(x, t.scheme, rounding=rnd, rbits=rbits if rnd == "sr" else None,
                                  sr_bits=t.sr_bits, **kw)


def _moved(q):
    """The backend's result with the blocked axis last, for comparison with the rowwise reference."""
    moved = getattr(q, "moved", None)
    if not callable(moved):
        return q
    m = moved()
    return SimpleNamespace(codes=as_numpy(m["codes"]), scales=as_numpy(m["scales"]),
                           global_scale=getattr(q, "global_scale", None), e1_8=None, e1_16=None)


def _same(a, b) -> bool:
    if a is None or b is None:
        return False
    for name in ("codes", "scales"):
        x, y = as_numpy(getattr(a, name, None)), as_numpy(getattr(b, name, None))
        if x is None or y is None or x.shape != y.shape or not np.array_equal(x.astype(np.int64), y.astype(np.int64)):
            return False
    ga, gb = getattr(a, "global_scale", None), getattr(b, "global_scale", None)
    if (ga is None) != (gb is None):
        return False
    return ga is None or f32_hex(as_numpy(ga)) == f32_hex(as_numpy(gb))


def _diagnose(env, t, case, got) -> tuple[str, list[str]]:
    """Which plausible mistake the backend's result matches (the reference run with it): the
    ``matches`` line and the note that explains it."""
    r, x, rb = case.rht, case.x, case.rbits
    tries = []
    if x.shape[0] % r.size == 0:
        tries.append(("wrong_axis", "the RHT applied along the wrong axis (down the columns, axis 0; along the "
                                    "blocked axis expected)",
                      "it equals quantize(rht.apply(x, axis=0)): the transform ran down the columns, not along "
                      "the blocked (last) axis"))
    if _is_mma(r):
        tries.append((RHT(r.size, r.signs, "fwht-fp32", r.out_dtype), "the float32 butterfly (fwht-fp32) where the "
                      f"tensor-core arithmetic {r.arith!r} is claimed",
                      "it equals the result with arith='fwht-fp32': the backend ran the float32 butterfly, not "
                      f"the tensor-core dot of {r.arith!r} (a fused step per k = 16 with truncation, every zero "
                      f"+0)"))
    if r.arith == "fwht-fp32":
        tries.append((RHT(r.size, r.signs, "float64", r.out_dtype), "the RHT summed in float64 (the float32 "
                      "butterfly fwht-fp32 expected)",
                      "it equals the result with the RHT summed in float64 (arith='float64'): the backend's "
                      "transform sums exactly or in another order, not the pinned float32 butterfly"))
    if r.out_dtype == "bfloat16":
        tries.append((RHT(r.size, r.signs, r.arith, "float32"), "no BF16 rounding of the RHT output",
                      "it equals the result without the BF16 rounding of the RHT output (out_dtype='float32')"))
    tries.append((None, "no RHT applied", "it equals quantize(x) without the RHT: the transform was not applied"))
    for alt, label, text in tries:
        try:
            if alt == "wrong_axis":
                with np.errstate(all="ignore"):
                    want = _ref(env, t, np.ascontiguousarray(r.apply(x, axis=0).astype(np.float32)), None, rb)
            else:
                want = _ref(env, t, x, alt, rb)
            if _same(got, want):
                return label, [text]
        except Exception:  # noqa: BLE001 -- a diagnosis only
            continue
    g = getattr(got, "global_scale", None)
    if t.scheme.structure == "two_level" and g is not None:
        plain = _ref(env, t, x, None, rb)
        with_rht = _ref(env, t, x, r, rb)
        if f32_hex(as_numpy(g)) == f32_hex(plain.global_scale) != f32_hex(with_rht.global_scale):
            return ("the tensor amax taken before the RHT (after it expected, as TE does)",
                    ["its tensor scale is the one of x before the RHT: the global amax must be taken after "
                     "the transform (TE)"])
    return "", []


def _transformed(x, r: RHT) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.ascontiguousarray(r.apply(x).astype(np.float32))


def check_rht(env, t, case: RhtCase) -> None:
    r, x, rb = case.rht, case.x, case.rbits
    rbits = rb if t.rounding == "sr" else None
    xr = case.xr if getattr(case, "xr", None) is not None else _transformed(x, r)
    ref = env.ref_quantize_rht(x, xr, t, r, rb)  # quantize(x, rht=r) is quantize(r.apply(x)) (Backend.quantize)
    if case.axis0:
        xt = np.ascontiguousarray(x.T)
        rbt = None if rbits is None else np.ascontiguousarray(rbits.T)
        q = _call(env, env.backend.quantize, xt, t.scheme, rounding=t.rounding, rbits=rbt, sr_bits=t.sr_bits,
                  rht=r, axis=0, _x=x, _rbits=rbits)
        got = _moved(q)
    else:
        q = env.quantize(x, t, rb, rht=r)
        got = q
    where = "columnwise (quantize(x.T, axis=0))" if case.axis0 else "rowwise"
    cx = compare_quantized(ref, got, xr, t.scheme, t.rounding, rbits, label=f"rht {r.spec}, {where}",
                           fields=("codes", "scales", "global_scale"), tally=env.tally)
    if cx is None:
        recorded = getattr(q, "rht", None)
        if recorded != r:
            raise depart(f"rht {r.spec}, {where}: the result records rht={recorded!r}, expected the transform it "
                         f"was asked for ({r}): a QuantizedTensor of rotated values must say so",
                         field="metadata", context={"rht": str(r)}, tensor=tensor_record(x, rbits))
        return
    cx.tensor = tensor_record(x, rbits)  # replayable: x before the transform
    cx.notes = [f"transform: {r} (signs {r.signs}); input kind {case.kind}",
                "the block inputs and scaled values shown are after the RHT (rht.apply(x) rounded to "
                f"{r.out_dtype}); the tensor record holds x before it"] + list(cx.notes)
    cx.matches, notes = _diagnose(env, t, case, got)
    cx.notes += notes
    cx.context = {**(cx.context or {}), "rht": r.spec, "rht_out": r.out_dtype, "rht_signs": f"0x{r.sign_mask():X}",
                  "layout": where}
    raise Departure(cx)


def _case(rng, t, r: RHT, kind: str, axis0: bool = False) -> RhtCase:
    """One deterministic check's input; x and its transform are built once for every rounding mode."""
    def build(g):
        x = rht_tensor(g, t.scheme, r, kind)
        return x, _transformed(x, r)

    x, xr = gen.memo(rng, ("rht", t.spec, r.spec, r.signs, r.out_dtype, kind), build)
    bits = np.random.default_rng(zlib.crc32(x.tobytes()))  # not from rng: sr rows get rne's inputs
    rb = builders.build_rbits(bits, x.shape, t.sr_bits, "uniform") if t.rounding == "sr" else None
    return RhtCase(x=x, rbits=rb, rht=r, kind=kind, axis0=axis0, xr=xr)


def _full_specs(specs) -> set[str]:
    """The claimed specs checked on every input kind: size 16 (TE's) and, per arithmetic, the
    smallest size claimed; the others get ``wide_span`` and one more kind."""
    full = {s for s in specs if s.split("/")[0] == "16"}
    smallest: dict[str, str] = {}
    for s in specs:
        arith = s.split("/", 1)[1]
        if arith not in smallest or int(s.split("/")[0]) < int(smallest[arith].split("/")[0]):
            smallest[arith] = s
    return full | set(smallest.values())


def explicit_rht(env, t, rng):
    """Per claimed spec: the primary transform on every kind for the specs of
    :func:`_full_specs` in the ``rne`` row (else on ``wide_span`` and one kind drawn from the
    row's seed: the ``sr`` row checks the rounding of transformed values, the ``rne`` row the
    transform), and columnwise on wide_span and student_t where the backend takes ``axis``; of
    the other transforms (seeded signs, float32 output) the first two (``sr``: one), on one kind
    each (rotating)."""
    axis0 = _takes_axis(env.backend)
    full = _full_specs(env.caps.rht) if t.rounding == "rne" else set()  # sr: the transform is rne's
    for spec in env.caps.rht:
        primary, *others = rhts_for_spec(spec)
        kinds = RHT_KINDS if spec in full else ("wide_span", RHT_KINDS[int(rng.integers(len(RHT_KINDS)))])
        for kind in dict.fromkeys(kinds):
            yield functools.partial(check_rht, env, t, _case(rng, t, primary, kind))
            if axis0 and kind in ("wide_span", "student_t"):
                yield functools.partial(check_rht, env, t, _case(rng, t, primary, kind, True))
        for i, r in enumerate(others[:2] if t.rounding == "rne" else others[:1]):
            kind = RHT_KINDS[(i + 1) % len(RHT_KINDS)]
            yield functools.partial(check_rht, env, t, _case(rng, t, r, kind, axis0 and i % 2 == 0))


def strategy_rht(env, t):
    rhts = claimed_rhts(env.caps)
    if not rhts:
        return None
    axis0 = _takes_axis(env.backend)

    def build(rng):
        r = rhts[int(rng.integers(len(rhts)))]
        kind = RHT_KINDS[int(rng.integers(len(RHT_KINDS)))]
        col = bool(rng.random() < 0.5)
        x = rht_tensor(rng, t.scheme, r, kind)
        rb = builders.build_rbits(rng, x.shape, t.sr_bits) if t.rounding == "sr" else None
        return RhtCase(x=x, rbits=rb, rht=r, kind=kind, axis0=col and axis0)

    return gen.Seeded(build)


__all__ = ["RHT_KINDS", "RHT_ROUNDINGS", "RhtCase", "applies_rht", "check_rht", "claimed_rhts", "explicit_rht",
           "rht_shape", "rht_tensor", "rhts_for_spec", "strategy_rht"]
