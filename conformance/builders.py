"""Adversarial inputs, built with numpy from a seeded generator.

These are the generators behind :mod:`fp4spec.conformance.strategies` (hypothesis draws the
structure and a seed, these functions fill in the numbers) and behind the test vectors of
:mod:`fp4spec.conformance.vectors`. Everything is float32 and exact: a "tie" is an input
whose *scaled* value, computed the way the spec computes it, is exactly the midpoint of two
adjacent element values -- so a kernel that divides where the spec multiplies by a
reciprocal (or rounds ties away) gives a different code.

Block kinds (one block is ``(tile_rows, block_size)``: a 1 x k row block, or an r x k tile):

* ``random``      -- values spread over many binades, the amax at a random position.
* ``ties``        -- scaled values exactly on midpoints and grid points, and one float32
  ulp either side of them.
* ``binade_edge`` -- the amax significand is 1.0, 1.5, 1.75, just below 2 (or just above
  one of those), other elements on binade edges below it.
* ``scale_tie``   -- two-level and IF4: the block scale before its UE4M3 cast is exactly a UE4M3
  midpoint (or one ulp beside one); the elements are ties under the resulting scale. MX:
  ``binade_edge``.
* ``subnormal``   -- float32 subnormals and values at the normal/subnormal boundary.
* ``saturate``    -- scaled values beyond the element max (amax significand above the
  element's top significand; two-level blocks tiny relative to the tensor amax).
* ``zero``        -- all +-0.0.  ``single`` -- one non-zero element, the rest +-0.0.
* ``nonfinite``   -- NaN and/or +-Inf among finite values.

Tensors (:func:`build_tensor`) place blocks on a grid; the first non-zero finite block
holds the global amax, the others get amaxes up to ``spread`` binades below it (wide
dynamic range across blocks), and the global amax itself may be extreme (near FLT_MAX, at
the float32 normal boundary, subnormal).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from fp4spec.block_schemes import Scheme

from . import chain

F32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)
ULP1 = 2.0 ** -23

BLOCK_KINDS = ("random", "ties", "binade_edge", "scale_tie", "subnormal", "saturate", "zero", "single",
               "nonfinite")
#: Kinds whose blocks hold only finite values.
FINITE_KINDS = tuple(k for k in BLOCK_KINDS if k != "nonfinite")


def kinds_for(scheme: Scheme, kinds=BLOCK_KINDS) -> tuple[str, ...]:
    """The kinds that make sense for a scheme: HiF4 and IF4 refuse NaN/Inf input (the reference raises)."""
    if scheme.structure in ("hif4", "if4"):
        return tuple(k for k in kinds if k != "nonfinite")
    return tuple(kinds)


def amax_significands(scheme: Scheme) -> tuple[float, ...]:
    """Significands in [1, 2) at which scale rules change their answer (and one ulp beside them):
    1.0 (floor/ceil), 1.5 (rceil for max 6), 1.75, just below 2, and 2 - 2^-(m+1) (``even``
    rounds the amax to the element's m mantissa bits)."""
    return _amax_significands(scheme.element.mantissa_bits, scheme.max_elem)


@functools.lru_cache(maxsize=None)
def _amax_significands(m: int, max_elem: float) -> tuple[float, ...]:
    top_sig = max_elem / 2.0 ** np.floor(np.log2(max_elem))
    base = {1.0, 1.25, 1.5, 1.75, 2.0 - ULP1, 2.0 - 2.0 ** -(m + 1), float(top_sig)}
    out = set()
    for s in base:
        for d in (-ULP1, 0.0, ULP1):
            v = s + d
            if 1.0 <= v < 2.0:
                out.add(v)
    return tuple(sorted(out))


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, np.float32).view(np.int32)


def ulp_step(x: np.ndarray, steps) -> np.ndarray:
    """Move non-negative float32 values ``steps`` ulps (negative: down), staying >= 0 and finite."""
    b = _bits(np.abs(np.asarray(x, np.float32))).astype(np.int64) + np.asarray(steps, np.int64)
    b = np.clip(b, 0, 0x7F7FFFFF)
    return b.astype(np.int32).view(np.float32)


def _pow2(sig, exp) -> np.ndarray:
    with np.errstate(over="ignore", under="ignore"):
        v = np.ldexp(np.asarray(sig, np.float64), np.asarray(exp, np.int64)).astype(np.float32)
    return np.minimum(v, F32(FLT_MAX))


