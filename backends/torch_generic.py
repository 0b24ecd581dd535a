"""Torch ops for every catalogued element format, rounding mode and block scheme.

The general half of the torch backend (:mod:`fp4spec.backends.torch_backend` holds the
two-level chain and the RHT): bit-exact with the numpy emulator on any torch device (CPU,
CUDA, ROCm), with the same conventions -- eager ops, one op per emulator step, IEEE float32
(float64 where the emulator computes in float64), no fused multiply-add, no torch.compile.
Tensors stay on x's device.

* :func:`encode_elements` -- :func:`fp4spec.emulator.elements.encode` for any format of
  :data:`fp4spec.formats` (E2M1 ... E5M2, INT4, S1P2, the scale formats) and every rounding
  mode (``rne``, ``rna``, ``rtz``, ``rup``, ``rdn``, ``rto``, ``sr`` with given random bits
  and ``sr_bits`` in [1, 32]), with the overflow, NaN and negative-zero policies. It counts
  the emulator's own decision thresholds (``fp4spec.emulator.elements.thresholds``): the magnitude
  index is ``#(|y| >= T)`` (``torch.bucketize``), so the modes differ only in ``T``.
* :func:`quantize_mx_blocks`, :func:`dequantize_mx_blocks` -- OCP MX with any float
  element (``mxfp4``, ``mxfp6_e2m3``, ``mxfp6_e3m2``, ``mxfp8_e4m3``, ``mxfp8_e5m2``), every
  scale rule and profile: :func:`fp4spec.emulator.scaling.quantize_mx`.
* :func:`hif4_quantize`, :func:`hif4_dequantize` -- :mod:`fp4spec.emulator.hif4` step for
  step, in its float32 or float64 arithmetic (``arith``).

A NaN-scale MX block multiplies its elements by 0, and the sign of the NaN that ``Inf * 0``
gives is the platform's (x86 -NaN, CUDA and ARM +NaN); the specification pins it to x's sign
bit (:func:`fp4spec.scaling.mx_scaled_element` step 4), so the NaN codes of MXFP8 elements are
the same on every device.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from fp4spec._checks import check_axis
from fp4spec.hif4 import (
    ARITH_MODES,
    CONST_REC,
    E6M2_MAX,
    E6M2_MIN,
    E6M2_NAN_CODE,
    GROUP_SIZE,
    LEVEL2_SIZE,
    LEVEL3_SIZE,
    NONFINITE_POLICIES,
    S1P2_MAX_INDEX,
)
from fp4spec.number_formats import Format, get_format
from fp4spec.elements import (
    check_policies,
    magnitude_grid,
    nan_error,
    nan_input_code,
    overflow_error,
)
from fp4spec.rounding import DEFAULT_SR_BITS, ROUNDING_MODES, check_choice, check_rounding

from . import torch_ops as ops

_N16 = GROUP_SIZE // LEVEL3_SIZE  # 16 level-3 groups per HiF4 group
_N8 = GROUP_SIZE // LEVEL2_SIZE  # 8 level-2 groups
_KINDS = ("rne", "rna", "down", "up")  # threshold tables of emulator.encode


def _torch():
    import torch

    return torch


# -- element encoding: any format x any rounding mode ---------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity: side_plan caches one per key
class SidePlan:
    """What the encoder needs for the magnitudes of one sign of one format (Python data).

    ``thresholds[kind]`` = (values, dtype name) with index = #(|y| >= T): float32 where every
    threshold is exact in float32, else float64 (the emulator's fallback). ``mags``: the
    extended magnitude grid (float64); ``even``: significand parity per grid point;
    ``codes``: the code per grid index, the extension points holding their out-of-range codes.
    """

    thresholds: dict
    mags: tuple
    even: tuple
    codes: tuple
    low_ext: bool

    @property
    def top(self) -> int:
        return len(self.mags) - 1


@lru_cache(maxsize=None)
def side_plan(fmt: Format, negative: bool, neg_zero: str, mode: str, overflow: str, dtype: str = "float32") -> SidePlan:
    """:class:`SidePlan` of ``fmt``'s ``negative`` side for ``mode`` and ``overflow`` (the
    emulator's ``side_table`` and ``thresholds``; out-of-range codes from the reference's step 7;
    with ``overflow="error"`` the ends hold the saturated codes, the caller raises)."""
    from fp4spec.elements import out_of_range_code
    from fp4spec.emulator.elements import side_table, thresholds

    side = side_table(fmt, negative, neg_zero)
    tables = {}
    for kind in _KINDS:
        t = thresholds(fmt, negative, kind, dtype)
        name = dtype
        if t is None:  # not exact in float32: compare in float64, as the emulator does
            t, name = thresholds(fmt, negative, kind, "float64"), "float64"
        tables[kind] = (tuple(float(v) for v in t), name)
    codes = [int(c) for c in side.codes]
    top, low_ext = len(codes) - 1, bool(side.low_ext)
    policy = "saturate" if overflow == "error" else overflow
    codes[top] = out_of_range_code(fmt, None, negative, True, mode, policy)
    if low_ext:
        codes[0] = out_of_range_code(fmt, None, negative, False, mode, policy)
    return SidePlan(tables, tuple(float(m) for m in side.mags), tuple(bool(e) for e in side.even),
                    tuple(codes), low_ext)


@lru_cache(maxsize=None)
def _side_tensors(plan: SidePlan, device: str) -> dict:
    torch = _torch()
    dev = torch.device(device)
    out = {kind: torch.tensor(vals, dtype=getattr(torch, name), device=dev)
           for kind, (vals, name) in plan.thresholds.items()}
    out["mags"] = torch.tensor(plan.mags, dtype=torch.float64, device=dev)
    out["even"] = torch.tensor(plan.even, dtype=torch.bool, device=dev)
    out["codes"] = torch.tensor(plan.codes, dtype=torch.int64, device=dev)
    return out


def _count(a, tabs: dict, kind: str):
    """#(a >= T) for the ``kind`` thresholds (a widened exactly to float64 if T is float64)."""
    t = tabs[kind]
    return _torch().bucketize(a.to(t.dtype), t, right=True)


