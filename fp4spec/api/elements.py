"""The public element API: ``fp4spec.encode``, ``fp4spec.decode`` and ``fp4spec.draw_rbits``.

These run the vectorized emulator (:mod:`fp4spec.emulator`), which is tested equal to the
normative scalar algorithm :func:`fp4spec.elements.encode_scalar`.
"""

from __future__ import annotations

import numpy as np

from fp4spec.number_formats import Format
from fp4spec.rounding import DEFAULT_SR_BITS


#: ``draw_rbits`` methods.
RBITS_METHODS = ("numpy", "philox")


def draw_rbits(shape, sr_bits: int = DEFAULT_SR_BITS, seed=None, *, method: str = "numpy") -> np.ndarray:
    """Random bits for ``rounding="sr"``: uint32 integers in [0, 2^sr_bits), reproducible from ``seed``.

    ``method="numpy"`` (default): drawn with ``numpy.random.default_rng(seed).integers(0,
    2**sr_bits, size=shape, dtype=np.uint32)``, so the same seed and shape always give the
    same bits (``seed=None``: fresh entropy).

    ``method="philox"``: the bits the Triton kernels draw on the device for
    ``rounding="sr"`` with this ``seed`` (Philox4x32-10 as ``tl.randint4x``; element ``i`` of
    the flat row-major x takes the top ``sr_bits`` bits of word ``i % 4`` of counter ``i // 4``;
    :mod:`fp4spec.philox`). ``seed`` is required: an integer in [-2^63, 2^64). Pure numpy, so
    ``quantize(x, s, rounding="sr", rbits=draw_rbits(x.shape, n, seed, method="philox"),
    sr_bits=n)`` replays a device run anywhere. The kernels draw with sr_bits 1..24; the
    definition extends to 32.
    """
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")
    if not isinstance(method, str) or method not in RBITS_METHODS:
        raise ValueError(f"method: {method!r} is not one of {', '.join(map(repr, RBITS_METHODS))}")
    if method == "philox":
        from fp4spec.philox import philox_rbits

        if seed is None:
            raise ValueError("seed: method='philox' needs an integer seed in [-2**63, 2**64) (the kernels' seed)")
        return philox_rbits(seed, shape, int(sr_bits))
    return np.random.default_rng(seed).integers(0, 1 << int(sr_bits), size=shape, dtype=np.uint64).astype(np.uint32)


def encode(x, fmt: "str | Format", rounding: str = "rne", *, rbits=None, sr_bits: int = DEFAULT_SR_BITS,
           seed=None, return_rbits: bool = False, overflow: str = "saturate", nan: str = "auto",
           neg_zero: str = "preserve", underflow: str = "overflow"):
    """Encode real values into codes of ``fmt``.

    Args:
        x: float16, bfloat16 (ml_dtypes), float32 or float64 array, or a Python scalar.
            Every value is read exactly (float64 is not rounded through float32).
        fmt: a format name (see ``fp4spec.formats``) or descriptor.
        rounding: ``"rne"``, ``"rna"``, ``"rtz"``, ``"rup"``, ``"rdn"``, ``"rto"`` or ``"sr"``.
        rbits: for ``"sr"``: integers in ``[0, 2**sr_bits)`` broadcastable to ``x``; the
            magnitude rounds away from zero iff ``frac * 2**sr_bits + r >= 2**sr_bits``.
        sr_bits: random bits per element (default 8, as Blackwell's ``cvt.rs`` for e2m1).
        seed: for ``"sr"`` without ``rbits``: draw them with :func:`draw_rbits`.
        return_rbits: also return the random bits used (``"sr"`` only).
        overflow, nan, neg_zero, underflow: policies, see :func:`fp4spec.elements.encode_scalar`
            (``underflow="saturate"``: a tiny positive value into E8M0 / E6M2 gives the smallest
            value even under ``overflow="nan"``, as ml_dtypes 0.7).

    Returns:
        uint8 codes of x's shape (or ``(codes, rbits)`` with ``return_rbits=True``).
    """
    from fp4spec.emulator.elements import as_float_array, encode as _encode

    if rounding == "sr" and rbits is None and seed is not None:
        rbits = draw_rbits(np.shape(as_float_array(x)), sr_bits, seed)
    elif seed is not None and rounding != "sr":
        raise ValueError(f"seed: only used with rounding='sr', not {rounding!r}")
    codes = _encode(x, fmt, rounding, rbits=rbits, sr_bits=sr_bits, overflow=overflow, nan=nan,
                    neg_zero=neg_zero, underflow=underflow)
    if return_rbits:
        if rounding != "sr":
            raise ValueError("return_rbits: only meaningful with rounding='sr'")
        return codes, np.broadcast_to(np.asarray(rbits), codes.shape)
    return codes


def decode(codes, fmt: "str | Format") -> np.ndarray:
    """float64 values of ``codes`` (NaN for NaN codes, -0.0 for the negative-zero code)."""
    from fp4spec.emulator.elements import decode as _decode

    return _decode(codes, fmt)
