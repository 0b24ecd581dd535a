"""fouroversix 1.0.5's reference quantizers as they compute, departures included (NVFP4, NVINT4, MXFP4).

Profile ``fouroversix`` (:mod:`fp4spec.profiles.fouroversix`) states the policies in which
fouroversix differs from TransformerEngine; this module adds what the profile does not model
-- fouroversix's departures -- so that :mod:`~fp4spec.conformance.diagnose` can name them and
the differential tests can show that every difference from the spec is one of them:

1. No FLT_MAX clamp: S_enc = fp32(Emax * max / amax) and r = fp32(1 / fp32(S_dec * s)) may be
   +Inf; NaN and +-Inf then flow through (``0 * Inf`` is NaN).
2. The E4M3 cast of the block scale (``torch.Tensor.to(float8_e4m3fn)`` on the CPU) saturates
   to 448 (+Inf included); a NaN scale is ``0x7F | sign << 7``. Every NaN of the chain has the
   sign of this host's default NaN here, as ``0 * Inf`` gives it; which sign torch's CPU kernels
   give NaNs that come from NaN input is theirs to choose (:func:`same_but_nan_signs`).
3. A zero block scale zeroes the block (``torch.where(scale != 0, ..., 0)``; a NaN scale is not 0).
4. E2M1 elements round by binade without a clamp: |y| >= 7 rounds to 8, packed as ``0x8``;
   a NaN (and +-Inf, through ``Inf * 0`` in its masks) gives the bits of a BF16 NaN:
   ``3 | sign << 3``, sign as in 2.
   INT4 elements clamp to +-7 (+-Inf too) and a NaN becomes 0.
5. MXFP4 (``static_6``): the scale byte is the exponent field of fp32(amax / 6), plus one if
   its mantissa is not 0, in uint8 (255 + 1 wraps to 0): amax <= 6 * 2^-127 gives byte 1, a
   NaN block byte 0, an Inf block byte 255; elements are fp32(x / 2^(b - 127)), where byte 0
   divides by 0.0 (1.0.5 has no guard), so an all-zero block is NaN.

Only round-to-nearest: fouroversix's stochastic rounding draws its own random numbers.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from fp4spec.emulator.elements import encode
from fp4spec.number_formats import get_format

F32 = np.float32
_E2M1 = get_format("e2m1").values.astype(np.float32)
_INT4 = get_format("int4_sym").values.astype(np.float32)
_E4M3 = get_format("e4m3").values.astype(np.float32)


def host_nan_sign() -> int:
    """The sign bit of the NaN this host makes for ``inf * 0``."""
    with np.errstate(invalid="ignore"):
        return int(np.signbit(F32(np.inf) * F32(0.0)))


def _e4m3_cast(s: np.ndarray) -> np.ndarray:
    """fouroversix's block-scale byte (2. above): RNE, saturating; NaN as 2. says."""
    s = np.asarray(s, np.float32)
    mag = np.where(np.isnan(s), F32(0.0), np.minimum(np.abs(s), F32(448.0)))
    codes = encode(mag.astype(np.float32), "ue4m3", "rne", overflow="saturate").astype(np.int64)
    return np.where(np.isnan(s), 0x7F | (host_nan_sign() << 7), codes).astype(np.uint8)


def same_but_nan_signs(model, got, scheme) -> SimpleNamespace:
    """``model`` with the sign bits of its NaN scale bytes (E4M3 ``0x7F``/``0xFF``), of NaN E2M1 codes
    (``0x3``/``0xB`` where the block scale is NaN) and of a NaN tensor scale taken from ``got`` wherever
    both are NaN there."""
    ms, gs = np.asarray(model.scales), np.asarray(got.scales)
    if scheme.structure == "mx" or ms.shape != gs.shape:
        return model
    nan_m, nan_g = (ms & 0x7F) == 0x7F, (gs & 0x7F) == 0x7F
    both = nan_m & nan_g
    scales = np.where(both, gs, ms).astype(np.uint8)
    mc, gc = np.asarray(model.codes), np.asarray(got.codes)
    k = scheme.block_size
    in_nan = np.repeat(both, k, axis=-1) if mc.shape == gc.shape and mc.shape[-1] == ms.shape[-1] * k else None
    codes = mc
    if in_nan is not None:
        swap = in_nan & ((mc & 0x7) == 0x3) & ((gc & 0x7) == 0x3)
        codes = np.where(swap, gc, mc).astype(np.uint8)
    g = model.global_scale
    got_g = getattr(got, "global_scale", None)
    if g is not None and got_g is not None and np.isnan(g) and np.isnan(np.asarray(got_g, np.float32)):
        g = np.asarray(got_g, np.float32).reshape(())[()]
    return SimpleNamespace(codes=codes, scales=scales, global_scale=g, e1_8=None, e1_16=None)


