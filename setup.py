"""Package discovery for setuptools (the metadata is in pyproject.toml).

One namespace from several top-level folders: ``fp4spec/`` is the package ``fp4spec``, and
every other top-level folder with an ``__init__.py`` installs as ``fp4spec.<folder>``
(``emulator/`` -> ``fp4spec.emulator``, ``backends/``, ``conformance/``). Subpackages are
found below each of them, so a new folder with an ``__init__.py`` (``fp4spec/analysis``, a
future ``fp4spec/training`` or ``training/``) is installed without editing a list.
``tests/`` has no ``__init__.py`` of its own and is not installed.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
TOP = "fp4spec"


def package_roots() -> dict[str, str]:
    """Import name -> folder, for every top-level folder that is a package."""
    roots = {TOP: TOP}
    for folder in sorted(p for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
        if folder.name != TOP:
            roots[f"{TOP}.{folder.name}"] = folder.name
    return roots


def packages(roots: dict[str, str]) -> list[str]:
    found = []
    for name, folder in roots.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(str(ROOT / folder))]
    return found


ROOTS = package_roots()
setup(package_dir=ROOTS, packages=packages(ROOTS))
