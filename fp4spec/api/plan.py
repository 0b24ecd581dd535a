"""A quantize request, resolved once: the scheme, the RHT, the input layout and the backend.

:func:`plan_quantize` turns the arguments of :func:`fp4spec.quantize` into a frozen
:class:`QuantizePlan` -- every argument checked, the scheme and the RHT resolved, the input
layout (axis, padding) computed from x's shape and dtype, the backend chosen -- and caches it
per request, so a repeated call (same scheme, shape, dtype, device and options) resolves
nothing again. :meth:`QuantizePlan.run` then prepares x for the backend's array kind, calls
the backend's ``quantize`` (the method ``fp4spec conform`` certifies) and labels the result
with x's axis and shape.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import sys

import numpy as np

from fp4spec.backends import Backend, BackendError, get_backend, list_backends
from fp4spec.backends.registry import as_availability
from fp4spec.block_schemes import Scheme, get_scheme
from fp4spec.quantized import QuantizedTensor
from fp4spec.rht import RHT, resolve_rht
from fp4spec.rounding import DEFAULT_SR_BITS, check_rounding
from fp4spec.scaling import InputLayout, input_layout, prepare_arrays

#: ``backend=`` names besides those of :func:`fp4spec.backends.get_backend`.
AUTO = "auto"
#: The order ``backend="auto"`` tries for torch tensors: the first that can run the request wins.
AUTO_ORDER = ("triton", "torch", "numpy")
#: Built-in backends whose objects are made once and reused (they hold no per-call state).
_SHARED = ("numpy", "torch", "triton")


def is_torch(a) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def array_kind(a) -> str:
    """``"torch"`` for a torch tensor, else ``"numpy"`` (arrays, scalars, nested lists)."""
    return "torch" if is_torch(a) else "numpy"


def backend_kind(b) -> str:
    """The array kind a backend takes and returns (``Backend.array_kind``; numpy by default)."""
    return getattr(b, "array_kind", "numpy")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _shared_backend(name: str) -> Backend:
    return get_backend(name)


def backend_object(backend) -> Backend:
    """The Backend for ``backend`` (a name, ``"module:Name"``, a class or an object); the
    built-in numpy, torch and triton backends are made once and shared."""
    if isinstance(backend, str) and backend in _SHARED:
        return _shared_backend(backend)
    if isinstance(backend, str) and backend not in list_backends() and ":" not in backend:
        raise BackendError(f"backend: {backend!r} is not one of {', '.join(map(repr, (AUTO, *list_backends())))} "
                           f"(or a backend class as 'package.module:Name', or a Backend object)")
    return get_backend(backend)


# -- which backend can run a request --------------------------------------------------------------

def _device_type(x) -> str | None:
    """x's torch device type (``"cuda"``, ``"cpu"``...), or None for numpy input."""
    return x.device.type if is_torch(x) else None


def unsupported_reason(backend, x, scheme: "str | Scheme", *, rounding: str = "rne",
                       sr_bits: int = DEFAULT_SR_BITS, auto: bool = False, rht=None) -> str:
    """Why ``backend`` (a name or a Backend) cannot quantize x with ``scheme``, ``rounding``
    and ``rht`` (an empty string if it can). ``auto=True`` applies :func:`select_backend`'s
    extra rule (triton only for CUDA tensors). x is a numpy array or a torch tensor; only its
    device is looked at (a numpy x runs on the backend's own device). An RHT must be among
    the backend's ``capabilities().rht`` (:meth:`~fp4spec.backends.Capabilities.supports_rht`)."""
    sch = scheme if isinstance(scheme, Scheme) else get_scheme(scheme)
    empty = is_torch(x) and x.numel() == 0
    return _reason(backend, _device_type(x) if is_torch(x) else None, empty, sch, rounding, sr_bits, auto,
                   resolve_rht(rht))


