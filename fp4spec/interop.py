"""Bit-exact hand-over of codes to and from PyTorch and ml_dtypes.

Every function here is a *bit view*: the bytes are reinterpreted, never converted through a
value, so no rounding can happen on the way.

PyTorch (optional; ``pip install fp4spec[torch]``):

* ``torch.float4_e2m1fn_x2`` holds two packed E2M1 codes per byte, first element in the low
  nibble (:func:`fp4spec.packing.pack` with ``order="lo_first"``). Its shape counts *bytes*,
  so an ``(M, K/2)`` tensor holds ``M x K`` values. PyTorch (2.13, CPU) implements almost no
  arithmetic or casts for it (``.to(torch.float32)`` raises ``NotImplementedError``); it is a
  storage type for ``scaled_mm``.
* Scales: ``torch.float8_e8m0fnu`` for MX (E8M0) and ``torch.float8_e4m3fn`` for NVFP4 (UE4M3
  is E4M3 with the sign bit 0).

ml_dtypes (a dependency of fp4spec, imported lazily): its sub-byte types (``float4_e2m1fn``,
``float6_*``, ``int4``) are *unpacked*, one code per byte in the low bits with the high bits
zero. A byte with stray high bits is not a valid value: ml_dtypes 0.6 decodes it
inconsistently (``0x17`` viewed as ``float4_e2m1fn`` converts to -6.0, ``0x10`` to -0.0), so
:func:`from_ml_dtypes` rejects such bytes.
"""

from __future__ import annotations

import numpy as np

from .number_formats import get_format

#: Scale formats accepted by :func:`to_torch_scales`, with the torch dtype they map to.
TORCH_SCALE_DTYPES = {"e8m0": "float8_e8m0fnu", "ue4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn"}

#: fp4spec format name -> ml_dtypes type name (same code bits). ``ue4m3`` maps to
#: ``float8_e4m3fn`` one way only (its codes are the sign-0 half of E4M3).
ML_DTYPES_NAMES = {
    "e2m1": "float4_e2m1fn",
    "e2m3": "float6_e2m3fn",
    "e3m2": "float6_e3m2fn",
    "e4m3": "float8_e4m3fn",
    "ue4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "e8m0": "float8_e8m0fnu",
    "int4": "int4",
}

_TORCH_HINT = "install it with `pip install fp4spec[torch]` (torch >= 2.8)"


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"fp4spec.interop: this function needs PyTorch; {_TORCH_HINT}") from exc
    if not hasattr(torch, "float4_e2m1fn_x2") or not hasattr(torch, "float8_e8m0fnu"):
        raise ImportError(  # pragma: no cover - depends on the environment
            f"fp4spec.interop: torch {torch.__version__} lacks float4_e2m1fn_x2 / float8_e8m0fnu; {_TORCH_HINT}"
        )
    return torch


def _ml_dtypes():
    try:
        import ml_dtypes
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "fp4spec.interop: this function needs ml_dtypes; install it with `pip install ml_dtypes` "
            "(or `pip install fp4spec`, which depends on it)"
        ) from exc
    return ml_dtypes


def _is_torch_tensor(x) -> bool:
    mod = type(x).__module__
    if not mod.startswith("torch"):
        return False
    return _torch().is_tensor(x)


def _codes_array(x, name: str, bits: int) -> np.ndarray:
    """``x`` as a new uint8 ndarray of ``bits``-bit codes (ValueError otherwise)."""
    arr = np.asarray(x)
    if arr.size == 0 and arr.dtype == np.float64 and not isinstance(x, np.ndarray):
        arr = arr.astype(np.uint8)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer array of {bits}-bit codes, got dtype {arr.dtype}")
    top = (1 << bits) - 1
    if arr.size and (arr.min() < 0 or arr.max() > top):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"{name}: every code must lie in 0..{top} ({bits} bits), found {int(bad)}")
    return np.array(arr, dtype=np.uint8, order="C", copy=True)


def _torch_bytes(t, name: str, bits: int, torch):
    """A torch uint8 tensor ``t`` checked to hold ``bits``-bit codes."""
    if t.dtype != torch.uint8:
        raise ValueError(f"{name}: expected a torch.uint8 tensor (or a numpy/list of ints), got {t.dtype}")
    if bits < 8 and t.numel() and int(t.max()) > (1 << bits) - 1:
        raise ValueError(f"{name}: every code must lie in 0..{(1 << bits) - 1} ({bits} bits), found {int(t.max())}")
    return t


# -- PyTorch ---------------------------------------------------------------------------------

def to_torch_fp4x2(packed):
    """Packed E2M1 bytes as a ``torch.float4_e2m1fn_x2`` tensor (a bit view; same shape).

    Args:
        packed: bytes from :func:`fp4spec.packing.pack` with ``order="lo_first"`` (the order
            PyTorch uses): an integer numpy array or list with entries 0..255 (copied), or a
            ``torch.uint8`` tensor (viewed, no copy, device kept).

    Returns:
        A torch tensor of dtype ``float4_e2m1fn_x2`` whose bytes equal ``packed``.
    """
    torch = _torch()
    if _is_torch_tensor(packed):
        return _torch_bytes(packed, "packed", 8, torch).view(torch.float4_e2m1fn_x2)
    arr = _codes_array(packed, "packed", 8)
    return torch.from_numpy(arr).view(torch.float4_e2m1fn_x2)


