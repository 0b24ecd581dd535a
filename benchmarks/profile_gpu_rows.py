"""Launch the rowwise quantize kernels a few times on a 16384^2 bf16 tensor, for a profiler.

    ncu --clock-control none -k regex:quantize_rows --set full python benchmarks/profile_gpu_rows.py

Each kernel runs twice (JIT warm-up, then the profiled launch): nvfp4 (tensor scale given) and
mxfp4, the defaults of ``quantize_packed`` (variant ``rows_bf16``).
"""

import torch

from fp4spec.backends import torch_backend as tb
from fp4spec.backends.base import resolve_scheme
from fp4spec.backends.triton import quantize_packed

x = torch.randn(16384, 16384, device="cuda").to(torch.bfloat16)
nv = resolve_scheme("nvfp4")
s_enc, s_dec = tb.tensor_scale(x.float().abs().amax(), nv)
for _ in range(2):
    quantize_packed(x, nv, s_enc_dec=(s_enc, s_dec))
    quantize_packed(x, "mxfp4")
torch.cuda.synchronize()
print("done")
