"""Table-driven encoding of 16- and 32-bit floats into formats of at most 6 bits.

A format with at most 64 codes is small enough that the code of every 16-bit input pattern
fits in a 64 KiB table, and the code of a float32 depends on little more than its high 16
bits. The tables are *built by the general encoder* (:func:`fp4spec.emulator.elements.encode`
on every pattern they stand for), so they agree with it by construction; what has to be
argued is only that a float32 whose low 16 bits are not zero encodes like the pattern with
low bits ``0x0001``:

1. Fix the high 16 bits ``h`` of a float32 (sign, exponent, top 7 mantissa bits). The
   patterns ``(h << 16) | l`` for ``l = 1 .. 0xFFFF`` have one sign and magnitudes that
   increase with ``l`` (or are all NaN when the exponent is all ones and ``h`` is not Inf's).
2. Every deterministic rounding mode (all but ``"sr"``) maps a magnitude to a grid index
   that never decreases as the magnitude grows, and for one sign the code is a function of
   that index (out-of-range indices included), one that gives distinct codes to indices
   that are not adjacent. So if the codes at ``l = 1`` and ``l = 0xFFFF`` are equal, the
   indices at the two ends are equal or adjacent, and every ``l`` in between has that code.
3. The build encodes, for every ``h``, the patterns with ``l = 0``, ``1`` and ``0xFFFF``
   and checks step 2's premise on all 65536 of them; if it fails for any ``h`` (a decision
   point strictly inside a bfloat16 interval) there is no table and the general encoder
   runs. For the grids of at most 6 bits every decision point (grid points, midpoints, the
   overflow and underflow bounds) is a bfloat16 value and the check passes.
4. A float32 then encodes as ``hi[h]`` -- the code of ``l = 0`` -- unless that entry is
   flagged *ambiguous* (its codes for ``l = 0`` and ``l >= 1`` differ: exact ties, Inf vs
   NaN), in which case ``l != 0`` selects ``lo[h]``. bfloat16 and float16 inputs are one
   table lookup each, with no ambiguity.
5. Policies that raise (``nan="error"`` for a format without NaN) are built with a stand-in
   NaN policy, and every entry that a NaN reaches is flagged *special*: a chunk holding one
   is handed to the general encoder, which raises (or, for an Inf, encodes it). Overflow
   policy ``"error"`` and stochastic rounding never use tables.

Work runs over chunks of :data:`CHUNK_ELEMENTS` so that the index and code arrays stay in
the CPU cache.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import ml_dtypes
import numpy as np

from fp4spec.number_formats import Format

#: Flag bits of a table entry; codes of formats with at most 6 bits sit below them.
AMBIGUOUS = np.uint8(0x80)
SPECIAL = np.uint8(0x40)
CODE_MASK = np.uint8(0x3F)
MAX_BITS = 6

#: Inputs smaller than this take the general encoder (a table costs about 4 general encodes
#: of 65536 values to build; small calls also keep the table cache from filling up).
MIN_ELEMENTS = 1 << 16
#: Elements per chunk: the intp index (8 B) and codes (1 B) of a chunk fit in a 1 MiB L2.
CHUNK_ELEMENTS = 1 << 16

_PATTERNS = np.arange(1 << 16, dtype=np.uint32)


@dataclasses.dataclass(frozen=True)
class Tables:
    """Codes by input bit pattern for one format, rounding mode and policy set."""

    hi: np.ndarray  # float32 by high 16 bits: code of low bits 0, | AMBIGUOUS (| SPECIAL)
    lo: np.ndarray  # float32 by high 16 bits: code of low bits != 0
    bf16: np.ndarray  # bfloat16 pattern -> code | SPECIAL
    f16: np.ndarray  # float16 pattern -> code | SPECIAL
    special: bool  # some entry is SPECIAL (a chunk must be checked for them)


def applies(fmt: Format, mode: str, overflow: str, dtype: np.dtype, size: int) -> bool:
    """Whether :func:`encode_by_table` handles this call (else the general encoder does)."""
    return (fmt.bits <= MAX_BITS and mode != "sr" and overflow != "error" and size >= MIN_ELEMENTS
            and dtype in (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)))


@lru_cache(maxsize=32)
def tables(fmt: Format, mode: str, overflow: str, nan_policy: str, neg_zero: str, underflow: str, *,
           general) -> Tables | None:
    """The tables of one configuration (steps 3-5 of the module docstring), or None when
    the premise of step 2 fails. ``nan_policy`` is the resolved policy (never ``"auto"``);
    ``general`` is the general encoder that fills them
    (:func:`fp4spec.emulator.elements.encode_general`, passed in: it imports this module)."""
    encode_general = general

    raises = nan_policy == "error"
    stand_in = "max" if raises else nan_policy

    def codes_of(patterns, view):
        return encode_general(patterns.view(view), fmt, mode, None, 8, overflow, stand_in, neg_zero, underflow)

    high = _PATTERNS << 16
    c0 = codes_of(high, np.float32)
    c1 = codes_of(high | 1, np.float32)
    if not np.array_equal(c1, codes_of(high | 0xFFFF, np.float32)):
        return None
    exp_all_ones = (_PATTERNS & 0x7F80) == 0x7F80  # Inf or NaN for some low bits
    hi = c0 | np.where(c0 != c1, AMBIGUOUS, 0).astype(np.uint8)
    bf16 = c0.copy()
    f16 = codes_of(_PATTERNS.astype(np.uint16), np.float16)
    if raises:
        hi[exp_all_ones] |= SPECIAL | AMBIGUOUS  # found with the ambiguous entries
        bf16[exp_all_ones & ((_PATTERNS & 0x7F) != 0)] |= SPECIAL
        f16[((_PATTERNS & 0x7C00) == 0x7C00) & ((_PATTERNS & 0x3FF) != 0)] |= SPECIAL
    for t in (hi, c1, bf16, f16):
        t.setflags(write=False)
    return Tables(hi, c1, bf16, f16, raises)


def _encode_float32_chunk(u: np.ndarray, t: Tables, out: np.ndarray, index: np.ndarray) -> bool:
    """Codes of float32 bit patterns ``u`` into ``out`` (step 4); False if a SPECIAL entry was hit."""
    np.right_shift(u, 16, out=index)
    np.take(t.hi, index, out=out)
    if out.max() < AMBIGUOUS:
        return True
    amb = np.flatnonzero(out >= AMBIGUOUS)  # a bool array: nonzero is 10x faster than on uint8
    flagged = out[amb]
    if t.special and (flagged & SPECIAL).any():
        return False
    exact = (u[amb] & 0xFFFF) == 0
    out[amb] = np.where(exact, flagged & CODE_MASK, t.lo[index[amb]])
    return True


def _encode_16bit_chunk(u: np.ndarray, table: np.ndarray, special: bool, out: np.ndarray, index: np.ndarray) -> bool:
    """Codes of 16-bit patterns ``u`` into ``out``; False if a SPECIAL entry was hit."""
    np.copyto(index, u, casting="safe")
    np.take(table, index, out=out)
    return not (special and out.max() >= SPECIAL)


def encode_by_table(x: np.ndarray, t: Tables, general) -> np.ndarray:
    """Codes of ``x`` (float32, bfloat16 or float16) by table, chunk by chunk; a chunk that
    hits a SPECIAL entry goes to ``general(chunk)`` (the general encoder: it raises or
    encodes). Returns uint8 codes of x's shape."""
    flat = x.reshape(-1)
    out = np.empty(flat.shape, np.uint8)
    index = np.empty(min(flat.size, CHUNK_ELEMENTS), np.intp)
    if x.dtype == np.float32:
        bits = flat.view(np.uint32)
        step = lambda u, o, i: _encode_float32_chunk(u, t, o, i)  # noqa: E731
    else:
        bits = flat.view(np.uint16)
        table = t.bf16 if x.dtype == ml_dtypes.bfloat16 else t.f16
        step = lambda u, o, i: _encode_16bit_chunk(u, table, t.special, o, i)  # noqa: E731
    for start in range(0, flat.size, CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, flat.size)
        if not step(bits[start:stop], out[start:stop], index[:stop - start]):
            out[start:stop] = general(flat[start:stop])
    return out.reshape(x.shape)


__all__ = ["Tables", "applies", "encode_by_table", "tables"]
