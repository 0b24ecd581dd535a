"""Packing 4-bit codes two to a byte.

A packed FP4 tensor stores two 4-bit codes per byte along one axis (the contiguous, last
axis by default: the K axis of a TN GEMM operand). Only the nibble order differs between
implementations:

* ``"lo_first"`` -- ``byte = code[2i] | (code[2i+1] << 4)``: the first (even-index) element in
  the low nibble (bits 3:0). This is the consensus order: NVIDIA ``__nv_fp4x2_e2m1``,
  PyTorch ``torch.float4_e2m1fn_x2``, torchao ``pack_uint4``, TransformerEngine, Triton
  ``tl.dot_scaled`` ("the first element in lower bits"), ONNX ``FLOAT4E2M1``, the MMA-Sim
  snapshot microsoft/MMA-Sim c785138.
* ``"hi_first"`` -- ``byte = (code[2i] << 4) | code[2i+1]``: the first element in the high
  nibble. The HiFloat4 legacy order (and torchao before pytorch/ao#3123, where it was a bug);
  MMA-Sim 2.1.1 (PyPI ``mmasim``, ``unpack_uint8_to_fp4``) reads packed FP4 this way.

Golden example (lo_first): codes ``(0x1, 0x7)`` (E2M1 values 0.5, 6.0) pack to the byte
``0x71``; in hi_first order they pack to ``0x17``.

Packing is a pure bit operation: it never looks at what the codes mean, so it applies to any
4-bit format (E2M1, INT4, HiF4 ``s1p2``...). ml_dtypes' sub-byte types are *unpacked* (one
code per byte, in the low bits); see :mod:`fp4spec.interop`.
"""

from __future__ import annotations


import numpy as np
from ._checks import check_axis

#: Nibble orders accepted by :func:`pack` and :func:`unpack`.
ORDERS = ("lo_first", "hi_first")


def _check_order(order) -> str:
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order: {order!r} is not one of {ORDERS}")
    return order


def _as_int_array(x, name: str, max_value: int) -> np.ndarray:
    """``x`` as an integer ndarray whose entries lie in 0..max_value (ValueError otherwise)."""
    if isinstance(x, np.ndarray):
        arr = x
    else:
        arr = np.asarray(x)
        if arr.size == 0 and arr.dtype == np.float64:
            # an empty Python list has no integer dtype of its own; it holds no non-integer either
            arr = arr.astype(np.uint8)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer array (any integer dtype or a list of ints), got dtype {arr.dtype}")
    if arr.size:
        lo, hi = arr.min(), arr.max()
        if lo < 0 or hi > max_value:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name}: every entry must lie in 0..{max_value}, found {int(bad)}")
    return arr


def pack(codes, *, order: str = "lo_first", axis: int = -1) -> np.ndarray:
    """Pack 4-bit codes two per byte along ``axis``.

    Args:
        codes: integer array (any integer dtype, or a nested list of ints) of 4-bit codes,
            each in 0..15; its length along ``axis`` must be even.
        order: ``"lo_first"`` (default; NVIDIA, PyTorch, Triton, ONNX) or ``"hi_first"``
            (HiF4 legacy).
        axis: the axis along which consecutive codes are paired (default: the last one).

    Returns:
        A new uint8 array with the same shape as ``codes`` except that ``axis`` is halved.

    Normative algorithm:

    1. Reject ``order`` unless it is one of :data:`ORDERS`; reject ``codes`` unless it is an
       integer array whose every entry lies in 0..15; reject ``axis`` unless it names an axis
       of ``codes``; reject an odd length ``n`` along ``axis``.
    2. Along ``axis``, for each ``i`` in ``0 .. n/2 - 1`` let ``a = codes[2i]`` (the first,
       even-index element) and ``b = codes[2i+1]`` (the second, odd-index element).
    3. If ``order == "lo_first"``: ``byte[i] = a | (b << 4)`` (``a`` in bits 3:0, ``b`` in
       bits 7:4).
    4. If ``order == "hi_first"``: ``byte[i] = (a << 4) | b``.
    5. Every other axis is carried through unchanged.

    Golden example::

        >>> pack([0x1, 0x7])  # E2M1 0.5, 6.0 -> 0x71
        array([113], dtype=uint8)
        >>> pack([0x1, 0x7], order="hi_first")  # -> 0x17
        array([23], dtype=uint8)
    """
    order = _check_order(order)
    arr = _as_int_array(codes, "codes", 15)
    ax = check_axis(axis, arr.ndim, "codes")
    n = arr.shape[ax]
    if n % 2:
        raise ValueError(f"codes: length {n} along axis {axis} is odd; packing needs an even length (pad with a zero code first)")
    c = np.moveaxis(arr, ax, -1).astype(np.uint8)
    first, second = c[..., 0::2], c[..., 1::2]
    if order == "lo_first":
        out = first | (second << 4)
    else:
        out = (first << 4) | second
    return np.ascontiguousarray(np.moveaxis(out.astype(np.uint8), -1, ax))


def unpack(packed, *, order: str = "lo_first", axis: int = -1) -> np.ndarray:
    """Unpack bytes into two 4-bit codes each along ``axis`` (the inverse of :func:`pack`).

    Args:
        packed: integer array (any integer dtype, or a nested list of ints) of bytes, each in
            0..255.
        order: the nibble order the bytes were packed with: ``"lo_first"`` (default) or
            ``"hi_first"``.
        axis: the axis along which each byte expands into two consecutive codes.

    Returns:
        A new uint8 array of codes (each 0..15), ``axis`` doubled in length.

    Normative algorithm:

    1. Reject ``order`` unless it is one of :data:`ORDERS`; reject ``packed`` unless it is an
       integer array whose every entry lies in 0..255; reject ``axis`` unless it names an
       axis of ``packed``.
    2. Along ``axis``, for each byte ``byte[i]`` let ``lo = byte[i] & 0xF`` and
       ``hi = byte[i] >> 4``.
    3. If ``order == "lo_first"``: ``codes[2i] = lo`` and ``codes[2i+1] = hi``.
    4. If ``order == "hi_first"``: ``codes[2i] = hi`` and ``codes[2i+1] = lo``.
    5. Every other axis is carried through unchanged.

    Golden example::

        >>> unpack([0x71])  # 0x71 -> codes (0x1, 0x7)
        array([1, 7], dtype=uint8)
    """
    order = _check_order(order)
    arr = _as_int_array(packed, "packed", 255)
    ax = check_axis(axis, arr.ndim, "packed")
    b = np.moveaxis(arr, ax, -1).astype(np.uint8)
    lo, hi = b & 0xF, b >> 4
    first, second = (lo, hi) if order == "lo_first" else (hi, lo)
    out = np.empty(b.shape[:-1] + (2 * b.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = first
    out[..., 1::2] = second
    return np.ascontiguousarray(np.moveaxis(out, -1, ax))


__all__ = ["ORDERS", "pack", "unpack"]
