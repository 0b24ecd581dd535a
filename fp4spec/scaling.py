"""Block scaling, the normative scalar reference: one block (or tile) at a time.

Every function here is slow and literal: exact integers and :class:`fractions.Fraction`
where the specification is exact math (the E8M0 exponent rules), explicit ``np.float32``
scalar operations, one IEEE binary32 rounding each (RNE, no flush-to-zero), where the
specification *is* float32 arithmetic (the NVFP4 scale chains). The vectorized emulator
(:mod:`fp4spec.emulator.scaling`) is tested equal to these, bit for bit.

Notation: ``fp32(e)`` evaluates ``e`` in binary32 with RNE; ``amax`` = max |x| over a block
(NaN if any element is NaN); ``FLT_MAX`` = 3.4028235e38. Element conversion is always
:func:`fp4spec.elements.encode_scalar` (saturating).

Input (step 0, every scheme): x is converted to float32 -- exactly for float16 and
bfloat16, with RNE for float64 (TransformerEngine and torchao widen BF16 to FP32 and work
in FP32; a float64 tensor is first rounded to FP32, as ``tensor.float()`` does).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Sequence

import numpy as np

from .block_schemes import Scheme
from .number_formats import Format
from .elements import encode_scalar, floor_log2
from ._checks import check_axis

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
NAN_SCALE_CODE_E8M0 = 0xFF


def _f32_op(fn):
    """Run one float32 operation with IEEE special results and no warnings."""
    with np.errstate(all="ignore"):
        return F32(fn())


def ceil_log2(v: Fraction) -> int:
    """Exact ceil(log2(v)) of a positive rational."""
    e = floor_log2(v)
    return e if Fraction(2) ** e == v else e + 1


def float32_bits(v) -> int:
    """The 32-bit pattern of a float32 value, as a Python int."""
    return int(np.array(v, dtype=np.float32).view(np.uint32))


def element_nan_policy(element: Format) -> str:
    """NaN scaled values become the element's NaN where it has one, else +0."""
    return "nan" if element.has_nan else "zero"


def block_amax(values: Sequence) -> np.float32:
    """max |v| over float32 values; NaN if any is NaN (as ``torch.amax`` and ``np.max``)."""
    amax = F32(0.0)
    for v in values:
        a = abs(F32(v))
        if math.isnan(a):
            return F32(np.nan)
        if a > amax:
            amax = a
    return amax


# =====================================================================================
# MX: one E8M0 scale per block
# =====================================================================================

def mx_scale_exponent(amax, element: Format, rule: str, policies) -> int | None:
    """Unbiased exponent e of the E8M0 scale X = 2^e of a block with this amax; None = NaN scale.

    1. NaN amax: None (scale code 0xFF). Infinite amax: None under
       ``mx_nonfinite_block="nan_scale"`` (OCP profile); under ``"nan_only"`` (torchao) the
       rule is applied with amax read as 2^128 (its exponent field is 255), except that
       ``rceil`` gives e = 127 (the saturated cast of an infinite quotient).
    2. amax == 0: e = -127 (scale code 0x00, X = 2^-127), for every rule.
    3. ``floor`` (OCP 6.3): e = floor(log2 amax) - emax_elem, exact (the exponent of amax's
       bits; for an fp32-subnormal amax the exact value, which step 7 clamps anyway).
    4. ``ceil``: e = ceil(log2 amax) - emax_elem.
    5. ``even`` (torchao EVEN): add 2^(22 - m) to amax's 32-bit pattern (m = the element's
       mantissa bits), clear the 23 mantissa bits; with E the resulting exponent field,
       e = E - 127 - emax_elem. (amax rounded half-up to m mantissa bits, then floor.)
    6. ``rceil`` (cuBLAS): d = fp32(amax * fp32(1/max_elem)) under
       ``mx_rceil_descale="mul_reciprocal"``, d = fp32(amax / max_elem) under ``"divide"``;
       e = ceil(log2 d) (e = -127 if d == 0; 127 if d is infinite).
    7. Clamp e to [-127, 127].
    """
    amax = F32(amax)
    if math.isnan(amax):
        return None
    if math.isinf(amax):
        if policies["mx_nonfinite_block"] == "nan_scale":
            return None
        exact_amax = Fraction(2) ** 128
    else:
        exact_amax = Fraction(float(amax))
    if amax == 0:
        return -127
    emax = element.emax
    if rule == "floor":
        e = floor_log2(exact_amax) - emax
    elif rule == "ceil":
        e = ceil_log2(exact_amax) - emax
    elif rule == "even":
        bits = float32_bits(amax)  # +Inf: exponent field 255, mantissa 0 (read as 2^128)
        rounded = (bits + (1 << (22 - element.mantissa_bits))) & 0x7F800000
        e = (rounded >> 23) - 127 - emax
    elif rule == "rceil":
        max_elem = F32(element.max)
        if policies["mx_rceil_descale"] == "mul_reciprocal":
            rcp = _f32_op(lambda: F32(1.0) / max_elem)
            d = _f32_op(lambda: amax * rcp)
        else:
            d = _f32_op(lambda: amax / max_elem)
        if d == 0:
            e = -127
        elif math.isinf(d):
            e = 127
        else:
            e = ceil_log2(Fraction(float(d)))
    else:
        raise ValueError(f"scale_rule: {rule!r} is not one of 'floor', 'ceil', 'rceil', 'even'")
    return max(-127, min(127, e))


