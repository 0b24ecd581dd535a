"""IF4 in torch ops on the tensor's device: :mod:`fp4spec.emulator.if4`'s float32 steps, one torch
float32 operation for each numpy one, in the same order (tested bit-equal on every selection
rule and rounding, adversarial blocks, scale-code edges: tests/backends/test_torch_if4.py).

The definition (steps 1-14, the selection between E2M1 and the INT4 grid stretched by 6/7,
flagged by bit 7 of the block's scale byte) is :mod:`fp4spec.if4`.
"""

from __future__ import annotations

import numpy as np
import torch

from fp4spec import if4
from fp4spec.if4 import E2M1, FP_MAX, INT4, INT_DOWN, INT_FLAG, INT_UP, SCALE_MAX, UE4M3, tensor_scales

from .torch_generic import encode_elements
from .torch_ops import F32_MAX, _const


def _table(fmt, device):
    return _const(np.asarray(fmt.values, np.float32), torch.float32, device)


def check_finite(x) -> None:
    """:func:`fp4spec.if4.check_finite`'s ValueError (x copied to the host only when it has a
    non-finite value; one device read to find out)."""
    if not bool(torch.isfinite(x).all()):
        if4.check_finite(x.cpu().numpy())


def block_scale_codes(vec_max, s_enc: np.float32):
    """Steps 4-6: s = fp32(fp32(vec_max / 6) * S_enc), its E4M3 code RNE (0 for S_enc = +Inf)."""
    if np.isinf(s_enc):
        return torch.zeros(vec_max.shape, dtype=torch.uint8, device=vec_max.device)
    s = torch.div(vec_max, torch.full_like(vec_max, float(FP_MAX))) * float(s_enc)  # a scalar divisor: x * (1/6) on CUDA
    s = torch.minimum(s, torch.tensor(float(SCALE_MAX), device=s.device))  # <= 448 (1 + 2^-22): rounds to 448
    return s.to(torch.float8_e4m3fn).view(torch.uint8) & 0x7F


def multipliers(codes, s_dec: np.float32, scale_values):
    """Step 7: min(fp32(1 / fp32(S_dec * s)), FLT_MAX) per block, 0 where the scale is 0."""
    s = scale_values[codes.long()]
    d = torch.full_like(s, float(s_dec)) * s
    r = torch.minimum(torch.div(torch.ones_like(d), d), torch.tensor(F32_MAX, device=s.device))
    return torch.where(s == 0, torch.zeros_like(r), r)


def _dequantized(values, s, amax: np.float32, int_branch: bool):
    """Step 11: fp32(fp32(fp32(fp32(v * s) * amax) [* 6/7]) / 2688)."""
    p = (values * s.unsqueeze(-1)) * float(amax)
    if int_branch:
        p = p * float(INT_DOWN)
    return torch.div(p, torch.full_like(p, float(SCALE_MAX * FP_MAX)))  # a true division, not p * (1/2688)


