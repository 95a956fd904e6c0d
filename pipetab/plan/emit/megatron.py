"""A planned configuration as Megatron-LM's ``pretrain_gpt.py`` takes it, and read back.

The arguments are one complete set: the model's architecture (sizes, attention kind,
MLP, norm, biases, MoE, MTP, precision), the parallel sizes and the layout
(``--pipeline-model-parallel-layout`` on every pipeline: it fixes the layers of each stage
and the virtual stages of the interleaved schedule), recomputation, the MoE dispatcher
(``alltoall``, or ``flex`` with DeepEP where the dispatch is planned in FP8), the
distributed optimizer (ZeRO-1) or Megatron-FSDP (ZeRO-2: ``optim_grads``, ZeRO-3:
``optim_grads_params``, both with the ``fsdp_dtensor`` checkpoint format it requires), the
overlap flags, the batch, and ``CUDA_DEVICE_MAX_CONNECTIONS`` as its launch needs it
(``megatron/training/arguments.py``: 1 with TP or CP, never 1 with FSDP).

What Megatron cannot express is emitted as the nearest it can with a ``DIFFERS`` line
(``Notes``): its block recomputation recomputes the same number of layers on every stage,
so a per-stage choice becomes its largest. Names and rules are those of Megatron-LM at
``MEGATRON_COMMIT`` (``tests/data/megatron_arguments.txt``, ``experiments/megatron_args.py``)
and megatron-core ``MEGATRON_CORE`` (``TransformerConfig``'s checks; ``make clients``).
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from pipetab.hardware.context import Precision, Recompute
from pipetab.hardware.decisions import DECISION
from pipetab.hardware.layout import Layout
from pipetab.schedules.registry import REGISTRY

from .notes import Notes, dropped, modules_word, planned_recompute, sizes_of

if TYPE_CHECKING:
    from pipetab.hardware.model import TransformerModel

    from ..result import Configuration

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_CORE = "0.16.1"
MEGATRON_SCHEDULES = tuple(name for name, spec in REGISTRY.items() if spec.megatron)
# the frameworks' names of the context decisions (hardware.decisions)
MEGATRON = {name: str(DECISION[name].megatron) for name in ("seq_len", "microbatch_size", "global_batch", "tp", "pp",
                                                             "cp", "cp_comm", "sequence_parallel", "ep", "etp",
                                                             "layout", "recompute", "recompute_layers", "zero",
                                                             "overlap", "gemm_precision")}
SCRIPT = "pretrain_gpt.py"


def _architecture(model: TransformerModel, seq: int, notes: Notes) -> list[str]:
    """The dense model's arguments."""
    out = ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden),
           "--ffn-hidden-size", str(model.ffn_hidden), "--num-attention-heads", str(model.heads),
           "--max-position-embeddings", str(seq), "--vocab-size", str(model.vocab)]
    if model.kv_lora_rank:
        out += ["--multi-latent-attention", "--kv-lora-rank", str(model.kv_lora_rank),
                "--qk-head-dim", str(model.head_dim), "--qk-pos-emb-head-dim", str(model.qk_rope_head_dim),
                "--v-head-dim", str(model.v_head_dim)]
        out += ["--q-lora-rank", str(model.q_lora_rank)] if model.q_lora_rank else []
    else:
        if model.kv_heads != model.heads:
            out += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
        if model.head_dim * model.heads != model.hidden:
            out += ["--kv-channels", str(model.head_dim)]
    out += ["--swiglu"] if model.mlp == "swiglu" else []
    out += ["--qk-layernorm"] if model.qk_norm else []
    out += [] if model.bias else ["--disable-bias-linear"]
    out += [] if model.tied_embeddings else ["--untie-embeddings-and-output-weights"]
    if model.norm == "rmsnorm":
        out += ["--normalization", "RMSNorm", "--position-embedding-type", "rope"]
        notes.assume("RoPE position embeddings (pipetab's model has no position field; its RMSNorm models use RoPE)")
    if not model.dropout:
        out += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    out += ["--mtp-num-layers", str(model.mtp_layers)] if model.mtp_layers else []
    notes.assume(f"the vocabulary of {model.vocab:,} tokens given as --vocab-size (Megatron pads it to its "
                 "--make-vocab-size-divisible-by; your tokenizer's arguments are yours to add)")
    return out


