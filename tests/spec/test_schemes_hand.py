"""Hand-computed blocks for every scheme: the normative reference and the emulator against
values derived on paper (exact rationals, with binary32 rounding written out where the
specification is float32 arithmetic)."""

from fractions import Fraction

import numpy as np
import pytest

import fp4spec
from fp4spec.block_schemes import get_scheme
from fp4spec.api.block_scaling import quantize
from fp4spec.scaling import (
    dequantize_reference,
    mx_scale_exponent,
    quantize_block_mx,
    quantize_reference,
    tree_sum_16,
    two_level_block_scale,
    two_level_element_multiplier,
    two_level_tensor_scale,
)

F32 = np.float32
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def rne32(q: Fraction) -> Fraction:
    """Round a positive rational in the binary32 normal range to nearest, ties to even."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (e - 23)
    n, rem = divmod(q / ulp, 1)
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2):
        n += 1
    return n * ulp


def both(x, scheme, **kw):
    """quantize through the emulator and the reference; they must agree; return the emulator's."""
    s = get_scheme(scheme) if isinstance(scheme, str) else scheme
    q = quantize(x, s, **kw)
    assert q.equals(quantize_reference(x, s, **kw))
    d = fp4spec.dequantize(q)
    r = dequantize_reference(q)
    assert np.array_equal(np.isnan(d), np.isnan(r)) and np.array_equal(d[~np.isnan(d)], r[~np.isnan(r)])
    return q


def row(*values, n=16):
    out = np.zeros(n, np.float32)
    out[:len(values)] = values
    return out


# =====================================================================================
# MX
# =====================================================================================

# schemes.md section 2 worked example, E2M1: amax -> (e, E2M1 value of amax / 2^e) per rule
WORKED = {
    1.0: {"floor": (-2, 4.0), "ceil": (-2, 4.0), "even": (-2, 4.0), "rceil": (-2, 4.0)},
    1.25: {"floor": (-2, 4.0), "ceil": (-1, 2.0), "even": (-2, 4.0), "rceil": (-2, 4.0)},
    1.5: {"floor": (-2, 6.0), "ceil": (-1, 3.0), "even": (-2, 6.0), "rceil": (-2, 6.0)},
    1.75: {"floor": (-2, 6.0), "ceil": (-1, 4.0), "even": (-1, 4.0), "rceil": (-1, 4.0)},
    3.0: {"floor": (-1, 6.0), "ceil": (0, 3.0), "even": (-1, 6.0), "rceil": (-1, 6.0)},
    4.0: {"floor": (0, 4.0), "ceil": (0, 4.0), "even": (0, 4.0), "rceil": (0, 4.0)},
    6.0: {"floor": (0, 6.0), "ceil": (1, 3.0), "even": (0, 6.0), "rceil": (0, 6.0)},
    6.5: {"floor": (0, 6.0), "ceil": (1, 3.0), "even": (0, 6.0), "rceil": (1, 3.0)},
    7.0: {"floor": (0, 6.0), "ceil": (1, 4.0), "even": (1, 4.0), "rceil": (1, 4.0)},
    # amax just below 2: floor keeps 2^-2 (7.9999995 clips to 6); the others go up a binade
    float(np.nextafter(F32(2), F32(0))): {"floor": (-2, 6.0), "ceil": (-1, 4.0), "even": (-1, 4.0),
                                          "rceil": (-1, 4.0)},
}


@pytest.mark.parametrize("amax", list(WORKED))
@pytest.mark.parametrize("rule", ["floor", "ceil", "even", "rceil"])
def test_worked_example_e2m1(amax, rule):
    e_want, value_want = WORKED[amax][rule]
    s = get_scheme("mxfp4", scale_rule=rule)
    assert mx_scale_exponent(F32(amax), s.element, rule, s.policies) == e_want
    x = row(amax, n=32)[None]
    q = both(x, s)
    assert q.scales[0, 0] == e_want + 127
    assert E2M1[q.codes[0, 0]] == value_want


def test_e4m3_rceil_and_ceil_differ():
    """pytorch/ao#2035: amax 150, E4M3 elements: rceil ceil(log2(150/448)) = -1 -> 126;
    OCP-style ceil ceil(log2 150) - 8 = 0 -> 127; floor floor(log2 150) - 8 = -1 -> 126."""
    x = row(150.0, n=32)[None]
    assert both(x, get_scheme("mxfp8_e4m3", scale_rule="rceil")).scales[0, 0] == 126
    assert both(x, get_scheme("mxfp8_e4m3", scale_rule="ceil")).scales[0, 0] == 127
    assert both(x, "mxfp8_e4m3").scales[0, 0] == 126


