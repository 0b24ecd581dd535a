"""``fp4spec.quantize`` and ``fp4spec.dequantize`` as torch custom operators (``torch.library``).

Under ``torch.compile`` a Python call that dynamo cannot trace (a cached plan, a Triton launch)
breaks the graph. The operators below are opaque to the compiler, with fake (meta) functions
that give their outputs' shapes (defined when this module is imported). While dynamo traces,
``fp4spec.quantize`` and ``fp4spec.dequantize`` of torch tensors call them, so a compiled
function that quantizes stays one graph (``fullgraph=True`` works; HiF4, a Backend object and
scheme overrides as keywords take the eager path: a break). ``seed=`` (an int or a one-element
int64 tensor) draws its Philox bits in the graph (:mod:`fp4spec.backends.torch_philox`, fused by
the compiler) and passes them as ``rbits``; a tensor seed's new value needs no recompilation.

* ``torch.ops.fp4spec.quantize(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend, seed)``
  -> ``(data, scales, global_scale)``: the fields of ``fp4spec.quantize``'s QuantizedTensor with
  the blocked axis last, contiguous, 4-bit codes packed two per byte (``QuantizedTensor.storage``);
  ``global_scale`` a 0-d float32 tensor, or a 1-element zero tensor for MX schemes;
* ``torch.ops.fp4spec.dequantize(data, scales, global_scale, scheme, shape, backend)`` -> the
  float32 values (blocked axis last, ``shape`` the unpadded moved shape);
* ``torch.ops.fp4spec.fake_quantize(...)`` (quantize's arguments) -> the float32 values
  ``fp4spec.dequantize(fp4spec.quantize(...))`` in x's shape: one operator per operand of a
  fake-quant layer.

``scheme`` is a scheme name or spec string (``"mxfp4:scale_rule=rceil"``), ``rht`` None,
``"te"`` or an RHT's text (:func:`rht_text`: ``"16/fwht-fp32/bfloat16/0xD7E8"``, size, arith,
output dtype, sign mask), ``backend`` a backend name, ``seed`` None or a one-element int64
tensor on x's device (``fp4spec.quantize``'s ``seed=``: Philox bits drawn inside the operator;
with ``rbits`` an error). The operators run the eager bodies of the public functions
(:mod:`.eager`): the same bits, by construction.
"""

from __future__ import annotations

import torch

from fp4spec.block_schemes import Scheme, get_scheme
from fp4spec.quantized import QuantizedTensor, _moved
from fp4spec.rht import RHT, resolve_rht
from fp4spec.scaling import input_layout
from fp4spec.scheme_specs import scheme_spec

from .eager import dequantize_eager, quantize_eager

#: The operator namespace: ``torch.ops.fp4spec``.
NAMESPACE = "fp4spec"


def _packed(scheme) -> bool:
    """The codes a backend returns for this scheme are packed (4-bit elements): every torch
    backend of this package keeps them so (the triton kernels' storage; the torch backend packs)."""
    return scheme.element.bits == 4


def _check_scheme(scheme_name: str):
    sch = get_scheme(scheme_name)
    if sch.structure == "hif4":
        raise ValueError(f"scheme: {scheme_name!r}: the custom operators take schemes of codes and scales "
                         f"(HiF4's micro-exponent bits are extra fields: call fp4spec.quantize)")
    return sch


def rht_text(rht) -> "str | None":
    """An ``rht=`` argument as the operators' text: None, ``"te"`` for TransformerEngine's
    transform as :func:`~fp4spec.rht.resolve_rht` gives it, else ``"size/arith/out_dtype/0xMASK"``
    (the sign mask: bit i set where ``s_i = -1``)."""
    r = resolve_rht(rht)
    if r is None:
        return None
    if r == RHT.te():
        return "te"
    return f"{r.spec}/{r.out_dtype}/{r.sign_mask():#x}"


