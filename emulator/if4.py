"""IF4, vectorized: :mod:`fp4spec.if4`'s steps over whole arrays of blocks.

Every float32 operation of the scalar reference is one numpy float32 operation here, in the
same order, so the two agree bit for bit (tested exhaustively over scale codes and
adversarial blocks in tests/emulator/test_if4.py).
"""

from __future__ import annotations

import numpy as np

from fp4spec.if4 import E2M1, FP_MAX, INT4, INT_DOWN, INT_FLAG, INT_UP, SCALE_MAX, UE4M3, check_finite, tensor_scales

from .elements import encode

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
_E2M1_VALUES = E2M1.values.astype(np.float32)
_INT4_VALUES = INT4.values.astype(np.float32)
_UE4M3_VALUES = UE4M3.values.astype(np.float32)


def block_scale_codes(vec_max: np.ndarray, s_enc) -> np.ndarray:
    """Steps 4-6: UE4M3 code per block (0 everywhere for an all-zero tensor)."""
    if np.isinf(s_enc):
        return np.zeros(vec_max.shape, np.uint8)
    with np.errstate(all="ignore"):
        s = (vec_max.astype(np.float32) / FP_MAX).astype(np.float32) * F32(s_enc)
    return encode(s.astype(np.float32), UE4M3, "rne", overflow="saturate").astype(np.uint8)


def multipliers(codes: np.ndarray, s_dec) -> np.ndarray:
    """Step 7: min(fp32(1 / fp32(S_dec * s)), FLT_MAX) per block, 0 where the scale is 0."""
    s = _UE4M3_VALUES[codes.astype(np.int64)]
    with np.errstate(all="ignore"):
        r = np.minimum(F32(1.0) / (F32(s_dec) * s), FLT_MAX)
    return np.where(s == 0, F32(0.0), r).astype(np.float32)


def _dequantized(values: np.ndarray, s: np.ndarray, amax, int_branch: bool) -> np.ndarray:
    """Step 11: the candidate's dequantized values, in fouroversix's float32 order."""
    with np.errstate(all="ignore"):
        p = (values * s[..., None]).astype(np.float32) * F32(amax)
        if int_branch:
            p = p.astype(np.float32) * INT_DOWN
        return (p.astype(np.float32) / (SCALE_MAX * FP_MAX)).astype(np.float32)