def _signs(rng, shape) -> np.ndarray:
    return np.where(rng.random(shape) < 0.5, F32(-1.0), F32(1.0))


def _place_amax(rng, block: np.ndarray, amax) -> np.ndarray:
    """Put +-amax at a random position (every other |value| is already <= amax)."""
    flat = block.reshape(-1)
    i = int(rng.integers(flat.size))
    flat[i] = F32(amax) * (F32(-1.0) if rng.random() < 0.5 else F32(1.0))
    return block


def element_grid(scheme: Scheme) -> np.ndarray:
    """Finite non-negative element magnitudes, ascending (float64)."""
    v = scheme.element.values
    return np.unique(np.abs(v[np.isfinite(v)]))


# -- blocks ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class BlockContext:
    """What a block builder needs: the scheme, the block shape, the tensor scale (two-level)."""

    scheme: Scheme
    shape: tuple[int, int]
    ts: object = None


def _random_magnitudes(rng, n, amax) -> np.ndarray:
    style = int(rng.integers(3))
    if style == 0:
        u = np.abs(rng.standard_normal(n))
        u = u / max(u.max(), 1e-300)
    elif style == 1:
        u = rng.random(n)
    else:
        u = 2.0 ** (-rng.random(n) * rng.choice([4.0, 12.0, 30.0]))
    u[rng.random(n) < 0.05] = 0.0
    with np.errstate(under="ignore"):
        return np.minimum((u * float(amax)).astype(np.float32), F32(amax))


def random_blocks(rng, scheme: Scheme, amaxes) -> np.ndarray:
    """One ``random`` block (tile) per amax, stacked: ``(len(amaxes) * tile_rows, block_size)``
    float32 -- :func:`block_random` for many amaxes at once (the scale-rule sweeps)."""
    amaxes = np.asarray(amaxes, np.float32)
    nb, r, k = len(amaxes), scheme.tile_rows, scheme.block_size
    n = r * k
    style = rng.integers(0, 3, nb)[:, None]
    normal = np.abs(rng.standard_normal((nb, n)))
    normal /= np.maximum(normal.max(axis=1, keepdims=True), 1e-300)
    depth = rng.choice([4.0, 12.0, 30.0], (nb, 1))
    u = np.where(style == 0, normal, np.where(style == 1, rng.random((nb, n)), 2.0 ** (-rng.random((nb, n)) * depth)))
    u[rng.random((nb, n)) < 0.05] = 0.0
    with np.errstate(under="ignore"):
        x = np.minimum((u * amaxes[:, None].astype(np.float64)).astype(np.float32), amaxes[:, None])
    x *= _signs(rng, (nb, n))
    pos = rng.integers(0, n, nb)
    x[np.arange(nb), pos] = amaxes * _signs(rng, nb)
    return x.reshape(nb * r, k).astype(np.float32)


def block_random(rng, ctx: BlockContext, amax) -> np.ndarray:
    n = int(np.prod(ctx.shape))
    x = _random_magnitudes(rng, n, amax) * _signs(rng, n)
    return _place_amax(rng, x.reshape(ctx.shape).astype(np.float32), amax)


def _block_multiplier(ctx: BlockContext, amax) -> np.float32 | None:
    sch = ctx.scheme
    if not chain.has_chain(sch):
        return None
    code = chain.nominal_scale_codes(np.array([amax], np.float32), sch, ctx.ts)
    m = chain.multipliers(code, sch, ctx.ts)
    m = F32(m[0])
    if not np.isfinite(m) or m == 0:
        return None
    return m


def tie_inputs(rng, targets: np.ndarray, m, scheme: Scheme, offsets: np.ndarray) -> np.ndarray:
    """Non-negative float32 x with fp32(x * m) == target where such an x exists (else the
    nearest), then moved ``offsets`` ulps (0: the tie itself, +-1: one ulp either side)."""
    t = np.asarray(targets, np.float64)
    with np.errstate(all="ignore"):
        x0 = (t / float(m)).astype(np.float32)
    js = np.arange(-3, 4)
    cand = ulp_step(np.repeat(x0[:, None], len(js), axis=1), js[None, :])
    y = chain.scaled(cand, m, scheme).astype(np.float64)
    dist = np.abs(y - t[:, None])
    best = np.argmin(dist + (js[None, :] != 0) * 1e-300, axis=1)
    x = cand[np.arange(len(t)), best]
    return ulp_step(x, offsets)


