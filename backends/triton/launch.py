"""Host launchers of the quantize kernels: one function per variant of
:func:`.quantize.quantize_packed` (arguments, grid, the constexprs of the request), the tensor
amax passes and the unfused RHT. The checks of what each variant takes are in
:mod:`.quantize`; :class:`Plan` is what they agree on.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import torch
import triton

from .. import torch_backend as tb
from . import capability
from .capability import MX_RULES, interpret
from .config import DEFAULT_CONFIG, TritonConfig
from .kernels import columnwise, hif4, if4, mx_wide, rht, rowwise, tile


@dataclasses.dataclass
class Plan:
    """One resolved quantize_packed call: the logical M x N matrix x[m, n] = x2[m * sxm + n *
    sxn] quantized along n in blocks of K (tiles of R rows); sr_mode 0 RNE, 1 given bits
    (``rb``: int32 of x's shape), 2 Philox from ``seed``; ``rp`` the butterfly RHT's (sign
    mask, bf16 output) or None; BM, BN, num_warps the caller's tile overrides (None: the
    config's)."""

    x: object
    x2: object
    M: int
    N: int
    sxm: int
    sxn: int
    sch: object
    axis: int
    rounding: str
    sr_mode: int
    seed: int
    sr_bits: int
    rbits: object
    rb: object
    rp: object
    scale_layout: str
    s_enc_dec: object
    cfg: TritonConfig
    BM: object
    BN: object
    num_warps: object

    @property
    def K(self):
        return self.sch.block_size

    @property
    def R(self):
        return self.sch.tile_rows

    @property
    def dev(self):
        return self.x.device

    @property
    def bf16(self):
        return self.x2.dtype == torch.bfloat16

    @property
    def rowwise(self):
        return self.sxn == 1 and self.sxm == self.N

    @property
    def colwise(self):
        return self.sxm == 1 and self.x2.dim() == 2 and (self.sr_mode != 2 or self.M % 4 == 0)

    @property
    def fast(self):
        """The fast E2M1 encoder applies: E2M1, RNE, 1 x k blocks with k a multiple of 16."""
        return self.sch.element.name == "e2m1" and self.rounding == "rne" and self.K % 16 == 0

    @property
    def fast_shape(self):
        return self.R == 1 and self.K % 16 == 0

    @property
    def fused_shape(self):
        return self.R == 1 and self.K in (16, 32)

    @property
    def rows_tile(self):
        """(variant, blocks, warps) of the scheme's rowwise kernels (config rows_mx / rows_two_level)."""
        return self.cfg.rows_mx if self.sch.structure == "mx" else self.cfg.rows_two_level


# -- the kernels' constexprs and tables -------------------------------------------------------------


def scheme_flags(sch) -> dict:
    """The block-scale constexprs of a scheme: MX, RULE, EMAX, NAN_INF, SCALING."""
    mx = sch.structure == "mx"
    pol = sch.policies
    scaling = 0
    if mx and pol["mx_element_scaling"] != "exact":
        scaling = 2 if sch.scale_rule == "rceil" else 1
    return dict(MX=mx, RULE=MX_RULES.get(sch.scale_rule, 0), EMAX=sch.element.emax if mx else 0,
                NAN_INF=mx and pol["mx_nonfinite_block"] == "nan_scale", SCALING=scaling)


def element_flags(sch, nthr: int) -> dict:
    """The element constexprs of the table encoder: NTHR, INT4, NEGZERO, ZERO_POS."""
    return dict(NTHR=nthr, INT4=sch.element.name == "int4_sym", NEGZERO=bool(sch.element.has_negative_zero),
                ZERO_POS=sch.structure != "mx" and sch.policies["nv_negative_zero"] == "positive")


@lru_cache(maxsize=None)
def tables(fmt_name: str, device: str):
    """(RNE thresholds, SR lower thresholds, magnitudes, values) of an element format, float32 on
    the device (the emulator's own tables)."""
    t = tb.element_tables(fmt_name)
    f = lambda v: torch.tensor(v, dtype=torch.float32, device=device)  # noqa: E731
    return f(t["rne"]), f(t["down"]), f(t["mags"]), f(t["values"])


def bf16_cvt(cfg: TritonConfig) -> int:
    """How the kernels round the RHT output to bf16 (:func:`.kernels.row16._rht_out2`): 0 integer
    operations (always in the interpreter, whose fp32 -> bf16 cast truncates), 1 the hardware
    conversion, 2 the packed conversion (inline PTX, NVIDIA); config rht_bf16_cvt (None: 1)."""
    if interpret():
        return 0
    return 1 if cfg.rht_bf16_cvt is None else int(cfg.rht_bf16_cvt)


def signs_constexpr(mask: int, cfg: TritonConfig) -> int:
    """The kernels' SIGNS constexpr: the sign mask itself for the masks in rht_const_signs (the
    sign flips compile to nothing), else -1 (the mask is passed at run time: one compile for
    every sign vector, one xor per value)."""
    return mask if mask in cfg.rht_const_signs else -1


def sign_words(mask: int) -> tuple:
    """The kernels' run-time signs: 16 int32 arguments, word i = 0x80000000 (as -2^31) where
    bit i of the sign mask is set, else 0 (:func:`.kernels.row16._sbit`)."""
    return tuple(-(1 << 31) if (int(mask) >> i) & 1 else 0 for i in range(16))


def rht_flags(rp, cfg: TritonConfig) -> dict:
    sgn = 0 if rp is None else rp[0]
    return dict(SIGNS=signs_constexpr(sgn, cfg), OUT_BF16=rp is not None and rp[1], BF16_CVT=bf16_cvt(cfg))


def _seed(p: Plan) -> int:
    return 0 if p.seed is None else int(p.seed)


def _table_args(p: Plan):
    thr, dthr, mags, _ = tables(p.sch.element.name, str(p.dev))
    return (thr, dthr, mags), element_flags(p.sch, int(thr.numel()))


# -- rowwise -----------------------------------------------------------------------------------------


def rows_bf16_launcher(x2, packed, scales, ts, sch, config=None, *, BR=None, num_warps=None):
    """A function that runs the ``rows_bf16`` kernel on given buffers and returns triton's compiled
    kernel (None for an empty tensor): x2 contiguous bf16 (M, N), packed uint8 (M, N/2), scales
    uint8 (M, N/K) row-major, ts the float32 constants of the call. No checks: the callers make
    them (benchmarks: the kernel alone, no host-side torch ops)."""
    cfg = DEFAULT_CONFIG if config is None else config
    K = sch.block_size
    nblk = x2.numel() // K
    br = BR or cfg.rows_bf16_blocks
    feats = capability.gpu_features(x2.device)
    flags = scheme_flags(sch)
    flags.update(BR=br, K=K, EVEN=nblk % br == 0, SLOW=bool(cfg.exact_fallback),
                 num_warps=num_warps or cfg.rows_bf16_warps, HW=cfg.hw_instructions and feats.hw_e4m3)
    args = (x2.view(torch.int32), packed.view(torch.int32), scales, ts, nblk)

    def launch():
        if nblk:
            return rowwise.quantize_rows_bf16_kernel[(triton.cdiv(nblk, br),)](*args, **flags)

    return launch


def rows_bf16(p: Plan, ts, packed, scales, cpad):
    rows_bf16_launcher(p.x2, packed, scales, ts, p.sch, p.cfg, BR=p.BM, num_warps=p.num_warps)()


def rows(p: Plan, ts, packed, scales, cpad):
    """``rows``: one block per thread; with the butterfly RHT fused (``rp``) or without."""
    nblk = p.M * p.N // p.K
    xin = p.x2.view(torch.int64) if p.bf16 else p.x2
    r_in = p.rb.reshape(-1) if p.rb is not None else ts
    (thr, dthr, mags), eflags = _table_args(p)
    common = dict(K=p.K, FAST=p.fast, SR=p.sr_mode, SR_BITS=int(p.sr_bits), IN_BF16=p.bf16,
                  CUBLAS=p.scale_layout == "cublas", **scheme_flags(p.sch), **eflags)
    args = (xin, packed.view(torch.int64), scales, r_in, thr, dthr, mags, ts, nblk, p.N // p.K, cpad, _seed(p))
    if p.rp is None:
        _, br, w = p.rows_tile
        br = p.BM or br
        rowwise.quantize_rows_kernel[(triton.cdiv(nblk, br),)](*args, BR=br, num_warps=p.num_warps or w, **common)
        return
    cfg = p.cfg
    rflags = rht_flags(p.rp, cfg)
    bf16x2 = (cfg.rht_rows_bf16x2 and common["MX"] and p.bf16 and rflags["OUT_BF16"] and p.fast
              and cfg.hw_instructions and capability.gpu_features(p.dev).hw_bf16x2)
    br = p.BM or cfg.rht_rows_blocks
    rht.quantize_rows_rht_kernel[(triton.cdiv(nblk, br),)](
        *args, sign_words(p.rp[0]), BR=br, SLOW=cfg.exact_fallback, num_warps=p.num_warps or cfg.rht_rows_warps,
        BF16X2=bool(bf16x2), **common, **rflags)


#: The elements of ``rows_sr``'s integer SR encoder: name -> (E2M1's three grids, or one
#: uniform grid; its finest step s0).
SR_ELEMENTS = {"e2m1": (True, 0.5), "e1m2": (False, 0.5), "int4_sym": (False, 1.0)}


def sr_flags(sch, sr_bits: int) -> dict:
    """The constexprs of :func:`.kernels.primitives._sr_index` for a scheme's element:
    E2M1, SR_MAX (the largest magnitude), SR_SCALE = 2^sr_bits / s0, HALF_STEP (s0 = 1/2)."""
    e2m1, step = SR_ELEMENTS[sch.element.name]
    return dict(E2M1=e2m1, SR_MAX=float(sch.max_elem), SR_SCALE=float(2 ** int(sr_bits) / step),
                HALF_STEP=step == 0.5)


def sr_fp32_pipe(cfg: TritonConfig, sr_bits: int) -> bool:
    """Whether ``rows_sr`` encodes on the FP32 pipe (directed-rounding PTX: not in the
    interpreter; sr_bits <= 23): config rows_sr_fp32_pipe and hw_instructions."""
    return bool(cfg.rows_sr_fp32_pipe and cfg.hw_instructions and not interpret() and int(sr_bits) <= 23)


def rows_sr(p: Plan, ts, packed, scales, cpad):
    """``rows_sr``: stochastic rounding, one 1 x 16 / 1 x 32 block per thread, the bits given
    (int32, x's shape) or drawn by Philox in the kernel."""
    nblk = p.M * p.N // p.K
    br = p.BM or p.cfg.rows_sr_blocks
    rowwise.quantize_rows_sr_kernel[(triton.cdiv(nblk, br),)](
        p.x2.view(torch.int64) if p.bf16 else p.x2, packed.view(torch.int64), scales,
        p.rb.reshape(-1) if p.rb is not None else ts, ts, nblk, p.N // p.K, cpad, _seed(p),
        BR=br, K=p.K, SR=p.sr_mode, SR_BITS=int(p.sr_bits), IN_BF16=p.bf16, CUBLAS=p.scale_layout == "cublas",
        INT4=p.sch.element.name == "int4_sym", NEGZERO=bool(p.sch.element.has_negative_zero),
        ZERO_POS=p.sch.structure != "mx" and p.sch.policies["nv_negative_zero"] == "positive",
        FP32_PIPE=sr_fp32_pipe(p.cfg, p.sr_bits), num_warps=p.num_warps or p.cfg.rows_sr_warps,
        **scheme_flags(p.sch), **sr_flags(p.sch, p.sr_bits))


def rows_split(p: Plan, ts, packed, scales, cpad):
    """``rows_split``: a [blocks, K/4] tile of int64 words (bf16, E2M1, RNE)."""
    nblk = p.M * p.N // p.K
    _, br, w = p.rows_tile
    br = p.BM or br
    rowwise.quantize_rows_split_kernel[(triton.cdiv(nblk, br),)](
        p.x2.view(torch.int64), packed.view(torch.int16), scales, ts, nblk, p.N // p.K, cpad, BR=br, K=p.K,
        CUBLAS=p.scale_layout == "cublas", num_warps=p.num_warps or w, **scheme_flags(p.sch))


# -- columnwise (the logical (M, N) is x2^T: x2 is (N, M) with row stride sxn) ---------------------------------


def _col_bits(p: Plan, ts):
    """(random-bit operand, its row stride) of the columnwise kernels."""
    if p.rb is None:
        return ts, 0
    r2 = p.rb if p.rb.stride(1) == 1 else p.rb.contiguous()
    return r2, r2.stride(0)


def cols_tile(p: Plan):
    """(columns, blocks) per program of ``cols`` (after the caller's BN / BM)."""
    nsc = p.N // p.K
    bc, w, nb = p.cfg.cols_fast[p.K] if p.fast else p.cfg.cols_generic
    nb = p.BM or nb
    while nsc % nb:
        nb //= 2
    return p.BN or bc, nb, w


def cols(p: Plan, ts, packed, scales, cpad):
    """``cols``: a block per thread down a column, NB blocks per program; the RHT fused or not."""
    r_in, srr = _col_bits(p, ts)
    nsc = p.N // p.K
    bc, nb, w = cols_tile(p)
    sview = scales if nb == 1 else scales.view(torch.int16 if nb == 2 else torch.int32)
    (thr, dthr, mags), eflags = _table_args(p)
    sgn = 0 if p.rp is None else p.rp[0]
    columnwise.quantize_cols_kernel[(triton.cdiv(p.M, bc), nsc // nb)](
        p.x2.view(torch.int16) if p.bf16 else p.x2, packed.view(torch.int64), sview, r_in, thr, dthr, mags, ts, p.M,
        p.sxn, srr, p.N // 16, nsc, cpad, _seed(p), sign_words(sgn), 0,
        BC=bc, K=p.K, NB=nb, FAST=p.fast, SR=p.sr_mode, SR_BITS=int(p.sr_bits), IN_BF16=p.bf16,
        CUBLAS=p.scale_layout == "cublas", RHT=p.rp is not None, SLOW=p.cfg.exact_fallback,
        num_warps=p.num_warps or w, SCALAR_LOADS=(p.K, p.rp is not None) in p.cfg.cols_scalar_loads,
        **scheme_flags(p.sch), **eflags, **rht_flags(p.rp, p.cfg))


def cols_tile_launch(p: Plan, ts, packed, scales, cpad):
    """``cols_tile``: K rows x BC columns per band, NBANDS bands per program."""
    r_in, srr = _col_bits(p, ts)
    nsc = p.N // p.K
    bc = p.BN or p.cfg.cols_tile_columns
    nbands = min(p.cfg.cols_tile_bands if p.BM is None else p.BM, nsc)
    (thr, dthr, mags), eflags = _table_args(p)
    columnwise.quantize_cols_tile_kernel[(triton.cdiv(p.M, bc), triton.cdiv(nsc, nbands))](
        p.x2.view(torch.int16) if p.bf16 else p.x2, packed.view(torch.int64), scales, r_in, thr, dthr, mags, ts,
        p.N, p.M, p.sxn, srr, p.N // 16, nsc, cpad, _seed(p),
        BC=bc, K=p.K, FAST=p.fast, SR=p.sr_mode, SR_BITS=int(p.sr_bits), IN_BF16=p.bf16,
        CUBLAS=p.scale_layout == "cublas", NBANDS=nbands, num_warps=p.num_warps or p.cfg.cols_tile_warps,
        **scheme_flags(p.sch), **eflags)


# -- MX with 6- and 8-bit elements (codes one per byte) -------------------------------------------------


def wide_flags(sch) -> dict:
    """The constexprs of the :mod:`.kernels.mx_wide` kernels: the block scale's (scheme_flags
    less MX) and the element's -- MB mantissa bits, BIAS, MAXC the largest finite code, NANC
    the positive quiet NaN code (-1: none), BITS."""
    from fp4spec.elements import canonical_nan_code

    f = sch.element
    flags = scheme_flags(sch)
    del flags["MX"]
    return dict(flags, MB=f.mantissa_bits, BIAS=f.bias, MAXC=f.max_code, BITS=f.bits,
                NANC=canonical_nan_code(f, False) if f.has_nan else -1)


def rows_wide(p: Plan, ts, codes, scales, cpad):
    """``rows_wide``: BR blocks per program as one [BR, K] tile."""
    nblk = p.M * p.N // p.K
    br, w = p.cfg.rows_wide
    br = p.BM or br
    mx_wide.quantize_rows_wide_kernel[(triton.cdiv(nblk, br),)](
        p.x2.view(torch.int16) if p.bf16 else p.x2, codes, scales, p.rb.reshape(-1) if p.rb is not None else ts, ts,
        nblk, p.N // p.K, cpad, _seed(p), BR=br, K=p.K, IN_BF16=p.bf16, SR=p.sr_mode, SR_BITS=int(p.sr_bits),
        CUBLAS=p.scale_layout == "cublas", num_warps=p.num_warps or w, **wide_flags(p.sch))


def cols_wide_tile(p: Plan):
    """(columns, blocks, warps) per program of ``cols_wide`` (after the caller's BN / BM)."""
    bc, nb, w = p.cfg.cols_wide
    return p.BN or bc, p.BM or nb, w


def cols_wide(p: Plan, ts, codes, scales, cpad):
    """``cols_wide``: NB blocks of K rows x BC columns per program, one [NB, K, BC] tile."""
    r_in, srr = _col_bits(p, ts)
    nsc = p.N // p.K
    bc, nb, w = cols_wide_tile(p)
    mx_wide.quantize_cols_wide_kernel[(triton.cdiv(p.M, bc), triton.cdiv(nsc, nb))](
        p.x2.view(torch.int16) if p.bf16 else p.x2, codes, scales, r_in, ts, p.N, p.M, p.sxn, srr, nsc, cpad,
        _seed(p), BC=bc, NB=nb, K=p.K, IN_BF16=p.bf16, SR=p.sr_mode, SR_BITS=int(p.sr_bits),
        CUBLAS=p.scale_layout == "cublas", num_warps=p.num_warps or w, **wide_flags(p.sch))


# -- HiF4 (groups of 64: codes, E6M2 scale, micro-exponent bits) ------------------------------------------


def hif4_launch(p: Plan, packed, scales, e1_8, e1_16, flag):
    """``rows_hif4`` (rowwise, contiguous: a group per thread) and ``cols_hif4`` (axis 0: x2
    is the (N, M) tensor, unit column stride; a [groups, 64] tile per program); flag (int32,
    one element) is set where a group is non-finite."""
    G = p.N // 64
    if not p.M * G:
        return
    if p.rowwise:
        br, w = p.cfg.hif4_rows
        br = p.BM or br
        hif4.quantize_hif4_rows_kernel[(triton.cdiv(p.M * G, br),)](
            p.x2.view(torch.int64) if p.bf16 else p.x2, packed.view(torch.int32), scales, e1_8.view(torch.int64),
            e1_16.view(torch.int64), flag, p.M * G, BR=br, IN_BF16=p.bf16, SPLIT=p.x2.dtype == torch.float32,
            num_warps=p.num_warps or w)
        return
    br, w = p.cfg.hif4_cols
    br = p.BM or br
    hif4.quantize_hif4_cols_kernel[(triton.cdiv(p.M, br), G)](
        p.x2.view(torch.int16) if p.bf16 else p.x2, packed.view(torch.int32), scales, e1_8, e1_16, flag, p.M, G,
        p.sxn, BR=br, EVEN=p.M % br == 0, IN_BF16=p.bf16, SPLIT=p.x2.dtype == torch.float32,
        num_warps=p.num_warps or w)


# -- IF4 (1 x 16 blocks, E2M1 or INT4 chosen per block) --------------------------------------------------

#: The IF4 kernel's MODE per rounding (``sr`` aside).
IF4_MODES = {"rne": if4.RNE, "rna": if4.RNA, "rtz": if4.RTZ, "rup": if4.RUP, "rdn": if4.RDN, "rto": if4.RTO}


def if4_launch(p: Plan, ts, amax, packed, scales):
    """``rows_if4`` and ``cols_if4``: one kernel over a logical matrix of blocks (any strides);
    ts the call's constants (ts[0] = S_enc, ts[4:] the element multipliers), amax the tensor
    amax (float32). 1 x 16 blocks: a [BR, 16] tile of one block column per program; rowwise
    (contiguous) the matrix is seen as M * N / 16 rows of one block each (a program reads BR *
    16 consecutive elements). 16 x 16 tiles (``if4_2d``): BT tiles per program, row-major over the tiles."""
    G = p.N // 16
    if not p.M * G:
        return
    srm, srn = (p.N, 1) if p.rowwise else (1, p.M)  # the bits of logical (m, n): x's row-major order
    r = ts if p.rb is None else p.rb.contiguous()
    flags = dict(IN_BF16=p.bf16, RULE=("mse", "mae", "abs_max").index(p.sch.scale_rule),
                 MODE=IF4_MODES.get(p.rounding, 0), SR=p.sr_mode, SR_BITS=int(p.sr_bits),
                 SR_SCALE_FP=float(2 ** (int(p.sr_bits) + 1)), SR_SCALE_INT=float(2 ** int(p.sr_bits)),
                 enable_fp_fusion=False)
    xin = p.x2.view(torch.int16) if p.bf16 else p.x2
    if p.sch.is_2d:
        bt, w = p.cfg.if4_tiles
        bt = p.BM or bt
        tr = p.M // 16
        if4.quantize_if4_tiles_kernel[(triton.cdiv(tr * G, bt),)](
            xin, packed.view(torch.int32), scales, r, ts, float(amax), tr, G, p.sxm, p.sxn, srm, srn, _seed(p),
            BT=bt, num_warps=p.num_warps or w, **flags)
        return
    br, w = p.cfg.if4_rows if p.rowwise else p.cfg.if4_cols
    br = p.BM or br
    rows, cols, sxm, sxn = (p.M * G, 1, 16, 1) if p.rowwise else (p.M, G, p.sxm, p.sxn)
    if p.rowwise:
        srm, srn = 16, 1
    if4.quantize_if4_kernel[(triton.cdiv(rows, br), cols)](
        xin, packed.view(torch.int32), scales, r, ts, float(amax), rows, cols, sxm, sxn, srm, srn, _seed(p),
        BR=br, num_warps=p.num_warps or w, **flags)


# -- the generic tile kernel ------------------------------------------------------------------------------


# -- the kernels' float32 constants ------------------------------------------------------------------

@lru_cache(maxsize=None)
def _consts(rcp_max, sr_scale, device):
    ts = torch.zeros(4 + 128, dtype=torch.float32, device=device)
    ts[2] = rcp_max
    ts[3] = sr_scale
    return ts


def _rcp_max(sch) -> float:
    return float(tb.f32(np.float32(1.0) / np.float32(sch.max_elem)))


def mx_consts(sch, dev, sr_bits: int = 8):
    """The kernels' float32 constants ts for an MX scheme: [-, -, fp32(1/max_elem), 2^sr_bits,
    -]; one cached tensor per device (the kernels only read it)."""
    return _consts(_rcp_max(sch), float(1 << int(sr_bits)), str(dev))


def two_level_consts(sch, dev, *, amax=None, s_enc_dec=None, sr_bits: int = 8):
    """A new float32 tensor ts = [S_enc, S_dec, fp32(1/max_elem), 2^sr_bits, the 128 TE element
    multipliers per scale code] for a two-level scheme, written by one kernel
    (:func:`.kernels.tile.two_level_consts_kernel`): from the global ``amax`` (0-d float32
    tensor on dev; the steps of ``torch_backend.tensor_scale``) or from ``s_enc_dec`` (0-d
    tensors, or numbers taken as float32). ts[1] is the call's ``global_scale``, so ts is not
    shared between calls."""
    ts = torch.empty(4 + 128, dtype=torch.float32, device=dev)
    num = tb.f32(np.float32(sch.scale_bound) * np.float32(sch.max_elem))
    kw = dict(num=num, rcp_max=_rcp_max(sch), sr_scale=float(1 << int(sr_bits)), num_warps=1)
    if amax is not None:
        a = amax.reshape(1)
        tile.two_level_consts_kernel[(1,)](a, a, a, ts, 0.0, 0.0, MODE=0, **kw)
        return ts
    s_enc, s_dec = s_enc_dec
    if isinstance(s_enc, torch.Tensor) or isinstance(s_dec, torch.Tensor):
        se = torch.as_tensor(s_enc, device=dev).reshape(1).to(torch.float32)
        sd = torch.as_tensor(s_dec, device=dev).reshape(1).to(torch.float32)
        tile.two_level_consts_kernel[(1,)](ts, se, sd, ts, 0.0, 0.0, MODE=1, **kw)
    else:
        tile.two_level_consts_kernel[(1,)](ts, ts, ts, ts, tb.f32(s_enc), tb.f32(s_dec), MODE=2, **kw)
    return ts


def as_matrix(x, axis):
    """(x2, M, N, sxm, sxn): the logical 2-D matrix whose rows are quantized along N."""
    if x.dim() == 1:
        x = x.reshape(1, -1)
        axis = -1
    if axis % x.dim() == x.dim() - 1:
        x2 = x.reshape(-1, x.shape[-1])
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        return x2, x2.shape[0], x2.shape[1], x2.stride(0), x2.stride(1)
    if x.dim() == 2 and axis % 2 == 0:  # columnwise: the transpose, read through swapped strides
        x2 = x if x.stride(1) == 1 else x.contiguous()
        return x2, x2.shape[1], x2.shape[0], x2.stride(1), x2.stride(0)
    raise NotImplementedError("axis: the last axis, or axis 0 of a 2-D tensor (columnwise)")


def tile_launch(p: Plan, ts, packed, scales, cpad):
    """``tile``: a BM x BN tile of the logical matrix per program (any strides, 16 x k tiles)."""
    cfg = p.cfg
    BN = max(p.K, min(p.BN or cfg.tile_cols, triton.next_power_of_2(p.N)))
    BM = max(p.R, min(p.BM or cfg.tile_rows, triton.next_power_of_2(p.M)))
    if p.rb is not None:
        r2, _, _, srm, srn = as_matrix(p.rb, p.axis)
    else:
        r2, srm, srn = p.x2, 0, 0
    (thr, dthr, mags), eflags = _table_args(p)
    tile.quantize_tile_kernel[(triton.cdiv(p.M, BM), triton.cdiv(p.N, BN))](
        p.x2.view(torch.int16) if p.bf16 else p.x2, packed, scales, r2, thr, dthr, mags, ts, p.M, p.N, p.sxm, p.sxn,
        packed.stride(0), scales.stride(0), srm, srn,
        BM=BM, BN=BN, K=p.K, TILE_R=p.R, SR=p.rounding == "sr", BF16=p.bf16,
        num_warps=p.num_warps or cfg.tile_warps, **scheme_flags(p.sch), **eflags)


# -- tensor amax passes and the unfused RHT --------------------------------------------------------


def global_amax(x2, M, N, sxm, sxn, config=None):
    """float32 0-d tensor: max |x| (NaN if any NaN) over the logical M x N matrix."""
    BM, BN, w = (DEFAULT_CONFIG if config is None else config).amax_tile
    out = torch.zeros(1, dtype=torch.int32, device=x2.device)
    grid = (max(1, -(-M // BM)), max(1, -(-N // BN)))
    bf16 = x2.dtype == torch.bfloat16
    tile.amax_kernel[grid](x2.view(torch.int16) if bf16 else x2, out, M, N, sxm, sxn, BM=BM, BN=BN, BF16=bf16,
                           num_warps=w)
    return out.view(torch.float32)[0]


def rht_global_amax(x2, M, N, sxm, sxn, rp, config=None):
    """float32 0-d tensor: max |RHT(x)| (NaN if any NaN) over the logical M x N matrix, the
    transform along N, in one pass without a temporary (rowwise: x2 contiguous; columnwise:
    x2 is the (N, M) row-major tensor, sxm == 1). rp: (sign mask, bf16 output)."""
    cfg = DEFAULT_CONFIG if config is None else config
    signs, out_bf16 = rp
    out = torch.zeros(1, dtype=torch.int32, device=x2.device)
    bf16 = x2.dtype == torch.bfloat16
    kw = dict(IN_BF16=bf16, SIGNS=signs_constexpr(signs, cfg), OUT_BF16=out_bf16, BF16_CVT=bf16_cvt(cfg))
    if sxn == 1 and sxm == N:
        nch = M * N // 16
        br, w = cfg.rht_amax_rows
        rht.rht_amax_rows_kernel[(triton.cdiv(nch, br),)](
            x2.view(torch.int64) if bf16 else x2, out, nch, sign_words(signs), BR=br, num_warps=w, **kw)
    elif sxm == 1:
        bc, nb, w = cfg.rht_amax_cols
        rht.rht_amax_cols_kernel[(triton.cdiv(M, bc), triton.cdiv(N // 16, nb))](
            x2.view(torch.int16) if bf16 else x2, out, N, M, sxn, sign_words(signs), BC=bc, NB=nb, num_warps=w, **kw)
    else:
        raise NotImplementedError("rht amax: a contiguous tensor (rowwise) or a 2-D tensor with unit column stride")
    return out.view(torch.float32)[0]


def like_matrix(x2, sxm, sxn):
    """(y2, sym, syn): a new float32 tensor of x2's shape and y2's strides for the logical
    (m, n) of x2 read with strides (sxm, sxn) -- the same permutation as x2's (the unfused
    RHT paths' temporary)."""
    y2 = torch.empty(x2.shape, dtype=torch.float32, device=x2.device)
    if x2.dim() == 2 and sxm == x2.stride(0) and sxn == x2.stride(1):
        return y2, y2.stride(0), y2.stride(1)
    return y2, y2.stride(1), y2.stride(0)


def rht_apply(x2, M, N, sxm, sxn, rp, config=None):
    """The RHT of the logical M x N matrix along N as a new float32 tensor of x2's shape and
    stride order (the unfused path; a bf16 output rounded, held in float32)."""
    cfg = DEFAULT_CONFIG if config is None else config
    signs, out_bf16 = rp
    y2, sym, syn = like_matrix(x2, sxm, sxn)
    bf16 = x2.dtype == torch.bfloat16
    BM, w = cfg.rht_apply
    rht.rht_apply_kernel[(triton.cdiv(M, BM), N // 16)](
        x2.view(torch.int16) if bf16 else x2, y2, M, sxm, sxn, sym, syn, sign_words(signs), BM=BM, IN_BF16=bf16,
        SIGNS=signs_constexpr(signs, cfg), OUT_BF16=out_bf16, BF16_CVT=bf16_cvt(cfg), num_warps=w)
    return y2


__all__ = ["IF4_MODES", "SR_ELEMENTS", "Plan", "as_matrix", "global_amax", "hif4_launch", "if4_launch", "like_matrix", "rht_apply",
           "rht_global_amax", "rows_bf16_launcher", "scheme_flags", "sign_words", "wide_flags"]
