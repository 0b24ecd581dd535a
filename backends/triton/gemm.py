"""The triton block-scaled GEMM, host side: C = A . B^T (+ c) of packed 4-bit operands,
bit-exact under the ``sm90-bf16`` accumulator model (NVIDIA Hopper, bf16 tensor cores).
Kernels: :mod:`.kernels.gemm`; where it is claimed: :func:`.capability.claimed_accumulators`.

Hopper has no FP4 or block-scaled MMA. This kernel does what the model describes
(:data:`fp4spec.accumulators` ``["sm90-bf16"]``): every operand element becomes the bf16 value
``bf16(element * block scale)`` and bf16 ``wgmma`` instructions (k = 16 each; MMA-Sim:
one truncated fused dot-product-add per instruction, F = 25, RZ to FP32) accumulate into an
FP32 accumulator, K ascending. Normative algorithm of :func:`matmul_packed`:

1. Operands: A (M x K) and B (N x K), blocked along K. Element codes packed two per byte
   along K, the first (even-K) element in the low nibble: ``a_packed`` (M x K/2) and
   ``b_packed`` (N x K/2) uint8. Scale codes, one per block, row-major: ``a_scales``
   (M x K/k_A), ``b_scales`` (N x K/k_B) uint8 (E8M0 for MX, UE4M3 for the two-level
   schemes). A UE4M3 byte's bit 7 (a ``float8_e4m3fn`` sign) is ignored: the kernel reads
   ``s & 0x7F``, the model's ``ue4m3_sign_bit="ignore"`` (:data:`UE4M3_SIGN_BIT`); it refuses
   no byte. K is a multiple of 16 and of both block sizes.
2. Dequantize (:func:`_bf16_bits`, in registers, exact operations only): each element
   becomes ``bf16(element * scale)``. For the supported schemes this product is always exact
   in bf16 (at most 8 significant bits; UE4M3 products are normal; E8M0 products may be
   bf16 subnormals, 2^-128 at least) except for overflow: a product of 2^128 or more is
   +-Inf (E8M0 only). A NaN scale code (E8M0 0xFF, UE4M3 0x7F) gives NaN for the block.
3. Accumulate: ``acc = c`` (float32 M x N; +0 when c is None -- an explicit +0 accumulator,
   never an "ignore the accumulator" MMA), then for k0 = 0, BK, 2 BK, ... in order one
   ``tl.dot(a_tile, b_tile^T, acc)`` with bf16 operands: Triton emits BK/16 k = 16 MMA
   instructions per dot, chained in ascending K (wgmma m64nNk16 on Hopper for tiles of 64
   rows or more, mma.sync m16n8k16 otherwise; MMA-Sim models both with the same fused
   step), so each instruction is exactly one k = 16 step of the model.
4. Epilogue: with tensor scales, ``acc = fp32(acc * g)`` with ``g = fp32(gA * gB)``
   (:func:`fp4spec.matmul_operands.tensor_scale_product`; one IEEE multiplication).
5. NaN results get the model's NaN bit pattern (``0x7FFFFFFF``). Output float32, or bf16:
   round to nearest even of the float32 result (integer rounding of its bit pattern; NaN
   becomes the upper half of the NaN pattern, 0x7FFF).

Why it is bit-exact: step 2 computes the model's operands exactly (tested over every
element code x scale code pair, :func:`dequantize_bf16`); step 3 is the hardware whose
arithmetic the model describes, with the model's chaining (the order inside one k = 16
instruction does not matter: the fused sum of truncated terms is exact); steps 4-5 are the
model's own float32 operations. Checked in the PTX Triton 3.9 generates for sm_90 (ahead of
time, no GPU): one BK = 64 dot is four ``wgmma.mma_async ... m64nNk16.f32.bf16.bf16`` whose
shared-memory descriptors advance by 32 bytes (ascending K) on one accumulator, scale-d is
the constant 1, the next K step's group waits on the previous one (``wgmma.wait_group``),
A comes from registers in the fused and hybrid variants, and no ``.ftz`` arithmetic is
emitted (the E2M1 decode multiplies a float32 subnormal exactly). Triton splits no dot
across warps or accumulators; ``num_stages`` only pipelines loads. Under
``TRITON_INTERPRET=1`` the interpreter's ``tl.dot``
is a numpy matmul (and mishandles bf16 operands), so the interpreted kernels feed the same
exact operand values as float32: on their own they check only data on which every
accumulator model agrees; inside :func:`interpreter_model_dot` each interpreted dot is the
model's chain of k = 16 steps (:func:`model_dot`), so everything around the MMA is checked bit
for bit on any data on the CPU. The check of the MMA itself needs the GPU
(the ``gpu`` tests of ``tests/backends/test_triton_gemm.py``).

Compiles: Triton specialises a kernel on its int arguments (== 1, multiple of 16) and its
constexprs, and each compile of this kernel takes seconds. The tuned configurations want that
(vector loads), but a stream of small GEMMs of many shapes -- the conformance rows -- would
compile dozens of variants. ``any_shape`` configurations (:class:`TileConfig`) run
``gemm_kernel_any``: sizes and strides are plain runtime ints (``do_not_specialize``), the
tile is fixed, K may be any multiple of 16 (the rest after the BK dots runs as k = 16 dots,
still one chain in ascending K), and c and g are always passed (+0 and 1.0 when absent: the
same bits), so one compile serves every shape of a scheme pair. :func:`matmul` uses the
config's ``gemm_small`` (:class:`.config.TritonConfig`) for small GEMMs.

Variants (:class:`TileConfig`): ``"fused"`` dequantizes both operand tiles in the GEMM's K
loop; ``"prepass"`` dequantizes A and B once into bf16 buffers (:func:`dequantize_bf16`,
the same exact dequantization, memory bound) and then runs the same GEMM kernel on bf16
tiles; ``"hybrid"`` does that for B only (the wgmma shared-memory operand) and dequantizes A
in the loop. All three give the same bits. ``unpack="join"`` interleaves the low and high
nibbles back into K order; ``unpack="dup"`` permutes K inside every 16-element group
instead (low nibbles of 8 bytes, then their high nibbles: the same 16 products per MMA
instruction, each byte loaded twice).
"""


