"""HiFloat4 golden NumPy model (global-computing-consortium/HiFloat4,
hif4_gpu/HiF4_NVFP4_v14f16.py ``To_HiFX`` with N = 4, M = 2, G = 64, read at c8e52aa).

The algorithm itself lives in :mod:`fp4spec.hif4` / :mod:`fp4spec.emulator.hif4`.
"""

from .policy import Profile

PROFILE = Profile(
    name="hif4",
    title="HiFloat4 golden NumPy model (To_HiFX)",
    source="global-computing-consortium/HiFloat4 HiF4_NVFP4_v14f16.py @ c8e52aa",
    structures=("hif4",),
    policies={
        "element_rounding": "rna",
        "element_overflow": "saturate",
        "hif4_element_arith": "float64",
        "hif4_zero_group": "scale_2^-48",
    },
)
