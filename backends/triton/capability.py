"""What the triton kernels can run, and where: availability, the requests they take, the GPU
features the launchers use, the GEMM's claimed accumulator models.

No kernel code here and no module-level import of triton, so the answers work where triton is
missing. The GPU-only instructions (inline PTX) are chosen per device by :func:`gpu_features`;
everything else is the same on every device and in the interpreter.
"""

from __future__ import annotations

import dataclasses
import os
from functools import lru_cache
from typing import Optional

from fp4spec.block_schemes import Scheme
from fp4spec.rht import MMA_PREFIX
from fp4spec.rounding import ROUNDING_MODES

from ..base import Availability

ROUNDINGS = ("rne", "sr")
#: IF4's roundings on triton: every mode (its own encoders, kernels.if4).
IF4_ROUNDINGS = ROUNDING_MODES
ELEMENTS = ("e2m1", "e1m2", "int4_sym")
#: The 6- and 8-bit elements of MX schemes (kernels.mx_wide: one code per byte; rht= unfused).
MX_WIDE_ELEMENTS = ("e2m3", "e3m2", "e4m3", "e5m2")
MX_RULES = {"floor": 0, "ceil": 1, "even": 2, "rceil": 3}
#: RHT specs the butterfly kernels apply bit for bit (fp4spec.rht: size 16, the pinned float32 butterfly).
RHT_SPECS = ("16/fwht-fp32",)
#: Accumulator models the bf16 ``tl.dot`` computes per GPU family (compute capability major): Hopper.
MMA_ARITHS = {9: "mma:sm90-bf16"}
#: Accumulator models the GEMM implements bit for bit: sm90-bf16 directly, the others by
#: certificate on the same kernel (:mod:`.certify`).
GEMM_ACCUMULATORS = ("sm90-bf16", "exact", "fp32", "sm100-mxf4nvf4", "sm100-mxf8f6f4")


