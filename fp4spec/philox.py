"""Philox4x32-10 in numpy: the random bits the Triton kernels draw for stochastic rounding.

Pure numpy (no torch, no triton), so the bits of a device run can be replayed anywhere:
``fp4spec.draw_rbits(shape, sr_bits, seed, method="philox")`` returns exactly the bits
``quantize_packed(x, scheme, rounding="sr", seed=seed, sr_bits=sr_bits)`` draws on the GPU
(:mod:`fp4spec.backends.triton`).

Definition (Triton's ``tl.randint4x``, which is Random123's Philox4x32 with 10 rounds):

1. The seed is an integer in [-2^63, 2^64), taken mod 2^64 (Triton converts it to uint64);
   the key is ``(seed mod 2^32, seed >> 32)``.
2. Element ``i`` of the flat row-major tensor (the input tensor's own order, whatever the
   quantized axis) uses the counter ``(g mod 2^32, g >> 32, 0, 0)`` with ``g = i // 4`` and
   takes word ``i % 4`` of the Philox output.
3. The random integer is that 32-bit word shifted right by ``32 - sr_bits`` (its top
   ``sr_bits`` bits), in [0, 2^sr_bits).

Philox4x32 round: with multipliers A = 0xD2511F53, B = 0xCD9E8D57 and the 64-bit products
``A * c0``, ``B * c2``: ``(c0, c1, c2, c3) <- (hi(B*c2) ^ c1 ^ k0, lo(B*c2), hi(A*c0) ^ c3 ^ k1,
lo(A*c0))``, then the key is bumped by ``(0x9E3779B9, 0xBB67AE85)`` mod 2^32. Known answer
(Random123 ``kat_vectors``): counter 0, key 0 gives ``0x6627E8D5 0xE169C58D 0xBC57AC4C 0x9B00DBD8``.
"""

from __future__ import annotations

import operator

import numpy as np

#: Philox4x32 multipliers and Weyl key increments (Random123).
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10

_M32 = np.uint64(0xFFFFFFFF)


def check_seed(seed) -> int:
    """The seed as an integer mod 2^64; ValueError unless it is an integer in [-2^63, 2^64)."""
    if isinstance(seed, (bool, np.bool_)):
        raise ValueError(f"seed: expected an integer in [-2**63, 2**64), got {seed!r}")
    try:
        s = operator.index(seed)
    except TypeError:
        raise ValueError(f"seed: expected an integer in [-2**63, 2**64), got {seed!r}") from None
    if not -(1 << 63) <= s < (1 << 64):
        raise ValueError(f"seed: {s} is outside [-2**63, 2**64) (Triton's int64/uint64 kernel argument)")
    return s & 0xFFFFFFFFFFFFFFFF


def check_shape(shape) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints >= 0) as a tuple; ValueError otherwise."""
    try:
        dims = (operator.index(shape),) if not hasattr(shape, "__iter__") else tuple(operator.index(n) for n in shape)
    except TypeError:
        raise ValueError(f"shape: expected an int or a sequence of ints, got {shape!r}") from None
    if any(n < 0 for n in dims):
        raise ValueError(f"shape: {dims} has a negative dimension")
    return dims


def philox4x32(counter, seed, rounds: int = ROUNDS):
    """Philox4x32 of the counters ``(low, high 32 bits of counter, 0, 0)`` under the key
    ``(seed low, seed high)``, as Triton's ``tl.randint4x``: four uint64 arrays of 32-bit words."""
    g = np.asarray(counter, dtype=np.uint64)
    c0 = g & _M32
    c1 = g >> np.uint64(32)
    c2 = np.zeros_like(g)
    c3 = np.zeros_like(g)
    s = check_seed(seed)
    k0, k1 = s & 0xFFFFFFFF, s >> 32
    A, B = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for _ in range(int(rounds)):
        p0 = A * c0  # < 2^64: exact in uint64
        p2 = B * c2
        n0 = (p2 >> np.uint64(32)) ^ c1 ^ np.uint64(k0)
        n2 = (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)
        c1, c3 = p2 & _M32, p0 & _M32
        c0, c2 = n0, n2
        k0 = (k0 + PHILOX_W[0]) & 0xFFFFFFFF
        k1 = (k1 + PHILOX_W[1]) & 0xFFFFFFFF
    return c0, c1, c2, c3


def philox_rbits(seed, shape, sr_bits: int = 8) -> np.ndarray:
    """uint32 random integers in [0, 2^sr_bits) of ``shape``: the top ``sr_bits`` bits of the
    Philox word of each element (see the module docstring). ``sr_bits`` in [1, 32]; the Triton
    kernels draw with 1..24 (:func:`fp4spec.backends.triton.philox_rbits`)."""
    if isinstance(sr_bits, (bool, np.bool_)) or not isinstance(sr_bits, (int, np.integer)) \
            or not 1 <= int(sr_bits) <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")
    sr_bits = int(sr_bits)
    s = check_seed(seed)
    shape = check_shape(shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"shape: {shape} has a negative dimension")
    n = int(np.prod(shape, dtype=np.int64))
    c0, c1, c2, c3 = philox4x32(np.arange(-(-n // 4), dtype=np.uint64), s)
    words = np.stack([c0, c1, c2, c3], axis=-1).reshape(-1)[:n]
    return (words >> np.uint64(32 - sr_bits)).astype(np.uint32).reshape(shape)


__all__ = ["check_seed", "check_shape", "philox4x32", "philox_rbits"]
