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

import numpy as np

from fp4spec.accumulator_models import accumulators as _accumulators, get_accumulator
from fp4spec.block_schemes import schemes as _schemes
from fp4spec.emulator import scaling, gemm, hif4, if4
from fp4spec.if4 import check_finite
from fp4spec.emulator.elements import encode as _encode
from fp4spec.layouts import to_blocked as _to_blocked
from fp4spec.matmul_operands import check_operands
from fp4spec.number_formats import formats as _formats
from fp4spec.packing import pack as _pack
from fp4spec.quantized import QuantizedTensor
from fp4spec.rht import ARITHS, RHT_SIZES
from fp4spec.rounding import DEFAULT_SR_BITS, ROUNDING_MODES

from .base import Availability, Backend, Capabilities, _valid_size_arith, resolve_scheme


class NumpyBackend(Backend):
    """The vectorized numpy emulator (the reference backend)."""

    name = "numpy"
    #: quantize takes float16 / bfloat16 x as well (widened block by block: the same values).
    reads_16bit = True

    def is_available(self) -> Availability:
        return Availability.yes(f"numpy {np.__version__} on the CPU")

    def capabilities(self) -> Capabilities:
        return Capabilities(
            schemes=tuple(_schemes),
            rounding=ROUNDING_MODES,
            operations=("quantize", "dequantize", "encode", "pack", "to_blocked", "matmul"),
            formats=tuple(_formats),
            scheme_rounding={"hif4": ("rne",)},
            sr_bits=tuple(range(1, 33)),
            any_overrides=True,
            notes="fp4spec emulator (numpy, float32 operations as the spec states them)",
            accumulators=tuple(_accumulators),
            rht=tuple(f"{n}/{a}" for n in RHT_SIZES for a in ARITHS if _valid_size_arith(n, a)),
        )

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=DEFAULT_SR_BITS, rht=None):
        """Steps 3-4 of :func:`fp4spec.quantize` on float32 ``x`` blocked along its last axis
        (the plug-in contract; :func:`fp4spec.quantize` has done step 2): the RHT along that
        axis (``rht.apply``, then float32), then the emulator's blocks."""
        sch = resolve_scheme(scheme)
        x = np.asarray(x)
        if x.dtype.itemsize != 2 or rht is not None or sch.structure == "hif4":
            x = x.astype(np.float32, copy=False)  # exact from float16 / bfloat16
        if rht is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # inf - inf in a butterfly is NaN, as IEEE says
                x = np.ascontiguousarray(rht.apply(x, axis=-1).astype(np.float32))
        if sch.structure == "hif4":
            if rounding != "rne":
                raise ValueError(f"rounding: HiF4 rounds its elements as its golden model does (ties away); "
                                 f"rounding={rounding!r} cannot be applied")
            out = hif4.hif4_quantize(x)
            return QuantizedTensor(np.asarray(out["codes"], np.uint8), np.asarray(out["scales"]), None, sch,
                                   x.ndim - 1, x.shape, out["e1_8"], out["e1_16"], backend=self.name, rht=rht)
        k = sch.block_size
        blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // k, k))
        rb = None if rbits is None else np.broadcast_to(rbits, x.shape).reshape(blocks.shape)
        if sch.structure == "if4":
            check_finite(x)
            codes, scales, g = if4.quantize_if4(blocks, sch, rounding, rb, sr_bits)
        elif sch.structure == "mx":
            codes, scales = scaling.quantize_mx(blocks, sch, rounding, rb, sr_bits)
            g = None
        else:
            codes, scales, ts = scaling.quantize_two_level(blocks, sch, rounding, rb, sr_bits)
            g = ts.decode
        return QuantizedTensor(codes.reshape(x.shape), scales, g, sch, x.ndim - 1, x.shape, backend=self.name, rht=rht)

    def dequantize(self, q) -> np.ndarray:
        """float32 values in q's shape (padding cropped): :func:`fp4spec.dequantize`'s steps on
        the emulator (MX, two-level, HiF4)."""
        q = q.to_numpy()
        sch = q.scheme
        m = q.moved()
        if sch.structure == "hif4":
            out = np.asarray(hif4.hif4_dequantize(codes=m["codes"], scales=m["scales"], e1_8=m["e1_8"],
                                                  e1_16=m["e1_16"]), dtype=np.float32)
        else:
            codes = m["codes"]
            k = sch.block_size
            blocks = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // k, k))
            if sch.structure == "mx":
                out = scaling.dequantize_mx(blocks, m["scales"], sch)
            elif sch.structure == "if4":
                out = if4.dequantize_if4(blocks, m["scales"], q.global_scale)
            else:
                out = scaling.dequantize_two_level(blocks, m["scales"], q.global_scale, sch)
            out = out.reshape(codes.shape)
        out = np.moveaxis(out, -1, q.axis)
        return np.ascontiguousarray(out[tuple(slice(0, n) for n in q.shape)])

    def encode(self, x, fmt, rounding="rne", *, rbits=None, sr_bits=DEFAULT_SR_BITS) -> np.ndarray:
        return _encode(x, fmt, rounding, rbits=rbits, sr_bits=sr_bits)

    def pack(self, codes) -> np.ndarray:
        return _pack(codes, order="lo_first", axis=-1)

    def to_blocked(self, scales) -> np.ndarray:
        return _to_blocked(scales)

    def matmul(self, qa, qb, *, accumulator, c=None) -> np.ndarray:
        """:func:`fp4spec.matmul`'s steps on the emulator (:mod:`fp4spec.emulator.gemm`)."""
        model = get_accumulator(accumulator)
        ops = check_operands(model, qa, qb, c)
        return gemm.matmul_emulated(qa, qb, model, ops)


__all__ = ["NumpyBackend"]
