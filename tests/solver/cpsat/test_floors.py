"""The CP-SAT package is a tower of floors (``pipetab.solver.cpsat``'s docstring): no module
imports a floor above its own — top-level imports, ``TYPE_CHECKING`` blocks and imports
inside functions alike, read from the source with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3] / "solver" / "cpsat"
PACKAGE = "pipetab.solver.cpsat"
FLOORS = ("ground", "model", "heuristics", "phases", "decompose", "api")


def floor_of(module: str) -> str:
    """The floor of a module named relative to the package ("model.variables", "api")."""
    head = module.split(".")[0]
    return head if head in FLOORS else "ground"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported(module: str, path: Path) -> set[str]:
    """The package modules ``module`` imports (relative to the package), anywhere in it."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if node.level > 1 else package
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.startswith(PACKAGE + "."):
                target = node.module[len(PACKAGE) + 1:].split(".")
            else:
                continue
            if node.module is None or not target:  # from . import x / from .. import x
                found |= {".".join([*target, a.name]) for a in node.names}
            else:
                found.add(".".join(target))
        elif isinstance(node, ast.Import):
            found |= {a.name[len(PACKAGE) + 1:] for a in node.names if a.name.startswith(PACKAGE + ".")}
    return found


MODULES = modules()


def test_every_floor_has_modules():
    floors = {floor_of(m) for m in MODULES if m}
    assert floors == set(FLOORS)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m))
def test_no_module_imports_a_floor_above_its_own(module):
    own = FLOORS.index(floor_of(module))
    above = sorted(t for t in imported(module, MODULES[module]) if FLOORS.index(floor_of(t)) > own)
    assert not above, f"{module} ({FLOORS[own]}) imports {above} from a floor above"


def test_the_reader_sees_in_function_and_relative_imports(tmp_path):
    """The checker itself: a relative import two levels up and one inside a function are
    both seen (a floor test that saw neither would pass vacuously)."""
    sub = tmp_path / "model"
    sub.mkdir()
    src = sub / "x.py"
    src.write_text("from ..params import A\n\ndef f():\n    from ..api import search\n"
                   "    from . import y\n")
    assert imported("model.x", src) == {"params", "api", "model.y"}
