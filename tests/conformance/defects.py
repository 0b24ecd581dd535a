"""Planted-defect backends: the numpy backend with exactly one thing broken, as a kernel might be.

The conformance suite must reject every one of these in a default run. The first eight are
the defects the issue lists; the rest are further bugs seen in the wild (divergences.md part
2), to show that comparing every field catches defects nobody listed.

Usable from the command line: ``PYTHONPATH=. fp4spec conform --backend tests.conformance.defects:TiesAway``.
"""

from __future__ import annotations

import numpy as np

from fp4spec.backends import NumpyBackend as _NumpyBackend, resolve_scheme
from fp4spec.block_schemes import get_scheme
from fp4spec.conformance.chain import block_scale_value
from fp4spec.emulator import scaling
from fp4spec.emulator.elements import encode
from fp4spec.quantized import QuantizedTensor
from fp4spec.scaling import element_nan_policy, prepare_input, two_level_tensor_scale

F32 = np.float32


class NumpyBackend(_NumpyBackend):
    """The numpy backend without its RHT claim: each defect below breaks one thing, and its
    ``quantize`` does not take ``rht=`` (the RHT defects further down keep the claim)."""

    def capabilities(self):
        import dataclasses

        return dataclasses.replace(super().capabilities(), rht=())


def _replace(q: QuantizedTensor, **fields) -> QuantizedTensor:
    return q.replace(**fields)