def from_torch_fp4x2(t) -> np.ndarray:
    """The bytes of a ``torch.float4_e2m1fn_x2`` (or ``torch.uint8``) tensor as a new numpy uint8 array.

    The result is in :func:`fp4spec.packing.unpack` ``order="lo_first"`` form; the tensor is
    moved to the CPU if needed.
    """
    torch = _torch()
    if not _is_torch_tensor(t):
        raise ValueError(f"t: expected a torch tensor of dtype float4_e2m1fn_x2 or uint8, got {type(t).__name__}")
    if t.dtype not in (torch.float4_e2m1fn_x2, torch.uint8):
        raise ValueError(f"t: expected dtype torch.float4_e2m1fn_x2 or torch.uint8, got {t.dtype}")
    return np.array(t.detach().view(torch.uint8).cpu().numpy(), dtype=np.uint8, copy=True)


def to_torch_scales(scale_codes, scale_format: str):
    """Scale codes as the torch dtype the scaled-matmul APIs expect (a bit view, no value conversion).

    Args:
        scale_codes: integer numpy array or list (copied), or a ``torch.uint8`` tensor
            (viewed), of codes of ``scale_format``.
        scale_format: ``"e8m0"`` -> ``torch.float8_e8m0fnu`` (MX); ``"ue4m3"`` (codes 0..127,
            sign bit 0) or ``"e4m3"`` (codes 0..255) -> ``torch.float8_e4m3fn`` (NVFP4).

    Returns:
        A torch tensor whose bytes equal ``scale_codes``.
    """
    if not isinstance(scale_format, str) or scale_format not in TORCH_SCALE_DTYPES:
        raise ValueError(f"scale_format: {scale_format!r} is not one of {tuple(TORCH_SCALE_DTYPES)}")
    torch = _torch()
    dtype = getattr(torch, TORCH_SCALE_DTYPES[scale_format])
    bits = get_format(scale_format).bits
    if _is_torch_tensor(scale_codes):
        return _torch_bytes(scale_codes, "scale_codes", bits, torch).view(dtype)
    return torch.from_numpy(_codes_array(scale_codes, "scale_codes", bits)).view(dtype)


def from_torch_scales(t) -> np.ndarray:
    """The bytes of a ``float8_e8m0fnu`` / ``float8_e4m3fn`` / ``uint8`` tensor as a new numpy uint8 array."""
    torch = _torch()
    if not _is_torch_tensor(t):
        raise ValueError(f"t: expected a torch tensor of dtype float8_e8m0fnu, float8_e4m3fn or uint8, got {type(t).__name__}")
    if t.dtype not in (torch.float8_e8m0fnu, torch.float8_e4m3fn, torch.uint8):
        raise ValueError(f"t: expected dtype torch.float8_e8m0fnu, torch.float8_e4m3fn or torch.uint8, got {t.dtype}")
    return np.array(t.detach().view(torch.uint8).cpu().numpy(), dtype=np.uint8, copy=True)


# -- ml_dtypes -------------------------------------------------------------------------------

def to_ml_dtypes(codes, fmt_name: str) -> np.ndarray:
    """Codes of ``fmt_name`` as a numpy array of the matching ml_dtypes type (same bits).

    Args:
        codes: integer array or list of codes of ``fmt_name`` (one code per element, unpacked;
            each in ``0 .. 2**bits - 1``).
        fmt_name: one of :data:`ML_DTYPES_NAMES`: ``e2m1`` -> ``float4_e2m1fn``, ``e2m3`` ->
            ``float6_e2m3fn``, ``e3m2`` -> ``float6_e3m2fn``, ``e4m3`` / ``ue4m3`` ->
            ``float8_e4m3fn``, ``e5m2`` -> ``float8_e5m2``, ``e8m0`` -> ``float8_e8m0fnu``,
            ``int4`` -> ``int4``.

    Returns:
        A new array (the codes copied to uint8, one per byte, then ``.view``-ed as the
        ml_dtypes type), so ``.astype(np.float32)`` gives the format's values.
    """
    if not isinstance(fmt_name, str) or fmt_name not in ML_DTYPES_NAMES:
        raise ValueError(f"fmt_name: {fmt_name!r} has no ml_dtypes counterpart; supported: {tuple(ML_DTYPES_NAMES)}")
    md = _ml_dtypes()
    bits = get_format(fmt_name).bits
    return _codes_array(codes, "codes", bits).view(getattr(md, ML_DTYPES_NAMES[fmt_name]))


def from_ml_dtypes(arr) -> tuple[np.ndarray, str]:
    """The codes of an ml_dtypes array and the fp4spec format name: ``(uint8 codes, fmt_name)``.

    ``float8_e4m3fn`` comes back as ``"e4m3"`` (not ``"ue4m3"``). Bytes of a sub-byte type
    with any bit above the format's width set are rejected (ValueError): they are not
    canonical ml_dtypes values.
    """
    md = _ml_dtypes()
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"arr: expected a numpy array with an ml_dtypes dtype, got {type(arr).__name__}")
    names = {np.dtype(getattr(md, v)): k for k, v in ML_DTYPES_NAMES.items() if k != "ue4m3"}
    name = names.get(arr.dtype)
    if name is None:
        supported = ", ".join(ML_DTYPES_NAMES[k] for k in names.values())
        raise ValueError(f"arr: dtype {arr.dtype} is not a supported ml_dtypes type; supported: {supported}")
    codes = np.array(arr.view(np.uint8), copy=True)
    bits = get_format(name).bits
    if bits < 8 and codes.size and int(codes.max()) > (1 << bits) - 1:
        raise ValueError(
            f"arr: byte 0x{int(codes.max()):02X} has bits above the {bits}-bit {arr.dtype} code; "
            "ml_dtypes stores one code per byte with the high bits zero"
        )
    return codes, name


__all__ = [
    "ML_DTYPES_NAMES",
    "TORCH_SCALE_DTYPES",
    "from_ml_dtypes",
    "from_torch_fp4x2",
    "from_torch_scales",
    "to_ml_dtypes",
    "to_torch_fp4x2",
    "to_torch_scales",
]
