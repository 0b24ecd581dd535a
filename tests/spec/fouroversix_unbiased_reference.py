"""fouroversix's NVFP4 scale factors under ``RoundStyle.stochastic_unbiased``, ported for the
differential test of ``sr_headroom="16/17"``.

Source: https://github.com/mit-han-lab/fouroversix, commit dadfad6901d473a734fe71e0b082e70ee993e23a,
``src/fouroversix/quantize/pytorch/reference.py`` (``compute_nv_scale_factors``) and
``src/fouroversix/utils.py`` (``RoundStyle.adjustment_factor``: 16/17 for ``stochastic_unbiased``).
MIT License, Copyright (c) 2025 Jack Cook (full notice below). PyPI ``fouroversix`` 1.0.5 has no
``stochastic_unbiased``, so the released package cannot be compared.

The code is the source's with ``fp4_format=DataType.nvfp4`` and the static scale rule fixed
(max_quantized_value 6, max_scale_factor 448) and ``scale_expansion_factor=None``; it returns the
scale bytes and the decode scale (the source's local ``decode_scale``), not the scaled blocks.

The source's license (``LICENSE.md`` at that commit), which applies to the code ported here:

    MIT License

    Copyright (c) 2025 Jack Cook

    Permission is hereby granted, free of charge, to any person obtaining a copy
    of this software and associated documentation files (the "Software"), to deal
    in the Software without restriction, including without limitation the rights
    to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
    copies of the Software, and to permit persons to whom the Software is
    furnished to do so, subject to the following conditions:

    The above copyright notice and this permission notice shall be included in all
    copies or substantial portions of the Software.

    THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
    IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
    FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
    AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
    LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
    OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
    SOFTWARE.
"""

import torch

ADJUSTMENT_FACTOR = 16 / 17  # RoundStyle.stochastic_unbiased.adjustment_factor


def compute_nv_scale_factors(x_scale_blocks: torch.Tensor, x_amax: torch.Tensor):
    max_quantized_value = 6
    max_scale_factor = 448

    if x_amax == 0:
        x_scales_hp = torch.zeros(*x_scale_blocks.shape[:-1], dtype=x_amax.dtype, device=x_amax.device)
    else:
        encode_scale = (
            torch.tensor(max_quantized_value * max_scale_factor * ADJUSTMENT_FACTOR,
                         dtype=x_amax.dtype, device=x_amax.device)
            / x_amax
        )
        x_scales_hp = (
            x_scale_blocks.abs().max(axis=-1).values
            / torch.tensor(max_quantized_value * ADJUSTMENT_FACTOR, dtype=x_amax.dtype, device=x_amax.device)
            * encode_scale
        )

    x_scales = x_scales_hp.to(torch.float8_e4m3fn)

    decode_scale = 1 / (
        torch.tensor(max_quantized_value * max_scale_factor * ADJUSTMENT_FACTOR, dtype=x_amax.dtype,
                     device=x_amax.device)
        / x_amax
    )
    return x_scales.view(torch.uint8), decode_scale