def test_ties_after_scaling_go_to_even():
    # amax 5: X = 2^(2 - 2) = 1; 5 ties 4|6 -> 4, 3.5 ties 3|4 -> 4, 2.5 -> 2, 1.75 -> 2,
    # 1.25 -> 1, 0.75 -> 1, 0.25 -> 0, -5 -> -4
    x = row(5.0, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25, -5.0, n=32)[None]
    q = both(x, "mxfp4")
    assert q.scales[0, 0] == 127
    assert list(q.codes[0, :8]) == [6, 6, 4, 4, 2, 2, 0, 14]
    # the same pattern 2^-20 lower gives the same codes with scale 2^-20
    q2 = both(x * F32(2.0 ** -20), "mxfp4")
    assert q2.scales[0, 0] == 107 and np.array_equal(q2.codes, q.codes)


def test_mx_amax_significands_and_elements():
    """E4M3 elements, amax = 448 * m: floor keeps e = 0 for m in [1, 2); the scaled max clips to 448."""
    for m, code in [(1.0, 0x7E), (1.5, 0x7E), (1.75, 0x7E), (float(np.nextafter(F32(2), F32(0))), 0x7E)]:
        q = both(row(256.0 * m, 3.0, -0.001953125, n=32)[None], "mxfp8_e4m3")
        assert q.scales[0, 0] == 127  # floor(log2 (256 m)) - 8 = 0
        assert q.codes[0, 0] == (code if m >= 1.75 else {1.0: 0x78, 1.5: 0x7C}[m])
        assert q.codes[0, 1] == 0x44 and q.codes[0, 2] == 0x81  # 3.0 = 1.5 * 2^1; -2^-9 the smallest subnormal


def test_zero_block():
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = -0.0
    for rule in ("floor", "ceil", "even", "rceil"):
        q = both(x, get_scheme("mxfp4", scale_rule=rule))
        assert q.scales[0, 0] == 0x00  # 2^-127
        assert q.codes[0, 3] == 0x8 and (np.delete(q.codes[0], 3) == 0).all()  # -0 keeps its sign
        assert (fp4spec.dequantize(q) == 0).all()


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_nonfinite_block_ocp(special):
    x = np.ones((1, 64), np.float32)
    x[0, 5] = special
    x[0, 6] = -2.0
    q = both(x, "mxfp4")
    assert q.scales[0, 0] == 0xFF and q.scales[0, 1] == 127 - 2 + 0  # second block: amax 1 -> e = -2
    assert q.codes[0, 6] == 0x8 and q.codes[0, 0] == 0 and q.codes[0, 5] == 0  # +-0, NaN -> +0
    d = fp4spec.dequantize(q)
    assert np.isnan(d[0, :32]).all() and (d[0, 32:] == 1.0).all()


# +Inf, -Inf, +NaN, -NaN (bit pattern 0xFFC00000), 1, -2, +0, -0: the NaN-scale block's codes
_NAN_BLOCK = np.array([np.inf, -np.inf, np.nan, np.uint32(0xFFC00000).view(np.float32), 1.0, -2.0, 0.0, -0.0],
                      np.float32)


@pytest.mark.parametrize("name, pos_nan", [("mxfp8_e4m3", 0x7F), ("mxfp8_e5m2", 0x7E)])
@pytest.mark.parametrize("profile", ["ocp", "torchao"])
def test_nan_scale_block_nan_codes_take_the_sign_of_x(name, pos_nan, profile):
    """In a NaN-scale block a NaN scaled value takes x's sign bit: +-Inf -> +-NaN code (not the
    host's sign of the invalid Inf * 0, which is -NaN on x86), a NaN keeps its sign; finite x
    give +-0 by their sign. (torchao: the NaN makes the scale NaN, the Infs are then Inf * 0.)"""
    assert np.signbit(_NAN_BLOCK[3]) and not np.signbit(_NAN_BLOCK[2])
    x = np.resize(_NAN_BLOCK, 32)[None]
    s = get_scheme(name, profile=profile)
    want = [pos_nan, pos_nan | 0x80, pos_nan, pos_nan | 0x80, 0x00, 0x80, 0x00, 0x80] * 4
    codes, scale = quantize_block_mx(x[0], s)
    assert scale == 0xFF and codes == want
    q = both(x, s)
    assert q.scales[0, 0] == 0xFF and q.codes[0].tolist() == want
    assert (both(-x, s).codes == q.codes ^ 0x80).all()  # quantize(-x) == -quantize(x)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2"])
