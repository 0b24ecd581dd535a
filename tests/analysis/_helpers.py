"""Shared helpers: simple block quantizers (callables) so most tests need no quantize_api."""

import numpy as np

import fp4spec


def block_quantizer(fmt: str, block: int = 16):
    """Dequantized RNE quantization with an exact float64 scale amax/max(fmt) per block."""
    f = fp4spec.get_format(fmt)

    def q(x):
        a = np.asarray(x, dtype=np.float64)
        b = a.reshape(-1, block)
        s = np.abs(b).max(axis=1) / f.max
        s[s == 0] = 1.0
        v = fp4spec.decode(fp4spec.encode(b / s[:, None], fmt), fmt)
        return (v * s[:, None]).reshape(a.shape)

    q.__name__ = f"{fmt}_b{block}"
    return q


def quantize_api():
    """``fp4spec.quantize``."""
    from fp4spec.api.block_scaling import quantize

    return quantize
