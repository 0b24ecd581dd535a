"""ml_dtypes (jax-ml/ml_dtypes) ``astype`` conversions, per release.

ml_dtypes has no block scaling; its profile records how its element and scale casts treat
the implementation-defined cases, for comparison. It cannot drive ``fp4spec.quantize``.

The profile describes the releases fp4spec allows (:data:`VERSIONS`). :data:`PROFILE` is
the newest, 0.7; :func:`policies_for` gives the policies of any allowed release.
What changed in 0.7.0 (:data:`CHANGED_IN_0_7`, observed on 0.5.1, 0.6.0 and 0.7.0):

* ``bf16_cast``: float64 -> bfloat16 rounds once; 0.5/0.6 went through float32 (double
  rounding: 1 + 2^-8 + 2^-30 -> 1.0, 0.7: 1 + 2^-7).
* ``e8m0_cast``: below 2^-126 the cast is RNE on the exact value too (x < 1.5 * 2^-127 ->
  0x00, from there 0x01); 0.5/0.6 rounded through float32 subnormals: 0 < x <= 2^-127 ->
  0x00 and every x in (2^-127, 2^-126) -> 0x01 (1.4 * 2^-127 -> 2^-126).
* ``int4_cast``: truncation toward zero, but a value outside -8..7 gives 0 (9.0 -> 0);
  0.5/0.6 wrapped modulo 16 (9.0 -> -7).

Unchanged: a positive value below 2^-127 gives 0x00 (``e8m0_underflow="saturate"``) while 0
and -0.0 give NaN 0xFF (``e8m0_zero="nan"``), so ``fp4spec.encode(x, "e8m0",
overflow="nan", underflow="saturate")`` is the ml_dtypes 0.7 cast. ml_dtypes 0.5.0 rounded
E8M0 ties to the even *code* (3.0 -> 2); fp4spec requires 0.5.1 or newer.
"""

from .policy import Profile

#: The ml_dtypes releases this profile describes (pyproject.toml allows exactly these).
VERSIONS = ">=0.5.1,<0.8"

#: Policies of ml_dtypes 0.7 (the newest allowed release).
POLICIES_0_7 = {
    "element_rounding": "rne",
    "element_nan": "signed_zero",
    "element_overflow": "saturate",
    "e4m3_overflow": "nan",
    "e8m0_cast": "rne",
    "e8m0_underflow": "saturate",
    "e8m0_zero": "nan",
    "int4_cast": "truncate_zero",
    "bf16_cast": "rne",
}

#: What 0.5.1 - 0.6.x did instead, policy by policy.
CHANGED_IN_0_7 = {
    "e8m0_cast": "rne_subnormals_up",
    "int4_cast": "truncate_wrap",
    "bf16_cast": "via_float32",
}


def _release(version: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        raise ValueError(f"version: {version!r} is not an ml_dtypes release such as '0.7.0'") from None
    return major, minor


def policies_for(version: str) -> dict:
    """The policies of the ml_dtypes release ``version`` (``"0.6.0"``); ValueError outside :data:`VERSIONS`."""
    release = _release(version)
    if not (0, 5) <= release < (0, 8) or version.startswith("0.5.0"):
        raise ValueError(f"version: ml_dtypes {version} is outside the releases this profile describes ({VERSIONS})")
    return dict(POLICIES_0_7) if release >= (0, 7) else {**POLICIES_0_7, **CHANGED_IN_0_7}


PROFILE = Profile(
    name="ml_dtypes",
    title="ml_dtypes astype casts (0.7; 0.5.1-0.6 differ in bf16_cast, e8m0_cast, int4_cast)",
    source="jax-ml/ml_dtypes 0.7.0, 0.6.0, 0.5.1 (float4_e2m1fn, float8_e4m3fn, float8_e8m0fnu, int4, bfloat16)",
    structures=(),
    policies=POLICIES_0_7,
)