def test_nan_scale_block_without_element_nan(name):
    """Elements without NaN: a NaN scaled value is +0 whatever x's sign; +-0 for finite x."""
    q = both(np.resize(_NAN_BLOCK, 32)[None], name)
    neg0 = 1 << (q.scheme.element.bits - 1)
    assert q.scales[0, 0] == 0xFF and q.codes[0].tolist() == [0, 0, 0, 0, 0, neg0, 0, neg0] * 4


def test_nonfinite_block_torchao_profile():
    """torchao poisons only NaN blocks; an Inf amax is read as 2^128 (FLOOR: 128 - 2 -> 253),
    RCEIL saturates to 254; the Inf element saturates to 6 and finite ones vanish."""
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = [np.inf, 1.0]
    q = both(x, get_scheme("mxfp4", profile="torchao"))
    assert q.scales[0, 0] == 253 and list(q.codes[0, :2]) == [7, 0]
    q = both(x, get_scheme("mxfp4", profile="torchao", scale_rule="rceil"))
    assert q.scales[0, 0] == 254 and list(q.codes[0, :2]) == [7, 0]
    x[0, 2] = np.nan
    assert both(x, get_scheme("mxfp4", profile="torchao")).scales[0, 0] == 255


def test_subnormal_inputs():
    # amax 2^-125: e = -125 - 2 = -127 (code 0). OCP: x * 2^127 -> 4, 2, 2^-22, -1; torchao
    # divides by 2^-126 instead (its scale is clamped to the smallest normal) -> 2, 1, 2^-23, -0.5.
    x = row(2.0 ** -125, 2.0 ** -126, 2.0 ** -149, -(2.0 ** -127), n=32)[None]
    q = both(x, "mxfp4")
    assert q.scales[0, 0] == 0 and list(q.codes[0, :4]) == [6, 4, 0, 10]
    q = both(x, get_scheme("mxfp4", profile="torchao"))
    assert q.scales[0, 0] == 0 and list(q.codes[0, :4]) == [4, 2, 0, 9]
    # a block of fp32 subnormals only: floor(log2 2^-140) - 2 = -142 -> clamped to -127
    q = both(row(2.0 ** -140, 3 * 2.0 ** -149, n=32)[None], "mxfp4")
    assert q.scales[0, 0] == 0 and list(q.codes[0, :2]) == [0, 0]  # 2^-13 and 3 * 2^-22 round to 0


def test_rceil_scale_byte_zero_torchao_multiplies_by_one():
    # amax 3 * 2^-128: d = amax / 6 <= 2^-127 -> code 0. OCP: x * 2^127 = 1.5 -> code 3;
    # torchao / TE exp2f_rcp: code 0 multiplies by 1.0 -> 3 * 2^-128 -> code 0.
    x = row(3 * 2.0 ** -128, n=32)[None]
    assert both(x, get_scheme("mxfp4", scale_rule="rceil")).codes[0, 0] == 3
    assert both(x, get_scheme("mxfp4", scale_rule="rceil", profile="torchao")).codes[0, 0] == 0


def test_high_dynamic_range_across_blocks():
    amaxes = [2.0 ** -100, 1.0, 2.0 ** 100, float(np.finfo(np.float32).max)]
    x = np.concatenate([row(a, -a / 2, n=32) for a in amaxes])[None]
    q = both(x, "mxfp4")
    assert list(q.scales[0]) == [25, 125, 225, 252]
    assert list(q.codes[0, ::32]) == [6, 6, 6, 7] and list(q.codes[0, 1::32]) == [12, 12, 12, 14]
    d = fp4spec.dequantize(q)[0]
    assert d[0] == 2.0 ** -100 and d[32] == 1.0 and d[64] == 2.0 ** 100 and d[96] == 6 * 2.0 ** 125


def test_quantize_block_mx_is_the_unit():
    s = get_scheme("mxfp8_e5m2")
    codes, scale = quantize_block_mx([57344.0, -1.0, 0.0] + [0.0] * 29, s)
    assert scale == 127 and codes[:3] == [0x7B, 0xBC, 0x00]


def test_mx_dequantize_hand():
    x = row(6.0, -0.5, n=32)[None] * F32(8)
    q = both(x, "mxfp4")
    assert q.scales[0, 0] == 130 and list(q.codes[0, :2]) == [7, 9]
    assert list(fp4spec.dequantize(q)[0, :2]) == [48.0, -4.0]


