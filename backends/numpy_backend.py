"""The ``numpy`` backend: the fp4spec emulator behind the :class:`~fp4spec.backends.Backend` interface.

It supports everything the spec defines -- every catalogued scheme and every override of
one, every rounding mode (HiF4: its own rounding only), any ``sr_bits`` in [1, 32], every
RHT (each size and arithmetic of :mod:`fp4spec.rht` that go together, the ``mma:sm90-bf16``
arithmetic at sizes 16 and 64 only; composed as ``rht.apply`` then the emulator), and the
optional operations ``dequantize``, ``encode``, ``pack`` (low nibble first),
``to_blocked`` (cuBLAS 128x4) and ``matmul`` (:func:`fp4spec.matmul`, with every accumulator
model of :data:`fp4spec.accumulators`). It is the reference the conformance suite compares other
backends with; the emulator it wraps is tested equal to the scalar reference elsewhere.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from fp4spec.accumulator_models import accumulators as _accumulators
from fp4spec.block_schemes import schemes as _schemes
from fp4spec.layouts import to_blocked as _to_blocked
from fp4spec.number_formats import formats as _formats
from fp4spec.packing import pack as _pack
from fp4spec.rht import ARITHS, RHT_SIZES
from fp4spec.rounding import DEFAULT_SR_BITS, ROUNDING_MODES

from .base import Availability, Backend, Capabilities, _valid_size_arith, resolve_scheme


def _hif4_available() -> bool:
    try:
        return importlib.util.find_spec("fp4spec.emulator.hif4") is not None
    except ModuleNotFoundError:
        return False


class NumpyBackend(Backend):
    """The vectorized numpy emulator (the reference backend)."""

    name = "numpy"

    def is_available(self) -> Availability:
        return Availability.yes(f"numpy {np.__version__} on the CPU")

    def capabilities(self) -> Capabilities:
        hif4 = _hif4_available()
        names = tuple(n for n in _schemes if n != "hif4" or hif4)
        return Capabilities(
            schemes=names,
            rounding=ROUNDING_MODES,
            operations=("quantize", "dequantize", "encode", "pack", "to_blocked", "matmul"),
            formats=tuple(_formats),
            scheme_rounding={"hif4": ("rne",)} if hif4 else {},
            sr_bits=tuple(range(1, 33)),
            any_overrides=True,
            notes="fp4spec emulator (numpy, float32 operations as the spec states them)",
            accumulators=tuple(_accumulators),
            rht=tuple(f"{n}/{a}" for n in RHT_SIZES for a in ARITHS if _valid_size_arith(n, a)),
        )

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=DEFAULT_SR_BITS, rht=None):
        from fp4spec.quantize_api import quantize

        return quantize(x, resolve_scheme(scheme), rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)

    def dequantize(self, q) -> np.ndarray:
        from fp4spec.quantize_api import dequantize

        return dequantize(q)

    def encode(self, x, fmt, rounding="rne", *, rbits=None, sr_bits=DEFAULT_SR_BITS) -> np.ndarray:
        from fp4spec.api import encode

        return encode(x, fmt, rounding, rbits=rbits, sr_bits=sr_bits)

    def pack(self, codes) -> np.ndarray:
        return _pack(codes, order="lo_first", axis=-1)

    def to_blocked(self, scales) -> np.ndarray:
        return _to_blocked(scales)

    def matmul(self, qa, qb, *, accumulator, c=None) -> np.ndarray:
        from fp4spec.matmul_api import matmul

        return matmul(qa, qb, accumulator=accumulator, c=c)


__all__ = ["NumpyBackend"]