def _pick(neg, if_neg, if_pos):
    """Per element by sign: ``neg`` a bool tensor, or a Python bool for a whole side."""
    if isinstance(neg, bool):
        return if_neg if neg else if_pos
    return _torch().where(neg, if_neg, if_pos)


def magnitude_index(a, plan: SidePlan, mode: str, neg, r=None, sr_bits: int = DEFAULT_SR_BITS):
    """Index into ``plan``'s extended grid of magnitudes ``a`` (emulator ``_round_side`` /
    ``_round_signed``). ``neg``: the value's sign (directed modes), a bool tensor or a Python
    bool; ``r``: float64 random integers for ``sr``.

    * ``rne``/``rna``: #(a >= T) with the nearest-mode thresholds.
    * ``rtz``: the lower neighbour ("down"); ``rup``: "up" for positives, "down" for
      negatives; ``rdn`` the reverse.
    * ``rto``: "down", unless inexact (up != down) with an even lower and odd upper neighbour.
    * ``sr``: up from ``lo = mags[down]`` iff ``(a - lo) * 2^N >= (2^N - r) * (hi - lo)`` in
      float64 (exact), ``a > lo`` and ``down < top``.
    """
    torch = _torch()
    tabs = _side_tensors(plan, str(a.device))
    if mode in ("rne", "rna"):
        return _count(a, tabs, mode)
    if mode == "rtz":
        return _count(a, tabs, "down")
    if mode in ("rup", "rdn"):
        down, up = _count(a, tabs, "down"), _count(a, tabs, "up")
        return _pick(neg, down, up) if mode == "rup" else _pick(neg, up, down)
    down = _count(a, tabs, "down")
    if mode == "rto":
        up = _count(a, tabs, "up")
        take_up = (up != down) & tabs["even"][down] & ~tabs["even"][up]
        return torch.where(take_up, up, down)
    if mode != "sr":  # pragma: no cover -- check_rounding ran
        raise ValueError(f"rounding: {mode!r}")
    mags = tabs["mags"]
    lo = mags[down]
    hi = mags[(down + 1).clamp(max=plan.top)]
    scale = float(1 << int(sr_bits))
    a64 = a.to(torch.float64)
    take_up = (a64 - lo) * scale >= (scale - r) * (hi - lo)
    take_up &= (a64 > lo) & (down < plan.top)
    return down + take_up.to(down.dtype)


