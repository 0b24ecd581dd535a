"""Training recipes: for each GEMM of a linear layer, how each operand is quantized and how
the product is computed.

A linear layer ``y = x w^T`` runs three GEMMs, each ``C = A B^T`` reduced over one axis:

==========  =====================  ==============  ===============  ==================
GEMM        C = A B^T              A               B                reduction axis
==========  =====================  ==============  ===============  ==================
``fprop``   ``y  = x w^T``         x  (M x K)      w   (N x K)      K (in-features)
``dgrad``   ``dx = dy w``          dy (M x N)      w^T (K x N)      N (out-features)
``wgrad``   ``dw = dy^T x``        dy^T (N x M)    x^T (K x M)      M (tokens)
==========  =====================  ==============  ===============  ==================

Every operand is quantized with blocks along its GEMM's reduction axis (rowwise for
fprop, "columnwise" -- along the tokens -- for wgrad), as the hardware GEMM needs. A
:class:`Recipe` holds one :class:`Gemm` per GEMM; a :class:`Gemm` holds one
:class:`Operand` per side, an optional RHT applied to both operands along the reduction
axis (it cancels in the product: ``(A T)(B T)^T = A B^T``), and how the product is
computed (``"dequantize"``: fp4spec.dequantize, then a bf16 torch matmul -- the fast path;
or an accumulator model name: :func:`fp4spec.matmul`, bit-exact to it).

The presets (:data:`recipes`, :func:`get_recipe`) carry the names users know; each
docstring names its source. Everything here is a frozen description: :mod:`.linear`
executes it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from types import MappingProxyType
from typing import Any, Mapping

from fp4spec import ROUNDING_MODES, Scheme, accumulators, get_scheme, resolve_rht

#: Ways a GEMM's product is computed besides the accumulator models of ``fp4spec.accumulators``.
DEQUANTIZE = "dequantize"

#: Scopes of a quantized operand that data-parallel ranks split along its rows (x, dy).
SCOPES = ("global", "local")

#: The GEMMs of a linear layer, in the order they run.
GEMMS = ("fprop", "dgrad", "wgrad")

#: Each GEMM's operands: which tensor is A and which is B (the docstring's table).
OPERAND_TENSORS = MappingProxyType({"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")})

#: High-precision compute dtypes of the fast path.
COMPUTE_DTYPES = ("bfloat16", "float32")


def _frozen_overrides(overrides) -> tuple[tuple[str, Any], ...]:
    if overrides is None:
        return ()
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    try:
        pairs = tuple(sorted((str(k), v) for k, v in items))
    except (TypeError, ValueError):
        raise ValueError(f"overrides: {overrides!r} is not a mapping of scheme fields to values") from None
    return pairs


@dataclasses.dataclass(frozen=True)
class Operand:
    """How one GEMM operand is quantized.

    Fields:
        scheme: a scheme name (``fp4spec.schemes``), a :class:`fp4spec.Scheme` (any
            user-defined one), or None: the operand stays in high precision.
        rounding: element rounding, one of ``fp4spec.ROUNDING_MODES`` (``"rne"``,
            ``"sr"``...). ``"sr"`` draws ``sr_bits`` random bits per element, replayable from
            the recipe's seed (:mod:`fp4spec.training.random_bits`).
        overrides: scheme field overrides (``fp4spec.get_scheme(scheme, **overrides)``), a
            mapping; stored as sorted pairs so the operand stays hashable.
        sr_bits: random bits per element for ``"sr"`` (default 8, as Blackwell ``cvt.rs``).
    """

    scheme: "str | Scheme | None" = None
    rounding: str = "rne"
    overrides: Any = ()
    sr_bits: int = 8

    def __post_init__(self):
        object.__setattr__(self, "overrides", _frozen_overrides(self.overrides))
        if self.rounding not in ROUNDING_MODES:
            raise ValueError(f"rounding: {self.rounding!r} is not one of {', '.join(map(repr, ROUNDING_MODES))}")
        if isinstance(self.sr_bits, bool) or not isinstance(self.sr_bits, int) or not 1 <= self.sr_bits <= 24:
            raise ValueError(f"sr_bits: {self.sr_bits!r} is not an integer in [1, 24]")
        if self.scheme is None:
            if self.overrides or self.rounding != "rne":
                raise ValueError("scheme: None (high precision) takes no overrides and no rounding")
            return
        self.resolved  # noqa: B018 -- unknown schemes and bad overrides fail here, with get_scheme's message

    @property
    def quantized(self) -> bool:
        return self.scheme is not None

    @property
    def resolved(self) -> Scheme | None:
        """The scheme descriptor, overrides applied (None for a high-precision operand)."""
        return None if self.scheme is None else get_scheme(self.scheme, **dict(self.overrides))

    def describe(self) -> str:
        if self.scheme is None:
            return "bf16"
        s = self.resolved
        name = s.name + ("(" + ", ".join(f"{k}={v}" for k, v in self.overrides) + ")" if self.overrides else "")
        block = "x".join(map(str, s.block_shape))
        return f"{name} {s.element.name} {block} {self.rounding}"


HIGH = Operand()


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One GEMM ``C = A B^T`` of a linear layer.

    Fields:
        a, b: the operands (:data:`OPERAND_TENSORS` says which tensors they are).
        rht: None, an :class:`fp4spec.RHT`, ``"te"`` or an int seed (:func:`fp4spec.resolve_rht`):
            applied to both operands along the reduction axis before quantizing (both must
            be quantized).
        compute: ``"dequantize"`` (default): each operand through ``fp4spec.dequantize``,
            converted to the recipe's compute dtype (bf16), then one torch matmul; or an
            accumulator model name of ``fp4spec.accumulators`` (``"exact"``, ``"fp32"``,
            ``"sm100-mxf4nvf4"``...): ``fp4spec.matmul(qa, qb, accumulator=compute)``, bit-exact,
            single process only (on Hopper the triton GEMM computes ``sm90-bf16``, ``exact``,
            ``fp32`` and the ``sm100`` models of CUDA operands; elsewhere the emulator, slow).
    """

    a: Operand = HIGH
    b: Operand = HIGH
    rht: Any = None
    compute: str = DEQUANTIZE

    def __post_init__(self):
        for side in ("a", "b"):
            if not isinstance(getattr(self, side), Operand):
                raise TypeError(f"{side}: expected an Operand, got {type(getattr(self, side)).__name__}")
        object.__setattr__(self, "rht", resolve_rht(self.rht))
        if self.rht is not None and not (self.a.quantized and self.b.quantized):
            raise ValueError("rht: the transform must rotate both operands (it cancels in A B^T only then); "
                             "both a and b need a scheme")
        if self.compute != DEQUANTIZE:
            if self.compute not in accumulators:
                raise ValueError(f"compute: {self.compute!r} is not {DEQUANTIZE!r} or an accumulator model "
                                 f"({', '.join(map(repr, accumulators))})")
            if not (self.a.quantized and self.b.quantized):
                raise ValueError(f"compute: the accumulator model {self.compute!r} multiplies two quantized "
                                 f"operands; both a and b need a scheme")

    @property
    def quantized(self) -> bool:
        return self.a.quantized or self.b.quantized

    def describe(self) -> str:
        rht = "-" if self.rht is None else f"RHT{self.rht.size}"
        return f"A: {self.a.describe()}; B: {self.b.describe()}; rht {rht}; {self.compute}"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A 4-bit training recipe: the three GEMMs of every converted linear layer.

    Fields:
        name: a label (kept in results and checkpoints).
        fprop, dgrad, wgrad: the :class:`Gemm` of each (module docstring).
        keep_high_precision: ``fnmatch`` patterns of module names (``model.named_modules()``)
            that :func:`fp4spec.training.convert` leaves as ``torch.nn.Linear``.
        scope: for operands whose rows data-parallel ranks split (x and dy, the token
            axis): ``"global"`` (default) quantizes the global batch's tensor -- tensor amax,
            blocks along the tokens and SR bits do not depend on the number of processes --
            or ``"local"``: each rank its own rows (TransformerEngine's data-parallel
            behaviour: its NVFP4 quantizers reduce the amax only over a tensor-parallel
            group when given one). Weights are always whole tensors (FSDP gathers them first).
        seed: the root of every stochastic-rounding bit (:mod:`fp4spec.training.random_bits`).
        compute_dtype: the fast path's matmul dtype, ``"bfloat16"`` (default) or ``"float32"``.
        backend: ``fp4spec.quantize``'s ``backend=`` for every operand: ``"auto"`` (default:
            triton for CUDA tensors where it supports the request, else torch, else numpy),
            or a backend name (every backend gives the same bits; naming one makes a
            request it cannot run an error instead of a slower fallback).
    """

    name: str
    fprop: Gemm = Gemm()
    dgrad: Gemm = Gemm()
    wgrad: Gemm = Gemm()
    keep_high_precision: tuple[str, ...] = ()
    scope: str = "global"
    seed: int = 0
    compute_dtype: str = "bfloat16"
    backend: str = "auto"

    def __post_init__(self):
        for g in GEMMS:
            if not isinstance(getattr(self, g), Gemm):
                raise TypeError(f"{g}: expected a Gemm, got {type(getattr(self, g)).__name__}")
        if isinstance(self.keep_high_precision, str):
            object.__setattr__(self, "keep_high_precision", (self.keep_high_precision,))
        object.__setattr__(self, "keep_high_precision", tuple(self.keep_high_precision))
        if self.scope not in SCOPES:
            raise ValueError(f"scope: {self.scope!r} is not one of {', '.join(map(repr, SCOPES))}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed: {self.seed!r} is not an integer in [0, 2**63)")
        if not isinstance(self.backend, str) or not self.backend:
            raise ValueError(f"backend: {self.backend!r} is not a backend name ('auto', 'numpy', 'torch', 'triton'...)")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute_dtype: {self.compute_dtype!r} is not one of "
                             f"{', '.join(map(repr, COMPUTE_DTYPES))}")

    @property
    def quantized(self) -> bool:
        """False when no operand of any GEMM is quantized (the layer is a plain linear)."""
        return any(getattr(self, g).quantized for g in GEMMS)

    def gemm(self, name: str) -> Gemm:
        if name not in GEMMS:
            raise ValueError(f"gemm: {name!r} is not one of {', '.join(map(repr, GEMMS))}")
        return getattr(self, name)

    def keeps(self, module_name: str) -> bool:
        """True if ``module_name`` matches a :attr:`keep_high_precision` pattern."""
        return any(fnmatch.fnmatchcase(module_name, p) for p in self.keep_high_precision)

    def replace(self, **changes) -> "Recipe":
        """A copy with fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def table(self) -> str:
        """Markdown: one row per GEMM and operand."""
        rows = ["| GEMM | operand | scheme | element | block | rounding | RHT | compute |",
                "|---|---|---|---|---|---|---|---|"]
        for g in GEMMS:
            gm = self.gemm(g)
            for side, tensor in zip(("a", "b"), OPERAND_TENSORS[g]):
                op = getattr(gm, side)
                s = op.resolved
                rht = "-" if gm.rht is None else f"{gm.rht.size}-point"
                cells = (["bf16", "-", "-", "-"] if s is None else
                         [s.name, s.element.name, "x".join(map(str, s.block_shape)), op.rounding])
                rows.append(f"| {g} | {tensor} | " + " | ".join(cells) + f" | {rht} | {gm.compute} |")
        return "\n".join(rows)


