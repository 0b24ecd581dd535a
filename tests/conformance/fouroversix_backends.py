"""fouroversix's PyTorch reference quantizers as conformance backends (PyPI ``fouroversix`` 1.0.5).

fouroversix's package ``__init__`` imports its model integrations (``transformers``) and GPU
kernels; its reference quantizers need only torch. :func:`reference` therefore loads
``fouroversix.quantize.pytorch.reference`` (with ``fouroversix.utils`` and
``fouroversix.quantize.utils``) from the installed package without running the package's
``__init__``. Install without building its CUDA extension::

    pip install "setuptools>=77" && FORCE_BUILD=1 SKIP_CUDA_BUILD=1 pip install --no-build-isolation --no-deps fouroversix==1.0.5

Nothing falls back to fp4spec: every input goes to fouroversix's ``quantize_to_fp4`` on the
CPU, and its packed codes (first element in the low nibble) and scale bytes (plain layout)
come back as they are. Its tensor scale is returned as the amax; the decode scale fp4spec
stores is fouroversix's own ``decode_scale = 1 / (Emax * max / amax)``, in float32.

    PYTHONPATH=. fp4spec conform --backend tests.conformance.fouroversix_backends:FouroversixIf4
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import types

import numpy as np

from fp4spec.backends import Availability, Backend, Capabilities
from fp4spec.quantized import QuantizedTensor

#: The release whose reference these backends were checked against.
VERSION = "1.0.5"
_PARENTS = ("fouroversix", "fouroversix.quantize", "fouroversix.quantize.pytorch")


def reference():
    """fouroversix's ``quantize/pytorch/reference.py`` as a module (ImportError if not installed)."""
    name = "fouroversix.quantize.pytorch.reference"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec("fouroversix")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("fouroversix is not installed (see tests/conformance/fouroversix_backends.py)")
    root = list(spec.submodule_search_locations)[0]
    for parent in _PARENTS:
        if parent not in sys.modules:  # a namespace stand-in: the real __init__ needs transformers and CUDA
            mod = types.ModuleType(parent)
            mod.__path__ = [os.path.join(root, *parent.split(".")[1:])]
            sys.modules[parent] = mod
    return importlib.import_module(name)


def version() -> str:
    try:
        return importlib.metadata.version("fouroversix")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def unavailable_reason() -> str:
    """Why fouroversix's reference cannot be used here ("" if it can)."""
    try:
        import torch  # noqa: F401

        reference()
    except Exception as exc:  # noqa: BLE001 -- not installed, or an incompatible release
        return f"fouroversix's PyTorch reference is not importable: {exc}"
    return ""


