"""``plan --emit`` checked by the frameworks' own code (``make clients-frameworks``; not part
of ``make test``: it installs torch).

    python -m experiments.emit_clients emit DIR              # pipetab's venv: the fixed set's texts
    python -m experiments.emit_clients check-megatron DIR    # a venv with megatron-core 0.16.1
    python -m experiments.emit_clients check-torchtitan DIR  # a venv with torchtitan 0.3.0 or 0.2.2
    PYTHONPATH=MEGATRON_LM python -m experiments.emit_clients check-megatron-lm DIR
                                                             # Python 3.12, Megatron-LM d98e8a64's source

``emit`` writes, for every configuration of ``CASES`` (hand-made plans: DeepSeek-V3's 61
layers on PP 16, per-stage recompute, MoE interleaved with overlapped pairs, long context
with CP and ZeRO-3, ZeRO-2 on PP 1; and the best rows of a Llama 3 8B plan of each
schedule and memory choice), the Megatron-LM launch, the torchtitan command line and the
TOML job file, with what each framework should run of it (``megatron_view``,
``torchtitan_view``) into ``DIR/cases.json``. The ``check-*`` modes import no pipetab: they
build Megatron-Core's ``TransformerConfig`` (``MLATransformerConfig`` for MLA) from the
arguments, whose ``__post_init__`` runs Megatron's checks (layout, MoE dispatcher, overlap,
recomputation); ``check-megatron-lm`` runs Megatron-LM's own ``parse_args``,
``validate_args`` and ``core_transformer_config_from_args`` at the commit of
``tests/data/megatron_arguments.txt`` (with ``--no-rope-fusion``, as Transformer Engine is
not on a CPU machine, a mock tokenizer and data, and an H100's compute capability); and run
torchtitan's ``ConfigManager`` on the command line (0.3.0) or the job file (0.2.2), then
its ``ParallelDims`` checks and, on a fake process group, its device mesh (where expert
parallelism must divide ``dp_shard x cp x tp``). Each compares what the framework holds
with what was planned; one line per case, exit 1 on any failure.
"""

from __future__ import annotations

import inspect
import json
import shlex
import sys
from pathlib import Path


def hand_made() -> list[tuple[str, object, int, object]]:
    """(name, model, GPUs, Configuration) of the hand-made plans of the fixed set."""
    from pipetab.hardware.context import Context
    from pipetab.hardware.layout import Layout
    from pipetab.hardware.loaders import load_model
    from pipetab.plan.result import Configuration

    def conf(schedule, shape, layout, options=()):
        return Configuration(schedule, options, shape, 1.0, 1.0, 0.5, 1, 2, True, 0.1, layout=layout)

    ds, llama = load_model("deepseek_v3"), load_model("llama3_8b")
    ds16, ds8 = (Layout.even(61, num_stages=n, mtp=1).megatron() for n in (16, 8))
    ll8 = Layout.even(32, num_stages=8).megatron()
    return [
        ("deepseek-pp16-uneven", ds, 256, conf("1f1b", Context(tp=2, dp=8, pp=16, ep=8, zero=1, microbatch_size=1,
                                                                global_batch=256, seq_len=4096, layout=ds16), ds16)),
        ("llama-cp-zero3-per-stage-recompute", llama, 64,
         conf("1f1b", Context(tp=8, dp=2, pp=4, cp=2, zero=3, microbatch_size=1, global_batch=64, seq_len=32768,
                              recompute_layers=(3, 2, 1, 0), layout="E|t*11|t*11|t*10L"), "E|t*11|t*11|t*10L")),
        ("deepseek-interleaved-overlap", ds, 64,
         conf("interleaved", Context(tp=1, dp=8, pp=8, ep=8, zero=1, microbatch_size=1, global_batch=256,
                                     seq_len=4096), ds16, (("chunks", 2), ("overlap", True)))),
        ("deepseek-fp8-deepep-node-limit", ds, 256,
         conf("1f1b", Context(tp=1, dp=32, pp=8, ep=32, zero=1, microbatch_size=1, global_batch=256, seq_len=4096,
                              gemm_precision="fp8", dispatch_precision="fp8", node_limit=2),
              ds8)),
        ("llama-pp1-zero2-full", llama, 64,
         conf("1f1b", Context(tp=8, dp=8, pp=1, zero=2, microbatch_size=1, global_batch=64, seq_len=8192,
                              recompute="full"), "")),
        ("deepseek-etp-recompute-modules", ds, 128,
         conf("1f1b", Context(tp=2, dp=8, pp=8, ep=8, etp=2, zero=1, microbatch_size=1, global_batch=128,
                              seq_len=4096, recompute_modules=("mla_up_proj", "moe_act"), layout=ds8), ds8)),
        ("llama-selective-modules", llama, 16,
         conf("interleaved", Context(tp=2, dp=2, pp=4, zero=1, microbatch_size=2, global_batch=64, seq_len=8192,
                                     recompute="selective", recompute_modules=("layernorm",), layout=ll8),
              ll8, (("chunks", 2),))),
    ]


