"""The return contract of a backend's operations, checked before anything is compared.

A kernel author's first mistakes are usually about *form*, not bits: scales returned as a
float8 tensor or as float values, codes packed two per byte, a float32 array where codes
are expected, the blocked layout where the plain one is expected. Each is reported as a
departure (field ``contract``) whose message states the contract and links it, never as an
internal error of the suite.

The contract of ``quantize(x, scheme, ...)`` for float32 ``x`` blocked along its last axis,
with k elements per block (:class:`fp4spec.QuantizedTensor`):

* ``codes``: unsigned integers (uint8), one code per element, ``x.shape``, every value a code
  of the element format (below ``2**bits``); or, in a :class:`fp4spec.QuantizedTensor`, 4-bit
  codes packed two per byte along the last axis (first element in the low nibble), which it
  holds as stored (the report says which form it got);
* ``scales``: unsigned integers (uint8), the scale *codes* (E8M0, UE4M3 or E6M2 bit
  patterns), ``x.shape[:-1] + (x.shape[-1] // k,)`` -- the plain layout, one per 1 x k block;
* ``global_scale`` (two-level schemes): one float32, the tensor *decode* scale; None otherwise;
* numpy arrays or torch tensors (any device); a torch float8/float4 tensor is not a code array:
  view it as ``torch.uint8`` first.
"""

from __future__ import annotations

import numpy as np

from fp4spec.backends.base import as_numpy

from .compare import depart, tensor_record

#: Where the contract is stated for kernel authors.
CONTRACT_URL = "https://fp4spec.readthedocs.io/tutorial/#the-return-contract"
CONTRACT = (f"the contract: codes uint8 of x's shape (one code per element), scales uint8 scale codes of shape "
            f"x.shape[:-1] + (n_blocks,), global_scale one float32 for two-level schemes; see {CONTRACT_URL}")


def _torch_dtype(a) -> str | None:
    """'torch.float8_e8m0fnu' for a torch tensor, None for anything else."""
    dtype = getattr(a, "dtype", None)
    if dtype is None or not hasattr(a, "detach"):
        return None
    return str(dtype)


def _violation(what: str, hint: str, x, rbits=None):
    return depart(f"{what}: {hint}; {CONTRACT}", field="contract", tensor=tensor_record(x, rbits),
                  notes=[f"return contract: {CONTRACT_URL}"])


def code_array(a, name: str, x, rbits=None, *, op: str = "quantize") -> np.ndarray:
    """``a`` as a numpy integer array, or a contract departure saying what is wrong with it."""
    if a is None:
        raise _violation(f"{op} returned no {name}", f"{name} is None", x, rbits)
    tdt = _torch_dtype(a)
    if tdt is not None and ("float" in tdt or "bfloat" in tdt):
        view = "torch.uint8"
        extra = "; a float4_e2m1fn_x2 tensor holds two codes per byte: unpack it (fp4spec.unpack)" \
            if "float4" in tdt else ""
        raise _violation(f"{op} returned {name} as a {tdt} tensor",
                         f"return the bit patterns as integer codes ({name}.view({view})){extra}", x, rbits)
    try:
        arr = as_numpy(a)
    except Exception as exc:  # noqa: BLE001 -- an object numpy cannot read
        raise _violation(f"{op} returned {name} that numpy cannot read ({type(exc).__name__}: {exc})",
                         "return numpy arrays or torch tensors", x, rbits) from None
    if arr.dtype.kind not in "ui":
        kind = "values (floats)" if arr.dtype.kind == "f" else f"dtype {arr.dtype}"
        raise _violation(f"{op} returned {name} of dtype {arr.dtype}",
                         f"{name} must be integer codes (bit patterns), not {kind}; e.g. for an E8M0 scale "
                         f"2^-3 the code is 124 (0x7C), not 0.125", x, rbits)
    return arr


