"""Other accumulator models on Hopper's bf16 tensor cores, bit for bit, by certificate.

The triton GEMM computes ``sm90-bf16`` (:mod:`.gemm`). For ``exact`` and ``fp32`` it runs
the same kernel and proves, per output, that the result is also theirs (the certificate
below); for ``sm100-mxf4nvf4`` and ``sm100-mxf8f6f4`` a step kernel adds each model step's
exact dot product to the accumulator with one round-toward-zero addition, where it proves
the model's truncation drops nothing (the step kernel, below). Outputs neither can prove are
recomputed by the emulator on the CPU (with a :class:`~fp4spec.backends.base.HostFallbackWarning`
that counts them). The step kernel proves every output of typical data (random MXFP4 and
NVFP4 operands, 8192^3, on an H200); the certificate proves an output only when its exact
sum fits float32 (most MXFP4 outputs, few NVFP4 ones at K in the thousands). Adversarial
data (scales 2^-127 beside 2^127, exact cancellations at the truncation width, subnormal
results) goes to the emulator.

**The certificate.** For row i of A let ``la_i`` be a lower bound of the lsb exponent of its
nonzero values (element lsb + the block scale's lsb: every value ``element * scale`` is a
multiple of ``2^la_i``) and likewise ``lb_j`` for row j of B; ``lo = la_i + lb_j``, lowered
to a lower bound of the lsb of c (its exponent - 23) when c is given. Cut K into tiles of SB
elements (a multiple of the kernel's K step BK and of the block sizes); ``na_i`` is the
largest Euclidean norm of row i's values over one K tile, ``nb_j`` likewise. The kernel keeps
``mx``, the largest ``|acc|`` it holds at the boundaries of its BK steps (c, every step's
result, the final result). An output is *certified* when

    mx + na_i nb_j < 2^min(lo + 24, 128)     and     lo >= max(-149, e_zero - F)

(the kernel inflates the left side by ``inflate`` and adds 2^-140, covering the rounding of
its float32 evaluation and of the statistics).

**Theorem.** A certified output is the same float32 under ``sm90-bf16`` (what the kernel
computes), ``exact``, ``fp32`` (ascending FMAs of float32 operands), ``sm100-mxf4nvf4`` and
``sm100-mxf8f6f4``: the exact value ``c + sum_k a_ik b_jk``, +0 when that is zero.

Proof. Every product ``a_ik b_jk`` (and c) is a multiple of ``2^lo``, and so is every sum of
them. By induction over the BK steps, the accumulator at each step boundary is the exact
partial sum (the first is c). Every partial sum S that ends inside the step after boundary
t satisfies ``|S| <= |acc_t| + sum over the step of |a_ik b_jk| <= mx + na_i nb_j <
2^(lo+24)`` (Cauchy-Schwarz over the K tile holding the step), and so does every term of a
model's step (a product, a group sum of ``sm100-mxf4nvf4``, the accumulator). A multiple of
``2^lo`` below ``2^(lo+24)`` in magnitude with ``lo >= -149`` is a float32 (24 significant
bits; subnormals reach 2^-149). Every model's step boundaries (16, 32 or 64 elements of K,
or each element) fall on sums of this kind. Hence:

1. ``exact``: the exact sum is a float32; rounding it once returns it.
2. ``fp32``: the operands ``fp32(element * scale)`` are exact (at most 6 significant bits;
   a certified row has no value below 2^-60 and no square of 2^128 or more), so each FMA's
   exact result is a partial sum, a float32: no FMA rounds.
3. ``fdpa`` models: a step aligns its terms to e_max, the largest *assigned* exponent, and
   truncates to F fractional bits below it. The accumulator's exponent is its own, at most
   lo + 23. A term's assigned exponent can exceed the exponent of its value, by at most
   D (:func:`exponent_excess`): for ``product`` terms the element and scale formats'
   subnormals are assigned their format's minimum exponent (E2M1's 0.5: 1 bit), for
   ``group`` terms the exponent is the two scales' (a group with a nonzero product holds
   one of at least vmin_a vmin_b sa sb, and a subnormal UE4M3 scale is assigned -6: 3 bits),
   for ``bf16_operand`` terms D = 0 (a certified row has no bf16 subnormal). Every single
   product is below 2^(lo+24) too (it is part of the sum the bound covers), so a term's
   assigned exponent is at most lo + 23 + D; a zero term gets e_zero. With F >= 23 + D
   (``sm90-bf16``: D = 0, F = 25; ``sm100-mxf8f6f4`` with E2M1: D = 2, F = 25;
   ``sm100-mxf4nvf4``: D <= 8, F = 35; checked for the operands' formats, else nothing is
   certified) and e_zero - F <= lo, e_max - F <= lo: the truncation drops no bit of a
   multiple of 2^lo. The step's exact sum is a partial sum, a float32, so RZ and RNE both
   return it; an exact zero is +0 in every model (the NVIDIA models always give +0; IEEE
   gives +0 for x + (-x) and for +0 + -0, and the accumulator starts at +0 -- a c of -0 is
   never certified).

So the kernel's accumulator at each boundary is indeed the exact partial sum (the
induction), and the results agree before the epilogue, which is the same ``fp32(acc * g)``
in every model (``exact``: ``RNE(sum * g)``, the same number since the sum is a float32).
NaN and Inf never pass (their squares are not finite). The bound holds whatever order the
hardware sums in, so the certificate does not depend on Hopper's internal order either.

**The step kernel** (:mod:`.kernels.gemm_steps`) computes the ``fdpa`` models with block
scales (``sm100-mxf4nvf4``, ``sm100-mxf8f6f4``) when their partial sums need more than 24
bits -- typical for NVFP4, whose products carry up to 12 significant bits -- one model step
(k_step elements of K) at a time:

S1. Per output, once: lo = la_i + lb_j; V = max(ha_i + hb_j, e_zero) with ha the row's largest
    *assigned* term exponent (the scales' exponents for ``group`` terms, plus the element
    format's largest for ``product`` terms); proceed only if (a) lo + F >= V, (d)
    na_i nb_j < 2^min(lo + 24, 128) (na now over K tiles of one step) and lo >= -149; c, if
    given, a finite multiple of 2^lo (not -0). Else the output is NaN (recomputed).
S2. (c) Every accumulator entering a step has an exponent of at most lo + F, else NaN
    (the kernel keeps the largest |acc| that entered a step and tests it once, after the
    last step).
S3. D = the step's dot product from a fresh MMA; acc = RZ(acc + D), one IEEE
    round-toward-zero addition (``add.rz.f32``; TwoSum under the interpreter).
S4. An accumulator (entering a step, or the result) at the largest float32 or above: NaN
    (the model's Inf, or an RZ that saturated).
S5. The epilogue of the models, ``fp32(acc * g)``.

Proof that a non-NaN output is the model's. D is exact: each product is exact and, by (d)
and Cauchy-Schwarz, every partial sum of the step's products is a multiple of 2^lo below
2^(lo+24), so Hopper's chain of k = 16 instructions computes them exactly (the argument of
the theorem, F = 25). By induction the accumulator entering a step is a multiple of 2^lo: c
by S1; a step's result RZ(S) of a multiple S of 2^lo is S itself when |S| < 2^(lo+24), else
at least 2^(lo+24) in magnitude, with an ulp of at least 2^(lo+1). The model's step aligns
the accumulator and its terms to e_max = max(e(acc), assigned exponents, e_zero) <=
max(lo + F, V) = lo + F by (c) and (a), and truncates below 2^(e_max - F) <= 2^lo: no bit of
the terms (sums of products, multiples of 2^lo) or of the accumulator is dropped, so its
exact sum is acc + D and its result RZ(acc + D), which S3 computes; an exact zero is +0 in
both. S4 leaves the overflowing sums to the emulator.

The statistics come from one pass over the bf16 operand values
(:func:`.kernels.gemm.operand_stats_kernel`; exact: the ``sm90-bf16`` operands equal
``element * scale`` wherever a row is certified), in float32: a block counts as nonzero by
its largest magnitude (exact), rows with a nonzero value below 2^-60, a non-finite value or
a square of 2^128 or more get ``la = -2^20`` (never certified), so no square of a certified
row underflows; the sums of at most SB <= 256 squares, the square roots and the kernel's
bound err by less than ``inflate - 1`` relatively.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings

import numpy as np

from fp4spec.backends.base import HostFallbackWarning

#: Models the triton GEMM computes by certificate (``sm90-bf16`` runs without one).
CERTIFIED = ("exact", "fp32", "sm100-mxf4nvf4", "sm100-mxf8f6f4")
#: la of a row that is never certified.
NEVER = -(1 << 20)
#: Rows whose smallest nonzero lsb is below this are not certified (their squares could
#: underflow float32).
LSB_MIN = -60
#: The relative inflation of the kernel's bound: sums of at most 256 squares err by at most
#: 256 u (u = 2^-24), the square roots, the product and the sum by a few u more.
INFLATE = 1.0 + 2.0 ** -14
#: Rows per program of the statistics kernel.
STATS_ROWS = 16
#: Columns per program of the statistics kernel (rounded down to a multiple of its K tile).
STATS_K = 1024


@dataclasses.dataclass
class Certificate:
    """The kernel's certificate inputs (:mod:`.certify`) and its output ``bad`` (int32, one
    flag per output tile, in the kernel's tile order)."""

    la: object
    lb: object
    na: object
    nb: object
    bad: object
    lo_min: int

    def kernel_args(self) -> tuple:
        return (self.la, self.lb, self.na, self.nb, self.bad, self.lo_min, INFLATE)


