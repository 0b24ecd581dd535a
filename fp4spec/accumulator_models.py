"""GEMM accumulator models: what a block-scaled matrix multiply computes, bit for bit.

OCP MX leaves the internal precision and order of a block-scaled dot product
implementation-defined, so "C = A . B^T" is only bit-exact once an *accumulator model* is
named. An :class:`AccumulatorModel` is a small public descriptor of one such algorithm;
:mod:`fp4spec.gemm_reference` executes it on exact rationals (slow, obviously correct) and
:mod:`fp4spec.emulator.gemm` on whole arrays (fast, tested equal); :func:`fp4spec.matmul`
runs the fast one.

Four algorithm families (``algorithm``):

* ``"exact"`` -- every scaled product exact, the whole sum (plus ``c``) exact, one rounding
  to float32, nearest even (IEEE P3109 ``BlockDotProduct``).
* ``"fma"`` -- operands dequantized to float32 (``scales="fp32_operand"``), then one
  float32 fused multiply-add per element in ascending K.
* ``"fdpa"`` -- NVIDIA's truncated fused dot-product-add (MMA-Sim's T-/ST-/GST-FDPA): K in
  steps of ``k_step``; in each step the terms and the running FP32 accumulator are aligned
  to the largest exponent, truncated to ``frac_bits`` fractional bits, summed exactly and
  rounded (``final_rounding``) to FP32, which is the next step's accumulator.
* ``"fdpa2"`` -- AMD CDNA3's two-stage variant: per group of ``group_size`` products, fused
  in ``interleave`` interleaved halves with truncation, re-aligned with floor, the
  accumulator floored to ``c_frac_bits`` and the sum to ``realign_bits`` bits, RNE to FP32.

Where the block scales enter (``scales``):

* ``"exact"`` -- inside the exact products.
* ``"fp32_operand"`` / ``"bf16_operand"`` -- each element times its block scale, rounded
  once (nearest even) to float32 / bfloat16, is the operand of the datapath.
* ``"group"`` -- the exact sum of each group of ``group_size`` element products is
  multiplied by the two block scales; the term's exponent is the sum of the two scale
  exponents (Blackwell ``kind::mxf4nvf4``).
* ``"product"`` -- every product is one term whose exponent adds both scale exponents
  (Blackwell ``kind::mxf8f6f4``).
* ``"block_fma"`` -- the unscaled dot of each scale block runs through the datapath from a
  zero accumulator; the result ``d`` is then added as ``acc = fma32(d, fp32(sa * sb), acc)``
  (fp4spec's software wrapper for hardware without block-scale support, used for CDNA3).

Tensor scales (two-level schemes) never enter the datapath: the result is
``fp32(acc * fp32(gA * gB))`` (``exact``: the exact sum times ``fp32(gA * gB)``, rounded
once). ``c`` is the accumulator's initial value in every model (so it is multiplied by the
tensor-scale product too).

Catalogue (:data:`accumulators`; sources and unknowns in ``docs/gemm.md``):

================  ======  ==============  ======  =====  ===  =====  ======  ==========  ========  ======
name              algo    scales          k_step  group  F    round  e_zero  NaN bits    zero      bit 7
================  ======  ==============  ======  =====  ===  =====  ======  ==========  ========  ======
exact             exact   exact           -       -      -    rne    -       0x7FC00000  signed    reject
fp32              fma     fp32_operand    1       1      -    rne    -       0x7FC00000  signed    reject
sm100-mxf4nvf4    fdpa    group           64      16     35   rz     -139    0x7FFFFFFF  positive  ignore
sm100-mxf8f6f4    fdpa    product         32      1      25   rz     -133    0x7FFFFFFF  positive  reject
sm90-bf16         fdpa    bf16_operand    16      1      25   rz     -133    0x7FFFFFFF  positive  ignore
cdna3-fp8         fdpa2   block_fma       16      16     24   rne    -       0x7FC00000  signed    reject
================  ======  ==============  ======  =====  ===  =====  ======  ==========  ========  ======

The sign of a zero (``zero_sign``, column "zero"): in every model an exact zero sum of a
fused step (``fdpa``, ``fdpa2``) is +0, and ``exact`` and ``fma`` follow IEEE 754. Under
``"signed"`` a nonzero sum that rounds to zero keeps its sign (a negative sum smaller than
the rounding's reach gives -0.0, as IEEE rounding does); under ``"positive"`` every zero a
fused step returns is +0.0. The NVIDIA models are ``"positive"``: MMA-Sim 2.1.1 adds +0.0 to
the result of every NVIDIA fused step (T-, ST- and GST-FDPA), and an NVIDIA H200 gives +0.0
for ``sm90-bf16`` (measured).

A UE4M3 scale byte with bit 7 set (``ue4m3_sign_bit``, column "bit 7"): UE4M3 codes are
0x00..0x7F, but NVFP4 scales travel as ``float8_e4m3fn`` bytes whose bit 7 is a sign (torchao
writes 0xFF where it divides by a zero tensor scale). ``"reject"``: :func:`fp4spec.matmul`
refuses the operand, as :func:`fp4spec.dequantize` does. ``"ignore"``: the datapath reads
the byte's low 7 bits (0xFF reads as 0x7F, NaN; 0x80 as 0x00, zero; 0xB8 as 0x38, 1.0),
as MMA-Sim's Blackwell block-scaled step does. ``sm100-mxf8f6f4`` takes no UE4M3 scales;
its value never applies.

AMD CDNA4 (MI350/MI355) block-scaled MFMA numerics are not published and not modelled by
MMA-Sim: there is no ``cdna4`` entry. Measure the parameters and add your own model with
:func:`register_accumulator`.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from types import MappingProxyType
from typing import Mapping

import numpy as np

ALGORITHMS = ("exact", "fma", "fdpa", "fdpa2")
SCALE_APPLICATIONS = ("exact", "fp32_operand", "bf16_operand", "group", "product", "block_fma")
FINAL_ROUNDINGS = ("rne", "rz")
#: The sign of a zero result of a fused step (:attr:`AccumulatorModel.zero_sign`).
ZERO_SIGNS = ("signed", "positive")
#: What a model does with a UE4M3 scale byte whose bit 7 is set (:attr:`AccumulatorModel.ue4m3_sign_bit`).
UE4M3_SIGN_BITS = ("reject", "ignore")

#: The float32 quiet NaN produced by IEEE arithmetic on x86/numpy.
NAN_IEEE = 0x7FC00000
#: The NaN NVIDIA tensor cores write (MMA-Sim canonicalizes every NaN output to it).
NAN_NVIDIA = 0x7FFFFFFF

#: Which scale applications each algorithm accepts.
_ALLOWED_SCALES = {
    "exact": ("exact",),
    "fma": ("fp32_operand", "bf16_operand"),
    "fdpa": ("group", "product", "fp32_operand", "bf16_operand"),
    "fdpa2": ("block_fma",),
}

#: Largest fractional-bit count the vectorized emulator proves exact in int64.
MAX_FRAC_BITS = 40


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class AccumulatorModel:
    """A named, bit-exact GEMM accumulation algorithm (see the module docstring).

    Fields:
        name: catalogue name.
        algorithm: ``"exact"``, ``"fma"``, ``"fdpa"`` or ``"fdpa2"``.
        scales: where block scales enter (:data:`SCALE_APPLICATIONS`).
        k_step: K elements consumed per chained step (``fdpa``: the instruction's k;
            ``fdpa2``: the MFMA group; ``fma``: 1; ``exact``: 0, meaning all of K at once).
        group_size: products summed exactly into one term before alignment (``"group"``
            scales), or products per CDNA3 step (``fdpa2``); 1 otherwise.
        frac_bits: F, fractional bits kept by the alignment relative to the largest
            exponent (``fdpa``, ``fdpa2``); None for ``exact`` and ``fma``.
        final_rounding: each step's rounding to float32: ``"rne"`` or ``"rz"`` (a result
            whose magnitude is 2^128 or more after rounding is +-Inf in both).
        e_zero: the exponent a zero term gets when the largest exponent is chosen (a zero
            accumulator, a zero scale, a product or group of products that are all zero);
            None: a zero term never sets the largest exponent.
        nan_bits: the float32 bit pattern of every NaN in the result.
        zero_sign: the sign of a zero that a fused step (``fdpa``, ``fdpa2``) returns.
            ``"signed"``: the sign of the step's exact (aligned, truncated) sum -- +0.0 for
            an exact zero sum, -0.0 for a negative sum that rounds to zero (below the
            smallest float32 subnormal under RZ), as IEEE rounding gives. ``"positive"``:
            every zero result of a step is +0.0, a negative sum that underflows included.
            ``exact`` and ``fma`` round as IEEE 754 does and take ``"signed"`` only.
        ue4m3_sign_bit: a UE4M3 scale byte with bit 7 set (a ``float8_e4m3fn`` sign bit;
            UE4M3 codes are 0x00..0x7F). ``"reject"`` (default): the operand is refused
            (:func:`fp4spec.matmul_operands.check_operands`). ``"ignore"``: the datapath reads
            the byte's low 7 bits (:func:`fp4spec.matmul_operands.datapath_scale_codes`).
        interleave: ``fdpa2``: the products of a group are fused in this many interleaved
            subsequences (CDNA3 FP8: 2, even and odd K indices).
        realign_bits: ``fdpa2``: fractional bits of the floored group sum after re-alignment
            with the accumulator (CDNA3: 31).
        c_frac_bits: ``fdpa2``: fractional bits the accumulator is floored to (CDNA3: 24);
            an accumulator whose exponent is below ``e_max - (c_frac_bits + 1)`` is dropped.
        elements: element formats the datapath takes (None: any finite 4-, 6- or 8-bit
            element format of the catalogue).
        scale_blocks: accepted ``(scale format, block size)`` pairs, A and B equal (None:
            any; the exact and fma models accept different schemes for A and B).
        source: where the model comes from, with a confidence tag.
        notes: what is assumed or unknown.
    """

    name: str
    algorithm: str
    scales: str
    k_step: int = 0
    group_size: int = 1
    frac_bits: int | None = None
    final_rounding: str = "rne"
    e_zero: int | None = None
    nan_bits: int = NAN_IEEE
    zero_sign: str = "signed"
    ue4m3_sign_bit: str = "reject"
    interleave: int = 1
    realign_bits: int | None = None
    c_frac_bits: int | None = None
    elements: tuple[str, ...] | None = None
    scale_blocks: tuple[tuple[str, int], ...] | None = None
    source: str = ""
    notes: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: {self.name!r} is not a non-empty string")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm: {self.algorithm!r} is not one of {', '.join(map(repr, ALGORITHMS))}")
        allowed = _ALLOWED_SCALES[self.algorithm]
        if self.scales not in allowed:
            raise ValueError(f"scales: {self.scales!r} is not one of {', '.join(map(repr, allowed))} "
                             f"for algorithm {self.algorithm!r}")
        if self.final_rounding not in FINAL_ROUNDINGS:
            raise ValueError(f"final_rounding: {self.final_rounding!r} is not one of "
                             f"{', '.join(map(repr, FINAL_ROUNDINGS))}")
        if self.zero_sign not in ZERO_SIGNS:
            raise ValueError(f"zero_sign: {self.zero_sign!r} is not one of {', '.join(map(repr, ZERO_SIGNS))}")
        if self.ue4m3_sign_bit not in UE4M3_SIGN_BITS:
            raise ValueError(f"ue4m3_sign_bit: {self.ue4m3_sign_bit!r} is not one of "
                             f"{', '.join(map(repr, UE4M3_SIGN_BITS))}")
        for field in ("k_step", "group_size", "interleave"):
            v = getattr(self, field)
            if not _is_int(v) or v < 0:
                raise ValueError(f"{field}: {v!r} is not a non-negative integer")
        if self.e_zero is not None and not _is_int(self.e_zero):
            raise ValueError(f"e_zero: {self.e_zero!r} is not an integer or None")
        if not _is_int(self.nan_bits) or not (0x7F800001 <= self.nan_bits & 0x7FFFFFFF <= 0x7FFFFFFF) \
                or not 0 <= self.nan_bits <= 0xFFFFFFFF:
            raise ValueError(f"nan_bits: {self.nan_bits!r} is not a float32 NaN bit pattern")
        for field in ("elements",):
            v = getattr(self, field)
            if v is not None and not (isinstance(v, tuple) and all(isinstance(s, str) for s in v)):
                raise ValueError(f"{field}: {v!r} is not a tuple of format names or None")
        if self.scale_blocks is not None and not (
                isinstance(self.scale_blocks, tuple)
                and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and _is_int(p[1])
                        for p in self.scale_blocks)):
            raise ValueError(f"scale_blocks: {self.scale_blocks!r} is not a tuple of (scale format, block size) pairs")
        getattr(self, f"_check_{self.algorithm}")()

    # -- per-algorithm validation --------------------------------------------------------------
    def _none(self, *fields):
        for f in fields:
            if getattr(self, f) is not None:
                raise ValueError(f"{f}: not used by algorithm {self.algorithm!r}; leave it None")

    def _ieee_zero(self):
        if self.zero_sign != "signed":
            raise ValueError(f"zero_sign: algorithm {self.algorithm!r} rounds as IEEE 754 does; only the fused "
                             f"steps of 'fdpa' and 'fdpa2' take zero_sign={self.zero_sign!r}")

    def _check_exact(self):
        self._none("frac_bits", "realign_bits", "c_frac_bits")
        self._ieee_zero()
        if self.final_rounding != "rne" or self.k_step != 0 or self.group_size != 1 or self.interleave != 1:
            raise ValueError("exact: the exact model has k_step=0, group_size=1, interleave=1, final_rounding='rne'")

    def _check_fma(self):
        self._none("frac_bits", "realign_bits", "c_frac_bits")
        self._ieee_zero()
        if self.final_rounding != "rne" or self.k_step != 1 or self.group_size != 1 or self.interleave != 1:
            raise ValueError("fma: the fma model has k_step=1, group_size=1, interleave=1, final_rounding='rne'")

    def _check_frac_bits(self):
        if not _is_int(self.frac_bits) or not 1 <= self.frac_bits <= MAX_FRAC_BITS:
            raise ValueError(f"frac_bits: {self.frac_bits!r} is not an integer in 1..{MAX_FRAC_BITS}")

    def _check_fdpa(self):
        self._check_frac_bits()
        self._none("realign_bits", "c_frac_bits")
        if self.interleave != 1:
            raise ValueError("interleave: only the two-stage 'fdpa2' algorithm interleaves")
        if not 1 <= self.group_size <= self.k_step or self.k_step % self.group_size:
            raise ValueError(f"group_size: {self.group_size} must divide k_step={self.k_step} (k_step >= 1)")
        if self.scales != "group" and self.group_size != 1:
            raise ValueError(f"group_size: scales={self.scales!r} makes every product its own term; use group_size=1")
        if self.k_step > 256:
            raise ValueError(f"k_step: {self.k_step} exceeds 256, the largest step the emulator proves exact")

    def _check_fdpa2(self):
        self._check_frac_bits()
        if self.group_size < 1 or self.k_step != self.group_size:
            raise ValueError("group_size, k_step: fdpa2 fuses one group per step; give k_step == group_size >= 1")
        if self.interleave < 1 or self.group_size % self.interleave:
            raise ValueError(f"interleave: {self.interleave} must divide group_size={self.group_size}")
        for f in ("realign_bits", "c_frac_bits"):
            v = getattr(self, f)
            if not _is_int(v) or not 1 <= v <= MAX_FRAC_BITS:
                raise ValueError(f"{f}: {v!r} is not an integer in 1..{MAX_FRAC_BITS}")
        if self.realign_bits < max(self.frac_bits, self.c_frac_bits):
            raise ValueError("realign_bits: must be >= frac_bits and >= c_frac_bits")

    # -- description -----------------------------------------------------------------------
    @property
    def chaining(self) -> str:
        """One line: what is fused per step and how steps chain."""
        if self.algorithm == "exact":
            return "no chaining: every scaled product and c summed exactly, one rounding"
        if self.algorithm == "fma":
            return "one float32 FMA per K element, ascending K, starting from c"
        if self.algorithm == "fdpa":
            what = {"group": f"{self.k_step // self.group_size} group sums of {self.group_size} products "
                             f"(each times both block scales)",
                    "product": f"{self.k_step} products (scale exponents added)",
                    "fp32_operand": f"{self.k_step} products of fp32(element*scale)",
                    "bf16_operand": f"{self.k_step} products of bf16(element*scale)"}[self.scales]
            return (f"per step of {self.k_step} in ascending K: {what} + the FP32 accumulator fused "
                    f"(F={self.frac_bits}, truncation), {self.final_rounding.upper()} to FP32, chained")
        return (f"per scale block: groups of {self.group_size} products ({self.interleave} interleaved "
                f"halves, F={self.frac_bits}) chained from +0 with floor re-alignment "
                f"({self.realign_bits}/{self.c_frac_bits} bits) and {self.final_rounding.upper()}; "
                f"then acc = fma32(d, fp32(sa*sb), acc)")

    def describe(self) -> str:
        """One line per field that matters: the table row of ``docs/gemm.md``."""
        def g(v):
            return "-" if v in (None, 0) else str(v)
        return (f"{self.name:<15} algorithm={self.algorithm:<5} scales={self.scales:<12} "
                f"k_step={g(self.k_step):<3} group={self.group_size:<2} F={g(self.frac_bits):<3} "
                f"round={self.final_rounding} e_zero={g(self.e_zero)} nan=0x{self.nan_bits:08X} "
                f"zero={self.zero_sign} ue4m3_sign_bit={self.ue4m3_sign_bit}")


# -- the catalogue ---------------------------------------------------------------------------------

_MMASIM = "MMA-Sim (arXiv 2511.10909; microsoft/MMA-Sim c785138; fork peichenxie/MMA-Sim; PyPI mmasim 2.1.1)"
#: Where the NVIDIA models' zero sign comes from.
_ZERO_SIGN_SOURCE = ("zero_sign='positive': MMA-Sim 2.1.1 mmasim/arithmetic/fdpa.py, t_fdpa / st_fdpa / gst_fdpa "
                     "return the rounded step sum + 0.0 ('-0.0 to +0.0') [confirmed in source]")
#: Why the software models refuse a UE4M3 byte with bit 7 set.
_UE4M3_REJECT = ("ue4m3_sign_bit='reject': fp4spec's choice: a UE4M3 byte with bit 7 set has no value "
                 "(fp4spec.dequantize refuses it), and this model's scales are decoded in software")


def _catalogue() -> dict[str, AccumulatorModel]:
    items = [
        AccumulatorModel(
            "exact", "exact", "exact",
            source="IEEE P3109 draft BlockDotProduct (exact products and sum, one rounding) "
                   "[confirmed in source]; OCP MX v1.0 Dot/DotGeneral with exact internal precision; "
                   f"{_UE4M3_REJECT}",
            notes="An exact zero sum is +0. NaN if c or any block scale of the row/column is NaN."),
        AccumulatorModel(
            "fp32", "fma", "fp32_operand", k_step=1,
            source="the dequantize-then-FP32-matmul emulators (microxcaling, torchao EMULATED, "
                   f"TransformerEngine reference), with the order fixed by fp4spec; {_UE4M3_REJECT}",
            notes="Operands are fp32(element * block scale); one fma32 per K element, ascending K."),
        AccumulatorModel(
            "sm100-mxf4nvf4", "fdpa", "group", k_step=64, group_size=16, frac_bits=35,
            final_rounding="rz", e_zero=-139, nan_bits=NAN_NVIDIA, zero_sign="positive",
            ue4m3_sign_bit="ignore", elements=("e2m1", "e0m3"), scale_blocks=(("e8m0", 32), ("e8m0", 16), ("ue4m3", 16)),
            source=f"{_MMASIM}: nv_fused_dot_add_with_block_scale / GST_FDPA(G=16, F=35, RZ-FP32, "
                   "L_max=64) [confirmed in source]; e_zero=-139 [secondary source]; "
                   f"{_ZERO_SIGN_SOURCE}; ue4m3_sign_bit='ignore': MMA-Sim 2.1.1 MMA_GST_FDPA.dpa reads an "
                   "E4M3 scale as truncate_e4m3_to_ue4m3 (byte & 0x7F) [confirmed in source]; E0M3 operands "
                   "(A and B independently; flashinfer-ai/flashinfer#3934, FlashRT #146) [secondary source]",
            notes="Blackwell tcgen05.mma / mma kind::mxf4 and kind::mxf4nvf4. An infinite "
                  "accumulator stays infinite (fp4spec assumption; MMA-Sim does not define it). "
                  "E0M3 (sign-magnitude INT4, +-7) operands go through the same fused sums as E2M1 "
                  "ones, exactly: unmeasured, reported by black-box tests, not by NVIDIA."),
        AccumulatorModel(
            "sm100-mxf8f6f4", "fdpa", "product", k_step=32, group_size=1, frac_bits=25,
            final_rounding="rz", e_zero=-133, nan_bits=NAN_NVIDIA, zero_sign="positive",
            elements=("e4m3", "e5m2", "e2m3", "e3m2", "e2m1"), scale_blocks=(("e8m0", 32),),
            source=f"{_MMASIM}: nv_fused_dot_add with scales / ST_FDPA(F=25, RZ-FP32, L_max=32) "
                   f"[confirmed in source]; e_zero=-133 [secondary source]; {_ZERO_SIGN_SOURCE}; "
                   "ue4m3_sign_bit: never applies (E8M0 scales only; MMA-Sim's kind::mxf8f6f4 takes ue8m0)",
            notes="Blackwell kind::mxf8f6f4. FP6/FP4 elements are normalized at their own "
                  "format's minimum exponent [assumption: MMA-Sim validates E4M3/E5M2]."),
        AccumulatorModel(
            "sm90-bf16", "fdpa", "bf16_operand", k_step=16, group_size=1, frac_bits=25,
            final_rounding="rz", e_zero=-133, nan_bits=NAN_NVIDIA, zero_sign="positive",
            ue4m3_sign_bit="ignore",
            source=f"{_MMASIM}: Hopper wgmma bf16, T_FDPA(F=25, RZ-FP32, k=16) [confirmed in "
                   "source]; the bf16 upcast is Triton's emulated dot_scaled on Hopper [derived]; "
                   "e_zero=-133 [secondary source]; zero_sign='positive' measured on an NVIDIA H200 "
                   "with fp4spec's probe (benchmarks/probe_gpu_zero_sign.py) [measured; first seen in "
                   f"benchmarks/bench_gpu_gemm.py's subnormal family], as MMA-Sim 2.1.1 has it ({_ZERO_SIGN_SOURCE}); "
                   "ue4m3_sign_bit='ignore': fp4spec's choice for the software upcast: the Triton kernel that "
                   "implements this model reads a UE4M3 byte's low 7 bits (s & 0x7F), as NVIDIA's block-scaled "
                   "datapath does (MMA-Sim 2.1.1), so NVFP4 bytes give the same operands on Hopper as on Blackwell",
            notes="Operands are bf16(element * block scale) (overflow to Inf); what Hopper does "
                  "when block-scaled operands are upcast to bf16 and fed to wgmma. A negative "
                  "step sum that RZ rounds to zero comes out as +0.0: first seen as one output of "
                  "the subnormal conformance family, where the MMA-Sim fork before 2.1.1 gave -0.0."),
        AccumulatorModel(
            "cdna3-fp8", "fdpa2", "block_fma", k_step=16, group_size=16, frac_bits=24,
            final_rounding="rne", e_zero=None, nan_bits=NAN_IEEE,
            interleave=2, realign_bits=31, c_frac_bits=24,
            source=f"{_MMASIM}: amd_fused_dot_add(is_fp8=True), MI300 FP8 MFMA [confirmed in source]; "
                   f"{_UE4M3_REJECT} (fp4spec's block-scale wrapper, fp32(sa * sb))",
            notes="MI300 has no block-scaled MFMA: each scale block runs through the FP8 MFMA "
                  "from +0 and is scaled as acc = fma32(d, fp32(sa*sb), acc) (fp4spec wrapper). "
                  "Elements must be representable in e4m3fnuz (max 240) or e5m2fnuz. MI350/MI355 "
                  "(CDNA4) numerics are not published."),
    ]
    return {m.name: m for m in items}


_ACCUMULATORS: dict[str, AccumulatorModel] = _catalogue()

#: Read-only mapping of every catalogued accumulator model, by name.
accumulators: Mapping[str, AccumulatorModel] = MappingProxyType(_ACCUMULATORS)


def get_accumulator(name: "str | AccumulatorModel") -> AccumulatorModel:
    """Look up an accumulator model by name (a descriptor passes through unchanged)."""
    if isinstance(name, AccumulatorModel):
        return name
    try:
        return _ACCUMULATORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"accumulator: unknown model {name!r}; known models: "
                         f"{', '.join(_ACCUMULATORS)}") from None


def register_accumulator(model: AccumulatorModel, *, replace: bool = False) -> AccumulatorModel:
    """Add a user-defined (e.g. measured) model to the catalogue so it can be used by name."""
    if not isinstance(model, AccumulatorModel):
        raise TypeError(f"model: expected an AccumulatorModel, got {type(model).__name__}")
    if model.name in _ACCUMULATORS and not replace:
        raise ValueError(f"model: {model.name!r} is already in the catalogue (pass replace=True)")
    _ACCUMULATORS[model.name] = model
    return model


def unregister_accumulator(name: str) -> None:
    """Remove a user-registered model (the built-in ones cannot be removed)."""
    if name in _catalogue():
        raise ValueError(f"name: {name!r} is a built-in model and cannot be removed")
    if name not in _ACCUMULATORS:
        raise ValueError(f"name: {name!r} is not registered")
    del _ACCUMULATORS[name]


# -- carriers: how a value is split into (significand, exponent) in a datapath --------------------

@dataclasses.dataclass(frozen=True)
class Carrier:
    """The number format a value has inside a datapath, for the (significand, exponent) split.

    A nonzero value v has exponent ``e = max(floor(log2 |v|), emin)`` and significand
    ``v / 2^e`` (in [1, 2), or below 1 for subnormals); ``man_bits`` is the number of
    fractional significand bits (every carried value times ``2^(man_bits - e)`` is an
    integer); ``max_value`` the largest finite magnitude.
    """

    name: str
    man_bits: int
    emin: int
    max_value: float


FP32 = Carrier("fp32", 23, -126, float(np.finfo(np.float32).max))
BF16 = Carrier("bf16", 7, -126, float.fromhex("0x1.fep127"))
E4M3FNUZ = Carrier("e4m3fnuz", 3, -7, 240.0)
E5M2FNUZ = Carrier("e5m2fnuz", 2, -15, 57344.0)


@functools.lru_cache(maxsize=None)
def format_carrier(fmt) -> Carrier:
    """A catalogue format as its own carrier: ``emin`` is the smallest normal exponent
    (floats), 0 for integers, log2(step) for uniform grids; ``man_bits`` the fewest
    fractional significand bits that make every finite value an integer. A :class:`Carrier`
    is its own carrier (IF4 block multipliers are float32 values: :data:`FP32`)."""
    from fractions import Fraction

    if isinstance(fmt, Carrier):
        return fmt

    from .elements import floor_log2

    if fmt.kind == "float":
        emin = fmt.emin
    elif fmt.kind == "int":
        emin = 0
    else:
        emin = floor_log2(Fraction(fmt.step))
    man = 0
    for c in fmt.finite_codes:
        v = abs(Fraction(fmt.decode_exact(c)))
        if v:
            e = max(floor_log2(v), emin)
            man = max(man, (v / Fraction(2) ** e).denominator.bit_length() - 1)
    return Carrier(fmt.name, man, emin, float(max(abs(fmt.max), abs(fmt.min))))


def element_carrier(model: "AccumulatorModel", fmt) -> Carrier:
    """The carrier of an operand's elements in ``model``'s datapath (its own format, or the
    CDNA3 FP8 type: e5m2fnuz for E5M2 elements, e4m3fnuz for the others)."""
    if model.algorithm == "fdpa2":
        return E5M2FNUZ if fmt.name == "e5m2" else E4M3FNUZ
    return format_carrier(fmt)


def representable(v, carrier: Carrier) -> bool:
    from fractions import Fraction

    from .elements import floor_log2

    v = abs(Fraction(v))
    if v == 0:
        return True
    if v > Fraction(carrier.max_value):
        return False
    e = max(floor_log2(v), carrier.emin)
    return (v * Fraction(2) ** (carrier.man_bits - e)).denominator == 1


@functools.lru_cache(maxsize=4096)
def code_representable(fmt, code: int, carrier: Carrier) -> bool:
    """:func:`representable` of one element code (cached: the check runs per matmul call)."""
    return representable(fmt.decode_exact(code), carrier)


__all__ = [
    "ALGORITHMS",
    "AccumulatorModel",
    "BF16",
    "Carrier",
    "E4M3FNUZ",
    "E5M2FNUZ",
    "FP32",
    "element_carrier",
    "format_carrier",
    "FINAL_ROUNDINGS",
    "NAN_IEEE",
    "NAN_NVIDIA",
    "SCALE_APPLICATIONS",
    "UE4M3_SIGN_BITS",
    "ZERO_SIGNS",
    "code_representable",
    "representable",
    "accumulators",
    "get_accumulator",
    "register_accumulator",
    "unregister_accumulator",
]
