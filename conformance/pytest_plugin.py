"""pytest plugin: ``pytest --fp4spec-backend module:Name`` runs the conformance suite inside a test run.

Registered through the ``pytest11`` entry point, so it is loaded by every pytest run in an
environment where fp4spec is installed. Without ``--fp4spec-backend`` it only adds its
options and does nothing else (no imports beyond this module, no tests added).

With the option, one test item per row of ``fp4spec conform`` is appended to the session:
per (property, scheme, rounding), named ``fp4spec_conform[<property>-<scheme>-<rounding>]``,
and, for a backend that claims ``matmul``, per (GEMM case family, accumulator model), named
``fp4spec_conform[matmul.<family>-<schemes>-acc=<model>]`` (a ``:`` in a scheme spec appears
as ``+``), so ``-k``, ``-x`` and ``--junitxml`` work as usual. A departure fails its item
with the counterexample; a row that does not apply is skipped with the reason.

Options: ``--fp4spec-backend`` (required to activate), ``--fp4spec-scheme``,
``--fp4spec-rounding``, ``--fp4spec-property`` (``matmul`` or ``matmul/<family>`` selects
GEMM rows) and ``--fp4spec-accumulator`` (repeatable), ``--fp4spec-max-examples``,
``--fp4spec-matmul-max-examples`` (0 skips the GEMM rows), ``--fp4spec-seed``.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("fp4spec", "fp4spec conformance suite")
    group.addoption("--fp4spec-backend", action="store", default=None, metavar="NAME|module:Name",
                    help="run the fp4spec conformance suite against this backend (name or module:Name)")
    group.addoption("--fp4spec-scheme", action="append", default=None, metavar="S",
                    help="scheme spec to check (repeatable; default: every scheme the backend claims)")
    group.addoption("--fp4spec-rounding", action="append", default=None, metavar="R",
                    help="rounding mode to check (repeatable; default: every mode claimed)")
    group.addoption("--fp4spec-property", action="append", default=None, metavar="P",
                    help="conformance property to check (repeatable; default: all)")
    group.addoption("--fp4spec-max-examples", action="store", type=int, default=None, metavar="N",
                    help="random examples per property, scheme and rounding (default: as fp4spec conform)")
    group.addoption("--fp4spec-accumulator", action="append", default=None, metavar="ACC",
                    help="accumulator model for the GEMM rows (repeatable; default: every model claimed)")
    group.addoption("--fp4spec-matmul-max-examples", action="store", type=int, default=None, metavar="N",
                    help="random examples (whole GEMMs) per GEMM row (default: as fp4spec conform; 0 skips)")
    group.addoption("--fp4spec-seed", action="store", type=int, default=None, metavar="N",
                    help="conformance run seed (default: as fp4spec conform)")


class ConformanceDeparture(Exception):
    """A conformance property failed; the message is the report's counterexample."""


class ConformanceItem(pytest.Item):
    def __init__(self, *, prop, target, session_state, **kw):
        super().__init__(**kw)
        self.prop, self.target, self.state = prop, target, session_state

    def run_row(self):
        """The row's PropertyResult."""
        from fp4spec.conformance.runner import run_property

        return run_property(self.state["env"], self.prop, self.target, max_examples=self.state["max_examples"],
                            seed=self.state["seed"])

    def reproduce_args(self, res) -> str:
        """The ``fp4spec conform`` options that select this row."""
        return (f"--scheme {res.scheme} --property {res.property}"
                + ("" if res.rounding == "-" else f" --rounding {res.rounding}"))

    def runtest(self):
        from fp4spec.conformance.report import ERROR, FAIL, SKIP

        res = self.run_row()
        if res.status == SKIP:
            pytest.skip(res.reason)
        if res.status in (FAIL, ERROR):
            lines = [f"{res.property} / {res.scheme} / {res.rounding}: {res.status}"]
            lines += res.counterexample.lines() if res.counterexample else [res.reason]
            lines.append(f"reproduce: fp4spec conform --backend {self.state['backend_spec']} "
                         f"{self.reproduce_args(res)} --seed {self.state['seed']}")
            raise ConformanceDeparture("\n".join(lines))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceDeparture):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"fp4spec conformance: {self.name}"


