"""Experiments that nothing ships: two rowwise bf16 -> E2M1 layouts that lost to the shipped
``rows_bf16`` kernel on the H200 (benchmarks/RESULTS.md: ``pair`` 0.194 ms / 82.9 % of copy for
nvfp4, ``tbp`` 0.221 ms / 72.9 %, against 0.185 ms for ``rows_bf16``). Timed by
benchmarks/bench_gpu_rows.py; bit-exact with quantize_packed when they left the package (the
tests of that commit), not tested since.

* ``pair`` -- a [BR, K/8, 4] int32 tile (16 bytes per thread, a warp reads 512 contiguous
  bytes per load): K/8 threads per block, amax by a cross-thread max, one int32 of codes per
  thread (a warp writes 128 contiguous bytes).
* ``tbp`` -- the ``rows_bf16`` tile in a persistent grid (a fixed number of programs loop over
  tiles).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from fp4spec.backends.triton.kernels.primitives import (_amax2, _block_scale, _mult_b, _needs_exact, _unpack,
                                                        _word_codes, _word_codes_exact)
from fp4spec.backends.triton.kernels.rowwise import _rows_bf16_tile
from fp4spec.backends.triton.launch import scheme_flags

VARIANTS = ("pair", "tbp")
#: Default tiles: blocks per program and warps (untuned guesses); programs per SM of ``tbp``.
DEFAULTS = {"pair": (256, 8), "tbp": (256, 4)}
PERSISTENT_PER_SM = 8


@triton.jit
def rows_tbp_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK, NTILES,
                    BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                    EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr = True):
    """Persistent grid: program p does tiles p, p + P, p + 2P, ..."""
    mult_b = _mult_b(ts_ptr, MX)
    for tile in range(tl.program_id(0), NTILES, tl.num_programs(0)):
        _rows_bf16_tile(x_ptr, q_ptr, s_ptr, ts_ptr, mult_b, tile, NBLK,
                        BR, K, EVEN, MX, RULE, EMAX, NAN_INF, SCALING, SLOW)


@triton.jit
def rows_pair_kernel(x_ptr, q_ptr, s_ptr, ts_ptr, NBLK,
                     BR: tl.constexpr, K: tl.constexpr, EVEN: tl.constexpr, MX: tl.constexpr, RULE: tl.constexpr,
                     EMAX: tl.constexpr, NAN_INF: tl.constexpr, SCALING: tl.constexpr, SLOW: tl.constexpr = True):
    H: tl.constexpr = K // 8
    mult_b = _mult_b(ts_ptr, MX)
    r = tl.arange(0, BR)
    blk0 = tl.program_id(0).to(tl.int64) * BR
    offs = (r[:, None, None] * H + tl.arange(0, H)[None, :, None]) * 4 + tl.arange(0, 4)[None, None, :]
    xb = x_ptr + blk0 * (K // 2)
    if EVEN:
        w = tl.load(xb + offs)
    else:
        m1d = (blk0 + r) < NBLK
        w = tl.load(xb + offs, mask=m1d[:, None, None], other=0)
    lo, hi = _unpack(w)
    am = tl.max(_amax2(lo, hi).to(tl.int32, bitcast=True), axis=2)
    vmb = tl.max(am, axis=1)
    scode, mult, nan_scale = _block_scale(vmb, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING)
    mb = mult[:, None, None]
    q = _word_codes(w, mb, mb * 0.5, mb * 0.25, MX)  # [BR, H]
    if SLOW:
        if tl.max(_needs_exact(mult, nan_scale, MX).to(tl.int32), axis=0) != 0:
            q = _word_codes_exact(w, mb, MX)
    if not MX:
        q = tl.where(nan_scale[:, None], 0, q)
    oq = r[:, None] * H + tl.arange(0, H)[None, :]
    qb = q_ptr + blk0 * H
    if EVEN:
        tl.store(qb + oq, q)
        tl.store(s_ptr + blk0 + r, scode.to(tl.uint8))
    else:
        tl.store(qb + oq, q, mask=m1d[:, None])
        tl.store(s_ptr + blk0 + r, scode.to(tl.uint8), mask=m1d)


def launcher(x2, packed, scales, ts, sch, *, variant="pair", BR=None, num_warps=None, programs_per_sm=None):
    """A function that runs one experiment on given buffers (as
    ``fp4spec.backends.triton.launch.rows_bf16_launcher``: x2 contiguous bf16 (M, N), packed
    (M, N/2), scales (M, N/K), ts the call's constants) and returns triton's compiled kernel."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: {variant!r} is not one of {', '.join(VARIANTS)}")
    K = sch.block_size
    nblk = x2.numel() // K
    br0, w0 = DEFAULTS[variant]
    br = BR or br0
    ntiles = triton.cdiv(nblk, br)
    args = (x2.view(torch.int32), packed.view(torch.int32), scales, ts, nblk)
    flags = scheme_flags(sch)
    flags.update(BR=br, K=K, EVEN=nblk % br == 0, SLOW=True, num_warps=num_warps or w0)
    if variant == "tbp":
        sms = torch.cuda.get_device_properties(x2.device).multi_processor_count if x2.is_cuda else 4
        kernel, grid = rows_tbp_kernel, (min(ntiles, sms * (programs_per_sm or PERSISTENT_PER_SM)),)
        args = args + (ntiles,)
    else:
        kernel, grid = rows_pair_kernel, (ntiles,)

    def launch():
        if nblk:
            return kernel[grid](*args, **flags)

    return launch


__all__ = ["DEFAULTS", "VARIANTS", "launcher", "rows_pair_kernel", "rows_tbp_kernel"]
