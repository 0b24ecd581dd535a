"""The ``native`` backend: block-scaled FP4 GEMM through the vendor library, via PyTorch.

``NativeBackend.matmul(qa, qb, accumulator="sm100-mxf4nvf4")`` runs D = A . B^T of two
:class:`fp4spec.QuantizedTensor` operands with PyTorch's scaled matmul::

    torch._scaled_mm(a.view(float4_e2m1fn_x2), b.view(float4_e2m1fn_x2).t(),
                     scale_a_blocked.view(dtype), scale_b_blocked.view(dtype), out_dtype=torch.float32)

with ``dtype`` ``float8_e8m0fnu`` (MXFP4: E8M0 scales, block 32) or ``float8_e4m3fn`` (NVFP4:
UE4M3 scales, block 16), both scale matrices in the cuBLAS 128x4 blocked layout
(:func:`fp4spec.to_blocked`), codes packed two per byte along K, low nibble first. NVFP4's
tensor scales never enter the call: the result is ``fp32(acc * fp32(gA * gB))``, computed
here in numpy exactly as :func:`fp4spec.matmul` defines it.

Where it runs (:func:`detect`):

* NVIDIA, compute capability 10.0+ (Blackwell; cuBLASLt): MXFP4 and NVFP4. Claims the
  accumulator model ``sm100-mxf4nvf4`` (MMA-Sim's model of ``kind::mxf4nvf4``); the
  conformance suite then checks that claim bit for bit.
* AMD gfx950 (MI350/MI355; hipBLASLt): MXFP4 only (PyTorch has no NVFP4 on ROCm). CDNA4's
  accumulation numerics are unpublished, so nothing bit-exact is claimed: :meth:`is_available`
  is false there (``fp4spec conform --backend native`` exits 2 with that reason) while
  :meth:`NativeBackend.native_matmul` still runs the vendor GEMM for measurements.
* Anywhere else: unavailable, with a precise reason.

``quantize`` is delegated to the numpy emulator (a backend must quantize; this one only
brings the GEMM). The initial accumulator ``c`` has no counterpart in the call (``bias`` is
an epilogue add, not the MMA's C operand): only ``c`` of all +0 bits is accepted.

Not run on Blackwell or MI350 hardware by its authors (none was available): the CPU tests
inject a fake ``scaled_mm`` that computes the model with :func:`fp4spec.matmul`.
"""

from __future__ import annotations

import numpy as np

from fp4spec.layouts import to_blocked
from fp4spec.rounding import DEFAULT_SR_BITS

from .base import Availability, Backend, BackendError, Capabilities, as_numpy

#: The accumulator model claimed on NVIDIA Blackwell.
ACCUMULATOR = "sm100-mxf4nvf4"
#: Scale format -> torch dtype name of the scale operand.
SCALE_DTYPES = {"e8m0": "float8_e8m0fnu", "ue4m3": "float8_e4m3fn"}
#: (scale format, block size) pairs the call takes, per platform.
SUPPORTED = {"cuda": (("e8m0", 32), ("ue4m3", 16)), "rocm": (("e8m0", 32),)}


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def detect(torch=None) -> tuple[str | None, Availability]:
    """Which vendor GEMM path exists here: ``("cuda" | "rocm" | None, Availability)``.

    The Availability says whether the *vendor call* can run (with a precise reason when not);
    ``torch`` may be passed in (tests give a stand-in). ROCm gfx950 gives ``("rocm", yes)``.
    """
    torch = _import_torch() if torch is None else torch
    if torch is None:
        return None, Availability.no("torch is not installed")
    if not hasattr(torch, "float4_e2m1fn_x2") or not hasattr(torch, "_scaled_mm"):
        return None, Availability.no(f"torch {getattr(torch, '__version__', '?')} lacks float4_e2m1fn_x2 / _scaled_mm")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        return None, Availability.no("no CUDA/ROCm device")
    props = torch.cuda.get_device_properties(0)
    if getattr(torch.version, "hip", None):
        arch = str(getattr(props, "gcnArchName", "unknown")).split(":")[0]
        if arch != "gfx950":
            return None, Availability.no(f"ROCm device {arch} is not gfx950")
        return "rocm", Availability.yes(f"hipBLASLt on {props.name} ({arch}), ROCm {torch.version.hip}: MXFP4 only")
    major, minor = props.major, props.minor
    if major < 10:
        return None, Availability.no(f"CUDA device {props.name} has compute capability {major}.{minor}; "
                                     f"native FP4 GEMM needs 10.0+ (Blackwell)")
    return "cuda", Availability.yes(f"cuBLASLt on {props.name} (compute capability {major}.{minor}), "
                                    f"CUDA {torch.version.cuda}, torch {torch.__version__}")


