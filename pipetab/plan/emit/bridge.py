"""A planned configuration as Megatron-Bridge takes it: the Megatron-LM arguments of
``megatron_args`` as overrides of the ``ConfigContainer`` of Bridge's recipe for the model,
in the Hydra syntax its ``process_config_with_overrides`` applies (``model.*``: the model
provider, a Megatron-Core ``TransformerConfig``; ``train.*``, ``ddp.*``, ``optimizer.*``,
``checkpoint.*``, ``dataset.*``, ``mixed_precision.*``).

Every run decision is written even where it is the recipe's default (recipes set their own
parallel sizes, recomputation and distributed optimizer), so what runs is the plan and not
the recipe. Names are those of Megatron-Bridge ``BRIDGE`` over megatron-core
``MEGATRON_CORE`` (``tests/data/megatron_bridge_fields.txt``, made by
``experiments/bridge_fields.py``; ``make clients`` applies the overrides with Bridge's own
code and runs its checks).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from .megatron import MEGATRON_CORE, argv_of, connections, megatron_args, read_megatron
from .notes import Notes

if TYPE_CHECKING:
    from pipetab.hardware.model import TransformerModel

    from ..result import Configuration

BRIDGE = "0.3.1"
# pipetab's model presets Bridge has a recipe of: (module, recipe function)
RECIPES = {"llama3_8b": ("megatron.bridge.recipes.llama.llama3", "llama3_8b_pretrain_config"),
           "llama3_70b": ("megatron.bridge.recipes.llama.llama3", "llama3_70b_pretrain_config"),
           "llama3_405b": ("megatron.bridge.recipes.llama.llama3", "llama31_405b_pretrain_config"),
           "deepseek_v3": ("megatron.bridge.recipes.deepseek.deepseek_v3", "deepseek_v3_pretrain_config")}
# Megatron-LM arguments whose Bridge field is not ``model.<the argument's name>``
FIELDS = {"--num-experts": ("model.num_moe_experts",), "--max-position-embeddings": ("model.seq_length",),
          "--seq-length": ("dataset.sequence_length",), "--micro-batch-size": ("train.micro_batch_size",),
          "--global-batch-size": ("train.global_batch_size",),
          "--use-distributed-optimizer": ("ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer"),
          "--use-megatron-fsdp": ("ddp.use_megatron_fsdp",),
          "--data-parallel-sharding-strategy": ("ddp.data_parallel_sharding_strategy",),
          "--overlap-grad-reduce": ("ddp.overlap_grad_reduce",),
          "--overlap-param-gather": ("ddp.overlap_param_gather",), "--ckpt-format": ("checkpoint.ckpt_format",),
          "--swiglu": ("model.gated_linear_unit",), "--vocab-size": ("model.vocab_size",)}
NEGATED = {"--disable-bias-linear": "model.add_bias_linear",
           "--untie-embeddings-and-output-weights": "model.share_embeddings_and_output_weights"}
# implied by --num-query-groups; the precision: the recipe's (bf16_mixed), see bridge_text; a
# Megatron-LM argument megatron-core's TransformerConfig lacks (bridge_text says what differs)
SKIPPED = {"--group-query-attention", "--bf16", "--fp8-format", "--fp8-recipe", "--activation-offload-fraction"}
# what the plan decides, written when Megatron-LM's arguments leave it at its default
DEFAULTS = {"model.sequence_parallel": "false", "model.pipeline_model_parallel_layout": "null",
            "model.virtual_pipeline_model_parallel_size": "null", "model.recompute_granularity": "null",
            "model.recompute_method": "null", "model.recompute_num_layers": "null", "model.recompute_modules": "null",
            "model.expert_model_parallel_size": "1", "model.expert_tensor_parallel_size": "null",
            "model.overlap_moe_expert_parallel_comm": "false", "model.mtp_num_layers": "null",
            "model.moe_token_dispatcher_type": "alltoall", "ddp.use_distributed_optimizer": "false",
            "optimizer.use_distributed_optimizer": "false", "ddp.use_megatron_fsdp": "false",
            "ddp.data_parallel_sharding_strategy": "no_shard", "ddp.overlap_grad_reduce": "false",
            "ddp.overlap_param_gather": "false"}


def recipe_of(model_name: str) -> tuple[str, str]:
    """Bridge's recipe module and function of a pipetab model; ``ValueError`` naming the
    models it has recipes of otherwise."""
    if model_name not in RECIPES:
        raise ValueError(f"--model {model_name}: Megatron-Bridge {BRIDGE} has no recipe of it "
                         f"(pipetab emits {', '.join(RECIPES)})")
    return RECIPES[model_name]


def _value(name: str, values: list[str]) -> str:
    """One argument's values as a Hydra override value."""
    if not values:
        return "true"
    if name == "--moe-layer-freq":  # Megatron's list expression, e.g. ([0]*3+[1]*58), written out
        flags: list[int] = []
        for run in values[0].strip("()").split("+"):
            flag, _, count = run.partition("*")
            flags += [int(flag.strip("[]"))] * int(count or 1)
        return "[" + ",".join(map(str, flags)) + "]"
    if name in ("--recompute-modules", "--offload-modules"):
        return "[" + ",".join(values) + "]"
    (value,) = values
    return value if value.replace(".", "").replace("_", "").isalnum() else '"' + value + '"'


