"""Hypothesis strategies for adversarial 4-bit quantization inputs -- reusable in any test suite.

Each strategy draws the *structure* of an input (how many blocks, which kind each block is,
the tensor amax's exponent and significand, how far the other blocks' amaxes spread below
it, the random-bit style) and a seed; :mod:`fp4spec.conformance.builders` fills in the
float32 values exactly. So shrinking simplifies the structure (fewer blocks, plainer kinds,
smaller exponents) while the numbers stay adversarial.

Example -- check your own quantizer against fp4spec's, bit for bit::

    from hypothesis import given
    import fp4spec
    from fp4spec.conformance import strategies as fst

    @given(fst.tie_tensors("nvfp4"))
    def test_my_kernel_matches(x):
        assert my_quantize(x).equals(fp4spec.quantize(x, "nvfp4"))

Tensors are 2-D float32 arrays blocked along the last axis (``rows x (n * block_size)``;
2-D tile schemes get whole tiles). :func:`cases` bundles a tensor with random bits for
``rounding="sr"``.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fp4spec.backends.base import resolve_scheme
from fp4spec.number_formats import get_format

from . import builders, gen
from .builders import BLOCK_KINDS
from .gen import Case  # noqa: F401 -- re-exported: the case type the properties check

#: Tensor-amax exponents at the edges of float32 and of the two-level tensor scale.
EXTREME_EXPONENTS = gen.EXTREME_EXPONENTS
SPREADS = gen.SPREADS


def block_kinds(scheme, kinds=None) -> st.SearchStrategy[str]:
    """One of the block kinds of :mod:`~fp4spec.conformance.builders` that fit the scheme."""
    return st.sampled_from(builders.kinds_for(resolve_scheme(scheme), kinds or BLOCK_KINDS))


def amax_exponents(lo: int = -149, hi: int = 127) -> st.SearchStrategy[int]:
    """Typical (-10..10), anywhere in float32 (-149..127) or extreme exponents."""
    return gen.amax_exponents(lo, hi).strategy()


def amax_significands(scheme) -> st.SearchStrategy[float]:
    """Scale-rule edge significands (1.0, 1.5, 1.75, just below 2, one ulp beside them) or any in [1, 2)."""
    return gen.amax_significands_strategy(resolve_scheme(scheme))


def tensors(scheme, kinds=None, *, max_block_rows: int = 3, max_block_cols: int = 3, spreads=SPREADS,
            exponents: st.SearchStrategy[int] | None = None) -> st.SearchStrategy[np.ndarray]:
    """A 2-D float32 tensor of whole blocks, each of a kind drawn from ``kinds``
    (default: every kind that fits the scheme)."""
    return gen.tensors_strategy(resolve_scheme(scheme), kinds, max_block_rows=max_block_rows,
                                max_block_cols=max_block_cols, spreads=spreads, exponents=exponents)


def tie_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Scaled values exactly on rounding ties (and block scales on UE4M3 ties), and one ulp beside them."""
    return gen.tie_tensors(scheme, **kw).strategy()


def binade_edge_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Block amaxes with significand 1.0, 1.5, 1.75, just below 2 (and one ulp beside them)."""
    return gen.binade_edge_tensors(scheme, **kw).strategy()


def subnormal_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """float32 subnormals and the normal boundary 2^-126."""
    return gen.subnormal_tensors(scheme, **kw).strategy()


def wide_range_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Blocks whose amaxes spread over up to 250 binades across the tensor."""
    return gen.wide_range_tensors(scheme, **kw).strategy()


def zero_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """All-zero blocks (+0, -0, mixed) and blocks with a single non-zero element."""
    return gen.zero_tensors(scheme, **kw).strategy()


def nonfinite_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Blocks holding NaN / +-Inf next to finite and zero blocks (not for HiF4, which refuses them)."""
    return gen.nonfinite_tensors(scheme, **kw).strategy()


def saturating_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Scaled values beyond the element max; two-level blocks tiny next to the tensor amax."""
    return gen.saturating_tensors(scheme, **kw).strategy()


def extreme_amax_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Tensor amax near FLT_MAX, at the float32 normal boundary, or subnormal."""
    return gen.extreme_amax_tensors(scheme, **kw).strategy()


def finite_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """Any finite input (every kind but ``nonfinite``)."""
    return gen.finite_tensors(scheme, **kw).strategy()


def adversarial_tensors(scheme, **kw) -> st.SearchStrategy[np.ndarray]:
    """The mixture the ``reference`` property uses: ties, any kind, extreme amaxes, wide ranges."""
    return gen.adversarial_tensors(scheme, **kw).strategy()


def rbits(shape, sr_bits: int = 8, *, constant: bool = False) -> st.SearchStrategy[np.ndarray]:
    """Random bits for ``rounding="sr"`` (uint32 in [0, 2^sr_bits)): uniform, all 0, all max,
    or a mixture; ``constant=True``: one value everywhere (for monotonicity)."""
    return gen.rbits_strategy(shape, sr_bits, constant=constant)


def cases(scheme, rounding: str = "rne", tensor_strategy=None, *, sr_bits: int = 8,
          constant_rbits: bool = False) -> st.SearchStrategy[Case]:
    """A :class:`Case`: a tensor from ``tensor_strategy`` (default :func:`adversarial_tensors`)
    plus random bits when ``rounding == "sr"``."""
    tensors = tensor_strategy if tensor_strategy is not None else adversarial_tensors(scheme)
    return gen.cases_strategy(rounding, tensors, sr_bits=sr_bits, constant_rbits=constant_rbits)


def element_values(fmt) -> st.SearchStrategy[float]:
    """float32 inputs for element conversion: TestFloat-style values around every code,
    midpoint and binade edge of ``fmt`` (:func:`builders.element_sweep`), or any float32."""
    sweep = builders.element_sweep(get_format(fmt))
    return st.one_of(st.sampled_from(sweep.tolist()), st.floats(width=32, allow_nan=False))


def element_ties(fmt) -> st.SearchStrategy[float]:
    """The exact midpoints between adjacent values of ``fmt`` (both signs), and one float32 ulp beside them."""
    return st.sampled_from(builders.element_tie_values(get_format(fmt)).tolist())


__all__ = [
    "Case",
    "EXTREME_EXPONENTS",
    "adversarial_tensors",
    "amax_exponents",
    "amax_significands",
    "binade_edge_tensors",
    "block_kinds",
    "cases",
    "element_ties",
    "element_values",
    "extreme_amax_tensors",
    "finite_tensors",
    "nonfinite_tensors",
    "rbits",
    "saturating_tensors",
    "subnormal_tensors",
    "tensors",
    "tie_tensors",
    "wide_range_tensors",
    "zero_tensors",
]