def if4_every_scale_code(rng, tile_rows: int = 1) -> np.ndarray:
    """IF4: one row of blocks, S_enc = 1 (a first block holding the amax 2688), then for each
    UE4M3 code 1..126 a block whose scale is that code, its elements on E2M1 and INT4
    midpoints of the scaled values, one float32 step beside them, and grid points.
    ``tile_rows=16``: the blocks are 16 x 16 tiles (``if4_2d``), 16 rows; there the tiles of odd
    codes hold E2M1 grid points only (mixed targets over 256 values favour INT4)."""
    from fp4spec.number_formats import get_format

    ue4m3 = get_format("ue4m3")
    e2m1 = np.unique(np.abs(get_format("e2m1").values))
    targets = np.concatenate([(e2m1[:-1] + e2m1[1:]) / 2, e2m1[1:], if4_int_targets(np.arange(0.5, 7, 0.5))])
    n = 16 * tile_rows
    anchor = np.zeros(n, np.float32)
    anchor[0] = 2688.0
    blocks = [anchor]
    for code in range(1, 127):
        s = np.float32(ue4m3.values[code])
        t = rng.choice(e2m1 if tile_rows > 1 and code % 2 else targets, n - 1)
        vals = (t * float(s)).astype(np.float32)
        vals = ulp_step(vals, rng.choice([-1, 0, 0, 1], n - 1)) * np.where(rng.random(n - 1) < 0.5, -1, 1)
        blocks.append(np.concatenate([[np.float32(6.0) * s], vals]).astype(np.float32))
    out = np.array(blocks, np.float32)
    if tile_rows == 1:
        return out.reshape(1, -1)
    from fp4spec.emulator.if4 import from_tiles

    return from_tiles(out[None], tile_rows).reshape(tile_rows, -1)


def if4_int_targets(targets: np.ndarray) -> np.ndarray:
    """IF4: float32 scaled values y whose INT4 value fp32(y * fp32(7/6)) is ``targets`` (or, where
    no y gives it exactly, nearest to it)."""
    from fp4spec.if4 import INT_UP

    t = np.asarray(targets, np.float64)
    y0 = (t / float(INT_UP)).astype(np.float32)
    js = np.arange(-3, 4)
    cand = ulp_step(np.repeat(y0[:, None], len(js), axis=1), js[None, :])
    z = (cand * INT_UP).astype(np.float64)
    best = np.argmin(np.abs(z - t[:, None]) + (js[None, :] != 0) * 1e-300, axis=1)
    return cand[np.arange(len(t)), best].astype(np.float64)


def _tie_targets(rng, sch: Scheme, n: int, y_amax: float):
    """Scaled-value targets of ``block_ties``, or None: E2M1 (element) midpoints and grid points;
    for IF4 half of them are INT4 midpoints k + 1/2 and integers, mapped back through 7/6."""
    grid = element_grid(sch)
    grid = grid[grid <= sch.max_elem]
    mids = (grid[:-1] + grid[1:]) / 2
    pool_mid = mids[mids < y_amax]
    pool_grid = grid[(grid > 0) & (grid < y_amax)]
    if pool_mid.size == 0:
        return None
    pick = rng.random(n)
    targets = np.where(pick < 0.75, rng.choice(pool_mid, n),
                       rng.choice(pool_grid, n) if pool_grid.size else rng.choice(pool_mid, n))
    if sch.structure == "if4":
        ints = np.arange(0.5, 7.0, 0.5)
        ints = ints[ints / (7.0 / 6.0) < y_amax]
        if ints.size:
            use = rng.random(n) < 0.5
            targets = np.where(use, if4_int_targets(rng.choice(ints, n)), targets)
    return targets