# -- presets ---------------------------------------------------------------------------------------

def bf16() -> Recipe:
    """No quantization: every GEMM in bf16 (the baseline every 4-bit recipe is measured against)."""
    return Recipe("bf16")


def nvfp4() -> Recipe:
    """TransformerEngine's ``NVFP4BlockScaling`` with its defaults.

    Source: NVIDIA/TransformerEngine ``transformer_engine/common/recipe/__init__.py``
    (``NVFP4BlockScaling.__post_init__``: ``fp4_quant_fwd_inp`` RHT, no SR, 1D;
    ``fp4_quant_fwd_weight`` no RHT, no SR, 2D 16x16; ``fp4_quant_bwd_grad`` RHT, SR, 1D;
    "RHT is currently only applied to column-wise usage so that it can be used for wgrad
    GEMM") and ``transformer_engine/pytorch/quantization.py``
    (``NVFP4BlockScalingRecipeState.make_quantizers``: forward weights get the weight
    parameters, other forward tensors the input ones, every backward tensor the gradient
    ones); the NVFP4 pretraining paper, arXiv 2509.25149. So:

    * fprop ``x w^T``: x 1x16 RNE; w 16x16 tiles (``nvfp4_2d``) RNE; no RHT.
    * dgrad ``dy w``: dy 1x16 SR; w 16x16 tiles RNE (the same values as in fprop: a
      tile's scale does not depend on the direction); no RHT.
    * wgrad ``dy^T x``: dy and x 1x16 along the tokens, dy SR, x RNE; TE's 16-point RHT
      (its fixed sign vector, ``fp4spec.RHT.te()``) on both.

    TE quantizes each rank's activations with their own amax under data parallelism
    (``scope="local"``); this preset uses ``scope="global"`` so that results do not depend on
    the number of processes (use ``.replace(scope="local")`` for TE's behaviour).
    """
    x, w, dy = Operand("nvfp4"), Operand("nvfp4_2d"), Operand("nvfp4", "sr")
    return Recipe("nvfp4", fprop=Gemm(x, w), dgrad=Gemm(dy, w), wgrad=Gemm(dy, x, rht="te"))


