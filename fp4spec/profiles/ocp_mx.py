"""OCP Microscaling Formats (MX) v1.0 (September 2023), section 6.3, as fp4spec reads it.

The specification fixes the floor scale rule and RNE elements clamped to the max normal; it
leaves zero blocks, NaN/Inf blocks and the exact fp32 arithmetic open. The choices below for
those are fp4spec's (the "exact" reading: the scale is an integer exponent, the elements
are divided by an exact power of two), following gfloat, TOSA and microxcaling where they
agree (zero block -> 2^-127) and torchao's NaN byte 0xFF for a non-finite block.
"""

from .policy import Profile

PROFILE = Profile(
    name="ocp",
    title="OCP Microscaling Formats (MX) v1.0",
    source="ocp-microscaling-formats-mx-v1-0-spec-final.pdf, section 6.3",
    structures=("mx",),
    policies={
        "mx_default_scale_rule": "floor",
        "mx_nonfinite_block": "nan_scale",
        "mx_element_scaling": "exact",
        "mx_rceil_descale": "mul_reciprocal",
        "element_rounding": "rne",
        "element_nan": "zero",
        "element_overflow": "saturate",
        "e8m0_cast": "exponent_bits",
    },
)