def mx_scale_code(e: int | None) -> int:
    """E8M0 code of X = 2^e: e + 127; 0xFF (NaN) for None."""
    return NAN_SCALE_CODE_E8M0 if e is None else e + 127


def mx_scaled_element(x, e: int | None, rule: str, policies) -> np.float32:
    """The float32 value an element is rounded from.

    1. NaN scale (e is None): fp32(x * 0) -- +-0 for finite x (by x's sign), NaN for NaN
       and +-Inf. Except ``mx_element_scaling="torchao"`` with ``rceil``: torchao multiplies
       the block by its NaN descale, so every element is NaN (``fp32(x * NaN)``).
    2. ``mx_element_scaling="exact"`` (OCP): fp32(x * 2^-e) (2^-e is exact in float32 for
       every e in [-127, 127]; the product rounds only when it is an fp32 subnormal).
    3. ``"torchao"``: floor/ceil/even: fp32(x / max(2^e, 2^-126)) (torchao clamps the fp32
       scale to the smallest normal before dividing); rceil: fp32(x * r) with r = 1.0 for
       scale code 0 and r = 2^-e otherwise (TransformerEngine's ``exp2f_rcp``).
    4. A NaN result takes the sign bit of x. Only step 1 makes NaNs (a NaN x always has a
       NaN scale; steps 2-3 map +-Inf to +-Inf), and there ``Inf * 0`` is an invalid
       operation (and ``x * NaN`` a propagation) whose NaN sign IEEE 754 leaves open (x86 gives -NaN for both signs, ARM and
       CUDA +NaN; CUDA also drops a NaN's sign in ``NaN * 0``). The sign is a code bit of
       elements with NaN (E4M3, E5M2); taking x's makes the codes independent of the
       platform and keeps ``quantize(-x) == -quantize(x)``.
    """
    x = F32(x)
    if e is None:
        nan_descale = policies["mx_element_scaling"] == "torchao" and rule == "rceil"
        y = _f32_op(lambda: x * (F32(np.nan) if nan_descale else F32(0.0)))
    elif policies["mx_element_scaling"] == "exact":
        y = _f32_op(lambda: x * F32(2.0 ** -e))
    elif rule == "rceil":
        r = F32(1.0) if e == -127 else F32(2.0 ** -e)
        y = _f32_op(lambda: x * r)
    else:
        divisor = F32(2.0 ** max(e, -126))
        y = _f32_op(lambda: x / divisor)
    return np.copysign(F32(np.nan), x) if np.isnan(y) else y


def quantize_block_mx(block: Sequence, scheme: Scheme, rounding: str = "rne", rbits: Sequence | None = None,
                      sr_bits: int = 8) -> tuple[list[int], int]:
    """Quantize one MX block: (element codes, E8M0 scale code).

    1. amax = max |x_i| over the block (float32 values, step 0).
    2. e = :func:`mx_scale_exponent` (amax, element, scale rule, profile policies).
    3. Scale code = :func:`mx_scale_code` (e).
    4. For each element: y_i = :func:`mx_scaled_element` (x_i, e, ...), and
       P_i = ``encode_scalar(y_i, element, rounding, r=rbits[i], overflow="saturate")``
       (NaN y_i -> the element's NaN with x_i's sign bit, or +0 for a format without NaN).
    """
    policies = scheme.policies
    values = [F32(v) for v in block]
    e = mx_scale_exponent(block_amax(values), scheme.element, scheme.scale_rule, policies)
    nan = element_nan_policy(scheme.element)
    codes = []
    for i, v in enumerate(values):
        y = mx_scaled_element(v, e, scheme.scale_rule, policies)
        r = None if rbits is None else int(rbits[i])
        codes.append(encode_scalar(y, scheme.element, rounding, r=r, sr_bits=sr_bits, overflow="saturate", nan=nan))
    return codes, mx_scale_code(e)