@lru_cache(maxsize=None)
def _same_grid(fmt: Format) -> bool:
    return magnitude_grid(fmt, False) == magnitude_grid(fmt, True)


def _check_sr(rbits, sr_bits):
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")
    if rbits is None:
        raise ValueError("rbits: rounding='sr' needs explicit random bits (an integer tensor in "
                         f"[0, 2**{sr_bits}) broadcastable to x)")


def encode_elements(y, fmt, rounding: str = "rne", rbits=None, sr_bits: int = DEFAULT_SR_BITS, *,
                    overflow: str = "saturate", nan: str = "auto", neg_zero: str = "preserve",
                    zero_positive: bool = False, nan_negative=None):
    """Codes of the values of tensor ``y`` in ``fmt``: :func:`fp4spec.emulator.elements.encode`
    (and so :func:`fp4spec.elements.encode_scalar`) on y's device.

    ``y``: float16/bfloat16 (widened exactly to float32), float32 or float64; compared in that
    precision, float64 where a threshold is not exact in float32. ``rbits`` (``sr`` only):
    an integer tensor in ``[0, 2**sr_bits)`` broadcastable to y (its range is the caller's
    check). ``overflow``, ``nan``, ``neg_zero``: the policies of ``encode_scalar``
    (``"error"`` ones raise as the emulator does, which reads the tensor on the host).

    Extras of the block schemes: ``zero_positive`` -- an exact -0.0 counts as +0 (TE's
    ``y + 0``; the sign is ``y < 0``); ``nan_negative`` -- a bool tensor giving the sign of
    each NaN's code (default: the NaN's sign bit).

    1. ``a = |y|``; the sign is y's sign bit (``y < 0`` with ``zero_positive``).
    2. Unsigned formats: round ``a`` as a positive value; a negative non-zero value is out of
       range below. Sign-symmetric grids: one index for both signs, codes per sign. Other
       grids (two's complement INT4): each side separately, picked by sign.
    3. An index on an extension point is out of range: its code is the policy's
       (:func:`side_plan`); ``overflow="error"`` raises OverflowError (below first).
    4. NaN: the ``nan`` policy's code for the NaN's sign; ``"error"`` (``"auto"`` for a
       format without NaN) raises ValueError.

    Returns uint8 codes (uint16 for formats wider than 8 bits) of y's shape, on y's device.
    """
    torch = _torch()
    fmt = get_format(fmt)
    mode = check_rounding(rounding)
    policy = check_policies(fmt, overflow, nan, neg_zero)
    if y.dtype in (torch.float16, torch.bfloat16):
        y = y.to(torch.float32)
    elif y.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"y: dtype {y.dtype} is not a float dtype (float16, bfloat16, float32, float64)")
    r = None
    if mode == "sr":
        _check_sr(rbits, sr_bits)
        r = rbits.to(device=y.device, dtype=torch.float64).expand(y.shape)
    elif rbits is not None:
        raise ValueError(f"rbits: only used with rounding='sr', not {mode!r}")
    dt = "float64" if y.dtype == torch.float64 else "float32"
    a = y.abs()
    sign = torch.signbit(y)
    neg = (y < 0) if zero_positive else sign
    isnan = torch.isnan(y)
    no = torch.zeros_like(isnan)
    if not fmt.signed:
        plan = side_plan(fmt, False, neg_zero, mode, overflow, dt)
        idx = magnitude_index(a, plan, mode, False, r, sr_bits)
        codes = _side_tensors(plan, str(y.device))["codes"][idx]
        below = neg & (a > 0)  # negative non-zero: out of range below
        codes = torch.where(below, _low_code(fmt, True, mode, overflow), codes)
        out_hi = (idx == plan.top) & ~below
        out_lo = below | ((idx == 0) if plan.low_ext else no)
    else:
        pos = side_plan(fmt, False, neg_zero, mode, overflow, dt)
        negp = side_plan(fmt, True, neg_zero, mode, overflow, dt)
        if _same_grid(fmt):
            idx_p = idx_n = magnitude_index(a, pos, mode, neg, r, sr_bits)
        else:  # e.g. INT4: -8 exists, +8 does not
            idx_p = magnitude_index(a, pos, mode, False, r, sr_bits)
            idx_n = magnitude_index(a, negp, mode, True, r, sr_bits)
        dev = str(y.device)
        codes = torch.where(neg, _side_tensors(negp, dev)["codes"][idx_n], _side_tensors(pos, dev)["codes"][idx_p])
        out_hi = torch.where(neg, idx_n == negp.top, idx_p == pos.top)
        out_lo = torch.where(neg, (idx_n == 0) if negp.low_ext else no, (idx_p == 0) if pos.low_ext else no)
    if overflow in ("inf", "nan"):  # +-Inf is exact: its code ignores the directed-mode exception
        infinite = torch.isinf(y) & out_hi
        if fmt.signed:
            inf_codes = torch.where(neg, _inf_input_code(fmt, True, mode, overflow),
                                    _inf_input_code(fmt, False, mode, overflow))
        else:  # -Inf is below an unsigned format's range (out_lo), never out_hi
            infinite &= ~neg
            inf_codes = _inf_input_code(fmt, False, mode, overflow)
        codes = torch.where(infinite, inf_codes, codes)
    if overflow == "error":
        for mask in (out_lo & ~isnan, out_hi & ~isnan):
            if bool(mask.any()):
                raise overflow_error(fmt, float(y[mask][0]))
    if policy == "error":
        if bool(isnan.any()):
            raise nan_error(fmt)
    else:
        nn = sign if nan_negative is None else nan_negative
        nan_codes = torch.where(nn, nan_input_code(fmt, policy, True), nan_input_code(fmt, policy, False))
        codes = torch.where(isnan, nan_codes, codes)
    return codes.to(torch.uint8 if fmt.bits <= 8 else torch.uint16)


