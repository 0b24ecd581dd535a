"""fp4spec.conformance: check any backend against the spec, bit for bit.

* :func:`run` -- check a backend (``"numpy"``, ``"pkg.mod:Name"``, a class or instance);
  returns a :class:`Report`. ``fp4spec conform`` is :func:`fp4spec.conformance.command.main`.
* :data:`PROPERTIES` -- the conformance properties (:mod:`.properties`).
* :mod:`.strategies` -- hypothesis strategies for adversarial inputs (ties and one ulp
  beside them, binade-edge amaxes, subnormals, wide ranges, zero/NaN/Inf blocks, extreme
  tensor amax), reusable in any test suite; :mod:`.builders` -- the same as seeded numpy.
* :mod:`.gen` -- the same inputs as :mod:`.strategies`, drawn with a seeded numpy generator
  (what a run uses unless it shrinks).
* :mod:`.diagnose` -- names the known mistake a departure matches; :mod:`.contract` -- the
  return contract; :mod:`.loading` -- backends from names, modules and files, set-up errors.
* :mod:`.vectors` -- test vectors for hardware that cannot run here (``fp4spec vectors``).
* :mod:`.pytest_plugin` -- ``pytest --fp4spec-backend pkg.mod:Name``.

Attributes are imported lazily, so importing this package (as the pytest plugin does in
every test run) costs nothing.
"""

import importlib

_EXPORTS = {
    "run": ".runner", "main": ".runner", "plan": ".runner", "BackendUnavailable": ".loading",
    "SetupError": ".loading", "load_backend": ".loading", "explain": ".diagnose", "CONTRACT_URL": ".contract",
    "DEFAULT_MAX_EXAMPLES": ".runner", "DEFAULT_SEED": ".runner", "THOROUGH_MAX_EXAMPLES": ".runner",
    "PROPERTIES": ".properties", "Property": ".properties", "Target": ".properties",
    "Report": ".report", "PropertyResult": ".report", "Counterexample": ".report",
    "render_text": ".report", "render_markdown": ".report", "render_json": ".report", "write_report": ".report",
    "Departure": ".compare", "compare_quantized": ".compare",
    "generate_vectors": (".vectors", "generate"), "check_vectors": (".vectors", "check"),
}
_SUBMODULES = ("builders", "chain", "command", "compare", "contract", "diagnose", "env", "gen", "loading", "properties",
               "report", "runner", "strategies", "vectors")

__all__ = sorted(_EXPORTS) + list(_SUBMODULES)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = target if isinstance(target, tuple) else (target, name)
    return getattr(importlib.import_module(module, __name__), attr)
