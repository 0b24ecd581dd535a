"""What a property check talks to: the backend under test and the reference, with guarded calls.

:class:`Env` wraps every call a check makes: an exception from the backend becomes a
departure, a result of the wrong form a ``contract`` departure
(:mod:`~fp4spec.conformance.contract`); an exception from the reference propagates (a bug of
the suite, reported as ERROR).

Batched calls (:meth:`Env.prefetch`): MX blocks are independent of each other (no tensor
scale), so before a row's deterministic checks run, the inputs they will quantize are
stacked -- one tall tensor per width (and RHT) -- and the backend and the reference are each
called once per stack; every check then gets its rows of the two results. For a backend that
compiles a kernel per shape, or pays a launch and a copy per call, that is one call per
(row, width) instead of one per check. A check that departs on a batched result is run
again on its own input alone (the counterexample is then exactly that input); if it passes
alone, the departure is reported as one that appears only in the stacked call.
"""

from __future__ import annotations

import dataclasses
import functools
from types import SimpleNamespace

import numpy as np

from fp4spec.backends.base import Capabilities, as_numpy
from fp4spec.block_schemes import Scheme
from fp4spec.quantized import QuantizedTensor

from . import contract
from .compare import Departure, tensor_record
from .report import Counterexample, f32_text


@dataclasses.dataclass(frozen=True)
class Target:
    """What one property run is about: a scheme (None for backend-wide properties), its spec
    string, a rounding mode ("-" for rounding-independent runs) and the SR bit count."""

    scheme: Scheme | None
    spec: str
    rounding: str
    sr_bits: int = 8


def batchable(scheme) -> bool:
    """True where blocks are independent (no tensor scale, no tiles): MX."""
    return scheme is not None and scheme.structure == "mx"


def _rows(q, r0: int, r1: int, cols: int):
    """Rows r0:r1 of a (stacked, 2-D) quantize result (a numpy QuantizedTensor stays one)."""
    if isinstance(q, QuantizedTensor) and not q.is_torch:
        return q.replace(codes=np.asarray(q.codes)[r0:r1], scales=np.asarray(q.scales)[r0:r1], shape=(r1 - r0, cols))
    return SimpleNamespace(codes=as_numpy(q.codes)[r0:r1], scales=as_numpy(q.scales)[r0:r1], global_scale=None,
                           e1_8=None, e1_16=None, axis=getattr(q, "axis", None), shape=(r1 - r0, cols),
                           scheme=getattr(q, "scheme", None), rht=getattr(q, "rht", None))