@lru_cache(maxsize=None)
def _inf_input_code(fmt: Format, negative: bool, mode: str, overflow: str) -> int:
    from fp4spec.elements import out_of_range_code

    return out_of_range_code(fmt, None, negative, True, mode, overflow, infinite=True)


@lru_cache(maxsize=None)
def _low_code(fmt: Format, negative: bool, mode: str, overflow: str) -> int:
    from fp4spec.elements import out_of_range_code

    return out_of_range_code(fmt, None, negative, False, mode, "saturate" if overflow == "error" else overflow)


# -- MX: any float element ------------------------------------------------------------------------

def quantize_mx_blocks(xb, scheme, rounding: str = "rne", rbits=None, sr_bits: int = DEFAULT_SR_BITS):
    """MX quantization of float32 blocks ``xb`` (..., n_blocks, k) with any float element:
    (codes uint8, E8M0 scale codes uint8), as :func:`fp4spec.emulator.scaling.quantize_mx`.

    1. amax per block (max of the sign-cleared bit patterns; NaN wins).
    2. e and the NaN-scale mask: :func:`~fp4spec.backends.torch_ops.mx_exponents` (the
       element's emax, mantissa bits and max; the profile's non-finite and rceil policies).
    3. Scale code e + 127, 0xFF for a NaN scale.
    4. Multiplier ``2^shift`` (float32, exact): ``shift = -e`` under
       ``mx_element_scaling="exact"``; torchao: ``-max(e, -126)``, rceil ``0`` for e = -127;
       0 for a NaN scale (NaN under torchao's RCEIL, which multiplies by the NaN descale).
    5. ``y = fp32(x * multiplier)``; codes = :func:`encode_elements` (saturate; NaN: the
       element's NaN, +0 where it has none). A NaN ``y`` (x NaN, or x = +-Inf times 0) takes
       x's sign bit, as the specification asks (not the device's sign of ``Inf * 0``).
    """
    from fp4spec.scaling import element_nan_policy

    torch = _torch()
    amax = ops.abs_max(xb)
    e, nan_scale = ops.mx_exponents(amax, scheme)
    scale_codes = torch.where(nan_scale, torch.full_like(e, 0xFF), e + 127).to(torch.uint8)
    if scheme.policies["mx_element_scaling"] == "exact":
        shift = -e
    elif scheme.scale_rule == "rceil":
        shift = torch.where(e == -127, torch.zeros_like(e), -e)  # TE exp2f_rcp: scale byte 0 -> 1.0
    else:
        shift = -e.clamp(min=-126)  # torchao: divide by max(2^e, 2^-126)
    # a NaN block: 0, but torchao RCEIL multiplies the block by its NaN descale (every y NaN)
    torchao_rceil = scheme.policies["mx_element_scaling"] == "torchao" and scheme.scale_rule == "rceil"
    nan_mult = torch.full_like(amax, float("nan") if torchao_rceil else 0.0)
    mult = torch.where(nan_scale, nan_mult, ops.pow2_f32(shift))
    y = xb * mult.unsqueeze(-1)
    el = scheme.element
    # the NaN's sign is a code bit: x's (a NaN y comes only from a NaN or +-Inf x), not the device's
    nan_negative = torch.signbit(xb) if el.has_nan else None
    codes = encode_elements(y, el, rounding, rbits, sr_bits, overflow="saturate", nan=element_nan_policy(el),
                            nan_negative=nan_negative)
    return codes, scale_codes


