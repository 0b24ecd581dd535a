"""Float64 building blocks of the GEMM emulator's fast paths: exact BLAS sums, one rounding.

The fast paths of :mod:`fp4spec.emulator.gemm` let BLAS (numpy's float64 matmul) compute
sums that are provably exact, then round once as the model says; what they cannot prove
goes to the integer algorithms (:mod:`.gemm_core`). ``lsb(v)`` is the exponent of the lowest
set bit of a nonzero dyadic ``v`` (``v`` is an odd integer times ``2^lsb(v)``). Facts used
throughout, with u = 2^-53:

* **E1 (products).** The float64 product of two values with p and q significant bits is exact
  when p + q <= 53 and it stays inside float64's normal range. The factors here are
  float32 values (24 bits) or narrower, and every value lies between 2^-1000 and 2^1000.
* **E2 (sums).** If every term is an integer multiple of 2^lo (lo >= -1074) and the
  magnitudes sum to less than 2^(lo + 53), every partial sum of any subset of the terms is
  such a multiple below 2^(lo + 53) in magnitude, hence a float64: every addition (or FMA
  with an exact product) is exact, and a BLAS dot product returns the exact sum whatever
  its order, blocking or use of FMA.
* **E3 (magnitude bounds).** For n non-negative terms whose products are exact (E1), any
  summation order gives Ŝ >= S (1 - gamma) with gamma = (n - 1) u / (1 - (n - 1) u); for n
  <= 2^20, fl(Ŝ * (1 + 2^-30)) >= S. :func:`upper_bound` adds that margin, and comparing the
  rounded sum ``fl(bound + |c|)`` with a power of two T decides ``S + |c| < T`` correctly:
  rounding is monotone and T is a float64, so ``S + |c| >= T`` implies
  ``fl(bound + |c|) >= T``.
* **E4 (float32 rounding of float64 values).** numpy's float64 -> float32 cast rounds to
  nearest even once, subnormals and overflow included; :func:`rz_f32` rounds toward zero.
  A value that is already a float32 is cast exactly.
* **E5 (cheaper magnitude bounds).** With every |x_k| < 2^mag_x and |y_k| < 2^mag_y,
  sum |x_k y_k| < n 2^(mag_x + mag_y) (:func:`magnitude_bound`); by Cauchy-Schwarz, sum
  |x_k y_k| <= sqrt(sum x_k^2 sum y_k^2) (:func:`cauchy_bound`; the squares are exact, the
  sums within E3's factor). Both are tried for a whole tile (its worst row and column)
  before E3's BLAS product on |A| and |B| per output: on typical data the tile passes and
  that second product is never computed.

Problems of fewer than :data:`SMALL_WORK` multiply-adds skip the fast paths (their set-up
costs more than it saves there).
"""

from __future__ import annotations

import math

import numpy as np

from .gemm_core import SENT, fma32
from .gemm_stats import BAD, POS

_I64 = np.int64
_TINY32 = 2.0 ** -126
_LOW29 = _I64((1 << 29) - 1)
_MID29 = _I64(1 << 28)
#: Multiply-adds (M N K) below which a GEMM goes to the integer algorithms directly: for
#: such small problems the fast paths' set-up costs more than it saves.
SMALL_WORK = 1 << 12
#: float32's significant bits, smallest lsb (subnormal spacing) and smallest normal exponent.
F32_SIG = 24
F32_LSB_MIN = -149
F32_EMIN = -126
#: E3's margin for BLAS sums of at most 2^20 non-negative terms.
MARGIN = 1.0 + 2.0 ** -30
MAX_TERMS = 1 << 20


