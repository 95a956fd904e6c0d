"""The card's folders install as one namespace, ``pipetab.*``, and nothing else."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("schedules", "hardware", "solver", "pipetab")


def test_every_package_folder_is_listed_under_pipetab():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top in FOLDERS:
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            found.add(".".join(("pipetab", *rel.parts[rel.parts[0] == "pipetab":])))
    assert found <= listed, f"package folders missing from pyproject's packages: {sorted(found - listed)}"


def test_only_the_namespace_is_imported():
    """Importing the whole public surface loads no generic top-level ``schedules``,
    ``hardware`` or ``solver`` module (two copies would mean two ``Kind`` enums)."""
    code = (
        "import sys, pipetab.cli.main, pipetab.solver.cpsat, pipetab.sweep, pipetab.hardware;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('schedules', 'hardware', 'solver'));"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert out.stdout.strip() == ""