def block_ties(rng, ctx: BlockContext, amax) -> np.ndarray:
    """Scaled values on midpoints (60%), on grid points (15%) or at the top saturation
    midpoint; 60% exact, the rest one ulp either side (IF4: half on INT4 midpoints)."""
    sch = ctx.scheme
    m = _block_multiplier(ctx, amax)
    if m is None:
        return block_random(rng, ctx, amax)
    n = int(np.prod(ctx.shape))
    y_amax = float(chain.scaled(np.array([amax], np.float32), m, sch)[0])
    targets = _tie_targets(rng, sch, n, y_amax)
    if targets is None:
        return block_random(rng, ctx, amax)
    offsets = rng.choice([0, 0, 0, 0, 0, 0, -1, 1, -1, 1], n)
    x = tie_inputs(rng, targets, m, sch, offsets)
    x = np.minimum(x, F32(amax)) * _signs(rng, n)
    return _place_amax(rng, x.reshape(ctx.shape).astype(np.float32), amax)


def block_binade_edge(rng, ctx: BlockContext, amax) -> np.ndarray:
    n = int(np.prod(ctx.shape))
    sigs = np.array(amax_significands(ctx.scheme))
    e = int(np.frexp(np.float64(amax))[1]) - 1 if amax > 0 else -149
    exps = e - rng.integers(0, 9, n)
    x = _pow2(rng.choice(sigs, n), exps)
    x = np.minimum(x, F32(amax)) * _signs(rng, n)
    return _place_amax(rng, x.reshape(ctx.shape).astype(np.float32), amax)


def scale_tie_amax(rng, ctx: BlockContext, cap) -> np.float32 | None:
    """Two-level: a block amax <= cap whose pre-cast block scale is exactly a midpoint of two
    adjacent scale values (or one ulp beside one); None where none can be made."""
    sch = ctx.scheme
    if sch.structure not in ("two_level", "if4") or ctx.ts is None or not (0 < cap < np.inf):
        return None
    probe = np.array([cap], np.float32)
    s_cap = float(chain.block_scale_value(probe, sch, ctx.ts)[0])
    if not (0 < s_cap < np.inf):
        return None
    svals = np.unique(np.abs(sch.scale.values[np.isfinite(sch.scale.values)]))  # IF4's E4M3: magnitudes
    mids = (svals[:-1] + svals[1:]) / 2
    mids = mids[mids < min(s_cap, float(sch.scale.max))]
    if mids.size == 0:
        return None
    t = float(rng.choice(mids))
    x0 = np.float32(t * float(cap) / s_cap)
    js = np.arange(-4, 5)
    cand = ulp_step(np.full(len(js), x0), js)
    s = chain.block_scale_value(cand, sch, ctx.ts).astype(np.float64)
    best = int(np.argmin(np.abs(s - t)))
    a = ulp_step(cand[best:best + 1], [int(rng.choice([0, 0, 0, -1, 1]))])[0]
    return F32(min(float(a), float(cap))) if a > 0 else None


def block_scale_tie(rng, ctx: BlockContext, amax, *, free: bool = True) -> np.ndarray:
    if free:
        a = scale_tie_amax(rng, ctx, amax)
        if a is not None:
            amax = a
    if ctx.scheme.structure == "mx":
        return block_binade_edge(rng, ctx, amax)
    return block_ties(rng, ctx, amax)


def block_subnormal(rng, ctx: BlockContext, amax, *, free: bool = True) -> np.ndarray:
    """float32 subnormals (2^-149 .. 2^-126) and the boundary 2^-126 itself."""
    n = int(np.prod(ctx.shape))
    if free:
        own = _pow2(rng.choice([1.0, 1.5, 1.75, 2.0 - ULP1, 1.0 + rng.random()]), int(rng.integers(-149, -124)))
        amax = F32(min(max(float(own), 2.0 ** -149), float(amax)))
    e = int(np.frexp(np.float64(amax))[1]) - 1
    mant = rng.integers(1, 1 << 23, n).astype(np.float64) / (1 << 23)
    x = _pow2(mant, np.minimum(e, -126) - rng.integers(0, 6, n))
    x = np.minimum(x, F32(amax)) * _signs(rng, n)
    return _place_amax(rng, x.reshape(ctx.shape).astype(np.float32), amax)


