"""The triton backend: quantize, dequantize and the ``sm90-bf16`` GEMM as Triton kernels,
bit-exact with the numpy emulator, on NVIDIA GPUs (or on the CPU under ``TRITON_INTERPRET=1``).

Rooms (docs/backends.md, "The triton backend's architecture"):

* :mod:`.config` -- :class:`TritonConfig`, every tunable (tiles, warps, equivalent code paths),
  frozen; :data:`DEFAULT_CONFIG` is the shipped one.
* :mod:`.capability` -- availability, the requests the kernels take, the GPU features the
  launchers choose by, the GEMM's claimed accumulator models. No triton import.
* :mod:`.quantize` -- :func:`quantize_packed` (a dispatch table over the variants) and
  :func:`dequantize_packed`: torch tensors in, packed codes and scale codes out.
* :mod:`.launch` -- one launcher per quantize variant, the tensor amax passes, the unfused RHT.
* :mod:`.mma` -- host side of the RHT on the tensor cores; :mod:`.gemm` -- host side of the GEMM.
* :mod:`.backend` -- :class:`TritonBackend`, the Backend adapter.
* :mod:`.kernels` -- the ``@triton.jit`` code, by family.

Importing this package imports neither triton nor a kernel: ``@triton.jit`` reads
``TRITON_INTERPRET`` when it decorates, so the kernel modules load at first use.
"""

from __future__ import annotations

import importlib

from .backend import TritonBackend
from .capability import availability
from .config import DEFAULT_CONFIG, TritonConfig

_LAZY = {
    "quantize_packed": ".quantize", "dequantize_packed": ".quantize", "philox_rbits": ".quantize",
    "unpack_lo_first": ".quantize", "VARIANTS": ".quantize", "matmul": ".gemm", "matmul_packed": ".gemm",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_CONFIG", "TritonBackend", "TritonConfig", "availability", "dequantize_packed", "matmul",
           "matmul_packed", "philox_rbits", "quantize_packed", "unpack_lo_first"]