def _excess(fmt) -> int:
    """The most a nonzero value's assigned exponent (the emulator's, :func:`fp4spec.accumulator_models.format_carrier`:
    its format's minimum normal exponent for subnormals) exceeds floor(log2 |value|)."""
    from fp4spec.accumulator_models import format_carrier

    vals = np.abs(np.asarray(fmt.values, np.float64))
    vals = vals[np.isfinite(vals) & (vals > 0)]
    floor = np.floor(np.log2(vals)).astype(np.int64)
    return int(np.max(np.maximum(floor, format_carrier(fmt).emin) - floor))


def exponent_excess(model, scheme_a, scheme_b) -> int:
    """D of the module docstring: how far a term's assigned exponent can exceed the exponent of
    its largest nonzero product (0 for the models without assigned exponents)."""
    if model.algorithm != "fdpa" or model.scales in ("bf16_operand", "fp32_operand"):
        return 0
    d = _excess(scheme_a.scale) + _excess(scheme_b.scale)
    if model.scales == "product":
        return d + _excess(scheme_a.element) + _excess(scheme_b.element)
    vmin = [float(np.min(np.abs(v)[np.abs(v) > 0])) for v in (np.asarray(scheme_a.element.values, np.float64),
                                                             np.asarray(scheme_b.element.values, np.float64))]
    return d + sum(max(0, int(-np.floor(np.log2(v)))) for v in vmin)


