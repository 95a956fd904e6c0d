"""The field names of torchtitan's job configuration in the two releases ``plan --emit``
targets, from their source: what ``plan --emit torchtitan`` and ``--emit torchtitan-toml``
may write is checked against this list (``tests/data/torchtitan_fields.txt``).

    pip download --no-deps torchtitan==0.3.0 torchtitan==0.2.2 -d WHEELS
    python -m experiments.torchtitan_fields WHEELS/torchtitan-0.3.0-*.whl WHEELS/torchtitan-0.2.2-*.whl \
        > tests/data/torchtitan_fields.txt

Each line is ``VERSION:section.field``. 0.3.0 (the current form, ``--module/--config`` and
dotted overrides) declares its sections as ``TrainingConfig`` and ``ParallelismConfig`` in
``torchtitan/config/configs.py``; 0.2.2 (the last release reading TOML job files) as
``Model``, ``Training``, ``Parallelism`` and ``ActivationCheckpoint`` in
``torchtitan/config/job_config.py``.
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile

SOURCES = {  # file in the wheel -> its classes and the section each is
    "torchtitan/config/configs.py": {"TrainingConfig": "training", "ParallelismConfig": "parallelism"},
    "torchtitan/config/job_config.py": {"Model": "model", "Training": "training", "Parallelism": "parallelism",
                                        "ActivationCheckpoint": "activation_checkpoint"},
}


def fields(source: str, sections: dict[str, str]) -> list[str]:
    """``section.field`` of every annotated field of the ``sections`` classes (top level)."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in sections:
            out += [f"{sections[node.name]}.{item.target.id}" for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    return sorted(out)


def wheel_fields(path: str) -> tuple[str, list[str]]:
    """The version and the fields of a torchtitan wheel."""
    version = re.search(r"torchtitan-([0-9][^-]*)-", path)
    if version is None:
        raise ValueError(f"{path}: not a torchtitan wheel's name")
    with zipfile.ZipFile(path) as whl:
        names = set(whl.namelist())
        for source, sections in SOURCES.items():
            if source in names:
                return version.group(1), fields(whl.read(source).decode(), sections)
    raise ValueError(f"{path}: none of {', '.join(SOURCES)} in it")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print("# torchtitan's job-configuration fields, VERSION:section.field, from the PyPI wheels")
    print("# made by: python -m experiments.torchtitan_fields torchtitan-0.3.0-*.whl torchtitan-0.2.2-*.whl")
    for path in argv:
        version, found = wheel_fields(path)
        print("\n".join(f"{version}:{f}" for f in found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
