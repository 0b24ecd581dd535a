"""Fused RHT (``arith="mma:sm90-bf16"``) + rowwise quantize in Gluon, with the operand in registers.

The same computation and outputs as :func:`triton_rht_mma.rows_rht_mma_kernel` (the wide
block-diagonal dot, step M5's bf16 rounding, ``triton_rows_fast``'s block scale and fast
encoder), written in Gluon (Triton's explicit-layout dialect) so that the dot's left operand
is loaded from global memory straight into the registers of the ``wgmma`` operand layout.
The Triton kernel stages the operand through shared memory (a TMA box, then ``ldmatrix``),
and the loop that recycles those buffers synchronises the program's warps three times per
tile; here a program's only shared memory is the wide matrix, written once, and its warps
never wait on each other in the loop.

The operand layout: the accumulator of ``[64, 64] @ [64, 64]`` on one warpgroup (m64n64k16,
four k steps) gives lane ``4 g + t`` of warp ``w`` rows ``16 w + g`` and ``16 w + g + 8``
and, in k step j, the operand columns ``16 j + 2 t + {0, 1, 8, 9}``; the loads fetch those
elements (pairs of bf16, 32-bit loads) by :func:`triton_rht_mma._load_a`'s element map.

Rare cases, as in the Triton kernel's deferred loop: each thread keeps a flag for blocks the
fast path may get wrong (a NaN that may have spread across RHT rows, a block for the exact
encoder); one reduction after the loop decides whether the program runs its tiles again by
the checked path, which multiplies each of the four RHT rows of an operand row on its own
(the other three zeroed: no ``Inf * 0``) and encodes with the exact encoder.

Measured on the H200 (16384 x 16384, benchmarks/RESULTS.md): bit-exact on every check, but
0.235 ms (nvfp4) / 0.219 ms (mxfp4) against the Triton kernel's 0.210 / 0.220: the loads in
flight live in registers (one tile ahead: 8 KB per program), where TMA keeps three tiles in
shared memory. :func:`rows_rht_gluon_tma_kernel` (TMA ring + mbarriers) compiles, with Triton
3.6, to three CTA barriers per tile (around the mbarrier expect and wait), as the Triton loop.

Requires Triton's Gluon (``triton.experimental.gluon``, Triton >= 3.5) and a Hopper GPU; no
interpreter (the CPU tests run the Triton kernel, which computes the same bits).
"""

from __future__ import annotations

import triton
import triton.language as tl

try:  # Gluon is experimental: absent from older Triton releases
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma
    HAVE_GLUON = True
except ImportError:  # pragma: no cover
    HAVE_GLUON = False

from .triton_rht_mma import _bf16_val
from .triton_rows_fast import _block_scale, _mult_b, _pair_codes, _pair_codes_exact

