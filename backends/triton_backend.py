"""The triton backend: quantize and dequantize kernels (:mod:`triton_kernels`), bit-exact with
the numpy emulator, on NVIDIA/AMD GPUs or on the CPU under ``TRITON_INTERPRET=1``.

Supported: ``mxfp4`` (scale rules floor, ceil, even, rceil; ocp and torchao profiles) and
the TransformerEngine two-level schemes ``nvfp4`` (1 x 16), ``nvfp4_2d`` (16 x 16 tiles),
``ufp4``, ``nvint4``; rounding ``rne`` and ``sr`` with given random bits (sr_bits <= 24);
rowwise (``axis=-1``) and columnwise (``axis=-2``: the transposed matrix, read with swapped
strides, no copy) quantization of 2-D inputs (leading dimensions are flattened into rows);
bf16 / fp16 / fp32 inputs. Outputs: packed codes (two per byte, first element in the low
nibble), uint8 scale codes (plain row-major layout), and for two-level schemes the float32
tensor scale S_dec.

Two-level schemes take the global amax first (:func:`triton_kernels.amax_kernel`), then the
tensor scale S_enc = fp32(fp32(448 * max) / amax), S_dec = fp32(1 / S_enc) (IEEE division)
and the 128 element multipliers in one small kernel (:func:`two_level_consts`), then one
quantize pass. ``quantize_packed(..., s_enc_dec=...)`` takes a
precomputed tensor scale (the amax of the previous step, as TransformerEngine does).

Fast paths (benchmarks/NOTES-triton.md): rowwise RNE of bf16 with E2M1 1 x 16 / 1 x 32
blocks and plain scales runs :func:`triton_rows_fast.rows_tb_kernel` (variant ``tb``: one
block per thread, the encoder on the FP32 pipe); other rowwise 1 x k blocks (k a multiple of
16) of a contiguous tensor run the v2 :func:`triton_kernels.quantize_rows_kernel` /
``quantize_rows2d_kernel`` (one scale block per tile row, bf16 read as 64-bit groups of
four); columnwise ``quantize_cols_kernel`` (no transpose); dequantize
``dequantize_rows_kernel``. ``rounding="sr"`` with ``seed=`` draws the bits on the device
with Philox (:func:`philox_rbits` replays them on the CPU); ``scale_layout="cublas"``
writes the cuBLAS 128 x 4 blocked scale layout directly. ``variant="v1"`` keeps the generic
tile kernel (nvfp4_2d always uses it).

RHT (``rht=``, :class:`fp4spec.rht.RHT` ``"16/fwht-fp32"``, any signs, bf16/float32/float64
output): fused with the quantization for 1 x 16 and 1 x 32 blocks rowwise
(:func:`triton_kernels.quantize_rows_rht_kernel`) and columnwise (``quantize_cols3_kernel``):
the transform runs in registers, the pinned butterfly operation for operation; two-level
schemes take the amax of the transformed tensor in a fused RHT + amax pass (no temporary).
Other shapes (2-D tiles, k = 64, 128) write the transform to a float32 temporary first.
Columnwise v3 (``quantize_cols3_kernel``, also without RHT) stores 32 contiguous bytes of
codes and a 4-byte scale word per column and band of four blocks.

GEMM: :meth:`TritonBackend.matmul` runs :mod:`triton_gemm` and claims the ``sm90-bf16``
accumulator model on compute capability 9.x (Hopper) only.

Not implemented here (yet): the torchao two-level chain and 4over6.
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from fp4spec import philox as _philox
from fp4spec.block_schemes import Scheme
from fp4spec.philox import philox4x32
from fp4spec.quantized import QuantizedTensor
from fp4spec.rht import MMA_PREFIX

from .base import Availability, Backend, Capabilities, resolve_scheme
from . import torch_backend as tb

ROUNDINGS = ("rne", "sr")
ELEMENTS = ("e2m1", "e1m2", "int4_sym")
MX_RULES = {"floor": 0, "ceil": 1, "even": 2, "rceil": 3}
#: RHT specs the kernels apply bit for bit (fp4spec.rht: size 16, the pinned float32 butterfly).
RHT_SPECS = ("16/fwht-fp32",)

#: Tile sizes (rows x columns of the logical matrix per program); tuned on the H200.
DEFAULT_BM, DEFAULT_BN, DEFAULT_WARPS = 32, 128, 4


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def availability() -> Availability:
    try:
        import triton
    except ImportError:
        return Availability.no("triton is not installed (pip install triton)")
    import torch

    if torch.cuda.is_available():
        return Availability.yes(f"triton {triton.__version__} on {torch.cuda.get_device_name()}")
    if _interpret():
        return Availability.yes(f"triton {triton.__version__} interpreter on the CPU (TRITON_INTERPRET=1)")
    return Availability.no("no GPU, and TRITON_INTERPRET=1 is not set")


def rht_specs(device=None) -> tuple:
    """The RHT specs the kernels claim on ``device``: :data:`RHT_SPECS` everywhere, plus
    ``"16/mma:sm90-bf16"`` where the bf16 ``tl.dot`` computes that accumulator model (Hopper,
    and the interpreter through ``interpreter_model_dot``; :mod:`.triton_rht_mma`)."""
    from .triton_rht_mma import mma_arith

    a = mma_arith(device)
    return RHT_SPECS + ((f"16/{a}",) if a else ())


def check_rht(rht):
    """The :class:`fp4spec.rht.RHT` an ``rht=`` argument names (None: no transform), or
    NotImplementedError if the kernels do not apply it (so ``backend="auto"`` falls back)."""
    from fp4spec.rht import resolve_rht

    r = resolve_rht(rht)
    if r is None:
        return None
    if r.arith.startswith(MMA_PREFIX):
        specs = rht_specs()
        if r.spec not in specs:
            raise NotImplementedError(f"rht: {r.spec!r} (triton backend here: {', '.join(specs)}; the mma "
                                      f"arithmetic needs a GPU whose bf16 MMA it models, or the interpreter)")
        return r
    rht_params(r)
    return r


def rht_params(rht):
    """(sign mask, bf16 output) of the fwht-fp32 transform an ``rht=`` argument names (None: no
    transform).

    The butterfly kernels run :class:`fp4spec.rht.RHT` ``"16/fwht-fp32"`` with any signs; a
    float64 output equals the float32 one widened (quantize reads it exactly), so it is the
    float32 path. Anything else raises NotImplementedError (``"mma:..."`` transforms go to
    :mod:`.triton_rht_mma` before this is asked).
    """
    from fp4spec.rht import resolve_rht

    r = resolve_rht(rht)
    if r is None:
        return None
    if r.spec not in RHT_SPECS:
        raise NotImplementedError(f"rht: {r.spec!r} (triton backend: {', '.join(rht_specs())})")
    return r.sign_mask(), r.out_dtype == "bfloat16"


def check_request(scheme: Scheme, rounding: str, sr_bits: int = 8, rht=None):
    """NotImplementedError if the kernels cannot run the request; else the resolved RHT (or None)."""
    r = check_rht(rht)
    if rounding not in ROUNDINGS:
        raise NotImplementedError(f"rounding: {rounding!r} (triton backend: {', '.join(ROUNDINGS)})")
    if rounding == "sr" and not 1 <= int(sr_bits) <= 24:
        raise NotImplementedError(f"sr_bits: {sr_bits} (triton backend: 1..24, exact in float32)")
    if scheme.element.name not in ELEMENTS:
        raise NotImplementedError(f"{scheme.name}: element {scheme.element.name!r}")
    if scheme.block_size % 2 or scheme.block_size > 128 or scheme.block_size & (scheme.block_size - 1):
        raise NotImplementedError(f"{scheme.name}: block size {scheme.block_size} (powers of two up to 128)")
    if scheme.structure == "mx":
        if scheme.element.name != "e2m1":
            raise NotImplementedError(f"{scheme.name}: MX with E2M1 elements only")
        if scheme.policies["mx_rceil_descale"] != "mul_reciprocal" and scheme.scale_rule == "rceil":
            raise NotImplementedError(f"{scheme.name}: rceil with a true division")
    elif scheme.structure == "two_level":
        tb.check_two_level(scheme)
        if scheme.element_max is not None or scheme.scale_max is not None:
            raise NotImplementedError(f"{scheme.name}: element_max / scale_max overrides")
        if scheme.is_2d and scheme.tile_rows not in (1, 2, 4, 8, 16, 32):
            raise NotImplementedError(f"{scheme.name}: tile rows {scheme.tile_rows}")
    else:
        raise NotImplementedError(f"{scheme.name}: structure {scheme.structure!r}")
    return r


@lru_cache(maxsize=None)
def _tables(fmt_name: str, device: str):
    import torch

    t = tb.element_tables(fmt_name)
    f = lambda v: torch.tensor(v, dtype=torch.float32, device=device)  # noqa: E731
    return f(t["rne"]), f(t["down"]), f(t["mags"]), f(t["values"])


def global_amax(x2, M, N, sxm, sxn):
    """float32 0-d tensor: max |x| (NaN if any NaN) over the logical M x N matrix."""
    import torch
    from . import triton_kernels as tk

    out = torch.zeros(1, dtype=torch.int32, device=x2.device)
    BM, BN = 64, 256
    grid = (max(1, -(-M // BM)), max(1, -(-N // BN)))
    bf16 = x2.dtype == torch.bfloat16
    tk.amax_kernel[grid](x2.view(torch.int16) if bf16 else x2, out, M, N, sxm, sxn, BM=BM, BN=BN, BF16=bf16)
    return out.view(torch.float32)[0]


def _as_matrix(x, axis):
    """(x2, M, N, sxm, sxn, out_shape): the logical 2-D matrix whose rows are quantized along N."""
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


#: Fast-path tiles (tuned on the H200, benchmarks/NOTES-triton.md): blocks per program and
#: warps for the rowwise kernel, columns per program and warps for the columnwise kernel.
#: Rowwise: structure -> (variant, blocks per program, warps); "rows" is one block per
#: thread, "rows2d" a [blocks, K/4] tile of 64-bit words (bf16, E2M1, RNE only).
ROWS_CFG = {"two_level": ("rows", 512, 8), "mx": ("rows2d", 256, 8)}
#: The default rowwise kernel where it applies (bf16, E2M1, 1 x 16 / 1 x 32, RNE, plain
#: scales): triton_rows_fast's ``tb``, blocks per program and warps (H200: 83-89 % of the
#: copy as whole calls, v2 76 %).
TB_BR, TB_WARPS = 128, 4
#: quantize_packed's ``variant`` values (None: the fast path that applies).
VARIANTS = (None, "tb", "rows", "rows2d", "cols", "cols3", "unfused", "v1")
COLS_BC, COLS_WARPS, COLS_BANDS = 512, 2, 8
#: Columnwise v3 (``quantize_cols3_kernel``): block size -> (columns per program, warps,
#: blocks per program: 32 code bytes per column); the default columnwise kernel for
#: k = 16, 32 is COLS_VARIANT. k = 32 at 128 columns: with the fast encoder's fallback branch
#: 256 columns need > 255 registers (spills) for mxfp4 (sm_90, offline count). H200,
#: 16384^2 bf16 (benchmarks/RESULTS.md): nvfp4 128/4/4 0.687 ms vs 256/4/4 0.853 ms (v2: 0.795);
#: mxfp4 128/4/2 0.240 ms (v2: 0.997).
COLS3_CFG = {16: (128, 4, 4), 32: (128, 4, 2)}
#: cols3 loads one value per thread in its compute layout, per (block size, with the RHT):
#: the 8-byte loads' layout conversions serialised the 1 x 16 kernel's row loads. H200 nvfp4
#: columnwise 0.687 -> 0.248 ms (0.398 -> 0.297 with the RHT); 1 x 32 is faster without.
COLS3_SCALAR_LOADS = {(16, False): True, (16, True): True}
#: ... for SR and non-E2M1 elements (the generic encoder: more registers, longer compiles).
COLS3_GENERIC = (128, 4, 1)
COLS_VARIANT = "cols3"
#: Fused RHT + quantize rowwise (blocks per program, warps: one block per thread, so the
#: 16-byte loads' layout is the per-block one, no shuffles); RHT + amax: rows of 16 per
#: program (rowwise), (columns, bands of 16 rows) per program (columnwise).
RHT_ROWS_BR, RHT_ROWS_WARPS = 256, 8
#: Fused RHT + rowwise quantize, MX E2M1 RNE with bf16 input and bf16 RHT output: the encoder
#: on bf16x2 words where the GPU has it (triton_rows_fast.hw_bf16x2; two elements an
#: instruction, triton_kernels._rows_rht_mx_bf16x2).
RHT_ROWS_BF16X2 = True
#: The fast E2M1 encoder's per-program exact fallback in the fused RHT / cols3 kernels (their
#: SLOW constexpr). False only in tests of the fast path alone, on data where it is exact.
FAST_EXACT_FALLBACK = True
RHT_AMAX_BR, RHT_AMAX_COLS = 1024, (256, 4)
#: Sign masks compiled into the kernels; others are runtime arguments (an integer xor of the
#: sign bit). Only the empty mask: on an H200 (triton 3.6) TE's mask compiled in as `-v` gave
#: zero results of the wrong sign (an all-zero row: -0.0 at output 15 instead of 7), as if the
#: compiler rewrote (-a) + (-b) into -(a + b), which IEEE addition of signed zeros forbids.
RHT_CONST_SIGNS = frozenset({0})
#: bf16 rounding of the RHT output on a GPU: 0 integer operations, 1 cvt.rn.bf16.f32 (None:
#: the default), 2 packed cvt.rn.bf16x2.f32 (inline PTX); the interpreter always uses 0.
RHT_BF16_CVT = None
#: Dequantize: elements per program (blocks = DQ_ELEMS / k) and warps.
DQ_ELEMS, DQ_WARPS = 16384, 8


@lru_cache(maxsize=None)
def _consts(rcp_max, sr_scale, device):
    """The constants of MX calls (read only, cached per device): [0, 0, rcp_max, sr_scale, 0...]."""
    import torch

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
    (:func:`triton_kernels.two_level_consts_kernel`): from the global ``amax`` (0-d float32
    tensor on dev; the steps of ``torch_backend.tensor_scale``) or from ``s_enc_dec`` (0-d
    tensors, or numbers taken as float32). ts[1] is the call's ``global_scale``, so ts is
    not shared between calls."""
    import torch
    from . import triton_kernels as tk

    ts = torch.empty(4 + 128, dtype=torch.float32, device=dev)
    num = tb.f32(np.float32(sch.scale_bound) * np.float32(sch.max_elem))
    kw = dict(num=num, rcp_max=_rcp_max(sch), sr_scale=float(1 << int(sr_bits)), num_warps=1)
    if amax is not None:
        a = amax.reshape(1)
        tk.two_level_consts_kernel[(1,)](a, a, a, ts, 0.0, 0.0, MODE=0, **kw)
        return ts
    s_enc, s_dec = s_enc_dec
    if isinstance(s_enc, torch.Tensor) or isinstance(s_dec, torch.Tensor):
        se = torch.as_tensor(s_enc, device=dev).reshape(1).to(torch.float32)
        sd = torch.as_tensor(s_dec, device=dev).reshape(1).to(torch.float32)
        tk.two_level_consts_kernel[(1,)](ts, se, sd, ts, 0.0, 0.0, MODE=1, **kw)
    else:
        tk.two_level_consts_kernel[(1,)](ts, ts, ts, ts, tb.f32(s_enc), tb.f32(s_dec), MODE=2, **kw)
    return ts


