"""The Random Hadamard Transform (RHT) applied blockwise, as TransformerEngine applies it.

``rht(x, 16, signs="te", out_dtype="bfloat16")`` is TransformerEngine's NVFP4 RHT
(schemes.md section 4): rows of 16 are multiplied by ``diag(s) @ H16 / 4`` with TE's fixed
sign vector and the result is rounded to BF16. Other sizes (32, 64, 128: Quartet, QuTLASS)
and other sign vectors are the same definition with other parameters.

Everything here is a pure function of its arguments: signs come from an explicit vector,
the ``"te"`` preset, or a seed (never from unseeded randomness).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

#: Sizes of the Sylvester Hadamard matrix accepted by :func:`rht`.
RHT_SIZES = (16, 32, 64, 128)

#: TransformerEngine's fixed 16-entry sign vector (bitmask of the -1 entries: 0xD7E8).
TE_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)

#: Named sign presets for ``signs=``.
SIGN_PRESETS = {"te": TE_SIGNS}

#: Accepted ``out_dtype=`` names (``None``: float64 for float64 input, float32 otherwise).
OUT_DTYPES = ("float32", "float64", "bfloat16")


def check_size(size) -> int:
    """``size`` as an int, or a ValueError naming the argument and the allowed values."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or int(size) not in RHT_SIZES:
        raise ValueError(f"size: {size!r} is not one of {', '.join(map(str, RHT_SIZES))}")
    return int(size)


def hadamard(size: int) -> np.ndarray:
    """The Sylvester Hadamard matrix in natural order: ``H[i, j] = (-1)^popcount(i & j)`` (int8).

    ``H @ H = size * I`` and ``H`` is symmetric.
    """
    size = check_size(size)
    i = np.arange(size)
    parity = np.zeros((size, size), dtype=np.int64)
    and_ = i[:, None] & i[None, :]
    for bit in range(size.bit_length()):
        parity ^= (and_ >> bit) & 1
    return (1 - 2 * parity).astype(np.int8)


def rht_signs(size: int = 16, *, seed=None, signs=None) -> np.ndarray:
    """The +-1 diagonal of the transform, as an int8 vector of length ``size``.

    Exactly one of ``seed`` and ``signs`` must be given:

    1. ``signs="te"``: TransformerEngine's fixed vector :data:`TE_SIGNS` (size 16 only).
    2. ``signs=`` a sequence of ``size`` entries, each +1 or -1: used as given.
    3. ``seed=`` an int: ``bits = numpy.random.default_rng(seed).integers(0, 2, size)``,
       then ``s = 1 - 2 * bits`` (bit 0 -> +1, bit 1 -> -1).
    """
    size = check_size(size)
    if (seed is None) == (signs is None):
        raise ValueError("seed, signs: give exactly one: seed=<int> to draw the signs, or "
                         f"signs=<{size} entries of +1/-1> or a preset ({', '.join(map(repr, SIGN_PRESETS))})")
    if signs is not None:
        if isinstance(signs, str):
            if signs not in SIGN_PRESETS:
                raise ValueError(f"signs: {signs!r} is not a preset; presets: {', '.join(map(repr, SIGN_PRESETS))}")
            preset = SIGN_PRESETS[signs]
            if len(preset) != size:
                raise ValueError(f"signs: preset {signs!r} has {len(preset)} entries but size is {size}")
            return np.array(preset, dtype=np.int8)
        s = np.asarray(signs)
        if s.shape != (size,) or not np.all((s == 1) | (s == -1)):
            raise ValueError(f"signs: must be {size} entries each +1 or -1, got shape {s.shape}")
        return s.astype(np.int8)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed: {seed!r} is not an int")
    bits = np.random.default_rng(int(seed)).integers(0, 2, size)
    return (1 - 2 * bits).astype(np.int8)


def rht_matrix(size: int = 16, *, seed=None, signs=None) -> np.ndarray:
    """The float64 transform matrix ``T = diag(s) @ H / sqrt(size)`` (rows of x multiply it on the left).

    For sizes 16 and 64 every entry is exact (+-1/4, +-1/8); for 32 and 128 it is the float64
    value nearest to +-1/sqrt(size). :func:`rht` does not use T directly (it divides by
    sqrt(size) last), but ``x_row @ T`` agrees with it to float64 rounding.
    """
    s = rht_signs(size, seed=seed, signs=signs).astype(np.float64)
    return s[:, None] * hadamard(size).astype(np.float64) / math.sqrt(size)


def _out_dtype(out_dtype, x: np.ndarray):
    if out_dtype is None:
        return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    name = out_dtype if isinstance(out_dtype, str) else getattr(np.dtype(out_dtype), "name", str(out_dtype))
    if name not in OUT_DTYPES:
        raise ValueError(f"out_dtype: {out_dtype!r} is not None or one of {', '.join(map(repr, OUT_DTYPES))}")
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _as_real(x) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == ml_dtypes.bfloat16 or a.dtype == np.float16 or a.dtype == np.float32:
        return a.astype(np.float32)
    if a.dtype == np.float64:
        return a
    if a.dtype.kind in "iub":
        return a.astype(np.float64)
    raise ValueError(f"x: dtype {a.dtype} is not a real float (float16, bfloat16, float32, float64) or integer")


