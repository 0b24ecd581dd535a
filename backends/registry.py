"""Finding backends: built-in names (``"numpy"``) and user classes as ``package.module:Name``.

``get_backend("numpy")`` returns the emulator. ``get_backend("mypkg.kernels:MyBackend")``
imports ``mypkg.kernels`` and takes ``MyBackend``: a class is instantiated with no arguments,
any other object is used as it is. The object must have ``quantize`` and ``capabilities``;
``name``, ``is_available`` and the optional operations may be missing (a plain object is
wrapped so that the missing ones behave as in :class:`~fp4spec.backends.Backend`).
"""

from __future__ import annotations

import importlib
import inspect
import sys

from .base import Availability, Backend, BackendError

#: Built-in backends: name -> "module:Name" (imported only when asked for).
_BUILTIN = {
    "numpy": "fp4spec.backends.numpy_backend:NumpyBackend",
    "torch": "fp4spec.backends.torch_backend:TorchBackend",
    "triton": "fp4spec.backends.triton:TritonBackend",
    "native": "fp4spec.backends.native_backend:NativeBackend",
}
_REGISTERED: dict[str, object] = {}


def register_backend(name: str, target) -> None:
    """Make ``get_backend(name)`` return ``target`` (a Backend class, instance, factory or a
    ``"module:Name"`` string). Built-in names cannot be replaced."""
    if not isinstance(name, str) or not name or ":" in name:
        raise BackendError(f"name: {name!r} must be a non-empty string without ':'")
    if name in _BUILTIN:
        raise BackendError(f"name: {name!r} is a built-in backend and cannot be replaced")
    _REGISTERED[name] = target


def list_backends() -> list[str]:
    """Names ``get_backend`` accepts without a module path."""
    return list(_BUILTIN) + [n for n in _REGISTERED if n not in _BUILTIN]


def _import_target(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BackendError(f"backend: {spec!r} is not 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = "" if "" in sys.path or "." in sys.path else " (is its directory on PYTHONPATH?)"
        raise BackendError(f"backend: cannot import module {module_name!r} for {spec!r}: {exc}{hint}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BackendError(f"backend: module {module_name!r} has no attribute {attr!r}") from None
    return obj


class _Wrapped(Backend):
    """A duck-typed backend object seen through the Backend interface."""

    _FORWARD = ("capabilities", "quantize", "dequantize", "encode", "pack", "to_blocked", "matmul")

    def __init__(self, obj, name: str):
        self._obj = obj
        self.name = str(getattr(obj, "name", None) or name)

    def is_available(self) -> Availability:
        fn = getattr(self._obj, "is_available", None)
        return Availability.yes() if fn is None else as_availability(fn())

    def __getattribute__(self, attr):
        if attr in _Wrapped._FORWARD:
            obj = object.__getattribute__(self, "_obj")
            if hasattr(obj, attr):
                return getattr(obj, attr)
        return object.__getattribute__(self, attr)

    def __repr__(self) -> str:
        return f"<backend {self.name!r} wrapping {self._obj!r}>"


def as_availability(value) -> Availability:
    """Normalize what ``is_available()`` returned: an Availability, a bool, or ``(bool, reason)``."""
    if isinstance(value, Availability):
        return value
    if isinstance(value, tuple) and len(value) == 2:
        return Availability(bool(value[0]), str(value[1]))
    return Availability(bool(value), "")


def _materialize(obj, label: str) -> Backend:
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as exc:
            raise BackendError(f"backend: cannot instantiate {label} with no arguments: {exc}") from None
    elif callable(obj) and not hasattr(obj, "quantize"):
        obj = obj()  # a factory function
    missing = [m for m in ("quantize", "capabilities") if not callable(getattr(obj, m, None))]
    if missing:
        raise BackendError(f"backend: {label} is not a backend: it has no {' and no '.join(missing)} method "
                           f"(subclass fp4spec.backends.Backend)")
    if isinstance(obj, Backend):
        return obj
    return _Wrapped(obj, label)


def get_backend(name) -> Backend:
    """A backend instance from a built-in or registered name, a ``"package.module:Name"``
    string, or a Backend class or instance (passed through).

    Raises :class:`~fp4spec.backends.BackendError` (a ValueError) naming the argument and
    the names it accepts.
    """
    if isinstance(name, Backend):
        return name
    if not isinstance(name, str):
        return _materialize(name, repr(name))
    if name in _BUILTIN:
        return _materialize(_import_target(_BUILTIN[name]), name)
    if name in _REGISTERED:
        target = _REGISTERED[name]
        if isinstance(target, str):
            target = _import_target(target)
        return _materialize(target, name)
    if ":" in name:
        return _materialize(_import_target(name), name)
    raise BackendError(f"backend: {name!r} is not one of {', '.join(map(repr, list_backends()))}; "
                       f"or pass a class as 'package.module:Name'")


__all__ = ["as_availability", "get_backend", "list_backends", "register_backend"]
