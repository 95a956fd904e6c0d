"""The command-line argument names of Megatron-LM's training script, from its source: what
``plan --emit megatron`` may print is checked against this list
(``tests/data/megatron_arguments.txt``).

    python -m experiments.megatron_args GIT_DIR [COMMIT] > tests/data/megatron_arguments.txt

``GIT_DIR`` is a Megatron-LM git directory (a bare mirror is enough): the names are every
literal ``'--name'`` of ``megatron/training/arguments.py`` and, for the dataclasses it turns
into argument groups (``ArgumentGroupFactory``: ``TransformerConfig`` with its base
``ModelParallelConfig``, the training, checkpoint, logging... configs), every field as
``--field-name`` (and ``--no-field-name`` for a boolean that defaults to true), with the
names their ``argparse_meta`` gives.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

SOURCES = {  # file -> the dataclasses of it that become argument groups
    "megatron/core/model_parallel_config.py": ("ModelParallelConfig",),
    "megatron/core/transformer/transformer_config.py": ("TransformerConfig",),
    "megatron/training/config/training_config.py": ("TrainingConfig", "SchedulerConfig", "CheckpointConfig",
                                                    "ValidationConfig", "TokenizerConfig", "LoggerConfig"),
    "megatron/training/config/common_config.py": ("DistributedInitConfig", "ProfilingConfig", "RNGConfig"),
    "megatron/training/config/resilience_config.py": ("RerunStateMachineConfig", "StragglerDetectionConfig"),
}
ARGUMENTS = "megatron/training/arguments.py"


def _show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def field_names(source: str, classes: tuple[str, ...]) -> set[str]:
    """``--field-name`` (and ``--no-...`` for true booleans, and ``argparse_meta`` names) of
    every annotated field of ``classes`` in ``source``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name in classes):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                    and not item.target.id.startswith("_"):
                name = "--" + item.target.id.replace("_", "-")
                out.add(name)
                if isinstance(item.value, ast.Constant) and item.value.value is True:
                    out.add("--no-" + name[2:])
                out |= set(re.findall(r"['\"](--[a-z0-9][a-z0-9-]*)['\"]", ast.unparse(item)))
    return out


def names(git_dir: str, commit: str = "HEAD") -> list[str]:
    text = _show(git_dir, commit, ARGUMENTS)
    found = set(re.findall(r"add_argument\(\s*['\"](--[a-z0-9][a-z0-9-]*)['\"]", text))
    found |= set(re.findall(r"add_argument\(\s*['\"]--[a-z0-9-]+['\"],\s*['\"](--[a-z0-9][a-z0-9-]*)['\"]", text))
    for path, classes in SOURCES.items():
        found |= field_names(_show(git_dir, commit, path), classes)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    git_dir, commit = argv[0], argv[1] if len(argv) > 1 else "HEAD"
    rev = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", commit], check=True, capture_output=True,
                         text=True).stdout.strip()
    print(f"# Megatron-LM {rev}: megatron/training/arguments.py and its argument-group dataclasses")
    print("# made by: python -m experiments.megatron_args GIT_DIR")
    print("\n".join(names(git_dir, commit)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