def _e2m1(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fouroversix's E2M1 codes and values of scaled values y (4. above)."""
    with np.errstate(all="ignore"):
        a = np.abs(y)
        codes = encode(np.where(np.isfinite(y), y, 0), "e2m1", "rne", overflow="saturate").astype(np.int64)
        vals = _E2M1[codes]
        eight = np.isfinite(y) & (a >= 7)
        codes = np.where(eight, 0x8, codes)
        vals = np.where(eight, np.copysign(F32(8.0), y), vals)
        codes = np.where(np.isfinite(y), codes, 0x3 | (host_nan_sign() << 3))
        vals = np.where(np.isfinite(y), vals, F32(np.nan))
    return codes.astype(np.uint8), vals.astype(np.float32)


def _int4(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        z = np.where(np.isnan(y), F32(0.0), np.clip(y, -7, 7)).astype(np.float32)
    codes = encode(z, "int4_sym", "rne", overflow="saturate")
    vals = np.where(np.isnan(y), F32(np.nan), _INT4[codes])
    return codes.astype(np.uint8), vals.astype(np.float32)


def _candidate(blocks, s_enc, s_dec, max_elem, factor, element):
    """One candidate: (scale bytes, codes, element values) of blocks ``(rows, nb, k)``."""
    with np.errstate(all="ignore"):
        vec_max = np.max(np.abs(blocks), axis=-1)
        s = ((vec_max / F32(max_elem)).astype(np.float32) * F32(s_enc)).astype(np.float32)
        if factor != 1.0:
            s = (s * F32(factor)).astype(np.float32)
        byte = _e4m3_cast(s)
        sv = _E4M3[byte]
        r = (F32(1.0) / (F32(s_dec) * sv)).astype(np.float32)
        y = np.where((sv != 0)[..., None], (blocks * r[..., None]).astype(np.float32), F32(0.0)).astype(np.float32)
        y = (y + F32(0.0)).astype(np.float32)
    codes, vals = (_int4 if element == "int4_sym" else _e2m1)(y)
    return byte, codes, vals, sv


def quantize_two_level(x: np.ndarray, scheme) -> SimpleNamespace:
    """fouroversix's ``quantize_to_nvfp4`` / ``quantize_to_nvint4`` (and 4over6 selection) of a 2-D float32 x."""
    from fp4spec.emulator.if4 import block_errors

    k = scheme.block_size
    blocks = np.asarray(x, np.float32).reshape(x.shape[0], -1, k)
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(blocks)) if blocks.size else F32(0.0)
        s_enc = (F32(scheme.scale_bound) * F32(scheme.max_elem) / F32(amax)).astype(np.float32) if amax != 0 else None
        s_dec = F32(F32(1.0) / s_enc) if s_enc is not None else F32(0.0)
    if s_enc is None:  # an all-zero tensor: scales 0, elements 0
        z = np.zeros(blocks.shape[:-1], np.uint8)
        return SimpleNamespace(codes=np.zeros(x.shape, np.uint8), scales=z, global_scale=F32(0.0), e1_8=None,
                               e1_16=None)
    factors = (1.0, 1.5) if scheme.scale_rule == "4over6" else (1.0,)
    cands = [_candidate(blocks, s_enc, s_dec, scheme.max_elem, f, scheme.element.name) for f in factors]
    byte, codes, _, _ = cands[0]
    if len(cands) == 2:
        errs = []
        for b, c, vals, sv in cands:
            with np.errstate(all="ignore"):
                dq = (((vals * sv[..., None]).astype(np.float32) * F32(amax)).astype(np.float32)
                      / (F32(scheme.max_elem) * F32(scheme.scale_bound))).astype(np.float32)
            errs.append(block_errors(blocks, dq, scheme.error_mode or "mae"))
        pick4 = errs[1] < errs[0]
        byte = np.where(pick4, cands[1][0], byte)
        codes = np.where(pick4[..., None], cands[1][1], codes)
    return SimpleNamespace(codes=codes.reshape(x.shape).astype(np.uint8), scales=byte.astype(np.uint8),
                           global_scale=F32(s_dec), e1_8=None, e1_16=None)


def quantize_mx(x: np.ndarray, scheme) -> SimpleNamespace:
    """fouroversix's ``quantize_to_mxfp4`` (``static_6``) of a 2-D float32 x (5. above)."""
    k = scheme.block_size
    blocks = np.asarray(x, np.float32).reshape(x.shape[0], -1, k)
    with np.errstate(all="ignore"):
        d = (np.max(np.abs(blocks), axis=-1) / F32(6.0)).astype(np.float32)
        bits = d.view(np.uint32)
        byte = (((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0)).astype(np.uint8)  # uint8: 255 + 1 -> 0
        scale = (byte.astype(np.uint32) << 23).view(np.float32)
        y = (blocks / scale[..., None]).astype(np.float32)
    codes, _ = _e2m1((y + F32(0.0)).astype(np.float32))
    return SimpleNamespace(codes=codes.reshape(x.shape), scales=byte, global_scale=None, e1_8=None, e1_16=None)


def quantize(x: np.ndarray, scheme) -> SimpleNamespace:
    """fouroversix's result for a scheme under profile ``fouroversix`` (two-level or MX, round to nearest)."""
    if scheme.structure == "mx":
        return quantize_mx(x, scheme)
    return quantize_two_level(x, scheme)


__all__ = ["host_nan_sign", "quantize", "quantize_mx", "quantize_two_level", "same_but_nan_signs"]
