"""What Quartet II's PyTorch MS-EDEN path computes, restated by fp4spec for its differential tests.

Source of the behaviour: https://github.com/IST-DASLab/Quartet-II, commit
8776a90b7aa0c0a400ad858a3c05a66f7ec55b73, ``src/models/quantization/quantizers/eden.py``: the
functions ``rtn_fp4`` and ``sr_e4m3`` and, of ``EdenSRQuantizer``, the ``e4m3`` branches of
``round_scales`` and ``apply_correction`` and the ``eden`` branch of ``forward``, with
``scale_dtype="e4m3"``, ``unbiased="eden"``, ``scale_override=1.0`` and groups of 16, run on the
CPU.

That repository has no license file at that commit, so none of its code is copied here. This
module is fp4spec's own statement of the facts the tests need -- which float32 operations that
code performs, in which order, with which constants, and how it rounds -- in fp4spec's own
structure and names; each numbered comment says what the source computes at that step. Where
the source's way of computing a step differs from the statement's, the comment says why the
results are equal.

Two things are made explicit that the source leaves implicit:

* the rotation: the input is the already rotated tensor (fp4spec's MS-EDEN takes it so too);
* the draw: the source rounds each corrected scale up when ``torch.bernoulli(frac)`` is 1; here
  the caller gives one uniform ``u`` in [0, 1) per block and the scale is rounded up when
  ``u < frac``, which is the same event, replayable.

The source runs its float32 divisions by Python constants on the CPU as divisions by the
float32 constant (on CUDA, PyTorch multiplies by the float32 reciprocal instead, which this
statement does not cover). Arithmetic here is numpy float32; torch is used for the two steps
whose exact result is PyTorch's own: the cast to ``float8_e4m3fn`` and the float32 sums.
"""

import numpy as np
import torch

F32 = np.float32

#: The largest initial block scale aimed at (``unbiased="eden"``): not 448, to leave room for the
#: correction to raise a scale.
SCALE_TARGET_MAX = F32(255.99)
#: The E2M1 range the block maximum is mapped to: 6 * 16/17. The source forms it in Python
#: double precision as ``6.0 / 1.0 * (16 / 17)``; its float32 rounding equals fp32(96 / 17).
ELEMENT_TARGET_MAX = F32(96 / 17)
#: Upper clamp before the scales' stochastic rounding, so that the upper neighbour exists.
SR_CLAMP = F32(447.99)

#: The 15 distinct E2M1 values in increasing order; zero is +0.
E2M1_LADDER = np.array([-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6], F32)
#: Midpoints between neighbours on the ladder (all exact in float32).
E2M1_MIDPOINTS = (E2M1_LADDER[:-1] + E2M1_LADDER[1:]) / F32(2)


