"""Vectorized encode/decode: the scalar reference of :mod:`fp4spec.elements` over whole arrays.

Method: rounding a magnitude onto a sorted grid is counting decision thresholds. For each
(format, sign, mode) we precompute the thresholds ``T`` in the compute dtype so that the
magnitude index is ``sum_i [a >= T_i]`` -- a strict ``a > t`` becomes ``a >= nextafter(t)``,
which is exact because ``a`` has the same dtype. Ties-to-even, ties-away and the directed
modes differ only in ``T``. Small grids use one comparison pass per threshold (faster than a
binary search in numpy); large grids use ``np.searchsorted``. Stochastic rounding and
round-to-odd work from the index of the lower neighbour with exact float comparisons.
Inputs are widened exactly: float16/bfloat16 to float32, float32 stays float32, float64
stays float64. Large arrays run chunk by chunk (the temporaries stay in the CPU cache), and
formats of at most 6 bits take lookup tables built by this encoder
(:mod:`fp4spec.emulator.encode_table`).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import ml_dtypes
import numpy as np

from fp4spec.number_formats import Format, get_format
from fp4spec.elements import (
    check_policies,
    negative_zero_code,
    magnitude_grid,
    nan_error,
    nan_input_code,
    overflow_error,
    significand_is_even,
)
from fp4spec.rounding import DEFAULT_SR_BITS, UNDERFLOW_POLICIES, check_choice, check_rbits, check_rounding

from . import encode_table

_SMALL_GRID = 16  # up to this many thresholds, compare pass by pass


@dataclasses.dataclass(frozen=True)
class _Side:
    """Everything the vectorized encoder needs for one sign of one format."""

    mags: np.ndarray  # float64 extended magnitude grid
    even: np.ndarray  # bool parity per grid point
    codes: np.ndarray  # uint8/uint16 code per grid point (extension points: 0, masked later)
    low_ext: bool  # grid[0] is an extension point (format without zero)


@lru_cache(maxsize=None)
def side_table(fmt: Format, negative: bool, neg_zero: str) -> _Side:
    grid = magnitude_grid(fmt, negative)
    codes = []
    for g in grid:
        v = -g if negative else g
        match = [c for vv, c in fmt.grid if vv == v]
        codes.append(match[0] if match else 0)
    if negative and fmt.has_negative_zero and neg_zero == "preserve" and grid[0] == 0:
        codes[0] = negative_zero_code(fmt)
    mags = np.array([float(g) for g in grid])
    even = np.array([significand_is_even(fmt, g) for g in grid])
    dtype = np.uint8 if fmt.bits <= 8 else np.uint16
    return _Side(mags, even, np.array(codes, dtype=dtype), bool(grid[0] > 0))


def _exact_in(values: np.ndarray, dtype) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        cast = values.astype(dtype).astype(np.float64)
    finite = np.isfinite(values)
    return bool(np.all(cast[finite] == values[finite]))


@lru_cache(maxsize=None)
def thresholds(fmt: Format, negative: bool, kind: str, dtype_name: str) -> np.ndarray | None:
    """Thresholds in ``dtype`` with index = sum(a >= T); None if not exact in ``dtype``.

    kind: ``"rne"``, ``"rna"`` (nearest), ``"down"`` (toward zero), ``"up"`` (away from zero).
    """
    side = side_table(fmt, negative, "preserve")
    dtype = np.dtype(dtype_name)
    m = side.mags
    if kind in ("rne", "rna"):
        t = (m[:-1] + m[1:]) / 2
        if kind == "rna":
            tie_up = np.ones(len(t), bool)
        else:  # a tie goes up unless only the lower neighbour is even
            tie_up = ~(side.even[:-1] & ~side.even[1:])
    elif kind == "down":
        t, tie_up = m[1:], np.ones(len(m) - 1, bool)
    elif kind == "up":
        t, tie_up = m[:-1], np.zeros(len(m) - 1, bool)
    else:  # pragma: no cover
        raise ValueError(kind)
    if not _exact_in(t, dtype):
        return None
    with np.errstate(over="ignore"):
        td = t.astype(dtype)
    strict = ~tie_up
    td[strict] = np.nextafter(td[strict], dtype.type(np.inf))
    td.setflags(write=False)
    return td


def _count(a: np.ndarray, t: np.ndarray) -> np.ndarray:
    if len(t) <= _SMALL_GRID:
        idx = np.zeros(a.shape, np.uint8 if len(t) < 255 else np.int64)
        tmp = np.empty(a.shape, bool)
        for ti in t:
            np.greater_equal(a, ti, out=tmp)
            idx += tmp.view(np.uint8) if idx.dtype == np.uint8 else tmp
        return idx
    return np.searchsorted(t, a, side="right")


def _compute_dtype(x: np.ndarray):
    if x.dtype in (np.float16, ml_dtypes.bfloat16, np.float32):
        return np.float32
    if x.dtype == np.float64:
        return np.float64
    raise TypeError(f"x: dtype {x.dtype} is not a float dtype (float16, bfloat16, float32, float64)")


def as_float_array(x) -> np.ndarray:
    """Convert ``x`` (array-like or scalar) to a numpy float array without changing values."""
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        return np.asarray(float(x), dtype=np.float64)
    arr = np.asarray(x)
    if arr.dtype.kind == "f" or arr.dtype == ml_dtypes.bfloat16:
        return arr
    raise TypeError(
        f"x: dtype {arr.dtype} is not a float dtype; pass float16, bfloat16 (ml_dtypes), "
        f"float32 or float64 values")


def _index(a: np.ndarray, fmt: Format, negative: bool, kind: str, cdt) -> np.ndarray:
    t = thresholds(fmt, negative, kind, np.dtype(cdt).name)
    if t is None:  # thresholds not exact in float32: fall back to float64
        with np.errstate(invalid="ignore"):  # signalling NaNs (masked later) warn when widened
            a = a.astype(np.float64)
        return _index(a, fmt, negative, kind, np.float64)
    return _count(a, t)


def _round_side(a: np.ndarray, fmt: Format, negative: bool, mode: str, cdt, r, sr_bits) -> np.ndarray:
    """Index into the extended magnitude grid for magnitudes ``a`` of one sign."""
    if mode in ("rne", "rna"):
        return _index(a, fmt, negative, mode, cdt)
    if mode == "rtz" or (mode == "rup" and negative) or (mode == "rdn" and not negative):
        return _index(a, fmt, negative, "down", cdt)
    if mode in ("rup", "rdn"):
        return _index(a, fmt, negative, "up", cdt)
    side = side_table(fmt, negative, "preserve")
    down = _index(a, fmt, negative, "down", cdt).astype(np.int64)
    if mode == "rto":
        up = _index(a, fmt, negative, "up", cdt).astype(np.int64)
        inexact = up != down
        top = len(side.mags) - 1
        down_even = side.even[down]
        up_even = side.even[np.minimum(up, top)]
        take_up = inexact & down_even & ~up_even
        return np.where(take_up, up, down)
    # sr: away from zero iff (a - lo) * 2^N >= (2^N - r) * (hi - lo), all exact in float64
    top = len(side.mags) - 1
    lo = side.mags[down]
    hi = side.mags[np.minimum(down + 1, top)]
    scale = float(1 << sr_bits)
    with np.errstate(invalid="ignore", over="ignore"):
        a64 = a.astype(np.float64)
        take_up = (a64 - lo) * scale >= (scale - r) * (hi - lo)
    take_up &= (a64 > lo) & (down < top)
    return down + take_up


def encode(x, fmt: "str | Format", rounding: str = "rne", *, rbits=None, sr_bits: int = DEFAULT_SR_BITS,
           overflow: str = "saturate", nan: str = "auto", neg_zero: str = "preserve",
           underflow: str = "overflow") -> np.ndarray:
    """Vectorized :func:`fp4spec.elements.encode_scalar`: same steps, same results, whole arrays.

    Returns uint8 codes (uint16 for formats wider than 8 bits) of x's shape. Formats of at
    most 6 bits with a deterministic rounding mode encode float32, bfloat16 and float16
    arrays by lookup tables built by the general encoder (:mod:`fp4spec.emulator.encode_table`);
    everything else runs :func:`encode_general` chunk by chunk.
    """
    fmt = get_format(fmt)
    mode = check_rounding(rounding)
    nan_policy = check_policies(fmt, overflow, nan, neg_zero)
    check_choice("underflow", underflow, UNDERFLOW_POLICIES)
    x = as_float_array(x)
    if x.ndim == 0:  # one value: the same steps on a 1-element array, a 0-d result
        rb = check_rbits(rbits, (), sr_bits).reshape(1) if mode == "sr" else rbits
        return encode(x.reshape(1), fmt, mode, rbits=rb, sr_bits=sr_bits, overflow=overflow, nan=nan,
                      neg_zero=neg_zero, underflow=underflow).reshape(())
    _compute_dtype(x)  # a clear TypeError for other dtypes
    r = None
    if mode == "sr":
        r = check_rbits(rbits, x.shape, sr_bits)
    elif rbits is not None:
        raise ValueError(f"rbits: only used with rounding='sr', not {mode!r}")
    policies = (overflow, nan_policy, neg_zero, underflow)

    def general(chunk, r_chunk=None):
        return encode_general(chunk, fmt, mode, r_chunk, sr_bits, *policies)

    if encode_table.applies(fmt, mode, overflow, x.dtype, x.size):
        tables = encode_table.tables(fmt, mode, *policies, general=encode_general)
        if tables is not None:
            return encode_table.encode_by_table(x, tables, general)
    # an overflow anywhere raises before a NaN anywhere (as in one pass), so then no chunks
    whole = overflow == "error" and nan_policy == "error"
    return _encode_chunks(x, r, general, x.size if whole else CHUNK_ELEMENTS)


#: Elements per chunk of the general encoder (its temporaries stay in the CPU cache).
CHUNK_ELEMENTS = 1 << 16


def _encode_chunks(x: np.ndarray, r, general, step: int) -> np.ndarray:
    """``general`` over chunks of ``step`` elements of the flattened x (and random bits r, or
    None), in order, so that an error names the first offending element in input order."""
    if x.size <= step:
        return general(x, r)
    flat = x.reshape(-1)
    rflat = None if r is None else np.ravel(r)
    first = general(flat[:step], None if rflat is None else rflat[:step])
    out = np.empty(flat.shape, first.dtype)
    out[:step] = first
    for start in range(step, flat.size, step):
        sl = slice(start, start + step)
        out[sl] = general(flat[sl], None if rflat is None else rflat[sl])
    return out.reshape(x.shape)


def encode_general(x: np.ndarray, fmt: Format, mode: str, rbits, sr_bits: int, overflow: str, nan_policy: str,
                   neg_zero: str, underflow: str) -> np.ndarray:
    """The threshold encoder on a float array of at least one dimension, arguments already
    validated (``nan_policy`` resolved, ``rbits`` checked and broadcast to x for ``"sr"``)."""
    cdt = _compute_dtype(x)
    xc = x.astype(cdt, copy=False)
    r = None if rbits is None else np.asarray(rbits, np.float64)

    a = np.abs(xc)
    neg = np.signbit(xc)
    pos_side = side_table(fmt, False, neg_zero)
    top = len(pos_side.mags) - 1
    if not fmt.signed:
        # Unsigned: -0.0 rounds like +0.0; any other negative value is out of range below.
        idx = _round_side(a, fmt, False, mode, cdt, r, sr_bits)
        out = pos_side.codes[idx]
        out_lo = neg & (a > 0)
        out_hi = (idx == top) & ~out_lo
        if pos_side.low_ext:
            out_lo |= idx == 0
    elif _codes_are_sign_magnitude_indices(fmt):
        # Fast path (e2m1, e1m2, s1p2, e4m3, ...): the code is the magnitude index with the
        # sign bit on top, so no table lookup is needed.
        idx = _round_signed(a, neg, fmt, mode, cdt, r, sr_bits).astype(pos_side.codes.dtype, copy=False)
        if overflow == "saturate":
            out_hi = np.zeros(xc.shape, bool)
            np.minimum(idx, top - 1, out=idx)
        else:
            out_hi = idx == top
        sign = neg.view(np.uint8).astype(idx.dtype)
        if neg_zero == "flush" or not fmt.has_negative_zero:
            sign &= idx != 0
        sign <<= fmt.bits - 1
        out = idx
        out |= sign
        out_lo = np.zeros(xc.shape, bool)
    elif _same_grid(fmt):
        idx = _round_signed(a, neg, fmt, mode, cdt, r, sr_bits)
        neg_codes = side_table(fmt, True, neg_zero).codes
        out = np.where(neg, neg_codes[idx], pos_side.codes[idx])
        out_hi = idx == top
        out_lo = (idx == 0) if pos_side.low_ext else np.zeros(xc.shape, bool)
    else:  # a grid that differs by sign (two's complement int4 reaches -8 but only +7)
        out = np.empty(xc.shape, pos_side.codes.dtype)
        out_hi = np.zeros(xc.shape, bool)
        out_lo = np.zeros(xc.shape, bool)
        for negative in (False, True):
            sel = neg == negative
            side = side_table(fmt, negative, neg_zero)
            rr = None if r is None else r[sel]
            idx = _round_side(a[sel], fmt, negative, mode, cdt, rr, sr_bits)
            out[sel] = side.codes[idx]
            out_hi[sel] = idx == len(side.mags) - 1
            if side.low_ext:
                out_lo[sel] = idx == 0
    isnan = np.isnan(xc)
    out_lo &= ~isnan
    if out_lo.any():
        tiny = out_lo & (a > 0) & ~(neg & (not fmt.signed)) if underflow == "saturate" else np.zeros_like(out_lo)
        _apply_out_of_range(out, out_lo & ~tiny, neg, x, fmt, mode, overflow, high=False)
        _apply_out_of_range(out, tiny, neg, x, fmt, mode, "saturate", high=False)
    out_hi &= ~isnan
    if out_hi.any():
        # +-Inf is exact: no directed-mode exception (step 7); overflow="error" names the first
        # out-of-range element in input order, Inf or not, as the scalar reference does
        infinite = out_hi & np.isinf(xc) if overflow != "error" else np.zeros_like(out_hi)
        _apply_out_of_range(out, out_hi & ~infinite, neg, x, fmt, mode, overflow, high=True)
        _apply_out_of_range(out, infinite, neg, x, fmt, mode, overflow, high=True, infinite=True)
    if isnan.any():
        if nan_policy == "error":
            raise nan_error(fmt)
        for negative in (False, True):
            sel = isnan & (neg == negative)
            if sel.any():
                out[sel] = nan_input_code(fmt, nan_policy, negative)
    return out


@lru_cache(maxsize=None)
def _codes_are_sign_magnitude_indices(fmt: Format) -> bool:
    """True if code == magnitude index (| sign bit) on both sides, as for most minifloats."""
    if not fmt.signed or not _same_grid(fmt):
        return False
    pos = side_table(fmt, False, "preserve")
    if pos.low_ext:
        return False
    finite = len(pos.mags) - 1  # the last point is the extension above max
    return all(int(pos.codes[i]) == i for i in range(finite)) and all(
        fmt._decode_exact(i | (1 << (fmt.bits - 1)))[1] == -fmt._decode_exact(i)[1] for i in range(finite))


@lru_cache(maxsize=None)
def _same_grid(fmt: Format) -> bool:
    return magnitude_grid(fmt, False) == magnitude_grid(fmt, True)


def _round_signed(a, neg, fmt, mode, cdt, r, sr_bits):
    """Magnitude index for a sign-symmetric grid; directed modes pick per sign."""
    if mode in ("rup", "rdn"):
        down = _round_side(a, fmt, False, "rtz", cdt, None, sr_bits)
        up = _index(a, fmt, False, "up", cdt)
        away = neg if mode == "rdn" else ~neg
        return np.where(away, up, down)
    return _round_side(a, fmt, False, mode, cdt, r, sr_bits)


def _apply_out_of_range(out, mask, neg, x, fmt, mode, overflow, high, infinite=False):
    if not mask.any():
        return
    if overflow == "error":
        first = np.asarray(x)[mask].flat[0] if np.ndim(x) else x
        raise overflow_error(fmt, float(first))
    for negative in (False, True):
        sel = mask & (neg == negative)
        if not sel.any():
            continue
        out[sel] = _out_of_range_code_vec(fmt, negative, high, mode, overflow, infinite)


@lru_cache(maxsize=None)
def _out_of_range_code_vec(fmt, negative, high, mode, overflow, infinite=False):
    from fp4spec.elements import out_of_range_code

    return out_of_range_code(fmt, None, negative, high, mode, overflow, infinite)


def decode(codes, fmt: "str | Format") -> np.ndarray:
    """float64 values of ``codes`` (a table lookup)."""
    fmt = get_format(fmt)
    arr = np.asarray(codes)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"codes: dtype {arr.dtype} is not an integer dtype")
    if arr.size and (arr.min() < 0 or arr.max() >= (1 << fmt.bits)):
        raise ValueError(f"codes: values must be {fmt.bits}-bit codes of {fmt.name!r} in "
                         f"[0, {(1 << fmt.bits) - 1}], got [{arr.min()}, {arr.max()}]")
    return fmt.values[arr]


__all__ = ["encode", "encode_general", "decode", "check_rbits", "as_float_array"]
