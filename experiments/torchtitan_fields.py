"""The field names of torchtitan's ``ParallelismConfig`` and ``TrainingConfig`` (the
``[parallelism]`` and ``[training]`` sections of its job configuration), from its source:
what ``plan --emit torchtitan`` may print is checked against this list
(``tests/data/torchtitan_fields.txt``).

    python -m experiments.torchtitan_fields GIT_DIR [COMMIT] > tests/data/torchtitan_fields.txt
"""

from __future__ import annotations

import ast
import subprocess
import sys

SECTIONS = {"ParallelismConfig": "parallelism", "TrainingConfig": "training"}
SOURCE = "torchtitan/config/configs.py"


def fields(source: str) -> list[str]:
    """``section.field`` of every annotated field of the ``SECTIONS`` classes."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name in SECTIONS:
            out += [f"{SECTIONS[node.name]}.{item.target.id}" for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)]
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    git_dir, commit = argv[0], argv[1] if len(argv) > 1 else "HEAD"
    run = {"check": True, "capture_output": True, "text": True}
    rev = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", commit], **run).stdout.strip()  # type: ignore[call-overload]
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{SOURCE}"], **run).stdout  # type: ignore[call-overload]
    print(f"# torchtitan {rev}: {SOURCE} ({', '.join(SECTIONS)})")
    print("# made by: python -m experiments.torchtitan_fields GIT_DIR")
    print("\n".join(fields(text)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
