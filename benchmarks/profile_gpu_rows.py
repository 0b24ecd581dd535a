"""Launch the rowwise quantize kernels a few times on a 16384^2 bf16 tensor, for a profiler.

    ncu --clock-control none -k regex:quantize_rows --set full python benchmarks/profile_gpu_rows.py

Each kernel runs twice (JIT warm-up, then the profiled launch): nvfp4 (tensor scale given,
``rows``) and mxfp4 (``rows2d``), the defaults of ``quantize_packed``.
"""

import torch

from fp4spec.backends import torch_backend as tb
from fp4spec.backends import triton_backend as trb
from fp4spec.backends.base import resolve_scheme

x = torch.randn(16384, 16384, device="cuda").to(torch.bfloat16)
nv = resolve_scheme("nvfp4")
s_enc, s_dec = tb.tensor_scale(x.float().abs().amax(), nv)
for _ in range(2):
    trb.quantize_packed(x, nv, s_enc_dec=(s_enc, s_dec))
    trb.quantize_packed(x, "mxfp4")
torch.cuda.synchronize()
print("done")
