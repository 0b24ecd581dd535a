"""Fast vectorized numpy implementations of the spec, tested equal to :mod:`fp4spec.elements`.

Importing the package installs the vectorized step M4 of the tensor-core RHT arithmetic
(:mod:`.rht`) into :mod:`fp4spec.rht`, whose own is the scalar reference.
"""

from . import rht as _rht  # noqa: F401 -- installs fp4spec.rht's step M4
from .elements import decode, encode

__all__ = ["encode", "decode"]
