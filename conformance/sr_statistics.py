"""Stochastic rounding checked by its statistics: what conform can check of SR it cannot replay.

A backend whose SR takes its randomness from its own generator (``Capabilities.sr_source =
"own"``: hardware SR with an on-chip generator, a kernel seeding cuRAND) cannot be compared
with the reference bit for bit, so its ``sr`` rows skip every property but this one, which
quantizes one tensor R times over (its rows tiled) and checks what any correct SR satisfies:

1. **Scales**: the scale codes and the tensor scale equal the reference's (they do not depend
   on the element rounding).
2. **Never all zero**: a block whose rounding toward zero is not all zero is not all zero
   (TransformerEngine#3281: SR returned zeros on sm_120).
3. **Adjacency**: every element is one of its two neighbours, rounded toward or away from zero.
4. **Unbiasedness**: the number of roundings away from zero matches the probabilities
   p = floor(frac * 2^N) / 2^N (N = ``sr_bits``, frac the scaled value's position between its
   neighbours), overall and separately for frac < 1/2 and frac >= 1/2 (|z| < 6 each: a correct
   backend fails with probability about 1e-9).
5. **Randomness**: a second call on the same input rounds some element differently.

Schemes whose blocks choose between candidates (IF4, 4over6) are skipped: the choice itself
depends on the random draws, so neither the scales nor the neighbours are fixed.
"""

from __future__ import annotations

import functools

import numpy as np

from fp4spec.backends.base import as_numpy

from . import builders, chain, gen
from .compare import Departure, compare_quantized, depart, tensor_record
from .report import code_hex, f32_text

REPEATS = 256
Z_LIMIT = 6.0


def applies(t, caps) -> str | None:
    sch = t.scheme
    if sch.structure not in ("mx", "two_level") or sch.scale_rule == "4over6":
        return "SR statistics need one candidate per block and one multiplier per block (MX, two-level)"
    return None


def _neighbours(env, t, x):
    """(reference scales, rtz codes, away-from-zero codes, the scaled values) of x."""
    q_rtz = env.ref_quantize(x, t, rounding="rtz")
    up = np.asarray(env.ref_quantize(x, t, rounding="rup").codes).astype(np.int64)
    dn = np.asarray(env.ref_quantize(x, t, rounding="rdn").codes).astype(np.int64)
    away = np.where(np.signbit(x), dn, up)
    y = chain.scaled_values(x, np.asarray(q_rtz.scales), t.scheme)
    return q_rtz, np.asarray(q_rtz.codes).astype(np.int64), away, y


def _check_scales(q, q_ref, x, t, r):
    cx = compare_quantized(q_ref, q, x, t.scheme, t.rounding, r, label="sr_statistics (scales do not depend on the "
                           "element rounding)", fields=("scales", "global_scale"))
    if cx is not None:
        raise Departure(cx)


def _z(n_up: float, p: np.ndarray) -> float | None:
    var = float((p * (1 - p)).sum())
    if var < 1.0:
        return None
    return (n_up - float(p.sum())) / np.sqrt(var)


def check(env, t, base: np.ndarray) -> None:
    sch, fmt = t.scheme, t.scheme.element
    x = np.tile(base, (max(1, REPEATS // sch.tile_rows), 1))
    rng = np.random.default_rng(int(np.asarray(x).view(np.uint32).sum()) & 0xFFFFFFFF)  # Python ints: numpy 1.x has no uint64 & int64
    r1 = builders.build_rbits(rng, x.shape, t.sr_bits, "uniform")
    q = env.quantize(x, t, r1)
    q_rtz, rtz, away, y = _neighbours(env, t, x)
    _check_scales(q, q_rtz, x, t, r1)
    codes = as_numpy(q.codes).astype(np.int64)
    v, v_rtz, v_away = (chain.element_values(sch, c, None) for c in (codes, rtz, away))
    k = sch.block_size
    nb = x.shape[1] // k
    zero = (v.reshape(x.shape[0], nb, k) == 0).all(axis=-1) & (v_rtz.reshape(x.shape[0], nb, k) != 0).any(axis=-1)
    if zero.any():
        i, b = (int(c) for c in np.argwhere(zero)[0])
        raise depart(f"sr_statistics: block {b} of row {i} came out all zero although rounding toward zero gives "
                     f"non-zero codes", field="codes", notes=["TransformerEngine#3281: SR returned all-zero data"],
                     tensor=tensor_record(base))
    finite = np.isfinite(x)
    bad = finite & ~((v == v_rtz) | (v == v_away))
    if bad.any():
        i, j = (int(k) for k in np.argwhere(bad)[0])
        raise depart(f"sr_statistics: x[{i}, {j}] = {f32_text(x[i, j])} rounded to {code_hex(codes[i, j], fmt.bits)}, "
                     f"not one of its neighbours {code_hex(rtz[i, j], fmt.bits)} and {code_hex(away[i, j], fmt.bits)}",
                     field="codes", tensor=tensor_record(base))
    lo, hi = np.abs(v_rtz), np.abs(v_away)
    frac = np.where(hi > lo, (np.abs(y.astype(np.float64)) - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0)
    scale = float(1 << t.sr_bits)
    p = np.where(finite, np.floor(np.clip(frac, 0, 1) * scale) / scale, 0.0)
    went_up = (codes == away) & (away != rtz)
    for label, mask in (("all values", np.ones_like(p, bool)), ("frac < 1/2", frac < 0.5), ("frac >= 1/2", frac >= 0.5)):
        z = _z(float(went_up[mask].sum()), p[mask])
        if z is not None and abs(z) > Z_LIMIT:
            raise depart(f"sr_statistics: {label}: {int(went_up[mask].sum())} of {int(mask.sum())} roundings went away "
                         f"from zero where P(away) = floor(frac * 2^{t.sr_bits}) / 2^{t.sr_bits} gives "
                         f"{float(p[mask].sum()):.0f} +- {np.sqrt(float((p[mask] * (1 - p[mask])).sum())):.0f} "
                         f"(z = {z:.1f}): the rounding is biased", field="statistics",
                         inputs=[f32_text(val) for val in base.ravel()[:k]], context={"sr_bits": t.sr_bits},
                         tensor=tensor_record(base))
    r2 = builders.build_rbits(rng, x.shape, t.sr_bits, "uniform")
    again = as_numpy(env.quantize(x.copy(), t, r2).codes).astype(np.int64)
    if ((0 < p) & (p < 1)).sum() >= 64 and np.array_equal(again, codes):
        raise depart("sr_statistics: two calls on the same input gave the same codes everywhere: the rounding does "
                     "not take fresh random numbers", field="codes", tensor=tensor_record(base))


def explicit(env, t, rng):
    for kind in ("random", "ties", "saturate"):
        base = gen.memo(rng, ("sr_statistics", t.spec, kind),
                        lambda r: builders.build_tensor(r, t.scheme, kind, block_rows=1, block_cols=2,
                                                        amax=builders.global_amax(r, t.scheme, int(r.integers(-3, 9))),
                                                        spread=0))
        yield functools.partial(check, env, t, base)


def strategy(env, t):
    def build(rng):
        g = builders.global_amax(rng, t.scheme, int(rng.integers(-10, 11)))
        return builders.build_tensor(rng, t.scheme, builders.FINITE_KINDS[int(rng.integers(6))], block_rows=1,
                                     block_cols=2, amax=g, spread=int(rng.integers(0, 4)))
    return gen.Seeded(build)


__all__ = ["REPEATS", "Z_LIMIT", "applies", "check", "explicit", "strategy"]
