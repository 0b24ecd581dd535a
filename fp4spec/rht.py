"""The Random Hadamard Transform (RHT) applied blockwise, as TransformerEngine applies it.

``rht(x, 16, signs="te", out_dtype="bfloat16", arith="fwht-fp32")`` is TransformerEngine's
NVFP4 RHT (schemes.md section 4) with pinned float32 arithmetic: rows of 16 are multiplied by
``diag(s) @ H16 / 4`` with TE's fixed sign vector and the result is rounded to BF16. Other
sizes (32, 64, 128: Quartet, QuTLASS) and other sign vectors are the same definition with
other parameters.

Three arithmetics (``arith=``):

* ``"float64"`` (the default of :func:`rht`, used by :mod:`fp4spec.analysis`): the sums in
  float64, in numpy's matmul order, then one conversion to ``out_dtype``.
* ``"fwht-fp32"`` (the default of :class:`RHT`, what :func:`fp4spec.quantize` and the kernels
  use): a fast Walsh-Hadamard transform whose every operation is one float32 IEEE operation
  in a fixed order, so that a kernel can match it bit for bit (:func:`rht`, steps F1-F5).
* ``"mma:sm90-bf16"`` (and ``"mma:<model>"`` for other registered bf16 tensor-core models):
  ``x_row . T`` as one bf16 tensor-core dot with an FP32 accumulator, under the named
  accumulator model of :mod:`fp4spec.accumulator_models` (:func:`rht`, steps M1-M5): what
  a kernel that computes the transform with a bf16 tensor-core dot (as TransformerEngine's
  fused RHT kernels do) computes on a Hopper GPU. BF16 input only; sizes 16 and 64.

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

#: Prefix of the tensor-core arithmetics: ``"mma:<accumulator model>"``.
MMA_PREFIX = "mma:"

#: Accepted ``arith=`` names: the float64 definition, the pinned float32 butterfly and the
#: tensor-core dot under the ``sm90-bf16`` accumulator model. :func:`check_arith` also takes
#: ``"mma:<name>"`` for any other registered bf16 tensor-core model (:func:`arith_names`).
ARITHS = ("float64", "fwht-fp32", "mma:sm90-bf16")

#: Sizes the ``"mma:<model>"`` arithmetics take: T's entries (+-1/4, +-1/8) are exact in bfloat16.
MMA_SIZES = (16, 64)


def check_size(size) -> int:
    """``size`` as an int, or a ValueError naming the argument and the allowed values."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or int(size) not in RHT_SIZES:
        raise ValueError(f"size: {size!r} is not one of {', '.join(map(str, RHT_SIZES))}")
    return int(size)


def _mma_capable(model) -> bool:
    return model.algorithm == "fdpa" and model.scales == "bf16_operand"


def arith_names() -> tuple[str, ...]:
    """Every ``arith=`` accepted now: :data:`ARITHS`, then ``"mma:<name>"`` for each other
    registered accumulator model with algorithm ``"fdpa"`` and scales ``"bf16_operand"``
    (:func:`fp4spec.register_accumulator`)."""
    from .accumulator_models import accumulators

    extra = tuple(MMA_PREFIX + n for n, m in accumulators.items() if _mma_capable(m))
    return ARITHS + tuple(a for a in extra if a not in ARITHS)


def _allowed() -> str:
    return (f"{', '.join(map(repr, arith_names()))} (or 'mma:<name>' for a registered accumulator model with "
            f"algorithm 'fdpa' and scales 'bf16_operand')")


def check_arith(arith) -> str:
    """``arith`` if it is one of :data:`ARITHS` or ``"mma:<name>"`` for a registered
    accumulator model with algorithm ``"fdpa"`` and scales ``"bf16_operand"`` (a bf16
    tensor-core model: :func:`mma_model`), else a ValueError naming the argument and the
    allowed values."""
    if isinstance(arith, str) and arith in ARITHS[:2]:
        return arith
    if isinstance(arith, str) and arith.startswith(MMA_PREFIX):
        from .accumulator_models import accumulators

        name = arith[len(MMA_PREFIX):]
        model = accumulators.get(name)
        if model is None:
            raise ValueError(f"arith: {arith!r} names no registered accumulator model ({name!r}); allowed: "
                             f"{_allowed()}")
        if not _mma_capable(model):
            raise ValueError(f"arith: {arith!r}: accumulator model {name!r} has algorithm {model.algorithm!r} and "
                             f"scales {model.scales!r}, not a bf16 tensor-core model (algorithm 'fdpa', scales "
                             f"'bf16_operand'); allowed: {_allowed()}")
        return arith
    raise ValueError(f"arith: {arith!r} is not one of {_allowed()}")


