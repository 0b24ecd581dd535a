"""fp4spec: the executable, bit-exact specification of 4-bit number formats for AI hardware.

Layers (imports only point down, no cycles; ``tests/test_layers.py`` checks it): the spec
(the modules of ``fp4spec/``: descriptors, exact scalar reference algorithms, profiles) <-
``fp4spec.emulator`` (fast vectorized numpy, tested equal to the reference) <-
``fp4spec.backends`` (one interface over numpy, torch, Triton and vendor libraries) <- the
public API (``fp4spec.api``, re-exported here) <- ``fp4spec.conformance``, ``fp4spec.cli``,
``fp4spec.analysis``, ``fp4spec.training``. The top layer's packages load on first use
(``fp4spec.analysis.shrinkage_bias(...)`` works after ``import fp4spec``).
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
from .block_schemes import Scheme, get_scheme, schemes
from .quantized import QuantizedTensor
from .rht import RHT, inverse_rht, resolve_rht, rht
from .backends import Backend, Capabilities, get_backend
from .api import decode, dequantize, draw_rbits, encode, matmul, quantize, select_backend
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

#: Packages of the top layer, imported on first use (they import the API, not the other way round).
_LAZY = ("analysis", "conformance", "training", "cli")


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
