"""Torch building blocks shared by the torch backend's modules: exact float32 bit helpers,
the MX scale exponent, code-indexed value tables, conversion of numpy arrays.

Every function is a sequence of eager torch ops on the tensors' device, equal bit for bit to
its emulator twin (named in each docstring). :mod:`.torch_generic` (the element encoder, MX
with any element, HiF4) and :mod:`.torch_backend` (two-level schemes, the RHT, the adapter)
build on these; nothing here imports either.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fp4spec.block_schemes import Scheme
from fp4spec.number_formats import get_format

F32_MAX = float(np.finfo(np.float32).max)
SIGN_MASK = 0x7FFFFFFF


def _torch():
    import torch

    return torch


def f32(v) -> float:
    """The float32 value of v, as a Python float (for scalar constants computed once on the host)."""
    return float(np.float32(v))


def _const(vals, dtype, device):
    return _torch().tensor(vals, dtype=dtype, device=device)



def as_torch(x, device=None):
    """A torch tensor of x (numpy arrays, ml_dtypes bfloat16 included, are converted exactly)."""
    torch = _torch()
    if isinstance(x, torch.Tensor):
        return x if device is None else x.to(device)
    arr = np.array(x, copy=True, order="C")  # writable: torch warns on read-only arrays
    if arr.dtype.name == "bfloat16":
        t = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(arr)
    return t if device is None else t.to(device)


def bf16_rne(t):
    """bfloat16 torch tensor of float32 ``t`` rounded to nearest even on its bit pattern
    (overflow to +-Inf), every NaN 0x7FC0: :func:`fp4spec.rht.bf16_rne` with the float32 NaN
    0x7FC00000, in integer ops (``Tensor.to(torch.bfloat16)`` gives NaN 0x7FC0 on the CPU but
    0x7FFF on CUDA)."""
    torch = _torch()
    bits = t.contiguous().view(torch.int32)
    r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    r = torch.where(torch.isnan(t), torch.full_like(r, 0x7FC0), r)
    return r.to(torch.int16).view(torch.bfloat16)


def to_numpy(a):
    """A numpy array of a torch tensor (bfloat16 as ml_dtypes.bfloat16, exactly); others pass through."""
    torch = _torch()
    if not isinstance(a, torch.Tensor):
        return a
    t = a.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


# -- input preparation (fp4spec.scaling.prepare_input for torch tensors) ---------------------------

def check_rbits_tensor(rbits, shape, sr_bits: int, device, *, check: bool = True, keep_int32: bool = False):
    """:func:`fp4spec.rounding.check_rbits` for numpy or torch rbits: an int64 tensor of x's
    ``shape`` on ``device`` (broadcast, not copied). The range check of torch rbits reads
    their min and max, one device-to-host transfer; ``check=False`` skips it (numpy rbits are
    always checked: no transfer). ``keep_int32``: int32 torch rbits stay int32 (the backends
    convert what they need; a 16384^2 int64 copy is 2 GiB written and read again)."""
    torch = _torch()
    if not isinstance(rbits, torch.Tensor):
        from fp4spec.rounding import check_rbits

        rb = np.array(check_rbits(rbits, shape, sr_bits), dtype=np.int64, order="C")
        return torch.from_numpy(rb).to(device)
    if rbits.dtype.is_floating_point or rbits.dtype.is_complex or rbits.dtype == torch.bool:
        raise ValueError(f"rbits: dtype {rbits.dtype} is not an integer dtype")
    keep = keep_int32 and rbits.dtype == torch.int32
    rb = rbits.detach().to(device=device, dtype=torch.int32 if keep else torch.int64)
    if check and rb.numel():
        lo, hi = torch.aminmax(rb)
        lo, hi = int(lo), int(hi)
        if lo < 0 or hi >= (1 << int(sr_bits)):
            raise ValueError(f"rbits: values must be in [0, 2**{sr_bits}) = [0, {(1 << int(sr_bits)) - 1}], "
                             f"got [{lo}, {hi}]")
    try:
        return rb.expand(shape)
    except RuntimeError:
        raise ValueError(f"rbits: shape {tuple(rbits.shape)} does not broadcast to x's shape {shape}") from None


def prepare_tensor(x, layout, rbits=None, sr_bits: int = 8, *, check: bool = True):
    """Steps 3-5 of :func:`fp4spec.scaling.prepare_input` for a torch tensor whose layout
    :func:`fp4spec.scaling.input_layout` checked: (x, rbits) with the blocked axis last (a
    view where nothing is padded) and zeros padded to whole blocks. float64 is rounded to
    float32 (RNE); bfloat16 and float16 stay as they are (their float32 values are exact, and
    a kernel reads half the bytes)."""
    torch = _torch()
    x = x.detach()
    if x.dtype == torch.float64:
        x = x.to(torch.float32)
    xm = torch.movedim(x, layout.axis, -1)
    rb = None
    if rbits is not None:
        rb = check_rbits_tensor(rbits, layout.shape, sr_bits, x.device, check=check, keep_int32=True)
        rb = torch.movedim(rb, layout.axis, -1)
    if layout.is_padded:
        w = layout.widths
        spec = (0, w[-1]) if len(w) < 2 or not w[-2] else (0, w[-1], 0, w[-2])
        xm = torch.nn.functional.pad(xm, spec)  # +0.0
        if rb is not None:
            rb = torch.nn.functional.pad(rb, spec)  # random bits 0
    return xm, rb


# -- float32 bit helpers -------------------------------------------------------------------------

def abs_max(xb, dim=-1):
    """max |x| over ``dim`` as the max of the sign-cleared bit patterns (NaN wins, as the emulator)."""
    torch = _torch()
    bits = xb.view(torch.int32) & SIGN_MASK
    return bits.amax(dim=dim).view(torch.float32)


def pow2_f32(e):
    """float32 2^e for integer tensors e in [-149, 127], built from the bit pattern (exact)."""
    torch = _torch()
    e = e.to(torch.int32)
    normal = (e + 127).clamp(min=0) << 23
    sub = torch.ones_like(e) << (e + 149).clamp(min=0, max=22)
    return torch.where(e >= -126, normal, sub).view(torch.float32)


def _fields(a):
    torch = _torch()
    bits = a.view(torch.int32)
    return (bits >> 23) & 0xFF, bits & 0x7FFFFF


def _floor_log2(E, M):
    torch = _torch()
    m = torch.frexp(M.clamp(min=1).to(torch.float32))[1].to(E.dtype) - 1
    return torch.where(E == 0, m - 149, E - 127)


def _is_pow2(E, M):
    return ((E == 0) & ((M & (M - 1)) == 0)) | ((E != 0) & (M == 0))


# -- MX ------------------------------------------------------------------------------------------

def mx_exponents(amax, scheme: Scheme):
    """(e in [-127, 127] as int32, NaN-scale mask): :func:`fp4spec.emulator.scaling.mx_exponents`."""
    torch = _torch()
    pol = scheme.policies
    nan_scale = torch.isnan(amax)
    if pol["mx_nonfinite_block"] == "nan_scale":
        nan_scale = nan_scale | torch.isinf(amax)
    a = torch.where(nan_scale, torch.ones_like(amax), amax)
    zero = a == 0
    E, M = _fields(a)
    emax = scheme.element.emax
    rule = scheme.scale_rule
    if rule == "floor":
        e = _floor_log2(E, M) - emax
    elif rule == "ceil":
        e = _floor_log2(E, M) + (~_is_pow2(E, M)).to(E.dtype) - emax
    elif rule == "even":
        bits = (E << 23) | M
        rounded = (bits + (1 << (22 - scheme.element.mantissa_bits))) & 0x7F800000
        e = (rounded >> 23) - 127 - emax
    elif rule == "rceil":
        max_elem = f32(scheme.element.max)
        if pol["mx_rceil_descale"] == "mul_reciprocal":
            d = a * f32(np.float32(1.0) / np.float32(max_elem))
        else:
            d = torch.div(a, torch.full_like(a, max_elem))
        dinf = torch.isinf(d)
        dpos = torch.where((d == 0) | dinf, torch.ones_like(d), d)
        Ed, Md = _fields(dpos)
        e = _floor_log2(Ed, Md) + (~_is_pow2(Ed, Md)).to(Ed.dtype)
        e = torch.where(dinf, torch.full_like(e, 127), e)
        zero = zero | (d == 0)
    else:
        raise NotImplementedError(f"scale_rule: {rule!r}")
    e = torch.where(zero, torch.full_like(e, -127), e)
    return e.clamp(-127, 127), nan_scale


# -- values --------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def element_values(fmt_name: str) -> tuple:
    """float32 values of every code of a format (code-indexed, NaN codes NaN), as Python floats."""
    return tuple(float(np.float32(v)) for v in get_format(fmt_name).values)


def dequantize_mx_blocks(codes, scales, scheme: Scheme):
    torch = _torch()
    vals = _const(element_values(scheme.element.name), torch.float32, codes.device)
    q = vals[codes.long()]
    p = pow2_f32(scales.to(torch.int32) - 127)
    p = torch.where(scales == 0xFF, torch.full_like(p, float("nan")), p)
    return q * p.unsqueeze(-1)


__all__ = ["F32_MAX", "SIGN_MASK", "abs_max", "as_torch", "check_rbits_tensor", "dequantize_mx_blocks",
           "element_values", "f32", "mx_exponents", "pow2_f32", "prepare_tensor", "to_numpy"]
