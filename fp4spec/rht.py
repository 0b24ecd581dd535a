"""The Random Hadamard Transform (RHT) applied blockwise, as TransformerEngine applies it.

``rht(x, 16, signs="te", out_dtype="bfloat16", arith="fwht-fp32")`` is TransformerEngine's
NVFP4 RHT (schemes.md section 4) with pinned float32 arithmetic: rows of 16 are multiplied by
``diag(s) @ H16 / 4`` with TE's fixed sign vector and the result is rounded to BF16. Other
sizes (32, 64, 128: Quartet, QuTLASS) and other sign vectors are the same definition with
other parameters.

Two arithmetics (``arith=``):

* ``"float64"`` (the default of :func:`rht`, used by :mod:`fp4spec.analysis`): the sums in
  float64, in numpy's matmul order, then one conversion to ``out_dtype``.
* ``"fwht-fp32"`` (the default of :class:`RHT`, what :func:`fp4spec.quantize` and the kernels
  use): a fast Walsh-Hadamard transform whose every operation is one float32 IEEE operation
  in a fixed order, so that a kernel can match it bit for bit (:func:`rht`, steps F1-F5).

:class:`RHT` bundles the parameters (size, signs, arithmetic, output dtype) into one frozen
value; :func:`resolve_rht` turns the user-facing ``rht=`` argument into one.

Everything here is a pure function of its arguments: signs come from an explicit vector,
the ``"te"`` preset, or a seed (never from unseeded randomness).
"""

from __future__ import annotations

import dataclasses
import math

import ml_dtypes
import numpy as np

#: Sizes of the Sylvester Hadamard matrix accepted by :func:`rht`.
RHT_SIZES = (16, 32, 64, 128)

#: TransformerEngine's fixed 16-entry sign vector (bitmask of the -1 entries: 0xD7E8).
TE_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)

#: Named sign presets for ``signs=``.
SIGN_PRESETS = {"te": TE_SIGNS}

#: Accepted ``out_dtype=`` names (``None``: see :func:`rht`).
OUT_DTYPES = ("float32", "float64", "bfloat16")

#: Accepted ``arith=`` names: the float64 definition and the pinned float32 butterfly.
ARITHS = ("float64", "fwht-fp32")


def check_size(size) -> int:
    """``size`` as an int, or a ValueError naming the argument and the allowed values."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or int(size) not in RHT_SIZES:
        raise ValueError(f"size: {size!r} is not one of {', '.join(map(str, RHT_SIZES))}")
    return int(size)


def check_arith(arith) -> str:
    """``arith`` if it is one of :data:`ARITHS`, else a ValueError naming the allowed values."""
    if not isinstance(arith, str) or arith not in ARITHS:
        raise ValueError(f"arith: {arith!r} is not one of {', '.join(map(repr, ARITHS))}")
    return arith


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


def fwht_scale(size: int) -> np.float32:
    """``c = fp32(1/sqrt(size))`` of step F4: the float32 nearest to the real ``1/sqrt(size)``.

    0.25 for 16 and 0.125 for 64 (exact); for 32 and 128 ``fp32(sqrt(2)) / 8`` and
    ``fp32(sqrt(2)) / 16`` (0x3E3504F3 and 0x3DB504F3). Computed from the correctly rounded
    float64 square root: rounding that to float32 is the single RNE rounding of the real
    number because the float64 value is not a float32 midpoint (tested).
    """
    return np.float32(1.0 / math.sqrt(check_size(size)))


def _out_dtype(out_dtype, x: np.ndarray, arith: str = "float64"):
    if out_dtype is None:
        if arith == "fwht-fp32":
            return np.dtype(np.float32)
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


def _as_float32(a: np.ndarray) -> np.ndarray:
    """Step F1's widening: float64 (and integers) rounded RNE to float32, the rest exact."""
    if a.dtype == np.float32:
        return a
    with np.errstate(over="ignore"):  # beyond float32's range: +-inf, as quantize's input preparation
        return a.astype(np.float32)