def lo_min(model, scheme_a=None, scheme_b=None) -> int:
    """The smallest certified lo: -149 (float32's smallest lsb), and e_zero - F for ``fdpa``;
    nothing is certified (2^20) where F < 23 + D (:func:`exponent_excess`)."""
    lo = -149
    if model.algorithm == "fdpa":
        if scheme_a is not None and model.frac_bits < 23 + exponent_excess(model, scheme_a, scheme_b):
            return 1 << 20
        if model.e_zero is not None:
            lo = max(lo, model.e_zero - model.frac_bits)
    return lo


@functools.lru_cache(maxsize=None)
def element_lsb(element) -> int:
    """The smallest lsb exponent of the format's nonzero finite values."""
    vals = np.abs(np.asarray(element.values, np.float64))
    out = []
    for v in vals[np.isfinite(vals) & (vals > 0)]:
        m, e = math.frexp(float(v))
        mi = int(m * 2.0 ** 53)
        out.append(e - 53 + (mi & -mi).bit_length() - 1)
    return min(out)


@functools.lru_cache(maxsize=None)
def element_emax(element) -> int:
    """The largest exponent the emulator assigns a nonzero value of the format (its format's
    minimum normal exponent for subnormals)."""
    from fp4spec.accumulator_models import format_carrier

    vals = np.abs(np.asarray(element.values, np.float64))
    vals = vals[np.isfinite(vals) & (vals > 0)]
    return int(max(np.max(np.floor(np.log2(vals))), format_carrier(element).emin))


