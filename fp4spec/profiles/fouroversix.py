"""MIT's fouroversix, as its PyTorch reference quantizers compute (PyPI ``fouroversix`` 1.0.5).

Source: ``fouroversix/quantize/pytorch/reference.py`` (``quantize_to_fp4``,
``quantize_to_nvfp4``, ``quantize_to_nvint4``, ``quantize_to_mxfp4``, ``select_fouroversix``,
``select_intfloat``) and ``fouroversix/utils.py`` (``DataType``, ``ScaleRule``), read in the
1.0.5 sdist and at mit-han-lab/fouroversix@dadfad6. It drives:

* ``if4`` -- the IF4 algorithm itself is :mod:`fp4spec.if4`.
* two-level schemes -- NVFP4 (``static_6``: ``nvfp4``; ``static_4``: ``element_max=4``;
  ``mse``/``mae``/``abs_max``: ``scale_rule="4over6"`` with ``scale_max=256`` and that
  ``error_mode``) and NVINT4 (``nvint4``): TransformerEngine's chain, except that the block scale
  is always ``fp32(fp32(vec_max / max) * S_enc)``, a zero block scale zeroes its elements, an
  all-zero tensor has S_dec = 0, and the 4over6 errors are ``torch.sum``'s (1 x 16 blocks only).
* MX -- MXFP4 with ``scale_rule="rceil"`` (``static_6``): the exponent of fp32(amax / 6),
  plus one if its mantissa is not zero.

Its own dequantization (FP16 products of elements and scales, then ``* amax / 2688``) is not
modelled: ``nv_dequant_order`` names TransformerEngine's order.

Not modelled (fouroversix's departures, with their smallest inputs in docs/divergences.md):
NaN/Inf input; tensors whose amax makes ``2688 / amax`` or ``1 / (S_dec * s)`` overflow (NaN
blocks); values rounding to 8 under a subnormal block scale (code ``0x8``); MX blocks with
amax <= 6 * 2^-127 (scale byte 1 where RCEIL gives 0).
"""

from .policy import Profile

PROFILE = Profile(
    name="fouroversix",
    title="MIT fouroversix (PyTorch reference quantizers)",
    source="mit-han-lab/fouroversix 1.0.5 quantize/pytorch/reference.py (@ dadfad6)",
    structures=("if4", "two_level", "mx"),
    policies={
        "mx_default_scale_rule": "rceil",
        "mx_nonfinite_block": "nan_scale",
        "mx_element_scaling": "exact",
        "mx_rceil_descale": "divide",
        "nv_scale_chain": "te",
        "nv_block_scale_floor": "none",
        "nv_block_scale_op": "divide",
        "nv_zero_scale_elements": "zero",
        "nv_zero_global_amax": "zero",
        "nv_negative_zero": "positive",
        "nv_dequant_order": "(q*s)*g",
        "nv_4over6": "yes",
        "nv_4over6_error_sum": "torch_cpu",
        "element_rounding": "rne",
        "element_overflow": "saturate",
        "e4m3_overflow": "saturate",
    },
)