def block_saturate(rng, ctx: BlockContext, amax, *, free: bool = True) -> np.ndarray:
    """Values whose scaled magnitude passes the element max: MX amax significands above the
    element's top significand; two-level: elements near amax (and, free, a tiny block)."""
    sch = ctx.scheme
    if free and sch.structure in ("two_level", "if4") and rng.random() < 0.5:
        amax = F32(max(float(amax) * 2.0 ** -float(rng.integers(8, 40)), 2.0 ** -149))
    elif free and sch.structure in ("mx", "hif4") and amax > 0:
        top_sig = sch.max_elem / 2.0 ** np.floor(np.log2(sch.max_elem))
        e = int(np.frexp(np.float64(amax))[1]) - 1
        sig = rng.choice([2.0 - ULP1, top_sig + ULP1, (top_sig + 2.0) / 2, top_sig + (2.0 - top_sig) * rng.random()])
        a = _pow2(min(max(sig, 1.0), 2.0 - ULP1), e)
        amax = F32(min(float(a), float(amax))) if a > 0 else amax
    n = int(np.prod(ctx.shape))
    u = 1.0 - rng.random(n) * rng.choice([0.02, 0.2, 1.0])
    x = np.minimum((u * float(amax)).astype(np.float32), F32(amax)) * _signs(rng, n)
    return _place_amax(rng, x.reshape(ctx.shape).astype(np.float32), amax)


def block_zero(rng, ctx: BlockContext, amax=None) -> np.ndarray:
    n = int(np.prod(ctx.shape))
    style = int(rng.integers(3))
    sign = _signs(rng, n) if style == 0 else np.full(n, F32(-1.0 if style == 1 else 1.0))
    return (np.zeros(n, np.float32) * sign).reshape(ctx.shape)


def block_single(rng, ctx: BlockContext, amax) -> np.ndarray:
    return _place_amax(rng, block_zero(rng, ctx), amax)


def block_nonfinite(rng, ctx: BlockContext, amax, specials=None) -> np.ndarray:
    x = block_random(rng, ctx, amax if amax > 0 else F32(1.0)).reshape(-1)
    if specials is None:
        specials = nonfinite_specials(rng)
    idx = rng.choice(x.size, size=min(len(specials), x.size), replace=False)
    x[idx] = np.array(specials[:len(idx)], np.float32)
    return x.reshape(ctx.shape)


def nonfinite_specials(rng) -> list[float]:
    pool = [np.nan, np.inf, -np.inf, -np.nan]
    k = int(rng.integers(1, 4))
    return [pool[int(i)] for i in rng.integers(0, len(pool), k)]


_FIXED_AMAX = {"random", "ties", "binade_edge", "single", "nonfinite"}


def build_block(rng, kind: str, ctx: BlockContext, amax, *, free: bool = True, specials=None) -> np.ndarray:
    """One block of ``kind`` with max |x| == amax (``free``: kinds that choose their own amax
    -- ``scale_tie``, ``subnormal``, ``saturate`` -- may lower it)."""
    amax = F32(amax)
    if kind == "zero" or (amax == 0 and kind != "nonfinite"):
        return block_zero(rng, ctx)
    if kind == "nonfinite":
        return block_nonfinite(rng, ctx, amax, specials)
    if kind in _FIXED_AMAX:
        return {"random": block_random, "ties": block_ties, "binade_edge": block_binade_edge,
                "single": block_single}[kind](rng, ctx, amax)
    fn = {"scale_tie": block_scale_tie, "subnormal": block_subnormal, "saturate": block_saturate}[kind]
    return fn(rng, ctx, amax, free=free)


# -- tensors ---------------------------------------------------------------------------------------

def global_amax(rng, scheme: Scheme, exponent: int | None = None, significand: float | None = None) -> np.float32:
    """A tensor amax: typical (2^-10 .. 2^10), wide (2^-149 .. 2^127) or extreme (FLT_MAX,
    the normal boundary, subnormal), with a scale-rule edge significand half the time."""
    if exponent is None:
        r = rng.random()
        if r < 0.5:
            exponent = int(rng.integers(-10, 11))
        elif r < 0.8:
            exponent = int(rng.integers(-149, 128))
        else:
            exponent = int(rng.choice([127, 126, 100, -100, -125, -126, -127, -140, -149]))
    if significand is None:
        sigs = amax_significands(scheme)
        significand = float(rng.choice(sigs)) if rng.random() < 0.5 else 1.0 + float(rng.random())
    g = _pow2(significand, exponent)
    return F32(max(float(g), 2.0 ** -149))


