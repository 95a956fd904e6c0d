"""A planned configuration as the frameworks that would run it take it, and read back.

* Megatron-LM (``megatron_args``): its training script's arguments — parallel sizes, the
  layout (``--pipeline-model-parallel-layout``, which also sets the virtual stages of an
  interleaved schedule), microbatch and global batch, recomputation, the distributed
  optimizer or Megatron-FSDP for ZeRO-3, the overlap flags. Megatron runs 1F1B and its
  interleaved schedule (``MEGATRON_SCHEDULES``); its block recomputation recomputes the
  same number of layers on every stage, so a per-stage choice is emitted as its largest.
  The names are those of Megatron's source (``tests/data/megatron_arguments.txt``, made by
  ``experiments/megatron_args.py``).
* torchtitan (``torchtitan_toml``): a ``[parallelism]`` and a ``[training]`` section with
  the field names of its ``ParallelismConfig`` and ``TrainingConfig``; layers per stage as
  ``module_fqns_per_model_part`` (Llama's module names), the schedule as the compute-only
  CSV ``pipeline_parallel_schedule_csv`` reads (``torch_csv``; one pipeline only).
  torchtitan shards data parallelism with FSDP (ZeRO-3) or replicates it (DDP): ZeRO 1
  and 2 are emitted as replicas.

``read_megatron`` and ``read_torchtitan`` parse what was emitted back into the same
``describe`` dictionary (the round trip the tests check).
"""

from __future__ import annotations

import argparse
import shlex
import tomllib
from typing import TYPE_CHECKING

from pipetab.hardware.context import Recompute
from pipetab.hardware.decisions import DECISION
from pipetab.hardware.layout import Layout
from pipetab.schedules.registry import REGISTRY, schedule_traits
from pipetab.schedules.text import toml_string

if TYPE_CHECKING:
    from pipetab.hardware.model import TransformerModel

    from .result import Configuration

MEGATRON_SCHEDULES = tuple(name for name, spec in REGISTRY.items() if spec.megatron)
TORCH_NAMES = {name: spec.torchtitan for name, spec in REGISTRY.items() if spec.torchtitan}
# the frameworks' names of the context decisions (hardware.decisions)
MEGATRON = {name: str(DECISION[name].megatron) for name in ("seq_len", "microbatch_size", "global_batch", "tp", "pp",
                                                             "cp", "cp_comm", "sequence_parallel", "ep", "etp",
                                                             "layout", "recompute", "recompute_layers")}
TORCHTITAN = {name: str(DECISION[name].torchtitan).split(".")[1]
              for name in ("dp", "zero", "reshard_after_forward", "tp", "sequence_parallel", "pp", "layout", "cp", "ep",
                           "microbatch_size", "global_batch", "seq_len")}


def describe(conf: Configuration, gpus: int, framework: str = "megatron") -> dict:
    """What a framework's configuration of ``conf`` says (the round trip's target)."""
    s = conf.shape
    pp = s.stages
    layers = conf.layers_per_stage
    chunks = len(layers) // pp if layers else 1
    recompute: object = str(s.recompute)
    if s.recompute_layers is not None:
        recompute = ("block", max(s.recompute_layers)) if framework == "megatron" else "per-stage"
    zero = s.zero if framework == "megatron" else (3 if s.zero == 3 else 0)
    if framework == "megatron" and zero == 2:
        zero = 1  # the distributed optimizer
    return {"pp": pp, "tp": s.tp, "cp": s.cp, "dp": gpus // (pp * s.tp * s.cp), "ep": s.ep, "etp": s.etp,
            "microbatch_size": s.microbatch_size, "global_batch": s.global_batch, "seq_len": s.seq_len,
            "layout": conf.layout, "chunks": chunks, "recompute": recompute, "zero": zero,
            "sequence_parallel": bool(s.sequence_parallel)}


# ---- Megatron-LM -------------------------------------------------------------------------
def _megatron_recompute(conf: Configuration) -> list[str]:
    s = conf.shape
    if s.recompute_layers is not None:
        return [MEGATRON["recompute"], "full", "--recompute-method", "block",
                MEGATRON["recompute_layers"], str(max(s.recompute_layers))]
    if s.recompute is Recompute.FULL:
        return [MEGATRON["recompute"], "full", "--recompute-method", "uniform", MEGATRON["recompute_layers"], "1"]
    if s.recompute is Recompute.SELECTIVE:
        return [MEGATRON["recompute"], "selective"]
    return []


