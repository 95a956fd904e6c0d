"""A planned configuration as torchtitan takes it, in two forms, and read back.

* ``TORCHTITAN`` (the current release): ``torchrun -m torchtitan.train --module M --config
  C`` with dotted overrides (``--parallelism.tensor_parallel_degree 8``) and the
  activation-checkpointing subcommand (``activation-checkpoint:full``), as its
  ``ConfigManager`` parses them.
* ``TORCHTITAN_TOML`` (the last release that read TOML job files): ``[model]``,
  ``[training]``, ``[parallelism]`` and ``[activation_checkpoint]`` with that release's
  field names, given as ``--job.config_file``.

torchtitan shards data parallelism with FSDP or replicates it (DDP, or HSDP: both). A
planned ZeRO-1 or ZeRO-2 runs as FSDP keeping the gathered weights from forward to
backward (``fsdp_reshard_after_forward = "never"``), with a ``DIFFERS`` line and the
memory of what runs checked again by the caller (``recheck``). Expert parallelism must
divide ``dp_shard * cp * tp`` (torchtitan's rule): a replicated plan whose EP does not is
run as HSDP with the smallest shard degree that makes it legal. Recomputation is
torchtitan's activation checkpointing (full, selective per op, none; per-stage counts as
full on every stage). The schedule is torchtitan's class of that name, or the CSV
``pipeline_parallel_schedule_csv`` reads with the class whose stage -> rank placement it
has (``schedules.formats.torch_layout``, said in the text); a schedule of two pipelines,
or of a placement no torchtitan class builds, is refused (``ValueError`` with the reason).
"""

from __future__ import annotations

import math
import shlex
import tomllib
from typing import TYPE_CHECKING

from pipetab.hardware.context import Precision, Recompute
from pipetab.hardware.decisions import DECISION
from pipetab.hardware.layout import Layout
from pipetab.schedules.registry import REGISTRY, schedule_traits
from pipetab.schedules.text import toml_string

from .notes import Notes, sizes_of

if TYPE_CHECKING:
    from ..result import Configuration

TORCHTITAN = "0.3.0"
TORCHTITAN_TOML = "0.2.2"
TORCH_NAMES = {name: spec.torchtitan for name, spec in REGISTRY.items() if spec.torchtitan}
# pipetab's model presets torchtitan defines: module, config function (current), flavor (TOML)
MODELS = {"llama3_8b": ("llama3", "llama3_8b", "8B"), "llama3_70b": ("llama3", "llama3_70b", "70B"),
          "llama3_405b": ("llama3", "llama3_405b", "405B"), "deepseek_v3": ("deepseek_v3", "deepseek_v3_671b", "671B")}
NAMES = {name: str(DECISION[name].torchtitan).split(".")[1]
         for name in ("dp", "zero", "reshard_after_forward", "tp", "sequence_parallel", "pp", "layout", "cp", "ep",
                      "microbatch_size", "global_batch", "seq_len")}


def module_fqns(layout: Layout) -> list[list[str]]:
    """torchtitan's ``module_fqns_per_model_part`` of a layout (its module names)."""
    out = []
    for part, first in zip(layout.stages, layout.first_layers):
        names = ["tok_embeddings"] if part.embedding else []
        names += [f"layers.{i}" for i in range(first, first + part.layers)]
        names += ["norm", "output"] if part.head else []
        out.append(names)
    return out


def model_of(conf_model_name: str) -> tuple[str, str, str]:
    """torchtitan's module, config and flavor of a pipetab model; ``ValueError`` naming the
    ones it defines otherwise."""
    if conf_model_name not in MODELS:
        raise ValueError(f"--model {conf_model_name}: torchtitan {TORCHTITAN} defines no configuration of it "
                         f"(pipetab emits {', '.join(MODELS)})")
    return MODELS[conf_model_name]


