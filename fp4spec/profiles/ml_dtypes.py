"""ml_dtypes (jax-ml/ml_dtypes) ``astype`` conversions.

ml_dtypes has no block scaling; its profile records how its element and scale casts treat
the implementation-defined cases, for comparison. It cannot drive ``fp4spec.quantize``.
"""

from . import Profile

PROFILE = Profile(
    name="ml_dtypes",
    title="ml_dtypes astype casts",
    source="jax-ml/ml_dtypes 0.5/0.6 (float4_e2m1fn, float8_e4m3fn, float8_e8m0fnu, int4)",
    structures=(),
    policies={
        "element_rounding": "rne",
        "element_nan": "signed_zero",
        "element_overflow": "saturate",
        "e4m3_overflow": "nan",
        "e8m0_cast": "rne",
        "int4_cast": "truncate_wrap",
    },
)
