"""Candidate-selection near-ties: blocks on which a scheme's choice between two candidates flips.

IF4 chooses INT4 over E2M1, and 4over6 the map-to-4 scale over map-to-6, by comparing two
float32 block errors. Two implementations that compute the same errors in another float32
order (or by an algebraically equal expression) agree on random blocks and disagree where the
two errors are within a few ulps: FlashInfer and TransformerEngine's 4over6 did
(flashinfer-ai/flashinfer#3448, radixark/miles#1261). The ``selection`` property builds such
blocks and compares every field with the reference.

Construction of one block: a random block with a fixed amax; one other element x_j is swept
over 64 values, the reference's margin ``err(alternative) - err(default)`` computed for each
(the scale and every other code stay put, since the amax does); where the margin changes
sign, x_j is bisected down to the two adjacent float32 values on either side of the flip. The
block keeps one of them: the reference's own float32 errors put it on one side of the
boundary by an ulp-sized margin.
"""

from __future__ import annotations

import functools

import numpy as np

from fp4spec.block_schemes import Scheme

from . import builders, chain, gen

F32 = np.float32
GRID = 64


def has_selection(scheme: Scheme) -> bool:
    """True for schemes whose blocks choose between two candidates: IF4 (1 x 16 and 16 x 16), 1 x 16 4over6."""
    return scheme.structure == "if4" or (scheme.scale_rule == "4over6" and not scheme.is_2d)


def margins(scheme: Scheme, blocks: np.ndarray, ts) -> np.ndarray:
    """float64 ``err(alternative) - err(default)`` per block ``(n, k)`` under the tensor scale ``ts``:
    negative where the reference takes the alternative (INT4; map-to-4). An IF4 16 x 16 tile is
    one block of 256 values, row by row."""
    blocks = np.asarray(blocks, np.float32)
    if scheme.structure == "if4":
        from fp4spec.emulator.if4 import candidates

        *_, err_fp, err_int = candidates(blocks, ts.amax, ts.encode, ts.decode, scheme.scale_rule)
        return err_int.astype(np.float64) - err_fp.astype(np.float64)
    from fp4spec.emulator import scaling as bs

    xb = blocks[None]  # (1, n, k)
    vec_max = np.max(np.abs(xb), axis=-1)
    errs = []
    for candidate in (1.0, 1.5):
        sc = bs.block_scale_codes(vec_max, ts, scheme, candidate)
        codes = bs.element_codes(xb, bs.element_multipliers(sc, ts, scheme), scheme, "rne", None, 8)
        errs.append(bs.four_over_six_errors(xb, codes, sc, ts, scheme)[0].astype(np.float64))
    return errs[1] - errs[0]


def _ordered(v) -> np.ndarray:
    """float32 -> int64 in value order (the sign-magnitude bits made two's complement)."""
    b = np.asarray(v, np.float32).view(np.int32).astype(np.int64)
    return np.where(b < 0, -(b & 0x7FFFFFFF), b)


def _unordered(i) -> np.ndarray:
    i = np.asarray(i, np.int64)
    return np.where(i < 0, (-i) | 0x80000000, i).astype(np.uint32).view(np.float32)


def _flip(scheme, block, j, ts, lo, hi):
    """Bisect x_j between float32 lo and hi (margins of opposite signs) to adjacent float32 values."""
    def sign(v):
        b = block.copy()
        b[j] = v
        return np.sign(margins(scheme, b[None], ts)[0])

    s_lo = sign(lo)
    a, c = int(_ordered(lo)), int(_ordered(hi))
    while c - a > 1:
        m = (a + c) // 2
        if sign(_unordered(m)) == s_lo:
            a = m
        else:
            c = m
    return _unordered(a), _unordered(c)


def _block_len(scheme: Scheme) -> int:
    """Values per selection block: k, or r * k for an IF4 tile (its values row by row)."""
    return scheme.block_size * (scheme.tile_rows if scheme.structure == "if4" else 1)


def near_tie_block(rng, scheme: Scheme, ts, amax, tries: int = 8) -> np.ndarray | None:
    """One block (IF4 tile: its values row by row) of amax ``amax`` whose selection sits one float32
    step from flipping (None if none found)."""
    ctx = builders.BlockContext(scheme, (1, _block_len(scheme)), ts)
    for _ in range(tries):
        block = builders.block_random(rng, ctx, amax).reshape(-1)
        top = int(np.argmax(np.abs(block)))
        j = int(rng.choice([i for i in range(block.size) if i != top]))
        sweep = np.linspace(-0.98, 0.98, GRID) * float(amax)
        cand = np.repeat(block[None], GRID, axis=0)
        cand[:, j] = sweep.astype(np.float32)
        m = margins(scheme, cand, ts)
        flips = np.flatnonzero(np.sign(m[:-1]) * np.sign(m[1:]) < 0)
        if flips.size == 0:
            continue
        i = int(rng.choice(flips))
        a, c = _flip(scheme, block, j, ts, cand[i, j], cand[i + 1, j])
        block[j] = a if rng.random() < 0.5 else c
        return block
    return None


