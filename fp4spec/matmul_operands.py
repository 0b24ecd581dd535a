"""Operands of a block-scaled matmul, checked for an accumulator model.

:func:`check_operands` is step 2 of :func:`fp4spec.matmul` and of the scalar reference
:func:`fp4spec.gemm_reference.matmul_reference`: one validation for every implementation,
so a bad operand gets the same message whichever computes the product.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .accumulator_models import AccumulatorModel, accumulators, code_representable, element_carrier
from .quantized import QuantizedTensor


#: Accumulator algorithms that take IF4 operands (:func:`check_operands` step 2).
IF4_ALGORITHMS = ("exact", "fma")


@dataclasses.dataclass(frozen=True)
class MatmulOperands:
    """Validated operands of a matmul: shapes, the tensor-scale product and c."""

    m: int          # rows of A (qa.shape[0]; padding rows of 2-d tiles excluded)
    n: int          # rows of B (qb.shape[0])
    k: int          # K of the unpadded operands
    k_padded: int   # K of the stored codes (the K loop runs over these; padding is +0)
    g: np.float32 | None   # fp32(gA * gB), None when neither operand has a tensor scale
    c: np.ndarray | None   # float32 (m, n) or None (+0); a torch tensor where one was given


def _numpy(a) -> np.ndarray:
    """A numpy view of a numpy array or a CPU torch tensor."""
    return a.numpy() if hasattr(a, "detach") else np.asarray(a)


def _scannable(q) -> bool:
    """True if the operand's values can be read without a device transfer (numpy, CPU tensors)."""
    return not q.is_torch or q.device.type == "cpu"


def _element_ok(model: AccumulatorModel, q, arg: str):
    sch = q.scheme
    if sch.structure == "hif4":
        raise ValueError(f"{arg}: the 'hif4' scheme has no published dot-product datapath (its "
                         f"accumulation is unknown); matmul supports MX and two-level schemes")
    if sch.structure == "if4":
        if model.algorithm not in IF4_ALGORITHMS or model.scales not in ("exact", "fp32_operand"):
            raise ValueError(f"{arg}: IF4 operands ({sch.name}) are modelled by the accumulators 'exact' and 'fp32' "
                             f"(elements times the block multiplier s or fp32(s * fp32(6/7))); {model.name!r} takes "
                             f"E4M3 scales without IF4's INT4 flag")
        if _scannable(q) and np.asarray(_numpy(q.codes)).size and int(np.max(_numpy(q.codes))) >= 16:
            raise ValueError(f"{arg}: element codes must be below 2^4 for IF4")
        return
    fmt = sch.element
    if model.elements is not None and fmt.name not in model.elements:
        hint = ""
        if fmt.name in ("int4", "int4_sym") and "e0m3" in model.elements:
            hint = " (NV-INT4 as this datapath takes it has sign-magnitude codes: scheme 'nvint4_e0m3')"
        raise ValueError(f"{arg}: element format {fmt.name!r} ({sch.name}) is not taken by accumulator "
                         f"{model.name!r}; allowed: {', '.join(map(repr, model.elements))}{hint}")
    if not _scannable(q):
        return  # device tensors are not read here (a transfer would stall the device)
    bad = set(fmt.nan_codes) | set(fmt.inf_codes)
    codes = _numpy(q.codes)
    if bad:
        hit = np.isin(codes, sorted(bad))
        if hit.any():
            code = int(codes[hit].flat[0])
            raise ValueError(f"{arg}: element code 0x{code:02X} of {fmt.name} is NaN or Inf; matmul needs "
                             f"finite elements (NaN enters through scales and c)")
    if codes.size and int(codes.max()) >= 1 << fmt.bits:
        raise ValueError(f"{arg}: element codes must be below 2^{fmt.bits} for {fmt.name}")


def _reads_low_bits(model: AccumulatorModel, scale_format) -> bool:
    """True where the model's datapath reads a scale byte's low 7 bits (UE4M3, ``"ignore"``)."""
    return model.ue4m3_sign_bit == "ignore" and scale_format.name == "ue4m3"