def cases() -> list[tuple[str, object, int, object]]:
    """(name, model, GPUs, Configuration) of the fixed set: ``hand_made`` and the best row
    of a Llama 3 8B plan on 16 GPUs for each schedule, ZeRO and recomputation seen."""
    from pipetab.hardware.loaders import load_model
    from pipetab.plan import plan, plan_question

    llama = load_model("llama3_8b")
    out = hand_made()
    sp = plan_question("llama3_8b", 2, 8, 64, "H100", 8192, cpsat_shapes=0, top=40, schedules=("1f1b", "interleaved"))
    seen: set = set()
    for c in plan(sp).evaluated:
        key = (c.schedule, c.shape.zero, str(c.shape.recompute), c.shape.pp == 1, c.shape.recompute_layers is None)
        if c.fits and key not in seen:
            seen.add(key)
            out.append((f"llama-plan-{len(seen)}-{c.label}-{c.shape.label}".replace(" ", "_"), llama, 16, c))
    return out


def emit(folder: Path) -> int:
    from pipetab.hardware.layout import Layout
    from pipetab.plan.emit import (
        Notes,
        bridge_text,
        megatron_text,
        megatron_view,
        torchtitan_command,
        torchtitan_toml,
        torchtitan_view,
    )

    rows = []
    for name, model, gpus, c in cases():
        row = {"name": name, "gpus": gpus, "megatron": megatron_text(c, model, gpus, Notes()),
               "bridge": bridge_text(c, model, gpus),
               "layers": list(Layout.parse(c.layout).layers) if c.layout and c.shape.pp > 1 else [],
               "megatron_view": megatron_view(c, gpus, model), "torchtitan": torchtitan_command(c, model.name, gpus),
               "torchtitan_toml": torchtitan_toml(c, model.name, gpus), "torchtitan_view": torchtitan_view(c, gpus)}
        rows.append(row)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cases.json").write_text(json.dumps(rows, indent=1, default=list))
    print(f"{len(rows)} cases written to {folder / 'cases.json'}")
    return 0


# ---- Megatron-Core (no pipetab below) --------------------------------------------------
RENAMED = {"num_experts": "num_moe_experts", "fp8_format": "fp8"}
NOT_CONFIG = {"seq_length", "micro_batch_size", "global_batch_size", "max_position_embeddings", "vocab_size",
              "position_embedding_type", "group_query_attention", "use_distributed_optimizer", "use_megatron_fsdp",
              "data_parallel_sharding_strategy", "ckpt_format", "overlap_grad_reduce", "overlap_param_gather",
              "swiglu", "disable_bias_linear", "untie_embeddings_and_output_weights",
              "mtp_num_layers_", "multi_latent_attention", "cp_comm_type_"}


LISTS = {"recompute_modules"}  # nargs="+" in Megatron-LM
FP8_ARGS = {"--fp8-format": 1, "--fp8-recipe": 1}  # need Transformer Engine, which a CPU machine lacks


def megatron_argv(text: str) -> list[str]:
    """The arguments after ``pretrain_gpt.py``, the FP8 recipe's left out (``FP8_ARGS``)."""
    kept = [line for line in text.replace("\\\n", " ").splitlines()
            if not line.lstrip().startswith(("#", "export "))]
    argv = shlex.split(" ".join(kept))
    argv = argv[argv.index("pretrain_gpt.py") + 1:]
    out, i = [], 0
    while i < len(argv):
        if argv[i] in FP8_ARGS:
            i += 1 + FP8_ARGS[argv[i]]
            continue
        out.append(argv[i])
        i += 1
    return out


