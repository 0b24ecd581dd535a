"""The GEMM accumulator models by hand: building blocks, worked examples where truncation,
alignment and rounding change the result, exact-model checks against Fraction sums, the
descriptor and the operand checks."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

import fp4spec
from fp4spec.accumulator_models import (
    AccumulatorModel,
    accumulators,
    get_accumulator,
    register_accumulator,
    unregister_accumulator,
)
from fp4spec.matmul_operands import check_operands, datapath_scale_codes
from fp4spec.conformance.matmul_properties import make_operand, operand_from_values, schemes_for
from fp4spec.gemm_reference import (
    fma32,
    fused_sum,
    matmul_reference,
    mul32,
    round_bf16,
    round_binary,
    round_f32,
    sig_exp,
)
from fp4spec.api.gemm import matmul

F = Fraction
P2 = lambda e: F(2) ** e  # noqa: E731
MODELS = tuple(accumulators)


def taking(scheme):
    """The catalogue models that take ``scheme`` for A and B."""
    return [m for m in MODELS if scheme in schemes_for(m)]


def bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def both(qa, qb, acc, c=None):
    """The reference and the emulator, which must agree bit for bit; returns the bits."""
    r = matmul_reference(qa, qb, accumulator=acc, c=c)
    e = matmul(qa, qb, accumulator=acc, c=c)
    assert np.array_equal(r.view(np.uint32), e.view(np.uint32)), (acc, r, e)
    return r.view(np.uint32)


def row(k, entries, fill=0.0):
    v = [fill] * k
    for i, x in entries.items():
        v[i] = x
    return [v]


def c11(x):
    return np.array([[x]], np.float32)


# =====================================================================================
# Building blocks
# =====================================================================================

class TestSigExp:
    def test_normal(self):
        assert sig_exp(F(3), 0, None) == (F(3, 2), 1)
        assert sig_exp(F(-6), 0, None) == (F(-3, 2), 2)

    def test_subnormal_is_normalized_at_emin(self):
        # E4M3 2^-9 (a subnormal): significand 2^-3 at exponent -6
        assert sig_exp(P2(-9), -6, None) == (P2(-3), -6)
        # E2M1 0.5 (its subnormal): significand 0.5 at exponent 0
        assert sig_exp(F(1, 2), 0, None) == (F(1, 2), 0)

    def test_zero_gets_e_zero(self):
        assert sig_exp(F(0), -126, -139) == (0, -139)
        assert sig_exp(F(0), -126, None) == (0, None)


class TestFusedSum:
    def test_term_below_F_bits_is_truncated(self):
        # 1 + 2^-36 with F = 35: the small term is 0.5 units of 2^-35 -> 0
        assert fused_sum([(F(1), 0), (F(1), -36)], 35) == (F(1), 0)
        assert fused_sum([(F(1), 0), (F(1), -36)], 36) == (1 + P2(-36), 0)

    def test_truncation_is_toward_zero_floor_is_not(self):
        terms = [(F(1), 0), (F(-1), -36)]
        assert fused_sum(terms, 35, "rz") == (F(1), 0)
        assert fused_sum(terms, 35, "floor") == (1 - P2(-35), 0)

    def test_alignment_is_to_the_largest_exponent_not_magnitude(self):
        # significand 3.5 at exponent 0 (value 3.5) and 1 at exponent 1 (value 2):
        # e_max = 1, so the first term keeps F bits below 2^1, not below 2^0
        s, e = fused_sum([(F(7, 2) + P2(-3), 0), (F(1), 1)], 3)
        assert e == 1 and s == F(7, 4) + F(1)           # 3.5 + 2^-3 -> 1.75 (+ 2^-4 lost)

    def test_all_zero(self):
        assert fused_sum([(F(0), None), (F(0), None)], 25) == (0, None)

    def test_bad_rounding(self):
        with pytest.raises(ValueError, match="rounding"):
            fused_sum([], 3, "rne")


class TestRounding:
    def test_rne_ties_and_rz(self):
        assert round_f32(1 + P2(-24)) == 1.0                       # tie -> even
        assert round_f32(1 + 3 * P2(-24)) == 1 + 2 ** -22          # tie -> even (up)
        assert round_f32(1 + P2(-23) - P2(-30), "rz") == 1.0
        assert round_f32(-(1 + P2(-23) - P2(-30)), "rz") == -1.0

    def test_overflow(self):
        flt_max = float(np.finfo(np.float32).max)
        assert round_f32(P2(128) - P2(103)) == math.inf            # FLT_MAX + half ulp, ties away from max (odd)
        assert round_f32(P2(128) - P2(104) + P2(80)) == flt_max
        assert round_f32(P2(128) - P2(100), "rz") == flt_max
        assert round_f32(P2(128), "rz") == math.inf                 # MMA-Sim: >= 2^128 after RZ is Inf
        assert round_f32(-P2(130)) == -math.inf

    def test_subnormals_and_signed_zero(self):
        assert round_f32(P2(-150)) == 0.0                           # tie -> even (0)
        assert round_f32(3 * P2(-151)) == 2 ** -149
        r = round_f32(-P2(-151))
        assert r == 0 and math.copysign(1, r) < 0                   # -0.0 for a tiny negative
        assert math.copysign(1, round_f32(F(0))) > 0                # an exact zero is +0
        r = round_f32(-P2(-150) - P2(-160), "rz")
        assert r == 0 and math.copysign(1, r) < 0

    def test_bf16(self):
        assert round_bf16(1 + P2(-8)) == 1.0
        assert round_bf16(1 + 3 * P2(-8)) == 1 + 2 ** -6
        assert round_bf16(P2(-134)) == 0.0                          # half the smallest subnormal: tie -> 0
        assert round_bf16(3 * P2(-135)) == 2 ** -133
        assert round_bf16(6 * P2(127)) == math.inf

    def test_generic(self):
        assert round_binary(F(5), 1, 0, 2, "rne") == 4.0            # E2M1-like grid, 5 -> tie -> 4
        assert round_binary(F(7), 1, 0, 2, "rne") == math.inf       # 8 is out of range


class TestFma32:
    def test_single_rounding(self):
        a, b = 1 + 2 ** -23, 1 - 2 ** -23
        assert fma32(a, b, -1.0) == -(2.0 ** -46)                    # a*b = 1 - 2^-46 exactly
        assert float(np.float32(np.float32(a) * np.float32(b)) - np.float32(1)) == 0.0   # mul then add loses it

    def test_signed_zeros(self):
        assert math.copysign(1, fma32(-0.0, 1.0, -0.0)) < 0
        assert math.copysign(1, fma32(0.0, -1.0, 0.0)) > 0
        assert math.copysign(1, fma32(1.0, 1.0, -1.0)) > 0

    def test_specials(self):
        assert math.isnan(fma32(0.0, math.inf, 1.0))
        assert fma32(2.0, math.inf, 1.0) == math.inf
        assert math.isnan(fma32(1.0, math.inf, -math.inf))
        assert mul32(2.0 ** -100, 2.0 ** -100) == 0.0
        assert mul32(2.0 ** 100, 2.0 ** 100) == math.inf


# =====================================================================================
# Worked examples (docs/gemm.md)
# =====================================================================================

class TestWorkedExamples:
    def test_final_rz_loses_three_quarters_of_an_ulp(self):
        """c = 1 and one product 1.5 * 0.5 * 2^-23 = 0.75 ulp(1): the exact sum rounds to
        nearest (up); the NVIDIA models truncate it away."""
        k = 64
        qa = operand_from_values(row(k, {0: 1.5}), [[2.0 ** -23, 1.0]], "mxfp4")
        qb = operand_from_values(row(k, {0: 0.5}), [[1.0, 1.0]], "mxfp4")
        up, down = bits(1 + 2 ** -23), bits(1.0)
        want = {"exact": up, "fp32": up, "sm100-mxf4nvf4": down, "sm100-mxf8f6f4": down,
                "sm90-bf16": down, "cdna3-fp8": up}
        for acc, b in want.items():
            assert both(qa, qb, acc, c11(1.0))[0, 0] == b, acc

    def test_f35_truncation_after_cancellation(self):
        """sm100-mxf4nvf4: c = -1 cancels group 0 (1 * 1); group 1 = 0.25 * 2^-40 sits 42
        binades below e_max = 0 and F = 35 truncates it to 0: result +0, exact 2^-42."""
        sch = fp4spec.get_scheme("mxfp4", block_size=16)
        qa = operand_from_values(row(64, {0: 1.0, 16: 0.5}), [[1.0, 2.0 ** -40, 1.0, 1.0]], sch)
        qb = operand_from_values(row(64, {0: 1.0, 16: 0.5}), [[1.0, 1.0, 1.0, 1.0]], sch)
        c = c11(-1.0)
        assert both(qa, qb, "exact", c)[0, 0] == bits(2.0 ** -42)
        assert both(qa, qb, "fp32", c)[0, 0] == bits(2.0 ** -42)
        assert both(qa, qb, "sm100-mxf4nvf4", c)[0, 0] == 0

    def test_group_sums_are_exact_fp32_chain_is_not(self):
        """Two products of 2^-24 after c = 1: the FP32 FMA chain rounds 1 + 2^-24 to 1 twice;
        the mxf4nvf4 group sum is exact (2^-23) before the fused add."""
        k = 64
        qa = operand_from_values(row(k, {0: 0.5, 1: 0.5}), [[2.0 ** -22, 1.0]], "mxfp4")
        qb = operand_from_values(row(k, {0: 0.5, 1: 0.5}), [[1.0, 1.0]], "mxfp4")
        c = c11(1.0)
        assert both(qa, qb, "fp32", c)[0, 0] == bits(1.0)
        assert both(qa, qb, "exact", c)[0, 0] == bits(1 + 2 ** -23)
        assert both(qa, qb, "sm100-mxf4nvf4", c)[0, 0] == bits(1 + 2 ** -23)

    def test_cdna3_floor_makes_a_tie(self):
        """CDNA3: the odd half's -2^-32 is floored to -2^-24 when re-aligned to the even half's
        exponent; 1 + 2^-23 - 2^-24 is a tie that RNE sends to 1.0. Everyone else: 1 + 2^-23."""
        k = 32
        qa = operand_from_values(row(k, {0: 1.0, 1: -(2.0 ** -16), 2: 2.0 ** -16}), [[1.0]], "mxfp8_e5m2")
        qb = operand_from_values(row(k, {0: 1.0, 1: 2.0 ** -16, 2: 2.0 ** -7}), [[1.0]], "mxfp8_e5m2")
        up = bits(1 + 2 ** -23)
        for acc in ("exact", "fp32", "sm100-mxf8f6f4", "sm90-bf16"):
            assert both(qa, qb, acc)[0, 0] == up, acc
        assert both(qa, qb, "cdna3-fp8")[0, 0] == bits(1.0)

    def test_bf16_upcast_overflows(self):
        """6 * 2^127 overflows an fp32 or bf16 operand; the exact sum is 3."""
        qa = operand_from_values(row(64, {0: 6.0}), [[2.0 ** 127, 1.0]], "mxfp4")
        qb = operand_from_values(row(64, {0: 0.5}), [[2.0 ** -127, 1.0]], "mxfp4")
        for acc in ("exact", "sm100-mxf4nvf4", "sm100-mxf8f6f4", "cdna3-fp8"):
            assert both(qa, qb, acc)[0, 0] == bits(3.0), acc
        for acc in ("fp32", "sm90-bf16"):
            assert both(qa, qb, acc)[0, 0] == bits(np.inf), acc

    def test_cdna3_scale_product_underflows(self):
        """cdna3-fp8 scales a block by fp32(sa * sb): 2^-100 * 2^-55 = 2^-155 underflows to 0,
        while the exact 1152 * 2^-155 = 18 * 2^-149 is a float32 subnormal."""
        qa = operand_from_values([[6.0] * 32], [[2.0 ** -100]], "mxfp4")
        qb = operand_from_values([[6.0] * 32], [[2.0 ** -55]], "mxfp4")
        assert both(qa, qb, "cdna3-fp8")[0, 0] == 0
        assert both(qa, qb, "exact")[0, 0] == 18
        assert both(qa, qb, "sm100-mxf8f6f4")[0, 0] == 18

    def test_nan_scale_patterns(self):
        """A NaN scale gives NaN even where every element is zero; NVIDIA writes 0x7FFFFFFF."""
        for scheme, sc in (("nvfp4", [[np.nan, 1.0, 1.0, 1.0]]), ("mxfp4", [[1.0, np.nan]])):
            qa = operand_from_values(row(64, {}), sc, scheme)
            qb = operand_from_values(row(64, {}), [[1.0] * len(sc[0])], scheme)
            for acc in taking(scheme):
                assert both(qa, qb, acc)[0, 0] == get_accumulator(acc).nan_bits, (scheme, acc)

    def test_nan_c(self):
        qa = operand_from_values(row(64, {0: 1.0}), [[1.0, 1.0]], "mxfp4")
        for acc in MODELS:
            assert both(qa, qa, acc, c11(np.nan))[0, 0] == get_accumulator(acc).nan_bits, acc

    def test_infinite_c(self):
        """An infinite c stays infinite against a large finite sum (-36 * 2^120)..."""
        qa = operand_from_values(row(64, {0: -6.0}), [[2.0 ** 60, 1.0]], "mxfp4")
        qb = operand_from_values(row(64, {0: 6.0}), [[2.0 ** 60, 1.0]], "mxfp4")
        for acc in MODELS:
            assert both(qa, qb, acc, c11(np.inf))[0, 0] == bits(np.inf), acc
        # ... but where an upcast operand (fp32, sm90-bf16) or cdna3's fp32(sa * sb) overflows,
        # Inf - Inf is NaN
        qa = operand_from_values(row(64, {0: -6.0}), [[2.0 ** 127, 1.0]], "mxfp4")
        qb = operand_from_values(row(64, {0: 1.0}), [[1.0, 1.0]], "mxfp4")
        for acc in MODELS:
            want = get_accumulator(acc).nan_bits if acc in ("fp32", "sm90-bf16") else bits(np.inf)
            assert both(qa, qb, acc, c11(np.inf))[0, 0] == want, acc
        qa = operand_from_values(row(64, {0: -1.0}), [[2.0 ** 100, 1.0]], "mxfp4")
        qb = operand_from_values(row(64, {0: 1.0}), [[2.0 ** 100, 1.0]], "mxfp4")
        for acc in MODELS:
            want = get_accumulator(acc).nan_bits if acc == "cdna3-fp8" else bits(np.inf)
            assert both(qa, qb, acc, c11(np.inf))[0, 0] == want, acc

    def test_e_zero(self):
        """Only results near the subnormal range depend on e_zero: group 0 = 2^-149, group 1 =
        -2^-169, c = +0. With e_zero = -126 the zero accumulator sets e_max and F = 35 drops
        group 1 (result 2^-149); with -139 or None it is kept and RZ gives 0."""
        sch = fp4spec.get_scheme("mxfp4", block_size=16)
        qa = operand_from_values(row(64, {0: 1.0, 16: -0.5}), [[2.0 ** -127, 2.0 ** -127, 1, 1]], sch)
        qb = operand_from_values(row(64, {0: 1.0, 16: 0.5}), [[2.0 ** -22, 2.0 ** -40, 1, 1]], sch)
        base = get_accumulator("sm100-mxf4nvf4")
        assert base.e_zero == -139
        assert both(qa, qb, base)[0, 0] == 0
        assert both(qa, qb, dataclasses.replace(base, name="ez126", e_zero=-126))[0, 0] == 1
        assert both(qa, qb, dataclasses.replace(base, name="eznone", e_zero=None))[0, 0] == 0
        assert both(qa, qb, "exact")[0, 0] == 1
        # the negative mirror truncates to zero: +0 (zero_sign='positive'), -0 where the sign is kept
        qa_neg = operand_from_values(row(64, {0: -1.0, 16: 0.5}), [[2.0 ** -127, 2.0 ** -127, 1, 1]], sch)
        assert both(qa_neg, qb, base)[0, 0] == 0
        assert both(qa_neg, qb, dataclasses.replace(base, name="signed", zero_sign="signed"))[0, 0] == 0x80000000

    def test_c_and_tensor_scales(self):
        """c is the initial accumulator: with tensor scales it is multiplied by fp32(gA * gB)."""
        qa = operand_from_values(row(64, {0: 1.0}), [[1.0] * 4], "nvfp4", global_scale=2.0)
        qb = operand_from_values(row(64, {0: 1.0}), [[1.0] * 4], "nvfp4", global_scale=1.5)
        for acc in taking("nvfp4"):
            assert both(qa, qb, acc, c11(1.0))[0, 0] == bits(6.0), acc

    def test_rz_of_c_in_each_step(self):
        """A chain of RZ steps: c = 1 + 2^-23 survives; a step adding -2^-26 truncates it down."""
        qa = operand_from_values(row(64, {0: -1.0}), [[2.0 ** -26, 1.0]], "mxfp4")
        qb = operand_from_values(row(64, {0: 1.0}), [[1.0, 1.0]], "mxfp4")
        c = c11(1 + 2 ** -23)
        assert both(qa, qb, "sm100-mxf4nvf4", c)[0, 0] == bits(1.0)
        assert both(qa, qb, "exact", c)[0, 0] == bits(1 + 2 ** -23)


# =====================================================================================
# The sign of a zero step result (zero_sign)
# =====================================================================================

NEG0 = 0x80000000


def variant(name, zero_sign):
    return dataclasses.replace(get_accumulator(name), name=f"{name}/{zero_sign}", zero_sign=zero_sign)


class TestZeroSign:
    """sm90-bf16's last k = 16 step adds one product -2^-75 * 2^-75 = -2^-150 to c: with e_max
    = e_zero = -133 and F = 25 the term survives truncation (units of 2^-158), and RZ to
    float32 rounds it to zero."""

    @staticmethod
    def tiny(k=16, value=-1.0, scale=2.0 ** -75):
        qa = operand_from_values(row(32, {k: value}), [[scale]], "mxfp4")
        qb = operand_from_values(row(32, {k: 1.0}), [[2.0 ** -75]], "mxfp4")
        return qa, qb

    def test_catalogue_values(self):
        """The NVIDIA models map every zero of a fused step to +0 (MMA-Sim 2.1.1; the H200 for
        sm90-bf16); the others round as IEEE does."""
        for name in ("sm100-mxf4nvf4", "sm100-mxf8f6f4", "sm90-bf16"):
            model = get_accumulator(name)
            assert model.zero_sign == "positive", name
            assert "MMA-Sim 2.1.1" in model.source and "[confirmed in source]" in model.source, name
            assert "zero=positive" in model.describe()
        for name in ("exact", "fp32", "cdna3-fp8"):
            assert get_accumulator(name).zero_sign == "signed", name
        assert "[measured" in get_accumulator("sm90-bf16").source

    @pytest.mark.parametrize("c", [0.0, -0.0])
    def test_negative_sum_rounding_to_zero(self, c):
        qa, qb = self.tiny()
        assert both(qa, qb, variant("sm90-bf16", "signed"), c11(c))[0, 0] == NEG0
        assert both(qa, qb, variant("sm90-bf16", "positive"), c11(c))[0, 0] == 0
        assert both(qa, qb, "sm90-bf16", c11(c))[0, 0] == 0
        # IEEE: -2^-150 is a tie between -0 and -2^-149 -> -0 (RNE); the fp32 chain's next FMA
        # adds a +0 product to that -0: +0
        assert both(qa, qb, "exact", c11(c))[0, 0] == NEG0
        assert both(qa, qb, "fp32", c11(c))[0, 0] == 0

    def test_nonzero_acc_cancelling_to_a_tiny_negative(self):
        """c = 2^-140, products -2^-140 and -2^-150 (one step): the sum -2^-150 rounds to 0."""
        qa = operand_from_values(row(32, {16: -1.0, 17: -(2.0 ** -5)}), [[2.0 ** -70]], "mxfp8_e4m3")
        qb = operand_from_values(row(32, {16: 1.0, 17: 2.0 ** -5}), [[2.0 ** -70]], "mxfp8_e4m3")
        c = c11(2.0 ** -140)
        assert both(qa, qb, variant("sm90-bf16", "signed"), c)[0, 0] == NEG0
        assert both(qa, qb, "sm90-bf16", c)[0, 0] == 0

    def test_zero_of_a_first_step_is_lost_in_the_next(self):
        """The -0 of step 1 (k = 0) meets a step of zero products: an exact zero sum is +0."""
        qa, qb = self.tiny(k=0)
        for zs in ("signed", "positive"):
            assert both(qa, qb, variant("sm90-bf16", zs), c11(-0.0))[0, 0] == 0, zs

    def test_nonzero_results_and_exact_zeros_do_not_depend_on_it(self):
        qa, qb = self.tiny(scale=2.0 ** -74)      # -2^-149: the smallest subnormal, kept
        for zs in ("signed", "positive"):
            assert both(qa, qb, variant("sm90-bf16", zs))[0, 0] == NEG0 | 1, zs
        qa = operand_from_values(row(32, {16: 1.0, 17: -1.0}), [[1.0]], "mxfp4")
        qb = operand_from_values(row(32, {16: 1.0, 17: 1.0}), [[1.0]], "mxfp4")
        for zs in ("signed", "positive"):
            assert both(qa, qb, variant("sm90-bf16", zs), c11(-0.0))[0, 0] == 0, zs
        qa = operand_from_values(row(32, {16: -0.0}), [[1.0]], "mxfp4")   # every product -0, c = -0
        for zs in ("signed", "positive"):
            assert both(qa, qb, variant("sm90-bf16", zs), c11(-0.0))[0, 0] == 0, zs

    def test_group_scales(self):
        """sm100-mxf4nvf4's test_e_zero mirror: -2^-149 + 2^-169 truncates (RZ) to -0 under
        'signed', +0 under 'positive' (the catalogue's)."""
        sch = fp4spec.get_scheme("mxfp4", block_size=16)
        qa = operand_from_values(row(64, {0: -1.0, 16: 0.5}), [[2.0 ** -127, 2.0 ** -127, 1, 1]], sch)
        qb = operand_from_values(row(64, {0: 1.0, 16: 0.5}), [[2.0 ** -22, 2.0 ** -40, 1, 1]], sch)
        assert both(qa, qb, variant("sm100-mxf4nvf4", "signed"))[0, 0] == NEG0
        assert both(qa, qb, "sm100-mxf4nvf4")[0, 0] == 0

    @pytest.mark.parametrize("name, k", [("sm100-mxf4nvf4", 64), ("sm100-mxf8f6f4", 32)])
    def test_blackwell_tiny_negative_sum(self, name, k):
        """The case of issue 16: mxfp4, a = [-0.5, 0, ...], b = [0.5, 0, ...], both scale bytes
        52 (2^-75): the exact sum -2^-152 rounds toward zero. MMA-Sim 2.1.1 gives +0.0."""
        qa = make_operand(np.array([[9] + [0] * (k - 1)]), np.full((1, k // 32), 52), "mxfp4")
        qb = make_operand(np.array([[1] + [0] * (k - 1)]), np.full((1, k // 32), 52), "mxfp4")
        for c in (None, c11(-0.0)):
            assert both(qa, qb, name, c)[0, 0] == 0
            assert both(qa, qb, variant(name, "signed"), c)[0, 0] == NEG0
        assert both(qa, qb, "exact")[0, 0] == NEG0   # IEEE: RNE of -2^-152 is -0

    def test_validation(self):
        with pytest.raises(ValueError, match="zero_sign: 'ieee' is not one of 'signed', 'positive'"):
            variant("sm90-bf16", "ieee")
        for name in ("exact", "fp32"):
            with pytest.raises(ValueError, match="zero_sign: algorithm .* rounds as IEEE 754"):
                variant(name, "positive")
        m = variant("cdna3-fp8", "positive")
        assert m.zero_sign == "positive"


# =====================================================================================
# UE4M3 scale bytes with bit 7 set (ue4m3_sign_bit)
# =====================================================================================

def nvfp4_ones(k=64, scale_bytes=None):
    """1 x k nvfp4 operand of ones (E2M1 1.0), tensor scale 1, the given scale bytes (default
    0x38, 1.0)."""
    sb = np.full((1, k // 16), 0x38, np.uint8) if scale_bytes is None else np.array([scale_bytes], np.uint8)
    return make_operand(np.full((1, k), 0x2, np.uint8), sb, "nvfp4")


def policy(name, value):
    return dataclasses.replace(get_accumulator(name), name=f"{name}/{value}", ue4m3_sign_bit=value)


class TestUe4m3SignBit:
    def test_catalogue_values_and_sources(self):
        """ignore: sm100-mxf4nvf4 (MMA-Sim 2.1.1) and sm90-bf16 (fp4spec's Triton kernel, as
        the hardware); reject: the software models and sm100-mxf8f6f4 (no UE4M3 scales)."""
        for name in ("sm100-mxf4nvf4", "sm90-bf16"):
            m = get_accumulator(name)
            assert m.ue4m3_sign_bit == "ignore" and "ue4m3_sign_bit='ignore'" in m.source, name
        assert "truncate_e4m3_to_ue4m3" in get_accumulator("sm100-mxf4nvf4").source
        for name in ("exact", "fp32", "cdna3-fp8"):
            m = get_accumulator(name)
            assert m.ue4m3_sign_bit == "reject" and "ue4m3_sign_bit='reject': fp4spec's choice" in m.source, name
        m = get_accumulator("sm100-mxf8f6f4")
        assert m.ue4m3_sign_bit == "reject" and "never applies" in m.source
        assert "ue4m3_sign_bit=ignore" in get_accumulator("sm90-bf16").describe()

    def test_validation(self):
        with pytest.raises(ValueError, match="ue4m3_sign_bit: 'flag' is not one of 'reject', 'ignore'"):
            policy("exact", "flag")
        assert AccumulatorModel("mine", "exact", "exact").ue4m3_sign_bit == "reject"

    @pytest.mark.parametrize("name", ["exact", "fp32", "cdna3-fp8"])
    def test_reject_names_the_byte_the_model_and_the_policy(self, name):
        qa, qb = nvfp4_ones(scale_bytes=[0x38, 0xB8, 0x38, 0xFF]), nvfp4_ones()
        with pytest.raises(ValueError, match=rf"qa: UE4M3 scale byte 0xB8 has bit 7 set .* accumulator '{name}' "
                                             r"rejects it \(ue4m3_sign_bit='reject'\).* sm100-mxf4nvf4, sm90-bf16"):
            check_operands(get_accumulator(name), qa, qb)
        with pytest.raises(ValueError, match="qb: UE4M3 scale byte 0xFF"):
            matmul_reference(qb, qa.replace(scales=np.array([[0x38, 0x38, 0x38, 0xFF]], np.uint8)), accumulator=name)

    def test_a_model_without_ue4m3_scales_says_so_first(self):
        q = nvfp4_ones(scale_bytes=[0xB8] * 4)
        with pytest.raises(ValueError, match="scale ue4m3 with blocks of 16 is not taken by accumulator"):
            check_operands(get_accumulator("sm100-mxf8f6f4"), q, q)

    @pytest.mark.parametrize("name", ["sm100-mxf4nvf4", "sm90-bf16"])
    def test_ignore_reads_the_low_seven_bits(self, name):
        """0xB8 reads as 0x38 (1.0), 0x80 as 0x00 (zero), 0xFF as 0x7F (NaN): the result
        equals that of the masked bytes, in the reference and the emulator."""
        qb = nvfp4_ones()
        one = nvfp4_ones(scale_bytes=[0xB8, 0x38, 0xB8, 0xB8])
        assert both(one, qb, name)[0, 0] == bits(64.0)
        zero = nvfp4_ones(scale_bytes=[0x80, 0x38, 0x38, 0x38])
        assert both(zero, qb, name)[0, 0] == bits(48.0)
        nan = nvfp4_ones(scale_bytes=[0xFF, 0x38, 0x38, 0x38])
        assert both(nan, qb, name)[0, 0] == get_accumulator(name).nan_bits
        for q in (one, zero, nan):
            masked = q.replace(scales=np.asarray(q.scales) & 0x7F)
            assert np.array_equal(both(q, qb, name), both(masked, qb, name))

    def test_datapath_scale_codes(self):
        ue4m3, e8m0 = fp4spec.get_scheme("nvfp4").scale, fp4spec.get_scheme("mxfp4").scale
        codes = np.array([0x00, 0x38, 0x7F, 0x80, 0xB8, 0xFF], np.uint8)
        assert datapath_scale_codes(get_accumulator("sm100-mxf4nvf4"), ue4m3, codes).tolist() == \
            [0x00, 0x38, 0x7F, 0x00, 0x38, 0x7F]
        assert datapath_scale_codes(get_accumulator("sm100-mxf4nvf4"), e8m0, codes).tolist() == codes.tolist()
        assert datapath_scale_codes(get_accumulator("exact"), ue4m3, 0xB8) == 0xB8
        assert datapath_scale_codes(get_accumulator("sm90-bf16"), ue4m3, 0xB8) == 0x38


# =====================================================================================
# Exact model vs Fraction sums
# =====================================================================================

def _fraction_sum(qa, qb, c):
    def vals(q):
        sch = q.scheme
        v = [[Fraction(sch.element.decode_exact(int(x))) for x in r] for r in np.asarray(q.codes)]
        s = [[Fraction(sch.scale.decode_exact(int(x))) for x in r] for r in np.asarray(q.scales)]
        return v, s, sch.block_size

    (va, sa, ka), (vb, sb, kb) = vals(qa), vals(qb)
    g = Fraction(1)
    if qa.global_scale is not None or qb.global_scale is not None:
        g = Fraction(float(np.float32(np.float32(qa.global_scale or 1) * np.float32(qb.global_scale or 1))))
    out = np.empty((len(va), len(vb)), np.float32)
    for i in range(len(va)):
        for j in range(len(vb)):
            t = Fraction(float(c[i, j])) + sum(va[i][k] * sa[i][k // ka] * vb[j][k] * sb[j][k // kb]
                                               for k in range(len(va[i])))
            out[i, j] = np.float32(round_f32(t * g))
    return out


@pytest.mark.parametrize("scheme", ["mxfp4", "nvfp4", "ufp4", "nvint4", "mxfp8_e4m3", "mxfp6_e3m2"])
def test_exact_model_is_the_rounded_fraction_sum(scheme):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((3, 64)) * np.exp(rng.uniform(-12, 12, (3, 64)))).astype(np.float32)
    b = (rng.standard_normal((2, 64)) * np.exp(rng.uniform(-12, 12, (2, 64)))).astype(np.float32)
    qa, qb = fp4spec.quantize(a, scheme), fp4spec.quantize(b, scheme)
    c = (rng.standard_normal((3, 2)) * 100).astype(np.float32)
    want = _fraction_sum(qa, qb, c)
    assert np.array_equal(matmul_reference(qa, qb, c=c).view(np.uint32), want.view(np.uint32))
    assert np.array_equal(matmul(qa, qb, c=c).view(np.uint32), want.view(np.uint32))


def test_exact_model_mixed_schemes():
    """exact and fp32 take different schemes for A and B (blocks need not align)."""
    rng = np.random.default_rng(3)
    qa = fp4spec.quantize(rng.standard_normal((2, 64)).astype(np.float32), "mxfp4")
    qb = fp4spec.quantize(rng.standard_normal((2, 64)).astype(np.float32), "nvfp4")
    c = np.zeros((2, 2), np.float32)
    want = _fraction_sum(qa, qb, c)
    assert np.array_equal(matmul(qa, qb).view(np.uint32), want.view(np.uint32))
    both(qa, qb, "fp32")


# =====================================================================================
# Descriptor and catalogue
# =====================================================================================

class TestDescriptor:
    def test_catalogue(self):
        assert set(MODELS) == {"exact", "fp32", "sm100-mxf4nvf4", "sm100-mxf8f6f4", "sm90-bf16", "cdna3-fp8"}
        m = get_accumulator("sm100-mxf4nvf4")
        assert (m.k_step, m.group_size, m.frac_bits, m.final_rounding, m.nan_bits) == (64, 16, 35, "rz", 0x7FFFFFFF)
        assert get_accumulator(m) is m
        for m in accumulators.values():
            assert m.name in m.describe() and m.chaining and m.source

    def test_unknown(self):
        with pytest.raises(ValueError, match="accumulator: unknown model 'cdna4'.*sm100-mxf4nvf4"):
            get_accumulator("cdna4")

    def test_register_measured_model(self):
        mine = AccumulatorModel("my-mi355", "fdpa", "group", k_step=128, group_size=32, frac_bits=30,
                                final_rounding="rz", e_zero=None, source="measured")
        register_accumulator(mine)
        try:
            assert get_accumulator("my-mi355") is mine
            with pytest.raises(ValueError, match="already"):
                register_accumulator(mine)
            q = fp4spec.quantize(np.ones((1, 128), np.float32), "mxfp4")
            both(q, q, "my-mi355")
        finally:
            unregister_accumulator("my-mi355")
        with pytest.raises(ValueError, match="built-in"):
            unregister_accumulator("exact")

    @pytest.mark.parametrize("kw, match", [
        (dict(algorithm="fused"), "algorithm"),
        (dict(scales="exact"), "scales"),
        (dict(group_size=24), "group_size"),
        (dict(frac_bits=99), "frac_bits"),
        (dict(final_rounding="rna"), "final_rounding"),
        (dict(nan_bits=0x7F800000), "nan_bits"),
        (dict(interleave=2), "interleave"),
        (dict(realign_bits=31), "realign_bits"),
    ])
    def test_validation(self, kw, match):
        with pytest.raises(ValueError, match=match):
            dataclasses.replace(get_accumulator("sm100-mxf4nvf4"), **kw)


# =====================================================================================
# Operand checks
# =====================================================================================

class TestOperands:
    def q(self, scheme="mxfp4", shape=(2, 64), **kw):
        return fp4spec.quantize(np.ones(shape, np.float32), scheme, **kw)

    def test_types_and_shapes(self):
        q = self.q()
        with pytest.raises(TypeError, match="qa: expected a QuantizedTensor"):
            matmul(np.ones((2, 64)), q)
        with pytest.raises(ValueError, match="qb: quantized along axis 0"):
            matmul(q, fp4spec.quantize(np.ones((64, 2), np.float32), "mxfp4", axis=0))
        with pytest.raises(ValueError, match="K differs"):
            matmul(q, self.q(shape=(2, 96)))
        with pytest.raises(ValueError, match="2-d"):
            matmul(self.q(shape=(2, 2, 64)), q)

    def test_hif4_rejected(self):
        h = self.q("hif4")
        with pytest.raises(ValueError, match="hif4.*no published dot-product datapath"):
            matmul(h, h)

    def test_model_constraints(self):
        q8 = self.q("mxfp8_e4m3")
        with pytest.raises(ValueError, match="element format 'e4m3'.*sm100-mxf4nvf4.*'e2m1'"):
            matmul(q8, q8, accumulator="sm100-mxf4nvf4")
        with pytest.raises(ValueError, match="same scale format and block size"):
            matmul(self.q("mxfp4"), self.q("nvfp4"), accumulator="sm100-mxf4nvf4")
        with pytest.raises(ValueError, match="ue4m3.*not taken by accumulator 'sm100-mxf8f6f4'"):
            matmul(self.q("nvfp4"), self.q("nvfp4"), accumulator="sm100-mxf8f6f4")
        q96 = self.q(shape=(2, 96))
        with pytest.raises(ValueError, match="K=96 is not a multiple of the 'sm100-mxf4nvf4' step k=64"):
            matmul(q96, q96, accumulator="sm100-mxf4nvf4")
        big = fp4spec.quantize(np.full((1, 32), 448.0, np.float32), "mxfp8_e4m3")
        with pytest.raises(ValueError, match="448.*not representable in e4m3fnuz"):
            matmul(big, big, accumulator="cdna3-fp8")

    def test_c(self):
        q = self.q()
        with pytest.raises(TypeError, match="c: expected a float32 array"):
            matmul(q, q, c=np.zeros((2, 2)))
        with pytest.raises(ValueError, match=r"c: expected shape \(2, 2\)"):
            matmul(q, q, c=np.zeros((2, 3), np.float32))

    def test_nonfinite_element_codes(self):
        q = self.q("mxfp8_e4m3", shape=(1, 32))
        bad = fp4spec.QuantizedTensor(np.full((1, 32), 0x7F, np.uint8), q.scales, None, q.scheme, 1, (1, 32))
        with pytest.raises(ValueError, match="NaN or Inf"):
            matmul(bad, q)

    def test_padded_rows_are_not_part_of_the_operand(self):
        """quantize(pad=True) stores 2-d tiles of 16 x 16: A (20 x 40) keeps 32 x 48 codes. The
        result is M x N = 20 x 12 and equals the product of the explicitly zero-padded
        operands with the padding rows cut off; reference == emulator."""
        rng = np.random.default_rng(12)
        x = rng.standard_normal((20, 40)).astype(np.float32)
        y = rng.standard_normal((12, 40)).astype(np.float32)
        xp, yp = np.zeros((32, 48), np.float32), np.zeros((16, 48), np.float32)
        xp[:20, :40], yp[:12, :40] = x, y
        c = rng.standard_normal((20, 12)).astype(np.float32)
        for kw in (dict(), dict(axis=1), dict(axis=-1)):
            qa = fp4spec.quantize(x, "nvfp4_2d", pad=True, **kw)
            assert qa.shape == (20, 40) and qa.codes.shape == (32, 48)
            for sb, qb in (("nvfp4_2d", fp4spec.quantize(y, "nvfp4_2d", pad=True, **kw)),
                           ("nvfp4", fp4spec.quantize(y, "nvfp4", pad=True, **kw))):
                qbp = fp4spec.quantize(yp, sb)
                ops = check_operands(get_accumulator("exact"), qa, qb)
                assert (ops.m, ops.n, ops.k, ops.k_padded) == (20, 12, 40, 48)
                for acc in ("exact", "fp32", "sm90-bf16"):
                    got = both(qa, qb, acc, c)
                    cp = np.zeros((32, 16), np.float32)
                    cp[:20, :12] = c
                    want = matmul(fp4spec.quantize(xp, "nvfp4_2d"), qbp, accumulator=acc, c=cp)[:20, :12]
                    assert np.array_equal(got, want.view(np.uint32)), (kw, sb, acc)
        with pytest.raises(ValueError, match=r"c: expected shape \(20, 12\)"):
            matmul(qa, qb, c=np.zeros((32, 16), np.float32))

    def test_g(self):
        ops = check_operands(get_accumulator("exact"), self.q("nvfp4"), self.q("mxfp4"))
        assert ops.g is not None and ops.k == 64 and (ops.m, ops.n) == (2, 2)
        assert check_operands(get_accumulator("exact"), self.q(), self.q()).g is None