def _scale_bytes_ok(model: AccumulatorModel, q, arg: str):
    """Scale bytes beyond the scale format's codes: refused, except a UE4M3 byte with bit 7
    set under ``ue4m3_sign_bit="ignore"`` (the datapath reads its low 7 bits)."""
    sfmt = q.scheme.scale
    if not _scannable(q) or _reads_low_bits(model, sfmt):
        return
    scales = _numpy(q.scales)
    top = (1 << sfmt.bits) - 1
    if not scales.size or int(scales.max()) <= top:
        return
    byte = int(scales[scales > top].flat[0])
    if sfmt.name == "ue4m3":
        takers = [m.name for m in accumulators.values() if m.ue4m3_sign_bit == "ignore"]
        raise ValueError(f"{arg}: UE4M3 scale byte 0x{byte:02X} has bit 7 set (a float8_e4m3fn sign bit; UE4M3 "
                         f"codes are 0x00..0x7F); accumulator {model.name!r} rejects it (ue4m3_sign_bit='reject'). "
                         f"Models with ue4m3_sign_bit='ignore' read its low 7 bits: {', '.join(takers)}")
    raise ValueError(f"{arg}: scale codes must be below 2^{sfmt.bits} for {sfmt.name}, got 0x{byte:02X}")


def datapath_scale_codes(model: AccumulatorModel, scale_format, codes):
    """The scale codes ``model``'s datapath reads from stored scale bytes (an int or an
    integer array), after :func:`check_operands`:

    1. A UE4M3 scale under ``ue4m3_sign_bit="ignore"``: the byte's low 7 bits (``byte &
       0x7F``: 0xFF reads as 0x7F, NaN; 0x80 as 0x00, zero; 0xB8 as 0x38, 1.0).
    2. Otherwise the byte itself (:func:`check_operands` refused bytes beyond the format's codes).
    """
    return codes & 0x7F if _reads_low_bits(model, scale_format) else codes


def tensor_scale_product(ga, gb) -> np.float32 | None:
    """fp32(gA * gB), the epilogue multiplier of two operands' tensor scales (a missing
    tensor scale counts as 1); None when neither operand has one."""
    if ga is None and gb is None:
        return None
    if hasattr(ga, "detach") or hasattr(gb, "detach"):  # torch tensors: one float32 multiply where they are
        t = ga if hasattr(ga, "detach") else gb
        one = t.new_ones(())
        return (one if ga is None else ga).reshape(()) * (one if gb is None else gb).reshape(())
    with np.errstate(all="ignore"):
        return np.float32(np.float32(1.0 if ga is None else ga) * np.float32(1.0 if gb is None else gb))