if HAVE_GLUON:

    @gluon.jit
    def _vals_amax(lo, hi):
        a = gl.maximum(gl.abs(lo), gl.abs(hi), propagate_nan=tl.PropagateNan.ALL).to(gl.int32, bitcast=True)
        return gl.max(gl.max(a, axis=2), axis=1)

    @gluon.jit
    def _operand_offsets(R: gl.constexpr, PAIR: gl.constexpr, layout: gl.constexpr):
        """[R, 64] int32 element offsets of the operand (triton_rht_mma._load_a's map) in
        ``layout`` (:func:`_mem_layout`)."""
        m = gl.arange(0, R, layout=gl.SliceLayout(1, layout))[:, None]
        k = gl.arange(0, 64, layout=gl.SliceLayout(0, layout))[None, :]
        if PAIR:
            row0 = ((m // 16) * 8 + m % 8) * 128 + ((m // 8) % 2) * 16
            return row0 + ((k // 16) * 32 + k % 16)
        else:
            return m * 64 + k

    @gluon.constexpr_function
    def _mem_layout(R):
        """The operand's load layout: lane 4 g + t of warp w holds rows 16 w + g, 16 w + g + 8
        and, in each 16-column group j, the 4 consecutive columns 16 j + 4 t .. 16 j + 4 t + 3
        (8-byte loads). Column 16 j + 4 t + 2 h + e of it is column 16 j + 8 h + 2 t + e of the
        wgmma operand (:func:`_as_operand`), which the lane holds in the same register."""
        assert R == 64
        return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0], [0, 16], [0, 32]],
                                          lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
                                          warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[R, 64])

    @gluon.jit
    def _as_operand(v, R: gl.constexpr, a_layout: gl.constexpr):
        """The loaded [R, 64] tile (memory column 16 j + 8 t1 + 4 t0 + 2 h + e) as the wgmma
        operand whose column 16 j + 8 h + 4 t1 + 2 t0 + e it is: a permutation within each
        16-column group (the k step), undone by permuting the wide matrix's rows
        (:func:`permuted_wide_bits`). Free: the lane holds both in the same register."""
        v = gl.reshape(v, (R, 4, 2, 2, 2, 2))  # [m, j, t1, t0, h, e]
        v = gl.permute(v, (0, 1, 4, 2, 3, 5))  # [m, j, h, t1, t0, e]
        return gl.convert_layout(gl.reshape(v, (R, 64)), a_layout, assert_trivial=True)

    @gluon.jit
    def _pairs(y, R: gl.constexpr, G: gl.constexpr, PAIR: gl.constexpr):
        """(lo, hi), each [R * 4 / G, 2 G, 4]: the accumulator's values as pairs, one block per
        row (triton_rht_mma._wide_vals's map)."""
        if PAIR:
            y = gl.permute(gl.reshape(y, (R // 16, 2, 8, 8, 4, 2)), (0, 2, 4, 1, 3, 5))  # [g, l, t, h, i, e]
        else:
            y = gl.permute(gl.reshape(y, (R, 8, 4, 2)), (0, 2, 1, 3))  # [m, t, i, e]
        lo, hi = gl.split(y)
        return gl.reshape(lo, (R * 4 // G, 2 * G, 4)), gl.reshape(hi, (R * 4 // G, 2 * G, 4))

    @gluon.jit
    def _tile(a, b_smem, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, R: gl.constexpr, K: gl.constexpr,
              MX: gl.constexpr, RULE: gl.constexpr, EMAX: gl.constexpr, NAN_INF: gl.constexpr,
              SCALING: gl.constexpr, PAIR: gl.constexpr, SAFE: gl.constexpr, acc_layout: gl.constexpr):
        """One tile: the wide dot of operand a (int16 bf16 bits, operand layout), step M5, block
        scales, codes, stores; returns the blocks' redo flags (2: a NaN may have spread, 1: the
        exact encoder). SAFE: each RHT row of an operand row multiplied on its own, the exact
        encoder (the checked path)."""
        G: gl.constexpr = K // 16
        NB: gl.constexpr = R * 4 // G
        zero = gl.zeros([R, 64], gl.float32, acc_layout)
        if SAFE:
            ab = a.to(gl.bfloat16, bitcast=True)  # the operand layout (_as_operand)
            kk = gl.arange(0, 64, layout=gl.SliceLayout(0, a.type.layout))[None, :] // 16
            col = (gl.arange(0, 64, layout=gl.SliceLayout(0, acc_layout))[None, :] // 2) % 4
            y = zero
            for t in gl.static_range(4):
                at = gl.where(kk == t, ab, gl.zeros_like(ab))
                yt = warpgroup_mma(at, b_smem, zero, use_acc=False)
                y = gl.where(col == t, yt, y)
        else:
            y = warpgroup_mma(a.to(gl.bfloat16, bitcast=True), b_smem, zero, use_acc=False)
        lo, hi = _pairs(y, R, G, PAIR)
        return _encode_store(_bf16_val(lo, False), _bf16_val(hi, False), q_ptr, s_ptr, ts_ptr, mult_b, half, quarter,
                             tile, R, K, MX, RULE, EMAX, NAN_INF, SCALING, SAFE)

    @gluon.jit
    def _encode_store(lo, hi, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, R: gl.constexpr, K: gl.constexpr,
                      MX: gl.constexpr, RULE: gl.constexpr, EMAX: gl.constexpr, NAN_INF: gl.constexpr,
                      SCALING: gl.constexpr, SAFE: gl.constexpr):
        """Block amax, scale, codes (SAFE: the exact encoder) of the tile's pairs and their
        stores; returns the blocks' redo flags (2: a NaN may have spread, 1: the exact
        encoder)."""
        G: gl.constexpr = K // 16
        NB: gl.constexpr = R * 4 // G
        vmb = _vals_amax(lo, hi)
        scode, mult, nan_scale = _block_scale(vmb, ts_ptr, mult_b, MX, RULE, EMAX, NAN_INF, SCALING)
        mb = gl.expand_dims(gl.expand_dims(mult, 1), 2)
        if SAFE:
            q = _pair_codes_exact(lo, hi, mb, MX)
        else:
            q = _pair_codes(lo, hi, mb, mb * 0.5, mb * 0.25, MX, half, quarter)  # [NB, K / 8]
        if not MX:
            ns = gl.convert_layout(nan_scale, gl.SliceLayout(1, q.type.layout), assert_trivial=True)
            q = gl.where(gl.expand_dims(ns, 1), gl.zeros_like(q), q)
        NW: gl.constexpr = NB * (K // 8) // 4
        S: gl.constexpr = 32 // K
        q4 = gl.reshape(q, (NW, 4))
        blk0 = tl.cast(tile, gl.int64) * (R * 64 // K)
        ql: gl.constexpr = q4.type.layout
        oq = (blk0 * (K // 8) + gl.arange(0, NW, layout=gl.SliceLayout(1, ql))[:, None] * 4
              + gl.arange(0, 4, layout=gl.SliceLayout(0, ql))[None, :])
        gl.store(q_ptr + oq, q4)
        s2 = gl.reshape(scode.to(gl.uint8), (NB // S, S))
        sl: gl.constexpr = s2.type.layout
        osc = (blk0 + gl.arange(0, NB // S, layout=gl.SliceLayout(1, sl))[:, None] * S
               + gl.arange(0, S, layout=gl.SliceLayout(0, sl))[None, :])
        gl.store(s_ptr + osc, s2)
        flag = gl.where(vmb > 0x7F800000, 2, 0)
        if MX:
            flag = flag | nan_scale.to(gl.int32)
        else:
            flag = flag | (mult < 1.52587890625e-05).to(gl.int32)
        return flag

    @gluon.jit
    def rows_rht_gluon_kernel(x_ptr, w_ptr, q_ptr, s_ptr, ts_ptr, NTILES, half, quarter, R: gl.constexpr,
                              K: gl.constexpr, MX: gl.constexpr, RULE: gl.constexpr, EMAX: gl.constexpr,
                              NAN_INF: gl.constexpr, SCALING: gl.constexpr, PAIR: gl.constexpr,
                              AHEAD: gl.constexpr):
        """Fused RHT + rowwise E2M1 RNE quantize of a contiguous bf16 tensor of NTILES whole
        tiles (R rows of 64 elements); arguments as triton_rht_mma.rows_rht_mma_kernel. A
        program loops over tiles pid, pid + P, ...; AHEAD: the operand loads of the next tile
        are issued before this tile's dot (1) or not (0)."""
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, 64, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        b_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        n = gl.arange(0, 64, layout=gl.SliceLayout(1, b_layout))[:, None] * 64 + \
            gl.arange(0, 64, layout=gl.SliceLayout(0, b_layout))[None, :]
        wb = gl.load(w_ptr + n).to(gl.bfloat16, bitcast=True)
        b_smem = gl.allocate_shared_memory(gl.bfloat16, [64, 64],
                                           gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2),
                                           wb)
        fence_async_shared()
        mult_b = _mult_b(ts_ptr, MX)
        mem_layout: gl.constexpr = _mem_layout(R)
        offs = _operand_offsets(R, PAIR, mem_layout)
        pid = gl.program_id(0)
        P = gl.num_programs(0)
        # the per-thread redo flags, in the layout of the blocks' values (a zero accumulator's pairs)
        zl, zh = _pairs(gl.zeros([R, 64], gl.float32, acc_layout), R, K // 16, PAIR)
        redo = _vals_amax(zl, zh) * 0
        a = gl.load(x_ptr + tl.cast(pid, gl.int64) * (R * 64) + offs)
        for tile in range(pid, NTILES, P):
            if AHEAD:
                nxt = gl.minimum(tile + P, NTILES - 1)
                a_next = gl.load(x_ptr + tl.cast(nxt, gl.int64) * (R * 64) + offs)
            f = _tile(_as_operand(a, R, a_layout), b_smem, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, R, K, MX, RULE, EMAX, NAN_INF,
                      SCALING, PAIR, False, acc_layout)
            redo = redo | f
            if AHEAD:
                a = a_next
            else:
                a = gl.load(x_ptr + tl.cast(gl.minimum(tile + P, NTILES - 1), gl.int64) * (R * 64) + offs)
        if gl.max(redo, axis=0) != 0:  # rare: this program's tiles again, each checked
            gl.thread_barrier()
            for tile in range(pid, NTILES, P):
                a = gl.load(x_ptr + tl.cast(tile, gl.int64) * (R * 64) + offs)
                _tile(_as_operand(a, R, a_layout), b_smem, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, R, K, MX, RULE, EMAX, NAN_INF,
                      SCALING, PAIR, True, acc_layout)


    @gluon.jit
    def rows_rht_gluon_tma_kernel(x_ptr, x_desc, w_ptr, q_ptr, s_ptr, ts_ptr, NTILES, half, quarter,
                                  R: gl.constexpr, K: gl.constexpr, MX: gl.constexpr, RULE: gl.constexpr,
                                  EMAX: gl.constexpr, NAN_INF: gl.constexpr, SCALING: gl.constexpr,
                                  STAGES: gl.constexpr):
        """:func:`rows_rht_gluon_kernel` with the operand read by the tensor memory accelerator
        into a ring of STAGES shared-memory buffers (x_desc: plain rows, [R, 64] boxes), each
        with an mbarrier; the dot reads its buffer, and once the dot has completed the buffer
        takes the tile STAGES ahead. No barrier across the program's warps in the loop: one
        warpgroup issues the dot and waits for it before the buffer is reused."""
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, 64, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        b_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        n = gl.arange(0, 64, layout=gl.SliceLayout(1, b_layout))[:, None] * 64 + \
            gl.arange(0, 64, layout=gl.SliceLayout(0, b_layout))[None, :]
        wb = gl.load(w_ptr + n).to(gl.bfloat16, bitcast=True)
        b_smem = gl.allocate_shared_memory(gl.bfloat16, [64, 64],
                                           gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2),
                                           wb)
        a_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, R, 64], x_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for st in gl.static_range(STAGES):
            mbarrier.init(bars.index(st), count=1)
        fence_async_shared()
        mult_b = _mult_b(ts_ptr, MX)
        pid = gl.program_id(0)
        P = gl.num_programs(0)
        n_my = (NTILES - pid + P - 1) // P
        for st in gl.static_range(STAGES):
            ok = st < n_my
            mbarrier.expect(bars.index(st), R * 64 * 2, pred=ok)
            tma.async_copy_global_to_shared(x_desc, [(pid + st * P) * R, 0], bars.index(st), a_smem.index(st), pred=ok)
        zl, zh = _pairs(gl.zeros([R, 64], gl.float32, acc_layout), R, K // 16, False)
        redo = _vals_amax(zl, zh) * 0
        for i in range(n_my):
            buf = i % STAGES
            mbarrier.wait(bars.index(buf), (i // STAGES) & 1)
            tile = pid + i * P
            # the dot is synchronous: its reads of the buffer are done when the dot returns,
            # so the refill is issued inside the tile, right after the dot (see _tile_refill)
            f = _tile_refill(a_smem.index(buf), b_smem, bars.index(buf), x_desc, q_ptr, s_ptr, ts_ptr, mult_b, half,
                             quarter, tile, i + STAGES < n_my, (tile + STAGES * P) * R, R, K, MX, RULE, EMAX,
                             NAN_INF, SCALING, acc_layout)
            redo = redo | f
        if gl.max(redo, axis=0) != 0:  # rare: this program's tiles again, each checked
            gl.thread_barrier()
            mem_layout: gl.constexpr = _mem_layout(R)
            offs = _operand_offsets(R, False, mem_layout)
            for tile in range(pid, NTILES, P):
                a = gl.load(x_ptr + tl.cast(tile, gl.int64) * (R * 64) + offs)
                _tile(_as_operand(a, R, a_layout), b_smem, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, R, K,
                      MX, RULE, EMAX, NAN_INF, SCALING, False, True, acc_layout)

    @gluon.jit
    def _tile_refill(a_buf, b_smem, bar, x_desc, q_ptr, s_ptr, ts_ptr, mult_b, half, quarter, tile, refill, row,
                     R: gl.constexpr, K: gl.constexpr, MX: gl.constexpr, RULE: gl.constexpr, EMAX: gl.constexpr,
                     NAN_INF: gl.constexpr, SCALING: gl.constexpr, acc_layout: gl.constexpr):
        """:func:`_tile` on a shared-memory operand (plain rows, the fast path), and the buffer's
        refill with the tile at ``row`` (if ``refill``) as soon as the dot has read it."""
        G: gl.constexpr = K // 16
        NB: gl.constexpr = R * 4 // G
        y = warpgroup_mma(a_buf, b_smem, gl.zeros([R, 64], gl.float32, acc_layout), use_acc=False)
        mbarrier.expect(bar, R * 64 * 2, pred=refill)
        tma.async_copy_global_to_shared(x_desc, [row, 0], bar, a_buf, pred=refill)
        lo, hi = _pairs(y, R, G, False)
        return _encode_store(_bf16_val(lo, False), _bf16_val(hi, False), q_ptr, s_ptr, ts_ptr, mult_b, half, quarter,
                             tile, R, K, MX, RULE, EMAX, NAN_INF, SCALING, False)


#: Programs per SM, tile rows, register cap, operand rows per block size, loads ahead.
GLUON_PER_SM, GLUON_R, GLUON_MAXNREG = 5, 64, 96
GLUON_TILE = GLUON_R * 64
GLUON_PAIR = {16: True, 32: True}
GLUON_AHEAD = 1


def operand_permutation():
    """P (numpy int, 64): column k of the wgmma operand is column P[k] of the loaded tile
    (:func:`_as_operand`): within each 16-column group, bits (e, t0, t1, h) of k (low first)
    become bits (e, h, t0, t1)."""
    import numpy as np

    k = np.arange(64)
    e, t0, t1, h = k & 1, (k >> 1) & 1, (k >> 2) & 1, (k >> 3) & 1
    return (k & 48) | e | (h << 1) | (t0 << 2) | (t1 << 3)


def permuted_wide_bits(signs):
    """The wide matrix with its rows permuted as the operand's columns: row k is row P[k] of
    :func:`triton_rht_mma.wide_matrix_bits` (the dot then sums the same products in each
    k step of 16: sm90-bf16's fused step does not depend on their order)."""
    from .triton_rht_mma import wide_matrix_bits

    return wide_matrix_bits(signs)[operand_permutation()]


_PW: dict = {}


def permuted_wide(signs, device):
    import torch

    key = (tuple(int(s) for s in signs), str(device))
    if key not in _PW:
        _PW[key] = torch.from_numpy(permuted_wide_bits(signs).view("int16").copy()).to(device)
    return _PW[key]


def gluon_ok() -> bool:
    return HAVE_GLUON


def gluon_launcher(x2, packed, scales, ts, sch, r, *, programs_per_sm=None, maxnreg=None, pair=None, ahead=None,
                   num_warps=4):
    """A function that runs :func:`rows_rht_gluon_kernel` on given buffers (a tensor of whole
    64-row tiles: numel % 4096 == 0) and returns triton's compiled kernel."""
    import torch

    from .triton_rht_mma import matrices
    from .triton_rows_fast import _sm_count, rows_flags

    K = sch.block_size
    R = GLUON_R
    nel = x2.numel()
    if nel % (R * 64):
        raise ValueError(f"x: {nel} elements are not a whole number of {R * 64}-element tiles")
    w = permuted_wide(r.signs, x2.device)
    flags = rows_flags(sch)
    flags.update(R=R, K=K, PAIR=GLUON_PAIR[K] if pair is None else bool(pair),
                 AHEAD=GLUON_AHEAD if ahead is None else int(ahead), num_warps=num_warps)
    mr = GLUON_MAXNREG if maxnreg is None else maxnreg
    if mr:
        flags["maxnreg"] = mr
    ntiles = nel // (R * 64)
    grid = (max(1, min(ntiles, _sm_count(x2.device) * (programs_per_sm or GLUON_PER_SM))),)
    args = (x2.view(torch.int16), w, packed.view(torch.int32), scales, ts, ntiles, 0.5, 0.25)

    def launch():
        if nel:
            return rows_rht_gluon_kernel[grid](*args, **flags)

    return launch