def mma_model(arith):
    """The :class:`~fp4spec.accumulator_models.AccumulatorModel` an ``"mma:<name>"``
    arithmetic names (checked by :func:`check_arith`), or None for ``"float64"`` and
    ``"fwht-fp32"``."""
    arith = check_arith(arith)
    if not arith.startswith(MMA_PREFIX):
        return None
    from .accumulator_models import get_accumulator

    return get_accumulator(arith[len(MMA_PREFIX):])


def check_size_arith(size, arith) -> tuple[int, str]:
    """(size, arith) checked together: each on its own (:func:`check_size`,
    :func:`check_arith`), and an ``"mma:<model>"`` arithmetic only with sizes
    :data:`MMA_SIZES` whose length the model's ``k_step`` divides; else a ValueError naming
    both arguments."""
    size, arith = check_size(size), check_arith(arith)
    model = mma_model(arith)
    if model is not None:
        if size not in MMA_SIZES:
            raise ValueError(f"size: {size} with arith {arith!r}: the mma arithmetic takes size "
                             f"{' or '.join(map(str, MMA_SIZES))} only (T = diag(s) H / sqrt(size) must be exact "
                             f"in bfloat16; 1/sqrt({size}) is not)")
        if size % model.k_step:
            raise ValueError(f"size: {size} with arith {arith!r}: the model's step k_step={model.k_step} does not "
                             f"divide the size")
    return size, arith


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
        if arith != "float64":  # fwht-fp32 and mma:<model>
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


def _bf16_operand(x, arith: str) -> np.ndarray:
    """Step M1: ``x`` as float32 holding bfloat16 values, or a ValueError naming ``x``."""
    a = np.asarray(x)
    if a.dtype == ml_dtypes.bfloat16:
        return a.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        a32 = a.astype(np.float32)
        back = a32.astype(a.dtype)
    nan = np.isnan(a32)
    bad = ~nan & (((a32.view(np.uint32) & 0xFFFF) != 0) | (back != a))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"x: arith {arith!r} computes x . T on the tensor cores, whose operand is bfloat16; "
                         f"x{list(idx)} = {a[idx].item()!r} ({a.dtype}) is not a bfloat16 value ({int(bad.sum())} such "
                         f"elements): give a bfloat16 array, or values that are exactly bfloat16 (round first, "
                         f"e.g. x.astype(ml_dtypes.bfloat16))")
    return a32


def mma_transform_matrix(size: int, signs, inverse: bool = False) -> np.ndarray:
    """Step M3: ``T = diag(s) @ H / sqrt(size)`` (``inverse``: ``T^T = H @ diag(s) / sqrt(size)``)
    as a float32 array of bfloat16 values (+-1/4 for size 16, +-1/8 for 64: exact)."""
    size = int(size)
    if size not in MMA_SIZES:
        raise ValueError(f"size: {size!r} is not one of {', '.join(map(str, MMA_SIZES))} (the mma arithmetic)")
    s = np.asarray(signs, np.float64)
    t = s[:, None] * hadamard(size).astype(np.float64) / math.sqrt(size)
    if inverse:
        t = t.T
    return t.astype(np.float32)


