"""Block-scaling scheme descriptors: which element format, which block, which scale, which rule.

A :class:`Scheme` only *describes*; :mod:`fp4spec.scaling` (exact scalar reference) and
:mod:`fp4spec.emulator.scaling` (vectorized) *define* what quantizing with it does.

Three structures:

* ``"mx"`` -- OCP Microscaling: one E8M0 (power-of-two) scale per block of 32, chosen from
  the block amax by a scale rule (``floor``, ``ceil``, ``rceil``, ``even``).
* ``"two_level"`` -- the NVFP4 structure: one UE4M3 scale per block of 16 plus one FP32
  scale per tensor, computed in a vendor's exact FP32 operation order (``profile="te"`` or
  ``"torchao"``); the block amax maps to the element max (``scale_rule="amax"``) or the
  better of two candidates (``scale_rule="4over6"``). Blocks are 1 x 16 along the axis or
  16 x 16 tiles over the last two dimensions (``block_shape=(16, 16)``).
* ``"hif4"`` -- HiFloat4: 64 elements, E6M2 scale plus 8 + 16 micro-exponent bits
  (implemented in :mod:`fp4spec.hif4`).
* ``"if4"`` -- IF4 (fouroversix): the NVFP4 structure, but each block of 16 is E2M1 or an
  INT4 grid stretched by 6/7, whichever the scale rule (``mse``, ``mae``, ``abs_max``)
  prefers; the E4M3 scale's sign bit flags INT4 (implemented in :mod:`fp4spec.if4`). Blocks
  are 1 x 16 or 16 x 16 tiles (``if4_2d``: one scale and one choice per 256 values,
  fouroversix's ``block_scale_2d``).

Catalogue (:data:`schemes`):

======================  ========  ======  =======  ======  =========================
name                    element   block   scale    rule    profile
======================  ========  ======  =======  ======  =========================
mxfp4                   e2m1      32      e8m0     floor   ocp
mxfp6_e2m3, _e3m2       e2m3/e3m2 32      e8m0     floor   ocp
mxfp8_e4m3, _e5m2       e4m3/e5m2 32      e8m0     floor   ocp
nvfp4                   e2m1      16      ue4m3    amax    te   (+ fp32 tensor scale)
nvfp4_2d                e2m1      16x16   ue4m3    amax    te   (+ fp32 tensor scale)
ufp4                    e1m2      16 [*]  ue4m3[*] amax    te   (+ fp32 tensor scale)
nvint4                  int4_sym  16      ue4m3    amax    te   (+ fp32 tensor scale)
nvint4_e0m3             e0m3      16      ue4m3    amax    te   (+ fp32 tensor scale) [e]
hif4                    s1p2      64      e6m2     hif4    hif4
if4                     e2m1|int4 16      e4m3[s]  mse     fouroversix (+ fp32 tensor scale)
if4_2d                  e2m1|int4 16x16   e4m3[s]  mse     fouroversix (+ fp32 tensor scale)
======================  ========  ======  =======  ======  =========================

[s] the E4M3 byte's sign bit is IF4's INT4 flag; its low 7 bits are the UE4M3 scale.

[e] NV-INT4 with sign-magnitude codes (E0M3: 0x8 is -0, 0x9..0xF are -1..-7), the operand
format Blackwell's ``tcgen05.mma.kind::mxf4nvf4`` reportedly accepts (flashinfer-ai/flashinfer
#3934, FlashRT #146) [secondary source, unmeasured]; ``nvint4`` has the two's complement codes
of fouroversix's ``nvint4``. Values and scales are the same.

[*] UFP4 (arXiv 2606.20381): the paper's abstract, the only part read, does not publish the
block size, the scale format or the scale rule. fp4spec's ``ufp4`` is an assumption: the
uniform E1M2 grid ``{0, 0.5, ..., 3.5}`` in the NVFP4 two-level structure with 3.5 in
place of 6. Override ``block_size``, ``scale`` and ``element_max`` to model another reading.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
from types import MappingProxyType
from typing import Mapping

from .number_formats import FloatFormat, Format, get_format
from .profiles import get_profile

STRUCTURES = ("mx", "two_level", "hif4", "if4")

#: Scale rules allowed per structure.
SCALE_RULES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "mx": ("floor", "ceil", "rceil", "even"),
    "two_level": ("amax", "4over6"),
    "hif4": ("hif4",),
    "if4": ("mse", "mae", "abs_max"),
})

#: Error measures of the 4over6 rule (``abs_max``: fouroversix's, the largest |error|).
ERROR_MODES = ("mae", "mse", "abs_max")


@dataclasses.dataclass(frozen=True)
class Scheme:
    """A block-scaling scheme.

    Fields:
        name: catalogue name (kept when fields are overridden).
        structure: ``"mx"``, ``"two_level"``, ``"hif4"`` or ``"if4"`` (see the module docstring).
        element: element format descriptor (IF4: E2M1, the format of its FP blocks).
        block_shape: ``(k,)`` -- blocks of k consecutive elements along the quantized axis;
            or ``(r, k)`` -- r x k tiles over the last two dimensions (one amax per tile; the
            scale tensor still has one entry per 1 x k row block, each row of a tile holding
            the tile's scale).
        scale: block-scale format descriptor (E8M0, UE4M3, E6M2).
        scale_rule: how the block scale is chosen (:data:`SCALE_RULES`).
        global_scale: ``"fp32"`` for a per-tensor FP32 scale (two-level), else None.
        profile: the vendor profile whose policies apply (:mod:`fp4spec.profiles`).
        element_max: two-level only: the value a block's amax maps to; None means the
            element format's max (6 for E2M1, 3.5 for E1M2, 7 for INT4 symmetric).
        scale_max: two-level only: the scale bound ``Emax`` in the tensor scale
            ``S_enc = Emax * element_max / amax``; None means the scale format's max (448).
            TransformerEngine's 4over6 option uses 256.
        error_mode: 4over6 only: ``"mae"`` (default), ``"mse"`` or ``"abs_max"``.
    """

    name: str
    structure: str
    element: Format
    block_shape: tuple[int, ...]
    scale: Format
    scale_rule: str
    global_scale: str | None
    profile: str
    element_max: float | None = None
    scale_max: float | None = None
    error_mode: str | None = None

    # -- derived ---------------------------------------------------------------------------
    @property
    def block_size(self) -> int:
        """Elements per block along the quantized axis (the last entry of ``block_shape``)."""
        return self.block_shape[-1]

    @property
    def tile_rows(self) -> int:
        """Rows per tile: 1 for 1D blocks, r for r x k tiles."""
        return self.block_shape[0] if len(self.block_shape) == 2 else 1

    @property
    def is_2d(self) -> bool:
        return len(self.block_shape) == 2

    @property
    def max_elem(self) -> float:
        """The value the block amax maps to (two-level) / the element format's max."""
        return float(self.element.max if self.element_max is None else self.element_max)

    @property
    def scale_bound(self) -> float:
        """``Emax`` of the two-level tensor scale (the scale format's max unless overridden)."""
        return float(self.scale.max if self.scale_max is None else self.scale_max)

    @property
    def policies(self):
        """The policies of this scheme's profile (a read-only mapping)."""
        return get_profile(self.profile).policies

    def describe(self) -> str:
        """One line: name, element, block, scale, rule, tensor scale, profile."""
        block = "x".join(map(str, self.block_shape))
        extra = []
        if self.element_max is not None:
            extra.append(f"element_max={self.element_max:g}")
        if self.scale_max is not None:
            extra.append(f"scale_max={self.scale_max:g}")
        if self.scale_rule == "4over6":
            extra.append(f"error={self.error_mode or 'mae'}")
        return (f"{self.name:<11} {self.structure:<9} element={self.element.name:<8} block={block:<5} "
                f"scale={self.scale.name:<5} rule={self.scale_rule:<6} "
                f"tensor_scale={self.global_scale or '-':<4} profile={self.profile}"
                + (" " + " ".join(extra) if extra else ""))

    # -- validation ------------------------------------------------------------------------
    def __post_init__(self):
        if self.structure not in STRUCTURES:
            raise ValueError(f"structure: {self.structure!r} is not one of {', '.join(map(repr, STRUCTURES))}")
        shape = self.block_shape
        if (not isinstance(shape, tuple) or len(shape) not in (1, 2)
                or not all(isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 1 for k in shape)):
            raise ValueError(f"block_shape: {shape!r} is not (k,) or (r, k) with positive integers")
        rules = SCALE_RULES[self.structure]
        if self.scale_rule not in rules:
            raise ValueError(f"scale_rule: {self.scale_rule!r} is not one of {', '.join(map(repr, rules))} "
                             f"for a {self.structure!r} scheme ({self.name})")
        profile = get_profile(self.profile)
        if self.structure not in profile.structures:
            able = [p.name for p in _all_profiles() if self.structure in p.structures]
            raise ValueError(f"profile: {self.profile!r} cannot drive a {self.structure!r} scheme ({self.name}); "
                             f"use one of {', '.join(map(repr, able))}")
        getattr(self, f"_check_{self.structure}")()

    def _check_mx(self):
        if self.scale.name != "e8m0":
            raise ValueError(f"scale: an MX scheme needs the E8M0 scale, not {self.scale.name!r}")
        if not isinstance(self.element, FloatFormat):
            raise ValueError(f"element: an MX scheme needs a float element format (emax is taken from it), "
                             f"not {self.element.name!r}")
        if self.is_2d:
            raise ValueError("block_shape: MX schemes use 1D blocks; 2D tiles are a two-level (NVFP4) option")
        self._no_two_level_fields()

    def _no_two_level_fields(self):
        for field in ("element_max", "scale_max", "error_mode"):
            if getattr(self, field) is not None:
                raise ValueError(f"{field}: only two-level schemes (nvfp4, nvfp4_2d, ufp4, nvint4, nvint4_e0m3) have it")
        if self.global_scale is not None:
            raise ValueError(f"global_scale: a {self.structure!r} scheme has no tensor scale")

    def _check_two_level(self):
        if self.global_scale != "fp32":
            raise ValueError(f"global_scale: a two-level scheme needs 'fp32', not {self.global_scale!r}")
        if self.element.bits > 8 or self.scale.bits > 8:
            raise ValueError("element, scale: codes must fit in a byte")
        for field, value in (("element_max", self.element_max), ("scale_max", self.scale_max)):
            if value is not None and not (isinstance(value, numbers.Real) and 0 < float(value) < float("inf")):
                raise ValueError(f"{field}: {value!r} is not a positive finite number")
        if self.scale_max is not None and float(self.scale_max) > self.scale.max:
            raise ValueError(f"scale_max: {self.scale_max!r} exceeds the largest {self.scale.name} value {self.scale.max:g}")
        if self.element_max is not None and float(self.element_max) > self.element.max:
            # Mapping the block amax above the grid's top would saturate every block's largest
            # elements: refuse rather than clip silently.
            raise ValueError(f"element_max: {self.element_max!r} exceeds the largest {self.element.name} value "
                             f"{self.element.max:g}; use a value in (0, {self.element.max:g}]")
        with np.errstate(over="ignore"):
            numerator = np.float32(self.scale_bound) * np.float32(self.max_elem)
        if not np.isfinite(numerator):
            raise ValueError(f"scale, scale_max: the tensor-scale numerator scale_max * element_max = "
                             f"{self.scale_bound:g} * {self.max_elem:g} overflows float32; pass a smaller scale_max")
        if self.is_2d and self.tile_rows < 1:
            raise ValueError(f"block_shape: {self.block_shape!r}")
        if self.scale_rule == "4over6":
            if get_profile(self.profile).policies.get("nv_4over6") != "yes":
                raise ValueError(f"scale_rule: '4over6' is an option of TransformerEngine and fouroversix; profile "
                                 f"{self.profile!r} does not have it (use profile='te' or 'fouroversix')")
            if self.element.name != "e2m1" or self.scale.name != "ue4m3" or self.element_max not in (None, 6.0):
                raise ValueError("scale_rule: '4over6' is defined for E2M1 elements with UE4M3 scales only")
            if self.block_size != 16 or self.tile_rows not in (1, 16):
                raise ValueError("block_shape: '4over6' is defined for 1x16 blocks and 16x16 tiles only")
            if self.error_mode not in (None, *ERROR_MODES):
                raise ValueError(f"error_mode: {self.error_mode!r} is not one of {', '.join(map(repr, ERROR_MODES))}")
            if self.is_2d and get_profile(self.profile).policies.get("nv_4over6_error_sum") == "torch_cpu":
                raise ValueError(f"block_shape: profile {self.profile!r} sums 4over6 errors as torch.sum does over a "
                                 f"row of 16; its 16 x 16 tiles (a sum over 256) are not modelled")
        elif self.error_mode is not None:
            raise ValueError("error_mode: only used with scale_rule='4over6'")

    def _check_hif4(self):
        fixed = {"element": "s1p2", "scale": "e6m2"}
        for field, want in fixed.items():
            if getattr(self, field).name != want:
                raise ValueError(f"{field}: HiF4 is defined with {want!r} only")
        if self.block_shape != (64,):
            raise ValueError("block_shape: HiF4 groups are 64 elements (8 x 2 x 4); it cannot be changed")
        self._no_two_level_fields()

    def _check_if4(self):
        fixed = {"element": "e2m1", "scale": "e4m3"}
        for field, want in fixed.items():
            if getattr(self, field).name != want:
                raise ValueError(f"{field}: IF4 is defined with {want!r} only (its INT4 blocks are flagged by the "
                                 f"E4M3 scale's sign bit)")
        if self.block_shape not in ((16,), (16, 16)):
            raise ValueError(f"block_shape: IF4 blocks are 1 x 16 elements or 16 x 16 tiles (fouroversix's "
                             f"block_scale_2d); {self.block_shape!r} is not modelled")
        if self.global_scale != "fp32":
            raise ValueError(f"global_scale: IF4 has a float32 tensor scale ('fp32'), not {self.global_scale!r}")
        for field in ("element_max", "scale_max", "error_mode"):
            if getattr(self, field) is not None:
                raise ValueError(f"{field}: IF4 fixes it (E2M1 max 6, E4M3 bound 448, the error is the scale rule)")


def _all_profiles():
    from .profiles import list_profiles

    return list_profiles()


def _mx(name: str, element: str) -> Scheme:
    return Scheme(name, "mx", get_format(element), (32,), get_format("e8m0"), "floor", None, "ocp")


def _two_level(name: str, element: str, block_shape=(16,)) -> Scheme:
    return Scheme(name, "two_level", get_format(element), block_shape, get_format("ue4m3"), "amax", "fp32", "te")


def _catalogue() -> dict[str, Scheme]:
    items = [
        _mx("mxfp4", "e2m1"),
        _mx("mxfp6_e2m3", "e2m3"),
        _mx("mxfp6_e3m2", "e3m2"),
        _mx("mxfp8_e4m3", "e4m3"),
        _mx("mxfp8_e5m2", "e5m2"),
        _two_level("nvfp4", "e2m1"),
        _two_level("nvfp4_2d", "e2m1", (16, 16)),
        _two_level("ufp4", "e1m2"),
        _two_level("nvint4", "int4_sym"),
        _two_level("nvint4_e0m3", "e0m3"),
        Scheme("hif4", "hif4", get_format("s1p2"), (64,), get_format("e6m2"), "hif4", None, "hif4"),
        Scheme("if4", "if4", get_format("e2m1"), (16,), get_format("e4m3"), "mse", "fp32", "fouroversix"),
        Scheme("if4_2d", "if4", get_format("e2m1"), (16, 16), get_format("e4m3"), "mse", "fp32", "fouroversix"),
    ]
    return {s.name: s for s in items}


_SCHEMES = _catalogue()

#: Read-only mapping of every catalogued scheme, by name.
schemes: Mapping[str, Scheme] = MappingProxyType(_SCHEMES)

#: Keyword overrides accepted by :func:`get_scheme`.
OVERRIDES = ("block_size", "block_shape", "element", "scale", "scale_rule", "profile",
             "element_max", "scale_max", "error_mode", "sr_headroom")

#: Named headrooms for unbiased stochastic rounding (:func:`sr_headroom_max`).
SR_HEADROOMS = ("16/17",)


def sr_headroom_max(element: Format, headroom: str) -> float:
    """``element_max`` of the named SR headroom: ``"16/17"`` -> fp32(max * 16/17) (RNE of the exact value).

    With the block amax mapped to 16/17 of the grid's top, an E4M3 block scale rounded down by
    its largest relative step, 1 + 2^-4 = 17/16, still scales no element past the top: stochastic
    rounding never clips, so its only bias is the 2^-N resolution of its probabilities (normal
    E4M3 scales; a subnormal scale can round down further). Quartet II (arXiv 2601.22813);
    fouroversix's ``RoundStyle.stochastic_unbiased`` (fp32(6 * 16/17) = fp32(96/17)).
    """
    from fractions import Fraction

    if headroom not in SR_HEADROOMS:
        raise ValueError(f"sr_headroom: {headroom!r} is not one of {', '.join(map(repr, SR_HEADROOMS))}")
    return float(np.float32(float(Fraction(element.max) * Fraction(16, 17))))


# -- scheme specs: 'name[:field=value,...]' (the grammar: fp4spec.scheme_specs) ------------------------

def _spec_value(field: str, text: str):
    """Step 3 of :mod:`fp4spec.scheme_specs`: the value of one override."""
    if field == "block_shape":
        try:
            return tuple(int(p) for p in text.lower().replace("*", "x").split("x"))
        except ValueError:
            raise ValueError(f"scheme: block_shape={text!r} is not 'k' or 'rxk' (e.g. 16x16)") from None
    if field == "block_size":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"scheme: block_size={text!r} is not an integer") from None
    if field in ("element_max", "scale_max"):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"scheme: {field}={text!r} is not a number") from None
    return text


