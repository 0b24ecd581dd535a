"""IF4 block quantization: the normative scalar algorithm, one block (1 x 16 or 16 x 16) at a time.

IF4 (arXiv 2603.28765, MIT's fouroversix package) stores each block of 16 values either as
E2M1 elements or as a uniform INT4 grid, chosen per block, with one E4M3 block scale whose
sign bit -- unused by NVFP4 -- flags the INT4 blocks, plus one FP32 scale per tensor (the
NVFP4 structure). The decoded value of an element is::

    FP block:   e2m1(code)            * s * S_dec
    INT block:  int4(code) * 6/7      * s * S_dec      (int4 in -7..7, two's complement)

where s is the E4M3 value of the scale byte's low 7 bits and S_dec the tensor's decode
scale. The INT4 grid is stretched so that its top, 7 * 6/7 = 6, meets E2M1's top: both
branches map the block amax to 6 under the same scale, and the block takes the branch whose
dequantized values are closer to the input (the scale rule: ``mse``, ``mae`` or ``abs_max``).

This module states fouroversix's PyTorch reference (``quantize_to_fp4`` with
``DataType.if4``: ``quantize_to_nvfp4`` with ``ScaleRule.static_6``, then
``select_intfloat``; ``fouroversix/quantize/pytorch/reference.py`` in fouroversix 1.0.5,
unchanged at mit-han-lab/fouroversix@dadfad6) as numbered float32 steps, each
``fp32(...)`` one IEEE binary32 operation with RNE, in that code's order. It is slow and
literal; :mod:`fp4spec.emulator.if4` is the fast version, tested equal to it bit for bit.

Decisions where fouroversix's reference is undefined or wrong (the algorithm is otherwise
unchanged; docs/divergences.md lists the smallest inputs):

* **Finite input only.** A NaN or +-Inf anywhere makes fouroversix's tensor scale NaN or 0
  and its codes meaningless: ValueError here.
* **Tiny tensors.** For a tensor amax below 2688 / FLT_MAX (about 7.9e-36) fouroversix's
  ``2688 / amax`` overflows to +Inf and every block scale becomes NaN; here S_enc and the
  element multipliers are clamped to FLT_MAX (TransformerEngine's clamps).
* **Element overflow.** fouroversix rounds scaled values by binade without clamping, so a
  block whose E4M3 scale rounded down by 7/6 or more (only subnormal scales can) rounds
  values >= 7 to 8 and packs 8 as code ``0x8`` (-0). Here the E2M1 branch saturates to +-6,
  as NVFP4 does.
* **16 x 16 tiles** (``if4_2d``) are fouroversix's ``block_scale_2d=True`` for IF4: each tile of
  16 rows x 16 columns is one block of 256 values, taken in row-major order (its
  ``reshape(-1, 16, C / 16, 16).permute(0, 2, 1, 3)``): one amax, one scale byte, one E2M1/INT4
  choice whose error sums 256 terms in torch's CPU order (:func:`error_sum`). Every row of
  the tile stores the tile's scale byte (as ``nvfp4_2d``). Rows must be a multiple of 16
  (fouroversix asserts it; here ``pad=True`` pads with zero rows).
* **Rounding modes.** fouroversix rounds to nearest (or adds ``torch.rand`` noise). Here
  both branches round with the same mode, every mode of :data:`fp4spec.ROUNDING_MODES`;
  under ``"sr"`` element i of both candidates uses the same random value ``rbits[i]``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

import numpy as np

from .block_schemes import Scheme
from .number_formats import UniformFormat, get_format
from .elements import encode_scalar

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)

#: IF4 blocks hold 16 elements along the row.
BLOCK = 16
#: Rows of an ``if4_2d`` tile (one block of 16 x 16 = 256 values).
TILE_ROWS = 16
#: The value the block amax maps to (E2M1's max; the INT4 grid's top 7 * 6/7).
FP_MAX = F32(6.0)
#: The largest E4M3 block scale (``Emax``): S_enc = fp32(Emax * FP_MAX / amax).
SCALE_MAX = F32(448.0)
#: fp32(7/6): multiplies a scaled value into INT4 units (fouroversix ``IF4_INT_EXPANSION_FACTOR_RCP``).
INT_UP = F32(7.0 / 6.0)
#: fp32(6/7): one INT4 step in E2M1 units (fouroversix ``IF4_INT_EXPANSION_FACTOR``).
INT_DOWN = F32(6.0 / 7.0)
#: The scale byte's sign bit: set for INT4 blocks.
INT_FLAG = 0x80
#: The selection rules (fouroversix ``ScaleRule`` values that are not static).
SELECTION_RULES = ("mse", "mae", "abs_max")

E2M1 = get_format("e2m1")
INT4 = get_format("int4_sym")
UE4M3 = get_format("ue4m3")
#: The element values an IF4 operand brings into a GEMM datapath (E2M1 values and the INT4
#: integers -7..7; the INT4 blocks' 6/7 is in :func:`block_multiplier`), within the grid
#: k * 0.5, |k| <= 15 -- a superset that bounds their exponents and significand bits.
GEMM_ELEMENTS = UniformFormat("if4_gemm_elements", 5, 0.5)


def _f32(fn) -> np.float32:
    """One float32 operation, IEEE special results, no warnings."""
    with np.errstate(all="ignore"):
        return F32(fn())


def check_finite(x: np.ndarray) -> None:
    """ValueError naming the first non-finite input (IF4 is defined for finite input only)."""
    bad = ~np.isfinite(x)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"x: IF4 is defined for finite input; x{list(i)} is {float(x[i])} (the blocked axis last)")


# =====================================================================================
# The tensor scale and the block scale (the NVFP4 chain of fouroversix)
# =====================================================================================

def tensor_scales(global_amax) -> tuple[np.float32, np.float32, np.float32]:
    """(amax, S_enc, S_dec) of a tensor whose amax is ``global_amax`` (finite, >= 0).

    1. amax == 0: S_enc = +Inf, S_dec = 0 (fouroversix: ``1 / (2688 / 0)``); step 5 of
       :func:`block_scale_code` then gives every block the scale 0.
    2. Otherwise S_enc = fp32(2688 / amax) (2688 = 448 * 6, exact), clamped to FLT_MAX.
    3. S_dec = fp32(1 / S_enc).
    """
    amax = F32(global_amax)
    if amax == 0:
        return amax, F32(np.inf), F32(0.0)
    s_enc = _f32(lambda: (SCALE_MAX * FP_MAX) / amax)
    s_enc = min(s_enc, FLT_MAX)
    return amax, s_enc, _f32(lambda: F32(1.0) / s_enc)


def block_scale_code(vec_max, s_enc) -> int:
    """UE4M3 code (0x00..0x7E) of a block with amax ``vec_max``.

    4. s = fp32(fp32(vec_max / 6) * S_enc).
    5. S_enc = +Inf (an all-zero tensor): code 0.
    6. Otherwise the code is the E4M3 cast of s, RNE (s <= 448 * (1 + 2^-22), which rounds
       to 448 at most; ``torch.Tensor.to(torch.float8_e4m3fn)``).
    """
    if math.isinf(s_enc):
        return 0
    s = _f32(lambda: _f32(lambda: F32(vec_max) / FP_MAX) * s_enc)
    return encode_scalar(s, UE4M3, "rne", overflow="saturate")


def element_multiplier(scale_code: int, s_dec) -> np.float32:
    """The float32 multiplier of every element of a block.

    7. Scale value s = ue4m3(scale_code). s == 0: the multiplier is 0 (fouroversix sets the
       block's scaled values to 0). Otherwise r = min(fp32(1 / fp32(S_dec * s)), FLT_MAX)
       (the clamp acts only for tensor amaxes below about 1.7e-38, where fouroversix's
       scales are already NaN).
    """
    s = F32(UE4M3.values[scale_code])
    if s == 0:
        return F32(0.0)
    return min(_f32(lambda: F32(1.0) / _f32(lambda: F32(s_dec) * s)), FLT_MAX)


# =====================================================================================
# The two candidates and their errors
# =====================================================================================

def scaled_value(x, r) -> np.float32:
    """8. y = fp32(x * r), then fp32(y + 0) (an exact -0.0 becomes +0.0: fouroversix takes the
    sign from ``torch.sign``, which is 0 for -0.0)."""
    y = _f32(lambda: F32(x) * F32(r))
    return _f32(lambda: y + F32(0.0))


def fp_code(y, rounding: str, r: int | None, sr_bits: int) -> int:
    """9. E2M1 candidate: ``encode_scalar(y, e2m1, rounding, r)``, saturating at +-6."""
    return encode_scalar(y, E2M1, rounding, r=r, sr_bits=sr_bits, overflow="saturate")


def int_code(y, rounding: str, r: int | None, sr_bits: int) -> int:
    """10. INT4 candidate: z = fp32(y * fp32(7/6)); the code is ``encode_scalar(z, int4_sym,
    rounding, r)``: an integer in -7..7 (RNE: ties to even), two's complement in 4 bits."""
    z = _f32(lambda: F32(y) * INT_UP)
    return encode_scalar(z, INT4, rounding, r=r, sr_bits=sr_bits, overflow="saturate")


def dequantized_fp(code: int, s, amax) -> np.float32:
    """11a. fp32(fp32(fp32(q * s) * amax) / 2688), q = e2m1(code)."""
    q = F32(E2M1.values[code])
    return _f32(lambda: _f32(lambda: _f32(lambda: q * F32(s)) * F32(amax)) / (SCALE_MAX * FP_MAX))


def dequantized_int(code: int, s, amax) -> np.float32:
    """11b. fp32(fp32(fp32(fp32(k * s) * amax) * fp32(6/7)) / 2688), k = int4(code)."""
    k = F32(INT4.values[code])
    p = _f32(lambda: _f32(lambda: k * F32(s)) * F32(amax))
    return _f32(lambda: _f32(lambda: p * INT_DOWN) / (SCALE_MAX * FP_MAX))


def error_terms(block: Sequence, dequantized: Sequence, rule: str) -> list:
    """12. d_i = fp32(dq_i - x_i); term_i = |d_i| (``mae``, ``abs_max``) or fp32(d_i * d_i) (``mse``)."""
    out = []
    for x, dq in zip(block, dequantized):
        d = _f32(lambda: F32(dq) - F32(x))
        out.append(_f32(lambda: d * d) if rule == "mse" else abs(d))
    return out


def error_sum(terms: Sequence) -> np.float32:
    """13. The block error of ``mse`` and ``mae``: the 16 (or, for a 16 x 16 tile, 256) terms
    summed in float32 in the order of ``torch.sum`` over a contiguous row on the CPU
    (:func:`fp4spec.scaling.torch_cpu_row_sum`). For 16 terms: p_j = fp32(t_j + t_(j+8)) for
    j = 0..7, then e = fp32(...fp32(fp32(0 + p_0) + p_1) ... + p_7)."""
    from .scaling import torch_cpu_row_sum

    return torch_cpu_row_sum(terms)


def block_error(block: Sequence, dequantized: Sequence, rule: str) -> np.float32:
    """14. ``abs_max``: the largest term; ``mse``, ``mae``: :func:`error_sum` of the terms."""
    terms = error_terms(block, dequantized, rule)
    if rule == "abs_max":
        return max(terms)
    return error_sum(terms)


# =====================================================================================
# One block, and whole tensors
# =====================================================================================

def quantize_block_if4(block: Sequence, amax, s_enc, s_dec, rule: str = "mse", rounding: str = "rne",
                       rbits: Sequence | None = None, sr_bits: int = 8) -> tuple[list[int], int]:
    """Quantize one block of float32 values: (element codes, scale byte). A block is 16 values,
    or the 256 values of a 16 x 16 tile in row-major order.

    Steps 4-14 above for the block (amax, S_enc, S_dec from :func:`tensor_scales`), then:

    15. INT4 iff err_int < err_fp (strict: a tie, and a zero-scale block, take E2M1).
    16. The scale byte is the UE4M3 code, with bit 7 (:data:`INT_FLAG`) set for INT4; the
        codes are the chosen candidate's.
    """
    values = [F32(v) for v in block]
    vec_max = max(abs(v) for v in values)
    code = block_scale_code(vec_max, s_enc)
    mult = element_multiplier(code, s_dec)
    s = F32(UE4M3.values[code])
    fp, it = [], []
    for i, v in enumerate(values):
        y = scaled_value(v, mult)
        r = None if rbits is None else int(rbits[i])
        fp.append(fp_code(y, rounding, r, sr_bits))
        it.append(int_code(y, rounding, r, sr_bits))
    err_fp = block_error(values, [dequantized_fp(c, s, amax) for c in fp], rule)
    err_int = block_error(values, [dequantized_int(c, s, amax) for c in it], rule)
    if err_int < err_fp:
        return it, code | INT_FLAG
    return fp, code


def tiles(shape: tuple[int, ...], scheme: Scheme):
    """The index tuples of every block of an array of ``shape`` (blocked axis last), each block
    a list of element indices in the order its values are taken: 16 along the row, or for
    16 x 16 tiles the 256 elements row by row."""
    k, r = scheme.block_size, scheme.tile_rows
    lead = shape[:-2] if scheme.is_2d else shape[:-1]
    row_starts = range(0, shape[-2], r) if scheme.is_2d else [None]
    for idx in np.ndindex(*lead):
        for r0 in row_starts:
            rows = [idx] if r0 is None else [idx + (i,) for i in range(r0, r0 + r)]
            for b in range(shape[-1] // k):
                yield [ri + (j,) for ri in rows for j in range(b * k, (b + 1) * k)]


def quantize_reference(x, scheme: Scheme, *, axis=-1, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                       pad: bool = False):
    """The slow reference quantizer of an ``if4`` scheme: a :class:`~fp4spec.quantized.QuantizedTensor`.

    0. :func:`fp4spec.scaling.prepare_input` (float32, blocked axis last, padding; 16 x 16
       tiles: rows a multiple of 16); then every value must be finite (:func:`check_finite`).
    1. amax = max |x| over the whole tensor; :func:`tensor_scales`.
    2. :func:`quantize_block_if4` for every block (:func:`tiles`); every row of a block
       stores its scale byte; the tensor's ``global_scale`` is S_dec.
    """
    from .quantized import QuantizedTensor
    from .scaling import prepare_input

    prep = prepare_input(x, scheme, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, pad=pad)
    xp, rp = prep.x, prep.rbits
    check_finite(xp)
    amax, s_enc, s_dec = tensor_scales(np.max(np.abs(xp)) if xp.size else F32(0.0))
    k = scheme.block_size
    codes = np.zeros(xp.shape, np.uint8)
    scales = np.zeros(xp.shape[:-1] + (xp.shape[-1] // k,), np.uint8)
    for block in tiles(xp.shape, scheme):
        c, s = quantize_block_if4([xp[i] for i in block], amax, s_enc, s_dec, scheme.scale_rule, rounding,
                                  None if rp is None else [rp[i] for i in block], sr_bits)
        for i, code in zip(block, c):
            codes[i] = code
            scales[i[:-1] + (i[-1] // k,)] = s
    return QuantizedTensor.from_moved(codes, scales, s_dec, scheme, prep.axis, prep.shape)


# =====================================================================================
# Decoding
# =====================================================================================

def is_int_block(scale_byte: int) -> bool:
    """True if the scale byte flags an INT4 block (its sign bit)."""
    return bool(int(scale_byte) & INT_FLAG)


def element_value(code: int, scale_byte: int) -> Fraction:
    """The exact element value of a code in a block with this scale byte, in E2M1 units
    (before the block and tensor scales): e2m1(code), or int4(code) * 6/7."""
    if is_int_block(scale_byte):
        return INT4.decode_exact(code) * Fraction(6, 7)
    return E2M1.decode_exact(code)


def block_multiplier(scale_byte: int) -> np.float32:
    """The decode multiplier of a block: s = ue4m3(scale_byte & 0x7F) for E2M1 blocks,
    fp32(s * fp32(6/7)) for INT4 blocks (as fouroversix's IF4 MAC folds 6/7 into the scale
    product, ``if4_mac/scripts/gen_golden_ref.py``)."""
    s = F32(UE4M3.values[int(scale_byte) & 0x7F])
    return _f32(lambda: s * INT_DOWN) if is_int_block(scale_byte) else s


def dequantize_scalar(code: int, scale_byte: int, global_scale) -> np.float32:
    """fp32(fp32(q * m) * S_dec): q = e2m1(code) or int4(code), m = :func:`block_multiplier`."""
    q = F32((INT4 if is_int_block(scale_byte) else E2M1).values[code])
    m = block_multiplier(scale_byte)
    return _f32(lambda: _f32(lambda: q * m) * F32(global_scale))


def dequantize_reference(q) -> np.ndarray:
    """The slow reference dequantizer: :func:`dequantize_scalar` per element; float32 in x's shape."""
    codes = np.moveaxis(np.asarray(q.codes), q.axis, -1)
    scales = np.moveaxis(np.asarray(q.scales), q.axis, -1)
    k = q.scheme.block_size
    out = np.zeros(codes.shape, np.float32)
    for idx in np.ndindex(*codes.shape):
        out[idx] = dequantize_scalar(int(codes[idx]), int(scales[idx[:-1] + (idx[-1] // k,)]), q.global_scale)
    out = np.moveaxis(out, -1, q.axis)
    return out[tuple(slice(0, n) for n in q.shape)]


__all__ = [
    "BLOCK", "FP_MAX", "GEMM_ELEMENTS", "TILE_ROWS", "INT_DOWN", "INT_FLAG", "INT_UP", "SCALE_MAX", "SELECTION_RULES",
    "block_error", "block_multiplier", "block_scale_code", "check_finite", "dequantize_reference",
    "dequantize_scalar", "dequantized_fp", "dequantized_int", "element_multiplier", "element_value",
    "error_sum", "error_terms", "fp_code", "int_code", "is_int_block", "quantize_block_if4",
    "quantize_reference", "scaled_value", "tensor_scales", "tiles",
]