def dequantize_mx_blocks(codes, scales, scheme):
    """fp32(P * 2^(scale - 127)) per element, NaN for scale 0xFF: the torch backend's
    :func:`~fp4spec.backends.torch_ops.dequantize_mx_blocks`, which is element-generic
    (the code's float32 value from the format's table: NaN and +-Inf codes included)."""
    return ops.dequantize_mx_blocks(codes, scales, scheme)


# -- HiF4 -----------------------------------------------------------------------------------------

def pow2_f64(e):
    """float64 2^e for integer tensors e in [-1022, 1023], from the bit pattern (exact)."""
    torch = _torch()
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)


def _floor_log2_f64(v):
    """floor(log2 v) of positive normal float64 values (the exponent field; -1023 for 0)."""
    torch = _torch()
    return ((v.view(torch.int64) >> 52) & 0x7FF) - 1023


def bf16_rne(v):
    """``To_BF16`` of non-negative float64 values: 8 significant bits, ties to even, exponent
    floored at -126 (:func:`fp4spec.emulator.hif4.bf16_rne`; the scalings are exact)."""
    torch = _torch()
    e = _floor_log2_f64(v).clamp(min=-126)  # v = 0: any e gives 0
    return torch.round(v * pow2_f64(7 - e)) * pow2_f64(e - 7)


def e6m2_encode(sf):
    """Step 6 on float64 scale factors: (uint8 codes, float64 values), as the emulator's."""
    torch = _torch()
    x = torch.maximum(torch.minimum(sf, torch.full_like(sf, float(E6M2_MAX))), torch.full_like(sf, float(E6M2_MIN)))
    e = _floor_log2_f64(x)
    r = torch.round(x * pow2_f64(2 - e))  # 4..8, ties to even
    carry = r == 8
    e = e + carry.to(e.dtype)
    r = torch.where(carry, torch.full_like(r, 4.0), r)
    codes = ((e + 48) << 2) | (r.to(torch.int64) - 4)
    return codes.to(torch.uint8), r * pow2_f64(e - 2)