def interpret() -> bool:
    """Whether the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def availability() -> Availability:
    try:
        import triton
    except ImportError:
        return Availability.no("triton is not installed (pip install triton)")
    import torch

    if torch.cuda.is_available():
        return Availability.yes(f"triton {triton.__version__} on {torch.cuda.get_device_name()}")
    if interpret():
        return Availability.yes(f"triton {triton.__version__} interpreter on the CPU (TRITON_INTERPRET=1)")
    return Availability.no("no GPU, and TRITON_INTERPRET=1 is not set")


@dataclasses.dataclass(frozen=True)
class GpuFeatures:
    """The device facts the launchers choose by.

    hw_e4m3: ``cvt.rn.satfinite.e4m3x2.f32`` and ``prmt`` (compute capability 8.9+): the
    hardware UE4M3 rounding of two-level block scales, sign bits by byte permutes.
    hw_bf16x2: ``fma.rn.bf16x2`` and ``min.u16x2`` (9.0+): the MX encoder on bf16x2 words.
    mma_arith: the accumulator model of the bf16 ``tl.dot`` (``"mma:sm90-bf16"`` on Hopper and in
    the interpreter, whose dots run the model), or None.
    sm_count: streaming multiprocessors (grid sizes of the persistent kernels).
    """

    hw_e4m3: bool = False
    hw_bf16x2: bool = False
    mma_arith: Optional[str] = None
    sm_count: int = 4


#: An H200's features (offline compiles for sm_90: benchmarks/kernel_fingerprint.py).
H200_FEATURES = GpuFeatures(hw_e4m3=True, hw_bf16x2=True, mma_arith=MMA_ARITHS[9], sm_count=132)


def gpu_features(device=None) -> GpuFeatures:
    """:class:`GpuFeatures` of ``device`` (default: the current CUDA device; cached per device). The interpreter and the CPU
    have no inline PTX; the interpreter's dots run the sm90-bf16 model
    (:func:`.gemm.interpreter_model_dot`); other GPUs' MMAs round differently (Ampere fuses two
    halves of k, Blackwell is not measured)."""
    if interpret():
        return GpuFeatures(mma_arith=MMA_ARITHS[9])
    try:
        import torch
    except ImportError:  # pragma: no cover
        return GpuFeatures()
    dev = device if isinstance(device, torch.device) else torch.device("cuda" if device is None else device)
    if dev.type != "cuda":
        return GpuFeatures()
    if dev.index is not None:  # a tensor's device: every launch asks, so once per device
        return _cuda_features(dev.index)
    return _cuda_features(torch.cuda.current_device()) if torch.cuda.is_available() else GpuFeatures()


@lru_cache(maxsize=None)
def _cuda_features(index: int) -> GpuFeatures:
    import torch

    dev = torch.device("cuda", index)
    cc = torch.cuda.get_device_capability(dev)
    return GpuFeatures(hw_e4m3=cc >= (8, 9), hw_bf16x2=cc >= (9, 0), mma_arith=MMA_ARITHS.get(cc[0]),
                       sm_count=torch.cuda.get_device_properties(dev).multi_processor_count)


def rht_specs(device=None) -> tuple:
    """The RHT specs the kernels claim on ``device``: :data:`RHT_SPECS` everywhere, plus
    ``"16/mma:sm90-bf16"`` where the bf16 ``tl.dot`` computes that accumulator model."""
    a = gpu_features(device).mma_arith
    return RHT_SPECS + ((f"16/{a}",) if a else ())


def check_rht(rht):
    """The :class:`fp4spec.rht.RHT` an ``rht=`` argument names (None: no transform), or
    NotImplementedError if the kernels do not apply it (so ``backend="auto"`` falls back)."""
    from fp4spec.rht import resolve_rht

    r = resolve_rht(rht)
    if r is None:
        return None
    if r.arith.startswith(MMA_PREFIX):
        specs = rht_specs()
        if r.spec not in specs:
            raise NotImplementedError(f"rht: {r.spec!r} (triton backend here: {', '.join(specs)}; the mma "
                                      f"arithmetic needs a GPU whose bf16 MMA it models, or the interpreter)")
        return r
    rht_params(r)
    return r


def rht_params(rht):
    """(sign mask, bf16 output) of the fwht-fp32 transform an ``rht=`` argument names (None: no
    transform). The butterfly kernels run ``"16/fwht-fp32"`` with any signs; a float64 output
    equals the float32 one widened (quantize reads it exactly), so it is the float32 path.
    Anything else raises NotImplementedError (``"mma:..."`` transforms are asked elsewhere)."""
    from fp4spec.rht import resolve_rht

    r = resolve_rht(rht)
    if r is None:
        return None
    if r.spec not in RHT_SPECS:
        raise NotImplementedError(f"rht: {r.spec!r} (triton backend: {', '.join(rht_specs())})")
    return r.sign_mask(), r.out_dtype == "bfloat16"


def is_mx_wide(scheme: Scheme) -> bool:
    """An MX scheme with 6- or 8-bit elements (:data:`MX_WIDE_ELEMENTS`): the ``rows_wide`` and
    ``cols_wide`` kernels, codes one per byte."""
    return scheme.structure == "mx" and scheme.element.name in MX_WIDE_ELEMENTS


def check_request(scheme: Scheme, rounding: str, sr_bits: int = 8, rht=None):
    """NotImplementedError if the kernels cannot run the request; else the resolved RHT (or None)."""
    from .. import torch_backend as tb

    r = check_rht(rht)
    if scheme.structure == "if4":
        return _check_if4(scheme, rounding, sr_bits, r)
    if rounding not in ROUNDINGS:
        raise NotImplementedError(f"rounding: {rounding!r} (triton backend: {', '.join(ROUNDINGS)})")
    if rounding == "sr" and not 1 <= int(sr_bits) <= 24:
        raise NotImplementedError(f"sr_bits: {sr_bits} (triton backend: 1..24, exact in float32)")
    if scheme.structure == "hif4":
        return _check_hif4(scheme, rounding, r)
    wide = is_mx_wide(scheme)
    if scheme.element.name not in ELEMENTS and not wide:
        raise NotImplementedError(f"{scheme.name}: element {scheme.element.name!r}")
    if scheme.block_size % 2 or scheme.block_size > 128 or scheme.block_size & (scheme.block_size - 1):
        raise NotImplementedError(f"{scheme.name}: block size {scheme.block_size} (powers of two up to 128)")
    if scheme.structure == "mx":
        if scheme.element.name != "e2m1" and not wide:
            raise NotImplementedError(f"{scheme.name}: MX with E2M1, E2M3, E3M2, E4M3 or E5M2 elements only")
        if scheme.policies["mx_rceil_descale"] != "mul_reciprocal" and scheme.scale_rule == "rceil":
            raise NotImplementedError(f"{scheme.name}: rceil with a true division")
    elif scheme.structure == "two_level":
        tb.check_two_level(scheme)
        if scheme.element_max is not None or scheme.scale_max is not None:
            raise NotImplementedError(f"{scheme.name}: element_max / scale_max overrides")
        if scheme.is_2d and scheme.tile_rows not in (1, 2, 4, 8, 16, 32):
            raise NotImplementedError(f"{scheme.name}: tile rows {scheme.tile_rows}")
    else:
        raise NotImplementedError(f"{scheme.name}: structure {scheme.structure!r}")
    return r


def _check_hif4(scheme: Scheme, rounding: str, r):
    """HiF4 (variants rows_hif4 / cols_hif4): its own rounding ("rne"), the golden model's
    exact products (``fp4spec.quantize``'s); ``rht=`` by the unfused butterfly only."""
    if rounding != "rne":
        raise NotImplementedError(f"{scheme.name}: rounding {rounding!r} (HiF4 rounds its elements as its golden "
                                  f"model does: 'rne' only)")
    if r is not None and r.arith.startswith(MMA_PREFIX):
        raise NotImplementedError(f"{scheme.name}: rht {r.spec!r} (HiF4 on triton: {', '.join(RHT_SPECS)})")
    return r


def _check_if4(scheme: Scheme, rounding: str, sr_bits: int, r):
    """IF4 (variants rows_if4 / cols_if4): 1 x 16 blocks and 16 x 16 tiles, every rounding of
    :data:`IF4_ROUNDINGS` (SR: sr_bits 1..24); ``rht=`` by the unfused butterfly only."""
    if rounding not in IF4_ROUNDINGS:
        raise NotImplementedError(f"rounding: {rounding!r} (triton backend, IF4: {', '.join(IF4_ROUNDINGS)})")
    if rounding == "sr" and not 1 <= int(sr_bits) <= 24:
        raise NotImplementedError(f"sr_bits: {sr_bits} (triton backend: 1..24, exact in float32)")
    if r is not None and r.arith.startswith(MMA_PREFIX):
        raise NotImplementedError(f"{scheme.name}: rht {r.spec!r} (IF4 on triton: {', '.join(RHT_SPECS)})")
    return r


def gemm_availability(device=None) -> Availability:
    """Whether the GEMM computes the ``sm90-bf16`` model on ``device`` (default: CUDA device 0):
    a CUDA device of compute capability 9.x (Hopper, whose bf16 MMAs the model describes). The
    interpreter runs the kernels but its dot is numpy's; other GPUs run them with their own
    (unmodelled or different) MMA arithmetic -- e.g. Ampere's mma fuses two halves of k with
    F = 24."""
    if interpret():
        return Availability.no("TRITON_INTERPRET=1: the interpreter's tl.dot is a numpy matmul, not the "
                               "Hopper MMA chain of the sm90-bf16 model")
    try:
        import torch
    except ImportError:
        return Availability.no("torch is not installed")
    try:
        import triton
    except ImportError:
        return Availability.no("triton is not installed")
    dev = torch.device("cuda" if device is None else device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return Availability.no(f"device {dev}: the sm90-bf16 GEMM needs a CUDA device")
    if getattr(torch.version, "hip", None):
        return Availability.no("ROCm device: the sm90-bf16 model is NVIDIA Hopper's")
    major, minor = torch.cuda.get_device_capability(dev)
    name = torch.cuda.get_device_name(dev)
    if major != 9:
        return Availability.no(f"{name} has compute capability {major}.{minor}; the sm90-bf16 model is Hopper's "
                               f"(9.x) MMA arithmetic")
    return Availability.yes(f"{name} (compute capability {major}.{minor}), triton {triton.__version__}")


def claimed_accumulators(device=None) -> tuple:
    """:data:`GEMM_ACCUMULATORS` where :func:`gemm_availability` holds, else ``()``: what a
    backend may claim in ``Capabilities.accumulators``."""
    return GEMM_ACCUMULATORS if gemm_availability(device) else ()


__all__ = ["ELEMENTS", "GEMM_ACCUMULATORS", "GpuFeatures", "H200_FEATURES", "IF4_ROUNDINGS", "MMA_ARITHS", "MX_RULES", "MX_WIDE_ELEMENTS",
           "RHT_SPECS", "ROUNDINGS", "availability", "check_request", "check_rht", "claimed_accumulators",
           "gemm_availability", "gpu_features", "interpret", "is_mx_wide", "rht_params", "rht_specs"]