def bridge_overrides(args: list[str]) -> list[str]:
    """``megatron_args``' list as Bridge overrides (``section.field=value``), with the run
    decisions the arguments leave at Megatron's defaults written out (``DEFAULTS``)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        name, values = args[i], args[i + 1:j]
        i = j
        if name in SKIPPED:
            continue
        if name in NEGATED:
            out[NEGATED[name]] = "false"
            continue
        for field in FIELDS.get(name, ("model." + name[2:].replace("-", "_"),)):
            out[field] = _value(name, values)
    if "--seq-length" in args:
        out["model.seq_length"] = out["dataset.sequence_length"]
    out.update((key, value) for key, value in DEFAULTS.items() if key not in out)
    return [f"{key}={value}" for key, value in out.items()]


def bridge_text(conf: Configuration, model: TransformerModel, gpus: int, notes: Notes | None = None,
                gpus_per_node: int = 8, header: tuple[str, ...] = ()) -> str:
    """The launch of ``conf`` on Bridge's recipe for ``model`` (module docstring): the
    comments, the environment Megatron needs, and one override a line."""
    notes = Notes() if notes is None else notes
    module, recipe = recipe_of(model.name)
    args = megatron_args(conf, model, notes, gpus_per_node)
    if "--fp8-format" in args:
        notes.differ("FP8 GEMMs planned: the overrides keep the recipe's mixed precision (bf16); its preset is a "
                     "name or an object depending on the recipe, so choose its FP8 one (e.g. mixed_precision="
                     "bf16_with_fp8_current_scaling_mixed) to run what was planned")
    else:
        notes.assume("bf16 mixed precision as the recipe sets it")
    fraction = args[args.index("--activation-offload-fraction") + 1] if "--activation-offload-fraction" in args else ""
    if fraction and float(fraction) < 1:
        notes.differ(f"activation offload fraction {fraction} "
                     f"planned: megatron-core {MEGATRON_CORE}'s TransformerConfig has no such field, so Bridge "
                     "offloads every listed module's activations whole (more host traffic than planned)")
    head = [f"# pipetab plan: {conf.label} {conf.shape.label}, {conf.step_time_s:.4g} s per step (simulated), "
            f"{conf.peak_memory_bytes / 2**30:.1f} of {conf.capacity_bytes / 2**30:.1f} GiB per GPU; {gpus} GPUs",
            f"# for Megatron-Bridge {BRIDGE} (megatron-core {MEGATRON_CORE}): overrides of {module}.{recipe}() "
            "as megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides applies them, then "
            "megatron.bridge.training.pretrain.pretrain (as Bridge's examples/recipes scripts do); add your data, "
            "tokenizer and checkpoint paths", *header, *notes.comments()]
    launch = [f"export CUDA_DEVICE_MAX_CONNECTIONS={connections(args)}",
              f"torchrun --nnodes {max(1, gpus // gpus_per_node)} --nproc-per-node {min(gpus, gpus_per_node)} "
              f"pretrain.py --recipe {recipe} \\"]
    lines = ["  " + shlex.quote(o) for o in bridge_overrides(args)]
    return "\n".join(head + launch) + "\n" + " \\\n".join(lines) + "\n"


def overrides_of(text: str) -> list[str]:
    """The overrides of ``bridge_text``'s output (after ``--recipe NAME``)."""
    argv, _ = argv_of(text)
    if "--recipe" in argv:
        argv = argv[argv.index("--recipe") + 2:]
    return argv


def read_bridge(text: str, gpus: int) -> dict:
    """What Bridge makes of ``bridge_text``'s output, in ``read_megatron``'s words: the
    overrides turned back into the Megatron-LM arguments they name."""
    back = {f"model.{name[2:].replace('-', '_')}": name for name in
            ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
             "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--recompute-num-layers",
             "--cp-comm-type", "--pipeline-model-parallel-layout", "--recompute-granularity", "--recompute-method",
             "--moe-token-dispatcher-type", "--sequence-parallel", "--overlap-moe-expert-parallel-comm")}
    back.update({fields[0]: name for name, fields in FIELDS.items()})
    argv: list[str] = []
    for override in overrides_of(text):
        key, _, value = override.partition("=")
        if value in ("null", "false"):
            continue
        if key == "model.recompute_modules":
            argv += ["--recompute-modules", *value.strip("[]").split(",")]
        elif key in back:
            argv += [back[key]] if value == "true" else [back[key], value.strip('"')]
    return read_megatron(shlex.join(argv), gpus)