def build_tensor(rng, scheme: Scheme, kinds, *, block_rows: int = 1, block_cols: int = 1, amax=None,
                 spread: int = 0) -> np.ndarray:
    """A float32 tensor of ``block_rows * tile_rows`` x ``block_cols * block_size`` values.

    ``kinds``: one kind per block (row-major, ``block_rows * block_cols`` of them) or a
    single kind for all. ``amax``: the global amax (drawn by :func:`global_amax` if None).
    ``spread``: other blocks' amaxes lie up to this many binades below the global amax.
    """
    nb = block_rows * block_cols
    kinds = [kinds] * nb if isinstance(kinds, str) else list(kinds)
    if len(kinds) != nb:
        raise ValueError(f"kinds: expected {nb} kinds (block_rows * block_cols), got {len(kinds)}")
    for k in kinds:
        if k not in BLOCK_KINDS:
            raise ValueError(f"kinds: {k!r} is not one of {', '.join(BLOCK_KINDS)}")
    shape = (scheme.tile_rows, scheme.block_size)
    g = global_amax(rng, scheme) if amax is None else F32(amax)
    specials = {i: nonfinite_specials(rng) for i, k in enumerate(kinds) if k == "nonfinite"}
    flat = [v for s in specials.values() for v in s]
    nonzero = [i for i, k in enumerate(kinds) if k not in ("zero", "nonfinite")]
    if any(np.isnan(v) for v in flat):
        g_eff = F32(np.nan)
    elif flat:
        g_eff = F32(np.inf)
    else:
        g_eff = g if nonzero or specials else F32(0.0)
    ctx = BlockContext(scheme, shape, chain.tensor_scale_of_amax(g_eff, scheme))
    anchor = nonzero[0] if nonzero else None
    sigs = np.array(amax_significands(scheme))
    e_g = int(np.frexp(np.float64(g))[1]) - 1 if g > 0 else -149
    blocks = []
    for i, kind in enumerate(kinds):
        if i == anchor or spread == 0 and rng.random() < 0.5:
            a, free = g, i != anchor
        else:
            d = int(rng.integers(0, spread + 1))
            sig = float(rng.choice(sigs)) if rng.random() < 0.5 else 1.0 + float(rng.random())
            a = F32(min(float(_pow2(sig, e_g - d)), float(g)))
            free = True
        blocks.append(build_block(rng, kind, ctx, a, free=free, specials=specials.get(i)))
    rows = [np.concatenate(blocks[r * block_cols:(r + 1) * block_cols], axis=1) for r in range(block_rows)]
    return np.ascontiguousarray(np.concatenate(rows, axis=0), dtype=np.float32)


def build_rbits(rng, shape, sr_bits: int = 8, style: str | None = None) -> np.ndarray:
    """Random bits for ``rounding="sr"``: ``uniform``, ``zero`` (rounds toward zero), ``max``
    (2^N - 1) or ``mixed``; uint32 of ``shape``."""
    style = style or str(rng.choice(["uniform", "uniform", "uniform", "zero", "max", "mixed"]))
    top = (1 << sr_bits) - 1
    if style == "zero":
        return np.zeros(shape, np.uint32)
    if style == "max":
        return np.full(shape, top, np.uint32)
    r = rng.integers(0, top + 1, size=shape, dtype=np.uint64).astype(np.uint32)
    if style == "mixed":
        pick = rng.random(shape)
        r = np.where(pick < 0.25, 0, np.where(pick < 0.5, top, r)).astype(np.uint32)
    return r


# -- whole-tensor recipes --------------------------------------------------------------------------

def representable_tensor(rng, scheme: Scheme, block_rows: int = 2, block_cols: int = 2):
    """MX: a tensor whose every value is an element value times its block's power of two,
    with the block amax where the scale rule gives exactly that power. Returns
    ``(x, codes, scale_codes)``; quantizing x must return exactly these for every rounding."""
    if scheme.structure != "mx":
        raise ValueError(f"scheme: representable tensors are defined for MX schemes, not {scheme.name!r}")
    el = scheme.element
    vals = el.values
    finite = np.flatnonzero(np.isfinite(vals))
    emax = el.emax
    rule = scheme.scale_rule
    mags = np.abs(vals)
    if rule == "ceil":
        top = finite[mags[finite] == 2.0 ** emax]
    elif rule == "rceil":
        top = finite[mags[finite] > el.max / 2]
    else:
        top = finite[mags[finite] >= 2.0 ** emax]
    lo_e = -127 if scheme.policies["mx_element_scaling"] == "exact" and rule != "rceil" else -125
    hi_e = 127 - emax - 1
    k = scheme.block_size
    codes = np.empty((block_rows, block_cols * k), np.uint8)
    scales = np.empty((block_rows, block_cols), np.uint8)
    x = np.empty(codes.shape, np.float32)
    for r in range(block_rows):
        for b in range(block_cols):
            e = int(rng.choice([lo_e, hi_e, 0, int(rng.integers(lo_e, hi_e + 1))]))
            t = int(rng.choice(top))
            cand = finite[mags[finite] <= mags[t]]
            c = rng.choice(cand, k).astype(np.uint8)
            c[int(rng.integers(k))] = t
            codes[r, b * k:(b + 1) * k] = c
            scales[r, b] = e + 127
            x[r, b * k:(b + 1) * k] = np.ldexp(vals[c], e).astype(np.float32)
    return x, codes, scales