def rht_from_text(text: "str | None") -> "RHT | None":
    """The RHT of :func:`rht_text`'s text (ValueError naming ``rht`` for anything else)."""
    if text is None or text == "te":
        return resolve_rht(text)
    parts = text.split("/")
    try:
        size, mask = int(parts[0]), int(parts[-1], 16)
        arith, out = "/".join(parts[1:-2]), parts[-2]
    except (ValueError, IndexError):
        raise ValueError(f"rht: {text!r} is not None, 'te' or 'size/arith/out_dtype/0xMASK' "
                         f"(e.g. '16/fwht-fp32/bfloat16/0xd7e8')") from None
    signs = tuple(-1 if mask >> i & 1 else 1 for i in range(size))
    return RHT(size, signs, arith, out)


def _quantized(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend, seed=None):
    """The eager ``fp4spec.quantize`` both quantizing operators run (bits in range: not re-checked)."""
    return quantize_eager(x, _check_scheme(scheme), {}, axis=axis, rounding=rounding, rbits=rbits, seed=seed,
                          sr_bits=sr_bits, pad=pad, rht=rht_from_text(rht), backend=backend, check_rbits=False)


def _fields(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto",
            seed=None):
    q = _quantized(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend, seed)
    data = q.storage if _packed(q.scheme) else q.data
    ax = q.axis
    data, scales = data.movedim(ax, -1).contiguous(), q.scales.movedim(ax, -1).contiguous()
    g = q.global_scale if q.global_scale is not None else torch.zeros(1, dtype=torch.float32, device=x.device)
    return data, scales, g.clone()  # outputs may not alias one another (ts[1] is a view of the constants)


