"""``fp4spec.quantize`` and ``fp4spec.dequantize`` as torch custom operators (``torch.library``).

Under ``torch.compile`` a Python call that dynamo cannot trace (a cached plan, a Triton launch)
breaks the graph. The operators below are opaque to the compiler, with fake (meta) functions
that give their outputs' shapes (defined when this module is imported). While dynamo traces,
``fp4spec.quantize`` and ``fp4spec.dequantize`` of torch tensors call them, so a compiled
function that quantizes stays one graph (``fullgraph=True`` works; HiF4, ``rht=`` other than
None or a string, a Backend object, ``seed=`` and scheme overrides as keywords take the eager
path: a break):

* ``torch.ops.fp4spec.quantize(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend)``
  -> ``(data, scales, global_scale)``: the fields of ``fp4spec.quantize``'s QuantizedTensor with
  the blocked axis last, contiguous, 4-bit codes packed two per byte (``QuantizedTensor.storage``);
  ``global_scale`` a 0-d float32 tensor, or a 1-element zero tensor for MX schemes;
* ``torch.ops.fp4spec.dequantize(data, scales, global_scale, scheme, shape, backend)`` -> the
  float32 values (blocked axis last, ``shape`` the unpadded moved shape);
* ``torch.ops.fp4spec.fake_quantize(...)`` (quantize's arguments) -> the float32 values
  ``fp4spec.dequantize(fp4spec.quantize(...))`` in x's shape: one operator per operand of a
  fake-quant layer.

``scheme`` is a scheme name or spec string (``"mxfp4:scale_rule=rceil"``), ``rht`` None or an
RHT name or spec (``"te"``, ``"16/fwht-fp32"``), ``backend`` a backend name. The operators run
the eager bodies of the public functions (:mod:`.eager`): the same bits, by construction.
"""

from __future__ import annotations

import torch

from fp4spec.block_schemes import Scheme, get_scheme
from fp4spec.quantized import QuantizedTensor, _moved
from fp4spec.rht import resolve_rht
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


def _quantized(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend):
    """The eager ``fp4spec.quantize`` both quantizing operators run (bits in range: not re-checked)."""
    return quantize_eager(x, _check_scheme(scheme), {}, axis=axis, rounding=rounding, rbits=rbits, seed=None,
                          sr_bits=sr_bits, pad=pad, rht=rht, backend=backend, check_rbits=False)


def _fields(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto"):
    q = _quantized(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend)
    data = q.storage if _packed(q.scheme) else q.data
    ax = q.axis
    data, scales = data.movedim(ax, -1).contiguous(), q.scales.movedim(ax, -1).contiguous()
    g = q.global_scale if q.global_scale is not None else torch.zeros(1, dtype=torch.float32, device=x.device)
    return data, scales, g.clone()  # outputs may not alias one another (ts[1] is a view of the constants)


def _fake_fields(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto"):
    sch = _check_scheme(scheme)
    lay = input_layout(tuple(x.shape), str(x.dtype), sch, axis=axis, rounding=rounding,
                       rbits_given=rbits is not None, sr_bits=sr_bits, pad=pad)
    padded = lay.padded
    n = padded[-1] // 2 if _packed(sch) else padded[-1]
    data = x.new_empty((*padded[:-1], n), dtype=torch.uint8)
    scales = x.new_empty((*padded[:-1], padded[-1] // sch.block_size), dtype=torch.uint8)
    g = x.new_empty((), dtype=torch.float32) if sch.global_scale is not None else x.new_empty(1, dtype=torch.float32)
    return data, scales, g


def _fake_quantize(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto"):
    out = dequantize_eager(_quantized(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend))
    return out if out.is_contiguous() else out.contiguous()


def _fake_values(x, scheme, axis=-1, rounding="rne", rbits=None, sr_bits=8, pad=False, rht=None, backend="auto"):
    _check_scheme(scheme)
    return x.new_empty(x.shape, dtype=torch.float32)


# The kernels get the schema's defaults for arguments a caller left at them (torch drops those).
_SCHEMA_ARGS = ("(Tensor x, str scheme, int axis=-1, str rounding='rne', Tensor? rbits=None, int sr_bits=8, "
                "bool pad=False, str? rht=None, str backend='auto')")


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
                    pad: bool = False, rht: "str | None" = None, backend: str = "auto"):
    """``torch.ops.fp4spec.quantize``."""
    return torch.ops.fp4spec.quantize(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend)


def fake_quantize(x, scheme: str, *, axis: int = -1, rounding: str = "rne", rbits=None, sr_bits: int = 8,
                  pad: bool = False, rht: "str | None" = None, backend: str = "auto"):
    """``torch.ops.fp4spec.fake_quantize``: float32 ``dequantize(quantize(x, ...))`` in x's shape,
    one custom operator."""
    return torch.ops.fp4spec.fake_quantize(x, scheme, axis, rounding, rbits, sr_bits, pad, rht, backend)


def compiled_quantize(x, scheme, *, axis, rounding, rbits, sr_bits, pad, rht, backend):
    """``fp4spec.quantize`` under ``torch.compile``: the operator, then a QuantizedTensor of its
    fields (the graph holds them; ``backend`` records the argument as given). None where the
    request needs the eager path (HiF4, an RHT given as an object or int seed, a Backend object)."""
    if (rht is not None and not isinstance(rht, str)) or not isinstance(backend, str):
        return None
    sch = scheme if isinstance(scheme, Scheme) else get_scheme(scheme)
    if sch.structure == "hif4":
        return None
    data, scales, g = torch.ops.fp4spec.quantize(x, scheme_spec(sch), axis, rounding, rbits, sr_bits, pad,
                                                 None if rht is None else str(rht), backend)
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


__all__ = ["LIBRARY", "NAMESPACE", "compiled_dequantize", "compiled_quantize", "fake_quantize", "quantize_fields"]
