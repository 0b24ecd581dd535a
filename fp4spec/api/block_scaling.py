"""The public block-scaling API: ``fp4spec.quantize`` and ``fp4spec.dequantize``.

Both resolve the request (scheme, options, backend) and hand the arrays to one backend
method: ``Backend.quantize`` / ``Backend.dequantize``, the methods ``fp4spec conform``
certifies. For numpy input that is the emulator (:mod:`fp4spec.emulator`), tested equal, bit
for bit, to the scalar reference; torch tensors stay on their device (the triton or torch
backend); ``backend=`` names one explicitly (docs/backends.md).
"""

from __future__ import annotations

import sys

from fp4spec.block_schemes import Scheme
from fp4spec.quantized import QuantizedTensor
from fp4spec.rounding import DEFAULT_SR_BITS

from .eager import DEQUANTIZE_ORDER, dequantize_dtype, dequantize_eager, quantize_eager, round_bf16
from .plan import AUTO



def quantize(x, scheme: "str | Scheme", *, axis: int = -1, rounding: str = "rne", rbits=None, seed=None,
             sr_bits: int = DEFAULT_SR_BITS, pad: bool = False, backend="auto", rht=None,
             check_rbits: bool = True, **overrides) -> QuantizedTensor:
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
        seed: for ``"sr"`` instead of ``rbits``: an integer in [-2**63, 2**64); the bits are
            ``draw_rbits(x.shape, sr_bits, seed, method="philox")`` (Philox4x32-10, element i
            of x's row-major order). The triton backend draws them on the device inside the
            kernel (rowwise, unpadded x, sr_bits <= 24; otherwise, and on other backends, they
            are drawn by :func:`fp4spec.draw_rbits` and passed as rbits): the same codes
            everywhere, and a device run replays on the CPU. (``encode``'s ``seed`` draws
            numpy's generator instead.) For a torch x the seed may also be a one-element
            int64 tensor on x's device (the integer mod 2^64 in two's complement): the same
            bits, drawn on the device by torch ops (:mod:`fp4spec.backends.torch_philox`)
            without reading the seed back to the host; under ``torch.compile`` a new seed
            value then needs no recompilation.
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
        check_rbits: check that torch ``rbits`` lie in [0, 2**sr_bits) (default). It reads
            their min and max back to the host, one device synchronisation per call; False
            skips it (for bits drawn in range, as ``fp4spec.training`` draws them), and bits
            out of range then give unspecified codes. Numpy rbits are always checked.
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
       length. (A torch backend reads bfloat16 and float16 as they are: the conversion is exact.)
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
    scalar reference. The request is resolved once (:func:`~fp4spec.api.plan.plan_quantize`:
    steps 1-2's checks, the backend; cached per request) and x goes to the chosen backend's
    ``quantize``, the method ``fp4spec conform --backend`` certifies.
    """
    if not overrides and _compiling(x):
        from .torch_library import compiled_quantize

        q = compiled_quantize(x, scheme, axis=axis, rounding=rounding, rbits=rbits, seed=seed, sr_bits=sr_bits,
                              pad=pad, rht=rht, backend=backend)
        if q is not None:
            return q
    return quantize_eager(x, scheme, overrides, axis=axis, rounding=rounding, rbits=rbits, seed=seed, sr_bits=sr_bits,
                          pad=pad, rht=rht, backend=backend, check_rbits=check_rbits)


def dequantize(q: QuantizedTensor, *, dtype=None, backend=AUTO):
    """float32 values of a :class:`~fp4spec.quantized.QuantizedTensor`, in the quantized x's shape.

    MX: ``fp32(P * 2^(s - 127))`` (NaN where the scale code is 0xFF). Two-level, by the
    profile's ``nv_dequant_order``: TE ``fp32(fp32(P * s) * S_dec)``, torchao
    ``fp32(P * fp32(pts * s))`` (s = the decoded UE4M3 scale, NaN for 0x7F). HiF4:
    ``hif4_dequantize``. Padding is cropped.

    With ``q.rht`` (quantized with ``rht=``) the values are in the rotated basis:
    dequantize does NOT undo the RHT; ``q.rht.inverse(values, axis=q.axis)`` does, up to
    rounding, when q was not padded (the RHT ran over the padding too, which is cropped here).

    A numpy QuantizedTensor gives a numpy array (the emulator). One of torch tensors gives a
    float32 torch tensor on their device, without leaving it: ``backend="auto"`` takes the
    triton kernels on a CUDA device (they read the packed codes as stored) where they
    dequantize the scheme, else the torch backend (MX, two-level, HiF4: the same float32
    operations), else the emulator on a CPU copy. ``backend=`` names one explicitly.

    ``dtype``: None or ``"float32"`` (the values above), or ``"bfloat16"`` (also
    ``ml_dtypes.bfloat16`` or ``torch.bfloat16``): each float32 value rounded to nearest even
    on its bit pattern, overflow to +-Inf, every NaN as 0x7FC0 (:func:`fp4spec.rht.bf16_rne`)
    -- an ``ml_dtypes.bfloat16`` array or a ``torch.bfloat16`` tensor. The triton kernels
    write bfloat16 directly (half the bytes of float32); other backends round their float32
    values.
    """
    if not isinstance(q, QuantizedTensor):
        raise TypeError(f"q: expected a QuantizedTensor, got {type(q).__name__}")
    dt = dequantize_dtype(dtype)
    if isinstance(backend, str) and q.scheme.structure != "hif4" and _compiling(q.data):
        from .torch_library import compiled_dequantize

        out = compiled_dequantize(q, backend)
        return out if dt == "float32" else round_bf16(out)
    return dequantize_eager(q, backend, dt)


def _compiling(x) -> bool:
    """True while torch.compile traces a call on torch tensors: the custom operators of
    :mod:`.torch_library` then stand for the call (one graph, no break)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and torch.compiler.is_compiling()


__all__ = ["DEQUANTIZE_ORDER", "dequantize", "quantize"]
