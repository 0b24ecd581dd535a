"""Stochastic-rounding bits of a training run, replayable from the recipe's seed.

Every SR operand of every GEMM call draws its bits from its own counter-derived seed:

1. ``layer_seed = derive(recipe.seed, layer name)`` -- stable across processes and runs
   (BLAKE2b of the text ``"<seed>/<name>"``, not Python's salted ``hash``).
2. ``call_seed = derive(layer_seed, "<call>/<gemm>/<tensor>")`` -- ``call`` counts the
   layer's forward calls from 0, ``gemm`` is fprop/dgrad/wgrad, ``tensor`` x/w/dy.
3. The bits: ``torch.randint(0, 2**sr_bits, shape, generator=torch.Generator(device)
   .manual_seed(call_seed))`` in the operand's stored layout (x and dy: tokens x features;
   w: out x in), for the global batch's tensor under ``scope="global"``.

So :func:`draw` with the same arguments replays a run's bits exactly, on the same device
type (torch's CPU and CUDA generators are different streams). Drawing needs no host sync.
"""

from __future__ import annotations

import hashlib

import torch


def derive(seed: int, label: str) -> int:
    """A 63-bit seed from ``seed`` and a text label (BLAKE2b, 8 bytes, top bit cleared)."""
    digest = hashlib.blake2b(f"{int(seed)}/{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def call_seed(layer_seed: int, call: int, gemm: str, tensor: str) -> int:
    """Step 2 of the module docstring."""
    return derive(layer_seed, f"{call}/{gemm}/{tensor}")


def _dtype(sr_bits: int):
    return torch.uint8 if sr_bits <= 8 else torch.int32


def draw(seed: int, shape, sr_bits: int, device) -> torch.Tensor:
    """Step 3: the bits for one operand, integers in ``[0, 2**sr_bits)`` of ``shape`` on ``device``."""
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return torch.randint(0, 1 << int(sr_bits), tuple(shape), generator=gen, device=device, dtype=_dtype(sr_bits))


__all__ = ["call_seed", "derive", "draw"]
