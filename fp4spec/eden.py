"""MS-EDEN (Quartet II, arXiv 2601.22813): NVFP4 quantization that is unbiased over a random rotation.

Round to nearest, then multiply each rotation group's block scales by one correction factor
chosen so that, averaged over the random rotation, the dequantized tensor equals the input;
round the corrected scales to E4M3 stochastically so they stay representable. The result is
an NVFP4 tensor (E2M1 codes, UE4M3 block scales of 16, an FP32 decode scale): it dequantizes
and multiplies as ``nvfp4`` does.

fp4spec's definition follows the PyTorch path of IST-DASLab/Quartet-II@8776a90
(``src/models/quantization/quantizers/eden.py``: ``EdenSRQuantizer.round_scales`` and
``apply_correction`` with ``scale_dtype="e4m3"``, ``unbiased="eden"``, and the ``eden`` branch
of ``forward``), float32 operation for float32 operation in steps 1-4, with its randomness made
explicit and its reductions made exact:

* The rotation is the caller's: x is the rotated tensor (e.g. :func:`fp4spec.rht.rht` with a
  fresh seed per step); ``group`` is the rotation size (the correction runs per group).
* The stochastic rounding of the scales takes explicit random bits (one per block, StochasticA
  with ``sr_bits`` bits, :func:`fp4spec.elements.encode_scalar`), where the reference draws
  ``torch.bernoulli``; a corrected scale above 448 saturates (the reference clamps to 447.99).
* The correction's two sums are exact, rounded once to float64 (``math.fsum``); the reference
  sums in float32 in the device's order.
* Elements round to nearest even; the reference rounds an exact tie toward +Inf.

The same file's ``forward`` sends ``e4m3``/``eden`` to a Triton kernel, and the package under
``kernels/`` has a CUDA kernel; how they differ is in the docs (Rounding, MS-EDEN).
This module is the slow reference; :mod:`fp4spec.emulator.eden` is the vectorized twin,
tested equal to it.
"""

from __future__ import annotations

import math

import numpy as np

from .number_formats import get_format
from .elements import encode_scalar

F32 = np.float32
BLOCK = 16
#: The reference's ``scales_max`` for ``unbiased="eden"``: the largest block scale is about
#: 255.99, leaving E4M3 room (up to 448) for the correction to raise it.
SCALES_MAX = F32(255.99)
#: The reference's ``val_max``, 6 * 16/17: the block amax maps to 16/17 of E2M1's top
#: (Python's ``6.0 * (16/17)`` and ``6.0 / (17/16)`` round to the same float32).
VAL_MAX = F32(96.0 / 17.0)
E2M1 = get_format("e2m1")
UE4M3 = get_format("ue4m3")
ONE_CODE = 0x38  # UE4M3 1.0


def _f32(fn) -> np.float32:
    with np.errstate(all="ignore"):
        return F32(fn())


def decode_scale(block_amaxes) -> np.float32:
    """The tensor's FP32 decode scale D (the reference's ``s_dec``).

    1. amax = max_b amax_b; D = fp32(fp32(amax / SCALES_MAX) / VAL_MAX); D = 1 if it is 0
       (amax is 0, or below about 2^-138, where the reference divides by zero).
    """
    top = max((F32(a) for a in block_amaxes), default=F32(0.0))
    d = _f32(lambda: _f32(lambda: top / SCALES_MAX) / VAL_MAX)
    return F32(1.0) if d == 0 else d


def initial_scale_code(amax, d) -> int:
    """2. The block's UE4M3 code before the correction: RNE of fp32(fp32(amax / VAL_MAX) / D),
    saturating; a zero scale becomes 1.0."""
    t = _f32(lambda: _f32(lambda: F32(amax) / VAL_MAX) / F32(d))
    code = encode_scalar(t, UE4M3, "rne", overflow="saturate")
    return ONE_CODE if code == 0 else code


def scaled_block(block, scale_code: int, d) -> list:
    """3. y_i = fp32(fp32(x_i / s) / D), s = ue4m3(scale_code)."""
    s = F32(UE4M3.values[scale_code])
    return [_f32(lambda: _f32(lambda: F32(x) / s) / F32(d)) for x in block]


def correction(ys, qs) -> np.float32:
    """4. c = fp32(fp64(sum y_i^2) / fp64(sum y_i * q_i)) over a rotation group, each sum exact and
    rounded once to float64 (every term is exact in float64); c = 1 if the second sum is 0."""
    num = math.fsum(float(y) * float(y) for y in ys)
    den = math.fsum(float(y) * float(q) for y, q in zip(ys, qs))
    if den == 0:
        return F32(1.0)
    return F32(num / den)