def mxfp4() -> Recipe:
    """OCP Microscaling MXFP4 (E2M1, E8M0 scale, blocks of 32, scale rule floor as OCP MX v1.0
    section 6.3): RNE in the forward pass, stochastic rounding on the gradients (dy in dgrad and
    wgrad), no RHT. Sources: the OCP Microscaling Formats v1.0 specification (the scheme);
    the recipe -- SR on the backward pass to keep gradient estimates unbiased -- follows
    "Training LLMs with MXFP4" (Tseng et al., arXiv 2502.20586), without its RHT.
    """
    a, dy = Operand("mxfp4"), Operand("mxfp4", "sr")
    return Recipe("mxfp4", fprop=Gemm(a, a), dgrad=Gemm(dy, a), wgrad=Gemm(dy, a))


def _uniform_family(name: str, scheme: str) -> Recipe:
    a, dy = Operand(scheme), Operand(scheme, "sr")
    return Recipe(name, fprop=Gemm(a, a, rht="te"), dgrad=Gemm(dy, a, rht="te"), wgrad=Gemm(dy, a, rht="te"))


def ufp4() -> Recipe:
    """UFP4 as the seed paper states it (arXiv 2606.20381, abstract and write-ups): the uniform
    E1M2 grid {0, 0.5, ..., 3.5} in a two-level scheme, a 16-point RHT on all three GEMMs
    (fprop, dgrad and wgrad, both operands along the reduction axis), stochastic rounding on
    dy only (dgrad and wgrad), round-to-nearest-even elsewhere.

    Not published, so chosen here: fp4spec's ``ufp4`` scheme (NVFP4's structure: 1x16 blocks,
    UE4M3 block scale, FP32 tensor scale, E1M2 elements) for every operand, weights included
    (1x16 rows, not 16x16 tiles: with an RHT on both fprop and dgrad a tile's
    transpose-invariance is lost anyway); TE's sign vector for the RHT.
    """
    return _uniform_family("ufp4", "ufp4")