def schedule_of(conf: Configuration, csv_path: str, notes: Notes | None = None) -> tuple[str, bool]:
    """torchtitan's schedule class for ``conf`` and whether it runs the CSV; ``ValueError``
    with the reason where torchtitan cannot run it."""
    if conf.shape.stages == 1:
        return "1F1B", False
    traits = schedule_traits(conf.schedule)
    if traits.pipelines != 1:
        raise ValueError(f"--emit torchtitan: {conf.label} runs {traits.pipelines} pipelines over the same GPUs; "
                         "torchtitan runs one (give --schedules with one-pipeline schedules)")
    if conf.schedule in TORCH_NAMES and conf.source != "cpsat":
        return str(TORCH_NAMES[conf.schedule]), False
    if not csv_path:
        raise ValueError(f"--emit torchtitan: {conf.label} is not a torchtitan schedule class: it runs from the "
                         "CSV pipeline_parallel_schedule_csv reads; give --emit-csv FILE.csv")
    from pipetab.schedules.formats import torch_layout, torch_layout_lines

    sched = conf.full_schedule()
    lay = torch_layout(sched)
    if lay["warning"]:
        raise ValueError(f"--emit torchtitan: {conf.label}: {lay['warning']}")
    if notes is not None:
        notes.assume(f"the schedule from {csv_path} on {torch_layout_lines(sched)[0]}")
    return str(lay["torchtitan"]["parallelism.pipeline_parallel_schedule"]), True


def data_parallel(conf: Configuration, gpus: int, notes: Notes) -> tuple[int, int, str]:
    """(replicate, shard, reshard_after_forward) as torchtitan runs the plan's data parallelism."""
    s = conf.shape
    dp = sizes_of(conf, gpus)["dp"]
    if s.zero == 3:
        return 1, dp, "always" if s.reshard_after_forward else "never"
    if s.zero in (1, 2) and dp > 1:
        notes.differ(f"ZeRO-{s.zero} planned: torchtitan has no ZeRO-{s.zero}; it runs FSDP over the {dp} "
                     "data-parallel ranks keeping the gathered weights from forward to backward (reshard never)")
        return 1, dp, "never"
    need = s.ep // math.gcd(s.ep, s.cp * s.tp)
    if need > 1:
        notes.differ(f"replicated data parallelism planned: torchtitan needs expert_parallel_degree ({s.ep}) to "
                     f"divide dp_shard x cp x tp, so it runs HSDP with {need} shards x {dp // need} replicas "
                     "(memory at most the plan's)")
        return dp // need, need, "always"
    return dp, 1, "default"


def activation_checkpoint(conf: Configuration, notes: Notes) -> str:
    """torchtitan's mode: ``full``, ``selective`` or ``none``."""
    s = conf.shape
    if s.activation_precision is Precision.FP8:
        notes.differ("FP8 activation caching planned: torchtitan keeps bf16 activations (more memory than planned)")
    if s.offload_activations:
        notes.differ(f"activation offload of {s.offload_activations:g} of every activation planned: torchtitan "
                     "has no activation offload, so they stay on the GPU (more memory than planned)")
    if s.recompute_modules:
        notes.differ(f"recompute modules {','.join(s.recompute_modules)} planned: torchtitan has no module lists; "
                     "its per-op selective checkpointing runs instead (what it recomputes differs)")
        return "selective"
    if s.recompute_layers is not None:
        if max(s.recompute_layers) == 0:
            return "none"
        notes.differ(f"per-stage recomputation {list(s.recompute_layers)} planned: torchtitan checkpoints every "
                     "layer or none, so every layer of every stage recomputes (slower, less memory than planned)")
        return "full"
    if s.recompute is Recompute.SELECTIVE:
        notes.assume("selective recomputation as torchtitan's per-op selective checkpointing (it keeps the "
                     "matmul outputs and recomputes the rest: the attention scores pipetab prices among them)")
    return str(s.recompute)


