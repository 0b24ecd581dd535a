"""The torch backend: every block scheme's quantize, dequantize and encode in torch ops.

Runs on any torch device (CPU, CUDA, ROCm) and is bit-exact with the numpy emulator
(:mod:`fp4spec.emulator.scaling`): the same float32 operations in the same order, each one a
separate eager torch op (IEEE float32, round-to-nearest-even on every device; no fused
multiply-add, no torch.compile reassociation).

Supported (``capabilities()``): MX schemes with any float element (``mxfp4``,
``mxfp6_e2m3``, ``mxfp6_e3m2``, ``mxfp8_e4m3``, ``mxfp8_e5m2``; scale rules floor, ceil,
even, rceil; profiles ocp and torchao), two-level schemes with the TransformerEngine profile
(``nvfp4``, ``nvfp4_2d``, ``ufp4``, ``nvint4``; scale rule amax) and ``hif4``; every
rounding mode (``sr``: random bits given; HiF4: its own, ``rne``); encode for every
catalogued format (:mod:`fp4spec.backends.torch_generic` holds the element encoder, the MX
path and HiF4); the RHT with the pinned ``fwht-fp32`` arithmetic at every size
(:func:`apply_rht`: the same float32 butterfly as :func:`fp4spec.rht.rht`). Anything else
raises NotImplementedError.

Lower level: :func:`quantize_tensors` returns torch tensors on x's device (codes, scales,
tensor scale) without leaving the device; :meth:`TorchBackend.quantize` wraps them in a
:class:`fp4spec.QuantizedTensor` (numpy arrays, as every backend returns).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import torch_generic as _gen
from .torch_ops import (  # noqa: F401 -- re-exported: the torch backend's building blocks
    F32_MAX,
    SIGN_MASK,
    _const,
    _torch,
    abs_max,
    as_torch,
    check_rbits_tensor,
    dequantize_mx_blocks,
    element_values,
    f32,
    mx_exponents,
    pow2_f32,
)
from .base import Backend as _Base, resolve_scheme

from fp4spec.block_schemes import Scheme, get_scheme
from fp4spec.number_formats import formats as _formats, get_format
from fp4spec.quantized import QuantizedTensor
from fp4spec.rht import NAN_BITS, RHT_SIZES, fwht_scale, resolve_rht


#: Element formats of the two-level schemes (MX: any float element; encode: every format).
ELEMENTS = ("e2m1", "e1m2", "int4_sym")
ROUNDINGS = _gen.ROUNDINGS


# -- element tables (from the emulator's own threshold tables) -----------------------------------

@lru_cache(maxsize=None)
def element_tables(fmt_name: str, neg_zero: str = "preserve", dtype: str = "float32") -> dict:
    """Everything the element encoder needs, as Python lists (device-independent):

    * ``rne``: float32 thresholds, magnitude index = #(|y| >= t) (the emulator's table).
    * ``down``: thresholds of rounding toward zero (index of the lower neighbour).
    * ``mags``: the magnitude grid (last entry: the extension point above max).
    * ``pos``, ``neg``: code per saturated magnitude index, per sign.
    * ``nan``: the code of a NaN scaled value.
    """
    from fp4spec.emulator.elements import side_table, thresholds
    from fp4spec.elements import nan_input_code
    from fp4spec.scaling import element_nan_policy

    fmt = get_format(fmt_name)
    pos, neg = side_table(fmt, False, neg_zero), side_table(fmt, True, neg_zero)
    if list(pos.mags) != list(neg.mags) or pos.low_ext:
        raise NotImplementedError(f"element {fmt_name!r}: only sign-symmetric grids with zero are supported")
    top = len(pos.mags) - 1  # saturate: the extension index maps to max
    return {
        "rne": [float(t) for t in thresholds(fmt, False, "rne", dtype)],
        "down": [float(t) for t in thresholds(fmt, False, "down", dtype)],
        "mags": [float(m) for m in pos.mags],
        "pos": [int(pos.codes[min(i, top - 1)]) for i in range(top + 1)],
        "neg": [int(neg.codes[min(i, top - 1)]) for i in range(top + 1)],
        "nan": int(nan_input_code(fmt, element_nan_policy(fmt), False)),
        "values": [float(np.float32(v)) for v in fmt.values],
    }


def encode_elements(y, fmt_name: str, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                    neg_zero: str = "preserve", zero_positive: bool = False):
    """Codes (uint8) of float32 values y with saturation and the block schemes' NaN policy
    (the format's NaN, else +0): :func:`fp4spec.backends.torch_generic.encode_elements`,
    every format and rounding mode. ``zero_positive``: an exact -0.0 encodes as +0 (TE's
    ``y + 0``; other negatives keep their sign)."""
    from fp4spec.scaling import element_nan_policy

    return _gen.encode_elements(y, fmt_name, rounding, rbits, sr_bits, nan=element_nan_policy(get_format(fmt_name)),
                                neg_zero=neg_zero, zero_positive=zero_positive)


def quantize_mx_blocks(xb, scheme: Scheme, rounding="rne", rbits=None, sr_bits=8):
    """MX quantization of float32 blocks (..., nb, k) with any float element: (codes uint8,
    scale codes uint8), :func:`fp4spec.backends.torch_generic.quantize_mx_blocks`."""
    return _gen.quantize_mx_blocks(xb, scheme, rounding, rbits, sr_bits)


# -- two-level (TransformerEngine chain) ---------------------------------------------------------

def tensor_scale(gmax, scheme: Scheme):
    """(S_enc, S_dec) as 0-d float32 tensors on gmax's device: :func:`fp4spec.scaling.two_level_tensor_scale` (te)."""
    torch = _torch()
    num = f32(np.float32(scheme.scale_bound) * np.float32(scheme.max_elem))
    one = torch.ones_like(gmax)
    safe = torch.where((gmax == 0) | ~torch.isfinite(gmax), one, gmax)
    # tensor / tensor: a Python scalar numerator would run as reciprocal() * num (two roundings)
    s_enc = torch.where((gmax == 0) | ~torch.isfinite(gmax), one, torch.div(torch.full_like(safe, num), safe).clamp(max=F32_MAX))
    return s_enc, one / s_enc


def block_scale_codes(vec_max, s_enc, scheme: Scheme):
    """UE4M3 scale codes: s = min(min(vec_max * fp32(S_enc * fp32(1/max)), FLT_MAX), 448), RNE."""
    torch = _torch()
    rcp = f32(np.float32(1.0) / np.float32(scheme.max_elem))
    mult = s_enc * rcp
    s = torch.minimum(vec_max * mult, torch.tensor(F32_MAX, device=vec_max.device))
    s = torch.minimum(s, torch.tensor(f32(scheme.scale.max), device=vec_max.device))
    return s.to(torch.float8_e4m3fn).view(torch.uint8) & 0x7F


def scale_values(codes, scheme: Scheme):
    torch = _torch()
    return _const([float(np.float32(v)) for v in scheme.scale.values], torch.float32, codes.device)[codes.long()]


def element_multipliers(scale_codes, s_dec, scheme: Scheme):
    """min(fp32(1 / fp32(s * S_dec)), FLT_MAX) per block (NaN scale -> NaN)."""
    torch = _torch()
    s = scale_values(scale_codes, scheme)
    d = s * s_dec
    return torch.minimum(torch.div(torch.ones_like(d), d), torch.tensor(F32_MAX, device=s.device))


def check_two_level(scheme: Scheme):
    pol = scheme.policies
    if pol["nv_scale_chain"] != "te" or scheme.scale_rule != "amax":
        raise NotImplementedError(f"{scheme.name}: the torch backend implements the TransformerEngine "
                                  f"chain with scale rule 'amax' (got profile {scheme.profile!r}, "
                                  f"rule {scheme.scale_rule!r})")
    if scheme.scale.name != "ue4m3":
        raise NotImplementedError(f"{scheme.name}: UE4M3 block scales only")
    te_only = {"nv_block_scale_op": "mul_reciprocal", "nv_zero_scale_elements": "saturate",
               "nv_zero_global_amax": "one"}
    other = [f"{k}={pol[k]!r}" for k, v in te_only.items() if pol[k] != v]
    if other:
        raise NotImplementedError(f"{scheme.name}: the torch backend implements TransformerEngine's policies, not "
                                  f"{', '.join(other)} (profile {scheme.profile!r})")


def vec_maxes(xb, scheme: Scheme):
    """Per 1 x k row block amax; for r x k tiles the tile amax repeated over its rows. xb: (..., rows, nb, k)."""
    am = abs_max(xb)
    if not scheme.is_2d:
        return am
    r = scheme.tile_rows
    *lead, rows, nb = am.shape
    t = am.reshape(*lead, rows // r, r, nb)
    t = abs_max(t, dim=-2)
    return t.repeat_interleave(r, dim=-2).reshape(am.shape)


def quantize_two_level_blocks(xb, scheme: Scheme, rounding="rne", rbits=None, sr_bits=8):
    """(codes, scale codes, S_dec 0-d tensor) of float32 blocks (..., rows, nb, k)."""
    torch = _torch()
    check_two_level(scheme)
    vm = vec_maxes(xb, scheme)
    gmax = vm.reshape(-1).view(torch.int32).max().view(torch.float32) if vm.numel() else \
        torch.zeros((), device=xb.device)
    s_enc, s_dec = tensor_scale(gmax, scheme)
    sc = block_scale_codes(vm, s_enc, scheme)
    mult = element_multipliers(sc, s_dec, scheme)
    y = xb * mult.unsqueeze(-1)
    top = scheme.max_elem
    if top < scheme.element.max:
        y = y.clamp(-f32(top), f32(top))
    zp = scheme.policies["nv_negative_zero"] == "positive"
    codes = encode_elements(y, scheme.element.name, rounding, rbits, sr_bits, zero_positive=zp)
    return codes, sc, s_dec


def dequantize_two_level_blocks(codes, scales, s_dec, scheme: Scheme):
    torch = _torch()
    vals = _const(element_values(scheme.element.name), torch.float32, codes.device)
    q = vals[codes.long()]
    s = scale_values(scales, scheme)
    if scheme.policies["nv_dequant_order"] == "(q*s)*g":
        return (q * s.unsqueeze(-1)) * s_dec
    return q * (s_dec * s).unsqueeze(-1)


# -- the RHT (fwht-fp32) ---------------------------------------------------------------------------

_OUT_DTYPES = {"float32": "float32", "float64": "float64", "bfloat16": "bfloat16"}


def _pinned_nan(dtype, device):
    """:data:`fp4spec.rht.NAN_BITS` in ``dtype`` (BF16 0x7FFF): torch's own NaN signs are the
    host's (its float32 -> bfloat16 cast turns 0x7FFFFFFF into 0xFFFF on the CPU)."""
    torch = _torch()
    if dtype == torch.bfloat16:
        return torch.tensor([NAN_BITS >> 16], dtype=torch.int16).view(torch.bfloat16)[0].to(device)
    nan32 = torch.tensor([NAN_BITS], dtype=torch.int64).to(torch.int32).view(torch.float32)[0]
    return nan32.to(dtype).to(device)


def apply_rht(x, rht, axis: int = -1):
    """``rht.apply(x, axis)`` for a torch tensor, on its device, for ``arith="fwht-fp32"``:
    steps F1-F5 of :func:`fp4spec.rht.rht` as separate eager float32 ops (the sign product,
    one add and one subtract per butterfly pair in stage order d = 1, 2, 4..., the product
    with ``fp32(1/sqrt(size))``, then the cast to ``rht.out_dtype``, RNE)."""
    torch = _torch()
    rht = resolve_rht(rht)
    if rht.arith != "fwht-fp32":
        raise NotImplementedError(f"rht: arith {rht.arith!r} (torch backend: 'fwht-fp32')")
    x = as_torch(x)
    if x.dim() == 0:
        raise ValueError("x: must have at least one dimension")
    n = rht.size
    xm = torch.movedim(x, axis, -1).to(torch.float32)  # F1: RNE from float64, exact otherwise
    if xm.shape[-1] % n:
        raise ValueError(f"x: length {xm.shape[-1]} along axis {axis} is not a multiple of size {n}")
    lead = xm.shape[:-1] + (xm.shape[-1] // n,)
    s = torch.tensor(rht.signs, dtype=torch.float32, device=xm.device)
    u = xm.reshape(*lead, n) * s  # F2: exact sign flips
    d = 1
    while d < n:  # F3
        v = u.reshape(*lead, n // (2 * d), 2, d)
        a, b = v[..., 0, :], v[..., 1, :]
        u = torch.stack((a + b, a - b), dim=-2).reshape(*lead, n)
        d *= 2
    y = u * torch.tensor(float(fwht_scale(n)), dtype=torch.float32, device=xm.device)  # F4 (a float32 tensor)
    y = y.reshape(xm.shape).to(getattr(torch, _OUT_DTYPES[rht.out_dtype]))  # F5
    y = torch.where(torch.isnan(y), _pinned_nan(y.dtype, y.device), y)  # F5: every NaN the positive NaN
    return torch.movedim(y, -1, axis)


# -- whole tensors -------------------------------------------------------------------------------

def check_request(scheme: Scheme, rounding: str):
    if rounding not in ROUNDINGS:
        raise NotImplementedError(f"rounding: {rounding!r} (torch backend: {', '.join(ROUNDINGS)})")
    if scheme.structure == "hif4":
        if rounding != "rne":
            raise NotImplementedError(f"{scheme.name}: rounding {rounding!r} (HiF4 rounds its elements as its "
                                      f"golden model does: 'rne' only)")
    elif scheme.structure == "if4":
        pass  # every rounding on both candidates, as the emulator (backends/torch_if4.py)
    elif scheme.structure == "mx":
        if scheme.element.bits > 8:
            raise NotImplementedError(f"{scheme.name}: element {scheme.element.name!r} (codes must fit in a byte)")
    elif scheme.structure == "two_level":
        if scheme.element.name not in ELEMENTS:
            raise NotImplementedError(f"{scheme.name}: element {scheme.element.name!r} (torch backend, two-level: "
                                      f"{', '.join(ELEMENTS)})")
        check_two_level(scheme)
    else:
        raise NotImplementedError(f"{scheme.name}: structure {scheme.structure!r}")


#: Random bits per element claimed for ``rounding="sr"`` (capabilities().sr_bits).
SR_BITS = (1, 24)


def check_dequantize(scheme: Scheme):
    """NotImplementedError unless :func:`dequantize_tensors` handles the scheme: every MX and
    two-level scheme (any element format, either dequantize order), HiF4 and IF4."""
    if scheme.structure not in ("mx", "two_level", "hif4", "if4"):
        raise NotImplementedError(f"{scheme.name}: structure {scheme.structure!r} (torch backend dequantizes "
                                  f"MX, two-level, HiF4 and IF4 schemes)")


#: Elements per chunk of :func:`quantize_in_row_chunks`: its float32/int64/float64 steps hold about
#: 25 bytes per element at their peak, so a chunk's temporaries stay near 200 MiB.
CHUNK_ELEMENTS = 1 << 23


def row_local(scheme: Scheme) -> bool:
    """True if each row of blocks quantizes on its own: no tensor scale, 1 x k blocks (MX, HiF4)."""
    return scheme.global_scale is None and scheme.tile_rows == 1


def quantize_in_row_chunks(x, scheme: Scheme, *, axis=-1, rounding="rne", rbits=None, sr_bits=8, rht=None,
                           chunk_elements: int | None = None):
    """:func:`quantize_tensors` of a row-local scheme (:func:`row_local`) a chunk of rows at a
    time (rows: everything but the blocked axis), concatenated: the same codes, with
    temporaries bounded by the chunk instead of growing with x (22-25x x's bytes for MX-FP8 and
    HiF4 unchunked)."""
    torch = _torch()
    xm = torch.movedim(as_torch(x), axis, -1)
    lead, n = xm.shape[:-1], xm.shape[-1]
    rows = xm.reshape(-1, n)
    rb = None
    if rbits is not None:  # numpy bits checked here, torch bits by the caller (as quantize_tensors)
        rb = check_rbits_tensor(rbits, tuple(x.shape), sr_bits, x.device, check=False)
        rb = torch.movedim(rb, axis, -1).reshape(-1, n)
    step = max(1, (chunk_elements or CHUNK_ELEMENTS) // max(n, 1))
    parts = [quantize_tensors(rows[i:i + step], scheme, rounding=rounding, sr_bits=sr_bits, rht=rht,
                              rbits=None if rb is None else rb[i:i + step])
             for i in range(0, rows.shape[0], step)]
    out = {"global_scale": None, "scheme": scheme}
    for f in ("codes", "scales", "e1_8", "e1_16"):
        if parts[0].get(f) is not None:
            whole = torch.cat([p[f] for p in parts], dim=0)
            out[f] = whole.reshape(*lead, *whole.shape[1:])
    return out


def quantize_tensors(x, scheme, *, axis=-1, rounding="rne", rbits=None, sr_bits=8, rht=None, **overrides):
    """Quantize a torch tensor on its device: dict of ``codes`` (uint8, blocked axis last),
    ``scales`` (uint8, (..., n_blocks)), ``global_scale`` (0-d float32 tensor or None); for
    HiF4 also ``e1_8``, ``e1_16`` (uint8, (..., n_groups, 8 or 16)).

    ``rht`` (None, an :class:`~fp4spec.rht.RHT`, ``"te"`` or a seed; fwht-fp32 only): the
    values quantized are ``apply_rht(x)`` along ``axis``, as :func:`fp4spec.quantize` step 3."""
    torch = _torch()
    sch = get_scheme(scheme, **overrides)
    check_request(sch, rounding)
    rht = resolve_rht(rht)
    x = as_torch(x)
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64) or x.dim() < 1:
        raise ValueError(f"x: a float16/bfloat16/float32/float64 tensor of at least 1 dimension, got {x.dtype}")
    xm = torch.movedim(x, axis, -1).to(torch.float32).contiguous()
    k = sch.block_size
    if xm.shape[-1] % k or (sch.is_2d and (xm.dim() < 2 or xm.shape[-2] % sch.tile_rows)):
        raise ValueError(f"x: shape {tuple(x.shape)} is not a whole number of {sch.block_shape} blocks along axis {axis}")
    if rht is not None:
        xm = apply_rht(xm, rht, -1).to(torch.float32).contiguous()  # exact from bfloat16 and float32
    if rounding == "sr":
        if rbits is None:
            raise ValueError("rbits: rounding='sr' needs explicit random bits")
        if not 1 <= int(sr_bits) <= 32:
            raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")
        if not isinstance(rbits, torch.Tensor):  # numpy bits are checked here (no transfer); torch bits by the caller
            from fp4spec.rounding import check_rbits

            rbits = check_rbits(rbits, tuple(x.shape), sr_bits)
        rb = as_torch(rbits, xm.device)
        rb = torch.movedim(rb.expand(x.shape), axis, -1)
        rb = rb.to(torch.int64).reshape(*xm.shape[:-1], -1, k)
    elif rbits is not None:
        raise ValueError(f"rbits: only used with rounding='sr', not {rounding!r}")
    else:
        rb = None
    if sch.structure == "if4":  # NaN/Inf raise, as the emulator
        from .torch_if4 import quantize_if4

        codes, scales, g = quantize_if4(xm.reshape(*xm.shape[:-1], -1, k), sch, rounding, rb, sr_bits)
        return {"codes": codes.reshape(xm.shape), "scales": scales, "global_scale": g, "scheme": sch}
    if sch.structure == "hif4":  # rne only; arith float64, NaN/Inf raise: as fp4spec.quantize
        out = _gen.hif4_quantize(xm)
        return {"codes": out["codes"], "scales": out["scales"], "global_scale": None, "scheme": sch,
                "e1_8": out["e1_8"], "e1_16": out["e1_16"]}
    xb = xm.reshape(*xm.shape[:-1], -1, k)
    if sch.structure == "mx":
        codes, scales = quantize_mx_blocks(xb, sch, rounding, rb, sr_bits)
        g = None
    else:
        codes, scales, g = quantize_two_level_blocks(xb, sch, rounding, rb, sr_bits)
    return {"codes": codes.reshape(xm.shape), "scales": scales, "global_scale": g, "scheme": sch}


def dequantize_tensors(codes, scales, global_scale, scheme: Scheme, e1_8=None, e1_16=None):
    """float32 values from codes (blocked axis last) and scales (torch tensors, one device);
    HiF4 also needs its micro-exponent bits ``e1_8``, ``e1_16``."""
    torch = _torch()
    if scheme.structure == "hif4":
        if e1_8 is None or e1_16 is None:
            raise ValueError("e1_8, e1_16: HiF4 codes decode with their micro-exponent bits; pass both")
        return _gen.hif4_dequantize(codes, scales, e1_8, e1_16)
    k = scheme.block_size
    cb = codes.reshape(*codes.shape[:-1], -1, k)
    if scheme.structure == "if4":
        from .torch_if4 import dequantize_if4

        return dequantize_if4(cb, scales, global_scale).reshape(codes.shape)
    if scheme.structure == "mx":
        out = dequantize_mx_blocks(cb, scales, scheme)
    else:
        g = global_scale if isinstance(global_scale, torch.Tensor) else \
            torch.tensor(f32(global_scale), device=codes.device)
        out = dequantize_two_level_blocks(cb, scales, g.to(codes.device), scheme)
    return out.reshape(codes.shape)


def _np(t):
    return t.detach().cpu().numpy()


class TorchBackend(_Base):
    """Torch ops on any device (``device=None``: CUDA if available, else CPU), bit-exact with
    the numpy emulator. Torch tensors in and out, on their device (numpy arguments run on
    :attr:`device` and come back as numpy)."""

    name = "torch"
    array_kind = "torch"

    def __init__(self, device=None):
        self._device = device

    @property
    def device(self):
        if self._device is None:
            torch = _torch()
            self._device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._device

    def is_available(self):
        from .base import Availability

        try:
            import torch
        except ImportError:
            return Availability.no("torch is not installed")
        return Availability.yes(f"torch {torch.__version__} on {self.device}")

    def capabilities(self):
        from .base import Capabilities

        return Capabilities(
            schemes=(*_gen.mx_scheme_specs(), "nvfp4", "nvfp4_2d", "ufp4", "nvint4", "hif4", "if4"),
            rounding=ROUNDINGS,
            scheme_rounding={"hif4": ("rne",)},
            operations=("quantize", "dequantize", "encode"),
            formats=tuple(_formats),
            sr_bits=tuple(range(SR_BITS[0], SR_BITS[1] + 1)),
            notes=f"torch eager float32 ops on {self.device}",
            rht=tuple(f"{n}/fwht-fp32" for n in RHT_SIZES),
        )

    def why_unsupported(self, scheme, rounding="rne", sr_bits=8) -> str:
        """Why this backend cannot quantize ``scheme`` with ``rounding`` ("" if it can; availability aside)."""
        try:
            check_request(get_scheme(scheme) if not isinstance(scheme, Scheme) else scheme, rounding)
        except NotImplementedError as exc:
            return str(exc)
        if rounding == "sr" and not SR_BITS[0] <= int(sr_bits) <= SR_BITS[1]:
            return f"sr_bits: {sr_bits} (torch backend: {SR_BITS[0]}..{SR_BITS[1]})"
        return ""

    def supports(self, scheme, rounding="rne", sr_bits=8) -> bool:
        return not self.why_unsupported(scheme, rounding, sr_bits)

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, rht=None, axis=-1) -> QuantizedTensor:
        """:func:`quantize_tensors` along x's last axis (or ``axis``), on x's device: a
        QuantizedTensor of torch tensors there (numpy x: on :attr:`device`, the result as numpy)."""
        torch = _torch()
        numpy_in = not isinstance(x, torch.Tensor)
        xt = as_torch(x, self.device) if numpy_in else x
        sch = resolve_scheme(scheme)
        rht = resolve_rht(rht)
        if row_local(sch) and xt.dim() >= 1 and xt.numel() > CHUNK_ELEMENTS:
            out = quantize_in_row_chunks(xt, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)
        else:
            out = quantize_tensors(xt, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)
        e1 = {f: out[f] for f in ("e1_8", "e1_16") if out.get(f) is not None}
        q = QuantizedTensor.from_moved(out["codes"], out["scales"], out["global_scale"], sch, axis % xt.dim(),
                                       tuple(xt.shape), backend=self.name, rht=rht, **e1)
        return q.to_numpy() if numpy_in else q

    def why_no_dequantize(self, scheme) -> str:
        try:
            check_dequantize(scheme)
        except NotImplementedError as exc:
            return str(exc)
        return ""

    def dequantize(self, q: QuantizedTensor):
        """float32 values in q's shape (padding cropped), on q's device (:func:`dequantize_tensors`);
        a numpy q on :attr:`device`, the values returned as numpy."""
        torch = _torch()
        numpy_in = not q.is_torch
        qt = q.to_torch(self.device) if numpy_in else q
        m = qt.moved()
        e1 = {f: m[f] for f in ("e1_8", "e1_16") if m[f] is not None}
        out = dequantize_tensors(m["codes"], m["scales"], qt.global_scale, q.scheme, **e1)
        out = torch.movedim(out, -1, q.axis)[tuple(slice(0, n) for n in q.shape)].contiguous()
        return np.ascontiguousarray(_np(out)) if numpy_in else out

    def encode(self, x, fmt, rounding="rne", *, rbits=None, sr_bits=8) -> np.ndarray:
        """Codes of x in any format, as :func:`fp4spec.encode` with its default policies
        (saturate; NaN: the format's NaN, or ValueError where it has none)."""
        torch = _torch()
        xt = as_torch(np.asarray(x) if not isinstance(x, torch.Tensor) else x, self.device)
        if xt.dtype != torch.float64:
            xt = xt.to(torch.float32)
        rb = None if rbits is None else as_torch(np.asarray(rbits).astype(np.int64), xt.device).expand(xt.shape)
        return _np(_gen.encode_elements(xt, get_format(fmt), rounding, rb, sr_bits))


__all__ = ["TorchBackend", "apply_rht", "check_dequantize", "check_request", "dequantize_tensors", "element_values",
           "encode_elements", "quantize_tensors"]