def _moe(conf: Configuration, model: TransformerModel, gpus_per_node: int, notes: Notes) -> list[str]:
    """The MoE arguments: experts, routing, dispatcher, EP/ETP."""
    s, m = conf.shape, MEGATRON
    out = ["--num-experts", str(model.num_experts), "--moe-router-topk", str(model.experts_per_token),
           "--moe-ffn-hidden-size", str(model.expert_ffn_hidden or model.ffn_hidden), "--moe-grouped-gemm"]
    if model.shared_experts:
        out += ["--moe-shared-expert-intermediate-size",
                str(model.shared_experts * (model.expert_ffn_hidden or model.ffn_hidden))]
    flags = [int(model.is_moe_layer(i)) for i in range(model.num_layers)]
    if not all(flags):
        out += ["--moe-layer-freq", _freq(flags)]
    if s.dispatch_precision is Precision.FP8:
        out += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
        if s.gemm_precision is not Precision.FP8:
            notes.differ("FP8 dispatch planned: Megatron's DeepEP dispatches what its recipe gives it, bf16 here "
                         "without --fp8-format")
    else:
        out += ["--moe-token-dispatcher-type", "alltoall"]
    if s.node_limit is not None and s.ep > 1:
        per_node = max(1, gpus_per_node // s.etp)
        groups = -(-s.ep // per_node)
        if groups > s.node_limit and model.num_experts % groups == 0:
            out += ["--moe-router-num-groups", str(groups), "--moe-router-group-topk", str(s.node_limit)]
        else:
            notes.assume(f"node limit {s.node_limit}: the EP group spans {groups} node(s), so no group-limited "
                         "routing is needed")
    out += [m["ep"], str(s.ep), m["etp"], str(s.etp)]
    return out


def _freq(flags: list[int]) -> str:
    """Megatron's ``--moe-layer-freq`` list expression of per-layer MoE flags (runs)."""
    runs: list[tuple[int, int]] = []
    for f in flags:
        if runs and runs[-1][0] == f:
            runs[-1] = (f, runs[-1][1] + 1)
        else:
            runs.append((f, 1))
    return "(" + "+".join(f"[{f}]*{n}" for f, n in runs) + ")"


def _recompute(conf: Configuration, model: TransformerModel, notes: Notes) -> list[str]:
    """Recomputation as planned, or Megatron's nearest with a ``DIFFERS`` line; recompute
    modules as ``--recompute-modules`` (selective granularity: the modules pipetab drops,
    ``core_attn`` among them with selective recomputation of classic attention); FP8
    activation caching, which Megatron-LM has no flag for, as a ``DIFFERS`` line."""
    s, m = conf.shape, MEGATRON
    if s.activation_precision is Precision.FP8:
        notes.differ("FP8 activation caching planned: Megatron-LM has no flag for it (Transformer Engine keeps "
                     "what its FP8 recipe keeps), so the GEMM inputs may stay in bf16: more memory than planned")
    if s.recompute_modules:
        if s.recompute_layers is not None or s.recompute is Recompute.FULL:
            notes.differ(f"recompute modules {','.join(s.recompute_modules)} planned beside layer recomputation: "
                         "Megatron takes one granularity, the modules are written")
        return [m["recompute"], "selective", "--recompute-modules", *dropped(conf, model)]
    if s.recompute_layers is not None:
        top = max(s.recompute_layers)
        if top == 0:
            return []
        if len(set(s.recompute_layers)) > 1:
            notes.differ(f"per-stage recomputation {list(s.recompute_layers)} planned: Megatron recomputes the "
                         f"same number of layers on every stage, {top} (--recompute-num-layers), so stages "
                         "planned with fewer recompute more (slower, less memory than planned)")
        return [m["recompute"], "full", "--recompute-method", "block", m["recompute_layers"], str(top)]
    if s.recompute is Recompute.FULL:
        return [m["recompute"], "full", "--recompute-method", "uniform", m["recompute_layers"], "1"]
    if s.recompute is Recompute.SELECTIVE:
        if model.attention != "classic":
            notes.differ("selective recomputation planned on flash attention, which keeps no score matrix: pipetab "
                         "prices it as recomputing nothing, while Megatron's selective granularity runs the "
                         "attention core again in the backward (slower than planned, the same memory)")
        return [m["recompute"], "selective"]
    return []


# Megatron-LM's --offload-modules at MEGATRON_COMMIT (TransformerConfig's allowed modules; each
# offloads its module's input, attn_proj only with core_attn) -> the rows of
# hardware.activations' table that input is; the MoE ones only on a MoE model
OFFLOAD_MODULES = {"attn_norm": ("input_norm_in",), "qkv_linear": ("qkv_in",), "core_attn": ("q", "k", "v"),
                   "attn_proj": ("attn_out",), "mlp_norm": ("mlp_norm_in",), "expert_fc1": ("dispatched",),
                   "moe_act": ("expert_act_in",)}


def _offload(conf: Configuration, model: TransformerModel, notes: Notes) -> list[str]:
    """Activation offload as Megatron's fine-grained activation offloading (its docs:
    ``docs/user-guide/features/fine_grained_activation_offloading.md``): every module it can
    offload whose input the model has, and ``--activation-offload-fraction`` the share of their
    groups that makes the planned share of a layer's saved bytes (``hardware.activations``'
    table; 1 where the modules hold less: a ``DIFFERS`` line). Megatron counts groups, not
    bytes, and keeps the later layers' on the GPU: an ``assumes`` line says so."""
    from pipetab.hardware.activations import module_table

    s = conf.shape
    if not s.offload_activations:
        return []
    modules = [m for m in OFFLOAD_MODULES if model.moe or m not in ("expert_fc1", "moe_act")]
    rows = module_table(model, s, model.moe)
    covered = sum(r["bytes"] for r in rows if any(r["name"] in OFFLOAD_MODULES[m] for m in modules))
    share = covered / max(sum(r["bytes"] for r in rows), 1.0)
    fraction = min(1.0, s.offload_activations / share) if share else 1.0
    if share < s.offload_activations:
        notes.differ(f"activation offload of {s.offload_activations:g} of every activation planned: the inputs of "
                     f"Megatron's --offload-modules hold {share:.0%} of a layer's saved bytes on this shape, so it "
                     "offloads less (more memory than planned)")
    else:
        notes.assume(f"--activation-offload-fraction {fraction:.3g} of the offload groups makes the planned "
                     f"{s.offload_activations:g} of the bytes ({share:.0%} of a layer's in those modules); Megatron "
                     "counts groups, not bytes, and keeps the later layers' groups on the GPU")
    return [DECISION["offload_activations"].megatron or "", "--offload-modules", *modules,
            "--activation-offload-fraction", f"{fraction:.3g}"]


def _data_parallel(conf: Configuration, notes: Notes) -> list[str]:
    """ZeRO as the distributed optimizer or Megatron-FSDP, and the overlap flags."""
    s, m = conf.shape, MEGATRON
    out: list[str] = []
    if s.zero == 1:
        out += [m["zero"]]
    elif s.zero in (2, 3):
        strategy = "optim_grads" if s.zero == 2 else "optim_grads_params"
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy, "--ckpt-format", "fsdp_dtensor"]
        if s.zero == 3 and not s.reshard_after_forward:
            notes.differ("weights kept gathered from forward to backward planned: Megatron-FSDP gathers them again "
                         "for the backward")
    if s.zero and s.overlap:
        out += [m["overlap"], "--overlap-param-gather"]
    elif s.overlap and s.dp > 1:
        out += [m["overlap"]]
    return out


def _overlap_moe(conf: Configuration, model: TransformerModel, args: list[str], notes: Notes) -> list[str]:
    """``--overlap-moe-expert-parallel-comm`` where the plan overlaps pairs and Megatron's
    rules allow it (EP > 1, virtual stages with PP > 1, no full recomputation, MTP <= 1)."""
    if not (model.moe and dict(conf.options).get("overlap")):
        return []
    s = conf.shape
    chunks = int(str(dict(conf.options).get("chunks", 1)))
    why = ("EP 1" if s.ep < 2 else "no virtual stages" if s.stages > 1 and chunks < 2
           else "full recomputation" if "full" in args else "MTP depth over 1" if model.mtp_layers > 1 else "")
    if why:
        notes.differ(f"overlapped forward-backward pairs planned: Megatron's --overlap-moe-expert-parallel-comm "
                     f"refuses {why}, so the pairs run one op after the other")
        return []
    return ["--overlap-moe-expert-parallel-comm"]


def megatron_args(conf: Configuration, model: TransformerModel, notes: Notes | None = None,
                  gpus_per_node: int = 8) -> list[str]:
    """Megatron-LM's arguments for ``conf`` (module docstring); ``ValueError`` for a
    schedule Megatron does not run. What differs from the plan goes to ``notes``."""
    if conf.schedule not in MEGATRON_SCHEDULES:
        raise ValueError(f"Megatron-LM runs {' and '.join(MEGATRON_SCHEDULES)}, not {conf.label}")
    notes = Notes() if notes is None else notes
    s = conf.shape
    m, sizes = MEGATRON, s.sizes
    out = _architecture(model, sizes.seq_len, notes)
    out += ["--bf16"]
    if s.gemm_precision is Precision.FP8:
        out += [m["gemm_precision"], "hybrid", "--fp8-recipe", "tensorwise"]
        notes.assume("FP8 GEMMs as Transformer Engine's hybrid format, tensor-wise scaling (pipetab prices the "
                     "GEMMs at the FP8 peak whatever the recipe)")
    out += [m["seq_len"], str(sizes.seq_len), m["microbatch_size"], str(sizes.microbatch_size),
            m["global_batch"], str(sizes.global_batch), m["tp"], str(s.tp), m["pp"], str(s.stages), m["cp"], str(s.cp)]
    out += [m["cp_comm"], str(s.cp_comm)] if s.cp > 1 else []
    out += [m["sequence_parallel"]] if s.sequence_parallel else []
    if s.stages > 1:
        out += [m["layout"], conf.layout]
    if model.moe:
        out += _moe(conf, model, gpus_per_node, notes)
    out += _recompute(conf, model, notes)
    out += _offload(conf, model, notes)
    out += _data_parallel(conf, notes)
    out += _overlap_moe(conf, model, out, notes)
    return out


def connections(args: list[str]) -> str:
    """``CUDA_DEVICE_MAX_CONNECTIONS`` as Megatron's argument checks want it: never 1 with
    Megatron-FSDP, larger than 1 for the MoE all-to-all overlap, else 1 (TP and CP need it)."""
    return "32" if "--use-megatron-fsdp" in args or "--overlap-moe-expert-parallel-comm" in args else "1"


def megatron_text(conf: Configuration, model: TransformerModel, gpus: int, notes: Notes | None = None,
                  gpus_per_node: int = 8, header: tuple[str, ...] = ()) -> str:
    """``megatron_args`` as a launch: the comments (what the plan is, what differs, what is
    assumed), the environment, ``torchrun ... pretrain_gpt.py`` and the arguments."""
    notes = Notes() if notes is None else notes
    args = megatron_args(conf, model, notes, gpus_per_node)
    lines, i = [], 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        lines.append("  " + shlex.join(args[i:j]))
        i = j
    dp = sizes_of(conf, gpus)["dp"]
    head = [f"# pipetab plan: {conf.label} {conf.shape.label}, {conf.step_time_s:.4g} s per step (simulated), "
            f"{conf.peak_memory_bytes / 2**30:.1f} of {conf.capacity_bytes / 2**30:.1f} GiB per GPU; {gpus} GPUs "
            f"(data parallelism: the GPUs left, {dp})",
            f"# for Megatron-LM {MEGATRON_COMMIT[:12]} (megatron-core {MEGATRON_CORE}); add your data, tokenizer, "
            "optimizer and checkpoint arguments", *header, *notes.comments()]
    nodes = max(1, gpus // gpus_per_node)
    launch = [f"export CUDA_DEVICE_MAX_CONNECTIONS={connections(args)}",
              f"torchrun --nnodes {nodes} --nproc-per-node {min(gpus, gpus_per_node)} {SCRIPT} \\"]
    return "\n".join(head + launch) + "\n" + " \\\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    for name in ("num-layers", "seq-length", "micro-batch-size", "global-batch-size", "tensor-model-parallel-size",
                 "pipeline-model-parallel-size", "context-parallel-size", "expert-model-parallel-size",
                 "expert-tensor-parallel-size", "recompute-num-layers", "num-experts", "moe-router-topk"):
        p.add_argument(f"--{name}", type=int)
    for name in ("cp-comm-type", "pipeline-model-parallel-layout", "recompute-granularity", "recompute-method",
                 "data-parallel-sharding-strategy", "moe-token-dispatcher-type", "ckpt-format"):
        p.add_argument(f"--{name}")
    p.add_argument("--recompute-modules", nargs="*")
    for name in ("sequence-parallel", "use-distributed-optimizer", "use-megatron-fsdp", "overlap-grad-reduce",
                 "overlap-param-gather", "overlap-moe-expert-parallel-comm", "fine-grained-activation-offloading"):
        p.add_argument(f"--{name}", action="store_true")
    return p


def argv_of(text: str) -> tuple[list[str], dict[str, str]]:
    """The arguments after ``pretrain_gpt.py`` and the exported environment of
    ``megatron_text``'s output (or a bare argument list)."""
    env: dict[str, str] = {}
    kept = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.lstrip().startswith("#"):
            continue
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
            continue
        kept.append(line)
    argv = shlex.split(" ".join(kept))
    if SCRIPT in argv:
        argv = argv[argv.index(SCRIPT) + 1:]
    return argv, env


def _read_recompute(a: argparse.Namespace, layout: Layout | None) -> object:
    """Megatron's recomputation in the round trip's words (``planned_recompute``'s): its
    selective granularity recomputes ``--recompute-modules``, by default ``core_attn``."""
    if a.recompute_granularity == "selective":
        return modules_word(a.recompute_modules) if a.recompute_modules else "selective"
    if a.recompute_granularity != "full":
        return "none"
    if layout is None:
        return (a.recompute_num_layers,) if a.recompute_method == "block" else "full"
    per = a.recompute_num_layers if a.recompute_method == "block" else max(layout.layers)
    return tuple(min(per, n) for n in layout.layers)


def read_megatron(text: str, gpus: int) -> dict:
    """What Megatron makes of ``megatron_text``'s output (or of a bare argument list), in
    the round trip's words: sizes, batch, layout, schedule, recomputation, ZeRO, dispatcher."""
    argv, _ = argv_of(text)
    a, _rest = _parser().parse_known_args(argv)
    pp, tp, cp = a.pipeline_model_parallel_size, a.tensor_model_parallel_size, a.context_parallel_size
    layout = Layout.parse(a.pipeline_model_parallel_layout) if a.pipeline_model_parallel_layout else None
    chunks = layout.num_stages // pp if layout else 1
    zero = 1 if a.use_distributed_optimizer else 0
    if a.use_megatron_fsdp:
        zero = 3 if a.data_parallel_sharding_strategy == "optim_grads_params" else 2
    dispatcher = (a.moe_token_dispatcher_type or "allgather") if a.num_experts else ""  # Megatron's default
    return {"pp": pp, "tp": tp, "cp": cp, "dp": gpus // (pp * tp * cp), "ep": a.expert_model_parallel_size or 1,
            "etp": a.expert_tensor_parallel_size or 1, "microbatch_size": a.micro_batch_size,
            "global_batch": a.global_batch_size, "seq_len": a.seq_length, "layout": layout.megatron() if layout else "",
            "schedule": "interleaved" if chunks > 1 else "1f1b", "chunks": chunks,
            "recompute": _read_recompute(a, layout), "zero": zero, "sequence_parallel": a.sequence_parallel,
            "dispatcher": dispatcher, "activation_offloading": a.fine_grained_activation_offloading}


def dispatcher_of(conf: Configuration, model: TransformerModel | None) -> str:
    """The token dispatcher the plan prices: DeepEP's (``flex``) for an FP8 dispatch, else
    the all-to-all; ``""`` for a dense model."""
    if model is None or not model.moe:
        return ""
    return "flex" if conf.shape.dispatch_precision is Precision.FP8 else "alltoall"


def megatron_view(conf: Configuration, gpus: int, model: TransformerModel) -> dict:
    """What Megatron runs of ``conf`` on ``model`` (``read_megatron``'s words): the plan, with
    per-stage recomputation as Megatron's uniform count and module lists beside layer
    recomputation as the modules."""
    s = conf.shape
    layout = Layout.parse(conf.layout) if conf.layout and s.stages > 1 else None
    layers = layout.layers if layout else ()
    recompute = planned_recompute(conf, layers, model)
    if s.recompute_modules:
        recompute = modules_word(dropped(conf, model))
    elif s.recompute_layers is not None and layers:
        top = max(s.recompute_layers)
        recompute = tuple(min(top, n) for n in layers) if top else "none"
    chunks = layout.num_stages // s.stages if layout else 1
    return {**sizes_of(conf, gpus), "layout": layout.megatron() if layout else "",
            "schedule": "interleaved" if chunks > 1 else "1f1b", "chunks": chunks, "recompute": recompute,
            "zero": s.zero, "sequence_parallel": bool(s.sequence_parallel), "dispatcher": dispatcher_of(conf, model),
            "activation_offloading": bool(s.offload_activations)}