def dequantize_mx_scalar(code: int, scale_code: int, element: Format) -> np.float32:
    """fp32(P * 2^(scale_code - 127)); NaN for scale code 0xFF."""
    if scale_code == NAN_SCALE_CODE_E8M0:
        return F32(np.nan)
    p = F32(element.values[code])
    return _f32_op(lambda: p * F32(2.0 ** (scale_code - 127)))


# =====================================================================================
# Two-level (NVFP4 structure): one scale per block + one FP32 scale per tensor
# =====================================================================================

@dataclasses.dataclass(frozen=True)
class TensorScale:
    """Per-tensor quantities of a two-level scheme.

    ``amax``: the global amax (float32). ``encode``: TE's S_enc, or torchao's fp32(1/pts).
    ``decode``: the decode multiplier stored with the tensor: TE's S_dec = fp32(1/S_enc),
    or torchao's per-tensor scale pts.
    """

    amax: np.float32
    encode: np.float32
    decode: np.float32


def two_level_tensor_scale(global_amax, scheme: Scheme) -> TensorScale:
    """The per-tensor scale.

    ``nv_scale_chain="te"`` (Emax = ``scheme.scale_bound``, max = ``scheme.max_elem``):

    1. If global_amax is 0 under ``nv_zero_global_amax="zero"`` (fouroversix): S_enc = +Inf,
       S_dec = 0 (fp32(1 / (Emax * max / 0))); every block scale is then 0.
    2. Else if global_amax is 0, NaN or +-Inf: S_enc = 1.
    3. Otherwise S_enc = fp32(fp32(Emax * max) / global_amax); S_enc = min(S_enc, FLT_MAX).
    4. S_dec = fp32(1 / S_enc).

    ``nv_scale_chain="torchao"``:

    1. pts = fp32(global_amax / fp32(Emax * max)) (0 for an all-zero tensor).
    2. encode = fp32(1 / pts) (+Inf for pts = 0), decode = pts.
    """
    amax = F32(global_amax)
    emax, max_elem = F32(scheme.scale_bound), F32(scheme.max_elem)
    if scheme.policies["nv_scale_chain"] == "te":
        if amax == 0 and scheme.policies["nv_zero_global_amax"] == "zero":
            return TensorScale(amax, F32(np.inf), F32(0.0))
        if amax == 0 or not math.isfinite(amax):
            s_enc = F32(1.0)
        else:
            num = _f32_op(lambda: emax * max_elem)
            s_enc = _f32_op(lambda: num / amax)
            if s_enc > FLT_MAX:
                s_enc = FLT_MAX
        s_dec = _f32_op(lambda: F32(1.0) / s_enc)
        return TensorScale(amax, s_enc, s_dec)
    denom = _f32_op(lambda: emax * max_elem)
    pts = _f32_op(lambda: amax / denom)
    return TensorScale(amax, _f32_op(lambda: F32(1.0) / pts), pts)


def _min_flt_max(v: np.float32) -> np.float32:
    """min(v, FLT_MAX) with NaN kept (``torch.min`` propagates NaN)."""
    return FLT_MAX if v > FLT_MAX else v