def row_sums(t: np.ndarray) -> np.ndarray:
    """:func:`fp4spec.scaling.torch_cpu_row_sum` over the last axis (16 or 256 terms): eight
    lanes, four interleaved vector accumulators, then the lanes in order from 0."""
    v = t.reshape(*t.shape[:-1], t.shape[-1] // 8, 8)
    s = v.shape[-2] // 4
    with np.errstate(all="ignore"):
        acc = np.zeros((4,) + v.shape[:-2] + (8,), np.float32)
        for i in range(s):
            acc = (acc + np.moveaxis(v[..., 4 * i:4 * i + 4, :], -2, 0)).astype(np.float32)
        p = acc[0]
        for i in range(4 * s, v.shape[-2]):
            p = (p + v[..., i, :]).astype(np.float32)
        for k in range(1, 4):
            p = (p + acc[k]).astype(np.float32)
        e = np.zeros(t.shape[:-1], np.float32)
        for lane in range(8):
            e = (e + p[..., lane]).astype(np.float32)
    return e


def block_errors(blocks: np.ndarray, dequantized: np.ndarray, rule: str) -> np.ndarray:
    """Steps 12-14: one float32 error per block (``abs_max``: the largest term; ``mse``,
    ``mae``: the terms added in torch's CPU order, :func:`row_sums`)."""
    with np.errstate(all="ignore"):
        d = (dequantized - blocks).astype(np.float32)
        t = (d * d).astype(np.float32) if rule == "mse" else np.abs(d)
    if rule == "abs_max":
        return t.max(axis=-1)
    return row_sums(t)


def candidates(blocks: np.ndarray, amax, s_enc, s_dec, rule: str, rounding: str = "rne", rbits=None,
               sr_bits: int = 8):
    """Steps 4-14 for float32 ``blocks`` ``(..., n_blocks, 16)`` under a given tensor scale:
    ``(scale codes, E2M1 codes, INT4 codes, err_fp, err_int)``."""
    code = block_scale_codes(np.max(np.abs(blocks), axis=-1) if blocks.size else np.zeros(blocks.shape[:-1], F32),
                             s_enc)
    s = _UE4M3_VALUES[code.astype(np.int64)]
    with np.errstate(all="ignore"):
        y = (blocks * multipliers(code, s_dec)[..., None]).astype(np.float32)
        y = (y + F32(0.0)).astype(np.float32)
        z = (y * INT_UP).astype(np.float32)
    fp = encode(y, E2M1, rounding, rbits=rbits, sr_bits=sr_bits, overflow="saturate")
    it = encode(z, INT4, rounding, rbits=rbits, sr_bits=sr_bits, overflow="saturate")
    err_fp = block_errors(blocks, _dequantized(_E2M1_VALUES[fp], s, amax, False), rule)
    err_int = block_errors(blocks, _dequantized(_INT4_VALUES[it], s, amax, True), rule)
    return code, fp, it, err_fp, err_int


def to_tiles(a: np.ndarray, r: int) -> np.ndarray:
    """``(..., rows, n_blocks, k)`` -> ``(..., rows / r, n_blocks, r * k)``: each r x k tile one
    block, its values row by row (fouroversix's ``permute(0, 2, 1, 3)``)."""
    *lead, rows, nb, k = a.shape
    t = a.reshape(*lead, rows // r, r, nb, k)
    return np.swapaxes(t, -3, -2).reshape(*lead, rows // r, nb, r * k)


def from_tiles(a: np.ndarray, r: int) -> np.ndarray:
    """The inverse of :func:`to_tiles`."""
    *lead, tr, nb, rk = a.shape
    t = a.reshape(*lead, tr, nb, r, rk // r)
    return np.swapaxes(t, -3, -2).reshape(*lead, tr * r, nb, rk // r)


def quantize_if4(blocks: np.ndarray, scheme, rounding: str = "rne", rbits=None, sr_bits: int = 8):
    """Quantize float32 ``blocks`` of shape ``(..., n_blocks, 16)``; the amax is over all of them.
    For 16 x 16 tiles (``if4_2d``) the shape is ``(..., rows, n_blocks, 16)``, rows a multiple
    of 16, and each tile is one block (:func:`to_tiles`).

    Returns ``(codes, scale_bytes, S_dec)``: uint8 codes of blocks' shape, uint8 scale bytes
    ``(..., n_blocks)`` (bit 7 set for INT4 blocks; a tile's byte on each of its rows), the
    float32 decode scale.
    """
    blocks = np.asarray(blocks, np.float32)
    check_finite(blocks)
    amax, s_enc, s_dec = tensor_scales(np.max(np.abs(blocks)) if blocks.size else F32(0.0))
    r = scheme.tile_rows
    if scheme.is_2d:
        rbits = None if rbits is None else to_tiles(np.broadcast_to(rbits, blocks.shape), r)
        blocks = to_tiles(blocks, r)
    code, fp, it, err_fp, err_int = candidates(blocks, amax, s_enc, s_dec, scheme.scale_rule, rounding, rbits, sr_bits)
    use_int = err_int < err_fp
    codes = np.where(use_int[..., None], it, fp).astype(np.uint8)
    scales = np.where(use_int, code | INT_FLAG, code).astype(np.uint8)
    if scheme.is_2d:
        codes = from_tiles(codes, r)
        scales = np.repeat(scales, r, axis=-2)
    return codes, scales, s_dec


def block_multipliers(scale_bytes: np.ndarray) -> np.ndarray:
    """:func:`fp4spec.if4.block_multiplier` per block: s, or fp32(s * fp32(6/7)) for INT4 blocks."""
    b = np.asarray(scale_bytes).astype(np.int64)
    s = _UE4M3_VALUES[b & 0x7F]
    with np.errstate(all="ignore"):
        return np.where(b & INT_FLAG, (s * INT_DOWN).astype(np.float32), s).astype(np.float32)


def element_values(codes: np.ndarray, scale_bytes: np.ndarray) -> np.ndarray:
    """float32 element values (e2m1, or int4 for INT4 blocks) of ``codes`` ``(..., n_blocks, 16)``."""
    c = np.asarray(codes).astype(np.int64)
    flag = (np.asarray(scale_bytes).astype(np.int64) & INT_FLAG).astype(bool)[..., None]
    return np.where(flag, _INT4_VALUES[c], _E2M1_VALUES[c]).astype(np.float32)


def dequantize_if4(codes: np.ndarray, scale_bytes: np.ndarray, global_scale) -> np.ndarray:
    """fp32(fp32(q * m) * S_dec) for codes ``(..., n_blocks, 16)``: :func:`fp4spec.if4.dequantize_scalar`."""
    q = element_values(codes, scale_bytes)
    m = block_multipliers(scale_bytes)
    with np.errstate(all="ignore"):
        return ((q * m[..., None]).astype(np.float32) * F32(global_scale)).astype(np.float32)


__all__ = ["block_errors", "block_multipliers", "block_scale_codes", "candidates", "dequantize_if4", "element_values",
           "from_tiles", "multipliers", "quantize_if4", "row_sums", "to_tiles"]