def prepare_operand(q) -> tuple[np.ndarray, np.ndarray]:
    """The two arrays the scaled-matmul call takes for one operand: ``(packed, blocked_scales)``.

    ``q``: a 2-D QuantizedTensor (rows x K) blocked along K with E2M1 elements. ``packed`` is
    uint8 (rows, K/2), two codes per byte along K, the even-index code in the low nibble;
    ``blocked_scales`` is the 1-D uint8 buffer :func:`fp4spec.to_blocked` makes of the
    (rows, K/block) scale codes (rows padded to 128, scale columns to 4, with zero bytes).
    K is that of the stored codes (padding included).
    """
    q = q.to_numpy()
    if len(q.shape) != 2 or q.axis != 1:
        raise BackendError(f"operand: expected a 2-d QuantizedTensor blocked along K (axis 1), got shape {q.shape}, "
                           f"axis {q.axis}")
    if q.scheme.element.name != "e2m1":
        raise BackendError(f"operand: the native FP4 GEMM takes E2M1 elements, got {q.scheme.element.name} "
                           f"({q.scheme.name})")
    packed = np.ascontiguousarray(q.pack(order="lo_first"), dtype=np.uint8)
    return packed, to_blocked(np.asarray(q.scales, dtype=np.uint8))


def apply_tensor_scale(acc: np.ndarray, g, nan_bits: int) -> np.ndarray:
    """The epilogue of :func:`fp4spec.matmul`: ``fp32(acc * g)`` (``g = fp32(gA * gB)``, or None).

    One float32 multiplication, round to nearest even. A NaN of ``acc`` keeps its bits (a
    departure of the hardware's NaN stays visible); a NaN the epilogue makes (0 * Inf) gets
    the model's pattern ``nan_bits``.
    """
    acc = np.asarray(acc, dtype=np.float32)
    if g is None:
        return acc
    with np.errstate(all="ignore"):
        out = (acc * np.float32(g)).astype(np.float32)
    was_nan = np.isnan(acc)
    made = np.isnan(out) & ~was_nan
    out[made] = np.array([nan_bits], np.uint32).view(np.float32)[0]
    out[was_nan] = acc[was_nan]
    return out