def two_level_block_scale(vec_max, ts: TensorScale, scheme: Scheme, candidate: float = 1.0) -> int:
    """Scale code of one block (or tile) with amax ``vec_max``.

    ``nv_scale_chain="te"``, scale rule ``amax``:

    0. S_enc = +Inf (an all-zero tensor under ``nv_zero_global_amax="zero"``): s = 0.
    1. ``nv_block_scale_op="mul_reciprocal"`` (TE): mult = fp32(S_enc * fp32(1/max)) (per
       tensor: the reciprocal folded in once); ``"divide"`` (fouroversix): step 2 is s =
       fp32(fp32(vec_max / max) * S_enc).
    2. s = fp32(vec_max * mult); s = min(s, FLT_MAX).
    3. Under ``nv_block_scale_floor="e4m3_min_normal"``: s = max(s, floor), floor = the scale
       format's smallest normal (2^-6 for UE4M3; NaN stays NaN; TE's profile sets "none").
       s = min(s, scale_max_value) (448 for UE4M3; NaN stays NaN), then the scale code is
       ``encode_scalar(s, scale, "rne", overflow="saturate")`` (UE4M3 SATFINITE; NaN -> 0x7F).

    TE 4over6 candidates (``candidate`` = 1.0 for map-to-6, 1.5 for map-to-4):

    1. base = fp32(fp32(vec_max / max) * S_enc) (a true division here).
    2. s = base for map-to-6; s = fp32(base * 1.5) for map-to-4; then step 3 above.

    ``nv_scale_chain="torchao"``:

    1. b = fp32(vec_max / max).
    2. s = fp32(b / pts).
    3. s = clamp(s, floor, scale_max_value) with floor = the scale format's smallest normal
       (2^-6 for UE4M3) under ``nv_block_scale_floor="e4m3_min_normal"``; NaN stays NaN.
    4. Scale code = ``encode_scalar(s, scale, "rne", overflow="saturate")``.
    """
    vec_max = F32(vec_max)
    max_elem = F32(scheme.max_elem)
    scale_top = F32(scheme.scale.max)
    if scheme.policies["nv_scale_chain"] == "te":
        if math.isinf(ts.encode):
            s = F32(0.0)
        elif scheme.scale_rule == "4over6":
            base = _f32_op(lambda: _f32_op(lambda: vec_max / max_elem) * ts.encode)
            s = base if candidate == 1.0 else _f32_op(lambda: base * F32(candidate))
        elif scheme.policies["nv_block_scale_op"] == "divide":
            s = _f32_op(lambda: _f32_op(lambda: vec_max / max_elem) * ts.encode)
        else:
            rcp = _f32_op(lambda: F32(1.0) / max_elem)
            mult = _f32_op(lambda: ts.encode * rcp)
            s = _min_flt_max(_f32_op(lambda: vec_max * mult))
    else:
        b = _f32_op(lambda: vec_max / max_elem)
        s = _f32_op(lambda: b / ts.decode)
    if scheme.policies["nv_block_scale_floor"] == "e4m3_min_normal":
        floor = F32(scheme.scale.min_normal if scheme.scale.min_normal is not None else scheme.scale.min_positive)
        if s < floor:
            s = floor
    if s > scale_top:
        s = scale_top
    return encode_scalar(s, scheme.scale, "rne", overflow="saturate")


def two_level_element_multiplier(scale_code: int, ts: TensorScale, scheme: Scheme) -> np.float32:
    """The float32 multiplier applied to every element of a block.

    ``te``: S_enc_b = min(fp32(1 / fp32(s * S_dec)), FLT_MAX), s = the decoded block scale
    (a zero scale gives 1/0 = +Inf -> FLT_MAX, or 0 under ``nv_zero_scale_elements="zero"``;
    a NaN scale gives NaN).
    ``torchao``: r = fp32(fp32(1/pts) / s).
    """
    s = F32(scheme.scale.values[scale_code])
    if scheme.policies["nv_scale_chain"] == "te":
        if s == 0 and scheme.policies["nv_zero_scale_elements"] == "zero":
            return F32(0.0)
        denom = _f32_op(lambda: s * ts.decode)
        return _min_flt_max(_f32_op(lambda: F32(1.0) / denom))
    return _f32_op(lambda: ts.encode / s)


def two_level_element_code(x, multiplier, scheme: Scheme, rounding: str, r: int | None, sr_bits: int) -> int:
    """One element: y = fp32(x * multiplier); y = clamp(y, -max, max) (NaN stays NaN);
    under ``nv_negative_zero="positive"`` y = fp32(y + 0) (an exact -0.0 becomes +0.0, as
    TE's reference ``cast_to_fp4x2`` maps it to code 0); then
    ``encode_scalar(y, element, rounding, r, overflow="saturate")`` with NaN -> +0 (or the
    element's NaN)."""
    y = _f32_op(lambda: F32(x) * multiplier)
    top = F32(scheme.max_elem)
    if y > top:
        y = top
    elif y < -top:
        y = -top
    if scheme.policies["nv_negative_zero"] == "positive":
        y = _f32_op(lambda: y + F32(0.0))
    return encode_scalar(y, scheme.element, rounding, r=r, sr_bits=sr_bits, overflow="saturate",
                         nan=element_nan_policy(scheme.element))


def _rows_codes(rows, multiplier, scheme, rounding, rbits_rows, sr_bits):
    out = []
    for i, row in enumerate(rows):
        rr = None if rbits_rows is None else rbits_rows[i]
        out.append([two_level_element_code(v, multiplier, scheme, rounding, None if rr is None else int(rr[j]), sr_bits)
                    for j, v in enumerate(row)])
    return out