class Env:
    """The backend under test, the reference backend and the claims, with guarded calls.

    ``tally`` counts what the current row's comparisons left open (``"dont_care"`` codes);
    :meth:`shapes_by_scheme` the distinct shapes quantize was called with, per scheme."""

    def __init__(self, backend, reference, caps: Capabilities):
        self.backend, self.reference, self.caps = backend, reference, caps
        self.tally: dict = {}
        self._shapes: dict[str, set] = {}
        self._batched: dict[int, tuple] = {}  # id(x) -> (x, rbits, rht, backend rows, reference rows)
        self.batched_calls = 0
        self.code_forms: set[str] = set()  # "packed" / "one per element": how quantize returned 4-bit codes

    def record_form(self, q, scheme) -> None:
        if isinstance(q, QuantizedTensor) and scheme is not None and scheme.element.bits == 4:
            self.code_forms.add("packed two per byte" if q.is_packed else "one per element")

    def record_shape(self, spec: str, shape) -> None:
        self._shapes.setdefault(spec, set()).add(tuple(shape))

    def shapes_by_scheme(self) -> dict[str, int]:
        return {spec: len(shapes) for spec, shapes in self._shapes.items()}

    def _call(self, op: str, fn, *args, _x=None, _rbits=None, _scheme=None, **kw):
        try:
            return fn(*args, **kw)
        except Departure:
            raise
        except Exception as exc:  # noqa: BLE001 -- any backend failure is a departure
            rejected = getattr(exc, "rejected_fields", None)
            if rejected is not None and _scheme is not None and _x is not None:
                # the backend built a QuantizedTensor that refused its fields: say which part
                # of the return contract they break (raises a contract departure where it can)
                contract.check_quantized(SimpleNamespace(**rejected), _x, _scheme, _rbits, op=op)
            inputs = [] if _x is None else [f32_text(v) for v in np.asarray(_x, np.float32).ravel()[:16]]
            raise Departure(Counterexample(f"{op} raised {type(exc).__name__}: {exc}", field="exception",
                                           inputs=inputs, tensor=None if _x is None else tensor_record(_x, _rbits)))

    # -- batched results -------------------------------------------------------------------------

    def _hit(self, x, rbits, rht, t: Target, rounding):
        hit = self._batched.get(id(x))
        if hit is None or hit[0] is not x or (rounding or t.rounding) != t.rounding or hit[2] is not rht:
            return None
        if t.rounding == "sr" and hit[1] is not rbits:
            return None
        return hit

    def forget_batches(self) -> None:
        self._batched.clear()

    def prefetch(self, t: Target, checks) -> None:
        """Quantize the inputs of ``checks`` (``functools.partial`` objects whose last argument
        has ``x``, and ``rbits`` / ``rht``) stacked, one call per width, where blocks are
        independent; later calls for those inputs get their rows of the stacked results."""
        self.forget_batches()
        if not batchable(t.scheme):
            return
        groups: dict[tuple, list] = {}
        for c in checks:
            case = c.args[-1] if isinstance(c, functools.partial) and c.args else None
            x = getattr(case, "x", None)
            if not isinstance(x, np.ndarray) or x.ndim != 2 or x.dtype != np.float32 or getattr(case, "axis0", False):
                continue
            rht = getattr(case, "rht", None)
            rb = getattr(case, "rbits", None)
            if t.rounding == "sr" and rb is None:
                continue
            groups.setdefault((x.shape[1], None if rht is None else id(rht)), []).append(case)
        for cases in groups.values():
            if len(cases) > 1:
                self._prefetch_group(t, cases)

    def _prefetch_group(self, t: Target, cases) -> None:
        x = np.ascontiguousarray(np.concatenate([c.x for c in cases]))
        rb = np.ascontiguousarray(np.concatenate([c.rbits for c in cases])) if t.rounding == "sr" else None
        rht = getattr(cases[0], "rht", None)
        kw = {} if rht is None else {"rht": rht}
        try:
            q = self._raw_quantize(x, t, rb, **kw)
            contract.check_quantized(q, x, t.scheme, rb)
            self.record_form(q, t.scheme)
            if tuple(np.atleast_1d(getattr(q, "shape", x.shape))) != x.shape:
                return
        except Departure:
            return  # the checks call the backend one input at a time and report it there
        if rht is None:
            ref = self.ref_quantize(x, t, rb)
        else:
            with np.errstate(all="ignore"):
                ref = self.ref_quantize(np.ascontiguousarray(rht.apply(x).astype(np.float32)), t, rb)
        self.batched_calls += 1
        r0 = 0
        for c in cases:
            r1 = r0 + c.x.shape[0]
            self._batched[id(c.x)] = (c.x, c.rbits, rht, _rows(q, r0, r1, x.shape[1]), _rows(ref, r0, r1, x.shape[1]))
            r0 = r1

    # -- the operations ----------------------------------------------------------------------------

    def _raw_quantize(self, x, t: Target, rbits=None, rounding: str | None = None, **kw):
        r = rounding or t.rounding
        self.record_shape(t.spec, np.shape(x))
        return self._call("quantize", self.backend.quantize, x, t.scheme, rounding=r,
                          rbits=rbits if r == "sr" else None, sr_bits=t.sr_bits, _x=x, _rbits=rbits,
                          _scheme=t.scheme, **kw)

    def quantize(self, x, t: Target, rbits=None, rounding: str | None = None, *, rht=None):
        hit = self._hit(x, rbits, rht, t, rounding)
        if hit is not None:
            return hit[3]
        q = self._raw_quantize(x, t, rbits, rounding, **({} if rht is None else {"rht": rht}))
        contract.check_quantized(q, x, t.scheme, rbits)
        self.record_form(q, t.scheme)
        return q

    def ref_quantize(self, x, t: Target, rbits=None, rounding: str | None = None):
        hit = self._hit(x, rbits, None, t, rounding)
        if hit is not None:
            return hit[4]
        r = rounding or t.rounding
        return self.reference.quantize(x, t.scheme, rounding=r, rbits=rbits if r == "sr" else None,
                                       sr_bits=t.sr_bits)

    def ref_quantize_rht(self, x, xr, t: Target, rht, rbits=None):
        """The reference for ``quantize(x, rht=rht)``: ``quantize(xr)`` with xr = ``rht.apply(x)``."""
        hit = self._hit(x, rbits, rht, t, None)
        return hit[4] if hit is not None else self.ref_quantize(xr, t, rbits)

    def dequantize(self, q, x=None):
        out = self._call("dequantize", self.backend.dequantize, q)
        return contract.check_values(out, np.shape(q.codes), np.zeros(0, np.float32) if x is None else x)

    def encode(self, x, fmt: str, rounding: str, rbits=None, sr_bits: int = 8):
        out = self._call("encode", self.backend.encode, x, fmt, rounding,
                         rbits=rbits if rounding == "sr" else None, sr_bits=sr_bits, _x=x, _rbits=rbits)
        return contract.code_array(out, "codes", x, rbits, op="encode")

    def pack(self, codes):
        return contract.code_array(self._call("pack", self.backend.pack, codes), "packed bytes", codes, op="pack")

    def to_blocked(self, scales):
        return contract.code_array(self._call("to_blocked", self.backend.to_blocked, scales), "blocked scales",
                                   scales, op="to_blocked")


__all__ = ["Env", "Target", "batchable"]