def _fake_fields(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto",
                 seed=None):
    sch = _check_scheme(scheme)
    lay = input_layout(tuple(x.shape), str(x.dtype), sch, axis=axis, rounding=rounding,
                       rbits_given=rbits is not None or seed is not None, sr_bits=sr_bits, pad=pad)
    padded = lay.padded
    n = padded[-1] // 2 if _packed(sch) else padded[-1]
    data = x.new_empty((*padded[:-1], n), dtype=torch.uint8)
    scales = x.new_empty((*padded[:-1], padded[-1] // sch.block_size), dtype=torch.uint8)
    g = x.new_empty((), dtype=torch.float32) if sch.global_scale is not None else x.new_empty(1, dtype=torch.float32)
    return data, scales, g


def _fake_quantize(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto",
                   seed=None):
    out = dequantize_eager(_quantized(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend, seed))
    return out if out.is_contiguous() else out.contiguous()


def _fake_values(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto",
                 seed=None):
    _check_scheme(scheme)
    return x.new_empty(x.shape, dtype=torch.float32)


# The kernels get the schema's defaults for arguments a caller left at them (torch drops those).
_SCHEMA_ARGS = ("(Tensor x, str scheme, int axis=-1, str rounding='rne', Tensor? rbits=None, int sr_bits=8, "
                "bool pad=False, str? rht=None, str backend='auto', Tensor? seed=None)")


def _values(data, scales, global_scale, scheme, shape, backend="auto"):
    sch = get_scheme(scheme)
    g = global_scale.reshape(()) if sch.global_scale is not None else None
    q = QuantizedTensor.from_kernel(data, scales, g, sch, tuple(shape), backend="torch.ops.fp4spec")
    out = dequantize_eager(q, backend)
    return out if out.is_contiguous() else out.contiguous()


def _fake_dequantized(data, scales, global_scale, scheme, shape, backend="auto"):
    return data.new_empty(tuple(shape), dtype=torch.float32)


_DEQUANTIZE_ARGS = "(Tensor data, Tensor scales, Tensor global_scale, str scheme, int[] shape, str backend='auto')"


def _define(lib) -> None:
    for name, args, ret, impl, fake in (
            ("quantize", _SCHEMA_ARGS, "(Tensor, Tensor, Tensor)", _fields, _fake_fields),
            ("fake_quantize", _SCHEMA_ARGS, "Tensor", _fake_quantize, _fake_values),
            ("dequantize", _DEQUANTIZE_ARGS, "Tensor", _values, _fake_dequantized)):
        lib.define(f"{name}{args} -> {ret}")
        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)


# Defined when this module is imported (not on first call: dynamo would trace the definition).
LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")  # noqa: TOR901 -- held for the process's life
_define(LIBRARY)


def quantize_fields(x, scheme: str, *, axis: int = -1, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                    pad: bool = False, rht=None, backend: str = "auto", seed=None):
    """``torch.ops.fp4spec.quantize`` (``rht``: anything :func:`rht_text` takes; ``seed``: an
    int or a one-element int64 tensor, see :func:`seed_arg`)."""
    return torch.ops.fp4spec.quantize(x, scheme, axis, rounding, rbits, sr_bits, pad, rht_text(rht), backend,
                                      seed_arg(seed, x))


def fake_quantize(x, scheme: str, *, axis: int = -1, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                  pad: bool = False, rht=None, backend: str = "auto", seed=None):
    """``torch.ops.fp4spec.fake_quantize``: float32 ``dequantize(quantize(x, ...))`` in x's shape,
    one custom operator."""
    return torch.ops.fp4spec.fake_quantize(x, scheme, axis, rounding, rbits, sr_bits, pad, rht_text(rht), backend,
                                           seed_arg(seed, x))


def seed_arg(seed, x):
    """``seed=`` as the operators take it: None, or a 0-d int64 tensor on x's device (an int
    in [-2^63, 2^64) stored mod 2^64 in two's complement)."""
    from fp4spec.backends.torch_philox import seed_tensor

    return None if seed is None else seed_tensor(seed, x.device)


def compiled_quantize(x, scheme, *, axis, rounding, rbits, sr_bits, pad, rht, backend, seed=None):
    """``fp4spec.quantize`` under ``torch.compile``: the operator, then a QuantizedTensor of its
    fields (the graph holds them; ``backend`` records the argument as given). ``seed``: the
    Philox bits drawn in the graph (x's row-major order, as ``fp4spec.draw_rbits(...,
    method="philox")``), passed as ``rbits``. None where the request needs the eager path
    (HiF4, a Backend object, a seed with sr_bits 32)."""
    if not isinstance(backend, str):
        return None
    sch = scheme if isinstance(scheme, Scheme) else get_scheme(scheme)
    if sch.structure == "hif4":
        return None
    if seed is not None:
        if sr_bits > 31:
            return None
        from fp4spec.backends.torch_philox import philox_rbits

        from .plan import check_seed_request

        check_seed_request(seed, rbits, rounding, x)
        rbits = philox_rbits(seed_arg(seed, x), tuple(x.shape), sr_bits, device=x.device)
    data, scales, g = torch.ops.fp4spec.quantize(x, scheme_spec(sch), axis, rounding, rbits, sr_bits, pad,
                                                 rht_text(rht), backend)
    nd = x.dim()
    ax = axis % nd
    fields = dict(data=data.movedim(-1, ax), scales=scales.movedim(-1, ax),
                  global_scale=g if sch.global_scale is not None else None, scheme=sch, axis=ax,
                  shape=tuple(x.shape), e1_8=None, e1_16=None, backend=backend, rht=resolve_rht(rht))
    return QuantizedTensor._checked(fields, _packed(sch))


def compiled_dequantize(q, backend):
    """``fp4spec.dequantize`` of torch fields under ``torch.compile``: the operator."""
    nd = len(q.shape)
    ax = q.axis
    data = q.storage.movedim(ax, -1).contiguous()
    scales = q.scales.movedim(ax, -1).contiguous()
    g = q.global_scale if q.global_scale is not None else data.new_zeros((), dtype=torch.float32)
    out = torch.ops.fp4spec.dequantize(data, scales, g, scheme_spec(q.scheme), list(_moved(q.shape, ax)), backend)
    return out if ax == nd - 1 else out.movedim(-1, ax)


__all__ = ["LIBRARY", "NAMESPACE", "compiled_dequantize", "compiled_quantize", "fake_quantize", "quantize_fields",
           "rht_from_text", "rht_text", "seed_arg"]