class MatmulConformanceItem(ConformanceItem):
    """One GEMM row: a case family under one accumulator model (``prop`` is the MatmulItem)."""

    def run_row(self):
        from fp4spec.conformance.runner import run_matmul_row

        return run_matmul_row(self.state["env"].backend, self.prop, max_examples=self.state["matmul_max_examples"],
                              seed=self.state["seed"])

    def reproduce_args(self, res) -> str:
        return f"--property {res.property} --accumulator {self.prop.accumulator}"


def _matmul_item_name(item) -> str:
    return f"fp4spec_conform[{item.name.replace('/', '.')}-{item.spec.replace(':', '+')}-{item.rounding}]"


def _item_name(prop, target) -> str:
    return f"fp4spec_conform[{prop.name}-{target.spec.replace(':', '+')}-{target.rounding}]"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    spec = config.getoption("--fp4spec-backend", default=None)
    if not spec:
        return
    from fp4spec.backends import BackendError, get_backend
    from fp4spec.conformance.env import Env
    from fp4spec.conformance.loading import availability, capabilities, load_backend
    from fp4spec.conformance.runner import (
        DEFAULT_MATMUL_MAX_EXAMPLES,
        DEFAULT_MAX_EXAMPLES,
        DEFAULT_SEED,
        plan,
        plan_matmul,
        split_properties,
    )

    try:
        backend = load_backend(spec)  # also path/to/file.py:Name; a set-up error is a usage error
        avail = availability(backend)
        caps = capabilities(backend) if avail else None
        pairs, mm_items = [], []
        if avail:
            schemes = config.getoption("--fp4spec-scheme")
            quantize_props, families = split_properties(config.getoption("--fp4spec-property"))
            if quantize_props is None or quantize_props:  # [] : only GEMM rows were asked for
                pairs = plan(backend, caps, schemes=schemes, rounding=config.getoption("--fp4spec-rounding"),
                             properties=quantize_props, sr_bits=8 if 8 in caps.sr_bits else caps.sr_bits[0])
            mm_items = plan_matmul(backend, caps, schemes=schemes,
                                   accumulators=config.getoption("--fp4spec-accumulator"), families=families)
    except BackendError as exc:
        raise pytest.UsageError(f"--fp4spec-backend {spec}: {exc}") from None
    max_examples = config.getoption("--fp4spec-max-examples")
    seed = config.getoption("--fp4spec-seed")
    state = {"env": Env(backend, get_backend("numpy"), caps) if avail else None, "backend_spec": spec,
             "max_examples": DEFAULT_MAX_EXAMPLES if max_examples is None else max_examples,
             "matmul_max_examples": (DEFAULT_MATMUL_MAX_EXAMPLES if config.getoption("--fp4spec-matmul-max-examples")
                                     is None else config.getoption("--fp4spec-matmul-max-examples")),
             "seed": DEFAULT_SEED if seed is None else seed}
    if not avail:
        items.append(_Unavailable.from_parent(session, name=f"fp4spec_conform[{backend.name}-unavailable]",
                                              reason=avail.reason or "is_available() returned False"))
        return
    for prop, target in pairs:
        items.append(ConformanceItem.from_parent(session, name=_item_name(prop, target), prop=prop, target=target,
                                                 session_state=state))
    for item in mm_items:
        items.append(MatmulConformanceItem.from_parent(session, name=_matmul_item_name(item), prop=item, target=None,
                                                       session_state=state))


class _Unavailable(pytest.Item):
    def __init__(self, *, reason, **kw):
        super().__init__(**kw)
        self.reason = reason

    def runtest(self):
        pytest.skip(f"backend not available: {self.reason}")

    def reportinfo(self):
        return self.path, None, self.name
