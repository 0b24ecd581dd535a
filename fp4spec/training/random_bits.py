"""Stochastic-rounding bits of a training run, replayable from the recipe's seed.

Every SR operand of every GEMM call rounds with the Philox bits of its own seed, the bits
``fp4spec.quantize(t, scheme, rounding="sr", seed=call_seed)`` draws:

1. ``layer_seed = derive(recipe.seed, layer name)`` -- stable across processes and runs
   (BLAKE2b of the text ``"<seed>/<name>"``, not Python's salted ``hash``).
2. ``operand_key = derive(layer_seed, "<gemm>/<tensor>")`` -- ``gemm`` is fprop/dgrad/wgrad,
   ``tensor`` x/w/dy (computed once per layer, on the host).
3. ``call_seed``: the first two words ``(w0, w1)`` of Philox4x32-10 (:func:`fp4spec.philox.philox4x32`)
   of the counter ``call`` under the key ``operand_key``, as the 63-bit integer
   ``(w1 mod 2^31) * 2^32 + w0``. ``call`` counts the layer's forward calls under autograd
   from 0; it lives in a tensor (``Linear.calls``), so this step runs on the device
   (:func:`call_seed_tensor`) and a compiled graph takes every call without recompiling.
4. The bits: ``fp4spec.draw_rbits(t.shape, sr_bits, call_seed, method="philox")`` in the
   operand's stored layout (x and dy: tokens x features; w: out x in), for the global batch's
   tensor under ``scope="global"`` -- drawn on the device by ``fp4spec.quantize(...,
   seed=<the call seed tensor>)``.

So :func:`call_seed` and :func:`draw` replay a run's bits exactly, on any device: CPU and CUDA
runs draw the same bits. Nothing here reads the device back to the host.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fp4spec.backends import torch_philox
from fp4spec.philox import philox4x32

from .recipe import OPERAND_TENSORS

M31 = 0x7FFFFFFF


def derive(seed: int, label: str) -> int:
    """A 63-bit seed from ``seed`` and a text label (BLAKE2b, 8 bytes, top bit cleared)."""
    digest = hashlib.blake2b(f"{int(seed)}/{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def operand_key(layer_seed: int, gemm: str, tensor: str) -> int:
    """Step 2 of the module docstring."""
    return derive(layer_seed, f"{gemm}/{tensor}")


def call_seed(layer_seed: int, call: int, gemm: str, tensor: str) -> int:
    """Step 3 on the host (numpy Philox): the reference of :func:`call_seed_tensor`."""
    w = philox4x32(np.array([int(call)], dtype=np.uint64), operand_key(layer_seed, gemm, tensor))
    return (int(w[1][0]) & M31) << 32 | int(w[0][0])


def operand_keys(layer_seed: int) -> dict[str, int]:
    """Step 2 for every operand of a layer, by ``"<gemm>/<tensor>"`` (computed when the layer is
    made: hashing is host work a compiled graph does not trace)."""
    return {f"{g}/{t}": operand_key(layer_seed, g, t) for g, ts in OPERAND_TENSORS.items() for t in ts}


def call_seed_tensor(key: int, call):
    """Step 3 on ``call``'s device: ``key`` an :func:`operand_key`, ``call`` a 0-d int64 tensor
    (values in [0, 2^63)); a 0-d int64 tensor, equal to :func:`call_seed`."""
    w = torch_philox.philox4x32(call.reshape(1), key)
    return ((w[1] & M31) << 32 | w[0]).reshape(())


def draw(seed, shape, sr_bits: int, device):
    """Step 4: the bits for one operand, integers in ``[0, 2**sr_bits)`` of ``shape`` on
    ``device`` (uint8 up to 8 bits, else int32); ``seed`` an int or a seed tensor."""
    if not isinstance(seed, int):
        seed = seed.to(device)
    return torch_philox.philox_rbits(seed, tuple(shape), int(sr_bits), device=device)


__all__ = ["call_seed", "call_seed_tensor", "derive", "draw", "operand_key", "operand_keys"]