def near_tie_tensor(rng, scheme: Scheme, rows: int = 2, cols: int = 4) -> np.ndarray:
    """``rows`` x ``cols`` blocks (tiles): the first holds the tensor amax, the others are near-ties
    (a random block where none was found)."""
    k, n = scheme.block_size, _block_len(scheme)
    g = builders.global_amax(rng, scheme, int(rng.integers(-3, 9)))
    ts = chain.tensor_scale_of_amax(g, scheme)
    ctx = builders.BlockContext(scheme, (1, n), ts)
    blocks = [builders.block_random(rng, ctx, g).reshape(-1)]
    for _ in range(rows * cols - 1):
        a = F32(min(float(g), float(g) * 2.0 ** -float(rng.integers(0, 5)) * (1.0 + float(rng.random()))))
        b = near_tie_block(rng, scheme, ts, a)
        blocks.append(b if b is not None else builders.block_random(rng, ctx, a).reshape(-1))
    out = np.stack(blocks).astype(np.float32)
    if n == k:
        return out.reshape(rows, cols * k)
    from fp4spec.emulator.if4 import from_tiles

    return from_tiles(out.reshape(rows, cols, n), scheme.tile_rows).reshape(rows * scheme.tile_rows, cols * k)


def four_over_six_decode_scale(x: np.ndarray, scheme: Scheme, rounding: str = "rne", rbits=None, sr_bits: int = 8):
    """1 x 16 4over6 with each candidate's error taken against fp32(fp32(q * s) * S_dec) -- the global decode
    scale's path, algebraically the reference's ((q * s) * amax) / (6 * Emax), not bitwise (FlashInfer before
    flashinfer-ai/flashinfer#3448). Returns (codes, scales, S_dec) for 2-D x."""
    from types import SimpleNamespace

    from fp4spec.emulator import scaling as bs

    k = scheme.block_size
    xb = np.asarray(x, np.float32).reshape(x.shape[0], -1, k)
    rb = None if rbits is None else np.broadcast_to(rbits, x.shape).reshape(xb.shape)
    ts = chain.tensor_scale(x, scheme)
    vec_max = np.max(np.abs(xb), axis=-1)
    out = []
    for candidate in (1.0, 1.5):
        sc = bs.block_scale_codes(vec_max, ts, scheme, candidate)
        codes = bs.element_codes(xb, bs.element_multipliers(sc, ts, scheme), scheme, rounding, rb, sr_bits)
        q = scheme.element.values.astype(np.float32)[codes]
        sv = scheme.scale.values.astype(np.float32)[sc]
        with np.errstate(all="ignore"):
            d = (((q * sv[..., None]).astype(np.float32) * ts.decode).astype(np.float32) - xb).astype(np.float32)
            t = (d * d).astype(np.float32) if scheme.error_mode == "mse" else np.abs(d)
            err = np.zeros(vec_max.shape, np.float32)
            for j in range(k):
                err = (err + t[..., j]).astype(np.float32)
        out.append((codes, sc, err))
    (c6, s6, e6), (c4, s4, e4) = out
    pick4 = e4 < e6
    return SimpleNamespace(codes=np.where(pick4[..., None], c4, c6).reshape(x.shape).astype(np.uint8),
                           scales=np.where(pick4, s4, s6).astype(np.uint8), global_scale=ts.decode, e1_8=None,
                           e1_16=None)


# -- the property's parts ---------------------------------------------------------------------------

def applies(t, caps) -> str | None:
    if not has_selection(t.scheme):
        return "no candidate selection in this scheme (IF4 and 1 x 16 4over6 have one)"
    return None


def explicit(env, t, rng, check):
    for _ in range(3):
        x = gen.memo(rng, ("selection", t.spec), lambda r: near_tie_tensor(r, t.scheme))
        yield functools.partial(check, env, t, gen.Case(x))


def strategy(env, t):
    return gen.Seeded(lambda rng: gen.Case(near_tie_tensor(rng, t.scheme)))


__all__ = ["applies", "explicit", "four_over_six_decode_scale", "has_selection", "margins", "near_tie_block", "near_tie_tensor", "strategy"]