def _fast_ok(sch, rounding):
    return sch.element.name == "e2m1" and rounding == "rne" and sch.block_size % 16 == 0


def philox_rbits(seed, shape, sr_bits: int = 8) -> np.ndarray:
    """The random bits the triton kernels draw on the device for ``rounding="sr"`` with a
    ``seed`` (no rbits), replayed on the CPU: uint32 integers in [0, 2^sr_bits) of ``shape``.

    Definition (Triton's ``tl.randint4x``, Philox4x32-10): element ``i`` of the flat
    row-major tensor gets word ``i % 4`` of ``philox(counter=(g mod 2^32, g >> 32, 0, 0),
    key=(seed mod 2^32, seed >> 32))`` with ``g = i // 4``, shifted right by ``32 - sr_bits``
    (its top bits). The element order is the input tensor's, whatever the quantized axis.
    The numpy implementation is :mod:`fp4spec.philox` (``fp4spec.draw_rbits(...,
    method="philox")``); here ``sr_bits`` is limited to the kernels' 1..24.
    """
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 24:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 24] (the triton kernels' range)")
    return _philox.philox_rbits(seed, shape, int(sr_bits))


def _scale_out(rows, cols, dev, layout):
    import torch
    from fp4spec.layouts import blocked_shape

    if layout == "plain":
        return torch.empty((rows, cols), dtype=torch.uint8, device=dev), 0
    if layout != "cublas":
        raise ValueError(f"scale_layout: {layout!r} is not 'plain' or 'cublas'")
    rp, cp = blocked_shape(rows, cols)
    alloc = torch.zeros if (rp, cp) != (rows, cols) else torch.empty  # padding: zero bytes
    return alloc(rp * cp, dtype=torch.uint8, device=dev), cp


def _bf16_cvt() -> int:
    """How the kernels round the RHT output to bf16 (triton_kernels._rht_out2): 0 integer
    operations (always in the interpreter, whose fp32 -> bf16 cast truncates), 1 the
    hardware conversion, 2 the packed conversion (inline PTX, NVIDIA). RHT_BF16_CVT picks
    one on a GPU; None: 1 (the GPU check runs all three)."""
    if _interpret():
        return 0
    return 1 if RHT_BF16_CVT is None else int(RHT_BF16_CVT)


def _signs_constexpr(mask: int) -> int:
    """The kernels' SIGNS constexpr: the sign mask itself for the masks in RHT_CONST_SIGNS (the
    sign flips compile to nothing), else -1 (the mask is passed at run time: one compile for
    every sign vector, one xor per value)."""
    return mask if mask in RHT_CONST_SIGNS else -1


def sign_words(mask: int) -> tuple:
    """The kernels' run-time signs: 16 int32 arguments, word i = 0x80000000 (as -2^31) where
    bit i of the sign mask is set, else 0 (``triton_kernels._sbit``)."""
    return tuple(-(1 << 31) if (int(mask) >> i) & 1 else 0 for i in range(16))


def rht_global_amax(x2, M, N, sxm, sxn, rp):
    """float32 0-d tensor: max |RHT(x)| (NaN if any NaN) over the logical M x N matrix, the
    transform along N, in one pass without a temporary (rowwise: x2 contiguous; columnwise:
    x2 is the (N, M) row-major tensor, sxm == 1)."""
    import torch
    from . import triton_kernels as tk

    signs, out_bf16 = rp
    out = torch.zeros(1, dtype=torch.int32, device=x2.device)
    bf16 = x2.dtype == torch.bfloat16
    kw = dict(IN_BF16=bf16, SIGNS=_signs_constexpr(signs), OUT_BF16=out_bf16, BF16_CVT=_bf16_cvt())
    if sxn == 1 and sxm == N:
        nch = M * N // 16
        tk.rht_amax_rows_kernel[(triton.cdiv(nch, RHT_AMAX_BR),)](
            x2.view(torch.int64) if bf16 else x2, out, nch, sign_words(signs), BR=RHT_AMAX_BR, num_warps=8, **kw)
    elif sxm == 1:
        bc, nb = RHT_AMAX_COLS
        grid = (triton.cdiv(M, bc), triton.cdiv(N // 16, nb))
        tk.rht_amax_cols_kernel[grid](x2.view(torch.int16) if bf16 else x2, out, N, M, sxn, sign_words(signs), BC=bc, NB=nb,
                                      num_warps=4, **kw)
    else:
        raise NotImplementedError("rht amax: a contiguous tensor (rowwise) or a 2-D tensor with unit column stride")
    return out.view(torch.float32)[0]


def like_matrix(x2, sxm, sxn):
    """(y2, sym, syn): a new float32 tensor of x2's shape and y2's strides for the logical
    (m, n) of x2 read with strides (sxm, sxn) -- the same permutation as x2's (the unfused
    RHT paths' temporary)."""
    import torch

    y2 = torch.empty(x2.shape, dtype=torch.float32, device=x2.device)
    if x2.dim() == 2 and sxm == x2.stride(0) and sxn == x2.stride(1):
        return y2, y2.stride(0), y2.stride(1)
    return y2, y2.stride(1), y2.stride(0)


def rht_apply(x2, M, N, sxm, sxn, rp):
    """The RHT of the logical M x N matrix along N as a new contiguous float32 tensor of x2's
    shape (the unfused path; bf16 output rounded, held in float32)."""
    import torch
    from . import triton_kernels as tk

    signs, out_bf16 = rp
    y2, sym, syn = like_matrix(x2, sxm, sxn)
    bf16 = x2.dtype == torch.bfloat16
    BM = 64
    grid = (triton.cdiv(M, BM), N // 16)
    tk.rht_kernel[grid](x2.view(torch.int16) if bf16 else x2, y2, M, sxm, sxn, sym, syn, sign_words(signs), BM=BM, IN_BF16=bf16,
                        SIGNS=_signs_constexpr(signs), OUT_BF16=out_bf16, BF16_CVT=_bf16_cvt(), num_warps=4)
    return y2


def quantize_packed(x, scheme, *, axis=-1, rounding="rne", rbits=None, sr_bits=8, s_enc_dec=None,
                    seed=None, scale_layout="plain", BM=None, BN=None, num_warps=None, variant=None, rht=None):
    """Quantize a torch tensor on its device.

    Returns a dict: ``packed`` (uint8, (M, N/2)), ``scales`` (uint8, (M, N/k); with
    ``scale_layout="cublas"`` the 1-D cuBLAS 128x4 blocked buffer, equal to
    ``fp4spec.to_blocked`` of the plain scales, zero padding), ``global_scale`` (0-d float32
    S_dec or None), ``scheme``; M x N is the logical matrix (rows: everything but the
    quantized axis; columnwise: x transposed).

    ``rounding="sr"`` takes ``rbits`` or a ``seed``: with a seed the bits are drawn on the
    device by Philox (:func:`philox_rbits` replays them). ``variant``: ``None`` (fast paths
    where they apply), ``"v1"`` (the generic tile kernel), ``"tb"`` (rowwise
    :mod:`triton_rows_fast`, the default for bf16 E2M1 1 x 16 / 1 x 32 RNE with plain scales;
    ``BM`` blocks per program), ``"rows"``/``"rows2d"`` (rowwise v2, the default otherwise),
    ``"cols"`` (columnwise v2) / ``"cols3"`` (columnwise v3, the default for k = 16, 32).
    ``VARIANTS`` lists them.

    ``rht``: None, an :class:`fp4spec.rht.RHT` (``"16/fwht-fp32"``, any signs), ``"te"``
    or an int seed (:func:`fp4spec.rht.resolve_rht`): quantize the RHT of x along the
    quantized axis (the tensor amax of two-level schemes after it, SR bits indexing the
    transformed elements). Fused (the transform in registers) for 1 x 16 and 1 x 32 blocks,
    rowwise (``variant="rows"``) and columnwise (``"cols3"``); otherwise (``"unfused"``)
    the transform is written to a float32 temporary that the other kernels quantize.
    """
    import torch
    from . import triton_kernels as tk

    sch = resolve_scheme(scheme)
    r = check_request(sch, rounding, sr_bits, rht)
    if r is not None and r.arith.startswith(MMA_PREFIX):
        from .triton_rht_mma import quantize_packed_mma

        return quantize_packed_mma(x, sch, r, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits,
                                   s_enc_dec=s_enc_dec, seed=seed, scale_layout=scale_layout, BM=BM, BN=BN,
                                   num_warps=num_warps, variant=variant)
    rp = rht_params(rht)
    x = tb.as_torch(x)
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x: bfloat16, float16 or float32, not {x.dtype}")
    x2, M, N, sxm, sxn = _as_matrix(x, axis)
    K = sch.block_size
    R = sch.tile_rows
    if N % K or M % R:
        raise ValueError(f"x: the {M} x {N} matrix is not a whole number of {sch.block_shape} blocks")
    if rp is not None and N % 16:
        raise ValueError(f"x: length {N} along the quantized axis is not a multiple of 16 (the RHT size)")
    dev = x.device
    sr_mode = 0
    seed_v = 0
    if rounding == "sr":
        if rbits is None and seed is None:
            raise ValueError("rounding='sr' needs rbits (explicit random bits) or seed (Philox on the device)")
        sr_mode = 1 if rbits is not None else 2
        seed_v = 0 if seed is None else int(seed)
    elif seed is not None or rbits is not None:
        raise ValueError("rbits, seed: only used with rounding='sr'")
    bf16 = x2.dtype == torch.bfloat16
    rowwise = sxn == 1 and sxm == N
    colwise = sxm == 1 and x2.dim() == 2 and (sr_mode != 2 or M % 4 == 0)
    fast_shape = R == 1 and K % 16 == 0
    fused_shape = R == 1 and K in (16, 32)
    cfg_v, cfg_br, cfg_w = ROWS_CFG[sch.structure]
    # triton_rows_fast's tb kernel: bf16 rows of E2M1 1 x 16 / 1 x 32 blocks, RNE, plain scales
    tb_ok = (rp is None and rowwise and bf16 and fused_shape and sch.element.name == "e2m1" and rounding == "rne"
             and scale_layout == "plain")
    if variant not in VARIANTS:
        raise ValueError(f"variant: {variant!r} is not one of " + ", ".join(map(repr, VARIANTS)))
    if variant == "tb" and not tb_ok:
        raise NotImplementedError("variant='tb': rowwise bf16, E2M1 1 x 16 or 1 x 32 blocks, RNE, plain scales, no rht")
    use = variant
    if rp is not None:
        if use is None:
            use = "rows" if (fused_shape and rowwise) else ("cols3" if (fused_shape and colwise) else "unfused")
        if use not in ("rows", "cols3", "unfused"):
            raise ValueError(f"variant: {variant!r} with rht: None, 'rows', 'cols3' or 'unfused'")
        if use == "unfused":
            y2 = rht_apply(x2, M, N, sxm, sxn, rp)
            rb = None if rbits is None else tb.as_torch(rbits, dev).expand(x.shape).reshape(x2.shape)
            last = x.dim() == 1 or axis % x.dim() == x.dim() - 1
            return quantize_packed(y2, sch, axis=-1 if last else 0, rounding=rounding, rbits=rb, sr_bits=sr_bits,
                                   s_enc_dec=s_enc_dec, seed=seed, scale_layout=scale_layout, BM=BM, BN=BN,
                                   num_warps=num_warps)
        if not fused_shape or not (rowwise if use == "rows" else colwise):
            raise NotImplementedError(f"variant={use!r} with rht: 1 x 16 or 1 x 32 blocks, "
                                      + ("a contiguous tensor" if use == "rows" else "a 2-D tensor, axis 0"))
    elif use is None:
        if tb_ok:
            use = "tb"
        elif fast_shape and rowwise:
            use = cfg_v if (cfg_v == "rows" or (bf16 and _fast_ok(sch, rounding))) else "rows"
        elif fast_shape and colwise:
            use = COLS_VARIANT if fused_shape else "cols"
        else:
            use = "v1"
    if use == "v1" and sr_mode == 2:
        raise NotImplementedError("Philox-drawn bits: rowwise or columnwise 1 x k blocks only")
    if use == "v1" and scale_layout != "plain":
        raise NotImplementedError("scale_layout='cublas': rowwise or columnwise 1 x k blocks only")
    if use == "cols3" and not (fused_shape and colwise):
        raise NotImplementedError("cols3: 1 x 16 or 1 x 32 blocks of a 2-D tensor, axis 0")
    # ts: [S_enc, S_dec, fp32(1/max_elem), 2^sr_bits, 128 TE element multipliers per scale code]
    g = None
    if sch.structure == "two_level":
        amax = None
        if s_enc_dec is None:
            amax = global_amax(x2, M, N, sxm, sxn) if rp is None else rht_global_amax(x2, M, N, sxm, sxn, rp)
        ts = two_level_consts(sch, dev, amax=amax, s_enc_dec=s_enc_dec, sr_bits=sr_bits)
        g = ts[1]
    else:
        ts = mx_consts(sch, dev, sr_bits)
    if use == "tb":
        from . import triton_rows_fast as rf

        packed = torch.empty((M, N // 2), dtype=torch.uint8, device=dev)
        scales = torch.empty((M, N // K), dtype=torch.uint8, device=dev)
        rf.launcher(x2, packed, scales, ts, sch, BR=BM or TB_BR, num_warps=num_warps or TB_WARPS)()
        return {"packed": packed, "scales": scales, "global_scale": g, "scheme": sch}
    thr, dthr, mags, _ = _tables(sch.element.name, str(dev))
    pol = sch.policies
    mx = sch.structure == "mx"
    scaling = 0
    if mx and pol["mx_element_scaling"] != "exact":
        scaling = 2 if sch.scale_rule == "rceil" else 1
    flags = dict(MX=mx, RULE=MX_RULES.get(sch.scale_rule, 0), EMAX=sch.element.emax if mx else 0,
                 NAN_INF=mx and pol["mx_nonfinite_block"] == "nan_scale", SCALING=scaling)
    eflags = dict(NTHR=int(thr.numel()), INT4=sch.element.name == "int4_sym",
                  NEGZERO=bool(sch.element.has_negative_zero),
                  ZERO_POS=(not mx) and pol["nv_negative_zero"] == "positive")
    sgn = 0 if rp is None else rp[0]
    rflags = dict(SIGNS=_signs_constexpr(sgn), OUT_BF16=rp is not None and rp[1], BF16_CVT=_bf16_cvt())
    packed = torch.empty((M, N // 2), dtype=torch.uint8, device=dev)
    scales, cpad = _scale_out(M, N // K, dev, scale_layout)
    cublas = scale_layout == "cublas"
    rb = None
    if sr_mode == 1:
        rb = tb.as_torch(rbits, dev)
        if rb.dtype not in (torch.int32, torch.uint32):
            rb = rb.to(torch.int64)
        rb = rb.expand(x.shape).to(torch.int32)
    if use in ("rows", "rows2d"):
        nblk = M * N // K
        br = BM or cfg_br
        xin = x2.view(torch.int64) if bf16 else x2
        if rp is not None:
            r_in = rb.reshape(-1) if rb is not None else ts
            from .triton_rows_fast import hw_bf16x2

            bf16x2 = (RHT_ROWS_BF16X2 and mx and bf16 and rflags["OUT_BF16"] and _fast_ok(sch, rounding)
                      and hw_bf16x2(dev))
            tk.quantize_rows_rht_kernel[(triton.cdiv(nblk, BM or RHT_ROWS_BR),)](
                xin, packed.view(torch.int64), scales, r_in, thr, dthr, mags, ts, nblk, N // K, cpad, seed_v, sign_words(sgn),
                BR=BM or RHT_ROWS_BR, K=K, FAST=_fast_ok(sch, rounding), SR=sr_mode, SR_BITS=int(sr_bits),
                IN_BF16=bf16, CUBLAS=cublas, SLOW=FAST_EXACT_FALLBACK, num_warps=num_warps or RHT_ROWS_WARPS, **flags,
                **eflags, **rflags, BF16X2=bool(bf16x2))
        elif use == "rows2d":
            if not (bf16 and _fast_ok(sch, rounding)):
                raise NotImplementedError("rows2d: bf16, E2M1, RNE")
            tk.quantize_rows2d_kernel[(triton.cdiv(nblk, br),)](
                xin, packed.view(torch.int16), scales, ts, nblk, N // K, cpad, BR=br, K=K, CUBLAS=cublas,
                num_warps=num_warps or cfg_w, **flags)
        else:
            r_in = rb.reshape(-1) if rb is not None else ts
            tk.quantize_rows_kernel[(triton.cdiv(nblk, br),)](
                xin, packed.view(torch.int64), scales, r_in, thr, dthr, mags, ts, nblk, N // K, cpad, seed_v,
                BR=br, K=K, FAST=_fast_ok(sch, rounding), SR=sr_mode, SR_BITS=int(sr_bits), IN_BF16=bf16,
                CUBLAS=cublas, num_warps=num_warps or cfg_w, **flags, **eflags)
    elif use in ("cols", "cols3"):
        # logical (M, N) = x2^T: x2 is (N, M) with row stride sxn
        if sr_mode == 2 and M % 4:
            raise NotImplementedError("Philox columnwise: the number of columns must be a multiple of 4")
        r_in, srr = ts, 0
        if rb is not None:
            r2 = rb if rb.stride(1) == 1 else rb.contiguous()
            r_in, srr = r2, r2.stride(0)
        xin = x2.view(torch.int16) if bf16 else x2
        nsc = N // K
        if use == "cols3":
            bc, w, nb = COLS3_CFG[K] if _fast_ok(sch, rounding) else COLS3_GENERIC
            bc = BN or bc
            if BM is not None and BM not in (1, 2, 4):
                raise ValueError(f"BM: {BM} blocks per program for cols3 is not 1, 2 or 4")
            nb = BM or nb
            while nsc % nb:
                nb //= 2
            if bc % 4 or bc & (bc - 1):
                raise ValueError(f"BN: {bc} columns per program is not a power of two >= 4")
            grid = (triton.cdiv(M, bc), nsc // nb)
            sview = scales if nb == 1 else scales.view(torch.int16 if nb == 2 else torch.int32)
            tk.quantize_cols3_kernel[grid](
                xin, packed.view(torch.int64), sview, r_in, thr, dthr, mags, ts, M, sxn, srr, N // 16, nsc, cpad, seed_v,
                sign_words(sgn), 0,
                BC=bc, K=K, NB=nb, FAST=_fast_ok(sch, rounding), SR=sr_mode, SR_BITS=int(sr_bits), IN_BF16=bf16,
                CUBLAS=cublas, RHT=rp is not None, SLOW=FAST_EXACT_FALLBACK, num_warps=num_warps or w,
                SCALAR_LOADS=COLS3_SCALAR_LOADS.get((K, rp is not None), False), **flags, **eflags, **rflags)
        else:
            bc = BN or COLS_BC
            if sr_mode == 2 and bc % 4:
                raise NotImplementedError("Philox columnwise: BN must be a multiple of 4")
            nbands = min(COLS_BANDS if BM is None else BM, nsc)
            grid = (triton.cdiv(M, bc), triton.cdiv(nsc, nbands))
            tk.quantize_cols_kernel[grid](
                xin, packed.view(torch.int64), scales, r_in, thr, dthr, mags, ts,
                N, M, sxn, srr, N // 16, nsc, cpad, seed_v,
                BC=bc, K=K, FAST=_fast_ok(sch, rounding), SR=sr_mode, SR_BITS=int(sr_bits), IN_BF16=bf16,
                CUBLAS=cublas, NBANDS=nbands, num_warps=num_warps or COLS_WARPS, **flags, **eflags)
    else:
        BM = BM or DEFAULT_BM
        BN = BN or DEFAULT_BN
        BN = max(K, min(BN, triton.next_power_of_2(N)))
        BM = max(R, min(BM, triton.next_power_of_2(M)))
        if rb is not None:
            r2, _, _, srm, srn = _as_matrix(rb, axis)
        else:
            r2, srm, srn = x2, 0, 0
        grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
        tk.quantize_kernel[grid](
            x2.view(torch.int16) if bf16 else x2, packed, scales, r2, thr, dthr, mags, ts, M, N, sxm, sxn,
            packed.stride(0), scales.stride(0), srm, srn,
            BM=BM, BN=BN, K=K, TILE_R=R, SR=rounding == "sr", BF16=bf16,
            num_warps=num_warps or DEFAULT_WARPS, **flags, **eflags)
    return {"packed": packed, "scales": scales, "global_scale": g, "scheme": sch}


def dequantize_packed(packed, scales, global_scale, scheme, *, BM=None, BN=128, num_warps=None, variant=None):
    """float32 (M, N) from packed codes (M, N/2) and scale codes (M, N/k) on one device."""
    import torch
    from . import triton_kernels as tk

    sch = resolve_scheme(scheme)
    M, N = packed.shape[0], packed.shape[1] * 2
    K = sch.block_size
    dev = packed.device
    vals = _tables(sch.element.name, str(dev))[3]
    g = torch.zeros(1, dtype=torch.float32, device=dev)
    if global_scale is not None:
        g[0] = global_scale if isinstance(global_scale, torch.Tensor) else tb.f32(global_scale)
    out = torch.empty((M, N), dtype=torch.float32, device=dev)
    mx = sch.structure == "mx"
    if variant != "v1" and K % 16 == 0 and packed.is_contiguous() and scales.is_contiguous():
        nblk = M * N // K
        br = BM or max(1, DQ_ELEMS // K)
        tk.dequantize_rows_kernel[(triton.cdiv(nblk, br),)](
            packed.view(torch.int32), scales, vals, g, out, nblk, BR=br, K=K, MX=mx,
            FAST=sch.element.name == "e2m1", num_warps=num_warps or DQ_WARPS)
        return out
    BM = BM or 32
    BN = max(K, min(BN, triton.next_power_of_2(N)))
    BM = min(BM, triton.next_power_of_2(M))
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    tk.dequantize_kernel[grid](packed, scales, vals, g, out, M, N, packed.stride(0), scales.stride(0),
                               out.stride(0), BM=BM, BN=BN, K=K, MX=mx, num_warps=num_warps or 4)
    return out


def unpack_lo_first(packed):
    """uint8 codes (M, N) from packed bytes (M, N/2), low nibble first (torch)."""
    import torch

    lo = packed & 15
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], -1)


try:
    import triton
except ImportError:  # pragma: no cover
    triton = None


class TritonBackend(Backend):
    """Triton kernels (GPU, or the CPU interpreter under TRITON_INTERPRET=1)."""

    name = "triton"

    def __init__(self, device=None):
        self._device = device

    @property
    def device(self):
        if self._device is None:
            import torch

            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

    def is_available(self) -> Availability:
        return availability()

    def capabilities(self) -> Capabilities:
        from . import triton_gemm  # lazily: @triton.jit reads TRITON_INTERPRET when it decorates

        mx = [f"mxfp4:scale_rule={r}" if r != "floor" else "mxfp4" for r in MX_RULES]
        accs = triton_gemm.claimed_accumulators(self.device)  # ("sm90-bf16",) on Hopper only
        return Capabilities(
            schemes=(*mx, "nvfp4", "nvfp4_2d", "ufp4", "nvint4"),
            rounding=ROUNDINGS,
            operations=("quantize", "dequantize", "pack") + (("matmul",) if accs else ()),
            accumulators=accs,
            sr_bits=tuple(range(1, 25)),
            notes=f"triton kernels on {self.device}" + (" (interpreter)" if _interpret() else "")
                  + ("; matmul: sm90-bf16 (backends/triton_gemm.py)" if accs else ""),
            **({"rht": rht_specs(self.device)} if "rht" in getattr(Capabilities, "__dataclass_fields__", {}) else {}),
        )

    def why_unsupported(self, scheme, rounding="rne", sr_bits=8, rht=None) -> str:
        """Why the kernels cannot quantize ``scheme`` with ``rounding`` (and ``rht``) ("" if they
        can; availability aside)."""
        try:
            check_request(resolve_scheme(scheme), rounding, sr_bits, rht)
        except NotImplementedError as exc:
            return str(exc)
        return ""

    def supports(self, scheme, rounding="rne", sr_bits=8, rht=None) -> bool:
        return not self.why_unsupported(scheme, rounding, sr_bits, rht) and bool(self.is_available())

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, axis=-1, rht=None) -> QuantizedTensor:
        import torch
        from fp4spec.rht import resolve_rht

        sch = resolve_scheme(scheme)
        rht = resolve_rht(rht)
        xt = tb.as_torch(x, self.device)
        if xt.dtype == torch.float64:
            xt = xt.to(torch.float32)  # RNE, as fp4spec.prepare_input (and the RHT's step F1)
        out = quantize_packed(xt, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)
        codes = unpack_lo_first(out["packed"])  # (M, N): rows, quantized axis last
        scales = out["scales"]
        nd = max(xt.dim(), 1)
        ax = axis % nd
        if ax == nd - 1:
            codes = codes.reshape(xt.shape)
            scales = scales.reshape(*xt.shape[:-1], -1)
        g = out["global_scale"]
        extra = {} if rht is None else {"rht": rht}  # QuantizedTensor records the transform
        return QuantizedTensor.from_moved(tb._np(codes), tb._np(scales), None if g is None else np.float32(tb._np(g)),
                                          sch, ax, tuple(xt.shape), backend=self.name, **extra)

    def dequantize(self, q: QuantizedTensor) -> np.ndarray:
        import torch

        m = q.moved()
        codes = torch.from_numpy(np.array(m["codes"], copy=True, order="C")).to(self.device)
        shape = codes.shape
        c2 = codes.reshape(-1, shape[-1])
        packed = (c2[:, 0::2] | (c2[:, 1::2] << 4)).contiguous()
        s2 = torch.from_numpy(np.array(m["scales"], copy=True, order="C")).to(self.device).reshape(c2.shape[0], -1)
        out = dequantize_packed(packed, s2, q.global_scale, q.scheme).reshape(shape)
        out = np.moveaxis(tb._np(out), -1, q.axis)
        return np.ascontiguousarray(out[tuple(slice(0, n) for n in q.shape)])

    def pack(self, codes) -> np.ndarray:
        from fp4spec.packing import pack

        return pack(np.asarray(codes), order="lo_first", axis=-1)

    def matmul(self, qa, qb, *, accumulator, c=None) -> np.ndarray:
        """C = A . B^T under ``accumulator`` (``"sm90-bf16"`` on Hopper): :mod:`.triton_gemm`."""
        from . import triton_gemm

        return triton_gemm.matmul(qa, qb, accumulator=accumulator, c=c, device=self.device)


__all__ = ["TritonBackend", "availability", "dequantize_packed", "philox4x32", "philox_rbits", "quantize_packed",
           "unpack_lo_first"]
