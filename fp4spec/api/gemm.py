"""The public GEMM: ``fp4spec.matmul(qa, qb, accumulator=..., c=...)``.

Runs one backend's ``matmul``: the vectorized emulator (:mod:`fp4spec.emulator.gemm`), tested
equal, bit for bit, to the scalar reference :func:`fp4spec.gemm_reference.matmul_reference`,
or the triton GEMM for device operands under the model Hopper's tensor cores compute.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel, accumulators, get_accumulator
from fp4spec.backends import BackendError
from fp4spec.backends.base import HostFallbackWarning
from fp4spec.backends.registry import as_availability
from fp4spec.quantized import QuantizedTensor

from .plan import AUTO, backend_kind, backend_object


def matmul(qa, qb, *, accumulator: "str | AccumulatorModel" = "exact", c=None, backend=AUTO):
    """C = A . B^T of two block-quantized operands, bit-exact under a named accumulator model.

    Args:
        qa: A (M x K), a :class:`~fp4spec.quantized.QuantizedTensor` blocked along K (the
            last axis), e.g. ``fp4spec.quantize(A, "nvfp4")``.
        qb: B (N x K), blocked along K the same way.
        accumulator: a model name from :data:`fp4spec.accumulator_models` -- ``"exact"``
            (default), ``"fp32"``, ``"sm100-mxf4nvf4"``, ``"sm100-mxf8f6f4"``,
            ``"sm90-bf16"``, ``"cdna3-fp8"`` -- or an
            :class:`~fp4spec.accumulator_models.AccumulatorModel`.
        c: optional float32 (M x N) initial accumulator (default +0). It enters as the
            accumulator's value before the first K step (the ``exact`` model adds it to the
            exact sum); with tensor scales it is multiplied by ``fp32(gA * gB)`` with the rest.

        backend: ``"auto"`` (default): numpy operands -> the emulator; torch operands on a
            CUDA device -> the triton GEMM where it implements the model and takes the
            operands' formats (4-bit elements E2M1, E1M2, INT4; on Hopper:
            ``sm90-bf16``, and ``exact``, ``fp32``, ``sm100-mxf4nvf4``, ``sm100-mxf8f6f4`` by a
            per-output certificate, the outputs it cannot prove by the emulator with a
            :class:`~fp4spec.backends.base.HostFallbackWarning`; the operands' packed codes
            are read as stored, the result stays on the device), else the emulator on CPU
            copies with a :class:`MatmulOnHostWarning` saying so (it runs at about 1-10
            GFLOP/s), the result moved back to the operands' device. Or a backend name /
            object whose ``capabilities().accumulators`` lists the model.

    Returns:
        float32 (M x N): a numpy array, or a torch tensor on the operands' device for torch
        operands; ``M = qa.shape[0]``, ``N = qb.shape[0]``: the operands' own rows (the rows
        ``quantize(..., pad=True)`` stores to fill 2-d tiles are not part of A or B; padding
        along K is +0 and runs through the K steps).

    Normative algorithm:

    1. Resolve the model (:func:`~fp4spec.accumulator_models.get_accumulator`).
    2. Check the operands (:func:`~fp4spec.matmul_operands.check_operands`): rank 2, blocked
       along K, equal K, schemes and block sizes the model takes, K a multiple of its step,
       UE4M3 scale bytes with bit 7 set as the model's ``ue4m3_sign_bit`` says (refused, or
       read as their low 7 bits); ``g = fp32(gA * gB)`` when a scheme carries a tensor scale.
    3. Accumulate every output element as the model's algorithm says
       (:mod:`fp4spec.gemm_reference` states each one in numbered steps), starting from c.
    4. With tensor scales: the result is ``fp32(acc * g)`` (``exact``: the exact sum times
       g, rounded once to nearest even).
    5. NaN results carry the model's NaN bit pattern (``model.nan_bits``).
    """
    model = get_accumulator(accumulator)
    b = _matmul_backend(qa, qb, model, backend)
    on_torch = isinstance(qa, QuantizedTensor) and qa.is_torch
    kind = backend_kind(b)
    acc = model.name if accumulators.get(model.name) == model else model  # names cross the Backend interface
    if kind == "numpy" and on_torch:
        if qa.device.type != "cpu":
            warnings.warn(MatmulOnHostWarning(
                f"matmul: accumulator {model.name!r} on {qa.device} operands runs on the {b.name} backend (the "
                f"CPU emulator, about 1-10 GFLOP/s): no device kernel implements it here"), stacklevel=2)
        out = b.matmul(qa.to_numpy(), _numpy(qb), accumulator=acc, c=_np_or_none(c))
        return _torch_like(out, qa.device)
    if kind == "torch" and not on_torch:
        out = b.matmul(qa, qb, accumulator=acc, c=c)
        return _np_values(out)
    return b.matmul(qa, qb, accumulator=acc, c=c)


class MatmulOnHostWarning(HostFallbackWarning):
    """A matmul of device operands runs on the CPU emulator (no device kernel implements the model)."""


def _matmul_backend(qa, qb, model: AccumulatorModel, backend):
    if not (isinstance(backend, str) and backend == AUTO):
        b = backend_object(backend)
        accs = b.capabilities().accumulators if b.capabilities().supports("matmul") else ()
        if model.name not in accs:
            raise BackendError(f"backend: {b.name!r} does not implement accumulator {model.name!r} "
                               f"(it claims {', '.join(map(repr, accs)) or 'no matmul'})")
        return b
    if isinstance(qa, QuantizedTensor) and qa.is_torch and qa.device.type == "cuda":
        if importlib.util.find_spec("triton") is not None:
            b = backend_object("triton")
            if as_availability(b.is_available()) and model.name in b.capabilities().accumulators \
                    and isinstance(qb, QuantizedTensor) and not b.why_matmul_unsupported(qa, qb):
                return b
    return backend_object("numpy")


def _numpy(q):
    return q.to_numpy() if isinstance(q, QuantizedTensor) else q


def _np_or_none(c):
    if c is None:
        return None
    from fp4spec.backends.torch_ops import to_numpy

    return to_numpy(c)


def _np_values(a):
    from fp4spec.backends.torch_ops import to_numpy

    return to_numpy(a)


def _torch_like(a, device):
    from fp4spec.backends.torch_ops import as_torch

    return as_torch(np.asarray(a), device)


__all__ = ["MatmulOnHostWarning", "matmul"]
