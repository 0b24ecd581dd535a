"""The policy vocabulary of vendor profiles and the :class:`Profile` record (see :mod:`fp4spec.profiles`)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

#: Every policy a profile may set: name -> (what it decides, the allowed choices).
#: Choices are short strings; the algorithms switch on them.
POLICIES: Mapping[str, tuple[str, tuple[str, ...]]] = MappingProxyType({
    # -- MX (E8M0 block scale) ----------------------------------------------------------------
    "mx_default_scale_rule": (
        "E8M0 scale rule used when none is given",
        ("floor", "ceil", "rceil", "even")),
    "mx_nonfinite_block": (
        "scale of a block whose amax is NaN or Inf: 'nan_scale' = 0xFF for NaN and Inf; "
        "'nan_only' = 0xFF for NaN, an Inf amax goes through the rule as 2^128",
        ("nan_scale", "nan_only")),
    "mx_element_scaling": (
        "how elements are scaled: 'exact' = fp32(x * 2^-e); 'torchao' = fp32(x / max(2^e, 2^-126)) "
        "for floor/ceil/even and fp32(x * r) with r = 1.0 for scale byte 0 for rceil (a NaN block: "
        "r = NaN, every element NaN)",
        ("exact", "torchao")),
    "mx_rceil_descale": (
        "rceil: how amax/max_elem is formed in fp32",
        ("mul_reciprocal", "divide")),
    # -- NVFP4 two-level (E4M3 block scale + FP32 tensor scale) ---------------------------------
    "nv_scale_chain": (
        "fp32 operation order of the two-level scales: 'te' = S_enc = Emax*max/amax, "
        "S_dec_b = amax*(S_enc*(1/max)), S_enc_b = 1/(s*S_dec); 'torchao' = pts = amax/(Emax*max), "
        "s = (amax/max)/pts, r = (1/pts)/s",
        ("te", "torchao")),
    "nv_block_scale_floor": (
        "lower bound applied to the block scale before the E4M3 cast",
        ("none", "e4m3_min_normal")),
    "nv_block_scale_op": (
        "'te' chain, scale rule 'amax': the block scale before its cast: 'mul_reciprocal' = "
        "fp32(vec_max * fp32(S_enc * fp32(1/max))) (TE's kernel path); 'divide' = fp32(fp32(vec_max / max) * S_enc) "
        "(as TE's 4over6 candidates)",
        ("mul_reciprocal", "divide")),
    "nv_zero_scale_elements": (
        "'te' chain: elements of a block whose scale is 0: 'saturate' = multiplied by min(1/0, FLT_MAX) "
        "(non-zero values give +-max); 'zero' = multiplier 0 (every code +0)",
        ("saturate", "zero")),
    "nv_zero_global_amax": (
        "all-zero (or non-finite amax) tensor: 'one' = S_enc = 1; 'nan' = the chain divides by a "
        "zero tensor scale and the block scales are NaN; 'zero' = S_enc = 2688/0 = +Inf, S_dec = 0, "
        "every block scale 0",
        ("one", "nan", "zero")),
    "nv_negative_zero": (
        "element code of a scaled value that is exactly -0.0: 'preserve' = -0 code; "
        "'positive' = +0 code (negative values rounding to zero keep -0)",
        ("preserve", "positive")),
    "nv_dequant_order": (
        "fp32 order of dequantization: '(q*s)*g' or 'q*(g*s)'",
        ("(q*s)*g", "q*(g*s)")),
    "nv_4over6": (
        "4over6 candidate selection available",
        ("yes", "no")),
    "nv_4over6_error_sum": (
        "float32 order of a 1 x 16 row's 4over6 error: 'sequential' = element order (TE's loop); 'torch_cpu' = "
        "torch.sum over 16 on the CPU, (t_j + t_(j+8)) for j = 0..7 added in order",
        ("sequential", "torch_cpu")),
    # -- element conversion ---------------------------------------------------------------------
    "element_rounding": (
        "rounding of scaled elements",
        ("rne", "rna")),
    "element_nan": (
        "code of a NaN scaled element in a 4-bit format without NaN; 'unspecified' = any code (and, "
        "in a format with NaN, any NaN code): conformance treats those positions as don't-care",
        ("zero", "signed_zero", "max", "unspecified")),
    "element_overflow": (
        "finite scaled values beyond the element's max",
        ("saturate", "nan")),
    "e4m3_overflow": (
        "float -> E4M3 beyond 448 after rounding",
        ("saturate", "nan")),
    "e8m0_cast": (
        "float -> E8M0 cast of a value: 'rne' = nearest power of two (1.5 -> 2) on the exact value; "
        "'rne_subnormals_up' = the same from 2^-126 up, but x in (2^-127, 2^-126) -> 2^-126 and "
        "0 < x <= 2^-127 -> 2^-127 (through float32 subnormals); "
        "'exponent_bits' = no cast, the scale is built from an integer exponent",
        ("rne", "rne_subnormals_up", "exponent_bits")),
    "e8m0_underflow": (
        "float -> E8M0 of a positive value below the range: 'saturate' = 0x00 (2^-127), even where "
        "zero and overflows give NaN (encode(..., overflow='nan', underflow='saturate'))",
        ("saturate", "nan")),
    "e8m0_zero": (
        "float -> E8M0 of 0 and -0.0 (E8M0 has no zero)",
        ("nan", "min")),
    "int4_cast": (
        "float -> INT4: 'round_saturate'; 'truncate_wrap' (toward zero, modulo 16: 9.0 -> -7); "
        "'truncate_zero' (toward zero; outside -8..7, NaN and Inf -> 0)",
        ("round_saturate", "truncate_wrap", "truncate_zero")),
    "bf16_cast": (
        "float64 -> BF16: 'rne' = rounded once; 'via_float32' = to float32 first (a double rounding: "
        "1 + 2^-8 + 2^-30 -> 1.0)",
        ("rne", "via_float32")),
    # -- HiF4 -------------------------------------------------------------------------------------
    "hif4_element_arith": (
        "precision of the HiF4 element rounding |x| * REC * 2^(2-DE)",
        ("float64", "float32")),
    "hif4_zero_group": (
        "HiF4 all-zero group",
        ("scale_2^-48", "nan")),
})


#: Policies the block-scaling algorithms branch on (the rest are descriptive).
ALGORITHM_POLICIES = frozenset({
    "mx_nonfinite_block", "mx_element_scaling", "mx_rceil_descale", "nv_scale_chain",
    "nv_block_scale_floor", "nv_negative_zero", "nv_dequant_order", "nv_4over6",
    "nv_block_scale_op", "nv_zero_scale_elements", "nv_zero_global_amax", "nv_4over6_error_sum",
})


@dataclasses.dataclass(frozen=True)
class Profile:
    """One implementation's policy choices.

    Fields:
        name: the short name used as ``profile=`` (``"ocp"``, ``"te"``, ``"torchao"``,
            ``"ml_dtypes"``, ``"hif4"``).
        title: the implementation, in words.
        source: where the choices were read (document, repository and commit).
        structures: the scheme structures (``"mx"``, ``"two_level"``, ``"hif4"``, ``"if4"``) this
            profile can drive in :func:`fp4spec.quantize`; empty for element-only profiles.
        policies: policy name (a key of :data:`POLICIES`) -> choice.
    """

    name: str
    title: str
    source: str
    structures: tuple[str, ...]
    policies: Mapping[str, str]

    def __post_init__(self):
        for key, value in self.policies.items():
            if key not in POLICIES:
                raise ValueError(f"policies: {key!r} is not a known policy; known: {', '.join(POLICIES)}")
            allowed = POLICIES[key][1]
            if value not in allowed:
                raise ValueError(f"policies[{key!r}]: {value!r} is not one of {', '.join(map(repr, allowed))}")
        object.__setattr__(self, "policies", MappingProxyType(dict(self.policies)))

    def policy(self, key: str) -> str:
        """The choice for ``key`` (KeyError naming the profile if it has none)."""
        try:
            return self.policies[key]
        except KeyError:
            raise KeyError(f"profile {self.name!r} sets no policy {key!r}") from None


__all__ = ["ALGORITHM_POLICIES", "POLICIES", "Profile"]
