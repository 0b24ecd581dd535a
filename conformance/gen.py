"""Input generators that draw two ways: from a seeded numpy generator, or as hypothesis strategies.

Every random input of the conformance suite is described once here, by its *structure*
(how many blocks, which kind each block is, the tensor amax's exponent and significand, how
far the other blocks' amaxes spread below it, the random-bit style), and can then be drawn

* with :meth:`Gen.draw` from a ``numpy.random.Generator`` -- what ``fp4spec conform`` does by
  default: fast, reproducible from the row's seed, no hypothesis needed;
* as a hypothesis strategy (:meth:`Gen.strategy`) -- what ``fp4spec conform --shrink``, the
  pytest plugin's users and :mod:`fp4spec.conformance.strategies` use: hypothesis draws the
  same structure and shrinks it when a check fails.

Both ways hand the structure to :mod:`fp4spec.conformance.builders`, which fills in the
float32 values exactly, so the two ways draw from the same distribution of inputs (not the
same inputs: hypothesis has its own random stream).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from typing import Any, Callable

import numpy as np

from fp4spec.backends.base import resolve_scheme

from . import builders
from .builders import BLOCK_KINDS, FINITE_KINDS

#: Tensor-amax exponents at the edges of float32 and of the two-level tensor scale.
EXTREME_EXPONENTS = (127, 126, 125, 100, -100, -125, -126, -127, -133, -140, -149)
SPREADS = (0, 2, 8, 40, 250)
SEEDS = 2 ** 32


# -- deterministic inputs built once ------------------------------------------------------------------

_BUILT: "collections.OrderedDict" = collections.OrderedDict()
_BUILT_MAX = 4096


def _state_key(rng) -> tuple:
    st = rng.bit_generator.state
    inner = st.get("state", {})
    if isinstance(inner, dict):
        inner = tuple(sorted(inner.items()))
    return st.get("bit_generator"), repr(inner), st.get("has_uint32"), st.get("uinteger")


def memo(rng, key: tuple, build: Callable[[np.random.Generator], Any]):
    """``build(rng)``, computed once per ``key`` and generator state: a repeat gets a copy of the
    result and leaves ``rng`` where building would have (so what follows is drawn identically).

    The deterministic checks of one property and scheme start from the same seed for every
    rounding mode, so each rounding mode's row asks for the same inputs in the same states;
    they are built once. ``build`` must depend on nothing but ``rng`` and ``key``."""
    k = key + (_state_key(rng),)
    hit = _BUILT.get(k)
    if hit is not None:
        _BUILT.move_to_end(k)
        rng.bit_generator.state = hit[1]
        return copy.deepcopy(hit[0])
    value = build(rng)
    _BUILT[k] = (copy.deepcopy(value), rng.bit_generator.state)
    if len(_BUILT) > _BUILT_MAX:
        _BUILT.popitem(last=False)
    return value


class Gen:
    """Something that draws inputs: :meth:`draw` (numpy) and :meth:`strategy` (hypothesis)."""

    def draw(self, rng: np.random.Generator) -> Any:
        raise NotImplementedError

    def strategy(self):
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Seeded(Gen):
    """``fn(rng)`` for a fresh generator: numpy draws its seed from ``rng``, hypothesis draws
    the seed as an integer (so shrinking only changes the seed)."""

    fn: Callable[[np.random.Generator], Any]

    def draw(self, rng):
        return self.fn(np.random.default_rng(int(rng.integers(SEEDS))))

    def strategy(self):
        from hypothesis import strategies as st

        return st.integers(0, SEEDS - 1).map(lambda s: self.fn(np.random.default_rng(s)))


@dataclasses.dataclass(frozen=True)
class OneOf(Gen):
    """One of several generators, chosen uniformly."""

    gens: tuple

    def draw(self, rng):
        return self.gens[int(rng.integers(len(self.gens)))].draw(rng)

    def strategy(self):
        from hypothesis import strategies as st

        return st.one_of(*(g.strategy() for g in self.gens))


@dataclasses.dataclass(frozen=True)
class Exponents(Gen):
    """Tensor-amax exponents: ``values`` (one of them), or the range ``lo..hi``; with
    ``mixture``: typical (-10..10), anywhere in ``lo..hi`` or one of the extremes, a third each."""

    lo: int = -149
    hi: int = 127
    values: tuple[int, ...] = ()
    mixture: bool = False

    def _parts(self):
        if self.values:
            return [("choice", self.values)]
        if not self.mixture:
            return [("range", (self.lo, self.hi))]
        extremes = tuple(e for e in EXTREME_EXPONENTS if self.lo <= e <= self.hi) or (self.lo, self.hi)
        typical = (max(self.lo, -10), min(self.hi, 10)) if self.lo <= 10 and self.hi >= -10 else (self.lo, self.hi)
        return [("range", typical), ("range", (self.lo, self.hi)), ("choice", extremes)]

    def draw(self, rng):
        parts = self._parts()
        kind, arg = parts[int(rng.integers(len(parts)))]
        if kind == "choice":
            return int(arg[int(rng.integers(len(arg)))])
        return int(rng.integers(arg[0], arg[1] + 1))

    def strategy(self):
        from hypothesis import strategies as st

        parts = [st.sampled_from(a) if k == "choice" else st.integers(*a) for k, a in self._parts()]
        return parts[0] if len(parts) == 1 else st.one_of(*parts)


def amax_exponents(lo: int = -149, hi: int = 127) -> Exponents:
    """Typical (-10..10), anywhere in float32 (-149..127) or extreme exponents."""
    return Exponents(lo, hi, mixture=True)


def draw_significand(rng, scheme) -> float:
    """A scale-rule edge significand (half the time) or any float32 in [1, 2)."""
    if rng.random() < 0.5:
        sigs = builders.amax_significands(scheme)
        return float(sigs[int(rng.integers(len(sigs)))])
    return float(min(np.float32(1.0 + rng.random()), np.float32(2.0 - builders.ULP1)))


@dataclasses.dataclass(frozen=True)
class Tensors(Gen):
    """A 2-D float32 tensor of whole blocks, each of a kind drawn from ``kinds`` (default:
    every kind that fits the scheme); see :func:`fp4spec.conformance.strategies.tensors`.
    ``exponents``: an :class:`Exponents` (or, for :meth:`strategy` only, a hypothesis strategy)."""

    scheme: Any
    kinds: tuple | None = None
    max_block_rows: int = 3
    max_block_cols: int = 3
    spreads: tuple = SPREADS
    exponents: Any = None

    def pool(self):
        sch = resolve_scheme(self.scheme)
        pool = builders.kinds_for(sch, self.kinds or BLOCK_KINDS)
        if not pool:
            raise ValueError(f"kinds: none of {self.kinds!r} applies to {sch.name!r}")
        return sch, pool

    def draw(self, rng):
        sch, pool = self.pool()
        if "nonfinite" in pool and len(pool) > 1 and rng.random() < 0.5:
            pool = tuple(k for k in pool if k != "nonfinite")  # a NaN/Inf block fixes the NVFP4 tensor scale
        rows = int(rng.integers(1, self.max_block_rows + 1))
        cols = int(rng.integers(1, self.max_block_cols + 1))
        ks = [pool[int(i)] for i in rng.integers(0, len(pool), rows * cols)]
        exps = self.exponents if self.exponents is not None else amax_exponents()
        if not isinstance(exps, Exponents):
            raise TypeError("exponents: a hypothesis strategy can only be drawn by hypothesis; pass an Exponents")
        exp = exps.draw(rng)
        sig = draw_significand(rng, sch)
        spread = int(self.spreads[int(rng.integers(len(self.spreads)))])
        g = builders.global_amax(rng, sch, exp, sig)
        return builders.build_tensor(rng, sch, ks, block_rows=rows, block_cols=cols, amax=g, spread=spread)

    def strategy(self):
        exps = self.exponents.strategy() if isinstance(self.exponents, Exponents) else self.exponents
        return tensors_strategy(resolve_scheme(self.scheme), self.kinds, max_block_rows=self.max_block_rows,
                                max_block_cols=self.max_block_cols, spreads=self.spreads, exponents=exps)


def amax_significands_strategy(sch):
    """The hypothesis twin of :func:`draw_significand`: scale-rule edge significands or any in [1, 2)."""
    from hypothesis import strategies as st

    return st.one_of(st.sampled_from(builders.amax_significands(sch)), st.floats(1.0, 2.0, exclude_max=True, width=32))


def tensors_strategy(sch, kinds=None, *, max_block_rows: int = 3, max_block_cols: int = 3, spreads=SPREADS,
                     exponents=None):
    """The hypothesis strategy of :class:`TensorFamily` (``fp4spec.conformance.strategies.tensors``):
    a 2-D float32 tensor of whole blocks, each of a kind drawn from ``kinds`` (default: every
    kind that fits the scheme); the values are built by :mod:`.builders` from a drawn seed."""
    from hypothesis import strategies as st

    pool = builders.kinds_for(sch, kinds or BLOCK_KINDS)
    if not pool:
        raise ValueError(f"kinds: none of {kinds!r} applies to {sch.name!r}")

    @st.composite
    def draw_tensor(draw):
        ks_pool = pool
        if "nonfinite" in pool and len(pool) > 1 and not draw(st.booleans()):
            ks_pool = tuple(k for k in pool if k != "nonfinite")  # a NaN/Inf block fixes the NVFP4 tensor scale at 1
        rows = draw(st.integers(1, max_block_rows))
        cols = draw(st.integers(1, max_block_cols))
        ks = draw(st.lists(st.sampled_from(ks_pool), min_size=rows * cols, max_size=rows * cols))
        exp = draw(exponents if exponents is not None else amax_exponents().strategy())
        sig = draw(amax_significands_strategy(sch))
        spread = draw(st.sampled_from(tuple(spreads)))
        rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
        g = builders.global_amax(rng, sch, exp, sig)
        return builders.build_tensor(rng, sch, ks, block_rows=rows, block_cols=cols, amax=g, spread=spread)

    return draw_tensor()


# -- the named tensor families (strategies.py exposes each as a hypothesis strategy) -----------------

def tensors(scheme, kinds=None, **kw) -> Tensors:
    return Tensors(scheme, None if kinds is None else tuple(kinds), **kw)


def tie_tensors(scheme, **kw) -> Tensors:
    """Scaled values exactly on rounding ties (and block scales on UE4M3 ties), and one ulp beside them."""
    return tensors(scheme, ("ties", "scale_tie"), **kw)


def binade_edge_tensors(scheme, **kw) -> Tensors:
    """Block amaxes with significand 1.0, 1.5, 1.75, just below 2 (and one ulp beside them)."""
    return tensors(scheme, ("binade_edge", "scale_tie"), **kw)


def subnormal_tensors(scheme, **kw) -> Tensors:
    """float32 subnormals and the normal boundary 2^-126."""
    kw.setdefault("exponents", Exponents(-149, -120))
    return tensors(scheme, ("subnormal", "single", "random"), **kw)


def wide_range_tensors(scheme, **kw) -> Tensors:
    """Blocks whose amaxes spread over up to 250 binades across the tensor."""
    kw.setdefault("spreads", (40, 120, 250))
    kw.setdefault("max_block_rows", 4)
    return tensors(scheme, ("random", "ties", "single", "subnormal"), **kw)


def zero_tensors(scheme, **kw) -> Tensors:
    """All-zero blocks (+0, -0, mixed) and blocks with a single non-zero element."""
    return tensors(scheme, ("zero", "single"), **kw)


def nonfinite_tensors(scheme, **kw) -> Tensors:
    """Blocks holding NaN / +-Inf next to finite and zero blocks (not for HiF4, which refuses them)."""
    return tensors(scheme, ("nonfinite", "random", "zero"), **kw)


def saturating_tensors(scheme, **kw) -> Tensors:
    """Scaled values beyond the element max; two-level blocks tiny next to the tensor amax."""
    return tensors(scheme, ("saturate", "binade_edge"), **kw)


def extreme_amax_tensors(scheme, **kw) -> Tensors:
    """Tensor amax near FLT_MAX, at the float32 normal boundary, or subnormal."""
    kw.setdefault("exponents", Exponents(values=EXTREME_EXPONENTS))
    return tensors(scheme, FINITE_KINDS, **kw)


def finite_tensors(scheme, **kw) -> Tensors:
    """Any finite input (every kind but ``nonfinite``)."""
    return tensors(scheme, FINITE_KINDS, **kw)


def adversarial_tensors(scheme, **kw) -> OneOf:
    """The mixture the ``reference`` property uses: ties, any kind, extreme amaxes, wide ranges."""
    return OneOf((tie_tensors(scheme, **kw), tensors(scheme, **kw), extreme_amax_tensors(scheme, **kw),
                  wide_range_tensors(scheme, **kw)))


# -- random bits and cases ---------------------------------------------------------------------------

RBITS_STYLES = ("uniform", "uniform", "zero", "max", "mixed")


def draw_rbits(rng, shape, sr_bits: int = 8, *, constant: bool = False) -> np.ndarray:
    """Random bits for ``rounding="sr"`` as :func:`fp4spec.conformance.strategies.rbits` draws them."""
    if constant:
        return np.full(shape, int(rng.integers(0, 1 << sr_bits)), np.uint32)
    style = RBITS_STYLES[int(rng.integers(len(RBITS_STYLES)))]
    return builders.build_rbits(np.random.default_rng(int(rng.integers(SEEDS))), shape, sr_bits, style)


@dataclasses.dataclass(frozen=True)
class Case:
    """One conformance input: a 2-D float32 tensor and, for stochastic rounding, its random bits."""

    x: np.ndarray
    rbits: np.ndarray | None = None

    def __repr__(self) -> str:
        r = "" if self.rbits is None else f", rbits {self.rbits.dtype}{self.rbits.shape}"
        return f"Case(x float32{self.x.shape}{r})"


@dataclasses.dataclass(frozen=True)
class Cases(Gen):
    """A :class:`Case`: a tensor from ``tensors`` plus random bits when ``rounding == "sr"``."""

    scheme: Any
    rounding: str = "rne"
    tensors: Gen | None = None
    sr_bits: int = 8
    constant_rbits: bool = False

    def _tensors(self) -> Gen:
        return self.tensors if self.tensors is not None else adversarial_tensors(self.scheme)

    def draw(self, rng):
        x = self._tensors().draw(rng)
        r = draw_rbits(rng, x.shape, self.sr_bits, constant=self.constant_rbits) if self.rounding == "sr" else None
        return Case(x, r)

    def strategy(self):
        return cases_strategy(self.rounding, self._tensors().strategy(), sr_bits=self.sr_bits,
                              constant_rbits=self.constant_rbits)


def rbits_strategy(shape, sr_bits: int = 8, *, constant: bool = False):
    """The hypothesis twin of :func:`draw_rbits` (``fp4spec.conformance.strategies.rbits``)."""
    from hypothesis import strategies as st

    if constant:
        return st.integers(0, (1 << sr_bits) - 1).map(lambda r: np.full(shape, r, np.uint32))
    return st.builds(lambda style, seed: builders.build_rbits(np.random.default_rng(seed), shape, sr_bits, style),
                     st.sampled_from(RBITS_STYLES), st.integers(0, 2 ** 32 - 1))


def cases_strategy(rounding: str, tensors, *, sr_bits: int = 8, constant_rbits: bool = False):
    """The hypothesis twin of :class:`Cases` (``fp4spec.conformance.strategies.cases``): a
    :class:`Case` of a tensor drawn from the strategy ``tensors``, with random bits for ``"sr"``."""
    from hypothesis import strategies as st

    @st.composite
    def draw_case(draw):
        x = draw(tensors)
        r = draw(rbits_strategy(x.shape, sr_bits, constant=constant_rbits)) if rounding == "sr" else None
        return Case(x, r)

    return draw_case()


__all__ = ["Case", "Cases", "memo", "EXTREME_EXPONENTS", "Exponents", "Gen", "OneOf", "SPREADS", "Seeded", "Tensors",
           "adversarial_tensors", "amax_exponents", "binade_edge_tensors", "draw_rbits", "draw_significand",
           "extreme_amax_tensors", "finite_tensors", "nonfinite_tensors", "saturating_tensors", "subnormal_tensors",
           "tensors", "tie_tensors", "wide_range_tensors", "zero_tensors"]
