"""The step kernel of the certified GEMM (:mod:`..certify`, "fused steps"): NVIDIA's ``fdpa``
models with block scales (``sm100-mxf4nvf4``, ``sm100-mxf8f6f4``) one step at a time on
Hopper's bf16 tensor cores. Each step's dot product comes from a fresh MMA and is added to
the accumulator with one round-toward-zero addition; outputs whose step conditions fail
become NaN here and are recomputed by the caller. The proof is :mod:`..certify`'s.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemm import _as_dot_operand, limit_24, lsb_floor, tile_indices


@triton.jit
def _add_rz(x, y, RZ_ASM: tl.constexpr):
    """float32 x + y rounded toward zero (IEEE). RZ_ASM: the ``add.rz.f32`` instruction (NVIDIA);
    else TwoSum (s = RN(x + y) and its exact error e) and s moved one ulp toward zero when e
    points toward zero from s -- valid for finite sums (an overflow gives Inf or NaN)."""
    if RZ_ASM:
        s = tl.inline_asm_elementwise("add.rz.f32 $0, $1, $2;", "=f,f,f", [x, y], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        s = x + y
        bb = s - x
        err = (x - (s - bb)) + (y - bb)
        down = (err != 0.0) & ((err < 0.0) != (s < 0.0))
        s = tl.where(down, (s.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True), s)
    return s


@triton.jit
def _operand(p_ptr, rows, k0, sp, BR: tl.constexpr, BK: tl.constexpr, DOT_F32: tl.constexpr):
    """A BR x BK tile of a bf16 operand matrix (int16 bit patterns under the interpreter)."""
    x = tl.load(p_ptr + rows[:, None] * sp + (k0 + tl.arange(0, BK))[None, :])
    if DOT_F32:
        x = _as_dot_operand(x.to(tl.int32) & 0xFFFF, DOT_F32)
    return x


@triton.jit
def _step_dot(a_ptr, b_ptr, ra, rb, k0, sam, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              DOT_F32: tl.constexpr):
    """One step's exact dot product from a fresh MMA: the BM x BK tile of A times the BN x BK
    tile of B, transposed."""
    a = _operand(a_ptr, ra, k0, sam, BM, BK, DOT_F32)
    b = _operand(b_ptr, rb, k0, sbn, BN, BK, DOT_F32)
    if DOT_F32:
        return tl.dot(a, tl.trans(b), input_precision="ieee")
    else:
        return tl.dot(a, tl.trans(b))


def gemm_steps_kernel(a_ptr, b_ptr, c_ptr, g_ptr, out_ptr, la_ptr, lb_ptr, ha_ptr, hb_ptr, na_ptr, nb_ptr, bad_ptr,
                      M, N, K, sam, sbn, scm, som, F, EZ, inflate,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                      HAS_C: tl.constexpr, HAS_G: tl.constexpr, NAN: tl.constexpr, DOT_F32: tl.constexpr,
                      RZ_ASM: tl.constexpr, UNROLL: tl.constexpr):
    """One BM x BN tile of C = A . B^T (+ c) under a fused-step model with step BK
    (:mod:`..certify`, steps S1-S5). A (M x K) and B (N x K) are bf16 matrices of the
    operands' values; la/lb, ha/hb, na/nb the rows' statistics; ``bad_ptr[pid]`` gets 1 when
    an output of the tile is not proved (its value here is then NaN). UNROLL (1 or 2, K a
    multiple of UNROLL * BK): steps per loop iteration, their MMAs issued before the first RZ
    addition (the same steps in the same order)."""
    pid = tl.program_id(0)
    rm, rn, ra, rb, omask = tile_indices(pid, M, N, BM, BN, GROUP_M)
    rm64 = rm.to(tl.int64)
    la = tl.load(la_ptr + ra)
    lb = tl.load(lb_ptr + rb)
    lo = la[:, None] + lb[None, :]
    # S1: the conditions that hold for every step: (a) lo + F >= V, (d) each step's dot exact
    v = tl.maximum(tl.load(ha_ptr + ra)[:, None] + tl.load(hb_ptr + rb)[None, :], EZ)
    bound = tl.load(na_ptr + ra)[:, None] * tl.load(nb_ptr + rb)[None, :] * inflate + 7.174648137343064e-43
    ok = (lo + F >= v) & (lo >= -149) & (bound < limit_24(lo))
    if HAS_C:
        acc = tl.load(c_ptr + rm64[:, None] * scm + rn[None, :], mask=omask, other=0.0)
        cb = acc.to(tl.int32, bitcast=True)
        finite = ((cb >> 23) & 255) < 255
        ok &= ((cb & 0x7FFFFFFF) == 0) | ((lsb_floor(cb) >= lo) & finite)
        ok &= cb != -2147483648
    else:
        acc = tl.zeros((BM, BN), tl.float32)
    acc = tl.where(ok, acc, float("nan"))
    # S2 and S4 are checked once, after the loop, on the largest |acc| that entered a step:
    # two operations per output and step (a max, the RZ addition) instead of a test of each
    # step's exponent. A NaN acc stays NaN to the end.
    mx = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK * UNROLL):
        d = _step_dot(a_ptr, b_ptr, ra, rb, k0, sam, sbn, BM, BN, BK, DOT_F32)
        if UNROLL == 2:
            d2 = _step_dot(a_ptr, b_ptr, ra, rb, k0 + BK, sam, sbn, BM, BN, BK, DOT_F32)
        mx = tl.maximum(mx, tl.abs(acc))
        # S3: one RZ addition
        acc = _add_rz(acc, d, RZ_ASM)
        if UNROLL == 2:
            mx = tl.maximum(mx, tl.abs(acc))
            acc = _add_rz(acc, d2, RZ_ASM)
    # S2: (c) every accumulator entering a step had an exponent of at most lo + F
    e = ((mx.to(tl.int32, bitcast=True) >> 23) & 255) - 127
    fail = (e > lo + F) | (acc != acc)
    # S4: a sum of 2^128 or more is Inf in the model; RZ saturates at the largest float
    fail |= tl.maximum(mx, tl.abs(acc)) >= 3.4028234663852886e38
    acc = tl.where(fail, float("nan"), acc)
    tl.store(bad_ptr + pid, tl.max(tl.max(tl.where(fail & omask, 1, 0), axis=1), axis=0))
    # S5: the epilogue
    if HAS_G:
        acc = acc * tl.load(g_ptr)
    bits = tl.where(acc != acc, NAN, acc.to(tl.int32, bitcast=True))
    tl.store(out_ptr + rm64[:, None] * som + rn[None, :], bits, mask=omask)


# M, N, the c and output strides and the model's constants are plain runtime ints (one compile
# for every shape); K and the operand strides (multiples of the step, so of 16) are
# specialised: without their divisibility Triton cannot prove the operand loads aligned and
# does not pipeline them (no async copies in the TTGIR, every step waits for its loads).
gemm_steps_kernel = triton.jit(gemm_steps_kernel, do_not_specialize=["M", "N", "scm", "som", "F", "EZ"])