def check_operands(model: AccumulatorModel, qa, qb, c=None) -> MatmulOperands:
    """Validate ``qa`` (M x K) and ``qb`` (N x K) for ``model``; raise a clear error otherwise.

    1. Both are :class:`~fp4spec.quantized.QuantizedTensor` of rank 2, blocked along the
       last axis (K), with the same K and the same padded K.
    2. The schemes are not HiF4; IF4 operands only under ``exact`` and ``fp32`` (algorithms
       ``exact``/``fma`` with exact or float32 operands; their block scales are the IF4 block
       multipliers, :func:`fp4spec.if4.block_multiplier`); the element codes are finite; the element formats and the
       ``(scale format, block size)`` pairs are ones the model takes (hardware models: A and
       B with the same pair); scale bytes are codes of the scale format, except that a UE4M3
       byte with bit 7 set is taken under ``ue4m3_sign_bit="ignore"`` (the datapath reads
       :func:`datapath_scale_codes`) and refused under ``"reject"``.
    3. Step constraints: ``fdpa``: the padded K is a multiple of ``k_step``; ``"group"``
       scales: ``group_size`` divides both block sizes; ``fdpa2``: equal block sizes, each a
       multiple of ``group_size``.
    4. M = ``qa.shape[0]`` and N = ``qb.shape[0]``, the operands' own rows: rows that
       ``quantize(pad=True)`` stored to fill 2-d tiles (``nvfp4_2d``) are not part of A or B
       and the result is M x N. (K is the stored, padded K: padding elements are +0 and
       take part in the K steps.) ``c`` is None or a float32 array of shape (M, N).
    5. The tensor-scale product ``g = fp32(gA * gB)`` (a missing tensor scale counts as 1;
       None when both are missing).
    """
    for arg, q in (("qa", qa), ("qb", qb)):
        if not isinstance(q, QuantizedTensor):
            raise TypeError(f"{arg}: expected a QuantizedTensor (fp4spec.quantize(x, scheme)), got {type(q).__name__}")
        if len(q.shape) != 2:
            raise ValueError(f"{arg}: matmul needs a 2-d (rows x K) tensor, got shape {q.shape}")
        if q.axis != 1:
            raise ValueError(f"{arg}: quantized along axis {q.axis}; matmul needs the blocks along K, the last "
                             f"axis (quantize(x, scheme, axis=-1))")
        _element_ok(model, q, arg)
    if qa.shape[1] != qb.shape[1]:
        raise ValueError(f"qa, qb: K differs ({qa.shape[1]} vs {qb.shape[1]}); C = A . B^T needs A (M x K), B (N x K)")
    kp, kpb = qa.n_blocks * qa.scheme.block_size, qb.n_blocks * qb.scheme.block_size
    if kpb != kp:
        raise ValueError(f"qa, qb: padded K differs ({kp} vs {kpb}); quantize both with the same "
                         f"block size and pad")
    sa, sb = qa.scheme, qb.scheme
    pair_a, pair_b = (sa.scale.name, sa.block_size), (sb.scale.name, sb.block_size)
    if model.scale_blocks is not None:
        for arg, pair in (("qa", pair_a), ("qb", pair_b)):
            if pair not in model.scale_blocks:
                raise ValueError(f"{arg}: scale {pair[0]} with blocks of {pair[1]} is not taken by accumulator "
                                 f"{model.name!r}; allowed (scale, block): {', '.join(map(str, model.scale_blocks))}")
        if pair_a != pair_b:
            raise ValueError(f"qa, qb: accumulator {model.name!r} needs the same scale format and block size for "
                             f"A and B, got {pair_a} and {pair_b}")
    _scale_bytes_ok(model, qa, "qa")
    _scale_bytes_ok(model, qb, "qb")
    if model.algorithm == "fdpa" and kp % model.k_step:
        raise ValueError(f"qa, qb: K={kp} is not a multiple of the {model.name!r} step k={model.k_step}; pad A and "
                         f"B along K with zeros (a kernel pads too, and must choose the padding's scale)")
    if model.scales == "group":
        for arg, s in (("qa", sa), ("qb", sb)):
            if s.block_size % model.group_size:
                raise ValueError(f"{arg}: block size {s.block_size} is not a multiple of the group size "
                                 f"{model.group_size} of {model.name!r}")
    if model.algorithm == "fdpa2":
        if sa.block_size != sb.block_size:
            raise ValueError(f"qa, qb: {model.name!r} scales whole blocks; A and B need the same block size, "
                             f"got {sa.block_size} and {sb.block_size}")
        if sa.block_size % model.group_size:
            raise ValueError(f"qa, qb: block size {sa.block_size} is not a multiple of the {model.name!r} group "
                             f"size {model.group_size}")
    if model.algorithm == "fdpa2":
        for arg, q in (("qa", qa), ("qb", qb)):
            if not _scannable(q):
                continue
            fmt = q.scheme.element
            car = element_carrier(model, fmt)
            for code in np.unique(_numpy(q.codes)):
                v = fmt.decode_exact(int(code))
                if not code_representable(fmt, int(code), car):
                    raise ValueError(f"{arg}: element value {float(v):g} ({fmt.name} code 0x{int(code):02X}) is "
                                     f"not representable in {car.name}, the FP8 type of {model.name!r}")
    m, n = qa.shape[0], qb.shape[0]
    c32 = None
    if c is not None:
        c32 = c if hasattr(c, "device") and hasattr(c, "detach") else np.asarray(c)  # a torch c stays where it is
        dtype = str(c32.dtype).removeprefix("torch.")
        if dtype != "float32":
            raise TypeError(f"c: expected a float32 array, got dtype {dtype}")
        if tuple(c32.shape) != (m, n):
            raise ValueError(f"c: expected shape ({m}, {n}) (M x N), got {tuple(c32.shape)}")
    return MatmulOperands(m, n, qa.shape[1], kp, tensor_scale_product(qa.global_scale, qb.global_scale), c32)


__all__ = ["IF4_ALGORITHMS", "MatmulOperands", "check_operands", "datapath_scale_codes", "tensor_scale_product"]
