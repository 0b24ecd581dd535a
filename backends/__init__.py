"""Backends: one interface (:class:`Backend`) over every implementation of the spec.

``get_backend("numpy")`` is the emulator (the reference); ``get_backend("pkg.mod:Name")``
loads a user backend. See ``docs/conformance.md`` for writing one and checking it with
``fp4spec conform``.
"""

from .base import (
    OPERATIONS,
    Availability,
    Backend,
    BackendError,
    Capabilities,
    as_numpy,
    resolve_scheme,
    scheme_spec,
)
from .numpy_backend import NumpyBackend
from .registry import as_availability, get_backend, list_backends, register_backend



def __getattr__(name):
    if name == "TritonBackend":  # lazily: importing fp4spec.backends stays free of triton and torch
        from .triton import TritonBackend

        return TritonBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "OPERATIONS",
    "Availability",
    "Backend",
    "BackendError",
    "Capabilities",
    "NumpyBackend",
    "TritonBackend",
    "as_availability",
    "as_numpy",
    "get_backend",
    "list_backends",
    "register_backend",
    "resolve_scheme",
    "scheme_spec",
]