# =====================================================================================
# NVFP4, TransformerEngine chain
# =====================================================================================

def test_nvfp4_te_chain_by_hand():
    """Two blocks, global amax 6.

    S_enc = 2688/6 = 448 (exact); fp32(1/6) = 0x3E2AAAAB; mult = fp32(448 * fp32(1/6))
    = 74.66667175...; block A (amax 6): S_dec_b = fp32(6 * mult) = 448 + 2^-15 -> clamp 448
    -> E4M3 0x7E; block B (amax 0.75): fp32(0.75 * mult) = 56 + 2^-18 -> E4M3 56 = 0x66.
    S_dec = fp32(1/448); S_enc_b(A) = 1/fp32(448 * S_dec) = 1; S_enc_b(B) = 1/fp32(56 * S_dec) = 8.
    """
    s = get_scheme("nvfp4")
    rcp6 = rne32(Fraction(1, 6))
    mult = rne32(448 * rcp6)
    s_dec = rne32(Fraction(1, 448))
    assert rcp6 == Fraction(0x2AAAAB + (1 << 23), 1 << 26)
    assert rne32(6 * mult) == 448 + Fraction(1, 2 ** 15) and rne32(Fraction(3, 4) * mult) == 56 + Fraction(1, 2 ** 18)
    assert rne32(448 * s_dec) == 1 and rne32(56 * s_dec) == Fraction(1, 8)

    ts = two_level_tensor_scale(F32(6.0), s)
    assert ts.encode == 448 and Fraction(float(ts.decode)) == s_dec
    assert two_level_block_scale(F32(6.0), ts, s) == 0x7E
    assert two_level_block_scale(F32(0.75), ts, s) == 0x66
    assert two_level_element_multiplier(0x7E, ts, s) == 1.0 and two_level_element_multiplier(0x66, ts, s) == 8.0

    x = np.concatenate([row(6, -3, 1, 0.5), row(0.75, -0.25, 0.3)])[None]
    q = both(x, s)
    assert list(q.scales[0]) == [0x7E, 0x66] and Fraction(float(q.global_scale)) == s_dec
    assert list(q.codes[0, :4]) == [7, 13, 2, 1]  # 6, -3, 1, 0.5 (S_enc_b = 1)
    assert list(q.codes[0, 16:19]) == [7, 12, 4]  # 6, -2, 2.4 -> 2
    # dequantize: fp32(fp32(q * s) * S_dec); 2688 * S_dec = 6 + 2.68e-7 -> 6 + 2^-21
    d = fp4spec.dequantize(q)[0]
    assert Fraction(float(d[0])) == rne32(2688 * s_dec) == 6 + Fraction(1, 2 ** 21)
    assert Fraction(float(d[16])) == rne32(336 * s_dec)


def test_nvfp4_tiny_block_te_zero_scale_vs_torchao_floor():
    """Global amax 1, block amax 2^-20: S_dec_b = 448 * 2^-20 < 2^-10 -> E4M3 0. TE: S_enc_b =
    min(1/0, FLT_MAX) = FLT_MAX, the codes saturate to +-6 and dequantize to 0; -0.0 gets the
    +0 code (TE's reference). torchao floors the scale at 2^-6 (0x08) and keeps small codes."""
    x = np.concatenate([row(1.0), row(2.0 ** -20, -(2.0 ** -21), 0.0, -0.0)])[None]
    q = both(x, "nvfp4")
    assert list(q.scales[0]) == [0x7E, 0x00] and list(q.codes[0, 16:20]) == [7, 15, 0, 0]
    assert (fp4spec.dequantize(q)[0, 16:] == 0).all()
    q = both(x, get_scheme("nvfp4", profile="torchao"))
    assert list(q.scales[0]) == [0x7E, 0x08] and list(q.codes[0, 16:20]) == [0, 8, 0, 8]


def test_nvfp4_scale_tie_at_2_pow_minus_10():
    """Global amax 448: S_enc = 6, mult = fp32(6 * fp32(1/6)) = 1, so S_dec_b = vec_max.
    2^-10 is the tie between E4M3 0 and 2^-9 and goes to the even code 0x00; one ulp more gives 0x01."""
    up = float(np.nextafter(F32(2.0 ** -10), F32(1)))
    x = np.concatenate([row(448.0), row(2.0 ** -10), row(up)])[None]
    q = both(x, "nvfp4")
    assert q.global_scale == F32(1) / F32(6)
    assert list(q.scales[0]) == [0x7E, 0x00, 0x01]
    assert q.codes[0, 16] == 7  # zero scale: saturated
    assert q.codes[0, 32] == 5  # 2^-10 * 1/fp32(2^-9 * fp32(1/6)) = 3


