"""PyTorch torchao (prototype mx_formats), CPU eager path.

Sources: torchao/prototype/mx_formats/mx_tensor.py ``to_mx`` (FLOOR, CEIL, EVEN; RCEIL via
``_to_mx_rceil``), torchao/prototype/mx_formats/nvfp4_tensor.py ``nvfp4_quantize`` with
``per_tensor_amax_to_scale``, torchao/prototype/custom_fp_utils.py (torchao 0.18.0).

Modelled: RCEIL multiplies a NaN block by its NaN descale, so every element of the block is
NaN (``mx_element_scaling="torchao"``); its bit-level FP4/FP6 cast gives unspecified bits for
NaN, and which NaN an FP8 element gets depends on the host's NaN propagation
(``element_nan="unspecified"``: those positions are don't-care in conformance).

Not modelled, known torchao bugs that ``fp4spec conform`` names when it sees them: the RCEIL
eager path takes ``ceil(torch.log2(d))`` in floating point, which is one too small when d lies
a few ulps above a power of two; ``nvfp4_quantize`` divides by a zero per-tensor scale when
the tensor amax is 0 or below about 2688 * 2^-149 (the block scales become NaN, 0xFF on x86).
"""

from .policy import Profile

PROFILE = Profile(
    name="torchao",
    title="PyTorch torchao prototype mx_formats (CPU eager)",
    source="pytorch/ao torchao 0.18.0 mx_tensor.py, nvfp4_tensor.py",
    structures=("mx", "two_level"),
    policies={
        "mx_default_scale_rule": "floor",
        "mx_nonfinite_block": "nan_only",
        "mx_element_scaling": "torchao",
        "mx_rceil_descale": "divide",
        "nv_scale_chain": "torchao",
        "nv_block_scale_floor": "e4m3_min_normal",
        "nv_zero_global_amax": "nan",
        "nv_negative_zero": "preserve",
        "nv_dequant_order": "q*(g*s)",
        "nv_block_scale_op": "divide",
        "nv_zero_scale_elements": "saturate",
        "nv_4over6_error_sum": "sequential",
        "nv_4over6": "no",
        "element_rounding": "rne",
        "element_nan": "unspecified",
        "element_overflow": "saturate",
        "e4m3_overflow": "saturate",
        "e8m0_cast": "exponent_bits",
    },
)
