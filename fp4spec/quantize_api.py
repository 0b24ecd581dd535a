"""The public block-scaling API: ``fp4spec.quantize``, ``fp4spec.dequantize``, ``fp4spec.get_scheme``.

For numpy input these run the vectorized emulator (:mod:`fp4spec.emulator.blockscale`),
which is tested equal, bit for bit, to the scalar reference :mod:`fp4spec.scaling`. HiF4
dispatches to :mod:`fp4spec.emulator.hif4`. Torch tensors stay torch tensors: ``quantize``
runs them on the triton or torch backend on their device when one supports the request
(:func:`select_backend`), else on the emulator, and returns a QuantizedTensor of torch
tensors on x's device; ``backend=`` names one explicitly (docs/backends.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys

import numpy as np

from .block_schemes import Scheme, get_scheme, schemes
from .quantized import QuantizedTensor
from .rht import RHT, resolve_rht
from .rounding import DEFAULT_SR_BITS
from .scaling import prepare_input


def _hif4_module():
    try:
        return importlib.import_module("fp4spec.emulator.hif4")
    except ModuleNotFoundError as err:
        if err.name not in ("fp4spec.emulator.hif4",):
            raise
        raise NotImplementedError(
            "quantize: the 'hif4' scheme needs fp4spec.emulator.hif4 (hif4_quantize / hif4_dequantize), "
            "which is not available in this installation") from None


#: ``backend=`` names besides those of :func:`fp4spec.backends.get_backend`.
AUTO = "auto"
#: The order ``backend="auto"`` tries for torch tensors: the first that can run the request wins.
AUTO_ORDER = ("triton", "torch", "numpy")


def quantize(x, scheme: "str | Scheme", *, axis: int = -1, rounding: str = "rne", rbits=None,
             sr_bits: int = DEFAULT_SR_BITS, pad: bool = False, backend="auto", rht=None,
             **overrides) -> QuantizedTensor:
    """Quantize x with a block-scaling scheme.

    Args:
        x: float16, bfloat16 (ml_dtypes), float32 or float64 array (at least 1-d), or a
            torch tensor of one of those dtypes on any device.
        scheme: a scheme name (``fp4spec.schemes``: mxfp4, mxfp6_e2m3, mxfp6_e3m2,
            mxfp8_e4m3, mxfp8_e5m2, nvfp4, nvfp4_2d, ufp4, nvint4, nvint4_e0m3, hif4, if4) or a
            :class:`~fp4spec.block_schemes.Scheme`.
        axis: the axis the blocks run along (default: the last). 2D tiles cover this axis
            and the one before it (after moving ``axis`` last).
        rounding: element rounding: ``"rne"`` (default), ``"rna"``, ``"rtz"``, ``"rup"``,
            ``"rdn"``, ``"rto"`` or ``"sr"``. Scales are always computed as the scheme says.
        rbits: for ``"sr"``: one random integer in [0, 2**sr_bits) per element,
            broadcastable to x (see :func:`fp4spec.draw_rbits`); numpy or torch.
        sr_bits: random bits per element for ``"sr"`` (default 8, as Blackwell ``cvt.rs``).
        pad: pad the blocked axis (and for tiles the axis before it) with zeros to whole
            blocks instead of raising ValueError.
        backend: who computes it: ``"auto"`` (default), ``"numpy"`` (the emulator),
            ``"torch"``, ``"triton"``, or any :func:`fp4spec.backends.get_backend` name.
            ``"auto"``: numpy input -> numpy; a torch tensor -> the first of triton (CUDA
            tensors only), torch, numpy that supports the request (:func:`select_backend`).
            A backend named explicitly runs or raises :class:`~fp4spec.backends.BackendError`
            saying why it cannot (never a silent fallback). Every backend gives the same
            bits; ``QuantizedTensor.backend`` records which one ran.
        rht: a Random Hadamard Transform to apply before quantizing (step 3): None
            (default), an :class:`~fp4spec.rht.RHT`, ``"te"`` (TransformerEngine's: size 16,
            its signs, fwht-fp32 arithmetic, BF16 output) or an int seed (size 16, signs drawn
            from the seed); see :func:`~fp4spec.rht.resolve_rht`. ``backend="auto"`` picks
            only a backend that claims it (``Capabilities.rht``).
        **overrides: scheme fields, see :func:`~fp4spec.block_schemes.get_scheme`
            (``scale_rule``, ``profile``, ``block_size``, ``element_max``...).

    Returns:
        A :class:`~fp4spec.quantized.QuantizedTensor`: numpy arrays for numpy x, torch
        tensors on x's device for a torch x (whichever backend ran). With ``rht`` it
        records the transform (``q.rht``) and holds the *rotated* values: dequantize does
        not undo the RHT.

    Normative algorithm:

    1. Resolve the scheme (``get_scheme(scheme, **overrides)``) and the RHT
       (:func:`~fp4spec.rht.resolve_rht`; None: no transform).
    2. Prepare x (:func:`fp4spec.scaling.prepare_input`): validate, convert to float32 (RNE
       from float64, exact from float16/bfloat16), move ``axis`` last, check or pad the
       length.
    3. With an RHT only: ``x' = rht.apply(x prepared, axis=-1)`` -- the transform runs along
       the blocked axis, on the prepared float32 values, after padding (the padded length
       must be a multiple of ``rht.size``, else ValueError) -- then converted to float32
       (exact from BF16 and float32 output; RNE from float64 output). The next step uses x'
       in place of x: the tensor amax of two-level schemes is taken over x'
       (TransformerEngine: the global amax after the RHT) and ``rbits[i]`` rounds
       ``x'[i]`` (the same positions).
    4. MX schemes: per block of k, :func:`fp4spec.scaling.quantize_block_mx`.
       Two-level schemes: the tensor scale from the amax of all of x
       (:func:`fp4spec.scaling.two_level_tensor_scale`), then per block or tile
       :func:`fp4spec.scaling.quantize_tile_two_level`. HiF4: ``hif4_quantize``. IF4:
       :func:`fp4spec.if4.quantize_reference`'s steps (:mod:`fp4spec.emulator.if4`).
    5. Move the blocked axis back to ``axis``; record the RHT.

    The backend only changes where these steps run, not their result: the torch and triton
    backends are tested bit-equal to the numpy emulator, which is tested equal to the
    scalar reference.
    """
    sch = get_scheme(scheme, **overrides)
    rht = resolve_rht(rht)
    torch_in = _is_torch(x)
    if not torch_in and (backend == AUTO or backend == "numpy"):
        return _quantize_numpy(x, sch, axis, rounding, rbits, sr_bits, pad, rht)
    return _quantize_backend(x, sch, backend, torch_in, axis, rounding, rbits, sr_bits, pad, rht)


def check_rht_length(n: int, rht: RHT, axis) -> None:
    """ValueError unless the (padded) length ``n`` along the blocked axis is a multiple of the RHT size."""
    if n % rht.size:
        raise ValueError(f"x: length {n} along axis {axis} (after any padding to whole blocks) is not a multiple "
                         f"of the RHT size {rht.size}")


def _rotate(prep, rht: RHT | None, axis):
    """Step 3 of :func:`quantize`: the prepared input with x replaced by float32 ``rht.apply(x)``."""
    if rht is None:
        return prep
    check_rht_length(prep.x.shape[-1], rht, axis)
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf in a butterfly is NaN, as IEEE says
        xr = rht.apply(prep.x, axis=-1).astype(np.float32)
    return dataclasses.replace(prep, x=np.ascontiguousarray(xr))


def _quantize_numpy(x, sch: Scheme, axis, rounding, rbits, sr_bits, pad, rht=None) -> QuantizedTensor:
    """The emulator (the reference): the normative steps 2-5 of :func:`quantize`."""
    prep = prepare_input(x, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits, pad=pad)
    prep = _rotate(prep, rht, axis)
    if sch.structure == "hif4":
        return _quantize_hif4(prep, sch, rounding, rht)
    if sch.structure == "if4":
        return _quantize_if4(prep, sch, rounding, sr_bits, rht)
    from .emulator import blockscale

    xp = prep.x
    k = sch.block_size
    blocks = xp.reshape(xp.shape[:-1] + (xp.shape[-1] // k, k))
    rb = None if prep.rbits is None else prep.rbits.reshape(blocks.shape)
    if sch.structure == "mx":
        codes, scales = blockscale.quantize_mx(blocks, sch, rounding, rb, sr_bits)
        global_scale = None
    else:
        codes, scales, ts = blockscale.quantize_two_level(blocks, sch, rounding, rb, sr_bits)
        global_scale = ts.decode
    return QuantizedTensor.from_moved(codes.reshape(xp.shape), scales, global_scale, sch, prep.axis, prep.shape,
                                      rht=rht)


# -- backend selection -------------------------------------------------------------------------------

def _is_torch(a) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def _installed(module: str) -> bool:
    """True if ``module`` can be imported (without importing it)."""
    return importlib.util.find_spec(module) is not None


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _get(name):
    from .backends import get_backend, list_backends
    from .backends.base import BackendError

    if isinstance(name, str) and name not in list_backends() and ":" not in name:
        raise BackendError(f"backend: {name!r} is not one of {', '.join(map(repr, (AUTO, *list_backends())))} "
                           f"(or a backend class as 'package.module:Name', or a Backend object)")
    return get_backend(name)  # names, 'module:Name', Backend classes and objects


def _device_type(x) -> str:
    return x.device.type if _is_torch(x) else "cpu"


def unsupported_reason(backend, x, scheme: "str | Scheme", *, rounding: str = "rne",
                       sr_bits: int = DEFAULT_SR_BITS, auto: bool = False, rht=None) -> str:
    """Why ``backend`` (a name or a Backend) cannot quantize x with ``scheme``, ``rounding``
    and ``rht`` (an empty string if it can). ``auto=True`` applies :func:`select_backend`'s
    extra rule (triton only for CUDA tensors). x is a numpy array or a torch tensor; only its
    device is looked at (a numpy x runs on the backend's own device). An RHT must be among
    the backend's ``capabilities().rht`` (:meth:`~fp4spec.backends.Capabilities.supports_rht`)."""
    sch = scheme if isinstance(scheme, Scheme) else get_scheme(scheme)
    rht = resolve_rht(rht)
    name = backend if isinstance(backend, str) else None  # a Backend object: its own checks only
    if name == "numpy":
        return ""  # the emulator runs every scheme, rounding and RHT
    if name == "triton":
        dev = _device_type(x) if _is_torch(x) else None
        if auto and dev != "cuda":
            return (f"x is on {dev or 'the CPU (numpy)'}; auto selection uses triton for CUDA tensors only "
                    f"(the CPU interpreter is slow: name backend='triton' with TRITON_INTERPRET=1 to use it)")
        if not _installed("triton"):
            return "triton is not installed (pip install triton)"
        if dev is not None and dev != "cuda" and not (dev == "cpu" and _interpret()):
            return f"x is on {dev}; the triton kernels run on CUDA devices, or on the CPU under TRITON_INTERPRET=1"
        if _is_torch(x) and x.numel() == 0:
            return "x is empty (the kernels need at least one block)"
    if name == "torch" and not _installed("torch"):
        return "torch is not installed (pip install torch)"
    from .backends.registry import as_availability

    b = _get(backend)
    avail = as_availability(b.is_available())
    if not avail:
        return f"not available here: {avail.reason or 'is_available() is False'}"
    check = getattr(b, "why_unsupported", None)
    reason = check(sch, rounding, sr_bits) if callable(check) else _capability_refusal(b, sch, rounding, sr_bits)
    if reason or rht is None:
        return reason
    caps = b.capabilities()
    if not caps.supports_rht(rht):
        return (f"rht {rht.spec} with {rht.out_dtype} output is not among its capabilities "
                f"(Capabilities.rht: {', '.join(caps.rht) or 'none'})")
    return ""


def _capability_refusal(b, sch: Scheme, rounding: str, sr_bits: int) -> str:
    from .backends.base import BackendError

    caps = b.capabilities()
    try:
        if not caps.supports_scheme(sch):
            return f"scheme {sch.name!r} (as configured) is not among its capabilities ({', '.join(caps.schemes)})"
        modes = caps.roundings_for(sch)
    except BackendError as exc:
        return str(exc)
    if rounding not in modes:
        return f"rounding {rounding!r} is not among its capabilities for {sch.name} ({', '.join(modes)})"
    if rounding == "sr" and int(sr_bits) not in caps.sr_bits:
        return f"sr_bits={sr_bits} is not among its capabilities"
    return ""


def select_backend(x, scheme: "str | Scheme", *, rounding: str = "rne", sr_bits: int = DEFAULT_SR_BITS,
                   backend="auto", rht=None, **overrides) -> str:
    """The name of the backend ``quantize(x, scheme, rounding=..., rht=..., backend=...)`` runs.

    ``backend="auto"``: a numpy x -> ``"numpy"``. A torch tensor -> the first of
    :data:`AUTO_ORDER` (triton, torch, numpy) that can run the request: triton if x is on a
    CUDA device, triton is installed and available and its kernels support the scheme,
    rounding, sr_bits and RHT (the CPU interpreter is never chosen automatically); torch if
    it supports them; else numpy (x is copied to the CPU and the results back to x's device).

    An explicit backend is returned as it is if it can run the request; otherwise
    :class:`~fp4spec.backends.BackendError` names it and says why (unavailable, unsupported
    scheme, rounding or RHT, x on a device it cannot use).
    """
    from .backends.base import BackendError

    sch = get_scheme(scheme, **overrides)
    rht = resolve_rht(rht)
    if isinstance(backend, str) and backend == AUTO:
        if not _is_torch(x):
            return "numpy"
        for name in AUTO_ORDER:
            if not unsupported_reason(name, x, sch, rounding=rounding, sr_bits=sr_bits, auto=True, rht=rht):
                return name
        return "numpy"  # not reached: numpy runs everything
    reason = unsupported_reason(backend, x, sch, rounding=rounding, sr_bits=sr_bits, rht=rht)
    label = backend if isinstance(backend, str) else _get(backend).name
    if reason:
        with_rht = "" if rht is None else f" and rht={rht.spec}"
        raise BackendError(f"backend: {label!r} cannot quantize {sch.name} with rounding={rounding!r}{with_rht}: "
                           f"{reason}")
    return label


def _check_sr_bits(sr_bits) -> None:
    if isinstance(sr_bits, bool) or not isinstance(sr_bits, (int, np.integer)) or not 1 <= int(sr_bits) <= 32:
        raise ValueError(f"sr_bits: {sr_bits!r} is not an integer in [1, 32]")


def _quantize_backend(x, sch: Scheme, backend, torch_in: bool, axis, rounding, rbits, sr_bits, pad, rht=None):
    from .rounding import check_rounding

    rounding = check_rounding(rounding)  # argument errors before backend errors, as prepare_input states them
    if rounding == "sr":
        _check_sr_bits(sr_bits)
    chosen = select_backend(x, sch, rounding=rounding, sr_bits=sr_bits, backend=backend, rht=rht)
    if not isinstance(backend, str):  # a Backend object or class: through the Backend interface
        return _quantize_interface(_get(backend), x, sch, torch_in, axis, rounding, rbits, sr_bits, pad, rht)
    if chosen == "numpy":
        if not torch_in:
            return _quantize_numpy(x, sch, axis, rounding, rbits, sr_bits, pad, rht)
        q = _quantize_numpy(_to_numpy(x), sch, axis, rounding, _to_numpy(rbits), sr_bits, pad, rht)
        return q.to_torch(x.device)
    if chosen in ("torch", "triton"):
        b = _get(chosen)
        xt = x if torch_in else _torch_backend().as_torch(x, b.device)
        q = _quantize_tensor(xt, sch, chosen, axis, rounding, rbits, sr_bits, pad, rht)
        return q if torch_in else q.to_numpy()
    return _quantize_interface(_get(chosen), x, sch, torch_in, axis, rounding, rbits, sr_bits, pad, rht)


def _quantize_interface(b, x, sch: Scheme, torch_in: bool, axis, rounding, rbits, sr_bits, pad, rht=None):
    """Any other backend, through the Backend interface: numpy float32 in, blocked axis last;
    the RHT (if any) is the backend's to apply, along that last axis."""
    xn = _to_numpy(x) if torch_in else x
    prep = prepare_input(xn, sch, axis=axis, rounding=rounding, rbits=_to_numpy(rbits), sr_bits=sr_bits, pad=pad)
    kw = {}
    if rht is not None:  # passed only when asked for: backends without an RHT need not take the keyword
        check_rht_length(prep.x.shape[-1], rht, axis)
        kw["rht"] = rht
    out = b.quantize(prep.x, sch, rounding=rounding, rbits=prep.rbits, sr_bits=sr_bits, **kw)
    if not isinstance(out, QuantizedTensor):
        raise TypeError(f"backend: {b.name!r}.quantize returned {type(out).__name__}, not a QuantizedTensor")
    m = out.to_numpy().moved()
    q = QuantizedTensor.from_moved(np.array(m["codes"]), np.array(m["scales"]), out.to_numpy().global_scale, sch,
                                   prep.axis, prep.shape, e1_8=None if m["e1_8"] is None else np.array(m["e1_8"]),
                                   e1_16=None if m["e1_16"] is None else np.array(m["e1_16"]), backend=b.name,
                                   rht=rht)
    return q.to_torch(x.device) if torch_in else q


def _torch_backend():
    return importlib.import_module("fp4spec.backends.torch_backend")


def _to_numpy(a):
    """A numpy array of a torch tensor (bfloat16 as ml_dtypes.bfloat16, exactly); others pass through."""
    if not _is_torch(a):
        return a
    import torch

    t = a.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


# -- torch tensors on their device (the torch and triton backends) ------------------------------------

_TORCH_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _prepare_tensor(x, sch: Scheme, axis, rounding, rbits, sr_bits, pad):
    """:func:`fp4spec.scaling.prepare_input` for a torch tensor, on its device, with the same
    checks and messages: returns (x or the padded x with the axis moved last, rbits as int64
    of that shape or None, the non-negative axis, whether the axis was moved)."""
    import torch

    from ._checks import check_axis
    from .rounding import check_rounding

    if str(x.dtype).removeprefix("torch.") not in _TORCH_FLOATS:
        raise TypeError(f"x: dtype {x.dtype} is not supported; pass float16, bfloat16, float32 or float64 values")
    x = x.detach()
    if x.dim() == 0:
        raise ValueError("x: a 0-d value has no axis to block along; pass at least one dimension")
    ax = check_axis(axis, x.dim(), "x")
    mode = check_rounding(rounding)
    if not isinstance(pad, bool):
        raise ValueError(f"pad: expected True or False, got {pad!r}")
    rb = None
    if mode == "sr":
        rb = _check_rbits_tensor(rbits, tuple(x.shape), sr_bits, x.device)
    elif rbits is not None:
        raise ValueError(f"rbits: only used with rounding='sr', not {mode!r}")
    k = sch.block_size
    n = x.shape[ax]
    widths = [0, 0]  # padding of the (moved) last and second-to-last axes
    if n % k:
        if not pad:
            raise ValueError(f"x: length {n} along axis {axis} is not a multiple of the {sch.name} block "
                             f"size {k}; pass pad=True to pad with zeros to {-(-n // k) * k}")
        widths[0] = -(-n // k) * k - n
    if sch.is_2d:
        if x.dim() < 2:
            raise ValueError(f"x: {sch.name} uses {sch.tile_rows}x{k} tiles over the last two axes; "
                             f"x has one dimension")
        rows = torch.movedim(x, ax, -1).shape[-2]
        rt = sch.tile_rows
        if rows % rt:
            if not pad:
                raise ValueError(f"x: {rows} rows (the axis before axis {axis}) is not a multiple of the "
                                 f"{sch.name} tile height {rt}; pass pad=True to pad with zeros")
            widths[1] = -(-rows // rt) * rt - rows
    if widths == [0, 0]:
        return x, rb, ax, False
    f = torch.nn.functional
    spec = (0, widths[0]) if not widths[1] else (0, widths[0], 0, widths[1])
    xm = f.pad(torch.movedim(x, ax, -1).to(torch.float32), spec)  # +0.0, as prepare_input
    if rb is not None:
        rb = f.pad(torch.movedim(rb, ax, -1), spec)  # random bits 0
    return xm, rb, ax, True


def _check_rbits_tensor(rbits, shape, sr_bits, device):
    """:func:`fp4spec.emulator.encode.check_rbits` for numpy or torch rbits: an int64 tensor
    of x's shape on ``device``."""
    import torch

    from .emulator.encode import check_rbits

    if not _is_torch(rbits):
        rb = np.array(check_rbits(rbits, shape, sr_bits), dtype=np.int64, order="C")
        return torch.from_numpy(rb).to(device)
    _check_sr_bits(sr_bits)
    if rbits.dtype.is_floating_point or rbits.dtype.is_complex or rbits.dtype == torch.bool:
        raise ValueError(f"rbits: dtype {rbits.dtype} is not an integer dtype")
    rb = rbits.detach().to(device=device, dtype=torch.int64)
    if rb.numel():
        lo, hi = int(rb.min()), int(rb.max())
        if lo < 0 or hi >= (1 << int(sr_bits)):
            raise ValueError(f"rbits: values must be in [0, 2**{sr_bits}) = [0, {(1 << int(sr_bits)) - 1}], "
                             f"got [{lo}, {hi}]")
    try:
        return rb.expand(shape)
    except RuntimeError:
        raise ValueError(f"rbits: shape {tuple(rbits.shape)} does not broadcast to x's shape {shape}") from None


def _quantize_tensor(x, sch: Scheme, name: str, axis, rounding, rbits, sr_bits, pad, rht=None) -> QuantizedTensor:
    """Quantize a torch tensor with the torch or triton backend, on its device; torch tensors out."""
    shape = tuple(x.shape)
    xt, rb, ax, moved = _prepare_tensor(x, sch, axis, rounding, rbits, sr_bits, pad)
    run_axis = -1 if moved else ax
    if rht is not None:
        check_rht_length(xt.shape[run_axis], rht, axis)
    if name == "torch":
        out = _torch_backend().quantize_tensors(xt, sch, axis=run_axis, rounding=rounding, rbits=rb, sr_bits=sr_bits,
                                                rht=rht)
        codes, scales, g = out["codes"], out["scales"], out["global_scale"]
        e1 = {f: out[f] for f in ("e1_8", "e1_16") if out.get(f) is not None}  # HiF4
    else:
        codes, scales, g = _triton_tensors(xt, sch, run_axis, rounding, rb, sr_bits, rht)
        e1 = {}
    return QuantizedTensor.from_moved(codes, scales, g, sch, ax, shape, backend=name, rht=rht, **e1)


def _triton_tensors(x, sch: Scheme, axis: int, rounding, rb, sr_bits, rht=None):
    """(codes, scales, S_dec) of the triton kernels in the blocked-axis-last layout of x
    (``rht``, when not None, goes to ``quantize_packed(..., rht=)``: the kernels apply it)."""
    import torch

    tr = importlib.import_module("fp4spec.backends.triton")
    if x.dtype == torch.float64:
        x = x.to(torch.float32)  # RNE, as prepare_input
    ax = axis % x.dim()
    if x.numel() == 0:
        raise ValueError("x: the triton kernels need a non-empty tensor")
    if ax != x.dim() - 1 and not (x.dim() == 2 and ax == 0):  # the kernels: last axis, or columnwise 2-D
        x = torch.movedim(x, ax, -1).contiguous()
        rb = None if rb is None else torch.movedim(rb, ax, -1).contiguous()
        ax = x.dim() - 1
    if rb is not None:
        rb = rb.to(torch.int32)  # < 2^24 (the kernels' sr_bits)
    kw = {} if rht is None else {"rht": rht}
    if x.device.type == "cuda":
        with torch.cuda.device(x.device):  # Triton launches on the current device
            out = tr.quantize_packed(x, sch, axis=ax, rounding=rounding, rbits=rb, sr_bits=sr_bits, **kw)
    else:
        out = tr.quantize_packed(x, sch, axis=ax, rounding=rounding, rbits=rb, sr_bits=sr_bits, **kw)
    codes = tr.unpack_lo_first(out["packed"])  # (M, N): the logical rows, the blocked axis last
    moved_shape = tuple(x.shape) if ax == x.dim() - 1 else (x.shape[1], x.shape[0])
    codes = codes.reshape(moved_shape)
    scales = out["scales"].reshape(*moved_shape[:-1], -1)
    g = out["global_scale"]
    return codes, scales, None if g is None else g.clone()


def _quantize_hif4(prep, sch: Scheme, rounding: str, rht=None) -> QuantizedTensor:
    if rounding != "rne":
        raise ValueError(f"rounding: HiF4 rounds its elements as its golden model does (ties away); "
                         f"rounding={rounding!r} cannot be applied")
    mod = _hif4_module()
    out = mod.hif4_quantize(prep.x)
    return QuantizedTensor.from_moved(np.asarray(out["codes"], np.uint8), np.asarray(out["scales"]), None, sch,
                                      prep.axis, prep.shape, e1_8=out.get("e1_8"), e1_16=out.get("e1_16"), rht=rht)


def _quantize_if4(prep, sch: Scheme, rounding: str, sr_bits: int, rht=None) -> QuantizedTensor:
    from .emulator.if4 import quantize_if4
    from .if4 import check_finite

    xp = prep.x
    check_finite(xp)
    k = sch.block_size
    blocks = xp.reshape(xp.shape[:-1] + (xp.shape[-1] // k, k))
    rb = None if prep.rbits is None else prep.rbits.reshape(blocks.shape)
    codes, scales, g = quantize_if4(blocks, sch, rounding, rb, sr_bits)
    return QuantizedTensor.from_moved(codes.reshape(xp.shape), scales, g, sch, prep.axis, prep.shape, rht=rht)


def dequantize(q: QuantizedTensor):
    """float32 values of a :class:`~fp4spec.quantized.QuantizedTensor`, in the quantized x's shape.

    MX: ``fp32(P * 2^(s - 127))`` (NaN where the scale code is 0xFF). Two-level, by the
    profile's ``nv_dequant_order``: TE ``fp32(fp32(P * s) * S_dec)``, torchao
    ``fp32(P * fp32(pts * s))`` (s = the decoded UE4M3 scale, NaN for 0x7F). HiF4:
    ``hif4_dequantize``. Padding is cropped.

    With ``q.rht`` (quantized with ``rht=``) the values are in the rotated basis:
    dequantize does NOT undo the RHT; ``q.rht.inverse(values, axis=q.axis)`` does, up to
    rounding, when q was not padded (the RHT ran over the padding too, which is cropped here).

    A numpy QuantizedTensor gives a numpy array (the emulator). One of torch tensors gives a
    float32 torch tensor on their device: the schemes the torch backend dequantizes (MX,
    two-level, HiF4) run its :func:`~fp4spec.backends.torch_backend.dequantize_tensors`
    there (the same float32 operations); others run the emulator on a CPU copy.
    """
    if not isinstance(q, QuantizedTensor):
        raise TypeError(f"q: expected a QuantizedTensor, got {type(q).__name__}")
    _check_scale_codes(q)
    if q.is_torch:
        return _dequantize_tensor(q)
    sch = q.scheme
    m = q.moved()
    if sch.structure == "hif4":
        mod = _hif4_module()
        out = np.asarray(mod.hif4_dequantize(codes=m["codes"], scales=m["scales"], e1_8=m["e1_8"],
                                             e1_16=m["e1_16"]), dtype=np.float32)
    elif sch.structure == "if4":
        from .emulator.if4 import dequantize_if4

        codes = m["codes"]
        k = sch.block_size
        blocks = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // k, k))
        out = dequantize_if4(blocks, m["scales"], q.global_scale).reshape(codes.shape)
    else:
        from .emulator import blockscale

        codes = m["codes"]
        k = sch.block_size
        blocks = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // k, k))
        if sch.structure == "mx":
            out = blockscale.dequantize_mx(blocks, m["scales"], sch)
        else:
            out = blockscale.dequantize_two_level(blocks, m["scales"], q.global_scale, sch)
        out = out.reshape(codes.shape)
    out = np.moveaxis(out, -1, q.axis)
    return np.ascontiguousarray(out[tuple(slice(0, n) for n in q.shape)])


def _check_scale_codes(q: QuantizedTensor) -> None:
    """Scale bytes beyond the scale format's codes (UE4M3 has 7 bits; a float8_e4m3fn byte with
    its sign bit set is not one) cannot be dequantized: a ValueError naming them. A
    QuantizedTensor keeps such bytes (what a GEMM makes of them is its model's policy)."""
    from .quantized import _max_value

    top = (1 << q.scheme.scale.bits) - 1
    m = _max_value(q.scales)
    if m is not None and m > top:
        raise ValueError(f"scales: {q.scheme.scale.name} scale codes are {q.scheme.scale.bits}-bit (0..{top:#x}); "
                         f"found {m:#x}, which dequantize cannot decode (bit 7 of a float8_e4m3fn byte is its sign)")


def _dequantize_tensor(q: QuantizedTensor):
    import torch

    tb = _torch_backend()
    try:
        tb.check_dequantize(q.scheme)
    except NotImplementedError:
        out = dequantize(q.to_numpy())
        return torch.from_numpy(np.array(out, dtype=np.float32, order="C")).to(q.device)
    m = q.moved()
    out = tb.dequantize_tensors(m["codes"], m["scales"], q.global_scale, q.scheme, e1_8=m["e1_8"], e1_16=m["e1_16"])
    out = torch.movedim(out, -1, q.axis)
    return out[tuple(slice(0, n) for n in q.shape)].contiguous()


__all__ = ["AUTO_ORDER", "QuantizedTensor", "RHT", "Scheme", "check_rht_length", "dequantize", "get_scheme",
           "quantize", "schemes", "select_backend", "unsupported_reason"]