def fwht_fp32(blocks: np.ndarray) -> np.ndarray:
    """Step F3 on float32 rows (last axis, a power of two long): the butterfly stages
    d = 1, 2, 4, ... in that order, each pair (i, i + d) with ``i & d == 0`` becoming
    ``(fp32(u_i + u_{i+d}), fp32(u_i - u_{i+d}))``. Returns a new float32 array."""
    if blocks.dtype != np.float32:
        raise ValueError(f"blocks: expected float32, got {blocks.dtype}")
    size = blocks.shape[-1]
    u = np.array(blocks, dtype=np.float32, copy=True)
    lead = u.shape[:-1]
    d = 1
    while d < size:
        v = u.reshape(lead + (size // (2 * d), 2, d))  # [..., g, 0, l] = u_i, [..., g, 1, l] = u_{i+d}
        a, b = v[..., 0, :], v[..., 1, :]
        u = np.stack((a + b, a - b), axis=-2).reshape(lead + (size,))  # float32 + and -: IEEE RNE
        d *= 2
    return u


def _blockwise(x, size, seed, signs, axis, out_dtype, inverse: bool, arith: str = "float64") -> np.ndarray:
    size = check_size(size)
    arith = check_arith(arith)
    s8 = rht_signs(size, seed=seed, signs=signs)
    a = _as_real(x)
    if a.ndim == 0:
        raise ValueError("x: must have at least one dimension")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: {axis!r} is not an int in [{-a.ndim}, {a.ndim - 1}] for x with {a.ndim} dimensions")
    axis = int(axis) % a.ndim
    n = a.shape[axis]
    if n % size:
        raise ValueError(f"x: length {n} along axis {axis} is not a multiple of size {size}")
    dt = _out_dtype(out_dtype, a, arith)
    if arith == "fwht-fp32":
        moved = np.moveaxis(_as_float32(a), axis, -1)
        blocks = moved.reshape(moved.shape[:-1] + (n // size, size))
        s = s8.astype(np.float32)
        c = fwht_scale(size)
        if inverse:
            y = (fwht_fp32(blocks) * c) * s  # inverse: butterfly, scale, then the exact sign flip
        else:
            y = fwht_fp32(blocks * s) * c  # steps F2-F4
        assert y.dtype == np.float32  # no silent promotion (NumPy 2 scalar rules)
    else:
        s = s8.astype(np.float64)
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


def rht(x, size: int = 16, *, seed=None, signs=None, axis: int = -1, out_dtype=None,
        arith: str = "float64") -> np.ndarray:
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
       ``y_j = sum_i s_i x_i H[i, j] / sqrt(size)``, evaluated in the arithmetic ``arith``
       names (below).

    ``arith="float64"`` (the default here): the sum is evaluated in float64 on the exactly
    widened input (float16/bfloat16/float32/integers are read exactly), in numpy's matmul
    order, then divided by the float64 ``sqrt(size)`` (exact for 16 and 64) and converted
    to ``out_dtype``: ``"float32"``, ``"float64"`` or ``"bfloat16"``. ``None`` means
    float64 for float64 input and float32 otherwise. The conversion to ``"bfloat16"`` is
    ml_dtypes' cast, which goes through float32: two RNE roundings (float64 -> float32 ->
    bfloat16), not one.

    ``arith="fwht-fp32"`` (pinned; :class:`RHT`'s default, what quantize and the kernels
    run), per row of ``size`` elements:

    - F1. Widen x to float32 (float64 input is first rounded RNE to float32, as quantize's
      input preparation does; bf16/fp16 exact). View as rows of ``size`` along ``axis``.
    - F2. ``u_i = s_i * x_i`` (exact sign flip; -0.0 stays a signed zero as IEEE
      multiplication says).
    - F3. For d = 1, 2, 4, ..., size/2 in that order: for every i with ``(i & d) == 0``,
      simultaneously ``(u_i, u_{i+d}) <- (fp32(u_i + u_{i+d}), fp32(u_i - u_{i+d}))``.
      After all stages ``u_j = sum_i s_i x_i H[i][j]`` in exact arithmetic (Sylvester H,
      natural order).
    - F4. ``y_j = fp32(u_j * c)`` with ``c = fp32(1/sqrt(size))`` (0.25 for 16, exact power
      of two for 16 and 64; RNE of the real number for 32 and 128: :func:`fwht_scale`).
    - F5. Round y to ``out_dtype`` (RNE; ``"bfloat16"`` via ml_dtypes; ``"float32"`` = y;
      ``"float64"`` = y widened exactly). ``None`` means ``"float32"``.

    Every fp32 operation is one IEEE-754 binary32 operation with round-to-nearest-even and
    subnormals kept (no flush to zero); infinities and NaNs propagate as IEEE says.

    When the two arithmetics agree: for sizes 16 and 64, whenever every partial sum of step
    F3 is exact in float32 (e.g. BF16 input whose non-zero magnitudes span less than about
    2^12: 8 significant bits per input, log2(size) bits of growth) the results are equal
    for every ``out_dtype``. They differ when a butterfly drops low bits that a later stage
    would have kept. Example (TE signs, BF16 input): ``x = [2^24, 1, -2^24, 0, ..., 0]``.
    Exactly, ``y_0 = (2^24 + 1 - 2^24) / 4 = 0.25`` (float64 gives 0.25); the first
    butterfly rounds ``fp32(2^24 + 1) = 2^24`` (a tie, to even), so fwht-fp32 gives
    ``y_0 = 0``. For sizes 32 and 128 the constant ``c`` of F4 is rounded to float32 first,
    so the two arithmetics can differ in the last float32 bit even when the sums are exact.

    Relation to TE: TE runs the product ``x_row . diag(s) . H16 / 4`` on MMA hardware with
    FP32 accumulation in an order it does not specify, then rounds to BF16. For BF16 input,
    ``signs="te"``, ``size=16`` and ``out_dtype="bfloat16"`` both arithmetics give TE's
    result whenever TE's FP32 accumulation and the butterfly's partial sums are exact;
    otherwise they can differ by where the FP32 sums round.

    The transform is orthogonal: :func:`inverse_rht` with the same ``size``, signs and
    ``axis`` undoes it, and norms are preserved (both up to the rounding of steps 4-5).

    Raises:
        ValueError: bad ``size``, ``axis``, ``out_dtype``, ``arith`` or signs; neither or
            both of ``seed`` and ``signs``; a length along ``axis`` that is not a multiple
            of ``size``.
    """
    return _blockwise(x, size, seed, signs, axis, out_dtype, inverse=False, arith=arith)


def inverse_rht(y, size: int = 16, *, seed=None, signs=None, axis: int = -1, out_dtype=None,
                arith: str = "float64") -> np.ndarray:
    """Inverse of :func:`rht` with the same ``size``, signs (or ``seed``) and ``axis``.

    Steps 1-3 and 5 are those of :func:`rht`; step 4 becomes
    ``x_row = y_row @ H @ diag(s) / sqrt(size)`` (``T^-1 = T^T`` and ``H`` is symmetric).
    ``arith="float64"`` evaluates it in float64 as ``((y_row @ H) * s) / sqrt(size)``;
    ``arith="fwht-fp32"`` runs steps F1, F3 and F4 of :func:`rht` on y, then flips signs
    (``x_i = y'_i * s_i``, exact), then F5.
    """
    return _blockwise(y, size, seed, signs, axis, out_dtype, inverse=True, arith=arith)


# -- the RHT as one value ---------------------------------------------------------------------------

def sign_mask(signs) -> int:
    """The bitmask of a sign vector: bit i set where ``s_i = -1`` (TE's: 0xD7E8)."""
    return sum(1 << i for i, s in enumerate(signs) if int(s) == -1)


@dataclasses.dataclass(frozen=True)
class RHT:
    """One Random Hadamard Transform: its size, resolved signs, arithmetic and output dtype.

    ``RHT()`` and :meth:`RHT.te` are TransformerEngine's (size 16, :data:`TE_SIGNS`,
    ``"fwht-fp32"``, BF16 output); :meth:`from_seed` and :meth:`from_signs` build others.
    :meth:`apply` is :func:`rht` with these parameters. Every field is validated: a bad
    value raises ValueError naming the field and the allowed values.

    Fields:
        size: 16, 32, 64 or 128 (:data:`RHT_SIZES`).
        signs: the +-1 diagonal, ``size`` Python ints (any sequence is stored as a tuple).
        arith: ``"fwht-fp32"`` (default, pinned float32 butterfly) or ``"float64"``.
        out_dtype: ``"bfloat16"`` (default, as TE), ``"float32"`` or ``"float64"``.
    """

    size: int = 16
    signs: tuple[int, ...] = TE_SIGNS
    arith: str = "fwht-fp32"
    out_dtype: str = "bfloat16"

    def __post_init__(self):
        size = check_size(self.size)
        object.__setattr__(self, "size", size)
        if isinstance(self.signs, str):
            raise ValueError(f"signs: {self.signs!r} is a preset name; use RHT.from_signs({self.signs!r}) "
                             f"or RHT.te()")
        try:
            signs = tuple(self.signs)
        except TypeError:
            raise ValueError(f"signs: expected a sequence of {size} entries each +1 or -1, got {self.signs!r}") from None
        if len(signs) != size:
            raise ValueError(f"signs: {len(signs)} entries given but size is {size}; give {size} entries "
                             f"each +1 or -1 (or use RHT.from_seed(seed, size={size}))")
        bad = [s for s in signs if isinstance(s, bool) or not isinstance(s, (int, np.integer, float, np.floating))
               or s not in (1, -1)]
        if bad:
            raise ValueError(f"signs: every entry must be +1 or -1, got {bad[0]!r}")
        object.__setattr__(self, "signs", tuple(int(s) for s in signs))
        object.__setattr__(self, "arith", check_arith(self.arith))
        if not isinstance(self.out_dtype, str) or self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"out_dtype: {self.out_dtype!r} is not one of {', '.join(map(repr, OUT_DTYPES))}")

    @classmethod
    def te(cls, **kw) -> "RHT":
        """TransformerEngine's RHT: size 16, :data:`TE_SIGNS` (mask 0xD7E8); ``kw`` sets
        ``arith`` or ``out_dtype``."""
        return cls(16, TE_SIGNS, **kw)

    @classmethod
    def from_seed(cls, seed, size: int = 16, **kw) -> "RHT":
        """Signs drawn from ``seed`` as :func:`rht_signs` draws them; ``kw``: ``arith``, ``out_dtype``."""
        return cls(check_size(size), tuple(int(v) for v in rht_signs(size, seed=seed)), **kw)

    @classmethod
    def from_signs(cls, signs, size: int = 16, **kw) -> "RHT":
        """Signs given as ``size`` entries of +-1 or a preset name (``"te"``); ``kw``: ``arith``, ``out_dtype``."""
        return cls(check_size(size), tuple(int(v) for v in rht_signs(size, signs=signs)), **kw)

    def apply(self, x, axis: int = -1) -> np.ndarray:
        """``rht(x, size, signs=signs, axis=axis, arith=arith, out_dtype=out_dtype)``."""
        return rht(x, self.size, signs=self.signs, axis=axis, arith=self.arith, out_dtype=self.out_dtype)

    def inverse(self, y, axis: int = -1, out_dtype=None) -> np.ndarray:
        """``inverse_rht(y, ...)`` with these size, signs and arithmetic (``out_dtype`` as there)."""
        return inverse_rht(y, self.size, signs=self.signs, axis=axis, arith=self.arith, out_dtype=out_dtype)

    def sign_mask(self) -> int:
        """Bit i set where ``s_i = -1`` (TE's: 0xD7E8)."""
        return sign_mask(self.signs)

    @property
    def spec(self) -> str:
        """``"size/arith"``, e.g. ``"16/fwht-fp32"``: what a backend claims in ``Capabilities.rht``."""
        return f"{self.size}/{self.arith}"

    @property
    def is_te(self) -> bool:
        """True if size and signs are TransformerEngine's."""
        return self.size == 16 and self.signs == TE_SIGNS

    def __str__(self) -> str:
        width = self.size // 4
        who = " (TE)" if self.is_te else ""
        return (f"RHT {self.spec}, signs 0x{self.sign_mask():0{width}X}{who}, out {self.out_dtype}")


def resolve_rht(value) -> RHT | None:
    """The :class:`RHT` that an ``rht=`` argument names:

    * ``None``: no transform (returns None);
    * an :class:`RHT`: itself;
    * ``"te"``: :meth:`RHT.te` (TE's size-16 transform, fwht-fp32, BF16 output);
    * an int: :meth:`RHT.from_seed` with that seed (size 16, fwht-fp32, BF16 output).

    Anything else raises ValueError naming the accepted forms.
    """
    if value is None or isinstance(value, RHT):
        return value
    if isinstance(value, str) and value == "te":
        return RHT.te()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return RHT.from_seed(int(value))
    raise ValueError(f"rht: {value!r} is not None, an RHT (fp4spec.rht.RHT), 'te' (TransformerEngine's) "
                     f"or an int seed")


__all__ = ["ARITHS", "RHT", "RHT_SIZES", "TE_SIGNS", "SIGN_PRESETS", "OUT_DTYPES", "check_arith", "check_size",
           "fwht_fp32", "fwht_scale", "hadamard", "inverse_rht", "resolve_rht", "rht", "rht_matrix", "rht_signs",
           "sign_mask"]
