"""Launch the fused RHT (mma) + quantize kernel and the plain rowwise kernel on a 16384^2 bf16
tensor, for a profiler (benchmarks/gpu_session.sh ncu with NCU_SCRIPT set to this file):

    ncu --clock-control none -k regex:"rows_rht_mma|rows_bf16" --section WarpStateStats ... \\
        python benchmarks/profile_gpu_rht_mma.py

Each runs twice (JIT warm-up, then the profiled launch): nvfp4 with the tensor scale given,
then the fused butterfly kernel (``fwht-fp32``, quantize_rows_rht_kernel) for comparison.
"""

import torch

from fp4spec.backends import torch_backend as tb
from fp4spec.backends.base import resolve_scheme
from fp4spec.backends.triton import mma, quantize_packed
from fp4spec.backends.triton.quantize import two_level_consts
from fp4spec.rht import RHT

x = torch.randn(16384, 16384, device="cuda").to(torch.bfloat16)
nv = resolve_scheme("nvfp4")
r = RHT.te(arith="mma:sm90-bf16")
sed = tb.tensor_scale(mma.rht_amax(x, r), nv)
ts = two_level_consts(nv, x.device, s_enc_dec=sed)
pk = torch.empty((16384, 8192), dtype=torch.uint8, device="cuda")
sc = torch.empty((16384, 1024), dtype=torch.uint8, device="cuda")
for _ in range(2):
    mma.mma_launcher(x, pk, sc, ts, nv, r)()
    quantize_packed(x, nv, s_enc_dec=sed)
    quantize_packed(x, nv, rht=RHT.te(), s_enc_dec=sed)
torch.cuda.synchronize()
print("done")