def _reason(backend, dev: str | None, empty: bool, sch: Scheme, rounding: str, sr_bits: int, auto: bool,
            rht: RHT | None) -> str:
    """:func:`unsupported_reason` from x's device type (None: numpy) and emptiness."""
    name = backend if isinstance(backend, str) else None  # a Backend object: its own checks only
    if name == "numpy":
        return ""  # the emulator runs every scheme, rounding and RHT
    if name == "triton":
        if auto and dev != "cuda":
            return (f"x is on {dev or 'the CPU (numpy)'}; auto selection uses triton for CUDA tensors only "
                    f"(the CPU interpreter is slow: name backend='triton' with TRITON_INTERPRET=1 to use it)")
        if not _installed("triton"):
            return "triton is not installed (pip install triton)"
        if dev is not None and dev != "cuda" and not (dev == "cpu" and _interpret()):
            return f"x is on {dev}; the triton kernels run on CUDA devices, or on the CPU under TRITON_INTERPRET=1"
        if empty:
            return "x is empty (the kernels need at least one block)"
    if name == "torch" and not _installed("torch"):
        return "torch is not installed (pip install torch)"
    if name == "torch" and auto and dev == "cpu" and sch.structure == "if4":
        # measured: 16384 x 4096 IF4 takes the torch backend about 3x the emulator's time on the CPU
        return "auto selection runs IF4 on CPU tensors with the emulator (faster there than the torch backend)"
    b = backend_object(backend)
    avail = as_availability(b.is_available())
    if not avail:
        return f"not available here: {avail.reason or 'is_available() is False'}"
    check = getattr(b, "why_unsupported", None)
    reason = check(sch, rounding, sr_bits) if callable(check) else _capability_refusal(b, sch, rounding, sr_bits)
    if reason or rht is None:
        return reason
    caps = b.capabilities()
    if not caps.supports_rht(rht):
        return (f"rht {rht.spec} with {rht.out_dtype} output is not among its capabilities "
                f"(Capabilities.rht: {', '.join(caps.rht) or 'none'})")
    return ""


def _capability_refusal(b, sch: Scheme, rounding: str, sr_bits: int) -> str:
    caps = b.capabilities()
    try:
        if not caps.supports_scheme(sch):
            return f"scheme {sch.name!r} (as configured) is not among its capabilities ({', '.join(caps.schemes)})"
        modes = caps.roundings_for(sch)
    except BackendError as exc:
        return str(exc)
    if rounding not in modes:
        return f"rounding {rounding!r} is not among its capabilities for {sch.name} ({', '.join(modes)})"
    if rounding == "sr" and int(sr_bits) not in caps.sr_bits:
        return f"sr_bits={sr_bits} is not among its capabilities"
    return ""


def select_backend(x, scheme: "str | Scheme", *, rounding: str = "rne", sr_bits: int = DEFAULT_SR_BITS,
                   backend=AUTO, rht=None, **overrides) -> str:
    """The name of the backend ``quantize(x, scheme, rounding=..., rht=..., backend=...)`` runs.

    ``backend="auto"``: a numpy x -> ``"numpy"``. A torch tensor -> the first of
    :data:`AUTO_ORDER` (triton, torch, numpy) that can run the request: triton if x is on a
    CUDA device, triton is installed and available and its kernels support the scheme,
    rounding, sr_bits and RHT (the CPU interpreter is never chosen automatically); torch if
    it supports them (IF4 on a CPU tensor excepted: the emulator is faster there); else numpy
    (x is copied to the CPU and the results back to x's device).

    An explicit backend is returned as it is if it can run the request; otherwise
    :class:`~fp4spec.backends.BackendError` names it and says why (unavailable, unsupported
    scheme, rounding or RHT, x on a device it cannot use).
    """
    sch = get_scheme(scheme, **overrides)
    empty = is_torch(x) and x.numel() == 0
    return _select(backend, _device_type(x) if is_torch(x) else None, empty, sch, rounding, sr_bits,
                   resolve_rht(rht))


def _select(backend, dev: str | None, empty: bool, sch: Scheme, rounding: str, sr_bits: int, rht) -> str:
    if isinstance(backend, str) and backend == AUTO:
        if dev is None:
            return "numpy"
        for name in AUTO_ORDER:
            if not _reason(name, dev, empty, sch, rounding, sr_bits, True, rht):
                return name
        return "numpy"  # not reached: numpy runs everything
    reason = _reason(backend, dev, empty, sch, rounding, sr_bits, False, rht)
    label = backend if isinstance(backend, str) else backend_object(backend).name
    if reason:
        with_rht = "" if rht is None else f" and rht={rht.spec}"
        raise BackendError(f"backend: {label!r} cannot quantize {sch.name} with rounding={rounding!r}{with_rht}: "
                           f"{reason}")
    return label