def mma_dot_reference(rows: np.ndarray, t: np.ndarray, model) -> np.ndarray:
    """Step M4 by the scalar reference: ``rows . T`` (float32 rows of bf16 values, R x size)
    as ``model``'s chained fused steps, one output at a time in exact arithmetic
    (:func:`fp4spec.fused_steps.fdpa_step` on each step's operand pairs, after
    MMA-Sim's float64 special-value check :func:`~fp4spec.fused_steps.fp64_special`).
    Slow and obviously correct; NaN results are left as they come (step M4 pins them)."""
    from .accumulator_models import BF16
    from .fused_steps import fdpa_step, fp64_special, terms_operand

    size = t.shape[0]
    t64 = t.astype(np.float64)
    out = np.empty(rows.shape, np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaN inputs stay NaNs
        r64 = np.asarray(rows, np.float32).astype(np.float64)
    for r, row in enumerate(r64):
        for j in range(size):
            acc = 0.0
            for k0 in range(0, size, model.k_step):
                a_ops = [float(v) for v in row[k0:k0 + model.k_step]]
                b_ops = [float(v) for v in t64[k0:k0 + model.k_step, j]]
                special = fp64_special(list(zip(a_ops, b_ops)), acc)
                acc = special if special is not None else fdpa_step(terms_operand(a_ops, b_ops, model, BF16), acc,
                                                                    model)
            out[r, j] = acc
    return out


#: Step M4's implementation: :func:`mma_dot_reference` until a faster one that is tested
#: equal to it is installed (:func:`install_mma_dot`; the emulator's
#: :func:`fp4spec.emulator.rht.mma_dot` is, whenever :mod:`fp4spec` is imported).
_mma_dot = mma_dot_reference


def install_mma_dot(fn) -> None:
    """Make step M4 run ``fn(rows, T, model) -> float32 rows`` (it must equal
    :func:`mma_dot_reference` bit for bit, NaN payloads aside). The spec computes nothing
    faster itself: the vectorized twin lives in the emulator, a layer above."""
    global _mma_dot
    _mma_dot = fn


def _mma_rows(rows: np.ndarray, t: np.ndarray, model) -> np.ndarray:
    """Step M4 on float32 rows (R x size) of bf16 values, NaN results as ``model.nan_bits``."""
    out = _mma_dot(rows, t, model)
    nan = np.array([model.nan_bits], np.uint32).view(np.float32)[0]
    return np.where(np.isnan(out), nan, out).astype(np.float32)


def bf16_rne(y: np.ndarray, nan_bits: int) -> np.ndarray:
    """Step M5's ``"bfloat16"``: float32 ``y`` rounded to nearest even on its bit pattern
    (overflow to +-Inf as IEEE says), every NaN as ``nan_bits >> 16`` (0x7FFF for the
    NVIDIA NaN 0x7FFFFFFF); an ``ml_dtypes.bfloat16`` array."""
    b = np.ascontiguousarray(y, np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    r = np.where(np.isnan(y), (nan_bits >> 16) & 0xFFFF, r).astype(np.uint16)
    return r.view(ml_dtypes.bfloat16)


def _blockwise(x, size, seed, signs, axis, out_dtype, inverse: bool, arith: str = "float64") -> np.ndarray:
    size, arith = check_size_arith(size, arith)
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
    model = mma_model(arith)
    if model is not None:
        moved = np.moveaxis(_bf16_operand(x, arith), axis, -1)  # M1
        t = mma_transform_matrix(size, s8, inverse)  # M3
        y = _mma_rows(moved.reshape(-1, size), t, model).reshape(moved.shape)  # M4
        out = np.moveaxis(y, -1, axis)
        if dt == np.dtype(ml_dtypes.bfloat16):  # M5
            return np.ascontiguousarray(bf16_rne(out, model.nan_bits))
        return np.ascontiguousarray(out.astype(dt))
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
        out = np.moveaxis(y.reshape(moved.shape), -1, axis)
        return np.ascontiguousarray(_pinned_output(out, dt))  # F5
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
    return np.ascontiguousarray(_pinned_output(out, dt))


#: The float32 bits of every NaN the transform outputs (NVIDIA's canonical NaN; BF16 0x7FFF).
NAN_BITS = 0x7FFFFFFF


def _pinned_output(y: np.ndarray, dt) -> np.ndarray:
    """F5 and the float64 arithmetic's conversion, pinned: every NaN becomes :data:`NAN_BITS`
    (positive: a NaN's sign is the host's otherwise, and E4M3/E5M2 codes keep it); BF16 by
    RNE on the float32 bits (float64 first rounded to float32), not by the ml_dtypes cast,
    whose float64 -> bfloat16 rounding changed in ml_dtypes 0.7."""
    if dt == np.dtype(ml_dtypes.bfloat16):
        return bf16_rne(y.astype(np.float32), NAN_BITS)
    nan = np.array([NAN_BITS], np.uint32).view(np.float32)[0]
    return np.where(np.isnan(y), nan, y).astype(dt)


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
    float64 for float64 input and float32 otherwise. The conversion to ``"bfloat16"`` goes
    through float32: two RNE roundings (float64 -> float32 -> bfloat16), not one. NaNs are
    output as in F5.

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
    - F5. Round y to ``out_dtype`` (``"bfloat16"``: RNE on the float32 bits; ``"float32"`` =
      y; ``"float64"`` = y widened exactly), every NaN as the positive NaN
      :data:`NAN_BITS` = 0x7FFFFFFF (BF16 0x7FFF): IEEE leaves a NaN's sign to the host, and
      E4M3 / E5M2 codes keep the sign of a NaN. ``None`` means ``"float32"``.

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

    ``arith="mma:<model>"`` (``"mma:sm90-bf16"``: the tensor-core arithmetic; ``<model>``
    is a registered accumulator model with algorithm ``"fdpa"`` and scales
    ``"bf16_operand"``, see :func:`check_arith`), per row of ``size`` elements:

    - M1. x must hold bfloat16 values: an ``ml_dtypes.bfloat16`` array, or a float16,
      float32, float64 (or integer) array whose every element is exactly a bfloat16 value
      (NaN and +-Inf allowed); otherwise ValueError naming ``x`` (the transform's operand is
      bfloat16). :func:`fp4spec.quantize` converts its input to float32 before the RHT, so
      float32 holding bf16 values is what it passes.
    - M2. ``size`` must be 16 or 64 (:data:`MMA_SIZES`: T's entries +-1/4, +-1/8 are exact
      in bf16); 32 and 128 raise ValueError naming ``size``.
    - M3. ``T = diag(s) . H / sqrt(size)`` as bf16 values, exact
      (:func:`mma_transform_matrix`); the inverse uses ``T^T = H . diag(s) / sqrt(size)``.
    - M4. ``y_row = x_row . T`` from a +0 accumulator (:func:`mma_dot_reference`; the
      emulator's vectorized :func:`fp4spec.emulator.rht.mma_dot` is tested equal): the model's chained fused steps of
      ``k_step`` elements (16 for sm90-bf16) in ascending k, the FP32 accumulator starting
      at +0.0. Each step aligns the step's ``size`` products ``x_i T[i, j]`` (exact) and the
      accumulator to the largest exponent, truncates them to ``frac_bits`` fractional bits
      (25), sums them exactly and rounds the sum to float32 with ``final_rounding`` (RZ);
      with ``zero_sign="positive"`` every zero is +0.0. A step whose float64 sum of products
      and accumulator is +-Inf gives that Inf (only an Inf input does that: products of
      finite bf16 values cannot overflow float64); NaN (a NaN input, or Infs of both
      signs; T has no zero entry, so no Inf * 0) gives NaN. Every NaN result is the model's NaN
      ``nan_bits`` (0x7FFFFFFF for sm90-bf16).
    - M5. Round to ``out_dtype``: ``"bfloat16"`` RNE on the float32 bits (overflow to
      +-Inf; a NaN becomes ``nan_bits >> 16``, 0x7FFF); ``"float32"`` as is; ``"float64"``
      widened. ``None`` means ``"float32"``.

    Where mma differs from fwht-fp32 (both on the same BF16 input; for sizes 16 and 64
    they give the same bits whenever every butterfly partial sum is exact in float32, the
    fused sums need no rounding and no -0.0 arises, e.g. on non-zero small integers):

    * Sums that a butterfly rounds but the fused sum keeps: the fused step keeps 25 bits
      below the largest product, whatever the order. In the example above
      (``x = [2^24, 1, -2^24, 0, ..., 0]``, TE signs) mma gives the exact ``y_0 = 0.25``
      where fwht-fp32 gives 0. A butterfly stage can also overflow where the exact sum is
      small: with ``M`` the largest finite bf16 (0x7F7F) and TE signs,
      ``x = [M, M, -M, M, 0, ..., 0]`` (``s * x = [M, M, -M, -M, 0, ...]``) has
      ``y_0 = 0``: mma gives +0, fwht-fp32 NaN (``fp32(M + M) = Inf``, then ``Inf - Inf``).
    * The fused step rounds toward zero, the butterfly to nearest: ``x = [1, 3 * 2^-25,
      0, ..., 0]`` (TE signs) has ``y_0 = (1 + 3 * 2^-25) / 4``; mma truncates it to
      0.25, fwht-fp32 gives ``0.25 + 2^-25`` (float32 output; BF16 output: both 0.25). In
      the first example, ``y_3 = (2^25 - 1) / 4 = 2^23 - 0.25``: mma truncates to
      ``2^23 - 0.5``, a float32 RNE sum (and float64) gives the even ``2^23``.
    * Zero signs: every zero mma returns is +0.0 under sm90-bf16 (``-0.0`` inputs, exact
      cancellations, negative sums truncated to zero); fwht-fp32 gives -0.0 where IEEE
      signed-zero sums do (an all -0.0 row gives ``y_14 = -0.0`` with TE's signs).
    * NaN bits: none; both output the positive NaN 0x7FFFFFFF (BF16 0x7FFF): mma's is
      the model's, fwht-fp32's is pinned in F5.

    Relation to TE: TE runs the product ``x_row . diag(s) . H16 / 4`` on MMA hardware with
    FP32 accumulation, then rounds to BF16. ``arith="mma:sm90-bf16"`` is that product on a
    Hopper tensor core (bf16 ``wgmma``/``mma.sync``, k = 16 per instruction), bit for bit
    under the measured sm90-bf16 model: a kernel that computes the transform with a
    tensor-core dot (one ``tl.dot`` of the row block by T) on Hopper gives these bits.
    TE's fused RHT kernels run on Blackwell (sm100), whose bf16 MMA is not measured here:
    register its model (:func:`fp4spec.register_accumulator`, algorithm ``"fdpa"``,
    scales ``"bf16_operand"``) and use ``arith="mma:<that model>"``. fwht-fp32 gives TE's
    result whenever TE's FP32 accumulation and the butterfly's partial sums are exact;
    otherwise they can differ by where the FP32 sums round.

    The transform is orthogonal: :func:`inverse_rht` with the same ``size``, signs and
    ``axis`` undoes it, and norms are preserved (both up to the rounding of steps 4-5).

    Raises:
        ValueError: bad ``size``, ``axis``, ``out_dtype``, ``arith`` or signs; neither or
            both of ``seed`` and ``signs``; a length along ``axis`` that is not a multiple
            of ``size``; for an mma arithmetic, x not bfloat16-valued (M1) or a size other
            than 16 or 64 (M2).
    """
    return _blockwise(x, size, seed, signs, axis, out_dtype, inverse=False, arith=arith)


def inverse_rht(y, size: int = 16, *, seed=None, signs=None, axis: int = -1, out_dtype=None,
                arith: str = "float64") -> np.ndarray:
    """Inverse of :func:`rht` with the same ``size``, signs (or ``seed``) and ``axis``.

    Steps 1-3 and 5 are those of :func:`rht`; step 4 becomes
    ``x_row = y_row @ H @ diag(s) / sqrt(size)`` (``T^-1 = T^T`` and ``H`` is symmetric).
    ``arith="float64"`` evaluates it in float64 as ``((y_row @ H) * s) / sqrt(size)``;
    ``arith="fwht-fp32"`` runs steps F1, F3 and F4 of :func:`rht` on y, then flips signs
    (``x_i = y'_i * s_i``, exact), then F5. ``arith="mma:<model>"`` runs steps M1-M5 with
    ``T^T = H . diag(s) / sqrt(size)`` in place of T (y must hold bfloat16 values, e.g.
    the BF16 output of :func:`rht`).
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
        size: 16, 32, 64 or 128 (:data:`RHT_SIZES`); 16 or 64 with an mma arithmetic.
        signs: the +-1 diagonal, ``size`` Python ints (any sequence is stored as a tuple).
        arith: ``"fwht-fp32"`` (default, pinned float32 butterfly), ``"float64"``, or
            ``"mma:sm90-bf16"`` (the tensor-core dot; ``"mma:<model>"`` for another
            registered bf16 tensor-core model; BF16 input only): :func:`rht`.
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
        object.__setattr__(self, "arith", check_size_arith(size, self.arith)[1])
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
        """``"size/arith"``, e.g. ``"16/fwht-fp32"`` or ``"16/mma:sm90-bf16"``: what a backend
        claims in ``Capabilities.rht``."""
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


__all__ = ["ARITHS", "MMA_PREFIX", "MMA_SIZES", "RHT", "RHT_SIZES", "TE_SIGNS", "SIGN_PRESETS", "OUT_DTYPES",
           "arith_names", "bf16_rne", "check_arith", "check_size", "check_size_arith", "fwht_fp32", "fwht_scale",
           "hadamard", "inverse_rht", "mma_model", "mma_transform_matrix", "resolve_rht", "rht", "rht_matrix",
           "rht_signs", "sign_mask"]
