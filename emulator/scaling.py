"""Vectorized block scaling: :mod:`fp4spec.scaling` over whole arrays.

Same steps, same float32 operations in the same order, whole arrays at a time: blocks are a
reshape to ``(..., n_blocks, block)``, amax is a reduction over the last axis, scales are
float32 numpy operations on the ``(..., n_blocks)`` array of amaxes (E8M0 exponents are
integer operations on the float32 bit patterns), and elements are one broadcast multiply
followed by :func:`fp4spec.emulator.elements.encode` (by lookup table for elements of at most
6 bits, :mod:`fp4spec.emulator.encode_table`). No Python loop
runs per block. Inputs here are float32 with the blocked axis last and padded
(:func:`fp4spec.scaling.prepare_input`), or float16 / bfloat16 the same way (``keep_16bit``):
those are widened to float32 chunk by chunk (exact), never the whole tensor at once.

Shortcuts that are provably identical to the reference (and tested equal to it):

* torchao's ``x / max(2^e, 2^-126)`` is computed as ``x * 2^-max(e, -126)`` -- the
  divisor is a power of two whose reciprocal is exact, so both are the correctly rounded
  value of the same real number.
* The clamp of scaled elements to +-max is skipped when it equals the element format's max:
  the saturating encoder gives the same code for every rounding mode.
* UE4M3 block scales (already clamped to [0, 448], or NaN) are rounded with ml_dtypes'
  ``float8_e4m3fn`` cast (RNE from float32), sign bit cleared -- ten times faster than the
  generic encoder on a 127-code format and tested equal to it (:func:`encode_ue4m3`).
* amax is the maximum of the float32 bit patterns with the sign bit cleared: for
  non-negative floats the integer order is the numeric order, and every NaN pattern is
  above +Inf, so a block holding a NaN has a NaN amax exactly as ``np.max`` gives. The
  same holds for bfloat16 patterns (the high halves of float32 ones), so bfloat16 blocks are
  reduced before widening. Blocks of a power-of-two size are reduced by halving
  (:func:`max_of_aligned_groups`), which is the same maximum taken in another order.
* Dequantize gathers ``values[codes]`` and multiplies by the per-block factor (and the
  tensor factor) in the reference's order, chunk by chunk into one output array.

Blocks are independent once the tensor scale is known, so the work runs over chunks of
whole blocks (or whole tiles) of about :data:`CHUNK_ELEMENTS` elements, which keeps every
pass in the CPU cache; a Python loop runs per chunk, never per block.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fp4spec.block_schemes import Scheme
from fp4spec.scaling import FLT_MAX, TensorScale, element_nan_policy, two_level_tensor_scale

from .elements import encode

F32 = np.float32

#: Elements per chunk of blocks (float32: 1 MiB; the element encoder works through a chunk
#: in pieces of its own, so this only bounds the per-block arrays and the Python loop).
CHUNK_ELEMENTS = 1 << 18


def abs_max_last(a: np.ndarray) -> np.ndarray:
    """float32 max |a| over the last axis of a float32, float16 or bfloat16 array; NaN if any
    element is NaN. bfloat16 is reduced on its 16-bit patterns (the same order), then widened."""
    if a.dtype == ml_dtypes.bfloat16:
        m = _max_last(np.ascontiguousarray(a).view(np.uint16) & np.uint16(0x7FFF))
        return (m.astype(np.uint32) << 16).view(np.float32)
    return _max_last(np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)).view(np.float32)


def _max_last(bits: np.ndarray) -> np.ndarray:
    k = bits.shape[-1]
    if k == 0 or k & (k - 1):
        return np.max(bits, axis=-1)
    return max_of_aligned_groups(bits.reshape(-1), k).reshape(bits.shape[:-1])


def max_of_aligned_groups(flat: np.ndarray, k: int) -> np.ndarray:
    """Maxima of the consecutive groups of k (a power of two) elements of a 1-D array, by
    halving: max of even and odd elements, log2(k) times. Each pass streams through memory,
    where numpy's reduction over a short last axis runs one small loop per group (2-5x slower)."""
    m = flat
    while k > 1:
        m = np.maximum(m[0::2], m[1::2])
        k //= 2
    return m