def _blockwise(x, size, seed, signs, axis, out_dtype, inverse: bool) -> np.ndarray:
    size = check_size(size)
    s = rht_signs(size, seed=seed, signs=signs).astype(np.float64)
    a = _as_real(x)
    if a.ndim == 0:
        raise ValueError("x: must have at least one dimension")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: {axis!r} is not an int in [{-a.ndim}, {a.ndim - 1}] for x with {a.ndim} dimensions")
    axis = int(axis) % a.ndim
    n = a.shape[axis]
    if n % size:
        raise ValueError(f"x: length {n} along axis {axis} is not a multiple of size {size}")
    dt = _out_dtype(out_dtype, a)
    moved = np.moveaxis(a.astype(np.float64), axis, -1)
    blocks = moved.reshape(moved.shape[:-1] + (n // size, size))
    h = hadamard(size).astype(np.float64)
    if inverse:
        z = (blocks @ h) * s  # steps of inverse_rht: (y @ H) * s
    else:
        z = (blocks * s) @ h  # steps of rht: (x * s) @ H
    y = z / math.sqrt(size)
    out = np.moveaxis(y.reshape(moved.shape), -1, axis)
    return np.ascontiguousarray(out.astype(dt))


def rht(x, size: int = 16, *, seed=None, signs=None, axis: int = -1, out_dtype=None) -> np.ndarray:
    """Random Hadamard Transform of ``x``, blockwise along ``axis``.

    Definition (TransformerEngine's, schemes.md section 4, generalised in size and signs):

    1. ``size`` is 16, 32, 64 or 128; ``H`` is the Sylvester Hadamard matrix of that size
       in natural order, ``H[i, j] = (-1)^popcount(i & j)`` (:func:`hadamard`).
    2. The sign vector ``s`` (+-1, length ``size``) is ``signs`` (``"te"`` = TE's fixed
       vector :data:`TE_SIGNS`) or is drawn from ``seed`` by
       ``1 - 2 * numpy.random.default_rng(seed).integers(0, 2, size)`` (:func:`rht_signs`).
       Exactly one of the two must be given.
    3. The length of ``x`` along ``axis`` must be a multiple of ``size``; ``x`` is viewed as
       consecutive rows of ``size`` elements along that axis.
    4. Each row becomes ``y_row = x_row @ diag(s) @ H / sqrt(size)``, i.e.
       ``y_j = sum_i s_i x_i H[i, j] / sqrt(size)``. The sum is evaluated in float64 on the
       exactly widened input (float16/bfloat16/float32/integers are read exactly), then
       divided by the float64 ``sqrt(size)`` (exact for 16 and 64).
    5. The result is rounded once (RNE) to ``out_dtype``: ``"float32"``, ``"float64"``
       or ``"bfloat16"`` (ml_dtypes; TE rounds its RHT output to BF16). ``None`` means
       float64 for float64 input and float32 otherwise.

    Relation to TE: for BF16 input, ``signs="te"``, ``size=16`` and
    ``out_dtype="bfloat16"`` this is TE's result whenever TE's FP32 accumulation of the
    16 products is exact (each product has 8 significant bits, so this holds when the
    block's non-zero magnitudes span less than about 2^12); otherwise the two can differ
    by the double rounding of TE's FP32 sum, whose order TE does not specify.

    The transform is orthogonal: :func:`inverse_rht` with the same ``size``, signs and
    ``axis`` undoes it, and norms are preserved (both up to the rounding of step 5).

    Raises:
        ValueError: bad ``size``, ``axis``, ``out_dtype`` or signs; neither or both of
            ``seed`` and ``signs``; a length along ``axis`` that is not a multiple of ``size``.
    """
    return _blockwise(x, size, seed, signs, axis, out_dtype, inverse=False)


def inverse_rht(y, size: int = 16, *, seed=None, signs=None, axis: int = -1, out_dtype=None) -> np.ndarray:
    """Inverse of :func:`rht` with the same ``size``, signs (or ``seed``) and ``axis``.

    Steps 1-3 and 5 are those of :func:`rht`; step 4 becomes
    ``x_row = y_row @ H @ diag(s) / sqrt(size)`` (``T^-1 = T^T`` and ``H`` is symmetric),
    evaluated in float64 as ``((y_row @ H) * s) / sqrt(size)``.
    """
    return _blockwise(y, size, seed, signs, axis, out_dtype, inverse=True)


__all__ = ["RHT_SIZES", "TE_SIGNS", "SIGN_PRESETS", "OUT_DTYPES", "hadamard", "rht_signs", "rht_matrix",
           "rht", "inverse_rht", "check_size"]