def _settings(conf: Configuration, gpus: int, csv_path: str, notes: Notes) -> dict:
    """The settings of both forms, by section and field (the current release's names)."""
    s = conf.shape
    size = sizes_of(conf, gpus)
    replicate, shard, reshard = data_parallel(conf, gpus, notes)
    schedule, csv = schedule_of(conf, csv_path, notes)
    mb, m = size["microbatch_size"], s.sizes.microbatches
    t = NAMES
    par = {t["dp"]: replicate, t["zero"]: shard, t["reshard_after_forward"]: reshard, t["tp"]: s.tp,
           t["sequence_parallel"]: bool(s.sequence_parallel) or s.tp == 1, t["pp"]: s.stages,
           t["cp"]: s.cp, t["ep"]: s.ep}
    if s.stages > 1:
        par.update({"pipeline_parallel_schedule": schedule, t["microbatch_size"]: mb,
                    t["layout"]: module_fqns(Layout.parse(conf.layout))})
        par.update({"pipeline_parallel_schedule_csv": csv_path} if csv else {})
    if s.etp > 1:
        notes.differ(f"expert tensor parallelism {s.etp} planned: torchtitan {TORCHTITAN} has no expert "
                     "tensor-parallel degree (its experts are split by tensor parallelism only)")
    if s.gemm_precision is Precision.FP8 or s.dispatch_precision is Precision.FP8:
        notes.differ("FP8 GEMMs or dispatch planned: written in bf16 (torchtitan's float8 converters and DeepEP "
                     "are model settings pipetab does not write)")
    if s.node_limit is not None:
        notes.differ(f"routing to at most {s.node_limit} nodes planned: torchtitan's router has no node limit")
    mtp = sum(part.mtp for part in Layout.parse(conf.layout).stages) if conf.layout and s.stages > 1 else 0
    if mtp:
        notes.differ(f"{mtp} MTP layer(s) planned in the layout: the configurations pipetab names build none "
                     f"(torchtitan {TORCHTITAN_TOML} has no MTP; {TORCHTITAN}'s needs a model spec with num_mtp_layers "
                     "and its MTP loss), so the last stage runs without them (less time and memory than planned)")
    local = mb * m if s.stages > 1 else mb
    train = {"local_batch_size": local, t["global_batch"]: size["global_batch"], t["seq_len"]: size["seq_len"]}
    return {"training": train, "parallelism": par, "activation_checkpoint": activation_checkpoint(conf, notes)}


def _head(conf: Configuration, gpus: int, version: str, notes: Notes, header: tuple[str, ...]) -> list[str]:
    return [f"# pipetab plan: {conf.label} {conf.shape.label}, {conf.step_time_s:.4g} s per step (simulated), "
            f"{conf.peak_memory_bytes / 2**30:.1f} of {conf.capacity_bytes / 2**30:.1f} GiB per GPU; {gpus} GPUs",
            f"# for torchtitan {version}", *header, *notes.comments()]


def torchtitan_command(conf: Configuration, model_name: str, gpus: int, csv_path: str = "",
                       notes: Notes | None = None, gpus_per_node: int = 8, header: tuple[str, ...] = ()) -> str:
    """The current torchtitan's launch of ``conf`` (module docstring)."""
    notes = Notes() if notes is None else notes
    module, config, _ = model_of(model_name)
    cfg = _settings(conf, gpus, csv_path, notes)
    if conf.shape.stages > 1:  # its configs capture CUDA graphs, which it runs with no pipeline
        cfg["training"]["disable_cuda_graphs"] = True
    groups = [["--module", module], ["--config", config]]
    for section in ("training", "parallelism"):
        groups += [_cli_group(section, key, value) for key, value in cfg[section].items()]
    groups.append([f"activation-checkpoint:{cfg['activation_checkpoint']}"])
    lines = ["  " + shlex.join(g) for g in groups]
    launch = f"torchrun --nnodes {max(1, gpus // gpus_per_node)} --nproc-per-node {min(gpus, gpus_per_node)} " \
             "-m torchtitan.train \\"
    return "\n".join([*_head(conf, gpus, TORCHTITAN, notes, header), launch]) + "\n" + " \\\n".join(lines) + "\n"


def _cli_group(section: str, key: str, value: object) -> list[str]:
    """A field as torchtitan's command line (tyro) takes it: a boolean as ``--s.key`` or
    ``--s.no-key``, a list of lists as one argument per part with its names joined by
    commas, anything else as one value."""
    if isinstance(value, bool):
        return [f"--{section}.{key}" if value else f"--{section}.no-{key}"]
    if isinstance(value, list):
        return [f"--{section}.{key}", *(",".join(part) for part in value)]
    return [f"--{section}.{key}", str(value)]


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def torchtitan_toml(conf: Configuration, model_name: str, gpus: int, csv_path: str = "",
                    notes: Notes | None = None, header: tuple[str, ...] = ()) -> str:
    """The last TOML release's job file of ``conf`` (module docstring)."""
    notes = Notes() if notes is None else notes
    module, _, flavor = model_of(model_name)
    cfg = _settings(conf, gpus, csv_path, notes)
    par = dict(cfg["parallelism"])
    sp = par.pop(NAMES["sequence_parallel"])
    if not sp:
        notes.differ(f"TP without sequence parallelism planned: torchtitan {TORCHTITAN_TOML} always shards "
                     "the sequence with TP")
    if conf.shape.etp > 1:
        par["expert_tensor_parallel_degree"] = conf.shape.etp
    doc = {"model": {"name": module, "flavor": flavor}, "training": cfg["training"], "parallelism": par,
           "activation_checkpoint": {"mode": cfg["activation_checkpoint"]}}
    lines = _head(conf, gpus, TORCHTITAN_TOML + " (run with --job.config_file FILE.toml)", notes, header)
    for section, table in doc.items():
        lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def read_torchtitan(text: str, gpus: int) -> dict:
    """What torchtitan makes of ``torchtitan_toml``'s or ``torchtitan_command``'s output,
    in ``describe``'s words."""
    if "[parallelism]" in text:
        doc = tomllib.loads(text)
        par, train, ac = doc["parallelism"], doc["training"], doc["activation_checkpoint"]["mode"]
    else:
        par, train, ac = _read_command(text)
    return _described(par, train, ac, gpus)


