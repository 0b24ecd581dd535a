"""The :class:`TritonBackend` adapter: the Backend interface over :mod:`.quantize` and
:mod:`.gemm`. Torch tensors in and out, on their device; 4-bit codes stay packed as the
kernels store them (numpy arguments run on the backend's device and come back as numpy).
"""

from __future__ import annotations

import numpy as np

from fp4spec.quantized import QuantizedTensor
from fp4spec.rht import resolve_rht

from ..base import Availability, Backend, Capabilities, resolve_scheme
from . import capability
from .config import resolve_config


def _on(device):
    """Triton launches on the current CUDA device: make it x's (no context switch when it
    already is: the common case, and a switch costs the host microseconds per call)."""
    import contextlib

    import torch

    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def _gemm_takes(spec) -> bool:
    """Whether the GEMM kernel takes operands of this scheme (:func:`.gemm.operand_format`:
    E2M1, E1M2 and INT4 elements with their block scales; the quantizers take more)."""
    from ..base import BackendError
    from .gemm import operand_format

    try:
        operand_format(resolve_scheme(spec))
    except BackendError:
        return False
    return True


class TritonBackend(Backend):
    """Triton kernels (GPU, or the CPU interpreter under TRITON_INTERPRET=1). ``config``: a
    :class:`.config.TritonConfig` (None: the shipped one)."""

    name = "triton"
    array_kind = "torch"

    def __init__(self, device=None, config=None):
        self._device = device
        self.config = resolve_config(config)

    @property
    def device(self):
        if self._device is None:
            import torch

            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

    def is_available(self) -> Availability:
        return capability.availability()

    def capabilities(self) -> Capabilities:
        # the wide MX schemes take every rule too; their catalogue entries only, to bound conform's rows
        mx = [f"mxfp4:scale_rule={r}" if r != "floor" else "mxfp4" for r in capability.MX_RULES]
        mx += ["mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"]
        accs = capability.claimed_accumulators(self.device)  # ("sm90-bf16",) on Hopper only
        if4 = [f"{n}:scale_rule={r}" if r != "mse" else n for n in ("if4", "if4_2d") for r in ("mse", "mae", "abs_max")]
        schemes = (*mx, "nvfp4", "nvfp4_2d", "ufp4", "nvint4", "hif4", *if4)
        return Capabilities(
            schemes=schemes,
            matmul_schemes=tuple(s for s in schemes if _gemm_takes(s)) if accs else (),
            rounding=capability.ROUNDINGS,
            scheme_rounding={"hif4": ("rne",), **{s: capability.IF4_ROUNDINGS for s in if4}},
            operations=("quantize", "dequantize", "pack") + (("matmul",) if accs else ()),
            accumulators=accs,
            sr_bits=tuple(range(1, 25)),
            notes=f"triton kernels on {self.device}" + (" (interpreter)" if capability.interpret() else "")
                  + ("; matmul: sm90-bf16 (backends/triton/gemm.py)" if accs else ""),
            **({"rht": capability.rht_specs(self.device)}
               if "rht" in getattr(Capabilities, "__dataclass_fields__", {}) else {}),
        )

    def why_unsupported(self, scheme, rounding="rne", sr_bits=8, rht=None) -> str:
        """Why the kernels cannot quantize ``scheme`` with ``rounding`` (and ``rht``) ("" if they
        can; availability aside)."""
        try:
            capability.check_request(resolve_scheme(scheme), rounding, sr_bits, rht)
        except NotImplementedError as exc:
            return str(exc)
        return ""

    def supports(self, scheme, rounding="rne", sr_bits=8, rht=None) -> bool:
        return not self.why_unsupported(scheme, rounding, sr_bits, rht) and bool(self.is_available())

    #: ``fp4spec.quantize(..., seed=)`` hands the seed over: the kernels draw Philox bits in x's row-major order.
    draws_philox = True

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, rht=None, axis=-1,
                 seed=None) -> QuantizedTensor:
        """The kernels along x's last axis (or ``axis``: 0 of a 2-d x runs the columnwise
        kernels), on x's device: a QuantizedTensor of torch tensors whose 4-bit codes stay
        packed as the kernels store them (numpy x: on :attr:`device`, the result as numpy). A
        2-d x that is the transpose of a contiguous tensor (what ``fp4spec.quantize(x, axis=0)``
        hands over) runs the columnwise kernels on that tensor, unmoved. ``seed`` (``"sr"``
        without rbits): the kernels draw ``fp4spec.draw_rbits(x.shape, sr_bits, seed,
        method="philox")`` themselves, element i of x's row-major order (x as given)."""
        import torch

        from .. import torch_backend as tb
        from .quantize import quantize_packed

        numpy_in = not isinstance(x, torch.Tensor)
        xt = tb.as_torch(x, self.device) if numpy_in else x
        if xt.dtype == torch.float64:
            xt = xt.to(torch.float32)  # RNE, as fp4spec.prepare_input (and the RHT's step F1)
        sch = resolve_scheme(scheme)
        rht = resolve_rht(rht)
        rb = None if rbits is None else tb.as_torch(rbits, xt.device)
        ax = axis % max(xt.dim(), 1)
        if seed is not None and ax != xt.dim() - 1:
            raise ValueError("seed: the bits follow x's row-major order; give axis=-1 (the blocked axis last)")
        if ax != xt.dim() - 1:  # blocked along another axis: move it last (a view)
            xt = torch.movedim(xt, ax, -1)
            rb = None if rb is None else torch.movedim(rb.expand(x.shape), ax, -1)
        src, kernel_axis = xt, -1
        if xt.dim() == 2 and xt.shape[0] > 1 and xt.stride() == (1, xt.shape[0]) and seed is None:
            src, kernel_axis = xt.T, 0  # contiguous, blocked down its columns
            rb = None if rb is None else rb.T
        elif not xt.is_contiguous():
            src = xt.contiguous()
        if rb is not None:
            rb = rb.to(torch.int32).contiguous()  # < 2^24 (the kernels' sr_bits)
        with _on(src.device):
            out = quantize_packed(src, sch, axis=kernel_axis, rounding=rounding, rbits=rb, sr_bits=sr_bits,
                                  rht=rht, seed=seed, config=self.config)
        shape = tuple(xt.shape)  # blocked axis last
        packed = out["packed"].reshape(*shape[:-1], -1)  # (M, N/2) or one code per byte: the rows, blocked axis last
        scales = out["scales"].reshape(*shape[:-1], -1)
        bits = {f: out[f].reshape(*scales.shape, -1) for f in ("e1_8", "e1_16") if f in out}  # HiF4
        if ax == xt.dim() - 1:  # the kernels' layout (what fp4spec.quantize hands over): nothing to check
            q = QuantizedTensor.from_kernel(packed, scales, out["global_scale"], sch, shape, backend=self.name,
                                            rht=rht, **bits)
        else:
            q = QuantizedTensor.from_moved(packed, scales, out["global_scale"], sch, ax, tuple(x.shape),
                                           backend=self.name, rht=rht, **bits)
        return q.to_numpy() if numpy_in else q

    def why_no_dequantize(self, scheme) -> str:
        """Why the dequantize kernels cannot decode ``scheme`` ("" if they can)."""
        sch = resolve_scheme(scheme)
        if capability.is_mx_wide(sch) or sch.structure in ("hif4", "if4"):
            return ""
        if sch.element.bits != 4 or sch.structure not in ("mx", "two_level"):
            return (f"{sch.name}: the kernels dequantize packed 4-bit MX and two-level schemes and MX with "
                    f"{', '.join(e.upper() for e in capability.MX_WIDE_ELEMENTS)} elements")
        if sch.structure == "two_level" and sch.policies["nv_dequant_order"] != "(q*s)*g":
            return f"{sch.name}: the kernels dequantize in TransformerEngine's order fp32(fp32(q * s) * S_dec)"
        return ""

    #: ``dequantize(q, dtype=)`` writes these itself (``fp4spec.dequantize`` rounds the float32
    #: values of other backends).
    dequantize_dtypes = ("float32", "bfloat16")

    def dequantize(self, q: QuantizedTensor, dtype: str = "float32"):
        """float32 values in q's shape (padding cropped), on q's device: the kernels read the
        packed codes as stored (numpy q: on :attr:`device`, the values returned as numpy).
        ``dtype="bfloat16"``: the kernels write those values rounded to bfloat16
        (:func:`fp4spec.rht.bf16_rne`, NaN 0x7FC0)."""
        import torch

        from .quantize import dequantize_packed

        reason = self.why_no_dequantize(q.scheme)
        if reason:
            raise NotImplementedError(reason)
        numpy_in = not q.is_torch
        qt = q.to_torch(self.device) if numpy_in else q
        nd = len(q.shape)
        last = q.axis == nd - 1  # rowwise: nothing to move
        packed = qt.storage if last else torch.movedim(qt.storage, q.axis, -1)
        scales = qt.scales if last else torch.movedim(qt.scales, q.axis, -1)
        lead = packed.shape[:-1]
        p2 = packed.reshape(-1, packed.shape[-1])
        s2 = scales.reshape(p2.shape[0], -1)
        if not p2.is_contiguous() or not s2.is_contiguous():
            p2, s2 = p2.contiguous(), s2.contiguous()
        if dtype not in self.dequantize_dtypes:
            raise ValueError(f"dtype: {dtype!r} is not one of {', '.join(map(repr, self.dequantize_dtypes))}")
        out_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        with _on(p2.device):
            if q.scheme.structure == "hif4":
                from .quantize import dequantize_hif4

                b8, b16 = ((t if last else torch.movedim(t, q.axis, -2)).reshape(*s2.shape, -1)
                           for t in (qt.e1_8, qt.e1_16))
                out = dequantize_hif4(p2, s2, b8, b16, config=self.config, out_dtype=out_dtype)
            elif q.scheme.structure == "if4":
                from .quantize import dequantize_if4

                out = dequantize_if4(p2, s2, qt.global_scale, config=self.config, out_dtype=out_dtype)
            else:
                out = dequantize_packed(p2, s2, qt.global_scale, q.scheme, config=self.config, out_dtype=out_dtype)
        out = out.reshape(*lead, -1)
        out = out if last else torch.movedim(out, -1, q.axis)
        out = out[tuple(slice(0, n) for n in q.shape)] if q.padded else out
        out = out if out.is_contiguous() or nd == 0 else out.contiguous()
        if not numpy_in:
            return out
        if dtype == "bfloat16":
            import ml_dtypes

            return np.ascontiguousarray(out.view(torch.int16).cpu().numpy()).view(ml_dtypes.bfloat16)
        return np.ascontiguousarray(out.cpu().numpy())

    def pack(self, codes) -> np.ndarray:
        from fp4spec.packing import pack

        return pack(np.asarray(codes), order="lo_first", axis=-1)

    def why_matmul_unsupported(self, qa, qb) -> str:
        """Why the GEMM kernel cannot take these operands' schemes ("" if it can): the element
        formats, scale formats and block sizes of :func:`.gemm.operand_format`."""
        from ..base import BackendError
        from .gemm import operand_format

        try:
            operand_format(qa.scheme)
            operand_format(qb.scheme)
        except BackendError as exc:
            return str(exc)
        return ""

    def matmul(self, qa, qb, *, accumulator, c=None) -> np.ndarray:
        """C = A . B^T under ``accumulator`` (``"sm90-bf16"`` on Hopper): :mod:`.gemm`."""
        from .gemm import matmul

        return matmul(qa, qb, accumulator=accumulator, c=c, device=self.device, defaults=self.config)


__all__ = ["TritonBackend"]
