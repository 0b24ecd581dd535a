"""NVIDIA TransformerEngine NVFP4, as its Python reference computes it.

Source: transformer_engine/pytorch/custom_recipes/reference_nvfp4.py
(``_quantize_blockwise_reference`` and ``_quantize_blockwise_4over6_reference``, read at
commit 1498424), the oracle its CUDA kernels are tested against with atol = rtol = 0, and
transformer_engine/common/cast/nvfp4/core_nvfp4.cuh. One deliberate departure from that
Python file: a zero or non-finite global amax gives S_enc = 1, as the kernel comment says
("If global amax is 0 or infinity, return 1"); the Python file only replaces S_enc == 0.
"""

from .policy import Profile

PROFILE = Profile(
    name="te",
    title="NVIDIA TransformerEngine (NVFP4 reference)",
    source="NVIDIA/TransformerEngine reference_nvfp4.py @ 1498424",
    structures=("two_level",),
    policies={
        "nv_scale_chain": "te",
        "nv_block_scale_floor": "none",
        "nv_zero_global_amax": "one",
        "nv_negative_zero": "positive",
        "nv_dequant_order": "(q*s)*g",
        "nv_block_scale_op": "mul_reciprocal",
        "nv_zero_scale_elements": "saturate",
        "nv_4over6_error_sum": "sequential",
        "nv_4over6": "yes",
        "element_rounding": "rne",
        "element_nan": "zero",
        "element_overflow": "saturate",
        "e4m3_overflow": "saturate",
    },
)