def operand_stats(x, scales, scheme, sb: int, terms: str | None = None):
    """(la int32 (R,), na float32 (R,)) of an operand (:func:`.kernels.gemm.operand_stats_kernel`):
    x its bf16 values (R x K, or their int16 bit patterns), scales its scale codes. With
    ``terms`` (``"group"`` or ``"product"``, the model's terms), also ha int32 (R,): the rows'
    largest assigned term exponent (scale exponent, plus the element's largest for products)."""
    import torch
    import triton

    from .kernels import gemm as gk

    r, k = x.shape
    la = torch.full((r,), 1 << 20, dtype=torch.int32, device=x.device)
    na = torch.zeros(r, dtype=torch.int32, device=x.device)  # float32 bit patterns (atomic max)
    ha = torch.full((r if terms else 1,), -(1 << 20), dtype=torch.int32, device=x.device)
    bits = x.view(torch.int16)
    kch = max(sb, STATS_K // sb * sb)
    gk.operand_stats_kernel[(triton.cdiv(r, STATS_ROWS), triton.cdiv(k, kch))](
        bits, scales, la, na, ha, r, k, bits.stride(0), scales.stride(0), kch, BR=STATS_ROWS, SB=sb,
        BLOCK=scheme.block_size, SCALE=1 if scheme.scale.name == "ue4m3" else 0, ELSB=element_lsb(scheme.element),
        LSB_MIN=LSB_MIN, HA={None: 0, "group": 1, "product": 2}[terms],
        EMAX=element_emax(scheme.element) if terms == "product" else 0, num_warps=4)
    na = na.view(torch.float32)
    return (la, na, ha) if terms else (la, na)


def certifier(model, scheme_a, scheme_b):
    """The ``certify`` argument of :func:`.gemm.matmul_packed` for ``model``: a function of
    (A's bf16 values, A's scale codes, B's, tile BM, BN, BK, any_shape) returning the
    :class:`Certificate` inputs (``bad`` zeroed)."""
    import torch

    low = lo_min(model, scheme_a, scheme_b)

    def certify(xa, sa, xb, sb, bm, bn, bk, any_shape):
        tile = max(bk, scheme_a.block_size, scheme_b.block_size)  # powers of two: a multiple of each
        la, na = operand_stats(xa, sa, scheme_a, tile)
        lb, nb = operand_stats(xb, sb, scheme_b, tile)
        tiles = -(-xa.shape[0] // bm) * -(-xb.shape[0] // bn)
        bad = torch.zeros(tiles, dtype=torch.int32, device=xa.device)
        return Certificate(la, lb, na, nb, bad, low)

    return certify


def stepped(model) -> bool:
    """True for the models the step kernel computes (``fdpa`` with block scales in the terms)."""
    return model.algorithm == "fdpa" and model.scales in ("group", "product")


def matmul_steps(xa, a_scales, xb, b_scales, schemes, model, *, g=None, c=None, small: bool = False,
                 tile: int | None = None, num_warps: int | None = None, rz_asm: bool | None = None,
                 unroll: int | None = None):
    """C = A . B^T (+ c) under a fused-step model (:func:`stepped`) by the step kernel: xa, xb
    the operands' bf16 values (:func:`.gemm.dequantize_bf16`), scale codes beside them, g the
    float32 tensor-scale product (a one-element tensor) or None, c None or float32 (M, N).
    Returns (out float32 (M, N), the :class:`Certificate` with ``bad`` per tile, (BM, BN,
    GROUP_M)). ``small``: 64 x 64 tiles (else 128 x 64); ``tile`` (BM or (BM, BN)),
    ``num_warps``, ``rz_asm``, ``unroll`` (steps per loop iteration, 1 or 2; default 1): overrides
    for benchmarks (the bits do not depend on them)."""
    import torch
    import triton

    from .capability import interpret
    from .kernels import gemm_steps as gs

    sa, sb = schemes
    k = xa.shape[1]
    step = model.k_step
    la, na, ha = operand_stats(xa, a_scales, sa, step, model.scales)
    lb, nb, hb = operand_stats(xb, b_scales, sb, step, model.scales)
    m, n = xa.shape[0], xb.shape[0]
    # 128 x 64 tiles of 4 warps: 3.10-3.40 ms at 8192^3 on the H200, against 3.14-3.53 for
    # 128 x 128 of 8 warps and 4.2-4.4 for 64 x 64 (benchmarks/bench_gpu_steps.py)
    bm, bn = (tile if isinstance(tile, tuple) else (tile, tile) if tile else (64, 64) if small else (128, 64))
    group_m = 8
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    bad = torch.zeros(tiles, dtype=torch.int32, device=xa.device)
    out = torch.empty((m, n), dtype=torch.float32, device=xa.device)
    interp = interpret()
    ia, ib = (xa.view(torch.int16), xb.view(torch.int16)) if interp else (xa, xb)
    nan = model.nan_bits - (1 << 32) if model.nan_bits >= 1 << 31 else model.nan_bits
    gs.gemm_steps_kernel[(tiles,)](
        ia, ib, out if c is None else c, out if g is None else g, out.view(torch.int32), la, lb, ha, hb, na, nb, bad,
        m, n, k, k, k, 0 if c is None else c.stride(0), out.stride(0), model.frac_bits, model.e_zero, INFLATE,
        BM=bm, BN=bn, BK=step, GROUP_M=group_m, HAS_C=c is not None, HAS_G=g is not None, NAN=nan,
        DOT_F32=interp, RZ_ASM=(not interp) if rz_asm is None else rz_asm,
        UNROLL=(unroll or 1) if k % ((unroll or 1) * step) == 0 else 1,
        num_warps=num_warps or (4 if bm * bn <= 128 * 64 else 8), num_stages=3)
    return out, Certificate(la, lb, na, nb, bad, -149), (bm, bn, group_m)


def tile_blocks(bad, m: int, n: int, bm: int, bn: int, group_m: int) -> dict:
    """{tile row: [tile columns]} of the flagged tiles (``bad`` as numpy), inverting the
    kernel's grouped tile order."""
    num_m, num_n = -(-m // bm), -(-n // bn)
    out: dict = {}
    for pid in np.flatnonzero(bad):
        per_group = group_m * num_n
        first_m = (pid // per_group) * group_m
        size_m = min(num_m - first_m, group_m)
        pid_m = first_m + (pid % per_group) % size_m
        pid_n = (pid % per_group) // size_m
        out.setdefault(int(pid_m), []).append(int(pid_n))
    return out


def fill_uncertified(out, cert: Certificate, qa, qb, model, ops, bm: int, bn: int, group_m: int) -> int:
    """Recompute the outputs of the flagged tiles with the emulator (numpy, on the CPU) and
    write them into ``out`` (float32 torch, M x N); returns how many outputs that was."""
    import torch

    from fp4spec.emulator.gemm import matmul_block

    bad = cert.bad.cpu().numpy()
    if not bad.any():
        return 0
    host_a, host_b = (q.to_numpy() if q.is_torch else q for q in (qa, qb))
    if ops.c is not None and hasattr(ops.c, "cpu"):
        ops = dataclasses.replace(ops, c=ops.c.detach().cpu().numpy())
    if ops.g is not None and hasattr(ops.g, "cpu"):  # device operands carry g as a device tensor
        ops = dataclasses.replace(ops, g=np.float32(ops.g.detach().cpu().reshape(()).item()))
    m, n = out.shape
    blocks = tile_blocks(bad, m, n, bm, bn, group_m)
    count = sum(min(bm, m - tm * bm) * sum(min(bn, n - t * bn) for t in tns) for tm, tns in blocks.items())
    warnings.warn(HostFallbackWarning(  # before the work: it can take the CPU a while
        f"matmul: {count} of {m * n} outputs under {model.name!r} could not be proved on the GPU (partial sums "
        f"beyond float32's 24 bits where the model needs them exact, operand values spanning too wide a range, "
        f"NaN, Inf or values below 2^-60, or an overflowing sum); the CPU emulator computes them"), stacklevel=3)
    for tm, tns in blocks.items():
        rows = np.arange(tm * bm, min(m, (tm + 1) * bm))
        cols = np.concatenate([np.arange(t * bn, min(n, (t + 1) * bn)) for t in sorted(tns)])
        block = matmul_block(host_a, host_b, model, ops, rows, cols)
        r = torch.as_tensor(rows, device=out.device)
        cidx = torch.as_tensor(cols, device=out.device)
        out[r[:, None], cidx[None, :]] = torch.from_numpy(block).to(out.device)
    return count


__all__ = ["CERTIFIED", "INFLATE", "LSB_MIN", "NEVER", "Certificate", "certifier", "element_emax", "element_lsb",
           "exponent_excess", "fill_uncertified", "lo_min", "matmul_steps", "operand_stats", "stepped", "tile_blocks"]