def test_nvfp4_zero_tensor():
    x = np.zeros((1, 32), np.float32)
    x[0, 1] = -0.0
    q = both(x, "nvfp4")
    assert q.global_scale == 1.0 and (q.scales == 0).all() and (q.codes == 0).all()  # TE: -0.0 -> +0 code
    assert (fp4spec.dequantize(q) == 0).all()
    q = both(x, get_scheme("nvfp4", profile="torchao"))
    assert q.global_scale == 0.0 and (q.scales == 0x7F).all() and (q.codes == 0).all()
    assert np.isnan(fp4spec.dequantize(q)).all()  # torchao divides by a zero tensor scale


def test_nvfp4_nan_and_inf_blocks():
    # A NaN makes the global amax NaN -> S_enc = 1 (TE kernel rule); the NaN block's scale is
    # the E4M3 NaN 0x7F and its codes are 0; block A: S_dec_b = fp32(6 * fp32(1/6)) = 1 -> 0x38.
    x = np.concatenate([row(6.0), row(np.nan, 1.0)])[None]
    q = both(x, "nvfp4")
    assert q.global_scale == 1.0 and list(q.scales[0]) == [0x38, 0x7F] and (q.codes[0, 16:] == 0).all()
    assert np.isnan(fp4spec.dequantize(q)[0, 16:]).all() and fp4spec.dequantize(q)[0, 0] == 6.0
    # Inf: S_enc = 1; the Inf block's S_dec_b = Inf -> FLT_MAX -> 448 (0x7E); +-Inf -> +-6
    x = np.concatenate([row(6.0, 1.0), row(np.inf, -np.inf, 1.0)])[None]
    q = both(x, "nvfp4")
    assert list(q.scales[0]) == [0x38, 0x7E] and list(q.codes[0, 16:19]) == [7, 15, 0]
    assert list(fp4spec.dequantize(q)[0, 16:18]) == [2688.0, -2688.0]


def test_nvfp4_2d_tile_shares_the_tile_amax():
    w = np.full((16, 32), 0.5, np.float32)
    w[7, 3] = 6.0  # tile (0, 0) amax 6; tile (0, 1) amax 0.5
    q = both(w, "nvfp4_2d")
    assert (q.scales[:, 0] == 0x7E).all() and (q.scales[:, 1] == q.scales[0, 1]).all()
    assert (np.delete(q.codes[:, :16].ravel(), 7 * 16 + 3) == 1).all()  # 0.5 stays 0.5
    q1 = both(w, "nvfp4")  # 1D: only row 7's first block sees the 6
    assert q1.scales[7, 0] == 0x7E and q1.scales[0, 0] != 0x7E


# =====================================================================================
# 4over6
# =====================================================================================

def test_4over6_map_to_4_wins_with_bound_256():
    """Block [4, 3, 2, 1, 0.5], global amax 4, Emax 256: S_enc = 1536/4 = 384, base = 256 (+1 ulp);
    map-to-6 scale 256 scales x by 1.5: 3 -> 4.5 -> 4 and 0.5 -> 0.75 -> 1 (errors); map-to-4
    scale 384 (0x7C) is exact: error 0 < error of map-to-6, so map-to-4 wins."""
    x = row(4, 3, 2, 1, 0.5)[None]
    q = both(x, get_scheme("nvfp4", scale_rule="4over6", scale_max=256))
    assert q.scales[0, 0] == 0x7C and list(q.codes[0, :5]) == [6, 5, 4, 2, 1]
    assert list(fp4spec.dequantize(q)[0, :5]) == [4, 3, 2, 1, 0.5]


def test_4over6_with_bound_448_saturates_both_candidates_to_map_to_6():
    # Emax 448: base = 448, map-to-4 = 672 clamps to 448 too; equal errors -> map-to-6
    x = row(4, 3, 2, 1, 0.5)[None]
    q = both(x, get_scheme("nvfp4", scale_rule="4over6"))
    assert q.scales[0, 0] == 0x7E and list(q.codes[0, :5]) == [7, 6, 5, 3, 2]
    assert quantize(x, "nvfp4").equals(quantize(x, "nvfp4")) and list(quantize(x, "nvfp4").codes[0, :5]) == [7, 6, 5, 3, 2]