def quantize(x: np.ndarray, dtype: str, scale_rule: str, *, block_scale_2d: bool = False):
    """fouroversix ``quantize_to_fp4`` of a 2-D float32 array on the CPU, round to nearest:
    (codes one per element, scale bytes per block, amax as float32). ``block_scale_2d``: 16 x 16
    tiles (rows a multiple of 16); every row of a tile carries the tile's scale byte."""
    import torch

    ref = reference()
    utils = importlib.import_module("fouroversix.utils")
    packed, scales, amax = ref.quantize_to_fp4(
        torch.from_numpy(np.ascontiguousarray(x, np.float32)), fp4_format=utils.DataType(dtype),
        scale_rule=utils.ScaleRule(scale_rule), round_style=utils.RoundStyle.nearest,
        use_blackwell_scale_layout=False, block_scale_2d=block_scale_2d)
    p = packed.numpy()
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(x.shape).astype(np.uint8)
    k = utils.DataType(dtype).block_size
    scale_bytes = scales.view(torch.uint8).numpy().reshape(x.shape[0], x.shape[1] // k).astype(np.uint8)
    return codes, scale_bytes, np.float32(amax.float().item())


def decode_scale(amax, emax: float, max_elem: float) -> np.float32:
    """fouroversix's ``decode_scale = 1 / (Emax * max / amax)``, each operation in float32."""
    with np.errstate(all="ignore"):
        s_enc = np.float32(np.float32(emax * max_elem) / np.float32(amax))
        return np.float32(np.float32(1.0) / s_enc)


class _Fouroversix(Backend):
    """One fouroversix data type and scale rule, claimed under ``scheme``."""

    dtype = "if4"
    scale_rule = "mse"
    scheme = "if4"
    emax, max_elem = 448.0, 6.0

    def is_available(self):
        reason = unavailable_reason()
        return Availability.no(reason) if reason else Availability.yes(f"fouroversix {version()}, CPU")

    def capabilities(self):
        return Capabilities(schemes=[self.scheme], rounding=["rne"],
                            notes=f"fouroversix {version()} quantize_to_fp4({self.dtype}, {self.scale_rule})")

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        x = np.asarray(x, np.float32)
        x2 = x.reshape(-1, x.shape[-1])
        codes, scales, amax = quantize(x2, self.dtype, self.scale_rule)
        g = decode_scale(amax, self.emax, self.max_elem)
        return QuantizedTensor(codes.reshape(x.shape), scales.reshape(x.shape[:-1] + (scales.shape[-1],)), g,
                               scheme, x.ndim - 1, x.shape, backend=self.name)


class FouroversixNvfp4(_Fouroversix):
    """``DataType.nvfp4`` with ``ScaleRule.static_6`` (plain NVFP4)."""

    name = "fouroversix-nvfp4"
    dtype, scale_rule, scheme = "nvfp4", "static_6", "nvfp4:profile=fouroversix"


class FouroversixNvfp4Static4(_Fouroversix):
    """``ScaleRule.static_4``: every block amax maps to 4."""

    name = "fouroversix-nvfp4-static4"
    dtype, scale_rule, scheme = "nvfp4", "static_4", "nvfp4:profile=fouroversix,element_max=4"
    max_elem = 4.0


class _Fouroversix4over6(_Fouroversix):
    dtype, emax = "nvfp4", 256.0

    @property
    def scheme(self):
        return f"nvfp4:profile=fouroversix,scale_rule=4over6,scale_max=256,error_mode={self.scale_rule}"


class FouroversixNvfp4Mse(_Fouroversix4over6):
    """4/6 with ``ScaleRule.mse`` (fouroversix's default)."""

    name = "fouroversix-nvfp4-mse"
    scale_rule = "mse"


class FouroversixNvfp4Mae(_Fouroversix4over6):
    name = "fouroversix-nvfp4-mae"
    scale_rule = "mae"


class FouroversixNvfp4AbsMax(_Fouroversix4over6):
    name = "fouroversix-nvfp4-abs-max"
    scale_rule = "abs_max"


class FouroversixNvint4(_Fouroversix):
    """``DataType.nvint4`` (``ScaleRule.static_6``, its only rule): INT4 -7..7, amax -> 7."""

    name = "fouroversix-nvint4"
    dtype, scale_rule, scheme = "nvint4", "static_6", "nvint4:profile=fouroversix"
    max_elem = 7.0


class FouroversixMxfp4(_Fouroversix):
    """``DataType.mxfp4`` with ``ScaleRule.static_6``: RCEIL of fp32(amax / 6) (no tensor scale)."""

    name = "fouroversix-mxfp4"
    dtype, scale_rule, scheme = "mxfp4", "static_6", "mxfp4:profile=fouroversix,scale_rule=rceil"

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        x = np.asarray(x, np.float32)
        codes, scales, _ = quantize(x.reshape(-1, x.shape[-1]), self.dtype, self.scale_rule)
        return QuantizedTensor(codes.reshape(x.shape), scales.reshape(x.shape[:-1] + (scales.shape[-1],)), None,
                               scheme, x.ndim - 1, x.shape, backend=self.name)


#: Every fouroversix backend here, by the data type and rule it runs.
TWO_LEVEL_AND_MX = (FouroversixNvfp4, FouroversixNvfp4Static4, FouroversixNvfp4Mse, FouroversixNvfp4Mae,
                    FouroversixNvfp4AbsMax, FouroversixNvint4, FouroversixMxfp4)


class FouroversixIf4(_Fouroversix):
    """``DataType.if4`` with ``ScaleRule.mse`` (fouroversix's default rule), claimed as ``if4``."""

    name = "fouroversix-if4"


class FouroversixIf4Mae(_Fouroversix):
    name = "fouroversix-if4-mae"
    scale_rule = "mae"
    scheme = "if4:scale_rule=mae"


class FouroversixIf4AbsMax(_Fouroversix):
    name = "fouroversix-if4-abs-max"
    scale_rule = "abs_max"
    scheme = "if4:scale_rule=abs_max"


__all__ = ["FouroversixIf4", "FouroversixIf4AbsMax", "FouroversixIf4Mae", "FouroversixMxfp4", "FouroversixNvfp4",
           "FouroversixNvfp4AbsMax", "FouroversixNvfp4Mae", "FouroversixNvfp4Mse", "FouroversixNvfp4Static4",
           "FouroversixNvint4", "TWO_LEVEL_AND_MX", "VERSION", "decode_scale", "quantize", "reference",
           "unavailable_reason", "version"]