def ufp4_int4() -> Recipe:
    """:func:`ufp4` on the symmetric INT4 grid (the ``nvint4`` scheme: {-7..7}, 1x16, UE4M3 +
    FP32 tensor scale): the seed paper's other uniform grid; everything else identical."""
    return _uniform_family("ufp4_int4", "nvint4")


def nvfp4_full_rht() -> Recipe:
    """The RHT-paradox ablation: :func:`ufp4` with E2M1 elements (the ``nvfp4`` scheme) -- RHT
    on all three GEMMs, SR on dy only, 1x16 blocks everywhere. The seed paper claims RHT on the
    forward GEMMs hurts E2M1 and helps uniform grids; this recipe and ufp4 differ only in the
    grid."""
    return _uniform_family("nvfp4_full_rht", "nvfp4")


_PRESETS = {f.__name__: f for f in (bf16, nvfp4, mxfp4, ufp4, ufp4_int4, nvfp4_full_rht)}

#: Every preset, by name (values are :class:`Recipe`).
recipes: Mapping[str, Recipe] = MappingProxyType({name: f() for name, f in _PRESETS.items()})


def get_recipe(name: "str | Recipe", **changes) -> Recipe:
    """A preset by name (or a :class:`Recipe` as it is), with fields changed:
    ``get_recipe("nvfp4", seed=1, scope="local")``."""
    if isinstance(name, Recipe):
        base = name
    else:
        try:
            base = recipes[name]
        except (KeyError, TypeError):
            raise ValueError(f"recipe: unknown recipe {name!r}; presets: {', '.join(recipes)}") from None
    return dataclasses.replace(base, **changes) if changes else base


def _cell(op: Operand) -> str:
    if not op.quantized:
        return "bf16"
    s = op.resolved
    return f"{s.name} {s.tile_rows}x{s.block_size} {op.rounding.upper()}"


def presets_table(names=None) -> str:
    """Markdown: one row per preset, each GEMM operand's scheme, block and rounding, and the GEMMs
    with an RHT (docs/training.md quotes it; a test keeps them equal)."""
    head = ["recipe"] + [f"{g} {t}" for g in GEMMS for t in OPERAND_TENSORS[g]] + ["RHT (16-point)", "scope"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names or recipes:
        r = recipes[name]
        cells = [_cell(getattr(r.gemm(g), side)) for g in GEMMS for side in ("a", "b")]
        rht = ", ".join(g for g in GEMMS if r.gemm(g).rht is not None) or "-"
        rows.append(f"| `{name}` | " + " | ".join(cells) + f" | {rht} | {r.scope} |")
    return "\n".join(rows)


__all__ = ["COMPUTE_DTYPES", "presets_table", "DEQUANTIZE", "GEMMS", "Gemm", "HIGH", "OPERAND_TENSORS", "Operand", "Recipe", "SCOPES",
           "bf16", "get_recipe", "mxfp4", "nvfp4", "nvfp4_full_rht", "recipes", "ufp4", "ufp4_int4"]
