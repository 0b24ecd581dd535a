"""MIT's fouroversix, as its PyTorch reference quantizers compute (PyPI ``fouroversix`` 1.0.5).

Source: ``fouroversix/quantize/pytorch/reference.py`` (``quantize_to_fp4``,
``quantize_to_nvfp4``, ``select_intfloat``), ``fouroversix/utils.py`` (``DataType``,
``ScaleRule``), read in the 1.0.5 sdist and at mit-han-lab/fouroversix@dadfad6, where the
IF4 path is unchanged. The IF4 algorithm itself is :mod:`fp4spec.if4`; this profile drives
the ``if4`` scheme.

Not modelled (fouroversix's departures, with their smallest inputs in docs/divergences.md):
NaN/Inf input (meaningless codes), tensors with amax below 2688 / FLT_MAX (NaN block scales)
and values rounding to 8 under a subnormal block scale (code ``0x8``).
"""

from . import Profile

PROFILE = Profile(
    name="fouroversix",
    title="MIT fouroversix (PyTorch reference quantizers)",
    source="mit-han-lab/fouroversix 1.0.5 quantize/pytorch/reference.py (@ dadfad6)",
    structures=("if4",),
    policies={
        "nv_zero_global_amax": "zero",
        "nv_negative_zero": "positive",
        "element_rounding": "rne",
        "element_overflow": "saturate",
        "e4m3_overflow": "saturate",
        "if4_error_sum": "torch_cpu",
    },
)
