"""The layers of the package, read from the source: imports only point down, and no cycle anywhere.

spec (the modules of ``fp4spec/``) <- ``fp4spec.emulator`` <- ``fp4spec.backends`` <- the public
API (``fp4spec`` itself and ``fp4spec.api``) <- ``fp4spec.conformance``, ``fp4spec.cli``,
``fp4spec.analysis``, ``fp4spec.training``. Every ``import`` statement counts, those inside
functions included; the folders map to the installed names (``emulator/`` is
``fp4spec.emulator``), as setup.py installs them. docs/architecture.md states the rule.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"fp4spec": "fp4spec", "emulator": "fp4spec.emulator", "backends": "fp4spec.backends",
           "conformance": "fp4spec.conformance"}
LAYERS = ("spec", "emulator", "backends", "api", "top")
TOP = ("fp4spec.conformance", "fp4spec.cli", "fp4spec.cli_options", "fp4spec.__main__", "fp4spec.analysis",
       "fp4spec.training")


def modules() -> dict[str, Path]:
    """Installed module name -> source file, for every module of the package."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def layer(module: str) -> int:
    if module == "fp4spec" or module == "fp4spec.api" or module.startswith("fp4spec.api."):
        return LAYERS.index("api")
    if any(module == t or module.startswith(t + ".") for t in TOP):
        return LAYERS.index("top")
    for name in ("emulator", "backends"):
        if module == f"fp4spec.{name}" or module.startswith(f"fp4spec.{name}."):
            return LAYERS.index(name)
    return LAYERS.index("spec")


def imported(module: str, path: Path, known) -> set[str]:
    """The package modules ``module`` imports (``from pkg import name`` counts as pkg.name
    where that is a module, else as pkg)."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                out.add(target if target in known else base)
    return {m for m in out if m in known and m != module}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imported(m, p, mods) for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_source_tree_has_the_modules_the_layers_name():
    g = graph()
    for name in ("fp4spec", "fp4spec.scaling", "fp4spec.emulator.scaling", "fp4spec.backends.numpy_backend",
                 "fp4spec.api.plan", "fp4spec.conformance.runner", "fp4spec.training"):
        assert name in g, name
    assert "fp4spec.emulator.scaling" in g["fp4spec.backends.numpy_backend"]  # edges are found


def test_no_module_imports_a_layer_above_its_own():
    g = graph()
    upward = [f"{m} ({LAYERS[layer(m)]}) imports {t} ({LAYERS[layer(t)]})"
              for m in sorted(g) for t in sorted(g[m]) if layer(t) > layer(m)]
    assert upward == []


def test_no_import_cycle_anywhere():
    assert cycles(graph()) == []


def test_the_checks_can_fail():
    """A planted upward import and a planted cycle are found."""
    g = defaultdict(set, {k: set(v) for k, v in graph().items()})
    g["fp4spec.scaling"].add("fp4spec.emulator.scaling")
    assert layer("fp4spec.scaling") < layer("fp4spec.emulator.scaling")
    g["fp4spec.emulator.scaling"].add("fp4spec.scaling")
    assert any({"fp4spec.emulator.scaling", "fp4spec.scaling"} <= set(c) for c in cycles(g))
