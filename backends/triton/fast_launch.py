"""Warm launches of the triton kernels without Triton's per-call argument binding (opt-in).

``kernel[grid](*args, **kw)`` binds and specializes every argument, builds a cache key and
looks the compiled kernel up on each call: on the H200's host that costs tens of microseconds
per launch of these many-argument kernels, and a public call launches up to five of them
(2026-12-03: a 8192^3 ``sm100-mxf4nvf4`` matmul spent about 1.2 ms of host time per call
beside 3.0 ms of kernels; RESULTS.md). :func:`run` launches the same compiled kernel through
``CompiledKernel[grid](*all_args)`` once a key of its own has seen it:

1. The key: the kernel, the launch options (keyword arguments that are not parameters, e.g.
   ``num_warps``), the constexpr parameters by value, and for the other parameters what
   Triton specializes on or less finely: a tensor's dtype, device and 16-byte alignment; an
   int's width class, whether it is 1 and whether 16 divides it; a float's type; anything
   else by value. So two calls with one key get the same compiled kernel from Triton.
2. A miss launches through ``kernel[grid]`` (Triton binds, compiles if needed, launches) and
   keeps the returned compiled kernel; a hit launches it with every parameter in order,
   defaults filled in (what Triton's own launch passes).

Off unless ``FP4SPEC_TRITON_FAST_LAUNCH=1`` or :func:`enable` (its results are checked against
the plain launch by ``benchmarks/bench_gpu_api.py --only fastlaunch``), and never under the
interpreter.
"""

from __future__ import annotations

import inspect
import os

from .capability import interpret

_ENABLED = os.environ.get("FP4SPEC_TRITON_FAST_LAUNCH", "0") not in ("", "0")
_COMPILED: dict = {}


def enable(on: bool = True) -> None:
    """Turn the fast launch on or off for this process (and forget the kept kernels)."""
    global _ENABLED
    _ENABLED = bool(on)
    _COMPILED.clear()


def enabled() -> bool:
    return _ENABLED and not interpret()


def _spec_key(a):
    """What Triton may specialize a non-constexpr argument on, or something finer."""
    if hasattr(a, "data_ptr"):
        return ("t", a.dtype, a.device, a.data_ptr() % 16 == 0)
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return ("i", a == 1, a % 16 == 0, -(1 << 31) <= a < (1 << 31), a >= (1 << 63))
    if isinstance(a, float):
        return ("f",)
    return ("v", a)


def _params(kernel) -> tuple:
    p = getattr(kernel, "_fp4spec_params", None)
    if p is None:
        p = tuple((q.name, q.is_constexpr, q.default) for q in kernel.params)
        kernel._fp4spec_params = p
    return p


def run(kernel, grid, *args, **kw):
    """``kernel[grid](*args, **kw)``, through the kept compiled kernel where the key has one."""
    if not enabled():
        return kernel[grid](*args, **kw)
    params = _params(kernel)
    full, key = [], [kernel]
    for i, (name, const, default) in enumerate(params):
        if i < len(args):
            a = args[i]
        elif name in kw:
            a = kw[name]
        elif default is not inspect.Parameter.empty:
            a = default
        else:
            raise TypeError(f"{name}: missing argument of kernel {getattr(kernel, '__name__', kernel)}")
        full.append(a)
        key.append(("c", a) if const else _spec_key(a))
    names = {name for name, _, _ in params}
    key.append(tuple(sorted((k, v) for k, v in kw.items() if k not in names)))
    key = tuple(key)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = kernel[grid](*args, **kw)
        _COMPILED[key] = compiled
        return compiled
    compiled[tuple(grid) + (1,) * (3 - len(grid))](*full)  # the compiled kernel reads three grid sizes
    return compiled


__all__ = ["enable", "enabled", "run"]