def megatron_config(argv: list[str]):
    """Megatron-Core's ``TransformerConfig`` (or ``MLATransformerConfig``) of the arguments,
    as ``core_transformer_config_from_args`` maps them (the flags that are not fields by
    their meaning)."""
    import dataclasses

    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    cls = MLATransformerConfig if "--multi-latent-attention" in argv else TransformerConfig
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kw: dict = {"add_bias_linear": "--disable-bias-linear" not in argv,
                "gated_linear_unit": "--swiglu" in argv, "params_dtype": torch_dtype(argv),
                "pipeline_dtype": torch_dtype(argv)}
    if "--swiglu" in argv:
        kw["activation_func"] = F.silu
    i = 0
    while i < len(argv):
        name = argv[i][2:].replace("-", "_")
        values = []
        while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            values.append(argv[i + 1])
            i += 1
        i += 1
        name = RENAMED.get(name, name)
        if name in NOT_CONFIG or name not in fields:
            continue
        kw[name] = _typed(fields[name], values)
    return cls(**kw)


def torch_dtype(argv: list[str]):
    import torch

    return torch.bfloat16 if "--bf16" in argv else torch.float32


def _typed(field, values: list[str]):
    if not values:
        return True
    text = values[0]
    kind = str(field.type)
    if "int" in kind and text.lstrip("-").isdigit():
        return int(text)
    if "float" in kind:
        try:
            return float(text)
        except ValueError:
            return text
    if text.startswith("(") and "list" in kind.lower():  # --moe-layer-freq's list expression
        return eval(text, {"__builtins__": {}})  # Megatron evaluates it the same way
    if field.name in LISTS:
        return list(values)
    return text


def check_megatron(row: dict) -> str:
    return _compare_megatron(megatron_config(megatron_argv(row["megatron"])), row["megatron_view"])


def _compare_megatron(cfg, want: dict) -> str:
    got = {"pp": cfg.pipeline_model_parallel_size, "tp": cfg.tensor_model_parallel_size,
           "cp": cfg.context_parallel_size, "ep": cfg.expert_model_parallel_size,
           "etp": cfg.expert_tensor_parallel_size or 1}
    if not cfg.num_moe_experts:  # Megatron sets ETP to TP when it is not given; no experts to split
        got.pop("etp")
    bad = [f"{k} {got[k]} != {want[k]}" for k in got if got[k] != want[k]]
    recompute = want["recompute"]
    modules = recompute[len("modules:"):].split(",") if str(recompute).startswith("modules:") else None
    granularity = None if recompute == "none" else "selective" if modules else \
        recompute if isinstance(recompute, str) else "full"
    if cfg.recompute_granularity != granularity:
        bad.append(f"recompute {cfg.recompute_granularity} != {granularity}")
    if modules is not None and sorted(cfg.recompute_modules or ()) != sorted(modules):
        bad.append(f"recompute modules {cfg.recompute_modules} != {modules}")
    if cfg.recompute_method == "block" and isinstance(recompute, list) and cfg.recompute_num_layers != max(recompute):
        bad.append(f"recompute layers {cfg.recompute_num_layers} != {max(recompute)}")
    if cfg.num_moe_experts and cfg.moe_token_dispatcher_type != want["dispatcher"]:
        bad.append(f"dispatcher {cfg.moe_token_dispatcher_type} != {want['dispatcher']}")
    layout = cfg.pipeline_model_parallel_layout
    if want["pp"] > 1 and layout is None:
        bad.append("no layout")
    if layout is not None and hasattr(layout, "virtual_pipeline_model_parallel_size"):
        vpp = layout.virtual_pipeline_model_parallel_size or 1
        if vpp != want["chunks"]:
            bad.append(f"virtual stages {vpp} != {want['chunks']}")
    if layout is not None and want["layout"] and _layers(layout) != _layers(want["layout"]):
        bad.append(f"layout {getattr(layout, 'input_data', layout)} != {want['layout']}")
    return "; ".join(bad)


def _layers(layout) -> list:
    """A layout (Megatron's object, its string or its list) as Megatron's list of stages."""
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    given = getattr(layout, "input_data", layout)
    return PipelineParallelLayerLayout.parse_str_to_list(given) if isinstance(given, str) else given


def check_megatron_lm(row: dict) -> str:
    """Megatron-LM's own ``parse_args``, ``validate_args`` (on a Hopper GPU's rules: the arch
    is the one thing asked of CUDA) and ``core_transformer_config_from_args`` on the launch,
    with its environment and ``WORLD_SIZE``; then ``check_megatron``'s comparisons."""
    import os

    import torch
    from megatron.training import argument_utils, arguments
    from megatron.training.utils import common_utils

    common_utils.get_device_arch_version = lambda: 9  # an H100, what the plans are for
    arguments.get_device_arch_version = lambda: 9
    torch.cuda.get_device_capability = lambda *_: (9, 0)
    argv = megatron_argv(row["megatron"])
    env = dict(line[len("export "):].split("=", 1) for line in row["megatron"].splitlines()
               if line.startswith("export "))
    os.environ.update(env, WORLD_SIZE=str(row["gpus"]), RANK="0")
    # what the CPU machine lacks (Transformer Engine) switched off; the data and tokenizer are mock
    sys.argv = ["pretrain_gpt.py", *argv, "--tokenizer-type", "NullTokenizer", "--mock-data", "--no-rope-fusion"]
    args = arguments.parse_args()
    arguments.validate_args(args)
    cfg = argument_utils.core_transformer_config_from_args(args)
    return _compare_megatron(cfg, row["megatron_view"])


