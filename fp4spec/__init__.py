"""fp4spec: the executable, bit-exact specification of 4-bit number formats for AI hardware.

Layers (imports only point down): ``fp4spec`` (descriptors and exact scalar reference
algorithms), ``fp4spec.emulator`` (fast vectorized numpy implementations, tested equal to
the reference), ``fp4spec.backends`` (one interface over numpy, torch, Triton and vendor
libraries) and ``fp4spec.conformance`` (bit-exact checks of any backend).
"""

from .number_formats import (
    CodeRow,
    FloatFormat,
    Format,
    IntFormat,
    UniformFormat,
    float_format,
    formats,
    get_format,
    p3109_format,
    register_format,
)

from .accumulator_models import AccumulatorModel, accumulators, get_accumulator, register_accumulator
from .api import decode, draw_rbits, encode
from .block_schemes import Scheme, get_scheme, schemes
from .quantize_api import dequantize, quantize, select_backend
from .quantized import QuantizedTensor
from .rht import RHT, inverse_rht, resolve_rht, rht
from . import analysis
from .backends import Backend, Capabilities, get_backend
from .matmul_api import matmul
from .layouts import blocked_shape, from_blocked, to_blocked
from .packing import pack, unpack
from .rounding import ROUNDING_MODES

__version__ = "0.1.0.dev0"

__all__ = [
    "Backend",
    "Capabilities",
    "get_backend",
    "AccumulatorModel",
    "accumulators",
    "get_accumulator",
    "matmul",
    "register_accumulator",
    "CodeRow",
    "FloatFormat",
    "Format",
    "IntFormat",
    "UniformFormat",
    "float_format",
    "formats",
    "get_format",
    "p3109_format",
    "register_format",
    "QuantizedTensor",
    "RHT",
    "ROUNDING_MODES",
    "Scheme",
    "blocked_shape",
    "decode",
    "dequantize",
    "draw_rbits",
    "encode",
    "from_blocked",
    "get_scheme",
    "inverse_rht",
    "pack",
    "quantize",
    "resolve_rht",
    "rht",
    "schemes",
    "select_backend",
    "to_blocked",
    "unpack",
    "analysis",
    "__version__",
]