def _nonnegative_e4m3_values() -> np.ndarray:
    """Values of the E4M3 (fn) codes 0x00..0x7E, increasing: 0, 2^-9 .. 7*2^-9, then normals to 448."""
    code = np.arange(0x7F)
    exponent, mantissa = code >> 3, code & 7
    subnormal = mantissa * 2.0 ** -9
    normal = (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return np.where(exponent == 0, subnormal, normal).astype(F32)


E4M3_LADDER = _nonnegative_e4m3_values()


def _e4m3_round_to_nearest(a: np.ndarray) -> np.ndarray:
    """float32 -> E4M3 (fn) -> float32 with PyTorch's cast (round to nearest, ties to even)."""
    return torch.from_numpy(np.ascontiguousarray(a, F32)).to(torch.float8_e4m3fn).float().numpy()


def _e2m1_round_ties_up(y: np.ndarray) -> np.ndarray:
    """Nearest E2M1 value, an exact tie going to the upper neighbour, saturating at +-6.

    The source finds the two grid neighbours lo <= y <= hi and keeps hi when
    fp32(hi - y) <= fp32(y - lo). On every E2M1 interval those two float32 differences are
    either exact or too far apart for rounding to change the comparison, so it is exactly
    "hi iff y >= (lo + hi) / 2"; beyond +-6 both neighbours are the end value. A NaN goes to
    +6 there as here. Zero results are +0 (the source's grid holds no -0)."""
    return E2M1_LADDER[np.searchsorted(E2M1_MIDPOINTS, y, side="right")]


def sr_e4m3(t, uniform) -> torch.Tensor:
    """The source's ``sr_e4m3`` on nonnegative float32 targets ``t`` (every corrected scale is
    nonnegative), with the explicit draw ``uniform`` (same shape, floats in [0, 1)) in place of
    its ``torch.bernoulli``. Returns the chosen E4M3 values as float32."""
    t = np.asarray(t, F32)
    u = np.asarray(uniform, F32)
    if np.isnan(t).any():
        raise ValueError("the scale targets contain NaN")  # the source raises too
    if (t < 0).any():
        raise ValueError("negative scale targets are outside this statement")
    # 7a. t = min(t, fp32(447.99)); the source clamps to [-447.99, 447.99], so that 448 is never
    #     the lower neighbour and the upper one always exists
    t = np.minimum(t, SR_CLAMP)
    # 7b. lo = the largest E4M3 value <= t, hi = the next E4M3 value above lo. The source takes
    #     the round-to-nearest E4M3 value and, by stepping its bit pattern by one, the neighbour
    #     on the other side of t; for t >= 0 that pair is this one (for t = 0: lo = 0, hi = 2^-9)
    i = np.searchsorted(E4M3_LADDER, t, side="right") - 1
    lo, hi = E4M3_LADDER[i], E4M3_LADDER[i + 1]
    # 7c. frac = fp32(fp32(t - lo) / fp32(hi - lo)); the result is hi with probability frac:
    #     here hi iff u < frac
    frac = (t - lo) / (hi - lo)
    return torch.from_numpy(np.where(u < frac, hi, lo).astype(F32))


def _quantize_before_sr(x_had, hadamard_dim: int, group_dim: int) -> dict:
    """Steps 1-6 on the rotated float32 tensor: everything before the scales' rounding."""
    x = np.asarray(x_had, F32).reshape(-1, group_dim)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # 1. amax = max |x| over the whole tensor;
        #    D = fp32(fp32(amax / fp32(255.99)) / fp32(96/17)), or D = 1 when amax == 0
        block_amax = np.abs(x).max(axis=-1, keepdims=True)
        amax = block_amax.max()
        d = F32(1) if amax == 0 else (amax / SCALE_TARGET_MAX) / ELEMENT_TARGET_MAX
        # 2. per block of group_dim: s = E4M3_nearest(fp32(fp32(block_amax / fp32(96/17)) / D));
        #    a scale that rounds to 0 becomes 1
        s = _e4m3_round_to_nearest((block_amax / ELEMENT_TARGET_MAX) / d)
        s = np.where(s == 0, F32(1), s)
        # 3. y = fp32(fp32(x / s) / D)
        y = (x / s) / d
        # 4. q = E2M1 value nearest to y, exact ties toward +inf, saturating at +-6
        q = _e2m1_round_ties_up(y)
        # 5. per rotation group of hadamard_dim elements: num = sum fp32(y * y),
        #    den = sum fp32(y * q), each a float32 torch.sum over the group on the CPU (its
        #    order of additions is PyTorch's); c = fp32(num / den), c = 1 where that is NaN
        yg, qg = y.reshape(-1, hadamard_dim), q.reshape(-1, hadamard_dim)
        num = torch.from_numpy(yg * yg).sum(dim=-1, keepdim=True).numpy()
        den = torch.from_numpy(yg * qg).sum(dim=-1, keepdim=True).numpy()
        c = num / den
        c = np.where(np.isnan(c), F32(1), c)
        # 6. the target of every block's scale: t = fp32(s * c) with its group's c
        t = (s.reshape(c.shape[0], -1) * c).reshape(-1, 1)
    return {"d": F32(d), "s": s, "y": y, "q": q, "c": c, "t": t}


def eden_parts(x_had, hadamard_dim: int = 128, group_dim: int = 16) -> dict:
    """The intermediate values before the scales' stochastic rounding, as torch tensors:
    ``scales`` (initial block scales, one row per block), ``global_scale`` (D, 0-d), ``x_scaled``
    (y) and ``x_fp4`` (q), one row per block, and ``correction`` (c, one row per rotation group)."""
    p = _quantize_before_sr(x_had, hadamard_dim, group_dim)
    return {"scales": torch.from_numpy(p["s"]), "global_scale": torch.tensor(p["d"]),
            "x_scaled": torch.from_numpy(p["y"]), "x_fp4": torch.from_numpy(p["q"]),
            "correction": torch.from_numpy(p["c"])}


def eden_forward(x_had, uniform, hadamard_dim: int = 128, group_dim: int = 16):
    """The whole MS-EDEN quantization of the rotated float32 ``x_had``, with ``uniform`` one float
    in [0, 1) per block of ``group_dim`` (row-major). Returns ``(x_fp4, scales, global_scale)``:
    the E2M1 values (one row per block), the final block scales (one row per block) and D; the
    source returns their product, x_fp4 * scales * D."""
    p = _quantize_before_sr(x_had, hadamard_dim, group_dim)
    # 7. every block's scale: the stochastic rounding of t to a neighbouring E4M3 value
    scales = sr_e4m3(p["t"], np.asarray(uniform, F32).reshape(-1, 1))
    return torch.from_numpy(p["q"]), scales, torch.tensor(p["d"])