def torch_cpu_row_sum(terms: Sequence) -> np.float32:
    """The float32 sum of a contiguous row of n terms (n a multiple of 8, n < 512) in the order
    of ``torch.sum`` on the CPU (``vectorized_inner_sum`` with eight float lanes and four
    interleaved vector accumulators). fouroversix's block errors add so (16 terms: IF4 and
    4over6 blocks; 256 terms: IF4 16 x 16 tiles).

    1. Lane l of vector i is t_(8i+l), i = 0 .. V-1 with V = n / 8; S = V // 4.
    2. Four vector accumulators from 0: A_k = fp32(...fp32(0 + v_k) + v_(4+k) ... + v_(4(S-1)+k)), k = 0..3.
    3. P = A_0, then P = fp32(P + v_i) for i = 4S .. V-1, then P = fp32(fp32(fp32(P + A_1) + A_2) + A_3).
    4. e = fp32(...fp32(fp32(0 + P_0) + P_1) ... + P_7).

    For n = 16 (S = 0) this is p_j = fp32(t_j + t_(j+8)), then e = 0 + p_0 + ... + p_7 in order.
    """
    t = [F32(v) for v in terms]
    n = len(t)
    if n % 8 or not 0 < n < 512:
        raise ValueError(f"terms: torch's CPU row order is modelled for 8 <= n < 512, n a multiple of 8, not {n}")
    v = [t[8 * i:8 * i + 8] for i in range(n // 8)]
    s = len(v) // 4

    def add(a, b):
        return [_f32_op(lambda: x + y) for x, y in zip(a, b)]

    acc = [[F32(0.0)] * 8 for _ in range(4)]
    for i in range(s):
        acc = [add(acc[k], v[4 * i + k]) for k in range(4)]
    p = acc[0]
    for i in range(4 * s, len(v)):
        p = add(p, v[i])
    for k in range(1, 4):
        p = add(p, acc[k])
    e = F32(0.0)
    for lane in p:
        e = _f32_op(lambda: e + lane)
    return e


def four_over_six_row_error(row, codes, scale_code, ts: TensorScale, scheme: Scheme) -> np.float32:
    """The 4over6 error of one 16-element row, in float32.

    For idx = 0 .. 15: val = fp32(fp32(fp32(q * s) * global_amax) / fp32(6 * Emax));
    diff = fp32(val - x); term = |diff| (``mae``, ``abs_max``) or fp32(diff * diff) (``mse``).
    ``abs_max``: the largest term. ``mae``, ``mse``: under ``nv_4over6_error_sum="sequential"``
    (TE) err = fp32(err + term) in element order from 0; under ``"torch_cpu"`` (fouroversix)
    the terms are added as :func:`torch_cpu_row_sum` does.
    """
    s = F32(scheme.scale.values[scale_code])
    denom = _f32_op(lambda: F32(scheme.max_elem) * F32(scheme.scale_bound))
    mode = scheme.error_mode or "mae"
    terms = []
    for x, q in zip(row, codes):
        qv = F32(scheme.element.values[q])
        val = _f32_op(lambda: _f32_op(lambda: _f32_op(lambda: qv * s) * ts.amax) / denom)
        diff = _f32_op(lambda: val - F32(x))
        terms.append(_f32_op(lambda: diff * diff) if mode == "mse" else abs(diff))
    if mode == "abs_max":
        return max(terms)
    if scheme.policies["nv_4over6_error_sum"] == "torch_cpu":
        return torch_cpu_row_sum(terms)
    err = F32(0.0)
    for term in terms:
        err = _f32_op(lambda: err + term)
    return err


def tree_sum_16(errors: Sequence) -> np.float32:
    """Sum 16 row errors as TE's CUDA warp reduction: [0:8]+[8:16], [0:4]+[4:8], [0:2]+[2:4], [0]+[1]."""
    rows = [F32(e) for e in errors]
    while len(rows) > 1:
        half = len(rows) // 2
        rows = [_f32_op(lambda a=a, b=b: a + b) for a, b in zip(rows[:half], rows[half:])]
    return rows[0]


def quantize_tile_two_level(rows: Sequence[Sequence], ts: TensorScale, scheme: Scheme, rounding: str = "rne",
                            rbits_rows=None, sr_bits: int = 8) -> tuple[list[list[int]], int]:
    """Quantize one block (a single row) or one r x k tile: (codes per row, scale code).

    1. vec_max = max |x| over the whole tile (NaN if any element is NaN).
    2. Scale rule ``amax``: scale code = :func:`two_level_block_scale` (vec_max);
       multiplier = :func:`two_level_element_multiplier`; every element ->
       :func:`two_level_element_code`.
    3. Scale rule ``4over6`` (TE): build both candidates (map-to-6: candidate 1.0, map-to-4:
       candidate 1.5) as in step 2; error per row = :func:`four_over_six_row_error`; for a
       16 x 16 tile the 16 row errors are summed by :func:`tree_sum_16`. Choose map-to-4 iff
       its error is strictly smaller (ties and NaN choose map-to-6).
    4. Every row of the tile gets the tile's scale code.
    """
    rows = [[F32(v) for v in row] for row in rows]
    vec_max = block_amax([v for row in rows for v in row])
    if scheme.scale_rule != "4over6":
        code = two_level_block_scale(vec_max, ts, scheme)
        mult = two_level_element_multiplier(code, ts, scheme)
        return _rows_codes(rows, mult, scheme, rounding, rbits_rows, sr_bits), code
    results = []
    for candidate in (1.0, 1.5):
        code = two_level_block_scale(vec_max, ts, scheme, candidate)
        mult = two_level_element_multiplier(code, ts, scheme)
        codes = _rows_codes(rows, mult, scheme, rounding, rbits_rows, sr_bits)
        errs = [four_over_six_row_error(row, c, code, ts, scheme) for row, c in zip(rows, codes)]
        err = errs[0] if len(errs) == 1 else tree_sum_16(errs)
        results.append((codes, code, err))
    (codes6, code6, err6), (codes4, code4, err4) = results
    if err4 < err6:
        return codes4, code4
    return codes6, code6


def dequantize_two_level_scalar(code: int, scale_code: int, global_scale, scheme: Scheme) -> np.float32:
    """``nv_dequant_order="(q*s)*g"`` (TE): fp32(fp32(q * s) * S_dec);
    ``"q*(g*s)"`` (torchao): fp32(q * fp32(pts * s))."""
    q = F32(scheme.element.values[code])
    s = F32(scheme.scale.values[scale_code])
    g = F32(global_scale)
    if scheme.policies["nv_dequant_order"] == "(q*s)*g":
        return _f32_op(lambda: _f32_op(lambda: q * s) * g)
    return _f32_op(lambda: q * _f32_op(lambda: g * s))


# =====================================================================================
# Whole tensors: input preparation (step 0) and the slow reference quantizer
# =====================================================================================

#: Input dtypes every quantize accepts (numpy: ml_dtypes' bfloat16; torch: torch.bfloat16).
INPUT_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class InputLayout:
    """Where x's values go before blocking (step 0 of every scheme), from x's shape alone.

    ``shape``: x's shape; ``axis``: its blocked axis (non-negative); ``moved``: the shape
    with ``axis`` moved last; ``widths``: zeros added at the end of each moved axis (the
    blocked axis, and for r x k tiles the one before it); ``padded``: the moved, padded
    shape the blocks are cut from.
    """

    shape: tuple[int, ...]
    axis: int
    moved: tuple[int, ...]
    widths: tuple[int, ...]

    @property
    def padded(self) -> tuple[int, ...]:
        return tuple(n + w for n, w in zip(self.moved, self.widths))

    @property
    def is_padded(self) -> bool:
        return any(self.widths)


def input_layout(shape, dtype_name: str, scheme: Scheme, *, axis=-1, rounding: str = "rne", rbits_given=False,
                 sr_bits: int = 8, pad: bool = False) -> InputLayout:
    """Steps 1, 2, 4 and 5 of :func:`prepare_input` on x's shape and dtype name alone (the
    checks every array kind shares; the values of rbits are read by the caller). ValueError
    or TypeError naming the argument."""
    from .rounding import check_rbits, check_rounding

    if dtype_name.removeprefix("torch.") not in INPUT_DTYPES:
        raise TypeError(f"x: dtype {dtype_name} is not supported; pass float16, bfloat16, float32 or float64 values")
    shape = tuple(int(n) for n in shape)
    if not shape:
        raise ValueError("x: a 0-d value has no axis to block along; pass at least one dimension")
    ax = check_axis(axis, len(shape))
    mode = check_rounding(rounding)
    if not isinstance(pad, bool):
        raise ValueError(f"pad: expected True or False, got {pad!r}")
    if mode == "sr" and not rbits_given:
        check_rbits(None, shape, sr_bits)  # names sr_bits, or the missing rbits
    if mode != "sr" and rbits_given:
        raise ValueError(f"rbits: only used with rounding='sr', not {mode!r}")
    moved = shape[:ax] + shape[ax + 1:] + (shape[ax],)
    widths = [0] * len(moved)
    k = scheme.block_size
    n = moved[-1]
    if n % k:
        if not pad:
            raise ValueError(f"x: length {n} along axis {axis} is not a multiple of the {scheme.name} block "
                             f"size {k}; pass pad=True to pad with zeros to {-(-n // k) * k}")
        widths[-1] = -(-n // k) * k - n
    if scheme.is_2d:
        if len(moved) < 2:
            raise ValueError(f"x: {scheme.name} uses {scheme.tile_rows}x{k} tiles over the last two axes; "
                             f"x has one dimension")
        rows, rt = moved[-2], scheme.tile_rows
        if rows % rt:
            if not pad:
                raise ValueError(f"x: {rows} rows (the axis before axis {axis}) is not a multiple of the "
                                 f"{scheme.name} tile height {rt}; pass pad=True to pad with zeros")
            widths[-2] = -(-rows // rt) * rt - rows
    return InputLayout(shape, ax, moved, tuple(widths))


@dataclasses.dataclass(frozen=True)
class PreparedInput:
    """x ready for blocking: float32 (or as given, float16 or bfloat16, with ``keep_16bit``),
    the blocked axis last, padded to whole blocks.

    ``rbits``: the random bits moved and padded the same way (None unless ``rounding="sr"``).
    ``axis``: the blocked axis of the original x (non-negative). ``shape``: x's shape.
    """

    x: np.ndarray
    rbits: np.ndarray | None
    axis: int
    shape: tuple[int, ...]


def _as_float_input(x) -> np.ndarray:
    import ml_dtypes

    arr = np.asarray(x)
    if arr.dtype in (np.float16, np.float32, np.float64) or arr.dtype == ml_dtypes.bfloat16:
        return arr
    raise TypeError(f"x: dtype {arr.dtype} is not supported; pass float16, bfloat16 (ml_dtypes), float32 "
                    f"or float64 values")


def prepare_arrays(arr: np.ndarray, layout: InputLayout, rbits=None, sr_bits: int = 8, *,
                   keep_16bit: bool = False) -> PreparedInput:
    """Steps 2 (the values of rbits) and 3-5 of :func:`prepare_input` for a checked
    ``layout`` of the float array ``arr`` (``keep_16bit``: see :func:`prepare_input`)."""
    from .rounding import check_rbits

    ax = layout.axis
    r = None
    if rbits is not None:
        r = np.moveaxis(np.asarray(check_rbits(rbits, arr.shape, sr_bits)), ax, -1)
    keep = keep_16bit and arr.dtype.itemsize == 2
    with np.errstate(over="ignore"):
        x32 = np.moveaxis(arr if keep else arr.astype(np.float32, copy=False), ax, -1)
    if layout.is_padded:
        widths = [(0, w) for w in layout.widths]
        x32 = np.pad(x32, widths)
        if r is not None:
            r = np.pad(r, widths)
    return PreparedInput(np.ascontiguousarray(x32), None if r is None else np.ascontiguousarray(r), ax, arr.shape)


def prepare_input(x, scheme: Scheme, *, axis=-1, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                  pad: bool = False, keep_16bit: bool = False) -> PreparedInput:
    """Step 0 of every scheme: validate, convert to float32, move the axis, pad.

    1. x must be a float16, bfloat16, float32 or float64 array with at least one dimension
       (two for r x k tiles); ``axis`` must name one of its axes.
    2. ``rounding`` must be one of :data:`fp4spec.rounding.ROUNDING_MODES`; ``rbits`` is
       required with ``"sr"`` (integers in [0, 2^sr_bits) broadcastable to x: one random
       value per element) and refused otherwise.
    3. x is converted to float32: exactly for float16/bfloat16, with RNE for float64.
    4. ``axis`` is moved to the end (the blocks run along it); for r x k tiles the tiles
       cover the (moved) last two axes.
    5. The length along the axis must be a multiple of the block size k, and for tiles the
       length of the second-to-last axis a multiple of r -- else ValueError, unless
       ``pad=True``: then x is padded at the end with +0.0 (random bits with 0) to whole
       blocks. Padding never changes an amax.

    ``keep_16bit=True`` skips step 3 for float16 and bfloat16 input: every value of theirs is
    a float32 value, so the result is the same, and the vectorized emulator widens the blocks
    chunk by chunk instead of the whole tensor at once.

    The checks that need only x's shape and dtype are :func:`input_layout` (shared with the
    torch tensors of the backends); the values are converted by :func:`prepare_arrays`.
    """
    arr = _as_float_input(x)
    layout = input_layout(arr.shape, arr.dtype.name, scheme, axis=axis, rounding=rounding,
                          rbits_given=rbits is not None, sr_bits=sr_bits, pad=pad)
    return prepare_arrays(arr, layout, rbits, sr_bits, keep_16bit=keep_16bit)


def quantize_reference(x, scheme: Scheme, *, axis=-1, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                       pad: bool = False):
    """The slow reference quantizer: :func:`prepare_input`, then one block (or tile) at a time.

    MX: :func:`quantize_block_mx` per block. Two-level: the tensor scale from the amax of all
    of x (:func:`two_level_tensor_scale`), then :func:`quantize_tile_two_level` per block
    (1D) or per r x k tile (2D). Returns a :class:`fp4spec.quantized.QuantizedTensor`.
    (HiF4 and IF4 have their own: :mod:`fp4spec.hif4`, :func:`fp4spec.if4.quantize_reference`.)
    """
    from .quantized import QuantizedTensor

    if scheme.structure in ("hif4", "if4"):
        raise NotImplementedError(f"quantize_reference: {scheme.structure.upper()} has its own reference in "
                                  f"fp4spec.{scheme.structure}")
    prep = prepare_input(x, scheme, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, pad=pad)
    xp, rp = prep.x, prep.rbits
    k = scheme.block_size
    nb = xp.shape[-1] // k
    codes = np.zeros(xp.shape, np.uint8)
    scales = np.zeros(xp.shape[:-1] + (nb,), np.uint8)
    global_scale = None
    if scheme.structure == "mx":
        for idx in np.ndindex(*xp.shape[:-1]):
            for b in range(nb):
                sl = idx + (slice(b * k, (b + 1) * k),)
                c, s = quantize_block_mx(list(xp[sl]), scheme, rounding,
                                         None if rp is None else list(rp[sl]), sr_bits)
                codes[sl] = c
                scales[idx + (b,)] = s
    else:
        ts = two_level_tensor_scale(block_amax(xp.ravel().tolist()), scheme)
        global_scale = ts.decode
        rt = scheme.tile_rows
        lead = xp.shape[:-2] if scheme.is_2d else xp.shape[:-1]
        row_groups = range(0, xp.shape[-2], rt) if scheme.is_2d else [None]
        for idx in np.ndindex(*lead):
            for r0 in row_groups:
                for b in range(nb):
                    cols = slice(b * k, (b + 1) * k)
                    rows_idx = [idx] if r0 is None else [idx + (r,) for r in range(r0, r0 + rt)]
                    rows = [list(xp[ri + (cols,)]) for ri in rows_idx]
                    rb = None if rp is None else [list(rp[ri + (cols,)]) for ri in rows_idx]
                    c, s = quantize_tile_two_level(rows, ts, scheme, rounding, rb, sr_bits)
                    for ri, crow in zip(rows_idx, c):
                        codes[ri + (cols,)] = crow
                        scales[ri + (b,)] = s
    return QuantizedTensor.from_moved(codes, scales, global_scale, scheme, prep.axis, prep.shape)


def dequantize_reference(q) -> np.ndarray:
    """The slow reference dequantizer: :func:`dequantize_mx_scalar` or
    :func:`dequantize_two_level_scalar` element by element; float32 in x's shape."""
    scheme = q.scheme
    if scheme.structure in ("hif4", "if4"):
        raise NotImplementedError(f"dequantize_reference: {scheme.structure.upper()} has its own reference in "
                                  f"fp4spec.{scheme.structure}")
    codes = np.moveaxis(q.codes, q.axis, -1)
    scales = np.moveaxis(q.scales, q.axis, -1)
    k = scheme.block_size
    out = np.zeros(codes.shape, np.float32)
    for idx in np.ndindex(*codes.shape):
        sc = int(scales[idx[:-1] + (idx[-1] // k,)])
        if scheme.structure == "mx":
            out[idx] = dequantize_mx_scalar(int(codes[idx]), sc, scheme.element)
        else:
            out[idx] = dequantize_two_level_scalar(int(codes[idx]), sc, q.global_scale, scheme)
    out = np.moveaxis(out, -1, q.axis)
    return out[tuple(slice(0, n) for n in q.shape)]


__all__ = [
    "FLT_MAX",
    "INPUT_DTYPES",
    "InputLayout",
    "PreparedInput",
    "dequantize_reference",
    "input_layout",
    "prepare_arrays",
    "prepare_input",
    "quantize_reference",
    "TensorScale",
    "block_amax",
    "ceil_log2",
    "dequantize_mx_scalar",
    "dequantize_two_level_scalar",
    "four_over_six_row_error",
    "mx_scale_code",
    "mx_scale_exponent",
    "mx_scaled_element",
    "quantize_block_mx",
    "quantize_tile_two_level",
    "tree_sum_16",
    "two_level_block_scale",
    "two_level_element_code",
    "two_level_element_multiplier",
    "two_level_tensor_scale",
]