def as_float32(a: np.ndarray) -> np.ndarray:
    """a as float32 (exact from float16 and bfloat16; no copy if it already is). A bfloat16
    is the high half of its float32, so it widens by a shift (4x faster than its cast;
    the integer cast then an in-place shift is faster than a shift that casts)."""
    if a.dtype == ml_dtypes.bfloat16:
        bits = a.view(np.uint16).astype(np.uint32)
        bits <<= 16
        return bits.view(np.float32)
    return a.astype(np.float32, copy=False)


def _chunks(n_units: int, unit_elems: int):
    step = max(1, CHUNK_ELEMENTS // max(unit_elems, 1))
    for start in range(0, n_units, step):
        yield slice(start, min(start + step, n_units))


# -- float32 bit fields -------------------------------------------------------------------------

def _fields(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(biased exponent, mantissa) of non-negative float32 values, as int64."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.int64)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def _floor_log2_int(m: np.ndarray) -> np.ndarray:
    """floor(log2 m) of positive integers below 2^24 (exact via frexp of the float64 value)."""
    return np.frexp(m.astype(np.float64))[1].astype(np.int64) - 1


def _floor_log2(E: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Exact floor(log2 a) of positive float32 a from its fields (Inf reads as 2^128)."""
    sub = E == 0
    out = E - 127
    if sub.any():
        out = np.where(sub, _floor_log2_int(np.maximum(M, 1)) - 149, out)
    return out


def _is_power_of_two(E: np.ndarray, M: np.ndarray) -> np.ndarray:
    return np.where(E == 0, (M & (M - 1)) == 0, M == 0)


# -- MX -------------------------------------------------------------------------------------------

def mx_exponents(amax: np.ndarray, scheme: Scheme) -> tuple[np.ndarray, np.ndarray]:
    """(unbiased exponent e in [-127, 127], NaN-scale mask) per block: :func:`fp4spec.scaling.mx_scale_exponent`."""
    policies = scheme.policies
    element = scheme.element
    rule = scheme.scale_rule
    nan_scale = np.isnan(amax)
    if policies["mx_nonfinite_block"] == "nan_scale":
        nan_scale |= np.isinf(amax)
    a = np.where(nan_scale, F32(1.0), amax).astype(np.float32)
    zero = a == 0
    E, M = _fields(a)
    emax = element.emax
    if rule == "floor":
        e = _floor_log2(E, M) - emax
    elif rule == "ceil":
        e = _floor_log2(E, M) + ~_is_power_of_two(E, M) - emax
    elif rule == "even":
        bits = (E << 23) | M
        rounded = (bits + (1 << (22 - element.mantissa_bits))) & 0x7F800000
        e = (rounded >> 23) - 127 - emax
    elif rule == "rceil":
        max_elem = F32(element.max)
        with np.errstate(over="ignore"):
            if policies["mx_rceil_descale"] == "mul_reciprocal":
                d = a * (F32(1.0) / max_elem)
            else:
                d = a / max_elem
        dpos = np.where((d == 0) | np.isinf(d), F32(1.0), d)
        Ed, Md = _fields(dpos)
        e = _floor_log2(Ed, Md) + ~_is_power_of_two(Ed, Md)
        e = np.where(np.isinf(d), 127, e)
        zero = zero | (d == 0)
    else:
        raise ValueError(f"scale_rule: {rule!r} is not one of 'floor', 'ceil', 'rceil', 'even'")
    e = np.where(zero, -127, e)
    return np.clip(e, -127, 127), nan_scale


def _quantize_mx_chunk(xb, scheme: Scheme, rounding, rbits, sr_bits):
    amax = abs_max_last(xb)  # before widening: bfloat16 is reduced on half the bytes
    scratch = xb.dtype != np.float32 and not scheme.element.has_nan  # xb is not needed after scaling
    xb = as_float32(xb)
    e, nan_scale = mx_exponents(amax, scheme)
    scale_codes = np.where(nan_scale, 0xFF, e + 127).astype(np.uint8)
    if scheme.policies["mx_element_scaling"] == "exact":
        shift = -e
    elif scheme.scale_rule == "rceil":
        shift = np.where(e == -127, 0, -e)  # TE exp2f_rcp: scale byte 0 -> 1.0
    else:
        shift = -np.maximum(e, -126)  # torchao: divide by max(2^e, 2^-126)
    mult = np.ldexp(np.ones(shift.shape, np.float32), shift.astype(np.int32))
    torchao_rceil = scheme.policies["mx_element_scaling"] == "torchao" and scheme.scale_rule == "rceil"
    mult[nan_scale] = np.nan if torchao_rceil else 0.0  # torchao RCEIL multiplies a NaN block by its NaN descale
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.multiply(xb, mult[..., None], out=xb if scratch else None)
    if scheme.element.has_nan:  # a NaN y (x NaN or +-Inf, NaN scale) takes x's sign, not the host's
        y = np.where(np.isnan(y), np.copysign(F32(np.nan), xb), y)
    codes = encode(y, scheme.element, rounding, rbits=rbits, sr_bits=sr_bits, overflow="saturate",
                   nan=element_nan_policy(scheme.element))
    return codes, scale_codes


def quantize_mx(xb: np.ndarray, scheme: Scheme, rounding: str, rbits, sr_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """MX quantization of float32 (float16, bfloat16) blocks ``xb`` of shape (..., n_blocks, k):
    (codes, scale codes)."""
    k = xb.shape[-1]
    b = int(np.prod(xb.shape[:-1], dtype=np.int64))
    flat = xb.reshape(b, k)
    rflat = None if rbits is None else np.broadcast_to(rbits, xb.shape).reshape(b, k)
    codes = np.empty(flat.shape, np.uint8)
    scales = np.empty(flat.shape[:1], np.uint8)
    for sl in _chunks(flat.shape[0], k):
        codes[sl], scales[sl] = _quantize_mx_chunk(flat[sl], scheme, rounding,
                                                   None if rflat is None else rflat[sl], sr_bits)
    return codes.reshape(xb.shape), scales.reshape(xb.shape[:-1])


def dequantize_mx(codes: np.ndarray, scales: np.ndarray, scheme: Scheme) -> np.ndarray:
    """fp32(P * 2^(code - 127)) per element; NaN where the scale code is 0xFF. codes: (..., nb, k)."""
    with np.errstate(over="ignore", invalid="ignore"):
        pow2 = np.ldexp(np.ones(scales.shape, np.float32), scales.astype(np.int32) - 127)
        pow2[scales == 0xFF] = np.nan
    return scaled_element_values(codes, scheme.element.values.astype(np.float32), pow2)


def scaled_element_values(codes: np.ndarray, values: np.ndarray, block_factor: np.ndarray, factor=None) -> np.ndarray:
    """float32 ``(values[codes] * block_factor[..., None]) * factor`` (factor: a float32 scalar or
    None), the two products rounded in that order, for codes (..., nb, k) and block_factor
    (..., nb). Chunk by chunk into one output array, the gather's index in a reused buffer."""
    k = codes.shape[-1]
    flat = codes.reshape(-1, k)
    bf = np.asarray(block_factor, np.float32).reshape(-1)
    out = np.empty(flat.shape, np.float32)
    index = np.empty(min(flat.size, max(CHUNK_ELEMENTS, k)), np.intp)  # _chunks: at least one block
    with np.errstate(over="ignore", invalid="ignore"):
        for sl in _chunks(flat.shape[0], k):
            o = out[sl]
            i = index[:o.size].reshape(o.shape)
            np.copyto(i, flat[sl], casting="unsafe")
            np.take(values, i, out=o)
            np.multiply(o, bf[sl, None], out=o)
            if factor is not None:
                np.multiply(o, factor, out=o)
    return out.reshape(codes.shape)


# -- two-level ----------------------------------------------------------------------------------

def block_amaxes(xb: np.ndarray, scheme: Scheme) -> np.ndarray:
    """vec_max per 1 x k row block: the block's amax, or for r x k tiles the tile's amax
    repeated over the tile's r rows. xb: (..., rows, n_blocks, k)."""
    if not scheme.is_2d:
        k = xb.shape[-1]
        flat = xb.reshape(int(np.prod(xb.shape[:-1], dtype=np.int64)), k)
        out = np.empty(flat.shape[:1], np.float32)
        for sl in _chunks(flat.shape[0], k):
            out[sl] = abs_max_last(flat[sl])
        return out.reshape(xb.shape[:-1])
    r = scheme.tile_rows
    *lead, rows, nb, k = xb.shape
    tiles = xb.reshape(int(np.prod(lead, dtype=np.int64)) * (rows // r), r, nb, k)
    out = np.empty((tiles.shape[0], nb), np.float32)
    for sl in _chunks(tiles.shape[0], r * nb * k):
        t = tiles[sl]
        out[sl] = abs_max_last(abs_max_last(t).transpose(0, 2, 1))
    return np.repeat(out.reshape(*lead, rows // r, nb), r, axis=-2)


def encode_ue4m3(s: np.ndarray) -> np.ndarray:
    """UE4M3 codes of float32 values in [0, 448] or NaN: RNE (== ``encode(s, "ue4m3")`` there).

    The ml_dtypes cast rounds to nearest even with subnormals; the sign bit is cleared so a
    NaN of either sign gives the UE4M3 NaN 0x7F.
    """
    return s.astype(ml_dtypes.float8_e4m3fn).view(np.uint8) & np.uint8(0x7F)


def _encode_scale(s: np.ndarray, scheme: Scheme) -> np.ndarray:
    if scheme.scale.name == "ue4m3":
        return encode_ue4m3(s)
    return encode(s, scheme.scale, "rne", overflow="saturate")


def _scale_values(codes: np.ndarray, scheme: Scheme) -> np.ndarray:
    return scheme.scale.values.astype(np.float32)[codes]


def block_scale_values(vec_max: np.ndarray, ts: TensorScale, scheme: Scheme, candidate: float = 1.0) -> np.ndarray:
    """The float32 block scales *before* their cast to the scale format: steps 1-3 of
    :func:`fp4spec.scaling.two_level_block_scale` (the torchao chain's steps 1-3), vectorized."""
    vec_max = np.asarray(vec_max, np.float32)
    max_elem = F32(scheme.max_elem)
    with np.errstate(all="ignore"):
        if scheme.policies["nv_scale_chain"] == "te":
            if np.isinf(ts.encode):  # an all-zero tensor under nv_zero_global_amax="zero"
                s = np.zeros(vec_max.shape, np.float32)
            elif scheme.scale_rule == "4over6":
                s = (vec_max / max_elem) * ts.encode
                if candidate != 1.0:
                    s = s * F32(candidate)
            elif scheme.policies["nv_block_scale_op"] == "divide":
                s = (vec_max / max_elem) * ts.encode
            else:
                mult = ts.encode * (F32(1.0) / max_elem)
                s = np.minimum(vec_max * mult, FLT_MAX)
        else:
            s = (vec_max / max_elem) / ts.decode
        if scheme.policies["nv_block_scale_floor"] == "e4m3_min_normal":
            fl = scheme.scale.min_normal if scheme.scale.min_normal is not None else scheme.scale.min_positive
            s = np.maximum(s, F32(fl))
        return np.minimum(s, F32(scheme.scale.max)).astype(np.float32, copy=False)


def block_scale_codes(vec_max: np.ndarray, ts: TensorScale, scheme: Scheme, candidate: float = 1.0) -> np.ndarray:
    """Vectorized :func:`fp4spec.scaling.two_level_block_scale`."""
    return _encode_scale(block_scale_values(vec_max, ts, scheme, candidate), scheme)


def element_multipliers(scale_codes: np.ndarray, ts: TensorScale, scheme: Scheme) -> np.ndarray:
    """Vectorized :func:`fp4spec.scaling.two_level_element_multiplier`."""
    s = _scale_values(scale_codes, scheme)
    with np.errstate(all="ignore"):
        if scheme.policies["nv_scale_chain"] == "te":
            r = np.minimum(F32(1.0) / (s * ts.decode), FLT_MAX)
            if scheme.policies["nv_zero_scale_elements"] == "zero":
                r = np.where(s == 0, F32(0.0), r).astype(np.float32)
            return r
        return ts.encode / s


def element_codes(xb: np.ndarray, mult: np.ndarray, scheme: Scheme, rounding, rbits, sr_bits, *,
                  scratch: bool = False) -> np.ndarray:
    """Vectorized :func:`fp4spec.scaling.two_level_element_code` for float32 blocks xb
    (..., nb, k); ``scratch=True``: xb is a temporary copy that may be overwritten."""
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.multiply(xb, mult[..., None], out=xb if scratch else None)
    top = scheme.max_elem
    if top < scheme.element.max:
        np.clip(y, F32(-top), F32(top), out=y)
    if scheme.policies["nv_negative_zero"] == "positive":
        np.add(y, F32(0.0), out=y)
    return encode(y, scheme.element, rounding, rbits=rbits, sr_bits=sr_bits, overflow="saturate",
                  nan=element_nan_policy(scheme.element))


def four_over_six_errors(xb, codes, scale_codes, ts: TensorScale, scheme: Scheme) -> np.ndarray:
    """Per-row-block error in fp32: the largest term (``abs_max``), or the terms added in element order
    (``nv_4over6_error_sum="sequential"``) or in torch's CPU order (``"torch_cpu"``); see the scalar reference."""
    q = scheme.element.values.astype(np.float32)[codes]
    s = _scale_values(scale_codes, scheme)
    denom = F32(scheme.max_elem) * F32(scheme.scale_bound)
    mode = scheme.error_mode or "mae"
    if mode == "abs_max" or scheme.policies["nv_4over6_error_sum"] == "torch_cpu":
        from .if4 import block_errors

        with np.errstate(all="ignore"):
            dq = (((q * s[..., None]) * ts.amax) / denom).astype(np.float32)
        return block_errors(xb, dq, mode)
    mse = mode == "mse"
    err = np.zeros(scale_codes.shape, np.float32)
    with np.errstate(all="ignore"):
        for idx in range(xb.shape[-1]):
            val = ((q[..., idx] * s) * ts.amax) / denom
            diff = val - xb[..., idx]
            err = err + (diff * diff if mse else np.abs(diff))
    return err


def tree_sum_rows(err: np.ndarray, r: int) -> np.ndarray:
    """Sum row errors (..., rows, nb) over each tile of r = 16 rows in TE's tree order, repeated back over the rows."""
    *lead, rows, nb = err.shape
    t = err.reshape(*lead, rows // r, r, nb)
    while t.shape[-2] > 1:
        half = t.shape[-2] // 2
        t = t[..., :half, :] + t[..., half:, :]
    return np.repeat(t[..., 0, :], r, axis=-2)


def _two_level_chunk(xb, vec_max, ts: TensorScale, scheme: Scheme, rounding, rbits, sr_bits):
    """Codes and scale codes of whole blocks (1D: (B, k) with vec_max (B,); tiles:
    (T, r, nb, k) with vec_max (T, r, nb)); xb in any float dtype, widened here."""
    scratch = xb.dtype != np.float32  # a widened copy: the element scaling may reuse it
    xb = as_float32(xb)
    if scheme.scale_rule != "4over6":
        scale_codes = block_scale_codes(vec_max, ts, scheme)
        mult = element_multipliers(scale_codes, ts, scheme)
        return element_codes(xb, mult, scheme, rounding, rbits, sr_bits, scratch=scratch), scale_codes
    cands = []
    for candidate in (1.0, 1.5):
        sc = block_scale_codes(vec_max, ts, scheme, candidate)
        c = element_codes(xb, element_multipliers(sc, ts, scheme), scheme, rounding, rbits, sr_bits)
        err = four_over_six_errors(xb, c, sc, ts, scheme)
        if scheme.is_2d:
            err = tree_sum_rows(err, scheme.tile_rows)  # (T, r, nb): each tile's r rows
        cands.append((c, sc, err))
    (c6, s6, e6), (c4, s4, e4) = cands
    pick4 = e4 < e6
    return np.where(pick4[..., None], c4, c6), np.where(pick4, s4, s6)


def quantize_two_level(xb: np.ndarray, scheme: Scheme, rounding: str, rbits, sr_bits: int):
    """Two-level quantization of float32 (float16, bfloat16) blocks xb (..., rows, n_blocks, k)
    (rows: the second-to-last axis of the input; 1D schemes may have any leading shape).

    1. vec_max of every block (or tile) -- one pass, kept.
    2. global amax = max of the vec_max (NaN if any is NaN) -> the tensor scale
       (:func:`fp4spec.scaling.two_level_tensor_scale`, one scalar).
    3. Chunk by chunk: block scale codes, multipliers, element codes.

    Returns (codes, scale codes (..., rows, n_blocks), TensorScale).
    """
    vec_max = block_amaxes(xb, scheme)
    gmax = np.max(vec_max) if vec_max.size else F32(0.0)
    ts = two_level_tensor_scale(F32(gmax), scheme)
    k = xb.shape[-1]
    codes = np.empty(xb.shape, np.uint8)
    scales = np.empty(xb.shape[:-1], np.uint8)
    rb = None if rbits is None else np.broadcast_to(rbits, xb.shape)
    if scheme.is_2d:
        r = scheme.tile_rows
        *lead, rows, nb, _ = xb.shape
        t = int(np.prod(lead, dtype=np.int64)) * (rows // r)
        units = (xb.reshape(t, r, nb, k), vec_max.reshape(t, r, nb), codes.reshape(t, r, nb, k),
                 scales.reshape(t, r, nb), None if rb is None else rb.reshape(t, r, nb, k))
        unit_elems = r * nb * k
    else:
        b = int(np.prod(xb.shape[:-1], dtype=np.int64))
        units = (xb.reshape(b, k), vec_max.reshape(b), codes.reshape(b, k), scales.reshape(b),
                 None if rb is None else rb.reshape(b, k))
        unit_elems = k
    x_u, v_u, c_u, s_u, r_u = units
    for sl in _chunks(x_u.shape[0], unit_elems):
        c_u[sl], s_u[sl] = _two_level_chunk(x_u[sl], v_u[sl], ts, scheme, rounding,
                                            None if r_u is None else r_u[sl], sr_bits)
    return codes, scales, ts


def dequantize_two_level(codes: np.ndarray, scales: np.ndarray, global_scale, scheme: Scheme) -> np.ndarray:
    """Vectorized :func:`fp4spec.scaling.dequantize_two_level_scalar`. codes: (..., nb, k)."""
    values = scheme.element.values.astype(np.float32)
    s = _scale_values(scales, scheme)
    g = F32(global_scale)
    if scheme.policies["nv_dequant_order"] == "(q*s)*g":
        return scaled_element_values(codes, values, s, g)
    with np.errstate(all="ignore"):
        gs = g * s
    return scaled_element_values(codes, values, gs)


__all__ = [
    "block_amaxes",
    "block_scale_codes",
    "dequantize_mx",
    "dequantize_two_level",
    "element_codes",
    "encode_ue4m3",
    "element_multipliers",
    "four_over_six_errors",
    "mx_exponents",
    "quantize_mx",
    "quantize_two_level",
    "scaled_element_values",
    "tree_sum_rows",
]