class NativeBackend(Backend):
    """Vendor block-scaled FP4 GEMM (cuBLASLt on Blackwell, hipBLASLt on gfx950) via PyTorch.

    ``scaled_mm`` and ``device`` exist for tests and experiments: a callable with
    ``torch._scaled_mm``'s signature used instead of it, and the torch device the operands
    go to (default ``"cuda"``, which is ROCm's device too).
    """

    name = "native"

    def __init__(self, scaled_mm=None, device=None):
        self._scaled_mm = scaled_mm
        self._device = device
        self._detected = None

    def _detect(self):
        if self._detected is None:
            self._detected = detect()
        return self._detected

    def is_available(self) -> Availability:
        platform, avail = self._detect()
        if platform == "rocm":
            return Availability.no(f"{avail.reason}; CDNA4 accumulation numerics are unpublished, so this backend "
                                   f"claims no accumulator model and there is nothing bit-exact to check "
                                   f"(NativeBackend().native_matmul(qa, qb) runs the vendor GEMM)")
        return avail

    def capabilities(self) -> Capabilities:
        platform, avail = self._detect()
        if platform == "rocm":
            return Capabilities(schemes=(), notes=f"native: {avail.reason}; no accumulator model claimed "
                                                  f"(CDNA4 numerics unpublished)")
        where = avail.reason if platform == "cuda" else f"not available here: {avail.reason}"
        return Capabilities(
            schemes=("mxfp4", "nvfp4", "nvfp4_2d"),
            operations=("quantize", "matmul"),
            accumulators=(ACCUMULATOR,),
            notes=f"native: torch._scaled_mm, FP4 operands and 128x4 blocked scales, float32 out; tensor "
                  f"scales applied afterwards as fp32(acc * fp32(gA * gB)); quantize is the numpy emulator; "
                  f"{where}",
        )

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=DEFAULT_SR_BITS):
        from .numpy_backend import NumpyBackend

        return NumpyBackend().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)

    def matmul(self, qa, qb, *, accumulator, c=None) -> np.ndarray:
        name = getattr(accumulator, "name", accumulator)
        if name != ACCUMULATOR:
            raise BackendError(f"accumulator: backend 'native' implements only {ACCUMULATOR!r} (NVIDIA Blackwell), "
                               f"not {name!r}")
        from fp4spec.accumulator_models import get_accumulator
        from fp4spec.matmul_operands import check_operands

        check_operands(get_accumulator(ACCUMULATOR), qa.to_numpy(), qb.to_numpy(), c)
        return self.native_matmul(qa, qb, c=c)

    def native_matmul(self, qa, qb, *, c=None) -> np.ndarray:
        """The vendor GEMM D = A . B^T as float32 numpy (M, N), tensor scales applied afterwards.

        No accumulator model is checked or claimed here (this is what runs on gfx950 too).
        ``c`` must be None or all +0: the call has no initial-accumulator operand.
        """
        torch = _import_torch()
        if torch is None:
            raise BackendError("native: torch is not installed")
        if c is not None:
            c_bits = np.asarray(c, dtype=np.float32).view(np.uint32)
            if c_bits.any():
                raise BackendError("c: the native scaled-matmul call has no initial-accumulator operand (its bias "
                                   "is an epilogue add); only c of all +0 is accepted")
        qa, qb = qa.to_numpy(), qb.to_numpy()
        fa, fb = (qa.scheme.scale.name, qa.scheme.block_size), (qb.scheme.scale.name, qb.scheme.block_size)
        if fa != fb:
            raise BackendError(f"qa, qb: A and B need the same scale format and block size, got {fa} and {fb}")
        platform = self._detect()[0] if self._scaled_mm is None else None
        allowed = SUPPORTED.get(platform, SUPPORTED["cuda"])
        if fa not in allowed:
            raise BackendError(f"qa, qb: scale {fa[0]} with blocks of {fa[1]} is not run natively on "
                               f"{platform or 'cuda'}; supported: {', '.join(f'({s}, {b})' for s, b in allowed)}")
        scale_dtype = getattr(torch, SCALE_DTYPES[fa[0]])
        device = self._device or "cuda"

        def to_dev(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)

        pa, sa = prepare_operand(qa)
        pb, sb = prepare_operand(qb)
        fp4 = torch.float4_e2m1fn_x2
        mm = self._scaled_mm or torch._scaled_mm
        raw = mm(to_dev(pa).view(fp4), to_dev(pb).view(fp4).t(), to_dev(sa).view(scale_dtype),
                 to_dev(sb).view(scale_dtype), out_dtype=torch.float32)
        acc = np.array(as_numpy(raw), dtype=np.float32, copy=True)
        m, n = qa.shape[0], qb.shape[0]
        if acc.shape != (m, n):
            raise BackendError(f"native: scaled_mm returned shape {acc.shape}, expected ({m}, {n})")
        from fp4spec.accumulator_models import get_accumulator
        from fp4spec.matmul_operands import tensor_scale_product

        g = tensor_scale_product(qa.global_scale, qb.global_scale)
        return apply_tensor_scale(acc, g, get_accumulator(ACCUMULATOR).nan_bits)


__all__ = ["ACCUMULATOR", "NativeBackend", "apply_tensor_scale", "detect", "prepare_operand"]