def check_quantized(q, x: np.ndarray, scheme, rbits=None, *, op: str = "quantize") -> None:
    """Raise a ``contract`` departure if ``q`` (a backend's quantize result for ``x``) breaks
    the return contract; return None if its form is right (its bits are compared elsewhere)."""
    if q is None or not hasattr(q, "codes") or not hasattr(q, "scales"):
        raise _violation(f"{op} returned {type(q).__name__}", "return an fp4spec.QuantizedTensor "
                         "(codes, scales, global_scale, scheme)", x, rbits)
    x = np.asarray(x)
    el = scheme.element
    codes = code_array(q.codes, "codes", x, rbits, op=op)
    if codes.shape != x.shape:
        half = x.shape[:-1] + (x.shape[-1] // 2,)
        if el.bits == 4 and codes.shape == half:
            hint = ("this looks packed (two 4-bit codes per byte); return a QuantizedTensor (it holds packed codes: "
                    "fp4spec.QuantizedTensor(packed, scales, ...)) or one code per element")
        else:
            hint = f"codes must have x's shape {tuple(x.shape)}, one code per element"
        raise _violation(f"{op} returned codes of shape {tuple(codes.shape)} for x of shape {tuple(x.shape)}",
                         hint, x, rbits)
    if codes.size and int(codes.max()) >= (1 << el.bits):
        i = tuple(int(v) for v in np.argwhere(codes >= (1 << el.bits))[0])
        raise _violation(f"{op} returned codes{list(i)} = {int(codes[i])}",
                         f"not a {el.bits}-bit {el.name} code (0..{(1 << el.bits) - 1})", x, rbits)
    scales = code_array(q.scales, "scales", x, rbits, op=op)
    k = scheme.block_size
    want = x.shape[:-1] + (x.shape[-1] // k,)
    if scales.shape != want:
        if scales.ndim == 1 or scales.size > int(np.prod(want)):
            hint = ("this looks like a swizzled layout (the cuBLAS 128x4 one?); return the plain scale matrix, "
                    "one code per 1 x k block (to_blocked is a separate operation)")
        else:
            hint = f"one scale code per block of {k}"
        raise _violation(f"{op} returned scales of shape {tuple(scales.shape)}, expected {want}", hint, x, rbits)
    if scales.size and int(scales.max()) > 0xFF:  # a byte outside the scale format is compared, not refused
        raise _violation(f"{op} returned a scale code {int(scales.max())}", "scale codes are bytes (uint8)", x, rbits)
    if scheme.structure in ("two_level", "if4"):
        g = getattr(q, "global_scale", None)
        tdt = _torch_dtype(g)
        if g is None:
            raise _violation(f"{op} returned global_scale None", "a two-level scheme has a float32 tensor scale",
                             x, rbits)
        if tdt is not None and "float32" not in tdt:
            raise _violation(f"{op} returned global_scale as a {tdt} tensor", "it must be float32", x, rbits)


def check_values(a, shape, x, *, op: str = "dequantize") -> np.ndarray:
    """``a`` as float32 numpy of ``shape`` (dequantize's contract), or a contract departure."""
    tdt = _torch_dtype(a)
    if tdt is not None and "float32" not in tdt:
        raise _violation(f"{op} returned a {tdt} tensor", "dequantize returns float32 values", x)
    try:
        arr = as_numpy(a)
    except Exception as exc:  # noqa: BLE001
        raise _violation(f"{op} returned something numpy cannot read ({type(exc).__name__}: {exc})",
                         "return a float32 numpy array or torch tensor", x) from None
    if arr is None or arr.dtype != np.float32 or arr.shape != tuple(shape):
        got = "None" if arr is None else f"{arr.dtype} {tuple(arr.shape)}"
        raise _violation(f"{op} returned {got}", f"dequantize returns float32 of shape {tuple(shape)}", x)
    return arr


__all__ = ["CONTRACT", "CONTRACT_URL", "check_quantized", "check_values", "code_array"]
