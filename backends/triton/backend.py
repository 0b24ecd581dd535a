"""The :class:`TritonBackend` adapter: the Backend interface over :mod:`.quantize` and
:mod:`.gemm` (numpy QuantizedTensors in and out; the host functions take and return packed
torch tensors on the device).
"""

from __future__ import annotations

import numpy as np

from fp4spec.quantized import QuantizedTensor

from ..base import Availability, Backend, Capabilities, resolve_scheme
from . import capability
from .config import resolve_config


class TritonBackend(Backend):
    """Triton kernels (GPU, or the CPU interpreter under TRITON_INTERPRET=1). ``config``: a
    :class:`.config.TritonConfig` (None: the shipped one)."""

    name = "triton"

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
        mx = [f"mxfp4:scale_rule={r}" if r != "floor" else "mxfp4" for r in capability.MX_RULES]
        accs = capability.claimed_accumulators(self.device)  # ("sm90-bf16",) on Hopper only
        return Capabilities(
            schemes=(*mx, "nvfp4", "nvfp4_2d", "ufp4", "nvint4"),
            rounding=capability.ROUNDINGS,
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

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, axis=-1, rht=None) -> QuantizedTensor:
        import torch

        from fp4spec.rht import resolve_rht

        from .. import torch_backend as tb
        from .quantize import quantize_packed, unpack_lo_first

        sch = resolve_scheme(scheme)
        rht = resolve_rht(rht)
        xt = tb.as_torch(x, self.device)
        if xt.dtype == torch.float64:
            xt = xt.to(torch.float32)  # RNE, as fp4spec.prepare_input (and the RHT's step F1)
        out = quantize_packed(xt, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht,
                              config=self.config)
        codes = unpack_lo_first(out["packed"])  # (M, N): rows, quantized axis last
        scales = out["scales"]
        nd = max(xt.dim(), 1)
        ax = axis % nd
        if ax == nd - 1:
            codes = codes.reshape(xt.shape)
            scales = scales.reshape(*xt.shape[:-1], -1)
        g = out["global_scale"]
        extra = {} if rht is None else {"rht": rht}  # QuantizedTensor records the transform
        return QuantizedTensor.from_moved(tb._np(codes), tb._np(scales), None if g is None else np.float32(tb._np(g)),
                                          sch, ax, tuple(xt.shape), backend=self.name, **extra)

    def dequantize(self, q: QuantizedTensor) -> np.ndarray:
        import torch

        from .. import torch_backend as tb
        from .quantize import dequantize_packed

        m = q.moved()
        codes = torch.from_numpy(np.array(m["codes"], copy=True, order="C")).to(self.device)
        shape = codes.shape
        c2 = codes.reshape(-1, shape[-1])
        packed = (c2[:, 0::2] | (c2[:, 1::2] << 4)).contiguous()
        s2 = torch.from_numpy(np.array(m["scales"], copy=True, order="C")).to(self.device).reshape(c2.shape[0], -1)
        out = dequantize_packed(packed, s2, q.global_scale, q.scheme, config=self.config).reshape(shape)
        out = np.moveaxis(tb._np(out), -1, q.axis)
        return np.ascontiguousarray(out[tuple(slice(0, n) for n in q.shape)])

    def pack(self, codes) -> np.ndarray:
        from fp4spec.packing import pack

        return pack(np.asarray(codes), order="lo_first", axis=-1)

    def matmul(self, qa, qb, *, accumulator, c=None) -> np.ndarray:
        """C = A . B^T under ``accumulator`` (``"sm90-bf16"`` on Hopper): :mod:`.gemm`."""
        from .gemm import matmul

        return matmul(qa, qb, accumulator=accumulator, c=c, device=self.device, defaults=self.config)


__all__ = ["TritonBackend"]