def parse_scheme_spec(spec: str) -> tuple[str, dict]:
    """Steps 1-3 of :mod:`fp4spec.scheme_specs`: ``(name, overrides)`` of a spec string
    (ValueError naming the bad part)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"scheme: {spec!r} is not a scheme spec; use a name ({', '.join(schemes)}) "
                         f"optionally followed by ':field=value,...'")
    name, _, rest = spec.strip().partition(":")
    overrides = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        field, eq, value = part.partition("=")
        field = field.strip()
        if not eq or field not in OVERRIDES:
            raise ValueError(f"scheme: {part!r} in {spec!r} is not field=value with field one of "
                             f"{', '.join(OVERRIDES)}")
        if field in overrides:
            raise ValueError(f"scheme: {field!r} is given twice in {spec!r}")
        overrides[field] = _spec_value(field, value.strip())
    return name.strip(), overrides


def get_scheme(name: "str | Scheme", **overrides) -> Scheme:
    """Look up a scheme by name or scheme spec and apply overrides (a :class:`Scheme` passes through).

    ``name`` may be a scheme spec, ``"mxfp4:scale_rule=rceil"`` (:mod:`fp4spec.scheme_specs`);
    its fields and the keyword overrides are applied together (a field given in both is a
    ValueError).

    Overrides (all optional):
        block_size: elements per block along the axis (keeps 2D tiles square-rowed:
            ``(r, k)`` becomes ``(r, block_size)``).
        block_shape: ``(k,)`` or ``(r, k)``.
        element, scale: format names or descriptors.
        scale_rule: MX: ``"floor"``, ``"ceil"``, ``"rceil"``, ``"even"``; two-level:
            ``"amax"`` or ``"4over6"``; IF4: ``"mse"``, ``"mae"`` or ``"abs_max"``.
        profile: ``"ocp"`` or ``"torchao"`` (MX); ``"te"`` or ``"torchao"`` (two-level).
        element_max, scale_max, error_mode: two-level fields, see :class:`Scheme`.
        sr_headroom: two-level: ``"16/17"`` sets element_max = fp32(max * 16/17), the headroom
            that keeps stochastic rounding unbiased (:func:`sr_headroom_max`).

    Examples::

        get_scheme("mxfp4", scale_rule="rceil")
        get_scheme("nvfp4", profile="torchao")
        get_scheme("nvfp4", scale_rule="4over6", scale_max=256, error_mode="mse")
        get_scheme("ufp4", block_size=32, element_max=3.5)
        get_scheme("nvfp4", sr_headroom="16/17")   # then quantize(..., rounding="sr")
    """
    if isinstance(name, str) and ":" in name:
        name, in_spec = parse_scheme_spec(name)
        twice = sorted(set(in_spec) & set(overrides))
        if twice:
            raise ValueError(f"{twice[0]}: given both in the scheme spec and as a keyword; pass it once")
        overrides = {**in_spec, **overrides}
    if isinstance(name, Scheme):
        base = name
    else:
        try:
            base = _SCHEMES[name]
        except (KeyError, TypeError):
            raise ValueError(f"scheme: unknown scheme {name!r}; known schemes: {', '.join(_SCHEMES)}") from None
    if not overrides:
        return base
    unknown = [k for k in overrides if k not in OVERRIDES]
    if unknown:
        raise ValueError(f"{unknown[0]}: not a scheme field; overridable fields: {', '.join(OVERRIDES)}")
    changes = dict(overrides)
    if "sr_headroom" in changes:
        headroom = changes.pop("sr_headroom")
        if changes.get("element_max") is not None:
            raise ValueError("sr_headroom, element_max: pass one of them (sr_headroom sets element_max)")
        element = get_format(changes.get("element", base.element))
        if changes.get("structure", base.structure) != "two_level":
            raise ValueError(f"sr_headroom: only two-level schemes have an element_max to lower, not {base.name!r}")
        changes["element_max"] = sr_headroom_max(element, headroom)
    if "block_size" in changes:
        k = changes.pop("block_size")
        if "block_shape" in changes:
            raise ValueError("block_size, block_shape: pass one of them, not both")
        if not isinstance(k, numbers.Integral) or isinstance(k, bool) or k < 1:
            raise ValueError(f"block_size: {k!r} is not a positive integer")
        changes["block_shape"] = base.block_shape[:-1] + (int(k),)
    if "block_shape" in changes:
        bs = changes["block_shape"]
        changes["block_shape"] = tuple(bs) if isinstance(bs, (tuple, list)) else (bs,)
    for field in ("element", "scale"):
        if field in changes:
            changes[field] = get_format(changes[field])
    if changes.get("error_mode") is not None and isinstance(changes["error_mode"], str):
        changes["error_mode"] = changes["error_mode"].lower()
    for field in ("element_max", "scale_max"):
        if changes.get(field) is not None and isinstance(changes[field], numbers.Real):
            changes[field] = float(changes[field])
    return dataclasses.replace(base, **changes)


__all__ = ["ERROR_MODES", "OVERRIDES", "SCALE_RULES", "SR_HEADROOMS", "STRUCTURES", "Scheme", "get_scheme",
           "parse_scheme_spec", "schemes", "sr_headroom_max"]