def megatron_args(conf: Configuration, model: TransformerModel) -> list[str]:
    """Megatron-LM's arguments for ``conf`` (module docstring); ``ValueError`` for a
    schedule Megatron does not run."""
    if conf.schedule not in MEGATRON_SCHEDULES:
        raise ValueError(f"Megatron-LM runs {' and '.join(MEGATRON_SCHEDULES)}, not {conf.label}")
    s = conf.shape
    m, sizes = MEGATRON, s.sizes
    out = ["--num-layers", str(model.num_layers), m["seq_len"], str(sizes.seq_len),
           m["microbatch_size"], str(sizes.microbatch_size), m["global_batch"], str(sizes.global_batch),
           m["tp"], str(s.tp), m["pp"], str(s.stages), m["cp"], str(s.cp)]
    out += [m["cp_comm"], str(s.cp_comm)] if s.cp > 1 else []
    out += [m["sequence_parallel"]] if s.sequence_parallel else []
    if model.moe:
        out += [m["ep"], str(s.ep), m["etp"], str(s.etp)]
        out += ["--overlap-moe-expert-parallel-comm"] if dict(conf.options).get("overlap") else []
    if s.stages > 1 and (s.layout is not None or schedule_traits(conf.schedule).several_per_device):
        out += [m["layout"], conf.layout]
    out += _megatron_recompute(conf)
    if s.zero == 3:
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
    elif s.zero:
        out += ["--use-distributed-optimizer"]
    if s.zero and s.overlap:
        out += ["--overlap-grad-reduce", "--overlap-param-gather"]
    return out


def megatron_text(conf: Configuration, model: TransformerModel, gpus: int) -> str:
    """``megatron_args`` as shell lines, with the launch as a comment."""
    args = megatron_args(conf, model)
    lines, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        lines.append(shlex.join(args[i:j]))
        i = j
    dp = gpus // (conf.shape.stages * conf.shape.tp * conf.shape.cp)
    head = (f"# pipetab plan: {conf.label} {conf.shape.label}, {conf.step_time_s:.4g} s per step (simulated); "
            f"run on {gpus} GPUs (data parallelism: the GPUs left, {dp})")
    return head + "\n" + " \\\n".join(lines) + "\n"


def read_megatron(text: str, gpus: int) -> dict:
    """The ``describe`` dictionary of Megatron arguments (``megatron_text`` or a list)."""
    argv = shlex.split(" ".join(line for line in text.replace("\\\n", " ").splitlines()
                                if not line.lstrip().startswith("#")))
    p = argparse.ArgumentParser(add_help=False)
    for name in ("num-layers", "seq-length", "micro-batch-size", "global-batch-size", "tensor-model-parallel-size",
                 "pipeline-model-parallel-size", "context-parallel-size", "expert-model-parallel-size",
                 "expert-tensor-parallel-size", "recompute-num-layers"):
        p.add_argument(f"--{name}", type=int)
    for name in ("cp-comm-type", "pipeline-model-parallel-layout", "recompute-granularity", "recompute-method",
                 "data-parallel-sharding-strategy"):
        p.add_argument(f"--{name}")
    for name in ("sequence-parallel", "use-distributed-optimizer", "use-megatron-fsdp", "overlap-grad-reduce",
                 "overlap-param-gather", "overlap-moe-expert-parallel-comm"):
        p.add_argument(f"--{name}", action="store_true")
    a = p.parse_args(argv)
    pp, tp, cp = a.pipeline_model_parallel_size, a.tensor_model_parallel_size, a.context_parallel_size
    layout = a.pipeline_model_parallel_layout or Layout.even(a.num_layers, num_stages=pp).megatron()
    recompute: object = a.recompute_granularity or "none"
    if a.recompute_method == "block":
        recompute = ("block", a.recompute_num_layers)
    return {"pp": pp, "tp": tp, "cp": cp, "dp": gpus // (pp * tp * cp), "ep": a.expert_model_parallel_size or 1,
            "etp": a.expert_tensor_parallel_size or 1, "microbatch_size": a.micro_batch_size,
            "global_batch": a.global_batch_size, "seq_len": a.seq_length, "layout": layout,
            "chunks": Layout.parse(layout).num_stages // pp, "recompute": recompute,
            "zero": 3 if a.use_megatron_fsdp else (1 if a.use_distributed_optimizer else 0),
            "sequence_parallel": a.sequence_parallel}