# -- the plan -----------------------------------------------------------------------------------------

def _check_sr_bits(sr_bits) -> None:
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")


def check_seed_request(seed, rbits, rounding, x=None) -> None:
    """ValueError unless ``seed`` (given) is an integer in [-2**63, 2**64), or a one-element
    integer torch tensor on a torch x's device (its value is not read), for ``rounding="sr"``
    without ``rbits``."""
    from fp4spec.philox import check_seed

    if rbits is not None:
        raise ValueError("seed: give rbits (explicit bits) or seed (Philox-drawn bits), not both")
    if rounding != "sr":
        raise ValueError(f"seed: only used with rounding='sr', not {rounding!r}")
    if not is_torch(seed):
        check_seed(seed)
        return
    from fp4spec.backends.torch_philox import seed_tensor

    seed_tensor(seed)  # shape and dtype checked
    if not is_torch(x) or x.device != seed.device:
        where = x.device if is_torch(x) else "a numpy array"
        raise ValueError(f"seed: a tensor seed (on {seed.device}) draws the bits on x's device; x is on {where}: "
                         f"give an int seed or move the seed to x's device")


#: The largest sr_bits a backend that draws Philox bits itself (``Backend.draws_philox``) must take.
PHILOX_DEVICE_SR_BITS = 24


def check_rht_length(n: int, rht: RHT, axis) -> None:
    """ValueError unless the (padded) length ``n`` along the blocked axis is a multiple of the RHT size."""
    if n % rht.size:
        raise ValueError(f"x: length {n} along axis {axis} (after any padding to whole blocks) is not a multiple "
                         f"of the RHT size {rht.size}")


def _dtype_name(x) -> str:
    return str(x.dtype)  # "torch.float32": torch's own name in messages


@dataclasses.dataclass(frozen=True)
class QuantizePlan:
    """Everything :func:`fp4spec.quantize` decides before it touches x's values."""

    scheme: Scheme
    rounding: str
    sr_bits: int
    rht: RHT | None
    layout: InputLayout
    backend: Backend
    label: str  # the name the caller knows the backend by (select_backend's answer)

    @property
    def kind(self) -> str:
        return backend_kind(self.backend)

    def draws_seed(self) -> bool:
        """True if the backend draws ``seed``'s Philox bits itself for this request: it says so
        (``draws_philox``), the blocked axis is x's last and nothing is padded (so the
        prepared x's row-major order is x's), and sr_bits <= 24."""
        lay = self.layout
        return (bool(getattr(self.backend, "draws_philox", False)) and lay.axis == len(lay.shape) - 1
                and not lay.is_padded and self.sr_bits <= PHILOX_DEVICE_SR_BITS)

    def run(self, x, rbits=None, *, seed=None, check_rbits: bool = True) -> QuantizedTensor:
        """Prepare x for the backend's array kind (converted at this edge if x is of another),
        call ``backend.quantize`` on the prepared x (blocked axis last, padded), and label the
        result with x's axis and shape (a view: nothing is copied). ``seed``: Philox bits,
        drawn by the backend (:meth:`draws_seed`) or here as ``rbits``."""
        kind_in, b = array_kind(x), self.backend
        device = x.device if kind_in == "torch" else None
        kw = {} if self.rht is None else {"rht": self.rht}  # backends without an RHT need not take the keyword
        if seed is not None:
            if is_torch(seed):  # drawn on x's device from the tensor: no host read of the seed
                from fp4spec.backends.torch_philox import philox_rbits as device_rbits

                rbits, check_rbits = device_rbits(seed, self.layout.shape, self.sr_bits, device=seed.device), False
            elif self.draws_seed():
                kw["seed"] = seed
            else:
                from fp4spec.philox import philox_rbits

                rbits, check_rbits = philox_rbits(seed, self.layout.shape, self.sr_bits), False  # in range
        if self.kind != kind_in:
            x = _to_kind(x, self.kind, b)
            rbits = None if rbits is None else _to_kind(rbits, self.kind, b)
        if self.kind == "torch":
            from fp4spec.backends.torch_ops import prepare_tensor

            xp, rp = prepare_tensor(x, self.layout, rbits, self.sr_bits, check=check_rbits)
        else:
            keep = getattr(b, "reads_16bit", False) and self.rht is None and self.scheme.structure != "hif4"
            prep = prepare_arrays(np.asarray(x), self.layout, rbits, self.sr_bits, keep_16bit=keep)
            xp, rp = prep.x, prep.rbits
        q = b.quantize(xp, self.scheme, rounding=self.rounding, rbits=rp, sr_bits=self.sr_bits, **kw)
        if not isinstance(q, QuantizedTensor):
            raise TypeError(f"backend: {b.name!r}.quantize returned {type(q).__name__}, not a QuantizedTensor")
        q = q.relabeled(self.layout.axis, self.layout.shape, rht=self.rht, backend=b.name)
        if self.kind != kind_in:
            q = q.to_numpy() if kind_in == "numpy" else q.to_torch(device)
        return q


