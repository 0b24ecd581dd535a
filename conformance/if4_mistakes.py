"""IF4 with one known mistake: the mistaken references :mod:`~fp4spec.conformance.diagnose` names.

:func:`quantize` runs :mod:`fp4spec.if4`'s steps (through the emulator's pieces) with any of
these changed:

* ``ties_to_int``   -- step 15 with ``<=``: a tie between the two errors takes INT4.
* ``int_divides``   -- step 10 as z = fp32(y / fp32(6/7)) instead of fp32(y * fp32(7/6)).
* ``element_order`` -- step 13 adds the 16 terms in element order (TransformerEngine's 4over6 loop).
* ``flag_inverted`` -- step 16 sets the scale byte's sign bit on E2M1 blocks instead of INT4 ones.
* ``fouroversix``   -- fouroversix 1.0.5's reference where it departs from the spec (not modelled
  by its profile): S_enc and the element multipliers are not clamped to FLT_MAX, an infinite
  or NaN multiplier makes the block's values NaN (E2M1 codes ``3 | sign << 3``, the sign of
  this host's NaN from ``inf * 0``; INT4 codes 0, or +-7 from +-Inf), the E4M3 cast saturates
  and keeps a NaN's sign (``0x7F | sign << 7``), the codes are packed from the INT4 candidate
  wherever the scale byte is >= 0x80, and the E2M1 candidate rounds |y| >= 7 to 8, packed as
  code ``0x8``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from fp4spec.emulator import if4 as E
from fp4spec.emulator.elements import encode
from fp4spec.if4 import E2M1, FP_MAX, INT4, INT_DOWN, INT_FLAG, INT_UP, SCALE_MAX, UE4M3

F32 = np.float32
MISTAKES = ("ties_to_int", "int_divides", "element_order", "flag_inverted", "fouroversix")


def _host_nan_sign() -> int:
    with np.errstate(invalid="ignore"):
        return int(np.signbit(F32(np.inf) * F32(0.0)))


def _tensor_scales(amax, fouroversix: bool):
    from fp4spec.if4 import tensor_scales

    if not fouroversix or amax == 0:
        return tensor_scales(amax)
    with np.errstate(all="ignore"):
        s_enc = (SCALE_MAX * FP_MAX) / F32(amax)
        return F32(amax), F32(s_enc), F32(F32(1.0) / s_enc)


def _scale_codes(vec_max, s_enc, fouroversix: bool):
    if not fouroversix or np.isinf(s_enc) and not np.any(vec_max):
        return E.block_scale_codes(vec_max, s_enc)
    with np.errstate(all="ignore"):
        s = ((vec_max / FP_MAX).astype(np.float32) * F32(s_enc)).astype(np.float32)
    sat = np.where(np.isnan(s), s, np.minimum(s, F32(448.0)))  # torch's CPU cast saturates; NaN -> 0x7F
    return encode(sat, UE4M3, "rne", overflow="saturate", nan="nan").astype(np.uint8)


def _multipliers(code, s_dec, fouroversix: bool):
    if not fouroversix:
        return E.multipliers(code, s_dec)
    s = UE4M3.values.astype(np.float32)[code.astype(np.int64)]
    with np.errstate(all="ignore"):
        r = (F32(1.0) / (F32(s_dec) * s)).astype(np.float32)
    return np.where(s == 0, F32(0.0), r).astype(np.float32)


def _errors(blocks, dq, rule, element_order: bool):
    if not element_order or rule == "abs_max":
        return E.block_errors(blocks, dq, rule)
    with np.errstate(all="ignore"):
        d = (dq - blocks).astype(np.float32)
        t = (d * d).astype(np.float32) if rule == "mse" else np.abs(d)
        acc = np.zeros(t.shape[:-1], np.float32)
        for j in range(t.shape[-1]):
            acc = (acc + t[..., j]).astype(np.float32)
    return acc


def quantize(x: np.ndarray, scheme, rounding: str = "rne", rbits=None, sr_bits: int = 8, **mistakes):
    """IF4 of a 2-D float32 ``x`` (blocked along its last axis; ``if4_2d``: 16 x 16 tiles, rows a
    multiple of 16) with the named ``mistakes`` (True/False)."""
    bad = sorted(set(mistakes) - set(MISTAKES))
    if bad:
        raise ValueError(f"mistakes: {bad[0]!r} is not one of {', '.join(MISTAKES)}")
    m = {k: bool(mistakes.get(k)) for k in MISTAKES}
    fos = m["fouroversix"]
    k = scheme.block_size
    blocks = np.asarray(x, np.float32).reshape(x.shape[0], -1, k)
    rb = None if rbits is None else np.broadcast_to(rbits, x.shape).reshape(blocks.shape)
    r_t = scheme.tile_rows
    if scheme.is_2d:
        blocks, rb = E.to_tiles(blocks, r_t), None if rb is None else E.to_tiles(rb, r_t)
    amax, s_enc, s_dec = _tensor_scales(np.max(np.abs(blocks)) if blocks.size else F32(0.0), fos)
    code = _scale_codes(np.max(np.abs(blocks), axis=-1), s_enc, fos)
    s = UE4M3.values.astype(np.float32)[code.astype(np.int64)]
    r = _multipliers(code, s_dec, fos)
    with np.errstate(all="ignore"):
        y = ((blocks * r[..., None]).astype(np.float32) + F32(0.0)).astype(np.float32)
        z = (y / INT_DOWN if m["int_divides"] else y * INT_UP).astype(np.float32)
    finite = np.isfinite(y)
    fp = encode(np.where(finite, y, 0), E2M1, rounding, rbits=rb, sr_bits=sr_bits, overflow="saturate")
    it = encode(np.where(np.isnan(z), 0, z), INT4, rounding, rbits=rb, sr_bits=sr_bits, overflow="saturate")
    fp_vals = E2M1.values.astype(np.float32)[fp]
    if fos:
        eight = np.abs(y) >= 7  # 2 * round(|y| / 2) = 8, packed as 0x8
        fp = np.where(eight, 0x8, fp).astype(np.uint8)
        fp_vals = np.where(eight, np.copysign(F32(8.0), y), fp_vals).astype(np.float32)
    err_fp = _errors(blocks, E._dequantized(fp_vals, s, amax, False), scheme.scale_rule, m["element_order"])
    err_int = _errors(blocks, E._dequantized(INT4.values.astype(np.float32)[it], s, amax, True), scheme.scale_rule,
                      m["element_order"])
    use_int = (err_int <= err_fp) if m["ties_to_int"] else (err_int < err_fp)
    use_int &= finite.all(axis=-1)  # NaN errors compare False
    flagged = ~use_int if m["flag_inverted"] else use_int
    scales = np.where(flagged, code | INT_FLAG, code).astype(np.uint8)
    if fos:
        scales = np.where(np.isnan(s), 0x7F | (_host_nan_sign() << 7), scales).astype(np.uint8)
        fp = np.where(finite, fp, 0x3 | (_host_nan_sign() << 3))
        use_int = scales >= INT_FLAG  # fouroversix packs by the scale byte
    codes = np.where(use_int[..., None], it, fp).astype(np.uint8)
    if scheme.is_2d:
        codes, scales = E.from_tiles(codes, r_t), np.repeat(scales, r_t, axis=-2)
    return SimpleNamespace(codes=codes.reshape(x.shape), scales=scales, global_scale=F32(s_dec), e1_8=None,
                           e1_16=None)


__all__ = ["MISTAKES", "quantize"]
