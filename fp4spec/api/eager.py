"""The eager bodies of ``fp4spec.quantize`` and ``fp4spec.dequantize``: resolve the request, run
one backend method (:mod:`.block_scaling` holds the public functions and their docstrings;
:mod:`.torch_library`'s custom operators call these, so that neither imports the other's caller)."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np

from fp4spec.backends import BackendError
from fp4spec.backends.registry import as_availability
from fp4spec.block_schemes import Scheme
from fp4spec.quantized import QuantizedTensor, _max_value

from .plan import _CLEARED_WITH_PLANS, AUTO, array_kind, backend_kind, backend_object, check_seed_request, plan_quantize

#: The order ``dequantize(backend="auto")`` tries for torch fields (triton on CUDA devices only).
DEQUANTIZE_ORDER = ("triton", "torch")


def quantize_eager(x, scheme, overrides: dict, *, axis, rounding, rbits, seed, sr_bits, pad, rht, backend,
                   check_rbits) -> QuantizedTensor:
    """``fp4spec.quantize`` (its docstring's steps): the cached plan, then the backend."""
    if seed is not None:
        check_seed_request(seed, rbits, rounding, x)
    plan = plan_quantize(x, scheme, overrides, axis=axis, rounding=rounding,
                         rbits_given=rbits is not None or seed is not None, sr_bits=sr_bits, pad=pad, rht=rht,
                         backend=backend)
    return plan.run(x, rbits, seed=seed, check_rbits=check_rbits)


#: ``fp4spec.dequantize``'s dtypes.
DEQUANTIZE_DTYPES = ("float32", "bfloat16")


def dequantize_dtype(dtype) -> str:
    """``"float32"`` or ``"bfloat16"`` for a dequantize ``dtype``: None, those names, or the
    numpy, ml_dtypes or torch dtype; ValueError otherwise."""
    if dtype is None:
        return "float32"
    name = dtype if isinstance(dtype, str) else str(getattr(dtype, "name", None) or dtype).replace("torch.", "")
    try:
        name = name if name in DEQUANTIZE_DTYPES else np.dtype(dtype).name
    except TypeError:
        pass
    if name not in DEQUANTIZE_DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not None, 'float32' or 'bfloat16' (or the numpy, ml_dtypes or "
                         f"torch dtype of one)")
    return name


def dequantize_eager(q: QuantizedTensor, backend=AUTO, dtype: str = "float32"):
    """``fp4spec.dequantize`` of a QuantizedTensor: the scale codes checked, one backend's
    ``dequantize``, the values as q's array kind; bfloat16 from the backend where it writes
    them (``dequantize_dtypes``), else its float32 values rounded (:func:`round_bf16`)."""
    _check_scale_codes(q)
    b = _dequantize_backend(q, backend)
    qq = q if backend_kind(b) == array_kind(q.data) else _as_kind(q, backend_kind(b), b)
    if dtype != "float32" and dtype in getattr(b, "dequantize_dtypes", ()):
        out = b.dequantize(qq, dtype=dtype)
        if array_kind(out) != array_kind(q.data):
            out = _bf16_as_kind(out, q)
        return out
    out = b.dequantize(qq)
    if array_kind(out) != array_kind(q.data):
        out = _to_torch(out, q.device) if q.is_torch else _to_numpy_values(out)
    return out if dtype == "float32" else round_bf16(out)


def round_bf16(values):
    """bfloat16 of float32 dequantized values (numpy: ml_dtypes; torch: on their device):
    rounded to nearest even, overflow to +-Inf, NaN 0x7FC0 (:func:`fp4spec.rht.bf16_rne`)."""
    if isinstance(values, np.ndarray):
        from fp4spec.rht import bf16_rne

        return bf16_rne(values, 0x7FC00000)
    from fp4spec.backends.torch_ops import bf16_rne

    return bf16_rne(values)


def _bf16_as_kind(out, q: QuantizedTensor):
    """bfloat16 values of one array kind moved to q's (bit patterns unchanged)."""
    import ml_dtypes

    from fp4spec.backends.torch_ops import as_torch, to_numpy

    if q.is_torch:
        import torch

        return as_torch(np.asarray(out).view(np.int16), q.device).view(torch.bfloat16)
    import torch

    return np.ascontiguousarray(to_numpy(out.view(torch.int16))).view(ml_dtypes.bfloat16)


def _dequantize_backend(q: QuantizedTensor, backend):
    """``backend="auto"``: numpy fields -> the emulator; torch fields -> the first of triton
    (CUDA only), torch, numpy that dequantizes the scheme (``Backend.dequantize_reason``)."""
    if not (isinstance(backend, str) and backend == AUTO):
        b = backend_object(backend)
        reason = _dequantize_refusal(b, q.scheme)
        if reason:
            raise BackendError(f"backend: {b.name!r} cannot dequantize {q.scheme.name}: {reason}")
        return b
    if not q.is_torch:
        return backend_object("numpy")
    return backend_object(auto_dequantize_backend(q.scheme, q.device.type))


@functools.lru_cache(maxsize=256)
def auto_dequantize_backend(scheme: Scheme, device_type: str) -> str:
    """The backend name ``dequantize(backend="auto")`` takes for torch fields of ``scheme`` on
    ``device_type`` (cached: :func:`fp4spec.api.plan.clear_plan_cache` forgets it)."""
    for name in DEQUANTIZE_ORDER:
        if name == "triton" and device_type != "cuda":
            continue
        if importlib.util.find_spec(name) is None:
            continue
        if not _dequantize_refusal(backend_object(name), scheme):
            return name
    return "numpy"


_CLEARED_WITH_PLANS.append(auto_dequantize_backend)


def _dequantize_refusal(b, scheme: Scheme) -> str:
    if not as_availability(b.is_available()):
        return "not available here"
    check = getattr(b, "why_no_dequantize", None)
    if callable(check):
        return check(scheme)
    caps = b.capabilities()
    if not caps.supports("dequantize"):
        return "it does not claim dequantize"
    return "" if caps.supports_scheme(scheme) else f"scheme {scheme.name!r} is not among its capabilities"


def _as_kind(q: QuantizedTensor, kind: str, b) -> QuantizedTensor:
    return q.to_torch(getattr(b, "device", "cpu")) if kind == "torch" else q.to_numpy()


def _to_torch(a, device):
    from fp4spec.backends.torch_ops import as_torch

    return as_torch(np.asarray(a, np.float32), device)


def _to_numpy_values(a):
    from fp4spec.backends.torch_ops import to_numpy

    return np.ascontiguousarray(to_numpy(a), np.float32)


def _check_scale_codes(q: QuantizedTensor) -> None:
    """Scale bytes beyond the scale format's codes (UE4M3 has 7 bits; a float8_e4m3fn byte with
    its sign bit set is not one) cannot be dequantized: a ValueError naming them. A
    QuantizedTensor keeps such bytes (what a GEMM makes of them is its accumulator model's
    ``ue4m3_sign_bit`` policy)."""
    top = (1 << q.scheme.scale.bits) - 1
    m = _max_value(q.scales)
    if m is not None and m > top:
        why = ""
        if q.scheme.scale.name == "ue4m3":
            why = (" (bit 7 of a float8_e4m3fn byte is its sign; what fp4spec.matmul makes of it is its accumulator "
                   "model's policy, ue4m3_sign_bit)")
        raise ValueError(f"scales: {q.scheme.scale.name} scale codes are {q.scheme.scale.bits}-bit (0..{top:#x}); "
                         f"found {m:#x}, which dequantize cannot decode{why}")


__all__ = ["DEQUANTIZE_ORDER", "auto_dequantize_backend", "dequantize_eager", "quantize_eager"]
