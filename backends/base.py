"""The backend interface: one class that every implementation of fp4spec's algorithms fills in.

A *backend* runs the spec's operations somewhere (numpy on the CPU, torch, Triton, a vendor
library, a kernel under development). The conformance suite (:mod:`fp4spec.conformance`)
only ever talks to this interface, so checking a new kernel means writing one small class:

* ``name`` -- a short name for reports.
* :meth:`Backend.is_available` -- can it run here? An :class:`Availability`, falsy with a
  reason string when not (no GPU, library missing...).
* :meth:`Backend.capabilities` -- what it claims: schemes, rounding modes, operations. The
  conformance suite checks exactly the claims, nothing more.
* :meth:`Backend.quantize` (required), :meth:`Backend.dequantize`, :meth:`Backend.encode`,
  :meth:`Backend.pack`, :meth:`Backend.to_blocked`, :meth:`Backend.matmul` (optional, claimed
  in ``capabilities().operations``; ``matmul`` also names the accumulator models it
  implements in ``capabilities().accumulators``).

Data crosses the interface as arrays of the backend's kind (:attr:`Backend.array_kind`):
``quantize`` receives a float32 numpy array (a ``"torch"`` backend: a torch tensor on its
device, bfloat16 and float16 as they are) whose blocked axis is the last one, padded to whole
blocks, and returns a :class:`fp4spec.QuantizedTensor` (codes, one per element or 4-bit codes
packed two per byte, and scale codes as uint8, the tensor scale as float32) blocked along
that axis. :func:`fp4spec.quantize` calls exactly this method, and ``fp4spec conform``
checks exactly this method: "conforms" means what users get.

Schemes are named by *scheme specs*: a catalogue name (``"nvfp4"``) optionally followed by
field overrides, ``"mxfp4:scale_rule=rceil"`` or ``"nvfp4:profile=torchao,scale_rule=4over6"``
(:mod:`fp4spec.scheme_specs`; :func:`resolve_scheme` and :func:`scheme_spec` here raise
:class:`BackendError`).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np

from fp4spec import scheme_specs as _specs
from fp4spec.block_schemes import Scheme
from fp4spec.rht import MMA_SIZES, OUT_DTYPES, RHT, RHT_SIZES, arith_names, check_size_arith, resolve_rht
from fp4spec.rounding import DEFAULT_SR_BITS, ROUNDING_MODES

#: Operations a backend may claim. ``quantize`` is required; ``matmul`` comes with
#: ``Capabilities.accumulators``.
OPERATIONS = ("quantize", "dequantize", "encode", "pack", "to_blocked", "matmul")


class BackendError(ValueError):
    """A backend cannot be found, loaded or used as asked (a usage error, not a departure)."""


class HostFallbackWarning(UserWarning):
    """Part of a device computation ran on the CPU (the emulator): the result is the same bits,
    the time is the CPU's."""


@dataclasses.dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; truthy iff ``ok``. ``reason`` says why not (or what it runs on)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return bool(self.ok)

    @classmethod
    def yes(cls, reason: str = "") -> "Availability":
        return cls(True, reason)

    @classmethod
    def no(cls, reason: str) -> "Availability":
        return cls(False, reason)


# -- scheme specs (parsed by the spec layer, fp4spec.scheme_specs) ---------------------------------

def resolve_scheme(spec: "str | Scheme") -> Scheme:
    """:func:`fp4spec.scheme_specs.resolve_scheme`, raising :class:`BackendError` (a usage error)."""
    try:
        return _specs.resolve_scheme(spec)
    except ValueError as exc:
        raise BackendError(str(exc)) from None


def scheme_spec(scheme: "str | Scheme") -> str:
    """:func:`fp4spec.scheme_specs.scheme_spec`, raising :class:`BackendError` (a usage error)."""
    try:
        return _specs.scheme_spec(scheme)
    except ValueError as exc:
        raise BackendError(str(exc)) from None


# -- capabilities ------------------------------------------------------------------------------------

def _known_accumulators() -> str:
    from fp4spec.accumulator_models import accumulators

    return ", ".join(map(repr, accumulators))