def _to_kind(a, kind: str, b):
    """``a`` as the backend's array kind: a torch tensor on ``b.device`` (exact), or numpy
    (bfloat16 as ml_dtypes.bfloat16, exactly)."""
    if kind == "torch":
        from fp4spec.backends.torch_ops import as_torch

        return as_torch(a, getattr(b, "device", None))
    from fp4spec.backends.torch_ops import to_numpy

    return to_numpy(a)


def plan_quantize(x, scheme, overrides: dict, *, axis, rounding, rbits_given: bool, sr_bits, pad, rht,
                  backend) -> QuantizePlan:
    """The :class:`QuantizePlan` of a quantize request (cached per request where its parts are
    hashable: scheme, overrides, x's shape, dtype and device, the options, the backend name)."""
    if is_torch(x):
        shape, dtype, dev, empty = tuple(x.shape), _dtype_name(x), _device_type(x), x.numel() == 0
    else:
        arr = np.asarray(x)
        shape, dtype, dev, empty = arr.shape, arr.dtype.name, None, False
    args = (scheme, tuple(sorted(overrides.items())), shape, dtype, dev, empty, axis, rounding, rbits_given, sr_bits,
            pad, rht, backend)
    try:
        hash(args)
    except TypeError:  # e.g. a list for block_shape, or a Backend object that is not hashable
        return _make_plan(*args)
    if not (isinstance(backend, str) and (backend == AUTO or backend in _SHARED)):
        return _make_plan(*args)  # registered names and modules may change between calls
    return _cached_plan(*args, _interpret())


@functools.lru_cache(maxsize=1024)
def _cached_plan(*args_and_interpret):
    return _make_plan(*args_and_interpret[:-1])


def clear_plan_cache() -> None:
    """Forget every cached plan and shared backend object (after changing what backend
    selection sees: installed packages, availability, registered backends)."""
    _cached_plan.cache_clear()
    _shared_backend.cache_clear()
    for fn in _CLEARED_WITH_PLANS:
        fn.cache_clear()


#: Other caches of choices that depend on what backend selection sees (registered by the API modules).
_CLEARED_WITH_PLANS: list = []


def _make_plan(scheme, overrides, shape, dtype, dev, empty, axis, rounding, rbits_given, sr_bits, pad, rht,
               backend) -> QuantizePlan:
    sch = get_scheme(scheme, **dict(overrides))
    r = resolve_rht(rht)
    layout = input_layout(shape, dtype, sch, axis=axis, rounding=rounding, rbits_given=rbits_given, sr_bits=sr_bits,
                          pad=pad)
    mode = check_rounding(rounding)
    if mode == "sr":
        _check_sr_bits(sr_bits)
    if r is not None:
        check_rht_length(layout.padded[-1], r, axis)
    label = _select(backend, dev, empty, sch, mode, sr_bits, r)
    b = backend_object(label if isinstance(backend, str) and backend == AUTO else backend)
    return QuantizePlan(sch, mode, int(sr_bits), r, layout, b, label)


__all__ = ["AUTO", "AUTO_ORDER", "PHILOX_DEVICE_SR_BITS", "QuantizePlan", "array_kind", "backend_object",
           "check_rht_length", "check_seed_request",
           "clear_plan_cache", "plan_quantize", "select_backend", "unsupported_reason"]
