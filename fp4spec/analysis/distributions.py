"""Reproducible test tensors for the analysis: Gaussian, Laplace, Student-t(3) and two outlier models.

Every tensor is a pure function of ``(name, shape, seed)``: the generator is
``numpy.random.default_rng([seed, crc32(name)])``, so two distributions drawn with the
same seed are independent and the same call always returns the same float32 array.
"""

from __future__ import annotations

import zlib

import numpy as np

#: Distribution names accepted by :func:`sample`, in report order.
DISTRIBUTIONS = ("gaussian", "laplace", "student_t3", "channel_outliers", "sparse_outliers")

#: Channel-outlier model: one channel in this many is an outlier channel ...
CHANNEL_OUTLIER_EVERY = 64
#: ... multiplied by this factor.
CHANNEL_OUTLIER_GAIN = 32.0
#: Sparse-outlier model: each element is an outlier with this probability ...
SPARSE_OUTLIER_RATE = 1.0 / 256.0
#: ... and then has magnitude uniform in this range (random sign).
SPARSE_OUTLIER_RANGE = (16.0, 64.0)

DEFAULT_SHAPE = (256, 1024)


def check_distribution(name) -> str:
    if not isinstance(name, str) or name not in DISTRIBUTIONS:
        raise ValueError(f"distribution: {name!r} is not one of {', '.join(map(repr, DISTRIBUTIONS))}")
    return name


def rng_for(name: str, seed: int) -> np.random.Generator:
    """The generator of ``sample(name, ..., seed)``: ``default_rng([seed, crc32(name)])``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: {seed!r} is not a non-negative int")
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def sample(name: str, shape=DEFAULT_SHAPE, seed: int = 0) -> np.ndarray:
    """A float32 tensor of ``shape`` drawn from distribution ``name``.

    With ``g = rng_for(name, seed)`` (:func:`rng_for`):

    1. ``"gaussian"``: ``g.standard_normal(shape)``.
    2. ``"laplace"``: ``g.laplace(0, 1, shape)``.
    3. ``"student_t3"``: ``g.standard_t(3, shape)`` (heavy tails, infinite kurtosis).
    4. ``"channel_outliers"``: ``g.standard_normal(shape)``, then ``n = max(1, C // 64)``
       channels of the last axis (``C = shape[-1]``), chosen by
       ``g.choice(C, n, replace=False)``, are multiplied by 32 -- the activation pattern of
       LLMs, where a few hidden channels are large for every token.
    5. ``"sparse_outliers"``: ``g.standard_normal(shape)``; then a mask
       ``g.random(shape) < 1/256`` selects outliers, which are replaced by
       ``g.choice([-1, 1]) * g.uniform(16, 64)`` (drawn for the whole shape, used where
       the mask is set).
    6. The result is cast to float32.
    """
    check_distribution(name)
    shape = tuple(int(n) for n in np.atleast_1d(shape))
    g = rng_for(name, seed)
    if name == "gaussian":
        x = g.standard_normal(shape)
    elif name == "laplace":
        x = g.laplace(0.0, 1.0, shape)
    elif name == "student_t3":
        x = g.standard_t(3, shape)
    elif name == "channel_outliers":
        x = g.standard_normal(shape)
        c = shape[-1]
        idx = g.choice(c, max(1, c // CHANNEL_OUTLIER_EVERY), replace=False)
        x[..., idx] *= CHANNEL_OUTLIER_GAIN
    else:  # sparse_outliers
        x = g.standard_normal(shape)
        mask = g.random(shape) < SPARSE_OUTLIER_RATE
        out = g.choice(np.array([-1.0, 1.0]), shape) * g.uniform(*SPARSE_OUTLIER_RANGE, shape)
        x = np.where(mask, out, x)
    return x.astype(np.float32)


__all__ = ["DISTRIBUTIONS", "DEFAULT_SHAPE", "sample", "rng_for", "check_distribution"]
