"""torchao 0.18's real quantizers as conformance backends: ``to_mx`` and ``nvfp4_quantize``, CPU eager.

Nothing falls back to fp4spec: every input ``fp4spec conform`` draws goes to torchao, and its
codes and scale bytes come back as they are (FP4 codes unpacked from torchao's two per byte,
FP6/FP8 codes viewed as bytes, scales viewed as uint8). A profile is a claim that an
implementation computes these bits, so the backends below claim ``profile=torchao`` -- or, to
show what the claim of another profile gets, the OCP and TE profiles.

    PYTHONPATH=. fp4spec conform --backend tests.conformance.torchao_backends:TorchaoMxFloor
"""

from __future__ import annotations

import numpy as np

from fp4spec.backends import Availability, Backend, Capabilities
from fp4spec.quantized import QuantizedTensor

MX_ELEMENTS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2")


def _torchao():
    import torch  # noqa: F401
    from torchao.prototype.mx_formats import mx_tensor, nvfp4_tensor
    from torchao.prototype.mx_formats.kernels import unpack_uint4

    return mx_tensor, nvfp4_tensor, unpack_uint4


class _Torchao(Backend):
    def is_available(self):
        try:
            import torchao

            _torchao()
        except Exception as exc:  # noqa: BLE001 -- not installed, or an incompatible torch
            return Availability.no(f"torchao is not importable: {exc}")
        return Availability.yes(f"torchao {torchao.__version__}, CPU eager")


class _TorchaoMx(_Torchao):
    """``to_mx(x, element, 32, mode)`` for the five MX element formats."""

    rule = "floor"
    claim = "torchao"  # the profile the schemes are claimed under

    def capabilities(self):
        parts = [] if self.claim == "ocp" else [f"profile={self.claim}"]
        if self.rule != "floor":
            parts.append(f"scale_rule={self.rule}")
        suffix = (":" + ",".join(parts)) if parts else ""
        return Capabilities(schemes=[e + suffix for e in MX_ELEMENTS], rounding=["rne"],
                            notes=f"torchao to_mx, ScaleCalculationMode.{self.rule.upper()}")

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        import torch

        mx_tensor, _, unpack_uint4 = _torchao()
        elements = {"e2m1": torch.float4_e2m1fn_x2, "e2m3": "fp6_e2m3", "e3m2": "fp6_e3m2",
                    "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
        mode = getattr(mx_tensor.ScaleCalculationMode, scheme.scale_rule.upper())
        t = torch.from_numpy(np.ascontiguousarray(x, np.float32))
        scale, data = mx_tensor.to_mx(t, elements[scheme.element.name], scheme.block_size, mode)
        codes = unpack_uint4(data.view(torch.uint8)) if scheme.element.name == "e2m1" else data.view(torch.uint8)
        return QuantizedTensor(codes.numpy().reshape(x.shape), scale.view(torch.uint8).numpy().reshape(
            x.shape[:-1] + (x.shape[-1] // scheme.block_size,)), None, scheme, x.ndim - 1, x.shape)


class TorchaoMxFloor(_TorchaoMx):
    name = "torchao-to_mx-floor"


class TorchaoMxCeil(_TorchaoMx):
    name, rule = "torchao-to_mx-ceil", "ceil"


class TorchaoMxEven(_TorchaoMx):
    name, rule = "torchao-to_mx-even", "even"


class TorchaoMxRceil(_TorchaoMx):
    name, rule = "torchao-to_mx-rceil", "rceil"


class TorchaoMxClaimedOcp(_TorchaoMx):
    """torchao's FLOOR claimed as the OCP profile (fp4spec's reading of OCP MX v1.0)."""

    name, claim = "torchao-to_mx-as-ocp", "ocp"


class _TorchaoNvfp4(_Torchao):
    """``nvfp4_quantize(x, 16, per_tensor_amax_to_scale(amax))``: codes, scales, the per-tensor scale."""

    claim = "torchao"

    def capabilities(self):
        return Capabilities(schemes=["nvfp4" if self.claim == "te" else f"nvfp4:profile={self.claim}"],
                            rounding=["rne"], notes="torchao nvfp4_quantize")

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        import torch

        _, nvfp4_tensor, unpack_uint4 = _torchao()
        t = torch.from_numpy(np.ascontiguousarray(x, np.float32))
        pts = nvfp4_tensor.per_tensor_amax_to_scale(t.abs().max())
        scale, data = nvfp4_tensor.nvfp4_quantize(t, scheme.block_size, pts)
        return QuantizedTensor(unpack_uint4(data.view(torch.uint8)).numpy().reshape(x.shape),
                               scale.view(torch.uint8).numpy().reshape(x.shape[:-1] + (x.shape[-1] // 16,)),
                               np.float32(pts.item()), scheme, x.ndim - 1, x.shape)


class TorchaoNvfp4(_TorchaoNvfp4):
    name = "torchao-nvfp4_quantize"


class TorchaoNvfp4ClaimedTe(_TorchaoNvfp4):
    name, claim = "torchao-nvfp4_quantize-as-te", "te"


MX = (TorchaoMxFloor, TorchaoMxCeil, TorchaoMxEven, TorchaoMxRceil)