from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import triton

from ..base import BackendError, resolve_scheme
from .capability import GEMM_ACCUMULATORS, interpret
from .config import DEFAULT_CONFIG

#: Catalogue schemes it takes (A and B may use different ones; the scale rule and profile do
#: not matter to a GEMM, so every ``mxfp4:scale_rule=...`` variant is taken too).
SCHEMES = ("mxfp4", "nvfp4", "nvfp4_2d", "ufp4", "nvint4")
#: Element formats and scale formats the dequantization handles (kernel codes).
ELEMENTS = {"e2m1": 0, "e1m2": 1, "int4_sym": 2}
SCALES = {"e8m0": 0, "ue4m3": 1}
#: The float32 NaN of the sm90-bf16 model (``model.nan_bits``).
NAN_BITS = 0x7FFFFFFF
#: What the kernel does with a UE4M3 scale byte whose bit 7 is set: it reads the low 7 bits
#: (``_scale_operand``), the sm90-bf16 model's ``ue4m3_sign_bit``.
UE4M3_SIGN_BIT = "ignore"
VARIANTS = ("fused", "hybrid", "prepass")
UNPACKS = ("join", "dup")


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """How the GEMM runs (never what it computes: every configuration gives the same bits).

    Fields:
        variant: ``"fused"`` (both operands dequantized in the K loop), ``"hybrid"`` (B
            dequantized once to bf16, A in the loop) or ``"prepass"`` (both once to bf16).
        BM, BN, BK: output tile and K step (powers of two, >= 16; BK is halved until it
            divides K).
        GROUP_M: tile rows per group of the grouped (L2-friendly) tile order.
        num_warps, num_stages: Triton launch options (num_stages pipelines the K loop's loads).
        unpack: ``"join"`` or ``"dup"`` (see the module docstring).
        dq_rows, dq_bytes: tile of the prepass dequantize kernel (rows x packed bytes).
        any_shape: one compiled kernel for every shape (sizes and strides are runtime ints,
            not specialised; the tile is BM x BN x BK whatever M, N, K; any K multiple of 16:
            the K % BK rest runs as k = 16 dots; c and g are always passed, as +0 and 1.0
            when absent -- the same bits). Else the kernel is specialised on the shape (vector
            loads where strides are multiples of 16; tiles shrink to small M, N; BK halves
            until it divides K): faster, but a new compile for many new shapes.
    """

    variant: str = "prepass"
    BM: int = 128
    BN: int = 256
    BK: int = 64
    GROUP_M: int = 8
    num_warps: int = 8
    num_stages: int = 3
    unpack: str = "join"
    dq_rows: int = 32
    dq_bytes: int = 128
    any_shape: bool = False

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant: {self.variant!r} is not one of {', '.join(map(repr, VARIANTS))}")
        if self.unpack not in UNPACKS:
            raise ValueError(f"unpack: {self.unpack!r} is not one of {', '.join(map(repr, UNPACKS))}")
        for f in ("BM", "BN", "BK", "dq_rows", "dq_bytes"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise ValueError(f"{f}: {v!r} is not a power of two >= 16")
        for f in ("GROUP_M", "num_warps", "num_stages"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{f}: {v!r} is not a positive integer")
        if not isinstance(self.any_shape, bool):
            raise ValueError(f"any_shape: {self.any_shape!r} is not True or False")

    def describe(self) -> str:
        return (f"{self.variant} {self.BM}x{self.BN}x{self.BK} w{self.num_warps} s{self.num_stages} "
                f"g{self.GROUP_M} {self.unpack}" + (" any-shape" if self.any_shape else ""))


#: Named configurations (``benchmarks/bench_gpu_gemm.py`` times them).
CONFIGS = {
    "prepass-128x256": TileConfig("prepass", 128, 256, 64, 8, 8, 3),
    "prepass-128x256-s4": TileConfig("prepass", 128, 256, 64, 8, 8, 4),
    "prepass-128x128": TileConfig("prepass", 128, 128, 64, 8, 4, 4),
    "prepass-128x128-w8": TileConfig("prepass", 128, 128, 64, 8, 8, 3),
    "prepass-256x128": TileConfig("prepass", 256, 128, 64, 8, 8, 3),
    "hybrid-128x256": TileConfig("hybrid", 128, 256, 64, 8, 8, 3),
    "hybrid-128x256-s4": TileConfig("hybrid", 128, 256, 64, 8, 8, 4),
    "hybrid-64x256": TileConfig("hybrid", 64, 256, 64, 8, 4, 3),
    "hybrid-128x128": TileConfig("hybrid", 128, 128, 64, 8, 8, 3),
    "fused-128x128": TileConfig("fused", 128, 128, 64, 8, 8, 3),
    "fused-128x256": TileConfig("fused", 128, 256, 64, 8, 8, 3),
    "fused-128x128-k128": TileConfig("fused", 128, 128, 128, 8, 8, 2),
    "fused-128x128-dup": TileConfig("fused", 128, 128, 64, 8, 8, 3, "dup"),
    "any-64x64": TileConfig("fused", 64, 64, 16, 8, 4, 2, any_shape=True),
    "any-prepass-128x128-k64": TileConfig("prepass", 128, 128, 64, 8, 4, 3, any_shape=True),
}


def get_config(config=None, **overrides) -> TileConfig:
    """A :class:`TileConfig`: ``config`` (a name of :data:`CONFIGS`, a TileConfig, or None for
    the shipped ``TritonConfig.gemm``) with field ``overrides``."""
    if config is None:
        config = DEFAULT_CONFIG.gemm
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"config: {config!r} is not one of {', '.join(map(repr, CONFIGS))}")
        config = CONFIGS[config]
    if not isinstance(config, TileConfig):
        raise TypeError(f"config: expected a name or a TileConfig, got {type(config).__name__}")
    unknown = [k for k in overrides if k not in {f.name for f in dataclasses.fields(TileConfig)}]
    if unknown:
        raise ValueError(f"{unknown[0]}: not a tile configuration field; fields: "
                         f"{', '.join(f.name for f in dataclasses.fields(TileConfig))}")
    return dataclasses.replace(config, **overrides) if overrides else config


def operand_format(scheme) -> tuple[int, int, int]:
    """(element kernel code, scale kernel code, block size) of a scheme the GEMM takes;
    BackendError naming what is not supported otherwise."""
    sch = resolve_scheme(scheme)
    if sch.structure not in ("mx", "two_level"):
        raise BackendError(f"scheme: {sch.name!r} ({sch.structure}) is not supported by the triton GEMM; it takes "
                           f"MX and two-level schemes with 4-bit elements ({', '.join(SCHEMES)})")
    if sch.element.name not in ELEMENTS:
        raise BackendError(f"scheme: element {sch.element.name!r} of {sch.name!r} is not supported by the triton "
                           f"GEMM; elements: {', '.join(ELEMENTS)}")
    if sch.scale.name not in SCALES:
        raise BackendError(f"scheme: scale {sch.scale.name!r} of {sch.name!r} is not supported by the triton GEMM; "
                           f"scales: {', '.join(SCALES)}")
    k = sch.block_size
    if k % 16 or k & (k - 1):
        raise BackendError(f"scheme: block size {k} of {sch.name!r} is not a power of two >= 16; the triton GEMM "
                           f"needs whole blocks per 16 elements of K (the MMA step) and per K tile")
    return ELEMENTS[sch.element.name], SCALES[sch.scale.name], sch.block_size


def _schemes(scheme):
    if isinstance(scheme, (tuple, list)):
        if len(scheme) != 2:
            raise ValueError(f"scheme: expected one scheme or a pair (scheme of A, scheme of B), got {scheme!r}")
        return scheme[0], scheme[1]
    return scheme, scheme


def _check_packed(name: str, packed, scales, block: int, device):
    import torch

    for arg, t in ((f"{name}_packed", packed), (f"{name}_scales", scales)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{arg}: expected a torch tensor, got {type(t).__name__}")
        if t.dtype != torch.uint8 or t.dim() != 2:
            raise ValueError(f"{arg}: expected a 2-d uint8 tensor, got {t.dtype} of shape {tuple(t.shape)}")
        if t.device != device:
            raise ValueError(f"{arg}: on {t.device}, but a_packed is on {device}; put every operand on one device")
        if t.stride(1) != 1:
            raise ValueError(f"{arg}: the last dimension must be contiguous (stride 1)")
    rows, k = packed.shape[0], packed.shape[1] * 2
    if k % 16 or k % block:
        raise ValueError(f"{name}_packed: K = {k} is not a multiple of 16 (the sm90-bf16 step) and of the block "
                         f"size {block}; pad K with zero codes")
    if tuple(scales.shape) != (rows, k // block):
        raise ValueError(f"{name}_scales: expected shape ({rows}, {k // block}) for K = {k} and blocks of {block}, "
                         f"got {tuple(scales.shape)}")
    return rows, k


def _g_tensor(g, device):
    import torch

    if g is None:
        return None
    if isinstance(g, torch.Tensor):
        if g.numel() != 1:
            raise ValueError(f"g: expected one value, got a tensor of shape {tuple(g.shape)}")
        if g.dtype != torch.float32:
            raise ValueError(f"g: expected float32 (fp32(gA * gB)), got {g.dtype}")
        return g.reshape(1).to(device)
    return torch.tensor([float(np.float32(g))], dtype=torch.float32, device=device)


def dequantize_bf16(packed, scales, scheme, *, rows_per_program: int = 32, bytes_per_program: int = 128,
                    num_warps: int = 4, any_shape: bool = False):
    """bf16 (R x K) tensor ``bf16(element * block scale)`` of packed codes (R x K/2, low nibble
    first) and scale codes (R x K/k): the sm90-bf16 model's operand values (step 2 of the
    module docstring), on the device of ``packed``. Tensor scales are not applied.
    ``any_shape``: the kernel is not specialised on sizes and strides (one compile for every
    shape)."""
    import torch

    from .kernels import gemm as gk

    elem, scale, block = operand_format(scheme)
    rows, k = _check_packed("x", packed, scales, block, packed.device)
    out = torch.empty((rows, k), dtype=torch.bfloat16, device=packed.device)
    kb = k // 2
    grid = (triton.cdiv(rows, rows_per_program), triton.cdiv(kb, bytes_per_program))
    kernel = gk.dequant_bf16_kernel_any if any_shape else gk.dequant_bf16_kernel
    kernel[grid](packed, scales, out.view(torch.int32), rows, kb, packed.stride(0), scales.stride(0), kb,
                 BR=rows_per_program, BKB=bytes_per_program, BLOCK=block, ELEM=elem, SCALE=scale, num_warps=num_warps)
    return out


def matmul_packed(a_packed, a_scales, b_packed, b_scales, scheme, *, g=None, c=None, out_dtype=None,
                  config=None, certify=None, **tile_config):
    """C = A . B^T (+ c) times g, bit-exact under ``sm90-bf16`` (the module docstring's steps).

    Args:
        a_packed, a_scales: A (M x K): uint8 codes packed along K (M x K/2, first element in
            the low nibble) and scale codes (M x K/k) -- a CUDA tensor (or CPU under
            ``TRITON_INTERPRET=1``).
        b_packed, b_scales: B (N x K), the same layout, same device.
        scheme: the operands' scheme (name, spec or Scheme), or a pair (scheme of A, scheme
            of B); its element format, scale format and block size are what matter.
        g: the tensor-scale product ``fp32(gA * gB)`` (a float32 number or a one-element
            float32 tensor), or None (no epilogue multiplication).
        c: None (start from +0) or a float32 (M, N) initial accumulator.
        out_dtype: ``torch.float32`` (default) or ``torch.bfloat16`` (RNE of the float32 result).
        config, **tile_config: a :class:`TileConfig`, a name of :data:`CONFIGS`, and/or field
            overrides (``variant=``, ``BM=``, ...); results do not depend on them.
        certify: None, or a function ``(x_a, a_scales, x_b, b_scales, BM, BN, BK, any_shape)
            -> Certificate`` (:func:`.certify.certifier`) given the operands' bf16 values
            (the prepass buffers, or computed for it); the kernel then also fills
            ``Certificate.bad``, one flag per output tile (:mod:`.certify`).

    Returns:
        a torch tensor (M, N) of ``out_dtype`` on the operands' device; with ``certify``, the
        pair (that tensor, the Certificate).
    """
    import torch

    from .kernels import gemm as gk

    out_dtype = torch.float32 if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"out_dtype: {out_dtype} is not torch.float32 or torch.bfloat16")
    sa, sb = _schemes(scheme)
    ea, fa, ka = operand_format(sa)
    eb, fb, kb = operand_format(sb)
    if not isinstance(a_packed, torch.Tensor):
        raise TypeError(f"a_packed: expected a torch tensor, got {type(a_packed).__name__}")
    dev = a_packed.device
    m, k = _check_packed("a", a_packed, a_scales, ka, dev)
    n, k_b = _check_packed("b", b_packed, b_scales, kb, dev)
    if k != k_b:
        raise ValueError(f"a_packed, b_packed: K differs ({k} vs {k_b}); C = A . B^T needs A (M x K), B (N x K)")
    if c is not None:
        if not isinstance(c, torch.Tensor):
            c = torch.from_numpy(np.ascontiguousarray(np.asarray(c)))
        if c.dtype != torch.float32:
            raise TypeError(f"c: expected float32, got {c.dtype}")
        if tuple(c.shape) != (m, n):
            raise ValueError(f"c: expected shape ({m}, {n}) (M x N), got {tuple(c.shape)}")
        c = c.to(dev)
        if c.stride(1) != 1:
            c = c.contiguous()
    gt = _g_tensor(g, dev)
    cfg = get_config(config, **tile_config)
    if cfg.any_shape:
        # fixed tile and launch options; c and g always present (+0 and 1.0: the same bits)
        bk, bm, bn, warps = cfg.BK, cfg.BM, cfg.BN, cfg.num_warps
        if c is None:
            c = torch.zeros((m, n), dtype=torch.float32, device=dev)
        if gt is None:
            gt = torch.ones(1, dtype=torch.float32, device=dev)
        kernel = gk.gemm_kernel_any
    else:
        bk = cfg.BK
        while k % bk:
            bk //= 2
        bm, bn = _tile(cfg, m, n)
        warps = cfg.num_warps if (bm, bn) == (cfg.BM, cfg.BN) else min(cfg.num_warps, max(4, bm * bn // 1024))
        kernel = gk.gemm_kernel
    interp = interpret()
    a_fused = cfg.variant in ("fused", "hybrid")
    b_fused = cfg.variant == "fused"
    def bf16_operand(packed, scales, sch):
        x = dequantize_bf16(packed, scales, sch, rows_per_program=cfg.dq_rows, bytes_per_program=cfg.dq_bytes,
                            any_shape=cfg.any_shape)
        return x.view(torch.int16) if interp else x

    xa = None if a_fused and certify is None else bf16_operand(a_packed, a_scales, sa)
    xb = None if b_fused and certify is None else bf16_operand(b_packed, b_scales, sb)
    a_ptr, sam = (a_packed, a_packed.stride(0)) if a_fused else (xa, k)
    b_ptr, sbn = (b_packed, b_packed.stride(0)) if b_fused else (xb, k)
    out = torch.empty((m, n), dtype=out_dtype, device=dev)
    out_view = out.view(torch.int16 if out_dtype == torch.bfloat16 else torch.int32)
    dummy = out_view
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    nan = NAN_BITS - (1 << 32) if NAN_BITS >= 1 << 31 else NAN_BITS
    cert = None
    if certify is not None:
        cert = certify(xa, a_scales, xb, b_scales, bm, bn, bk, cfg.any_shape)
    cargs = ((dummy,) * 5 + (0, 1.0)) if cert is None else cert.kernel_args()
    kernel[grid](
        a_ptr, a_scales, b_ptr, b_scales, dummy if c is None else c, dummy if gt is None else gt, out_view, 0.0,
        m, n, k, sam, a_scales.stride(0), sbn, b_scales.stride(0), 0 if c is None else c.stride(0), out.stride(0),
        *cargs, CERT=cert is not None,
        BM=bm, BN=bn, BK=bk, GROUP_M=cfg.GROUP_M,
        A_FUSED=a_fused, A_ELEM=ea, A_SCALE=fa, A_BLOCK=ka, B_FUSED=b_fused, B_ELEM=eb, B_SCALE=fb, B_BLOCK=kb,
        DUP=cfg.unpack == "dup", HAS_C=c is not None, HAS_G=gt is not None, OUT_BF16=out_dtype == torch.bfloat16,
        NAN=nan, DOT_F32=interp, TAIL=cfg.any_shape, num_warps=warps, num_stages=cfg.num_stages)
    return out if cert is None else (out, cert)


def _tile(cfg: TileConfig, m: int, n: int) -> tuple[int, int]:
    """(BM, BN) of a launch: the configuration's, shrunk to small M, N unless any_shape."""
    if cfg.any_shape:
        return cfg.BM, cfg.BN
    return min(cfg.BM, max(16, triton.next_power_of_2(m))), min(cfg.BN, max(16, triton.next_power_of_2(n)))


def pack_operand(q, device=None):
    """(packed codes, scale codes, tensor scale or None) of a 2-d QuantizedTensor blocked along
    K, as torch tensors on ``device`` (default: the tensor's own device, or ``"cuda"`` for a
    numpy QuantizedTensor when CUDA is available, else the CPU): the layout
    :func:`matmul_packed` takes. Rows are the tensor's own (padding rows of 16 x 16 tiles
    dropped); K is the stored, padded K."""
    import torch

    if device is None:
        device = q.device if q.is_torch else ("cuda" if torch.cuda.is_available() else "cpu")
    qt = q.to_torch(device) if not q.is_torch or str(q.device) != str(torch.device(device)) else q
    rows = q.shape[0]
    packed = qt.storage[:rows]  # the codes as stored: packed, low nibble first
    scales = qt.scales[:rows]
    return (packed if packed.is_contiguous() else packed.contiguous(),
            scales if scales.is_contiguous() else scales.contiguous(), qt.global_scale)


def matmul(qa, qb, *, accumulator="sm90-bf16", c=None, device=None, out_dtype=None, config=None, defaults=None,
           **tile_config) -> np.ndarray:
    """``Backend.matmul`` for the triton backend: D = A . B^T (+ c) of two QuantizedTensors
    (numpy or torch), as :func:`fp4spec.matmul` with ``accumulator``, bit for bit.

    1. ``accumulator`` must be one of :data:`.capability.GEMM_ACCUMULATORS`, as registered
       (BackendError otherwise): ``"sm90-bf16"``, what the kernel computes, or a model the
       kernel's results are certified for (:mod:`.certify`: ``"exact"``, ``"fp32"``,
       ``"sm100-mxf4nvf4"``, ``"sm100-mxf8f6f4"``).
    2. The operands are checked as the spec checks them
       (:func:`fp4spec.matmul_operands.check_operands`: rank 2, blocked along K, equal K,
       K a multiple of 16, c float32 (M, N); UE4M3 scale bytes with bit 7 set pass where the
       model's ``ue4m3_sign_bit="ignore"`` says so, and the kernel reads their low 7 bits);
       their schemes must be ones the kernel takes (:func:`operand_format`).
    3. Codes are packed (low nibble first) on ``device``, ``g = fp32(gA * gB)``, and
       :func:`matmul_packed` runs: with ``config`` and ``tile_config`` when given, else with
       ``defaults.gemm_small`` (:class:`.config.TritonConfig`, None: the shipped one) for
       GEMMs of at most ``defaults.gemm_small_macs`` multiply-adds (one compile for every
       shape) and ``defaults.gemm`` (``sm90-bf16``) or ``defaults.gemm_certified`` for larger
       ones.
    4. Certified models: the tiles with an output the certificate does not prove are
       recomputed by the emulator on the CPU (:func:`.certify.fill_uncertified`, a
       HostFallbackWarning saying how many outputs); the others are the kernel's.

    Returns float32 (M, N): a torch tensor on the device for torch operands (``out_dtype=
    torch.bfloat16``: bfloat16), numpy for numpy operands (bfloat16: the bits as uint16).
    """
    import torch

    from fp4spec.accumulator_models import get_accumulator
    from fp4spec.matmul_operands import check_operands

    from . import certify

    model = get_accumulator(accumulator)
    if model.name not in GEMM_ACCUMULATORS:
        raise BackendError(f"accumulator: the triton GEMM implements only {', '.join(map(repr, GEMM_ACCUMULATORS))} "
                           f"(Hopper bf16 tensor cores; all but sm90-bf16 by certificate), not {model.name!r}")
    if model != get_accumulator(model.name):
        raise BackendError(f"accumulator: a modified {model.name!r} model is not what the kernel computes")
    from fp4spec.quantized import QuantizedTensor

    for arg, q in (("qa", qa), ("qb", qb)):
        if not isinstance(q, QuantizedTensor):
            raise TypeError(f"{arg}: expected a QuantizedTensor (fp4spec.quantize(x, scheme)), got {type(q).__name__}")
    ops = check_operands(model, qa, qb, c)  # device operands: shapes and schemes only, nothing transferred
    operand_format(qa.scheme)
    operand_format(qb.scheme)
    numpy_out = not qa.is_torch
    if device is None:
        device = qa.device if qa.is_torch else ("cuda" if torch.cuda.is_available() else "cpu")
    pa, sa, _ = pack_operand(qa, device)
    pb, sb, _ = pack_operand(qb, device)
    ct = None if ops.c is None else (ops.c if isinstance(ops.c, torch.Tensor)
                                     else torch.from_numpy(np.ascontiguousarray(ops.c))).to(device)
    d = DEFAULT_CONFIG if defaults is None else defaults
    small = ops.m * ops.n * ops.k_padded <= d.gemm_small_macs
    if config is None and not tile_config:
        config = d.gemm_small if small else d.gemm if model.name == "sm90-bf16" else d.gemm_certified
    if model.name == "sm90-bf16":
        out = matmul_packed(pa, sa, pb, sb, (qa.scheme, qb.scheme), g=ops.g, c=ct, out_dtype=out_dtype,
                            config=config, **tile_config)
    elif out_dtype not in (None, torch.float32):
        raise BackendError(f"out_dtype: {model.name!r} results are float32 (bf16 output is sm90-bf16's option)")
    elif certify.stepped(model):  # the step kernel; unproved tiles by the emulator
        xa = dequantize_bf16(pa, sa, qa.scheme, any_shape=small)
        xb = dequantize_bf16(pb, sb, qb.scheme, any_shape=small)
        c_in = ct if ct is None or ct.is_contiguous() else ct.contiguous()
        out, cert, (bm, bn, group_m) = certify.matmul_steps(xa, sa, xb, sb, (qa.scheme, qb.scheme), model,
                                                            g=_g_tensor(ops.g, pa.device), c=c_in, small=small)
        certify.fill_uncertified(out, cert, qa, qb, model, ops, bm, bn, group_m)
    else:  # the same kernel with a certificate; uncertified tiles by the emulator
        cfg = get_config(config, **tile_config)
        cert_fn = certify.certifier(model, qa.scheme, qb.scheme)
        out, cert = matmul_packed(pa, sa, pb, sb, (qa.scheme, qb.scheme), g=ops.g, c=ct, config=cfg,
                                  certify=cert_fn)
        bm, bn = _tile(cfg, ops.m, ops.n)
        certify.fill_uncertified(out, cert, qa, qb, model, ops, bm, bn, cfg.GROUP_M)
    if not numpy_out:
        return out
    if out.dtype == torch.bfloat16:
        return out.view(torch.int16).cpu().numpy().view(np.uint16)
    return out.cpu().numpy()


def model_dot(a, b, acc, accumulator="sm90-bf16") -> np.ndarray:
    """float32 ``acc + a . b`` as the accumulator model's chained steps: what one ``tl.dot`` of
    the kernel computes on Hopper (:func:`fp4spec.emulator.gemm.model_dot`, which the RHT's
    ``mma`` arithmetic uses too). Used by :func:`interpreter_model_dot`."""
    from fp4spec.emulator.gemm import model_dot as emulated

    return emulated(a, b, acc, accumulator)


@contextlib.contextmanager
def interpreter_model_dot(accumulator="sm90-bf16"):
    """Under ``TRITON_INTERPRET=1``: every float32 ``tl.dot`` of the interpreter computes
    :func:`model_dot` instead of numpy's matmul while the context is active, so that the
    interpreted GEMM gives the model's bits on any data (a CPU check of everything around the
    MMA: packing, scales, tiles, masks, c, epilogue, NaN patterns; the MMA itself is the
    GPU's). Other dots are left to the interpreter."""
    from triton.runtime import interpreter as ti

    orig = ti.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.dtype == np.float32 and b.data.dtype == np.float32 and d.data.dtype == np.float32:
            return ti.TensorHandle(model_dot(a.data, b.data, d.data, accumulator), d.dtype.scalar)
        return orig(self, a, b, d, input_precision, max_num_imprecise_acc)

    ti.InterpreterBuilder.create_dot = create_dot
    try:
        yield
    finally:
        ti.InterpreterBuilder.create_dot = orig


def bf16_rne_bits(x: np.ndarray, nan_bits: int = NAN_BITS) -> np.ndarray:
    """uint16 bf16 bit patterns of float32 ``x`` rounded to nearest even (step 5 of the
    module docstring; NaN -> ``nan_bits >> 16``): the reference of the bf16 output, as
    :func:`fp4spec.rht.bf16_rne` (the mma RHT's step M5) rounds."""
    from fp4spec.rht import bf16_rne

    return bf16_rne(x, nan_bits).view(np.uint16)


__all__ = ["CONFIGS", "ELEMENTS", "NAN_BITS", "SCALES", "SCHEMES", "TileConfig", "UE4M3_SIGN_BIT", "bf16_rne_bits", "dequantize_bf16",
           "get_config", "interpreter_model_dot", "matmul", "matmul_packed", "model_dot", "operand_format",
           "pack_operand"]
