"""The public API layer: what ``import fp4spec`` exports as functions.

* :mod:`.elements` -- ``encode``, ``decode``, ``draw_rbits`` (element conversion);
* :mod:`.plan` -- a quantize request resolved once into a :class:`~.plan.QuantizePlan`, and the
  choice of backend (``select_backend``);
* :mod:`.eager` -- their eager bodies (the plan, one backend method);
* :mod:`.block_scaling` -- ``quantize``, ``dequantize`` (under ``torch.compile``: the custom
  operators of :mod:`.torch_library`, imported on first use while compiling);
* :mod:`.gemm` -- ``matmul``.

Every call goes to one method of one backend (:class:`fp4spec.backends.Backend`), the method
``fp4spec conform`` certifies. This layer imports the spec, the emulator and the backends;
nothing below imports it.
"""

from .elements import decode, draw_rbits, encode
from .gemm import MatmulOnHostWarning, matmul
from .plan import AUTO_ORDER, QuantizePlan, select_backend, unsupported_reason
from .block_scaling import dequantize, quantize

__all__ = ["AUTO_ORDER", "MatmulOnHostWarning", "QuantizePlan", "decode", "dequantize", "draw_rbits", "encode",
           "matmul", "quantize", "select_backend", "unsupported_reason"]