def _two_level_parts(x, sch, rounding, rbits, sr_bits):
    """The pieces of a two-level quantization: blocks, tensor scale, reference scale codes."""
    prep = prepare_input(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
    xp = prep.x
    k = sch.block_size
    xb = xp.reshape(xp.shape[:-1] + (xp.shape[-1] // k, k))
    rb = None if prep.rbits is None else prep.rbits.reshape(xb.shape)
    with np.errstate(invalid="ignore"):
        gmax = np.max(np.abs(xb)) if xb.size else F32(0.0)
    ts = two_level_tensor_scale(F32(gmax), sch)
    scale_codes = scaling.block_scale_codes(scaling.block_amaxes(xb, sch), ts, sch)
    return prep, xb, rb, ts, scale_codes


class _TeChainDefect(NumpyBackend):
    """The numpy backend, except for two-level schemes with TE's chain and the amax rule, which
    :meth:`broken` quantizes (from the blocks, their random bits and TE's tensor scale)."""

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        if sch.structure != "two_level" or sch.scale_rule != "amax" or sch.policies["nv_scale_chain"] != "te":
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        prep, xb, rb, ts, scale_codes = _two_level_parts(x, sch, rounding, rbits, sr_bits)
        codes, scales, g = self.broken(sch, xb, rb, ts, scale_codes, rounding, sr_bits)
        return QuantizedTensor.from_moved(codes.reshape(prep.x.shape), scales, g, sch, prep.axis, prep.shape)

    def broken(self, sch, xb, rb, ts, scale_codes, rounding, sr_bits):
        raise NotImplementedError


# -- the eight listed defects ---------------------------------------------------------------------------

class TiesAway(NumpyBackend):
    """Block quantization rounds element ties away from zero (microxcaling 'nearest', aiter#3992)."""

    name = "ties-away"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        if rounding == "rne" and sch.structure != "hif4":  # HiF4 rounds ties away by definition
            rounding = "rna"
        return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)


class MxCeilRule(NumpyBackend):
    """MX scales with ceil(log2 amax) where the scheme says floor (DeepWok/mase#321)."""

    name = "mx-ceil"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        if sch.structure != "mx" or sch.scale_rule != "floor":
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        q = super().quantize(x, get_scheme(sch, scale_rule="ceil"), rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        return _replace(q, scheme=sch)


class SrIgnoresBits(NumpyBackend):
    """Stochastic rounding that ignores its random bits (always rounds toward zero)."""

    name = "sr-ignores-rbits"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        if rounding == "sr":
            return super().quantize(x, scheme, rounding="rtz", sr_bits=sr_bits)
        return super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)


class SwappedNibbles(NumpyBackend):
    """Packs the first element in the high nibble (torchao before pytorch/ao#3123)."""

    name = "swapped-nibbles"

    def pack(self, codes):
        from fp4spec.packing import pack

        return pack(codes, order="hi_first")


class DivideNotReciprocal(_TeChainDefect):
    """NVFP4 elements as x / fp32(s * S_dec) where the spec multiplies by fp32(1 / fp32(s * S_dec))
    (arch-com#905: identical on random inputs, different on ties)."""

    name = "divide-not-reciprocal"

    def broken(self, sch, xb, rb, ts, scale_codes, rounding, sr_bits):
        s = sch.scale.values.astype(np.float32)[scale_codes]
        with np.errstate(all="ignore"):
            d = (s * ts.decode).astype(np.float32)
            y = (xb / d[..., None]).astype(np.float32)
        top = F32(sch.max_elem)
        y = np.clip(y, -top, top)
        if sch.policies["nv_negative_zero"] == "positive":
            y = (y + F32(0.0)).astype(np.float32)
        codes = encode(y, sch.element, rounding, rbits=rb, sr_bits=sr_bits, overflow="saturate",
                       nan=element_nan_policy(sch.element))
        return codes, scale_codes, ts.decode


class WrongGlobalScale(NumpyBackend):
    """Stores the NVFP4 decode scale as fp32(amax / 2688) instead of fp32(1 / S_enc)
    (algebraically equal; the bits differ -- modular#6600, vllm#35733)."""

    name = "wrong-global-scale"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        q = super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        if q.global_scale is None:
            return q
        with np.errstate(all="ignore"):
            amax = np.max(np.abs(np.asarray(x, np.float32)))
            g = F32(amax / (F32(q.scheme.scale_bound) * F32(q.scheme.max_elem)))
        if not (np.isfinite(g) and g > 0):
            return q
        return _replace(q, global_scale=g)


class E8M0ZeroBlockNaN(NumpyBackend):
    """All-zero MX blocks get the E8M0 scale 0xFF (NaN) -- a direct cast of 0 (ml_dtypes)."""

    name = "e8m0-zero-block-nan"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        q = super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        if q.scheme.structure != "mx":
            return q
        k = q.scheme.block_size
        xa = np.asarray(x, np.float32)
        zero = (xa.reshape(xa.shape[:-1] + (-1, k)) == 0).all(axis=-1)
        return _replace(q, scales=np.where(zero, np.uint8(0xFF), q.scales))


class FlushNegativeZero(NumpyBackend):
    """Negative zero results come out as +0 (TE's reference cast, breccia), where the profile preserves -0."""

    name = "flush-negative-zero"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        q = super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        el = q.scheme.element
        if not el.has_negative_zero:
            return q
        nz = next(c for c in range(1 << el.bits) if el._decode_exact(c)[0] == "negzero")
        return _replace(q, codes=np.where(q.codes == nz, np.uint8(0), q.codes))


# -- further defects nobody listed ---------------------------------------------------------------------

class FloatLog2Scale(NumpyBackend):
    """MX floor scale from float32 log2 (gfloat#49, FlyDSL#590): one too high just below a power of two."""

    name = "float-log2-scale"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        q = super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        if sch.structure != "mx" or sch.scale_rule != "floor":
            return q
        k = sch.block_size
        xa = np.asarray(x, np.float32)
        amax = np.max(np.abs(xa.reshape(xa.shape[:-1] + (-1, k))), axis=-1)
        with np.errstate(all="ignore"):
            e = np.floor(np.log2(amax.astype(np.float32))).astype(np.float64) - sch.element.emax
        ok = np.isfinite(e) & (amax >= 2.0 ** -126)
        codes = np.where(ok, np.clip(e, -127, 127) + 127, q.scales.astype(np.float64)).astype(np.uint8)
        if np.array_equal(codes, q.scales):
            return q
        xb = xa.reshape(xa.shape[:-1] + (-1, k))
        mult = np.ldexp(np.ones(codes.shape, np.float32), 127 - codes.astype(np.int32))
        mult[codes == 0xFF] = 0
        with np.errstate(all="ignore"):
            y = (xb * mult[..., None]).astype(np.float32)
        el_codes = encode(y, sch.element, rounding, rbits=None if rbits is None else np.asarray(rbits).reshape(y.shape),
                          sr_bits=sr_bits, overflow="saturate", nan=element_nan_policy(sch.element))
        return _replace(q, codes=el_codes.reshape(xa.shape), scales=codes)


class StalePadding(NumpyBackend):
    """The swizzled scale buffer is not zeroed: padded entries hold 0xFF (vllm#45741)."""

    name = "stale-padding"

    def to_blocked(self, scales):
        from fp4spec.layouts import to_blocked

        s = np.asarray(scales, np.uint8)
        out = to_blocked(s)
        marker = to_blocked(np.ones_like(s))
        return np.where(marker == 1, out, np.uint8(0xFF))


class ByteZeroDequantizesToZero(NumpyBackend):
    """Dequantize decodes the E8M0 byte 0x00 as 0 instead of 2^-127 (triton#11624)."""

    name = "e8m0-byte0-zero"

    def dequantize(self, q):
        out = super().dequantize(q)
        if q.scheme.structure != "mx":
            return out
        k = q.scheme.block_size
        zero_scale = np.repeat(np.asarray(q.scales) == 0, k, axis=-1)[..., :out.shape[-1]]
        return np.where(zero_scale, np.float32(0.0), out).astype(np.float32)


class SrStrictCompare(NumpyBackend):
    """SR rounds away iff frac * 2^N + r > 2^N (strict) where the spec says >=: differs only
    when the sum is exactly 2^N."""

    name = "sr-strict-compare"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        if rounding != "sr":
            return super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        # frac*2^N + r > 2^N  <=>  frac*2^N + (r - 1) >= 2^N for integers r >= 1; r = 0 never rounds up.
        r = np.asarray(rbits).astype(np.int64)
        q_shift = super().quantize(x, scheme, rounding="sr", rbits=np.maximum(r - 1, 0).astype(np.uint32),
                                   sr_bits=sr_bits)
        q_rtz = super().quantize(x, scheme, rounding="rtz", sr_bits=sr_bits)
        return _replace(q_shift, codes=np.where(r == 0, q_rtz.codes, q_shift.codes))


class Bf16Input(NumpyBackend):
    """Rounds the input to bfloat16 before quantizing (a kernel that loads bf16 tiles)."""

    name = "bf16-input"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        import ml_dtypes

        xb = np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
        return super().quantize(xb, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)


class ScaleCastTruncates(NumpyBackend):
    """The NVFP4 block scale is cast to UE4M3 toward zero instead of to nearest even."""

    name = "scale-cast-truncates"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        if sch.structure != "two_level" or sch.scale_rule != "amax":
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        prep, xb, rb, ts, _ = _two_level_parts(x, sch, rounding, rbits, sr_bits)
        s = block_scale_value(scaling.block_amaxes(xb, sch), sch, ts)
        scale_codes = encode(s, sch.scale, "rtz", overflow="saturate")
        mult = scaling.element_multipliers(scale_codes, ts, sch)
        codes = scaling.element_codes(xb, mult, sch, rounding, rb, sr_bits)
        return QuantizedTensor.from_moved(codes.reshape(prep.x.shape), scale_codes, ts.decode, sch, prep.axis,
                                          prep.shape)


# -- one planted defect per mistake fp4spec.conformance.diagnose names ----------------------------------

class _MxRuleSwap(NumpyBackend):
    """Claims MX scale rule ``claimed``, computes ``computed`` (a rule mix-up)."""

    claimed, computed = "floor", "ceil"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        if sch.structure != "mx" or sch.scale_rule != self.claimed:
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        q = super().quantize(x, get_scheme(sch, scale_rule=self.computed), rounding=rounding, rbits=rbits,
                             sr_bits=sr_bits)
        return _replace(q, scheme=sch)


class MxRceilForFloor(_MxRuleSwap):
    """The cuBLAS rceil rule where floor is claimed."""

    name, computed = "mx-rceil-for-floor", "rceil"


class MxEvenForFloor(_MxRuleSwap):
    """torchao's EVEN rule (amax rounded to the element's mantissa first) where floor is claimed."""

    name, computed = "mx-even-for-floor", "even"


class MxFloorForRceil(_MxRuleSwap):
    """The OCP floor rule where rceil (cuBLAS) is claimed."""

    name, claimed, computed = "mx-floor-for-rceil", "rceil", "floor"


class TorchaoChainForTe(_TeChainDefect):
    """Claims TE's NVFP4 chain, computes torchao's: pts = amax / 2688, s = (block amax / 6) / pts,
    elements times fp32(fp32(1 / pts) / s) -- written out here as a kernel would."""

    name = "torchao-chain-for-te"

    def broken(self, sch, xb, rb, ts, scale_codes, rounding, sr_bits):
        with np.errstate(all="ignore"):
            amax = np.max(np.abs(xb)) if xb.size else F32(0)
            pts = F32(F32(amax) / (F32(sch.scale_bound) * F32(sch.max_elem)))
            s = np.minimum((scaling.block_amaxes(xb, sch) / F32(sch.max_elem)) / pts, F32(sch.scale.max))
        codes_s = encode(s.astype(np.float32), sch.scale, "rne", overflow="saturate")
        with np.errstate(all="ignore"):
            mult = (F32(1.0) / pts) / sch.scale.values.astype(np.float32)[codes_s]
        return scaling.element_codes(xb, mult.astype(np.float32), sch, rounding, rb, sr_bits), codes_s, pts


class E4M3ScaleFloor(_TeChainDefect):
    """TE's NVFP4 chain with the block scale clamped to the smallest E4M3 normal (2^-6) before its
    cast, as torchao does; TE allows zero and subnormal block scales."""

    name = "e4m3-scale-floor"

    def broken(self, sch, xb, rb, ts, scale_codes, rounding, sr_bits):
        s = block_scale_value(scaling.block_amaxes(xb, sch), sch, ts)
        s = np.minimum(np.maximum(s, F32(2.0 ** -6)), F32(sch.scale.max))  # NaN stays NaN
        scale_codes = encode(s.astype(np.float32), sch.scale, "rne", overflow="saturate")
        mult = scaling.element_multipliers(scale_codes, ts, sch)
        return scaling.element_codes(xb, mult, sch, rounding, rb, sr_bits), scale_codes, ts.decode


class NanOnlyBlocks(NumpyBackend):
    """Claims the OCP profile (an Inf block gets the NaN scale 0xFF) but sends a block whose amax is
    Inf through the scale rule with amax read as 2^128, as torchao does (its NaN-block policy)."""

    name = "nan-only-blocks"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        sch = resolve_scheme(scheme)
        q = super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        if sch.structure != "mx" or sch.policies["mx_nonfinite_block"] != "nan_scale":
            return q
        k = sch.block_size
        xa = np.asarray(x, np.float32)
        xb = xa.reshape(xa.shape[:-1] + (-1, k))
        inf_only = np.isinf(xb).any(axis=-1) & ~np.isnan(xb).any(axis=-1)
        if not inf_only.any():
            return q
        e = 127 if sch.scale_rule == "rceil" else min(127, 128 - sch.element.emax)  # rule of 2^128
        with np.errstate(all="ignore"):
            y = (xb * F32(2.0 ** -e)).astype(np.float32)
        el = encode(y, sch.element, rounding, rbits=None if rbits is None else np.asarray(rbits).reshape(y.shape),
                    sr_bits=sr_bits, overflow="saturate", nan=element_nan_policy(sch.element))
        codes = np.where(inf_only[..., None], el, np.asarray(q.codes).reshape(xb.shape)).reshape(xa.shape)
        scales = np.where(inf_only, np.uint8(e + 127), q.scales)
        return _replace(q, codes=codes.astype(np.uint8), scales=scales.astype(np.uint8))


class PlainScaleLayout(NumpyBackend):
    """to_blocked returns the scales row-major, padded to whole 128 x 4 tiles, without the swizzle."""

    name = "plain-scale-layout"

    def to_blocked(self, scales):
        from fp4spec.layouts import blocked_shape

        s = np.asarray(scales, np.uint8)
        rp, cp = blocked_shape(*s.shape)
        out = np.zeros((rp, cp), np.uint8)
        out[:s.shape[0], :s.shape[1]] = s
        return out.reshape(-1)


# -- IF4: one rule of fp4spec.if4 broken (the mistaken references of conformance.if4_mistakes) ------------

class _If4Defect(NumpyBackend):
    """The numpy backend, except for IF4, which it quantizes with one :data:`mistake`."""

    mistake = ""

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        from fp4spec.conformance import if4_mistakes

        sch = resolve_scheme(scheme)
        if sch.structure != "if4":
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        prep = prepare_input(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        x2 = prep.x.reshape(-1, prep.x.shape[-1])
        rb = None if prep.rbits is None else prep.rbits.reshape(x2.shape)
        q = if4_mistakes.quantize(x2, sch, rounding, rb, sr_bits, **{self.mistake: True})
        return QuantizedTensor.from_moved(q.codes.reshape(prep.x.shape), q.scales.reshape(prep.x.shape[:-1] + (-1,)),
                                          q.global_scale, sch, prep.axis, prep.shape)


class If4TiesTakeInt(_If4Defect):
    """IF4 picks INT4 when its block error equals E2M1's (``<=`` for ``<``)."""

    name = "if4-ties-take-int"
    mistake = "ties_to_int"


class If4IntDivides(_If4Defect):
    """IF4's INT4 candidate divides by fp32(6/7) instead of multiplying by fp32(7/6)."""

    name = "if4-int-divides"
    mistake = "int_divides"


class If4ErrorsInElementOrder(_If4Defect):
    """IF4's block errors summed in element order (TE's 4over6 loop), not in torch's CPU order."""

    name = "if4-errors-in-element-order"
    mistake = "element_order"


class If4FlagInverted(_If4Defect):
    """IF4's flag on the wrong blocks: the scale's sign bit set for E2M1, clear for INT4."""

    name = "if4-flag-inverted"
    mistake = "flag_inverted"


class FourOverSixDecodeScaleError(NumpyBackend):
    """TE's 1 x 16 4over6 with the candidates' errors through the global decode scale (FlashInfer before #3448)."""

    name = "4over6-decode-scale-error"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        from fp4spec.conformance.selection import four_over_six_decode_scale

        sch = resolve_scheme(scheme)
        if sch.scale_rule != "4over6" or sch.is_2d:
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        prep = prepare_input(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        x2 = prep.x.reshape(-1, prep.x.shape[-1])
        rb = None if prep.rbits is None else prep.rbits.reshape(x2.shape)
        q = four_over_six_decode_scale(x2, sch, rounding, rb, sr_bits)
        return QuantizedTensor.from_moved(q.codes.reshape(prep.x.shape), q.scales.reshape(prep.x.shape[:-1] + (-1,)),
                                          q.global_scale, sch, prep.axis, prep.shape)


class FourOverSixTorchOrder(_TeChainDefect.__base__):
    """TE's 1 x 16 4over6 with the errors summed in torch's CPU order (fouroversix's), not element order."""

    name = "4over6-torch-order"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        from fp4spec.conformance.diagnose import with_policy

        sch = resolve_scheme(scheme)
        if sch.scale_rule == "4over6" and sch.policies["nv_4over6_error_sum"] == "sequential":
            q = super().quantize(x, with_policy(sch, "nv_4over6_error_sum", "torch_cpu"), rounding=rounding,
                                 rbits=rbits, sr_bits=sr_bits)
            return _replace(q, scheme=sch)
        return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits)


#: IF4 defects, one per rule of the scheme (tie, INT4 scaling, error order, flag).
IF4_DEFECTS = (If4TiesTakeInt, If4IntDivides, If4ErrorsInElementOrder, If4FlagInverted)


# -- SR with the backend's own random numbers (sr_source="own"): checked by sr_statistics only ------------

class OwnSr(NumpyBackend):
    """Correct SR that ignores the rbits it is given and draws its own (as hardware SR does): it must conform."""

    name = "own-sr"

    def __init__(self):
        self._rng = np.random.default_rng()

    def capabilities(self):
        import dataclasses

        return dataclasses.replace(super().capabilities(), sr_source="own")

    def own_bits(self, shape, sr_bits):
        return self._rng.integers(0, 1 << sr_bits, shape)

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        if rounding != "sr":
            return super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        return super().quantize(x, scheme, rounding="sr", rbits=self.own_bits(np.shape(x), sr_bits), sr_bits=sr_bits)


class OwnSrAllZero(OwnSr):
    """SR that returns all-zero codes (TransformerEngine#3281: the cvt.rs branch compiled out on sm_120)."""

    name = "own-sr-all-zero"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        q = super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        return _replace(q, codes=np.zeros_like(np.asarray(q.codes))) if rounding == "sr" else q


class OwnSrBiased(OwnSr):
    """SR whose random number is the smaller of two draws: P(away from zero) is about frac^2, not frac."""

    name = "own-sr-biased"

    def own_bits(self, shape, sr_bits):
        return np.minimum(super().own_bits(shape, sr_bits), super().own_bits(shape, sr_bits))


class OwnSrFrozen(OwnSr):
    """SR from a generator re-seeded identically on every call: the same 'random' codes every time."""

    name = "own-sr-frozen"

    def own_bits(self, shape, sr_bits):
        return np.random.default_rng(1234).integers(0, 1 << sr_bits, shape)


class OwnSrCoinFlip(OwnSr):
    """SR that rounds away from zero with probability 1/2, whatever the distance to the neighbours."""

    name = "own-sr-coin-flip"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        if rounding != "sr":
            return super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
        x = np.asarray(x, np.float32)
        top = (1 << sr_bits) - 1
        coin = self._rng.integers(0, 2, x.shape) * top  # 0: toward zero, max: away (for frac > 0)
        return _NumpyBackend.quantize(self, x, scheme, rounding="sr", rbits=coin, sr_bits=sr_bits)


#: Backends with their own SR random numbers: one correct, the others each broken once.
OWN_SR_DEFECTS = (OwnSrAllZero, OwnSrBiased, OwnSrFrozen, OwnSrCoinFlip)


#: Defects of the mistakes diagnose names, with the schemes, roundings and words of the match.
DIAGNOSED = (
    (TiesAway, ["mxfp4", "nvfp4"], ["rne"], "ties away from zero (ties to even expected)"),
    (MxCeilRule, ["mxfp4"], ["rne"], "ceil scale rule (floor expected)"),
    (MxRceilForFloor, ["mxfp4"], ["rne"], "rceil scale rule (floor expected)"),
    (MxEvenForFloor, ["mxfp4"], ["rne"], "even scale rule (floor expected)"),
    (MxFloorForRceil, ["mxfp4:scale_rule=rceil"], ["rne"], "floor scale rule (rceil expected)"),
    (FloatLog2Scale, ["mxfp4"], ["rne"], "scale exponent from a float32 log2"),
    (DivideNotReciprocal, ["nvfp4"], ["rne"], "division by the block scale"),
    (TorchaoChainForTe, ["nvfp4"], ["rne"], "NVFP4 scale chain of profile 'torchao'"),
    (E4M3ScaleFloor, ["nvfp4"], ["rne"], "E4M3 scale floor"),
    (NanOnlyBlocks, ["mxfp4"], ["rne"], "NaN-block policy of profile 'torchao'"),
    (SwappedNibbles, ["mxfp4"], ["rne"], "high nibble first"),
    (PlainScaleLayout, ["mxfp4"], ["rne"], "row-major"),
    (If4TiesTakeInt, ["if4"], ["rne"], "IF4 ties between the two block errors take INT4"),
    (If4IntDivides, ["if4"], ["rne"], "INT4 candidate computed as y / fp32(6/7)"),
    (If4ErrorsInElementOrder, ["if4", "if4:scale_rule=mae"], ["rne"], "IF4 block errors added in element order"),
    (If4FlagInverted, ["if4"], ["rne"], "IF4 flag inverted"),
    (FourOverSixDecodeScaleError, ["nvfp4:scale_rule=4over6", "nvfp4:scale_rule=4over6,error_mode=mse"], ["rne"],
     "the global decode scale's path"),
    (FourOverSixTorchOrder, ["nvfp4:scale_rule=4over6", "nvfp4:scale_rule=4over6,error_mode=mse"], ["rne"],
     "nv_4over6_error_sum='torch_cpu'"),
)


# -- RHT defects: quantize(x, rht=) with the transform computed wrongly -----------------------------------

def _reversed_fwht(x, r):
    """fwht-fp32 with the butterfly stages in the wrong order (d = size/2, ..., 2, 1)."""
    from fp4spec.rht import fwht_scale

    n = r.size
    u = (np.asarray(x, np.float32).reshape(-1, n) * np.array(r.signs, np.float32)).astype(np.float32)
    d = n // 2
    while d >= 1:
        v = u.reshape(-1, n // (2 * d), 2, d)
        a, b = v[..., 0, :], v[..., 1, :]
        u = np.stack((a + b, a - b), axis=-2).reshape(-1, n)
        d //= 2
    y = (u * fwht_scale(n)).reshape(np.shape(x))
    return _rht_out(y, r)


def _rht_out(y, r):
    import ml_dtypes

    return y.astype(ml_dtypes.bfloat16).astype(np.float32) if r.out_dtype == "bfloat16" else y.astype(np.float32)


class _RhtDefect(_NumpyBackend):
    """Transforms x itself (wrongly), then quantizes the result as the numpy backend does."""

    def transform(self, x, r):
        raise NotImplementedError

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, rht=None):
        if rht is None or rht.arith != "fwht-fp32":
            return super().quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)
        with np.errstate(all="ignore"):
            y = np.ascontiguousarray(self.transform(np.asarray(x, np.float32), rht), np.float32)
        return _replace(super().quantize(y, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits), rht=rht)


class RhtStagesReversed(_RhtDefect):
    """The fast Walsh-Hadamard butterflies run with d = size/2 first (the same transform in
    exact arithmetic, other float32 roundings on wide-span blocks)."""

    name = "rht-stages-reversed"

    def transform(self, x, r):
        return _reversed_fwht(x, r)


class RhtWrongAxis(_RhtDefect):
    """The transform runs down the columns (axis 0) instead of along the blocked axis (the wgrad
    path's transpose mixed up); a tensor whose rows are not whole RHT rows cannot be transformed."""

    name = "rht-wrong-axis"

    def transform(self, x, r):
        if x.shape[0] % r.size:
            raise ValueError(f"rht along axis 0 needs a multiple of {r.size} rows, got {x.shape[0]}")
        return r.apply(x, axis=0)


class RhtFloat64Sums(_RhtDefect):
    """Sums the RHT in float64 (one rounding to the output dtype) while claiming fwht-fp32."""

    name = "rht-float64-sums"

    def transform(self, x, r):
        import dataclasses

        return _rht_out(dataclasses.replace(r, arith="float64", out_dtype="float64").apply(x), r)


class RhtAmaxBeforeTransform(_NumpyBackend):
    """Two-level schemes: the tensor scale from the amax of x before the RHT (TE takes it after)."""

    name = "rht-amax-before"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8, rht=None):
        sch = resolve_scheme(scheme)
        if rht is None or sch.structure != "two_level":
            return super().quantize(x, sch, rounding=rounding, rbits=rbits, sr_bits=sr_bits, rht=rht)
        with np.errstate(all="ignore"):
            y = np.ascontiguousarray(rht.apply(np.asarray(x, np.float32)).astype(np.float32))
        prep, xb, rb, _, _ = _two_level_parts(y, sch, rounding, rbits, sr_bits)
        with np.errstate(invalid="ignore"):
            ts = two_level_tensor_scale(F32(np.max(np.abs(np.asarray(x, np.float32)))) if np.size(x) else F32(0), sch)
        scale_codes = scaling.block_scale_codes(scaling.block_amaxes(xb, sch), ts, sch)
        mult = scaling.element_multipliers(scale_codes, ts, sch)
        codes = scaling.element_codes(xb, mult, sch, rounding, rb, sr_bits)
        return QuantizedTensor.from_moved(codes.reshape(prep.x.shape), scale_codes, ts.decode, sch, prep.axis,
                                          prep.shape, rht=rht)


#: RHT defects (the numpy backend's claims, one thing wrong in the transform or its amax).
RHT_DEFECTS = (RhtStagesReversed, RhtFloat64Sums, RhtAmaxBeforeTransform, RhtWrongAxis)
DIAGNOSED += ((RhtWrongAxis, ["nvfp4", "mxfp4"], ["rne"], "the RHT applied along the wrong axis"),
              (RhtFloat64Sums, ["nvfp4"], ["rne"], "the RHT summed in float64"))


#: The defects the issue lists, in its order.
LISTED = (TiesAway, MxCeilRule, SrIgnoresBits, SwappedNibbles, DivideNotReciprocal, WrongGlobalScale,
          E8M0ZeroBlockNaN, FlushNegativeZero)
#: Further defects from the bug catalogue.
UNLISTED = (FloatLog2Scale, StalePadding, ByteZeroDequantizesToZero, SrStrictCompare, Bf16Input, ScaleCastTruncates)


# -- GEMM defects: a block-scaled matmul claiming sm100-mxf4nvf4 (Blackwell kind::mxf4nvf4) -----------

class _GemmDefect(NumpyBackend):
    """The numpy backend whose matmul claims only ``sm100-mxf4nvf4`` and gets one thing wrong."""

    claimed = "sm100-mxf4nvf4"

    def capabilities(self):
        import dataclasses

        return dataclasses.replace(super().capabilities(), accumulators=(self.claimed,))


class Fp32AccumulateGemm(_GemmDefect):
    """Accumulates in plain float32, one FMA per product in ascending K (what a CUDA-core
    fallback or a CPU emulation does), while claiming the tensor core's truncated
    fused dot-product-add."""

    name = "gemm-fp32-accumulate"

    def matmul(self, qa, qb, *, accumulator, c=None):
        import fp4spec

        return fp4spec.matmul(qa, qb, accumulator="fp32", c=c)


class Truncate34Gemm(_GemmDefect):
    """The fused dot-product-add keeps 34 fractional bits after alignment where the model
    says 35 (an off-by-one in the alignment width)."""

    name = "gemm-truncate-34"

    def matmul(self, qa, qb, *, accumulator, c=None):
        import dataclasses

        import fp4spec

        model = fp4spec.get_accumulator(accumulator)
        return fp4spec.matmul(qa, qb, accumulator=dataclasses.replace(model, name=model.name + "-f34",
                                                                      frac_bits=model.frac_bits - 1), c=c)


class SwappedScalesGemm(_GemmDefect):
    """Reads A's block scales from B's scale buffer and B's from A's (the two scale pointers
    swapped in the GEMM call); a buffer shorter than needed wraps around, as a flat read of
    the wrong allocation would."""

    name = "gemm-swapped-scales"

    def matmul(self, qa, qb, *, accumulator, c=None):

        import fp4spec

        sa = np.resize(np.asarray(qb.scales), np.shape(qa.scales)).astype(np.uint8)
        sb = np.resize(np.asarray(qa.scales), np.shape(qb.scales)).astype(np.uint8)
        return fp4spec.matmul(qa.replace(scales=sa), qb.replace(scales=sb),
                              accumulator=accumulator, c=c)


class Ue4m3BitRefusedGemm(_GemmDefect):
    """Refuses UE4M3 scale bytes with bit 7 set (float8_e4m3fn bytes with the sign bit, e.g.
    torchao's 0xFF) where the model reads their low 7 bits (ue4m3_sign_bit='ignore')."""

    name = "gemm-ue4m3-bit7-refused"

    def matmul(self, qa, qb, *, accumulator, c=None):
        import dataclasses

        import fp4spec

        model = fp4spec.get_accumulator(accumulator)
        return fp4spec.matmul(qa, qb, accumulator=dataclasses.replace(model, name=model.name + "-reject",
                                                                      ue4m3_sign_bit="reject"), c=c)


class Ue4m3BitAsSignGemm(_GemmDefect):
    """Reads bit 7 of a UE4M3 scale byte as the sign of the block scale (a float8_e4m3fn
    decode) where the model ignores it: the blocks of such bytes come out negated."""

    name = "gemm-ue4m3-bit7-sign"

    def matmul(self, qa, qb, *, accumulator, c=None):
        import fp4spec

        def as_signed(q):
            scales = np.asarray(q.scales)
            if q.scheme.scale.name != "ue4m3" or not (scales & 0x80).any():
                return q
            flip = np.repeat((scales & 0x80) != 0, q.scheme.block_size, axis=1)[:, :np.shape(q.codes)[1]]
            sign = np.uint8(1 << (q.scheme.element.bits - 1))
            codes = np.where(flip, np.asarray(q.codes) ^ sign, np.asarray(q.codes)).astype(np.uint8)
            return q.replace(codes=codes, scales=(scales & 0x7F).astype(np.uint8))

        return fp4spec.matmul(as_signed(qa), as_signed(qb), accumulator=accumulator, c=c)


class Ue4m3BitAcceptedGemm(_GemmDefect):
    """Claims the ``exact`` model (ue4m3_sign_bit='reject') but reads a UE4M3 byte with bit 7
    set as its low 7 bits instead of refusing the operand."""

    name = "gemm-ue4m3-bit7-accepted"
    claimed = "exact"

    def matmul(self, qa, qb, *, accumulator, c=None):
        import dataclasses

        import fp4spec

        model = fp4spec.get_accumulator(accumulator)
        return fp4spec.matmul(qa, qb, accumulator=dataclasses.replace(model, name=model.name + "-ignore",
                                                                      ue4m3_sign_bit="ignore"), c=c)


#: GEMM defects (each claims sm100-mxf4nvf4, but Ue4m3BitAcceptedGemm: exact).
GEMM = (Fp32AccumulateGemm, Truncate34Gemm, SwappedScalesGemm, Ue4m3BitRefusedGemm, Ue4m3BitAsSignGemm,
        Ue4m3BitAcceptedGemm)