def corrected_scale_code(scale_code: int, c, r: int, sr_bits: int) -> int:
    """5. t = fp32(s * c); the new code is ``encode_scalar(t, ue4m3, "sr", r)`` (saturating at 448)."""
    t = _f32(lambda: F32(UE4M3.values[scale_code]) * F32(c))
    return encode_scalar(t, UE4M3, "sr", r=r, sr_bits=sr_bits, overflow="saturate")


def quantize_group(x_group, d, rbits_group, sr_bits: int = 8) -> tuple[list[int], list[int]]:
    """One rotation group (a multiple of 16 values): (E2M1 codes, UE4M3 scale codes per block of 16).

    Steps 2-5 for every block, with the group's correction c applied to each block's scale;
    the element codes are those of step 3's y rounded to nearest even (E2M1, saturating).
    """
    codes, ys, scales = [], [], []
    for b in range(len(x_group) // BLOCK):
        block = [F32(v) for v in x_group[b * BLOCK:(b + 1) * BLOCK]]
        code = initial_scale_code(max(abs(v) for v in block), d)
        y = scaled_block(block, code, d)
        scales.append(code)
        ys += y
        codes += [encode_scalar(v, E2M1, "rne", overflow="saturate") for v in y]
    c = correction(ys, [E2M1.values[q] for q in codes])
    new = [corrected_scale_code(s, c, int(rbits_group[b]), sr_bits) for b, s in enumerate(scales)]
    return codes, new


def quantize_reference(x, *, group: int = 128, rbits, sr_bits: int = 8):
    """MS-EDEN of a 2-D float32 x (the rotated tensor), groups of ``group`` along its last axis.

    1. :func:`decode_scale` from every block amax of x.
    2-5. :func:`quantize_group` for every group; ``rbits``: one integer in [0, 2^sr_bits) per
         block of 16, shape ``(rows, n // 16)``.

    Returns a :class:`~fp4spec.quantized.QuantizedTensor` of scheme ``nvfp4`` with global scale D.
    """
    from .block_schemes import get_scheme
    from .quantized import QuantizedTensor

    x = np.asarray(x, np.float32)
    rb = check_arguments(x, group, rbits, sr_bits)
    amaxes = [np.max(np.abs(x[i, j:j + BLOCK])) for i in range(x.shape[0]) for j in range(0, x.shape[1], BLOCK)]
    d = decode_scale(amaxes)
    codes = np.zeros(x.shape, np.uint8)
    scales = np.zeros((x.shape[0], x.shape[1] // BLOCK), np.uint8)
    per = group // BLOCK
    for i in range(x.shape[0]):
        for j in range(0, x.shape[1], group):
            c, s = quantize_group(list(x[i, j:j + group]), d, rb[i, j // BLOCK:j // BLOCK + per], sr_bits)
            codes[i, j:j + group] = c
            scales[i, j // BLOCK:j // BLOCK + per] = s
    return QuantizedTensor(codes, scales, d, get_scheme("nvfp4"), 1, x.shape)


def check_arguments(x: np.ndarray, group, rbits, sr_bits) -> np.ndarray:
    """ValueError naming the argument: x 2-D and finite, group a multiple of 16 dividing x's rows, rbits per block."""
    if x.ndim != 2:
        raise ValueError(f"x: MS-EDEN takes a 2-D tensor (groups along the last axis), got {x.ndim} dimensions")
    if not np.isfinite(x).all():
        raise ValueError("x: MS-EDEN is defined for finite input")
    if isinstance(group, bool) or not isinstance(group, int) or group < BLOCK or group % BLOCK:
        raise ValueError(f"group: {group!r} is not a positive multiple of {BLOCK} (the rotation size, e.g. 128)")
    if x.shape[1] % group:
        raise ValueError(f"x: length {x.shape[1]} of the last axis is not a multiple of group={group}")
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, int) or not 1 <= sr_bits <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")
    want = (x.shape[0], x.shape[1] // BLOCK)
    rb = np.asarray(rbits)
    if rb.shape != want or rb.dtype.kind not in "iu" or (rb.size and (rb.min() < 0 or rb.max() >= 1 << sr_bits)):
        raise ValueError(f"rbits: expected integers in [0, 2^{sr_bits}) of shape {want} (one per block of {BLOCK}), "
                         f"got {rb.dtype} {rb.shape}")
    return rb


__all__ = ["BLOCK", "SCALES_MAX", "VAL_MAX", "check_arguments", "corrected_scale_code", "correction",
           "decode_scale", "initial_scale_code", "quantize_group", "quantize_reference", "scaled_block"]
