"""MXFP4 (OCP MX v1.0: E2M1 elements, blocks of 32, E8M0 scales, floor rule) in plain torch on the CPU.

Check it:  fp4spec conform --backend docs/tutorial/mxfp4_torch.py:TorchMXFP4
"""

import torch

import fp4spec
from fp4spec.backends import Backend, Capabilities

# E2M1 midpoints between magnitude codes i and i + 1 (0, 0.5, 1, 1.5, 2, 3, 4, 6)
MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def e2m1_rne(y: torch.Tensor) -> torch.Tensor:
    """E2M1 codes of float32 y: round to nearest, ties to the even code, saturate at 6; NaN -> 0."""
    a = y.abs()
    idx = torch.zeros(y.shape, dtype=torch.uint8)
    for i, m in enumerate(MIDPOINTS):  # a tie goes to the even code: i even keeps it (>), i odd passes it (>=)
        idx += (a > m) if i % 2 == 0 else (a >= m)
    sign = torch.signbit(y) & ~torch.isnan(y)  # -0.0 keeps its sign (code 0x8); NaN becomes +0
    return idx | (sign.to(torch.uint8) << 3)


class TorchMXFP4(Backend):
    name = "tutorial-torch-mxfp4"

    def capabilities(self):
        return Capabilities(schemes=["mxfp4"], rounding=["rne"], notes=f"torch {torch.__version__} CPU")

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        t = torch.from_numpy(x)                                   # float32, blocks along the last axis
        blocks = t.reshape(*t.shape[:-1], -1, 32)
        amax = blocks.abs().amax(dim=-1)                          # NaN if the block holds a NaN
        field = (amax.view(torch.int32) >> 23) & 0xFF             # exponent bits: floor(log2 amax) + 127
        e = (field - 127 - 2).clamp(-127, 127)                    # floor rule, emax(E2M1) = 2
        nan_scale = field == 0xFF                                 # NaN or Inf amax (OCP profile)
        scales = torch.where(nan_scale, 0xFF, e + 127).to(torch.uint8)
        mult = torch.where(nan_scale, 0.0, torch.exp2((-e).to(torch.float32)))  # 2^-e; a NaN block: x * 0
        y = blocks * mult.unsqueeze(-1)                           # exact but for float32 subnormals
        codes = e2m1_rne(y).reshape(t.shape)
        return fp4spec.QuantizedTensor(codes.numpy(), scales.numpy(), None, scheme, x.ndim - 1, x.shape)