def _read_command(text: str) -> tuple[dict, dict, str]:
    """The parallelism and training fields and the checkpointing mode of a command line."""
    argv = shlex.split(" ".join(line for line in text.replace("\\\n", " ").splitlines()
                                if not line.lstrip().startswith("#")))
    par: dict = {}
    train: dict = {}
    ac = "selective"  # the configs' default
    for i, token in enumerate(argv):
        if token.startswith(("--parallelism.", "--training.")):
            section, key = token[2:].split(".", 1)
            if key.startswith("no-"):
                (par if section == "parallelism" else train)[key[3:]] = False
                continue
            values = []
            for v in argv[i + 1:]:
                if (v.startswith("-") and not v.lstrip("-").isdigit()) or v.startswith("activation-checkpoint:"):
                    break
                values.append(v)
            (par if section == "parallelism" else train)[key] = _parsed(key, values)
        elif token.startswith("activation-checkpoint:"):
            ac = token.split(":", 1)[1]
    return par, train, ac


def _parsed(key: str, values: list[str]) -> object:
    if key == NAMES["layout"]:
        return [v.split(",") for v in values]
    if not values:  # a boolean flag
        return True
    (value,) = values
    if value.lstrip("-").isdigit():
        return int(value)
    return value


def _described(par: dict, train: dict, ac: str, gpus: int) -> dict:
    pp, tp, cp = par.get("pipeline_parallel_degree", 1), par["tensor_parallel_degree"], par["context_parallel_degree"]
    parts = par.get("module_fqns_per_model_part")
    layout = Layout.of_layers([sum(n.startswith("layers.") for n in part) for part in parts]).megatron() \
        if parts else ""
    layers = Layout.parse(layout).layers if layout else ()
    mb = par.get("pipeline_parallel_microbatch_size", train["local_batch_size"])
    replicate, shard = par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]
    schedule = par.get("pipeline_parallel_schedule", "1F1B")
    return {"pp": pp, "tp": tp, "cp": cp, "dp": replicate * shard, "ep": par["expert_parallel_degree"],
            "microbatch_size": mb, "global_batch": train["global_batch_size"], "seq_len": train["seq_len"],
            "layout": layout, "schedule": schedule, "chunks": len(parts) // pp if parts else 1,
            "recompute": tuple(layers) if ac == "full" and layers else ac, "shard": shard,
            "csv": par.get("pipeline_parallel_schedule_csv", "")}


def torchtitan_view(conf: Configuration, gpus: int, csv_path: str = "") -> dict:
    """What torchtitan runs of ``conf`` (``read_torchtitan``'s words)."""
    notes = Notes()
    s = conf.shape
    layout = Layout.parse(conf.layout) if conf.layout and s.stages > 1 else None
    layers = layout.layers if layout else ()
    _, shard, _ = data_parallel(conf, gpus, notes)
    schedule, csv = schedule_of(conf, csv_path)
    mode = activation_checkpoint(conf, notes)
    recompute = tuple(layers) if mode == "full" and layers else mode
    size = sizes_of(conf, gpus)
    size.pop("etp")
    return {**size, "layout": Layout.of_layers(layers).megatron() if layout else "", "schedule": schedule,
            "chunks": layout.num_stages // s.stages if layout else 1, "recompute": recompute, "shard": shard,
            "csv": csv_path if csv else ""}