# ---- torchtitan ----------------------------------------------------------------------------
def module_fqns(layout: Layout) -> list[list[str]]:
    """torchtitan's ``module_fqns_per_model_part`` of a layout (Llama's module names)."""
    out = []
    for part, first in zip(layout.stages, layout.first_layers):
        names = ["tok_embeddings"] if part.embedding else []
        names += [f"layers.{i}" for i in range(first, first + part.layers)]
        names += ["norm", "output"] if part.head else []
        out.append(names)
    return out


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def torchtitan_toml(conf: Configuration, gpus: int, csv_path: str = "") -> str:
    """The ``[parallelism]`` and ``[training]`` sections of ``conf`` (module docstring)."""
    s = conf.shape
    sizes = s.sizes
    dp = gpus // (s.stages * s.tp * s.cp)
    t = TORCHTITAN
    par = {t["dp"]: 1 if s.zero == 3 else dp, t["zero"]: dp if s.zero == 3 else 1,
           t["reshard_after_forward"]: "always" if s.reshard_after_forward else "never",
           t["tp"]: s.tp, t["sequence_parallel"]: bool(s.sequence_parallel),
           t["pp"]: s.stages, "pipeline_parallel_schedule": TORCH_NAMES.get(conf.schedule, "1F1B"),
           "pipeline_parallel_schedule_csv": csv_path, "num_pp_microbatches": sizes.microbatches,
           t["layout"]: module_fqns(Layout.parse(conf.layout)), t["cp"]: s.cp, t["ep"]: s.ep}
    seq = sizes.seq_len
    train = {t["microbatch_size"]: sizes.microbatch_size * seq, t["global_batch"]: sizes.global_batch * seq,
             t["seq_len"]: seq}
    lines = [f"# pipetab plan: {conf.label} {s.label}, {conf.step_time_s:.4g} s per step (simulated), {gpus} GPUs",
             f"# recompute: {conf.recompute_label} (torchtitan's activation checkpointing)"]
    if s.zero in (1, 2):
        lines.append(f"# ZeRO-{s.zero} planned: torchtitan replicates (DDP) or shards all (FSDP); replicated here")
    if not csv_path:
        lines.append("# schedule: give --emit-csv FILE.csv to write it for pipeline_parallel_schedule_csv")
    lines.append("[parallelism]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in par.items()]
    lines += ["", "[training]"] + [f"{k} = {_toml_value(v)}" for k, v in train.items()]
    return "\n".join(lines) + "\n"


def read_torchtitan(text: str, gpus: int) -> dict:
    """The ``describe`` dictionary (torchtitan's view) of ``torchtitan_toml``'s output."""
    doc = tomllib.loads(text)
    par, train = doc["parallelism"], doc["training"]
    parts = par["module_fqns_per_model_part"]
    layout = Layout.of_layers([sum(n.startswith("layers.") for n in part) for part in parts]).megatron()
    pp, tp, cp = par["pipeline_parallel_degree"], par["tensor_parallel_degree"], par["context_parallel_degree"]
    seq = train["max_context_length"]
    return {"pp": pp, "tp": tp, "cp": cp,
            "dp": par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"],
            "ep": par["expert_parallel_degree"],
            "microbatch_size": train["num_tokens_per_microbatch_per_dp_rank"] // seq,
            "global_batch": train["num_tokens_per_train_step"] // seq, "seq_len": seq, "layout": layout,
            "chunks": len(parts) // pp, "zero": 3 if par["data_parallel_shard_degree"] > 1 else 0,
            "sequence_parallel": par["enable_sequence_parallel"], "microbatches": par["num_pp_microbatches"],
            "csv": par["pipeline_parallel_schedule_csv"]}


def torch_csv(conf: Configuration, schedule) -> str:
    """The compute-only CSV of ``schedule`` (the configuration's run, one pipeline)."""
    from pipetab.schedules.formats import to_torch_csv
    from pipetab.schedules.table import layout

    if schedule.num_pipelines != 1:
        raise ValueError(f"{conf.label} runs two pipelines: torch's CSV holds one")
    return to_torch_csv(layout(schedule))
