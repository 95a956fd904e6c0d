"""The fields of Megatron-Bridge's ``ConfigContainer`` that ``plan --emit megatron-bridge``
may override, from the source of the PyPI wheels (``tests/data/megatron_bridge_fields.txt``):

    pip download --no-deps megatron-bridge==0.3.1 megatron-core==0.16.1 -d WHEELS
    python -m experiments.bridge_fields WHEELS/megatron_bridge-0.3.1-*.whl \
        WHEELS/megatron_core-0.16.1-*.whl > tests/data/megatron_bridge_fields.txt

Each line is ``section.field``: every annotated field of the classes a section of
``ConfigContainer`` holds, with the Megatron-Core bases they extend (``model``: Bridge's
``GPTModelProvider`` and ``MLAModelProvider`` over Megatron-Core's ``TransformerConfig``,
``MLATransformerConfig`` and ``ModelParallelConfig``; ``ddp``, ``optimizer``, ``dataset``
over their Megatron-Core configs; ``train``, ``checkpoint``, ``mixed_precision``).
"""

from __future__ import annotations

import ast
import re
import sys
import zipfile

BRIDGE = {  # section -> (file in the megatron-bridge wheel, classes)
    "model": [("megatron/bridge/models/gpt_provider.py", ("GPTModelProvider",)),
              ("megatron/bridge/models/mla_provider.py", ("MLAModelProvider",)),
              ("megatron/bridge/models/transformer_config.py", ("TransformerConfig", "MLATransformerConfig"))],
    "train": [("megatron/bridge/training/config.py", ("TrainingConfig",))],
    "ddp": [("megatron/bridge/training/config.py", ("DistributedDataParallelConfig",))],
    "optimizer": [("megatron/bridge/training/config.py", ("OptimizerConfig",))],
    "checkpoint": [("megatron/bridge/training/config.py", ("CheckpointConfig",))],
    "dataset": [("megatron/bridge/training/config.py", ("GPTDatasetConfig", "DataloaderConfig"))],
    "mixed_precision": [("megatron/bridge/training/mixed_precision.py", ("MixedPrecisionConfig",))],
}
CORE = {  # section -> (file in the megatron-core wheel, classes)
    "model": [("megatron/core/transformer/transformer_config.py", ("TransformerConfig", "MLATransformerConfig")),
              ("megatron/core/model_parallel_config.py", ("ModelParallelConfig",))],
    "ddp": [("megatron/core/distributed/distributed_data_parallel_config.py", ("DistributedDataParallelConfig",))],
    "optimizer": [("megatron/core/optimizer/optimizer_config.py", ("OptimizerConfig",))],
    "dataset": [("megatron/core/datasets/gpt_dataset.py", ("GPTDatasetConfig",)),
                ("megatron/core/datasets/blended_megatron_dataset_config.py", ("BlendedMegatronDatasetConfig",))],
}


def class_fields(source: str, classes: tuple[str, ...]) -> set[str]:
    """The annotated (dataclass) fields of ``classes`` in ``source``, top level only;
    ``ValueError`` naming a class the source does not define."""
    out: set[str] = set()
    seen = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in classes:
            seen.add(node.name)
            out |= {item.target.id for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and not item.target.id.startswith("_")}
    if seen != set(classes):
        raise ValueError(f"no class {', '.join(sorted(set(classes) - seen))}")
    return out


def wheel_fields(path: str, table: dict[str, list[tuple[str, tuple[str, ...]]]]) -> tuple[str, set[str]]:
    """The version of a wheel and its ``section.field`` names per ``table``."""
    version = re.search(r"-([0-9][^-]*)-(?:py3|cp3)", path)
    if version is None:
        raise ValueError(f"{path}: not a wheel's name")
    out: set[str] = set()
    with zipfile.ZipFile(path) as whl:
        for section, sources in table.items():
            for source, classes in sources:
                try:
                    found = class_fields(whl.read(source).decode(), classes)
                except (KeyError, ValueError) as exc:
                    raise ValueError(f"{path}: {source}: {exc}") from None
                out |= {f"{section}.{name}" for name in found}
    return version.group(1), out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m experiments.bridge_fields MEGATRON_BRIDGE.whl MEGATRON_CORE.whl", file=sys.stderr)
        return 2
    bridge, fields = wheel_fields(argv[0], BRIDGE)
    core, more = wheel_fields(argv[1], CORE)
    print(f"# Megatron-Bridge {bridge} (megatron-core {core}): ConfigContainer's section.field, from the PyPI wheels")
    print("# made by: python -m experiments.bridge_fields megatron_bridge-*.whl megatron_core-*.whl")
    print("\n".join(sorted(fields | more)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
