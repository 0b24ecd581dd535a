"""Quartet II's PyTorch MS-EDEN path, ported for the differential tests of fp4spec.eden.

Source: https://github.com/IST-DASLab/Quartet-II, commit 8776a90b7aa0c0a400ad858a3c05a66f7ec55b73,
``src/models/quantization/quantizers/eden.py``: ``rtn_fp4``, ``sr_e4m3``, and of
``EdenSRQuantizer`` the ``e4m3`` branches of ``round_scales`` and ``apply_correction`` and the
``eden`` branch of ``forward``. License: the repository has no license file at that commit
(its ``kernels/`` package is Apache-2.0); this port is kept for testing, with attribution.

The code is the source's, line for line, with these changes only:

* ``torch.bernoulli(p) == 1.0`` becomes ``uniform < p`` with the caller's ``uniform`` (one per
  block scale): the same draw, made explicit so that fp4spec can replay it.
* ``forward`` starts from the rotated tensor (the rotation is the caller's, as in fp4spec) and
  returns the parts of its result, ``(x_fp4, scales, global_scale)``, instead of their product.
* Configuration fixed to ``scale_dtype="e4m3"``, ``unbiased="eden"``, ``scale_override=1.0``,
  ``group_dim=16``; ``hadamard_dim`` is the rotation group; tensors on the CPU.

It runs on the CPU, where ``tensor / python_float`` is a float32 division by the float32
constant (on CUDA, PyTorch multiplies by the float32 reciprocal instead).
"""

import torch

GRID = torch.tensor(
    [-6.0, -4.0, -3.0, -2.0, -1.5, -1.0, -0.5, 0.0,
     0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0],
)


def rtn_fp4(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    inds = torch.bucketize(x, grid)

    lo = torch.clamp(inds - 1, min=0, max=15)
    hi = torch.clamp(inds, min=0, max=15)

    low = grid[lo]
    high = grid[hi]

    return torch.where(
        (high - x) <= (x - low),
        high,
        low,
    )


def sr_e4m3(x: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    x = torch.clamp(x, -447.99, 447.99)  # insure 448 isnt low to prevent high from becoming NaN

    if x.isnan().any():
        raise ValueError("x has NaNs")

    q = x.to(torch.float8_e4m3fn)
    nextdq = (q.view(torch.uint8) + 1).view(torch.float8_e4m3fn).float()
    prevdq = (q.view(torch.uint8) - 1).view(torch.float8_e4m3fn).float()
    dq = q.float()

    low = torch.where(
        dq > x,
        prevdq,
        dq,
    )

    high = torch.where(
        dq > x,
        dq,
        nextdq,
    )

    return torch.where(
        uniform < (x - low) / (high - low),  # source: torch.bernoulli((x - low) / (high - low)) == 1.0
        high,
        low,
    )


def round_scales(scales: torch.Tensor, scale_override: float = 1.0):
    scales_max = 255.99  # unbiased == "eden"
    val_max = 6.0 / scale_override * (16 / 17)
    amax = scales.max()
    s_dec = torch.where(
        amax == 0.0,
        1.0,
        amax / scales_max / val_max,
    )

    s_dec_b = scales / val_max
    s_dec_b_e4m3 = (s_dec_b / s_dec).to(torch.float8_e4m3fn).float()
    s_dec_b_e4m3 = torch.where(
        s_dec_b_e4m3 == 0,
        1.0,
        s_dec_b_e4m3,
    )
    return s_dec_b_e4m3, s_dec


def apply_correction(scales: torch.Tensor, correction: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    scales = scales.view(correction.size(0), -1)
    corrected_scales = (scales * correction).view(-1, 1)
    # scales must remain E4M3 representable
    return sr_e4m3(corrected_scales, uniform.reshape(-1, 1))


def eden_forward(x_had: torch.Tensor, uniform: torch.Tensor, hadamard_dim: int = 128, group_dim: int = 16):
    """``EdenSRQuantizer.forward``'s eden branch on the rotated ``x_had`` (float32):
    ``(x_fp4, scales, global_scale)`` with x_fp4 of x_had's size and scales one per block of 16
    (row-major); ``uniform``: one float in [0, 1) per block."""
    grid = GRID.to(x_had.dtype)
    x_had = x_had.view(-1, group_dim)
    scales = x_had.abs().max(dim=-1, keepdim=True)[0]

    scales, global_scale = round_scales(scales)

    x_scaled = x_had / scales / global_scale
    x_fp4 = rtn_fp4(x_scaled, grid)

    x_fp4 = x_fp4.view(-1, hadamard_dim)
    x_scaled = x_scaled.view(-1, hadamard_dim)

    num = (x_scaled * x_scaled).sum(dim=-1, keepdim=True)
    denom = (x_scaled * x_fp4).sum(dim=-1, keepdim=True)
    correction = num / denom
    correction = torch.where(correction.isnan(), 1.0, correction)

    scales = apply_correction(scales, correction, uniform)

    x_fp4 = x_fp4.view(-1, group_dim)
    return x_fp4, scales, global_scale


def eden_parts(x_had: torch.Tensor, hadamard_dim: int = 128, group_dim: int = 16) -> dict:
    """The intermediate values of :func:`eden_forward` before the stochastic rounding (its own
    lines, stopped early): initial scales, global scale, x_scaled, x_fp4 and the corrections."""
    grid = GRID.to(x_had.dtype)
    x_had = x_had.view(-1, group_dim)
    scales, global_scale = round_scales(x_had.abs().max(dim=-1, keepdim=True)[0])
    x_scaled = x_had / scales / global_scale
    x_fp4 = rtn_fp4(x_scaled, grid)
    num = (x_scaled.view(-1, hadamard_dim) ** 2).sum(dim=-1, keepdim=True)
    denom = (x_scaled.view(-1, hadamard_dim) * x_fp4.view(-1, hadamard_dim)).sum(dim=-1, keepdim=True)
    correction = torch.where((num / denom).isnan(), 1.0, num / denom)
    return {"scales": scales, "global_scale": global_scale, "x_scaled": x_scaled, "x_fp4": x_fp4,
            "correction": correction}