# ---- Megatron-Bridge (no pipetab below) ------------------------------------------------
PROVIDERS = {"llama3_8b_pretrain_config": "Llama3ModelProvider8B",
             "llama3_70b_pretrain_config": "Llama3ModelProvider70B",
             "llama31_405b_pretrain_config": "Llama31ModelProvider405B",
             "deepseek_v3_pretrain_config": "DeepSeekV3ModelProvider"}


def _stub_transformer_engine() -> None:
    """An importable ``transformer_engine`` whose every name is an inert class: Bridge
    imports it at the top of its package, and it does not install without CUDA. Nothing
    of it runs in the checks below (they build configurations, not models)."""
    import importlib.abc
    import importlib.machinery
    import types

    class Any(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Inert

    class Inert(metaclass=Any):
        def __init__(self, *args, **kwargs):
            pass

    class Module(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Inert

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "transformer_engine":
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            module = Module(spec.name)
            module.__path__ = []
            module.__version__ = "2.12.0"  # within megatron-bridge 0.3.1's pin (>=2.10, <2.13)
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder())


def bridge_config(row: dict):
    """Bridge's recipe of the row's launch with its overrides applied by Bridge's own
    ``process_config_with_overrides``. The recipe's model comes from the Hugging Face hub
    (``AutoBridge.from_hf_pretrained``), which is not reachable here: Bridge's provider
    class of that model stands in for it (its architecture is overridden anyway)."""
    import importlib
    import types

    import torch

    _stub_transformer_engine()
    torch.cuda.get_device_properties = lambda *_: types.SimpleNamespace(major=9, minor=0, name="NVIDIA H100",
                                                                          total_memory=80 * 2**30)
    torch.cuda.get_device_capability = lambda *_: (9, 0)
    from megatron.bridge import models
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    argv = shlex.split(" ".join(line for line in row["bridge"].replace("\\\n", " ").splitlines()
                                if not line.lstrip().startswith(("#", "export "))))
    recipe = argv[argv.index("--recipe") + 1]
    provider = getattr(models, PROVIDERS[recipe])
    module = importlib.import_module(next(line.split("overrides of ")[1].split(f".{recipe}")[0]
                                          for line in row["bridge"].splitlines() if "overrides of " in line))
    module.AutoBridge = types.SimpleNamespace(from_hf_pretrained=lambda *_, **__: types.SimpleNamespace(
        to_megatron_provider=lambda **_: provider()))
    cfg = getattr(module, recipe)()
    return process_config_with_overrides(cfg, cli_overrides=argv[argv.index("--recipe") + 2:])


def check_bridge(row: dict) -> str:
    """Bridge's ``runtime_config_update`` (mixed precision applied, then
    ``ConfigContainer.validate``: Megatron-Core's model, DDP, training and checkpoint
    checks; the optimizer's left out, as they ask Transformer Engine's FusedAdam) on the
    overridden recipe with the row's world size, then ``check_megatron``'s comparisons and
    the batch, sequence, ZeRO and data parallelism."""
    import os

    cfg = bridge_config(row)
    from megatron.bridge.training.config import runtime_config_update

    os.environ.update(WORLD_SIZE=str(row["gpus"]), RANK="0", LOCAL_RANK="0")
    type(cfg.optimizer).finalize = lambda self: None
    runtime_config_update(cfg)
    want = row["megatron_view"]
    bad = [_compare_megatron(cfg.model, want)] if _compare_megatron(cfg.model, want) else []
    zero = 1 if cfg.ddp.use_distributed_optimizer else 0
    if cfg.ddp.use_megatron_fsdp:
        zero = 3 if cfg.ddp.data_parallel_sharding_strategy == "optim_grads_params" else 2
    got = {"microbatch_size": cfg.train.micro_batch_size, "global_batch": cfg.train.global_batch_size,
           "seq_len": cfg.dataset.sequence_length, "zero": zero, "dp": cfg.data_parallel_size}
    return "; ".join(bad + [f"{k} {got[k]} != {want[k]}" for k in got if got[k] != want[k]])


# ---- torchtitan (no pipetab below) -----------------------------------------------------
def titan_version() -> str:
    from importlib.metadata import version

    return version("torchtitan")


def titan_config(row: dict, folder: Path):
    from torchtitan.config import ConfigManager

    if titan_version().startswith("0.2"):
        path = folder / f"{row['name']}.toml"
        path.write_text(row["torchtitan_toml"])
        return ConfigManager().parse_args(["--job.config_file", str(path)])
    argv = shlex.split(" ".join(line for line in row["torchtitan"].replace("\\\n", " ").splitlines()
                                if not line.lstrip().startswith("#")))
    return ConfigManager().parse_args(argv[argv.index("torchtitan.train") + 1:])


def titan_mesh(par, world: int) -> str:
    """torchtitan's parallel dims and device mesh on a fake process group of ``world`` ranks."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.distributed import ParallelDims

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        kw = {"dp_replicate": par.data_parallel_replicate_degree, "dp_shard": par.data_parallel_shard_degree,
              "cp": par.context_parallel_degree, "tp": par.tensor_parallel_degree, "pp": par.pipeline_parallel_degree,
              "ep": par.expert_parallel_degree, "world_size": world}
        if "etp" in inspect.signature(ParallelDims).parameters:  # 0.2.2 has expert tensor parallelism
            kw["etp"] = par.expert_tensor_parallel_degree
        dims = ParallelDims(**kw)
        dims.build_mesh()
    except Exception as exc:  # the framework's refusal, reported
        return f"parallel dims: {exc}"
    finally:
        dist.destroy_process_group()
    return ""


def check_torchtitan(row: dict, folder: Path) -> str:
    cfg = titan_config(row, folder)
    par, train, want = cfg.parallelism, cfg.training, row["torchtitan_view"]
    got = {"pp": par.pipeline_parallel_degree, "tp": par.tensor_parallel_degree, "cp": par.context_parallel_degree,
           "dp": par.data_parallel_replicate_degree * par.data_parallel_shard_degree, "ep": par.expert_parallel_degree,
           "global_batch": train.global_batch_size, "seq_len": train.seq_len, "shard": par.data_parallel_shard_degree}
    if want["pp"] > 1:
        got["microbatch_size"] = par.pipeline_parallel_microbatch_size
        got["schedule"] = par.pipeline_parallel_schedule
        parts = par.module_fqns_per_model_part or []
        got["layers"] = [sum(name.startswith("layers.") for name in part) for part in parts]
        want = {**want, "layers": row["layers"]}
    bad = [f"{k} {got[k]} != {want[k]}" for k in got if got[k] != want[k]]
    ac = cfg.activation_checkpoint
    mode = getattr(ac, "mode", None) or ("none" if ac is None else type(ac).__qualname__.split(".")[0].lower())
    if isinstance(want["recompute"], str) and want["recompute"] not in mode:
        bad.append(f"activation checkpointing {mode} != {want['recompute']}")
    mesh = titan_mesh(par, row["gpus"])
    return "; ".join(bad + ([mesh] if mesh else []))


def check(kind: str, folder: Path) -> int:
    rows = json.loads((folder / "cases.json").read_text())
    failed = 0
    for row in rows:
        try:
            check = {"megatron": check_megatron, "megatron-lm": check_megatron_lm, "bridge": check_bridge}.get(kind)
            why = check(row) if check else check_torchtitan(row, folder)
        except (Exception, SystemExit) as exc:  # the framework's refusal (tyro exits), reported
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        failed += bool(why)
        fp8 = " (its FP8 arguments not checked: no Transformer Engine here)" \
            if kind.startswith("megatron") and "--fp8-format" in row["megatron"] else ""
        print(f"{kind} {row['name']}: {'FAIL ' + why if why else 'ok' + fp8}")
    print(f"{kind}: {len(rows) - failed} of {len(rows)} accepted and as planned")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    kinds = ("emit", "check-megatron", "check-megatron-lm", "check-bridge", "check-torchtitan")
    if len(argv) != 2 or argv[0] not in kinds:
        print(f"usage: python -m experiments.emit_clients {'|'.join(kinds)} DIR", file=sys.stderr)
        return 2
    folder = Path(argv[1])
    if argv[0] == "emit":
        return emit(folder)
    return check(argv[0].split("-", 1)[1], folder)


if __name__ == "__main__":
    raise SystemExit(main())
