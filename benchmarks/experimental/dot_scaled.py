"""Experiment (not claimed): the MXFP4 x MXFP4 GEMM through ``tl.dot_scaled`` (E2M1, E8M0
blocks of 32; Triton upcasts to bf16 on Hopper). Not bit-identical to the ``sm90-bf16`` model
and slower than the shipped GEMM on the H200 (benchmarks/RESULTS.md: 15.8 % of bf16; 3
differences in 237,568 outputs: wide scale ranges and subnormals). Timed by benchmarks/bench_gpu_gemm.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp4spec.backends.triton.gemm import NAN_BITS, _check_packed
from fp4spec.backends.triton.kernels.gemm import tile_indices


@triton.jit
def dot_scaled_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, out_ptr, zero, M, N, K, sam, sas, sbn, sbs, scm, som,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                      HAS_C: tl.constexpr, NAN: tl.constexpr):
    """Experiment, not claimed: the same GEMM through ``tl.dot_scaled`` (E2M1 x E2M1, E8M0
    blocks of 32; Triton upcasts to bf16 on Hopper). Compared with the model by the
    benchmark only."""
    rm, rn, ra, rb, omask = tile_indices(tl.program_id(0), M, N, BM, BN, GROUP_M)
    rm64 = rm.to(tl.int64)
    if HAS_C:
        acc = tl.load(c_ptr + rm64[:, None] * scm + rn[None, :], mask=omask, other=0.0)
    else:
        acc = tl.full((BM, BN), zero, tl.float32)
    kb = tl.arange(0, BK // 2)
    ks = tl.arange(0, BK // 32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + ra[:, None] * sam + (k0 // 2 + kb)[None, :])
        sa = tl.load(as_ptr + ra[:, None] * sas + (k0 // 32 + ks)[None, :])
        b = tl.load(b_ptr + rb[None, :] * sbn + (k0 // 2 + kb)[:, None])
        sb = tl.load(bs_ptr + rb[:, None] * sbs + (k0 // 32 + ks)[None, :])
        acc = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1", acc)
    bits = tl.where(acc != acc, NAN, acc.to(tl.int32, bitcast=True))
    tl.store(out_ptr + rm64[:, None] * som + rn[None, :], bits, mask=omask)


def matmul_dot_scaled(a_packed, a_scales, b_packed, b_scales, *, c=None, BM=128, BN=128, BK=128, GROUP_M=8,
                      num_warps=8, num_stages=3):
    """Experiment (not claimed, not used by :func:`matmul`): MXFP4 x MXFP4 (E2M1, E8M0 blocks
    of 32) through ``tl.dot_scaled``, float32 out, NaN as 0x7FFFFFFF. The benchmark compares
    it with the sm90-bf16 model; use :func:`matmul_packed` for bit-exact results."""
    dev = a_packed.device
    m, k = _check_packed("a", a_packed, a_scales, 32, dev)
    n, _ = _check_packed("b", b_packed, b_scales, 32, dev)
    bk = BK
    while k % bk:
        bk //= 2
    if bk < 32:
        raise ValueError(f"a_packed: K = {k} is not a multiple of 32")
    bm = min(BM, max(16, triton.next_power_of_2(m)))
    bn = min(BN, max(16, triton.next_power_of_2(n)))
    out = torch.empty((m, n), dtype=torch.float32, device=dev)
    ov = out.view(torch.int32)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    dot_scaled_kernel[grid](a_packed, a_scales, b_packed, b_scales, ov if c is None else c, ov, 0.0, m, n, k,
                            a_packed.stride(0), a_scales.stride(0), b_packed.stride(0), b_scales.stride(0),
                            0 if c is None else c.stride(0), out.stride(0), BM=bm, BN=bn, BK=bk, GROUP_M=GROUP_M,
                            HAS_C=c is not None, NAN=NAN_BITS, num_warps=num_warps, num_stages=num_stages)
    return out


__all__ = ["dot_scaled_kernel", "matmul_dot_scaled"]