def _accumulator_names(value) -> tuple[str, ...]:
    """Catalogue names of ``value`` (names or registered AccumulatorModel objects), in order, once each."""
    from fp4spec.accumulator_models import AccumulatorModel, accumulators

    items = (value,) if isinstance(value, (str, AccumulatorModel)) else value
    try:
        items = tuple(items)
    except TypeError:
        raise BackendError(f"accumulators: expected a sequence of model names, got {value!r}") from None
    out = []
    for item in items:
        name = item.name if isinstance(item, AccumulatorModel) else item
        if not isinstance(name, str) or name not in accumulators:
            raise BackendError(f"accumulators: {item!r} is not one of {_known_accumulators()} "
                               f"(register a measured model with fp4spec.register_accumulator first)")
        if isinstance(item, AccumulatorModel) and accumulators[name] != item:
            raise BackendError(f"accumulators: the model object named {name!r} differs from the catalogued "
                               f"model of that name; register it under its own name")
        if name not in out:
            out.append(name)
    return tuple(out)


def _tuple_of_str(value, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    try:
        out = tuple(value)
    except TypeError:
        raise BackendError(f"{field}: expected a sequence of strings, got {value!r}") from None
    return out


def _valid_size_arith(size: int, arith: str) -> bool:
    """True if ``size`` and ``arith`` make an RHT (:func:`fp4spec.rht.check_size_arith`)."""
    try:
        check_size_arith(size, arith)
    except ValueError:
        return False
    return True


def check_rht_spec(spec, field: str = "rht") -> str:
    """An RHT spec ``"size/arith"`` or ``"size/arith/out_dtype"`` (``"16/fwht-fp32"``,
    ``"16/fwht-fp32/bfloat16"``, ``"16/mma:sm90-bf16"``) in canonical form, or a
    BackendError naming the bad part. The size and arithmetic must go together
    (:func:`fp4spec.rht.check_size_arith`: an ``"mma:<model>"`` arithmetic takes sizes 16
    and 64 only). An :class:`~fp4spec.rht.RHT` gives its ``spec`` (every output dtype)."""
    if isinstance(spec, RHT):
        return spec.spec
    parts = spec.split("/") if isinstance(spec, str) else []
    ok = len(parts) in (2, 3) and parts[0].strip().isdigit() and int(parts[0]) in RHT_SIZES \
        and _valid_size_arith(int(parts[0]), parts[1].strip()) \
        and (len(parts) == 2 or parts[2].strip() in OUT_DTYPES)
    if not ok:
        raise BackendError(f"{field}: {spec!r} is not an RHT spec 'size/arith' or 'size/arith/out_dtype' with size "
                           f"one of {', '.join(map(str, RHT_SIZES))}, arith one of "
                           f"{', '.join(map(repr, arith_names()))} (an 'mma:<model>' arith: size "
                           f"{' or '.join(map(str, MMA_SIZES))} only), out_dtype one of "
                           f"{', '.join(map(repr, OUT_DTYPES))} (e.g. '16/fwht-fp32')")
    return "/".join([str(int(parts[0]))] + [p.strip() for p in parts[1:]])


#: Where a backend's stochastic rounding takes its randomness (:attr:`Capabilities.sr_source`).
SR_SOURCES = ("rbits", "own")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend claims to do. The conformance suite checks every claim and nothing else.

    Fields:
        schemes: scheme specs (``"nvfp4"``, ``"mxfp4:scale_rule=rceil"``) or :class:`Scheme`
            objects the backend quantizes.
        rounding: element rounding modes (a subset of :data:`fp4spec.ROUNDING_MODES`).
        operations: a subset of :data:`OPERATIONS`; ``quantize`` is implied.
        formats: element formats :meth:`Backend.encode` handles (needs ``"encode"``);
            empty means the element formats of the claimed schemes.
        scheme_rounding: per-scheme-spec restriction of ``rounding`` (HiF4 has only its own).
        sr_bits: random bits per element accepted with ``rounding="sr"``.
        any_overrides: True if every override of a claimed scheme is supported too (the
            reference backend); then ``--scheme mxfp4:scale_rule=ceil`` may be asked for.
        notes: free text shown in reports (device, library version, compute dtype...).
        accumulators: accumulator models (names in :data:`fp4spec.accumulators`, or
            :class:`~fp4spec.AccumulatorModel` objects registered there) that
            :meth:`Backend.matmul` implements bit for bit. Required with ``"matmul"``, and
            only allowed with it. Stored as names.
        matmul_schemes: the claimed schemes :meth:`Backend.matmul` takes as operands (a GEMM
            kernel may take fewer element formats than the quantizers); empty: every claimed
            scheme. Only allowed with ``"matmul"``.
        sr_source: where ``rounding="sr"`` takes its randomness: ``"rbits"`` (the ``rbits`` it is
            given, bit for bit: checked against the reference) or ``"own"`` (its own random
            numbers, as hardware SR with an on-chip generator: only the statistical properties
            can check it, ``sr_statistics``).
        rht: Random Hadamard Transforms ``quantize(..., rht=)`` applies bit for bit, as RHT
            specs ``"size/arith"`` (``"16/fwht-fp32"``: any signs, every output dtype of
            :data:`fp4spec.rht.OUT_DTYPES`) or ``"size/arith/out_dtype"`` (that output dtype
            only, e.g. ``"16/fwht-fp32/bfloat16"``). Empty: no RHT. See :meth:`supports_rht`.
    """

    schemes: tuple = ()
    rounding: tuple[str, ...] = ("rne",)
    operations: frozenset = frozenset({"quantize"})
    formats: tuple[str, ...] = ()
    scheme_rounding: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    sr_bits: tuple[int, ...] = (DEFAULT_SR_BITS,)
    any_overrides: bool = False
    notes: str = ""
    accumulators: tuple[str, ...] = ()
    matmul_schemes: tuple = ()
    rht: tuple[str, ...] = ()
    sr_source: str = "rbits"

    def __post_init__(self):
        specs = tuple(scheme_spec(s) for s in _tuple_of_str(self.schemes, "schemes"))
        object.__setattr__(self, "schemes", specs)
        rounding = _tuple_of_str(self.rounding, "rounding")
        for r in rounding:
            if r not in ROUNDING_MODES:
                raise BackendError(f"rounding: {r!r} is not one of {', '.join(map(repr, ROUNDING_MODES))}")
        object.__setattr__(self, "rounding", rounding)
        ops = frozenset(_tuple_of_str(self.operations, "operations")) | {"quantize"}
        unknown = sorted(ops - set(OPERATIONS))
        if unknown:
            raise BackendError(f"operations: {unknown[0]!r} is not one of {', '.join(map(repr, OPERATIONS))}")
        object.__setattr__(self, "operations", ops)
        object.__setattr__(self, "formats", _tuple_of_str(self.formats, "formats"))
        per = {}
        for spec, modes in dict(self.scheme_rounding).items():
            modes = _tuple_of_str(modes, f"scheme_rounding[{spec!r}]")
            for r in modes:
                if r not in ROUNDING_MODES:
                    raise BackendError(f"scheme_rounding[{spec!r}]: {r!r} is not one of "
                                       f"{', '.join(map(repr, ROUNDING_MODES))}")
            per[scheme_spec(spec)] = modes
        object.__setattr__(self, "scheme_rounding", MappingProxyType(per))
        bits = tuple(int(b) for b in self.sr_bits)
        if any(not 1 <= b <= 32 for b in bits):
            raise BackendError(f"sr_bits: {self.sr_bits!r} must be integers in [1, 32]")
        object.__setattr__(self, "sr_bits", bits)
        accs = _accumulator_names(self.accumulators)
        if accs and "matmul" not in ops:
            raise BackendError(f"accumulators: {', '.join(map(repr, accs))} given but operation 'matmul' is not "
                               f"claimed; add 'matmul' to operations")
        if "matmul" in ops and not accs:
            raise BackendError("accumulators: operation 'matmul' is claimed but no accumulator model is named; "
                               f"give the models it implements bit for bit, among {_known_accumulators()}")
        object.__setattr__(self, "accumulators", accs)
        mm = tuple(scheme_spec(s) for s in _tuple_of_str(self.matmul_schemes, "matmul_schemes"))
        if mm and "matmul" not in ops:
            raise BackendError("matmul_schemes: given but operation 'matmul' is not claimed")
        stray = [m for m in mm if m not in specs]
        if stray:
            raise BackendError(f"matmul_schemes: {stray[0]!r} is not among the claimed schemes "
                               f"({', '.join(specs)})")
        object.__setattr__(self, "matmul_schemes", mm)
        rhts = []
        for spec in (self.rht,) if isinstance(self.rht, (str, RHT)) else _tuple_of_str(self.rht, "rht"):
            spec = check_rht_spec(spec)
            if spec not in rhts:
                rhts.append(spec)
        object.__setattr__(self, "rht", tuple(rhts))
        if self.sr_source not in SR_SOURCES:
            raise BackendError(f"sr_source: {self.sr_source!r} is not one of {', '.join(map(repr, SR_SOURCES))}")

    def supports_rht(self, rht) -> bool:
        """True if ``quantize(..., rht=rht)`` is claimed: None (no transform) always is; an
        :class:`~fp4spec.rht.RHT` (or ``"te"``, or an int seed: :func:`~fp4spec.rht.resolve_rht`)
        is if its ``"size/arith"`` or ``"size/arith/out_dtype"`` is in :attr:`rht`."""
        r = resolve_rht(rht)
        if r is None:
            return True
        return r.spec in self.rht or f"{r.spec}/{r.out_dtype}" in self.rht

    def supports(self, operation: str) -> bool:
        """True if ``operation`` (one of :data:`OPERATIONS`) is claimed."""
        return operation in self.operations

    def supports_scheme(self, scheme: "str | Scheme") -> bool:
        """True if the scheme is claimed (or is an override of a claimed one, with ``any_overrides``)."""
        sch = resolve_scheme(scheme)
        spec = scheme_spec(sch)
        if spec in self.schemes:
            return True
        return self.any_overrides and any(resolve_scheme(s).name == sch.name for s in self.schemes)

    def roundings_for(self, scheme: "str | Scheme") -> tuple[str, ...]:
        """The rounding modes claimed for one scheme (``scheme_rounding`` first, by spec then name)."""
        sch = resolve_scheme(scheme)
        spec = scheme_spec(sch)
        if spec in self.scheme_rounding:
            return self.scheme_rounding[spec]
        if sch.name in self.scheme_rounding:
            return self.scheme_rounding[sch.name]
        return self.rounding

    def element_formats(self) -> tuple[str, ...]:
        """Formats for ``encode``: ``formats``, else the element formats of the claimed schemes."""
        if self.formats:
            return self.formats
        seen = []
        for s in self.schemes:
            name = resolve_scheme(s).element.name
            if name not in seen:
                seen.append(name)
        return tuple(seen)


# -- the base class ----------------------------------------------------------------------------------

class Backend:
    """Base class of every backend. Subclasses set ``name`` and implement at least
    :meth:`capabilities` and :meth:`quantize`; the optional operations they claim in
    ``capabilities().operations`` they implement too.

    Construction takes no required arguments, so ``fp4spec conform --backend pkg.mod:Name``
    can instantiate the class.
    """

    name: str = "backend"
    #: The arrays the operations take and return: ``"numpy"`` (the plug-in default: numpy in,
    #: numpy out; a GPU backend may convert at its edge) or ``"torch"`` (torch tensors on their
    #: device; numpy arguments are converted and the results given back as numpy).
    #: :func:`fp4spec.quantize` hands a backend arrays of its kind, converting at the call.
    array_kind: str = "numpy"

    def is_available(self) -> Availability:
        """Whether this backend can run here (default: yes)."""
        return Availability.yes()

    def capabilities(self) -> Capabilities:
        raise NotImplementedError(f"capabilities: backend {self.name!r} must say what it supports")

    def quantize(self, x: np.ndarray, scheme: Scheme, *, rounding: str = "rne", rbits=None,
                 sr_bits: int = DEFAULT_SR_BITS, rht: "RHT | None" = None):
        """Block-quantize float32 ``x`` along its last axis; return a :class:`fp4spec.QuantizedTensor`
        whose ``axis`` is that last axis and whose ``shape`` is x's.

        ``rbits`` (``rounding="sr"`` only): uint32 integers in ``[0, 2**sr_bits)``, x's shape,
        one per element, used as :func:`fp4spec.quantize` uses them (backends of torch tensors
        get an int64 tensor, or int32 where the caller's bits were int32).

        ``rht``: None, or a resolved :class:`fp4spec.rht.RHT` that
        ``capabilities().supports_rht`` accepts. Then x is first transformed along its last
        axis (``rht.apply(x, axis=-1)``, then float32), and the scheme quantizes the
        transformed values: the tensor amax of two-level schemes is over them, ``rbits[i]``
        rounds transformed element i. The result records ``rht``. Backends that claim no
        RHT may leave the keyword out: callers pass it only when it is not None.
        """
        raise NotImplementedError(f"quantize: backend {self.name!r} does not implement it")

    def dequantize(self, q) -> np.ndarray:
        """float32 values of a QuantizedTensor (optional, capability ``"dequantize"``)."""
        raise NotImplementedError(self._missing("dequantize"))

    def encode(self, x: np.ndarray, fmt: str, rounding: str = "rne", *, rbits=None,
               sr_bits: int = DEFAULT_SR_BITS) -> np.ndarray:
        """Element conversion without scaling, as :func:`fp4spec.encode` (optional, ``"encode"``)."""
        raise NotImplementedError(self._missing("encode"))

    def pack(self, codes: np.ndarray) -> np.ndarray:
        """Two 4-bit codes per byte along the last axis, as the backend stores them (optional, ``"pack"``)."""
        raise NotImplementedError(self._missing("pack"))

    def to_blocked(self, scales: np.ndarray) -> np.ndarray:
        """A 2-D scale matrix in the backend's swizzled storage, as :func:`fp4spec.to_blocked`
        (optional, ``"to_blocked"``)."""
        raise NotImplementedError(self._missing("to_blocked"))

    def matmul(self, qa, qb, *, accumulator: str, c=None) -> np.ndarray:
        """D = A . B^T (+ c) of two block-quantized operands, as :func:`fp4spec.matmul` with the
        accumulator model named ``accumulator`` (optional, ``"matmul"``; ``accumulator`` is one
        of ``capabilities().accumulators``).

        ``qa`` (M x K) and ``qb`` (N x K) are :class:`fp4spec.QuantizedTensor` blocked along K
        (uint8 codes and scale codes, float32 tensor scale); ``c`` is None (start from +0) or a
        float32 (M, N) initial accumulator. Returns float32 (M, N), NaN bit patterns included.
        """
        raise NotImplementedError(self._missing("matmul"))

    def _missing(self, op: str) -> str:
        return f"{op}: backend {self.name!r} does not implement it (and should not claim it in capabilities())"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend {self.name!r}>"


def as_numpy(a) -> np.ndarray | None:
    """A numpy array from a backend's output (numpy, anything with ``__array__``, or a torch
    tensor on any device); None stays None."""
    if a is None:
        return None
    if hasattr(a, "detach") and hasattr(a, "cpu"):
        a = a.detach().cpu()
        if hasattr(a, "numpy"):
            return a.numpy()
    return np.asarray(a)


def iter_specs(items: Iterable) -> list[str]:
    """Scheme specs of ``items`` (names, specs or Schemes), canonicalized."""
    return [scheme_spec(s) for s in items]


__all__ = ["Availability", "Backend", "BackendError", "Capabilities", "HostFallbackWarning", "OPERATIONS", "as_numpy", "check_rht_spec",
           "iter_specs", "resolve_scheme", "scheme_spec"]
