"""QuantizedTensor: the one currency between layers -- codes, scales, tensor scale, scheme.

Shapes, for x of shape ``S`` quantized along ``axis`` with blocks of k elements:

* ``codes``: uint8, one code per element, x's shape (with ``pad=True`` the blocked axis --
  and for tiles the axis before it -- padded with zeros to whole blocks; the padding holds
  the code of +0).
* ``scales``: uint8 scale codes, x's shape with the blocked axis replaced by the number of
  blocks (``S[:-1] + (n_blocks,)`` for ``axis=-1``). E8M0 codes for MX, UE4M3 codes
  (0x00..0x7F, the float8_e4m3fn bit pattern) for NVFP4, E6M2 codes for HiF4. For r x k
  tiles there is still one entry per 1 x k row block; the r rows of a tile hold the same code.
* ``global_scale``: the float32 tensor-level *decode* multiplier (TE's S_dec, torchao's
  per-tensor scale), or None.
* ``e1_8``, ``e1_16``: HiF4's micro-exponent bits (None for other schemes), in the layout
  :mod:`fp4spec.emulator.hif4` returns, with the blocked axis moved back to ``axis``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .block_schemes import Scheme


def _readonly(a):
    if a is None:
        return None
    a = np.asarray(a)
    if a.flags.writeable:
        a = np.array(a, copy=True)
        a.setflags(write=False)
    return a


def _move_back(a, axis: int, ndim: int):
    """Move the blocked axis (last, or second-to-last for arrays with one extra trailing axis) back to ``axis``."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.ndim == ndim:
        return np.moveaxis(a, -1, axis)
    if a.ndim == ndim + 1:
        return np.moveaxis(a, -2, axis)
    raise ValueError(f"expected a {ndim}- or {ndim + 1}-d array, got shape {a.shape}")


def _move_to_end(a, axis: int, ndim: int):
    if a is None:
        return None
    if a.ndim == ndim:
        return np.moveaxis(a, axis, -1)
    return np.moveaxis(a, axis, -2)


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """A block-quantized tensor (see the module docstring for the fields' shapes).

    ``axis`` is the (non-negative) axis the blocks run along; ``shape`` is the shape of the
    quantized x before padding. Arrays are read-only.
    """

    codes: np.ndarray
    scales: np.ndarray
    global_scale: np.float32 | None
    scheme: Scheme
    axis: int
    shape: tuple[int, ...]
    e1_8: np.ndarray | None = None
    e1_16: np.ndarray | None = None

    def __post_init__(self):
        for name in ("codes", "scales", "e1_8", "e1_16"):
            object.__setattr__(self, name, _readonly(getattr(self, name)))
        if self.global_scale is not None:
            object.__setattr__(self, "global_scale", np.float32(self.global_scale))
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))

    @classmethod
    def from_moved(cls, codes, scales, global_scale, scheme: Scheme, axis: int, shape, *, e1_8=None, e1_16=None):
        """Build from arrays whose blocked axis is last (the emulator's layout).

        Takes ownership: the arrays are made read-only, not copied.
        """
        nd = len(shape)
        for a in (codes, scales, e1_8, e1_16):
            if isinstance(a, np.ndarray):
                a.setflags(write=False)
        return cls(np.moveaxis(codes, -1, axis), _move_back(scales, axis, nd), global_scale, scheme, axis,
                   tuple(shape), _move_back(e1_8, axis, nd), _move_back(e1_16, axis, nd))

    def moved(self) -> dict:
        """codes, scales, e1_8, e1_16 with the blocked axis last (the emulator's layout)."""
        nd = len(self.shape)
        return {"codes": np.moveaxis(self.codes, self.axis, -1),
                "scales": _move_to_end(self.scales, self.axis, nd),
                "e1_8": _move_to_end(self.e1_8, self.axis, nd),
                "e1_16": _move_to_end(self.e1_16, self.axis, nd)}

    @property
    def n_blocks(self) -> int:
        """Blocks along the axis (after padding)."""
        return self.codes.shape[self.axis] // self.scheme.block_size

    @property
    def padded(self) -> bool:
        return self.codes.shape != self.shape

    def dequantize(self) -> np.ndarray:
        """float32 values in x's shape; see :func:`fp4spec.quantize_api.dequantize`."""
        from .quantize_api import dequantize

        return dequantize(self)

    def pack(self, order: str = "lo_first") -> np.ndarray:
        """Pack the codes for storage along the blocked axis.

        4-bit elements: two codes per byte (:func:`fp4spec.pack`; ``order="lo_first"``, the
        NVIDIA/PyTorch order, or ``"hi_first"``). 8-bit elements: the codes themselves (one
        byte each). 6-bit elements: NotImplementedError (no packed FP6 layout is specified).
        """
        from .packing import pack

        bits = self.scheme.element.bits
        if bits == 4:
            return pack(self.codes, order=order, axis=self.axis)
        if bits == 8:
            return np.array(self.codes, dtype=np.uint8)
        raise NotImplementedError(f"pack: {bits}-bit elements ({self.scheme.element.name}) have no specified packed layout")

    def equals(self, other: "QuantizedTensor") -> bool:
        """Bit-exact equality of every field (codes, scales, tensor-scale bits, HiF4 bits,
        scheme, axis, shape)."""
        if not isinstance(other, QuantizedTensor):
            return False

        def same(a, b):
            if a is None or b is None:
                return a is None and b is None
            return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))

        def same_f32(a, b):
            if a is None or b is None:
                return a is None and b is None
            return np.float32(a).view(np.uint32) == np.float32(b).view(np.uint32)

        return (self.scheme == other.scheme and self.axis == other.axis and self.shape == other.shape
                and same(self.codes, other.codes) and same(self.scales, other.scales)
                and same_f32(self.global_scale, other.global_scale)
                and same(self.e1_8, other.e1_8) and same(self.e1_16, other.e1_16))

    def __repr__(self) -> str:
        g = "None" if self.global_scale is None else str(self.global_scale)  # shortest float32 digits
        return (f"QuantizedTensor(scheme={self.scheme.name!r}, shape={self.shape}, axis={self.axis}, "
                f"codes={self.codes.shape}, scales={self.scales.shape}, global_scale={g})")


__all__ = ["QuantizedTensor"]
