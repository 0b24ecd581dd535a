"""Analysis of 4-bit grids and schemes: shrinkage bias, attenuation, SQNR with and without RHT.

Checks the claims of the UFP4 paper (arXiv 2606.20381) with fp4spec's own formats and
schemes:

* :func:`shrinkage_bias` -- exact expected rounding error per grid point (Fractions);
* :func:`attenuation` -- the least-squares gain eta of ``Q(x) ~ eta * x``;
* :func:`scheme_bias` -- measured bias and eta of a block-scaled scheme on data;
* :func:`sqnr`, :func:`compare` -- SQNR before and after a Random Hadamard Transform on
  reproducible distributions (:mod:`fp4spec.analysis.distributions`);
* :func:`attenuation_vs_depth` -- how eta compounds through chained quantized matmuls;
* :func:`fp4spec.analysis.report.run_analyze` -- the ``fp4spec analyze`` report.

Schemes are given by name and quantized with ``fp4spec.api.block_scaling.quantize`` (imported
lazily), or as a callable ``x -> dequantized x``.
"""

from ._quantizer import SCHEMES, QuantizeUnavailable
from .bias import BIAS_ROUNDINGS, attenuation, grid_point_bias, rounding_interval, scheme_bias, shrinkage_bias
from .compounding import DepthCurve, attenuation_vs_depth
from .distributions import DISTRIBUTIONS, sample
from .sqnr import Comparison, compare, quantize_roundtrip, sqnr, sqnr_db

__all__ = [
    "SCHEMES", "QuantizeUnavailable", "BIAS_ROUNDINGS", "attenuation", "grid_point_bias", "rounding_interval", "scheme_bias",
    "shrinkage_bias", "DepthCurve", "attenuation_vs_depth", "DISTRIBUTIONS", "sample", "Comparison", "compare",
    "quantize_roundtrip", "sqnr", "sqnr_db",
]
