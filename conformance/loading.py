"""Loading the backend under test: names, ``module:Name``, ``path/to/file.py:Name``; set-up errors.

``fp4spec conform --backend X`` accepts

* a built-in or registered name (``numpy``, ``torch``, ``triton``, ``native``);
* ``package.module:Name`` -- importable from ``sys.path`` *or from the current directory*
  (a console script does not put the current directory on ``sys.path``, ``python -m`` does;
  both behave the same here);
* ``path/to/file.py:Name`` or ``./file.py:Name`` -- a file, loaded as a module whose
  directory is put on ``sys.path`` (so it may import its siblings);
* a Backend class or instance (the Python API).

Anything that goes wrong before the first check -- the module does not import, ``__init__``,
``is_available()`` or ``capabilities()`` raises (a CUDA driver error, say) -- is a
:class:`SetupError`: one line naming the backend and the error, exit status 2 (a usage
problem), never a traceback with exit status 1 (which means "departs").
"""

from __future__ import annotations

import importlib.util
import os
import sys

from fp4spec.backends.base import BackendError
from fp4spec.backends.registry import as_availability, get_backend, list_backends


class SetupError(BackendError):
    """The backend could not be loaded or asked what it claims (a usage error, exit 2)."""


class BackendUnavailable(BackendError):
    """The backend says it cannot run here (``is_available()`` is falsy)."""


def _split(spec: str) -> tuple[str, str]:
    path, sep, attr = spec.rpartition(":")
    return (path, attr) if sep else (spec, "")


def is_file_spec(spec) -> bool:
    """True for ``path/to/file.py:Name`` and ``./file.py:Name`` (a file, not a module path)."""
    if not isinstance(spec, str) or ":" not in spec:
        return False
    path, _ = _split(spec)
    return path.endswith(".py") or "/" in path or os.sep in path


def _module_name(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    name = stem if stem.isidentifier() else "backend_file"
    return name if name not in sys.modules else f"_fp4spec_backend_{name}"


def load_file(spec: str):
    """The object ``Name`` of ``path/to/file.py:Name``, the file loaded as a module."""
    path, attr = _split(spec)
    if not attr:
        raise SetupError(f"backend: {spec!r} names a file but no class; use '{path}:ClassName'")
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise SetupError(f"backend: {spec!r}: no file {path!r} (from {os.getcwd()})")
    folder = os.path.dirname(full)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = _module_name(full)
    mspec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(mspec)
    sys.modules[name] = module
    try:
        mspec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 -- the author's module failed: one line, exit 2
        sys.modules.pop(name, None)
        raise SetupError(f"backend {spec!r}: importing {path!r} raised {type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SetupError(f"backend: {path!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _with_cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path and "." not in sys.path:
        sys.path.append(cwd)


def load_backend(spec):
    """A backend instance for ``spec`` (see the module docstring); SetupError if it cannot be made."""
    label = spec if isinstance(spec, str) else getattr(spec, "name", None) or repr(spec)
    target = spec
    if is_file_spec(spec):
        target = load_file(spec)
    elif isinstance(spec, str) and ":" in spec and spec not in list_backends():
        _with_cwd_on_path()
    try:
        return get_backend(target)
    except BackendError as exc:
        raise SetupError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 -- __init__ or the module raised
        raise SetupError(f"backend {label!r}: loading it raised {type(exc).__name__}: {exc}") from None


def _ask(be, what: str, fn):
    try:
        return fn()
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 -- e.g. a CUDA driver error: one line, exit 2
        raise SetupError(f"backend {be.name!r}: {what} raised {type(exc).__name__}: {exc}") from None


def availability(be):
    """``as_availability(be.is_available())``, SetupError if it raises."""
    return _ask(be, "is_available()", lambda: as_availability(be.is_available()))


def capabilities(be):
    """``be.capabilities()``, SetupError if it raises (a malformed claim raises BackendError)."""
    caps = _ask(be, "capabilities()", be.capabilities)
    if not hasattr(caps, "schemes") or not hasattr(caps, "roundings_for"):
        raise SetupError(f"backend {be.name!r}: capabilities() returned {type(caps).__name__}, not "
                         f"fp4spec.backends.Capabilities")
    return caps


def open_backend(spec):
    """(backend, Availability, Capabilities) of an available backend: what a run starts with.

    Raises SetupError or BackendUnavailable (both BackendError: usage errors, exit 2)."""
    be = load_backend(spec)
    avail = availability(be)
    if not avail:
        raise BackendUnavailable(f"backend: {be.name!r} is not available here: {avail.reason or 'no reason given'}")
    return be, avail, capabilities(be)


__all__ = ["BackendUnavailable", "SetupError", "availability", "capabilities", "is_file_spec", "load_backend",
           "load_file", "open_backend"]