_INPUT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def hif4_quantize(x, *, axis: int = -1, arith: str = "float64", pad: bool = False, nonfinite: str = "error") -> dict:
    """:func:`fp4spec.emulator.hif4.hif4_quantize` on x's device: the same arguments, checks,
    messages and layout (torch uint8 tensors ``codes``, ``scales``, ``e1_8``, ``e1_16``).

    ``arith="float64"`` evaluates the products in float64 (exact: the golden model),
    ``"float32"`` in float32 (each rounds where the reference applies ``F32(.)``); ``BF16(.)``
    and the E6M2 rounding run in float64 with exact power-of-two scalings and ``torch.round``
    (ties to even). ``nonfinite="error"`` reads the tensor on the host to raise.
    """
    torch = _torch()
    check_choice("arith", arith, ARITH_MODES)
    check_choice("nonfinite", nonfinite, NONFINITE_POLICIES)
    if not isinstance(pad, (bool, np.bool_)):
        raise ValueError(f"pad: expected True or False, got {pad!r}")
    x = ops.as_torch(x)
    if str(x.dtype).removeprefix("torch.") not in _INPUT_DTYPES:
        raise TypeError(f"x: dtype {x.dtype} is not supported; pass float16, bfloat16, float32 or float64 values")
    ax = check_axis(axis, x.dim(), "x")
    # Step 1: float16/bfloat16 widen exactly, float64 rounds to nearest even (overflow: +-Inf)
    x32 = torch.movedim(x.to(torch.float32), ax, -1)
    lead, length = tuple(x32.shape[:-1]), x32.shape[-1]
    n_groups = -(-length // GROUP_SIZE)
    if length % GROUP_SIZE:
        if not pad:
            raise ValueError(f"x: length {length} along axis {axis} is not a multiple of {GROUP_SIZE}; "
                             f"pass pad=True to zero-pad the last group")
        x32 = torch.nn.functional.pad(x32, (0, n_groups * GROUP_SIZE - length))
    g = x32.reshape(lead + (n_groups, _N16, LEVEL3_SIZE))

    # Step 2: non-finite groups
    finite = torch.isfinite(g)
    bad = ~finite.reshape(lead + (n_groups, GROUP_SIZE)).all(dim=-1)
    if nonfinite == "error" and bool(bad.any()):
        _raise_nonfinite(x, ax, finite)
    g = torch.where(bad[..., None, None], torch.zeros_like(g), g)

    # Step 3
    neg = g < 0
    a = g.abs()
    # Step 4
    v16 = a.amax(dim=-1)
    v8 = v16.reshape(lead + (n_groups, _N8, 2)).amax(dim=-1)
    vmax = v8.amax(dim=-1)
    cdt = torch.float32 if arith == "float32" else torch.float64
    dev = x.device
    const_rec = torch.tensor(float(CONST_REC), dtype=cdt, device=dev)
    # Step 5
    sf = bf16_rne((vmax.to(cdt) * const_rec).to(torch.float64))
    # Step 6
    scales, scale_val = e6m2_encode(sf)
    # Step 7 (float64 division, correctly rounded, as numpy's)
    rec = bf16_rne(torch.div(torch.ones_like(scale_val), scale_val)).to(cdt)
    # Step 8
    e1_8 = v8.to(cdt) * rec[..., None] >= torch.tensor(4.0, dtype=cdt, device=dev)
    e1_8x2 = e1_8.repeat_interleave(2, dim=-1)
    # Step 9: * 2^-E1_8 (a float32/float64 power of two: ldexp's correctly rounded value)
    half = torch.where(e1_8x2, torch.tensor(0.5, dtype=cdt, device=dev), torch.tensor(1.0, dtype=cdt, device=dev))
    e1_16 = (v16.to(cdt) * rec[..., None]) * half >= torch.tensor(2.0, dtype=cdt, device=dev)
    # Step 10
    de = e1_8x2.to(torch.int64) + e1_16.to(torch.int64)
    # Step 11: q = fp(|x| * REC) * 2^(2 - DE) (exact scaling by 4, 2 or 1); floor(q + 1/2), at most 7
    q = (a.to(cdt) * rec[..., None, None]) * pow2_f64(2 - de).to(cdt)[..., None]
    m4 = torch.floor(q + torch.tensor(0.5, dtype=cdt, device=dev))
    m4 = torch.clamp(m4, max=float(S1P2_MAX_INDEX)).to(torch.uint8)
    # Step 12
    codes = (neg.to(torch.uint8) << 3) | m4

    scales = torch.where(bad, torch.full_like(scales, E6M2_NAN_CODE), scales)
    codes = torch.where(bad[..., None, None], torch.zeros_like(codes), codes)
    e1_8 = e1_8 & ~bad[..., None]
    e1_16 = e1_16 & ~bad[..., None]
    codes = codes.reshape(lead + (n_groups * GROUP_SIZE,))[..., :length]
    return {
        "codes": torch.movedim(codes, -1, ax),
        "scales": scales,
        "e1_8": e1_8.to(torch.uint8),
        "e1_16": e1_16.to(torch.uint8),
    }


def _raise_nonfinite(x, ax: int, finite):
    """The emulator's error for the first non-finite element (index in x's coordinates)."""
    torch = _torch()
    moved = torch.movedim(x, ax, -1)
    flat_finite = finite.reshape(tuple(finite.shape[:-3]) + (-1,))[..., :moved.shape[-1]]
    idx = tuple(int(i) for i in torch.nonzero(~flat_finite)[0])
    value = float(moved[idx])
    why = " (a float64 value beyond the float32 range)" if np.isfinite(value) else ""
    index = idx[:-1][:ax] + (idx[-1],) + idx[:-1][ax:]
    raise ValueError(f"x: element {index} is {value!r}{why}; HiF4 has no encoding for NaN or Inf "
                     f"values; pass nonfinite='propagate' to get NaN groups (scale code 0xFF), "
                     f"as in the golden model's output")


def _as_codes(v, name: str, max_value: int):
    torch = _torch()
    t = ops.as_torch(v)
    if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{name}: expected an integer array, got dtype {t.dtype}")
    t = t.to(torch.int64)
    if t.numel():
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi > max_value:
            raise ValueError(f"{name}: every entry must lie in 0..{max_value}, found {lo if lo < 0 else hi}")
    return t


def hif4_dequantize(codes, scales, e1_8, e1_16, *, axis: int = -1):
    """:func:`fp4spec.emulator.hif4.hif4_dequantize` on the codes' device: float32 values
    ``(-1)^s * E6M2 * 2^(E1_8 + E1_16) * m4 / 4`` (NaN for scale 0xFF), same checks and layout.

    Computed in float32, exactly: every intermediate has at most 6 significant bits and a
    magnitude in {0} U [2^-50, 344064] (the emulator's float64 values, cast).
    """
    torch = _torch()
    c = _as_codes(codes, "codes", 15)
    dev = c.device
    s = _as_codes(scales, "scales", 255).to(dev)
    b8 = _as_codes(e1_8, "e1_8", 1).to(dev)
    b16 = _as_codes(e1_16, "e1_16", 1).to(dev)
    ax = check_axis(axis, c.dim(), "codes")
    c = torch.movedim(c, ax, -1)
    lead, length = tuple(c.shape[:-1]), c.shape[-1]
    if tuple(s.shape[:-1]) != lead or s.dim() != c.dim():
        raise ValueError(f"scales: shape {tuple(s.shape)} does not match codes (expected {lead} + (n_groups,))")
    n_groups = s.shape[-1]
    if -(-length // GROUP_SIZE) != n_groups:
        raise ValueError(f"scales: {n_groups} groups along the last axis, but codes have length {length} "
                         f"along axis {axis}, which needs {-(-length // GROUP_SIZE)}")
    for name, bits, n in (("e1_8", b8, _N8), ("e1_16", b16, _N16)):
        if tuple(bits.shape) != tuple(s.shape) + (n,):
            raise ValueError(f"{name}: shape {tuple(bits.shape)} does not match scales {tuple(s.shape)} "
                             f"(expected {tuple(s.shape) + (n,)})")
    c = torch.nn.functional.pad(c, (0, n_groups * GROUP_SIZE - length))
    c = c.reshape(lead + (n_groups, _N16, LEVEL3_SIZE))
    de = b8.repeat_interleave(2, dim=-1) + b16
    e6m2 = (1 + (s & 3).to(torch.float32) / 4) * ops.pow2_f32((s >> 2) - 48)
    e6m2 = torch.where(s == E6M2_NAN_CODE, torch.full_like(e6m2, float("nan")), e6m2)
    scale = e6m2[..., None] * ops.pow2_f32(de)
    mag = (c & 7).to(torch.float32) / 4 * scale[..., None]
    val = torch.where((c >> 3) == 1, -mag, mag)
    val = val.reshape(lead + (n_groups * GROUP_SIZE,))[..., :length]
    return torch.movedim(val, -1, ax)


# -- capability lists (for the torch backend) ------------------------------------------------------

#: Catalogued MX schemes (any float element) and the scale rules the torch backend claims.
MX_SCHEMES = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2")
MX_RULES = ("floor", "ceil", "even", "rceil")
#: Rounding modes of :func:`encode_elements` (every mode of the spec).
ROUNDINGS = ROUNDING_MODES


def mx_scheme_specs() -> tuple[str, ...]:
    """Scheme specs of every catalogued MX scheme under every scale rule (OCP profile)."""
    return tuple(n if r == "floor" else f"{n}:scale_rule={r}" for n in MX_SCHEMES for r in MX_RULES)


__all__ = ["MX_RULES", "MX_SCHEMES", "ROUNDINGS", "SidePlan", "bf16_rne",
           "dequantize_mx_blocks", "e6m2_encode", "encode_elements", "hif4_dequantize", "hif4_quantize",
           "magnitude_index", "mx_scheme_specs", "pow2_f64", "quantize_mx_blocks", "side_plan"]
