"""NVFP4 (TransformerEngine's chain: E2M1 elements, blocks of 16, UE4M3 block scales, one float32
tensor scale) in plain torch on the CPU.

Check it:  fp4spec conform --backend docs/tutorial/nvfp4_torch.py:TorchNVFP4
"""

import numpy as np
import torch

import fp4spec
from fp4spec.backends import Backend, Capabilities
from mxfp4_torch import e2m1_rne  # the same element encoder (the file's folder is on sys.path)

FLT_MAX = torch.tensor(np.finfo(np.float32).max)
F32 = torch.float32


def one(v) -> torch.Tensor:
    return torch.tensor(v, dtype=F32)


class TorchNVFP4(Backend):
    name = "tutorial-torch-nvfp4"

    def capabilities(self):
        return Capabilities(schemes=["nvfp4"], rounding=["rne"], notes=f"torch {torch.__version__} CPU")

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        t = torch.from_numpy(x)
        blocks = t.reshape(*t.shape[:-1], -1, 16)
        g = t.abs().max() if t.numel() else one(0.0)               # tensor amax (NaN if any NaN)
        # 1. tensor scale. Trap: 2688.0 / g on a tensor is reciprocal(g) * 2688 in torch (two
        #    roundings); divide a tensor by a tensor.
        if g == 0 or not torch.isfinite(g):
            s_enc = one(1.0)
        else:
            s_enc = torch.minimum(one(448.0) * one(6.0) / g, FLT_MAX)
        s_dec = one(1.0) / s_enc
        # 2. block scales: s = vec_max * fp32(S_enc * fp32(1/6)), cast to E4M3 with RNE, saturating at 448
        mult = s_enc * (one(1.0) / one(6.0))
        vec_max = blocks.abs().amax(dim=-1)
        s = torch.minimum(torch.minimum(vec_max * mult, FLT_MAX), one(448.0))   # torch.minimum keeps NaN
        scale_codes = s.to(torch.float8_e4m3fn).view(torch.uint8)  # NaN -> 0x7F; never the sign bit
        # 3. elements: y = x * min(fp32(1 / fp32(s_decoded * S_dec)), FLT_MAX), clamped to +-6, -0 -> +0
        s_decoded = scale_codes.view(torch.float8_e4m3fn).to(F32)
        enc = torch.minimum(one(1.0) / (s_decoded * s_dec), FLT_MAX)
        y = (blocks * enc.unsqueeze(-1)).clamp(-6.0, 6.0) + 0.0    # TE maps an exact -0.0 to code 0
        codes = e2m1_rne(y).reshape(t.shape)
        return fp4spec.QuantizedTensor(codes.numpy(), scale_codes.numpy(), np.float32(s_dec.item()), scheme,
                                       x.ndim - 1, x.shape)