def row_sums(t):
    """:func:`fp4spec.emulator.if4.row_sums`: torch's CPU order over the last axis (16 or 256
    terms) -- eight lanes, four interleaved vector accumulators, then the lanes from 0."""
    v = t.reshape(*t.shape[:-1], t.shape[-1] // 8, 8)
    s = v.shape[-2] // 4
    acc = [torch.zeros(v.shape[:-2] + (8,), dtype=torch.float32, device=t.device) for _ in range(4)]
    for i in range(s):
        acc = [acc[k] + v[..., 4 * i + k, :] for k in range(4)]
    p = acc[0]
    for i in range(4 * s, v.shape[-2]):
        p = p + v[..., i, :]
    for k in range(1, 4):
        p = p + acc[k]
    e = torch.zeros(t.shape[:-1], dtype=torch.float32, device=t.device)
    for lane in range(8):
        e = e + p[..., lane]
    return e


def block_errors(blocks, dequantized, rule: str):
    """Steps 12-14: ``abs_max`` the largest term; ``mse``/``mae`` the terms in torch's CPU order."""
    d = dequantized - blocks
    t = d * d if rule == "mse" else d.abs()
    if rule == "abs_max":
        return t.amax(dim=-1)
    return row_sums(t)


def to_tiles(a, r: int):
    """:func:`fp4spec.emulator.if4.to_tiles`: ``(..., rows, nb, k)`` -> ``(..., rows / r, nb, r * k)``."""
    *lead, rows, nb, k = a.shape
    return a.reshape(*lead, rows // r, r, nb, k).transpose(-3, -2).reshape(*lead, rows // r, nb, r * k)


def from_tiles(a, r: int):
    """The inverse of :func:`to_tiles`."""
    *lead, tr, nb, rk = a.shape
    return a.reshape(*lead, tr, nb, r, rk // r).transpose(-3, -2).reshape(*lead, tr * r, nb, rk // r)


def quantize_if4(blocks, scheme, rounding: str = "rne", rbits=None, sr_bits: int = 8):
    """float32 ``blocks`` ``(..., n_blocks, 16)`` (``if4_2d``: ``(..., rows, n_blocks, 16)``) ->
    (codes, scale bytes, S_dec 0-d float32 tensor), as :func:`fp4spec.emulator.if4.quantize_if4`.
    The tensor amax and the check for non-finite input read the device once each (the tensor
    scale is the emulator's host steps)."""
    dev = blocks.device
    check_finite(blocks.reshape(*blocks.shape[:-2], -1))  # named as x's element (blocked axis last)
    r = scheme.tile_rows
    if scheme.is_2d:
        rbits = None if rbits is None else to_tiles(rbits.expand(blocks.shape), r)
        blocks = to_tiles(blocks, r)
    vec_max = blocks.abs().amax(dim=-1) if blocks.numel() else torch.zeros(blocks.shape[:-1], device=dev)
    amax, s_enc, s_dec = tensor_scales(np.float32(vec_max.amax().item() if vec_max.numel() else 0.0))  # max of maxes
    scale_values = _table(UE4M3, dev)
    code = block_scale_codes(vec_max, s_enc)
    s = scale_values[code.long()]
    y = blocks * multipliers(code, s_dec, scale_values).unsqueeze(-1)
    y = y + 0.0
    z = y * float(INT_UP)
    fp = encode_elements(y, E2M1, rounding, rbits, sr_bits)
    it = encode_elements(z, INT4, rounding, rbits, sr_bits)
    err_fp = block_errors(blocks, _dequantized(_table(E2M1, dev)[fp.long()], s, amax, False), scheme.scale_rule)
    err_int = block_errors(blocks, _dequantized(_table(INT4, dev)[it.long()], s, amax, True), scheme.scale_rule)
    use_int = err_int < err_fp
    codes = torch.where(use_int.unsqueeze(-1), it, fp).to(torch.uint8)
    scales = torch.where(use_int, code | INT_FLAG, code).to(torch.uint8)
    if scheme.is_2d:
        codes = from_tiles(codes, r)
        scales = scales.repeat_interleave(r, dim=-2)
    return codes, scales, torch.tensor(float(s_dec), dtype=torch.float32, device=dev)


def dequantize_if4(codes, scale_bytes, global_scale):
    """fp32(fp32(q * m) * S_dec) for codes ``(..., n_blocks, 16)`` (m = s, or fp32(s * 6/7) for INT4 blocks)."""
    dev = codes.device
    b = scale_bytes.long()
    flag = (b & INT_FLAG) != 0
    s = _table(UE4M3, dev)[b & 0x7F]
    m = torch.where(flag, s * float(INT_DOWN), s)
    c = codes.long()
    q = torch.where(flag.unsqueeze(-1), _table(INT4, dev)[c], _table(E2M1, dev)[c])
    g = global_scale if isinstance(global_scale, torch.Tensor) else torch.tensor(float(np.float32(global_scale)))
    return (q * m.unsqueeze(-1)) * g.to(device=dev, dtype=torch.float32)


__all__ = ["block_errors", "block_scale_codes", "check_finite", "dequantize_if4", "from_tiles", "multipliers",
           "quantize_if4", "row_sums", "to_tiles"]
