"""4-bit training with fp4spec's formats: recipes, a drop-in ``Linear``, ``convert``.

Needs torch (``pip install 'fp4spec[torch]'``). Built on the public API only
(``fp4spec.quantize``, ``dequantize``, ``matmul``, ``get_scheme``, ``RHT``).

    >>> from fp4spec.training import convert, get_recipe
    >>> model = convert(model, "nvfp4", skip=("lm_head",))   # doctest: +SKIP

See docs/training.md for the recipes table, the API and the pretraining comparison.
"""

from .linear import (Linear, LayerState, OperandRecord, QuantizedLinearFunction, convert, counters,
                     quantized_layers, quantized_linear, set_counters)
from .recipe import (DEQUANTIZE, GEMMS, OPERAND_TENSORS, SCOPES, Gemm, Operand, Recipe, bf16, get_recipe, mxfp4,
                     nvfp4, nvfp4_full_rht, recipes, ufp4, ufp4_int4)

__all__ = ["DEQUANTIZE", "GEMMS", "OPERAND_TENSORS", "SCOPES", "Gemm", "LayerState", "Linear", "Operand",
           "OperandRecord", "QuantizedLinearFunction", "Recipe", "bf16", "convert", "counters", "get_recipe",
           "mxfp4", "nvfp4", "nvfp4_full_rht", "quantized_layers", "quantized_linear", "recipes", "set_counters",
           "ufp4", "ufp4_int4"]
