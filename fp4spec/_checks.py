"""Argument checks shared by the public functions (each error names the argument)."""

from __future__ import annotations

import operator


def check_axis(axis, ndim: int, array_name: str = "x") -> int:
    """``axis`` as a non-negative index into an ``ndim``-d array named ``array_name``."""
    if isinstance(axis, bool):
        raise ValueError(f"axis: expected an int, got {axis!r}")
    try:
        axis = operator.index(axis)
    except TypeError:
        raise ValueError(f"axis: expected an int, got {axis!r}") from None
    if ndim == 0:
        raise ValueError(f"{array_name}: a 0-d array has no axis; pass at least one dimension")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis: {axis} is out of range for a {ndim}-d {array_name} (allowed {-ndim}..{ndim - 1})")
    return axis % ndim