# -- element conversion (no scaling) ---------------------------------------------------------------

def _with_neighbours(v: np.ndarray, steps=(-2, -1, 0, 1, 2)) -> np.ndarray:
    v = np.abs(np.asarray(v, np.float32))
    return np.concatenate([ulp_step(v, s) for s in steps])


def element_tie_values(fmt) -> np.ndarray:
    """Exact midpoints between adjacent magnitudes of ``fmt`` (and between the max and the
    next value the format would have), one float32 ulp either side, both signs; sorted float32."""
    from fp4spec.elements import magnitude_grid

    grid = np.array([float(g) for g in magnitude_grid(fmt, False)])
    mids = (grid[:-1] + grid[1:]) / 2
    v = _with_neighbours(mids.astype(np.float32), (-1, 0, 1))
    v = v[v > 0] if fmt.signed else v
    return np.unique(np.concatenate([v, -v] if fmt.signed else [v])).astype(np.float32)


def element_sweep(fmt) -> np.ndarray:
    """TestFloat-style float32 inputs for element conversion: every value of the format, every
    midpoint, two ulps either side of each, significand patterns (1, 1+ulp, 1.25, 1.5, 1.75,
    2-ulp) over the format's binades and three beyond each end, out-of-range magnitudes up to
    FLT_MAX and Inf, float32 subnormals, and +-0; both signs for signed formats; sorted."""
    from fp4spec.elements import magnitude_grid

    grid = np.array([float(g) for g in magnitude_grid(fmt, False)])
    finite = grid[:-1] if grid[0] == 0 else grid[1:-1]
    mids = (grid[:-1] + grid[1:]) / 2
    pos = grid[grid > 0]
    lo_e = int(np.floor(np.log2(pos.min()))) - 3
    hi_e = int(np.floor(np.log2(grid.max()))) + 3
    sigs = np.array([1.0, 1.0 + ULP1, 1.25, 1.5 - ULP1, 1.5, 1.5 + ULP1, 1.75, 2.0 - ULP1])
    exps = np.arange(lo_e, hi_e + 1)
    pattern = np.ldexp(sigs[None, :], exps[:, None]).ravel()
    special = np.array([2.0 ** -149, 2.0 ** -126, 2.0 ** -126 - 2.0 ** -149, float(FLT_MAX), np.inf,
                        float(finite.max()) * 1.25, float(finite.max()) * 2.0])
    core = np.concatenate([finite, mids, pattern]).astype(np.float32)
    mags = np.concatenate([_with_neighbours(core), special.astype(np.float32), [0.0]]).astype(np.float32)
    mags = np.unique(mags[np.isfinite(mags) | np.isinf(mags)])
    vals = np.unique((np.concatenate([mags, -mags]) if fmt.signed else mags).astype(np.float32))
    vals[vals == 0] = 0.0  # np.unique keeps either zero (numpy 1.x: -0.0): make it +0.0
    if fmt.signed:  # np.unique merges -0.0 into 0.0; keep both, -0.0 first
        vals = np.insert(vals, int(np.searchsorted(vals, 0.0)), np.float32(-0.0))
    return vals


__all__ = [
    "BLOCK_KINDS",
    "element_sweep",
    "element_tie_values",
    "BlockContext",
    "FINITE_KINDS",
    "amax_significands",
    "build_block",
    "build_rbits",
    "build_tensor",
    "element_grid",
    "global_amax",
    "kinds_for",
    "representable_tensor",
    "scale_tie_amax",
    "tie_inputs",
    "random_blocks",
    "ulp_step",
]