def f32_exp_lsb(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(e, lsb) of float32 values from their bits: e = max(floor(log2 |x|), -126) (the fp32 and
    bf16 carriers' exponent), lsb(x); zeros (SENT, POS), NaN and Inf (BAD, POS).

    The significand integer ``sig`` (the implicit bit included) has value x = sig * 2^(e - 23);
    its lowest set bit ``sig & -sig`` is a power of two whose float32 exponent field is
    127 + ctz. Branch-free (no np.where): the special cases are blended in arithmetically.
    """
    b = np.ascontiguousarray(x, np.float32).view(np.int32) & np.int32(0x7FFFFFFF)
    be = b >> 23
    sig = (b & np.int32(0x7FFFFF)) | ((be > 0).astype(np.int32) << 23)
    ctz = ((sig & -sig).astype(np.float32).view(np.int32) >> 23) - 127
    e = (be - 127 + (be == 0)).astype(_I64)
    lsb = e - 23 + ctz
    zero = (sig == 0).astype(_I64)
    bad = (be == 0xFF).astype(_I64)
    e = e + zero * (SENT - e) + bad * (BAD - e)
    lsb = lsb + (zero | bad) * (POS - lsb)
    return e, lsb


def segment_reduce(arr: np.ndarray, size: int, op) -> np.ndarray:
    """``op`` (np.maximum or np.minimum) over consecutive segments of ``size`` along the last
    axis; a shorter last segment is reduced too."""
    return op.reduceat(arr, np.arange(0, arr.shape[-1], size), axis=-1)


def upper_bound(s_abs: np.ndarray, c_abs) -> np.ndarray:
    """A float64 that is at least S + |c| when ``s_abs`` is a BLAS sum of at most
    :data:`MAX_TERMS` exact non-negative products whose exact sum is S (E3)."""
    return s_abs * MARGIN + c_abs


def square_sums(vals: np.ndarray, size: int) -> np.ndarray:
    """Per row, the float64 sums of squares of consecutive runs of ``size`` values (the
    squares are exact for values of at most 26 significant bits)."""
    return np.add.reduceat(vals * vals, np.arange(0, vals.shape[1], size), axis=1)


def cauchy_bound(sq_a: np.ndarray, sq_b: np.ndarray, acc_max: float) -> float:
    """An upper bound of |acc| + sum |x_k y_k| for every output of a tile, by Cauchy-Schwarz:
    sum |x_k y_k| <= sqrt(sum x_k^2 * sum y_k^2) <= sqrt(max over rows * max over columns).
    The sums of squares (:func:`square_sums`) are within a factor 1 +- 2^-33 of the exact
    ones (E3), the product and the square root add two roundings: the margin 2^-30 covers
    them."""
    return math.sqrt(float(sq_a.max(initial=0.0)) * float(sq_b.max(initial=0.0))) * MARGIN + acc_max


def magnitude_bound(mag_a: np.ndarray, mag_b: np.ndarray, terms: int, acc_max: float) -> float:
    """An upper bound of |acc| + sum |x_k y_k| for every output of a tile: ``terms *
    2^(max mag_a + max mag_b) + max |acc|``, with every |x| below 2^mag_a and |y| below
    2^mag_b (+Inf when that is beyond float64; a NaN ``acc_max`` gives NaN, which passes no
    test). The first product is exact and the sum rounds monotonically, so a comparison of
    the result with a power of two decides the exact sum's comparison (E3)."""
    e = int(mag_a.max(initial=-2000)) + int(mag_b.max(initial=-2000))
    if e > 1000:
        return math.inf
    return math.ldexp(float(terms), max(e, -2000)) + acc_max


def pow2(e: np.ndarray) -> np.ndarray:
    """2^e as float64 for int64 exponents, built from the bits: exact for -1022 <= e <= 1023,
    +Inf above; 2^-1022 below (callers compare with it only where e >= -1022)."""
    return ((np.minimum(np.maximum(e, -1022), 1024) + 1023) << 52).view(np.float64)


def rz_f32(s: np.ndarray) -> np.ndarray:
    """float32 of exact float64 values rounded toward zero; a magnitude of 2^128 or more
    after rounding is +-Inf (as :func:`fp4spec.gemm_reference.round_binary` says); the sign
    of a nonzero value that rounds to zero is kept; NaN stays NaN.

    1. Clear the 29 low fraction bits of every value (float64 keeps 52, float32 23): where
       |s| >= 2^-126 this truncates the magnitude to 24 significant bits, a float32 or a
       value >= 2^128 (the largest 24-bit value below 2^128 is the largest float32); the cast
       is then exact or +-Inf (E4). Inf keeps its bits; a NaN keeps its quiet bit.
    2. Where |s| < 2^-126 (float32 subnormals, fewer significant bits) cast the original
       value (nearest, E4) and, where that moved away from zero, step one float32 toward
       zero: the nearest float32 was above |s|, so the next one toward zero is the largest
       below or at |s|.
    """
    s = np.asarray(s, np.float64)
    with np.errstate(over="ignore"):
        r = (s.view(_I64) & ~_LOW29).view(np.float64).astype(np.float32)
    tiny = np.abs(s) < _TINY32
    if tiny.any():
        st = s[tiny]
        rt = st.astype(np.float32)
        away = np.abs(rt.astype(np.float64)) > np.abs(st)
        r[tiny] = np.where(away, np.nextafter(rt, np.float32(0)), rt)
    return r


def round_f32(s: np.ndarray, mode: str) -> np.ndarray:
    """Exact float64 values rounded once to float32: ``"rne"`` (the cast, E4) or ``"rz"``."""
    if mode == "rz":
        return rz_f32(s)
    with np.errstate(over="ignore"):
        return np.asarray(s, np.float64).astype(np.float32)


def fma32_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """:func:`fp4spec.emulator.gemm_core.fma32` for float64 arrays that hold float32 values,
    returned as float64 (holding float32 values): ``a * b + c`` rounded once to float32.

    1. p = a * b is exact in float64 (E1); s = fl64(p + c) has IEEE's signs of zero, Inf
       and NaN.
    2. The cast of s to float32 (nearest even) equals the correctly rounded p + c unless s is
       a float32 midpoint: a float32 rounding boundary m is a float64 value (25 significant
       bits, or a multiple of 2^-150 below 2^-125), and rounding to float64 is monotone, so
       if p + c lies strictly on one side of m, s lies on that side or on m. Overflow's
       boundary 2^128 - 2^103 is such a midpoint.
    3. Candidates: s whose 29 low fraction bits are exactly 1000...0 (a midpoint in
       float32's normal range), and every |s| < 2^-126 (the subnormal range, tested
       wholesale). They are recomputed with :func:`~fp4spec.emulator.gemm_core.fma32`
       (round to odd, exact for all inputs).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        s = a * b + c
        r = s.astype(np.float32)
    cand = ((s.view(_I64) & _LOW29) == _MID29) | (np.abs(s) < _TINY32)
    if cand.any():
        a, b, c = np.broadcast_arrays(a, b, c)
        r[cand] = fma32(a[cand], b[cand], c[cand])
    return r.astype(np.float64)


def is_f32_midpoint(p: np.ndarray) -> np.ndarray:
    """Which float64 values lie exactly halfway between two neighbouring float32 values
    (2^128 - 2^103, between the largest float32 and 2^128, included).

    In float32's normal range a binade [2^E, 2^(E+1)) has its midpoints at the odd multiples
    of 2^(E-24): the 29 low bits of the 52-bit fraction are 1 followed by 28 zeros. Below
    2^-126 the midpoints are the odd multiples of 2^-150: |p| * 2^149 has fraction 1/2
    (the scaling is exact)."""
    a = np.abs(p)
    tiny = a < _TINY32
    mid = ((p.view(_I64) & _LOW29) == _MID29) & ~tiny & np.isfinite(p)
    if tiny.any():
        t = np.ldexp(a[tiny], 149)
        mid[tiny] = (t - np.floor(t)) == 0.5
    return mid


def round_product_f32(s: np.ndarray, g: np.float32) -> np.ndarray:
    """Exact float64 values ``s`` times a finite float32 ``g``, rounded once to float32
    (nearest even), with IEEE's sign for a nonzero product that rounds to 0 and +0 for an
    exact 0 (s = 0 or g = 0).

    1. p = fl64(s g): the cast of p equals the rounding of s g unless p is a float32
       midpoint (the argument of :func:`fma32_f64`, step 2; :func:`is_f32_midpoint`).
    2. For those: split s = h + l (Veltkamp, factor 2^27 + 1: h and l have at most 26
       significant bits, exact for |s| < 2^995), so h g and l g are exact (E1); p' = fl(h g +
       l g) and its error e (TwoSum) give s g = p' + e exactly. Where e != 0, step p' one
       float64 ulp toward e (off the midpoint, still strictly between the two float32
       neighbours of s g); cast.
    """
    if g == 0:
        return np.zeros(np.shape(s), np.float32)
    g = np.float64(g)
    with np.errstate(over="ignore", invalid="ignore"):
        p = s * g
        r = p.astype(np.float32)
    cand = is_f32_midpoint(p)
    if cand.any():
        sc = s[cand]
        with np.errstate(over="ignore", invalid="ignore"):
            t = sc * 134217729.0
            h = t - (t - sc)
            x, y = h * g, (sc - h) * g
            pc = x + y
            bb = pc - x
            e = (x - (pc - bb)) + (y - bb)
            pc = np.where(e != 0, np.nextafter(pc, np.where(e > 0, np.inf, -np.inf)), pc)
            r[cand] = pc.astype(np.float32)
    zero = s == 0
    if zero.any():
        r[zero] = 0.0
    return r


def tiles(m: int, n: int, size: int):
    """(row slice, column slice) tiles covering an m x n result, about ``size`` outputs each
    (whole rows of up to 512 columns), so that a tile's temporaries stay in cache."""
    tn = max(1, min(n, 512))
    tm = max(1, min(m, size // tn))
    for r0 in range(0, m, tm):
        for c0 in range(0, n, tn):
            yield slice(r0, min(m, r0 + tm)), slice(c0, min(n, c0 + tn))


def step_dots(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """(S, Ma, Nb): the dot products of each ``width`` slice of K, a (Ma x K) times b (Nb x K)
    transposed, one BLAS product per slice (exact when E2 holds for the slice's terms)."""
    s = a.shape[1] // width
    at = a.reshape(a.shape[0], s, width).transpose(1, 0, 2)
    bt = b.reshape(b.shape[0], s, width).transpose(1, 2, 0)
    return np.matmul(at, bt)


def pair_step_dots(a_rows: np.ndarray, b_rows: np.ndarray, width: int) -> np.ndarray:
    """(S, P): per pair p, the dot products of each ``width`` slice of K of a_rows[p] and
    b_rows[p] ((P, K) each, gathered rows), elementwise (exact when E2 holds)."""
    p, k = a_rows.shape
    return (a_rows * b_rows).reshape(p, k // width, width).sum(axis=-1).T


__all__ = [
    "F32_EMIN",
    "F32_LSB_MIN",
    "F32_SIG",
    "MARGIN",
    "MAX_TERMS",
    "SMALL_WORK",
    "cauchy_bound",
    "f32_exp_lsb",
    "fma32_f64",
    "is_f32_midpoint",
    "magnitude_bound",
    "pair_step_dots",
    "pow2",
    "round_f32",
    "round_product_f32",
    "rz_f32",
    "segment_reduce",
    "square_sums",
    "step_dots",
    "tiles",
    "upper_bound",
]
