"""Fast vectorized numpy implementations of the spec, tested equal to :mod:`fp4spec.reference`."""

from .encode import decode, encode

__all__ = ["encode", "decode"]