def test_4over6_zero_block_tie_chooses_map_to_6():
    x = np.concatenate([row(4.0), np.zeros(16, np.float32)])[None]
    q = both(x, get_scheme("nvfp4", scale_rule="4over6", scale_max=256))
    assert q.scales[0, 1] == 0x00 and (q.codes[0, 16:] == 0).all()


def test_tree_sum_16_order():
    """TE's warp-reduction order, not a sequential sum: 2^24 + fifteen 1.0 gives 2^24 + 14
    (pairs first), a sequential fp32 sum stays at 2^24."""
    errs = [F32(2 ** 24)] + [F32(1.0)] * 15
    assert tree_sum_16(errs) == F32(2 ** 24 + 14)
    acc = F32(0)
    for e in errs:
        acc = F32(acc + e)
    assert acc == F32(2 ** 24)


# =====================================================================================
# UFP4 and NV-INT4 (two-level structure with 3.5 and 7 in place of 6)
# =====================================================================================

def test_ufp4_hand():
    """Global amax 3.5: S_enc = 1568/3.5 = 448, S_dec_b ~ 448 -> 0x7E, S_enc_b = 1; E1M2 grid
    {0, 0.5, ..., 3.5}: 1.75 ties 1.5|2 -> 2 (even index 4), 0.25 ties 0|0.5 -> 0, 0.75 -> 1."""
    x = row(3.5, 1.75, 0.25, -1.0, 0.75)[None]
    q = both(x, "ufp4")
    assert list(q.scales[0]) == [0x7E] and list(q.codes[0, :5]) == [7, 4, 0, 10, 2]
    assert two_level_tensor_scale(F32(3.5), get_scheme("ufp4")).encode == 448


def test_nvint4_hand():
    """Global amax 7: S_enc = 3136/7 = 448 -> 0x7E, S_enc_b = 1; INT4 symmetric (-7..7, two's
    complement codes): -3.5 ties -3|-4 -> -4 (0xC), 2.5 -> 2, 0.5 -> 0, 1.5 -> 2."""
    x = row(7, -3.5, 2.5, 0.5, 1.5, -7.0)[None]
    q = both(x, "nvint4")
    assert list(q.scales[0]) == [0x7E] and list(q.codes[0, :6]) == [7, 0xC, 2, 0, 2, 0x9]  # -7 = 0x9


def test_ufp4_overrides_are_honoured():
    x = row(3.0, 1.5)[None]
    s = get_scheme("ufp4", element_max=3.0)  # the block max maps to 3 instead of 3.5
    q = both(x, s)
    assert list(q.codes[0, :2]) == [6, 3]  # E1M2 3.0 and 1.5
    assert both(np.tile(row(1.0, n=32), (1, 1)), get_scheme("ufp4", block_size=32)).scales.shape == (1, 1)


@pytest.mark.parametrize("name,top,tie,want", [
    # e2m3 (bias 1): 1.0625 ties 1.0 = 0b0_01_000 (0x08, even) | 1.125 (0x09) -> 0x08
    ("mxfp6_e2m3", 7.5, 1.0625, 0x08),
    # e3m2 (bias 3): 5.5 ties 5 = 1.25 * 4 = 0b0_101_01 (0x15, odd) | 6 = 0b0_101_10 (0x16) -> 0x16
    ("mxfp6_e3m2", 28.0, 5.5, 0x16),
    # e4m3 (bias 7): 17 ties 16 = 0b0_1011_000 (0x58, even) | 18 (0x59) -> 0x58
    ("mxfp8_e4m3", 448.0, 17.0, 0x58),
    # e5m2 (bias 15): 7.5 ties 7 = 1.75 * 4 = 0b0_10001_11 (0x47, odd) | 8 = 0b0_10010_00 (0x48) -> 0x48
    ("mxfp8_e5m2", 57344.0, 7.5, 0x48),
])
def test_mx_element_formats_by_hand(name, top, tie, want):
    """amax = the element max: floor(log2 max) = emax, so X = 1 and elements are unscaled; a
    midpoint goes to the neighbour with the even significand; 1024 times larger: scale code +10."""
    s = get_scheme(name)
    x = row(top, tie, -top, n=32)[None]
    q = both(x, s)
    assert q.scales[0, 0] == 127
    assert s.element.values[q.codes[0, 0]] == top and s.element.values[q.codes[0, 2]] == -top
    assert q.codes[0, 1] == want
    q2 = both(x * F32(1024), s)
    assert q2.scales[0, 0] == 137 and np.array_equal(q2.codes, q.codes)
