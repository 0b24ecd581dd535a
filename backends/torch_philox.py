"""Philox4x32-10 in torch ops: the bits of :mod:`fp4spec.philox` drawn on a tensor's device,
from a seed that may itself be a tensor (so a compiled graph takes a new seed without recompiling
and nothing is read back to the host).

Equal bit for bit to :func:`fp4spec.philox.philox4x32` and :func:`fp4spec.philox.philox_rbits`
(tested for every ``sr_bits``): the same counters, key schedule and word order. Everything is
int64 arithmetic on values below 2^49: a 32 x 32-bit product is assembled from two 32 x 16-bit
products (:func:`mulhilo`), so no operation overflows and a compiler (inductor's C++ or Triton code) has
no signed-overflow behaviour to rely on.
"""

from __future__ import annotations

import operator

from fp4spec.philox import PHILOX_M, PHILOX_W, ROUNDS, check_seed, check_shape

M32 = 0xFFFFFFFF
M16 = 0xFFFF


def _torch():
    import torch

    return torch


def seed_tensor(seed, device=None):
    """``seed`` as the 0-d int64 tensor this module takes: an integer in [-2^63, 2^64) is
    stored mod 2^64 in two's complement; an integer tensor of one element is reshaped (its
    value is taken mod 2^64, never read back to the host)."""
    torch = _torch()
    if isinstance(seed, torch.Tensor):
        if seed.numel() != 1 or seed.dtype not in (torch.int64, torch.int32, torch.uint8, torch.int16, torch.int8):
            raise ValueError(f"seed: a tensor seed must be one integer element (int64), got {seed.dtype} of "
                             f"shape {tuple(seed.shape)}")
        s = seed.reshape(()).to(torch.int64)
        return s if device is None else s.to(device)
    s = check_seed(seed)
    return torch.tensor(s - (1 << 64) if s >= 1 << 63 else s, dtype=torch.int64, device=device)


def mulhilo(a: int, b):
    """``(hi, lo)`` 32-bit halves of ``a * b`` for a constant ``a`` < 2^32 and an int64 tensor
    ``b`` of values < 2^32: ``a * b = p1 * 2^16 + p0`` with ``p1 = a * (b >> 16)`` and
    ``p0 = a * (b mod 2^16)``, each below 2^48; ``s = p0 + (p1 mod 2^16) * 2^16`` is the low
    part with its carry, so ``lo = s mod 2^32`` and ``hi = (p1 >> 16) + (s >> 32)``."""
    p1, p0 = (b >> 16) * a, (b & M16) * a
    s = p0 + ((p1 & M16) << 16)
    return (p1 >> 16) + (s >> 32), s & M32


def philox4x32(counter, seed):
    """:func:`fp4spec.philox.philox4x32` of int64 ``counter`` (values in [0, 2^63)) under the
    key ``seed`` (:func:`seed_tensor`'s forms): four int64 tensors of 32-bit words."""
    torch = _torch()
    s = seed_tensor(seed, counter.device)
    k0, k1 = s & M32, (s >> 32) & M32
    c0, c1 = counter & M32, counter >> 32
    c2 = c3 = torch.zeros_like(counter)
    for _ in range(ROUNDS):
        hi0, lo0 = mulhilo(PHILOX_M[0], c0)
        hi2, lo2 = mulhilo(PHILOX_M[1], c2)
        c0, c1, c2, c3 = hi2 ^ c1 ^ k0, lo2, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + PHILOX_W[0]) & M32, (k1 + PHILOX_W[1]) & M32
    return c0, c1, c2, c3


def rbits_dtype(sr_bits: int):
    """uint8 for up to 8 bits, else int32 (values below 2^sr_bits; sr_bits <= 31)."""
    torch = _torch()
    return torch.uint8 if sr_bits <= 8 else torch.int32


def philox_rbits(seed, shape, sr_bits: int = 8, device=None):
    """:func:`fp4spec.philox.philox_rbits` on ``device`` (default: the seed tensor's, else the
    CPU): element i of the row-major ``shape`` takes word ``i % 4`` of counter ``i // 4``, its
    top ``sr_bits`` bits (1..31), as :func:`rbits_dtype`."""
    torch = _torch()
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, int) or not 1 <= sr_bits <= 31:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 31]")
    shape = check_shape(shape)
    if device is None:
        device = seed.device if isinstance(seed, torch.Tensor) else "cpu"
    n = 1
    for d in shape:
        n = operator.mul(n, d)
    counter = torch.arange((n + 3) // 4, dtype=torch.int64, device=device)
    words = torch.stack(philox4x32(counter, seed), dim=-1).reshape(-1)[:n]
    return (words >> (32 - sr_bits)).to(rbits_dtype(sr_bits)).reshape(shape)


__all__ = ["mulhilo", "philox4x32", "philox_rbits", "rbits_dtype", "seed_tensor"]
