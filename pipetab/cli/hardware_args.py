"""The costs of the simulation level from the command line, for every command that has one.

Two sources, never both: ``--system`` (with ``--model``, ``--recompute``, ``--contention``
and the real-cluster options) costs each op by the roofline model; ``--profile FILE.toml``
takes measured op times (``hardware.profile``). The real-cluster options have the names and
defaults of ``pipetab plan``: ``--tp`` and ``--dp`` (each schedule device is a
tensor-parallel group of ``tp`` GPUs, the pipeline replicated ``dp`` ways),
``--no-sequence-parallel`` (with ``tp > 1``), ``--zero`` (with ``dp > 1``; default 1),
``--no-overlap`` (with ``dp > 1``), ``--microbatch-size``, ``--global-batch`` and ``--seq``;
``--cp`` and ``--cp-comm`` (context parallelism), ``--zero 3`` with
``--no-reshard-after-forward``, ``--layout`` (Megatron's layout string) and
``--recompute-layers`` (per stage).

``add_hardware_args(parser)`` adds them all (``evaluate``, ``view``); ``add_context_args``
adds all but ``--system``/``--model``/``--recompute``/``--contention`` (``search`` and
``bound`` define those themselves). ``cost_source(args, stages, microbatches)`` checks every
combination before anything is generated and returns a ``CostSource`` (None without
hardware) whose ``costs(schedule)`` are the simulation's costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipetab.hardware.context import Context

from . import common
from .common import UsageError

# (attribute, flag, value when not given): the real-cluster options
CLUSTER_OPTIONS = (
    ("tp", "--tp", None), ("dp", "--dp", None), ("sequence_parallel", "--no-sequence-parallel", True),
    ("zero", "--zero", None), ("overlap", "--no-overlap", True), ("microbatch_size", "--microbatch-size", None),
    ("global_batch", "--global-batch", None), ("seq", "--seq", None),
    ("ep", "--ep", None), ("etp", "--etp", None), ("dispatch_precision", "--dispatch", None),
    ("routing_imbalance", "--routing-imbalance", None), ("node_limit", "--node-limit", None),
    ("cp", "--cp", None), ("cp_comm", "--cp-comm", None), ("reshard_after_forward", "--no-reshard-after-forward", True),
    ("layout", "--layout", None), ("recompute_layers", "--recompute-layers", None),
)


def add_hardware_args(p) -> None:
    """--system, --model, --recompute, --contention, then ``add_context_args``."""
    p.add_argument("--system", help="system preset or TOML file; adds the simulation level")
    p.add_argument("--model", default=None, help="model preset or TOML file (default: paper_gpt)")
    p.add_argument("--recompute", choices=["none", "selective", "full"], default=None,
                   help="activation recomputation assumed for activation memory (default none)")
    p.add_argument("--contention", action="store_true",
                   help="links carry one transfer at a time (off by default, as in the paper)")
    add_context_args(p)


def add_profile_arg(p) -> None:
    """--profile FILE.toml (measured op times)."""
    p.add_argument("--profile", metavar="FILE.toml", default=None,
                   help="measured op times per stage (T_F, T_B, T_W, message, memory; docs/cluster.md) "
                        "instead of the roofline model of --system")


def add_context_args(p) -> None:
    """--profile and the real-cluster options (module docstring)."""
    add_profile_arg(p)
    g = p.add_argument_group("real cluster (with --system; names and defaults as in 'pipetab plan')")
    g.add_argument("--tp", type=common.positive_int("tp"), default=None,
                   help="tensor-parallel GPUs per schedule device (default 1)")
    g.add_argument("--dp", type=common.positive_int("dp"), default=None,
                   help="data-parallel replicas of the pipeline (default 1)")
    g.add_argument("--cp", type=common.positive_int("cp"), default=None,
                   help="context-parallel GPUs per tensor rank, splitting each sequence (default 1)")
    add_cp_switches(g)
    add_parallel_switches(g)
    add_layout_args(g)
    g.add_argument("--microbatch-size", type=common.positive_int("microbatch size"), default=None,
                   help="sequences per microbatch (default: global batch / (dp x microbatches))")
    add_batch_args(g, required=False)
    g.add_argument("--ep", type=common.positive_int("ep"), default=None,
                   help="expert parallelism (MoE models): GPUs of a stage sharing the experts (default 1)")
    g.add_argument("--etp", type=common.positive_int("etp"), default=None,
                   help="expert tensor parallelism (MoE models): GPUs splitting each expert (default 1)")
    add_expert_switches(g)


def _imbalance(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 1 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"routing imbalance must be a number >= 1, got {text!r}")
    return value


def add_expert_switches(p) -> None:
    """--dispatch, --routing-imbalance, --node-limit (shared with ``pipetab plan``)."""
    p.add_argument("--dispatch", dest="dispatch_precision", choices=["bf16", "fp8"], default=None,
                   help="element format of the expert-parallel dispatch (MoE models; default bf16)")
    p.add_argument("--routing-imbalance", type=_imbalance, default=None,
                   help="busiest EP rank's tokens / the mean, scaling expert compute and all-to-all (default 1.0)")
    p.add_argument("--node-limit", type=common.positive_int("node limit"), default=None,
                   help="route each token to experts on at most this many nodes (DeepSeek-V3: 4; default none)")


def add_cp_switches(p) -> None:
    """--cp-comm (shared with ``pipetab plan``)."""
    p.add_argument("--cp-comm", dest="cp_comm", choices=["p2p", "allgather"], default=None,
                   help="context-parallel K/V exchange: p2p ring overlapped with attention (default) or "
                        "allgather (Llama 3)")


def _layout(text: str):
    import argparse

    from pipetab.hardware.layout import Layout

    try:
        return Layout.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _counts(text: str) -> tuple[int, ...]:
    import argparse

    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = (-1,)
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"recompute layers must be integers >= 0 separated by commas (one per "
                                         f"stage), got {text!r}")
    return values


def add_layout_args(p) -> None:
    """--layout and --recompute-layers."""
    p.add_argument("--layout", type=_layout, default=None,
                   help="layers per stage as Megatron's pipeline_model_parallel_layout, e.g. 'E|(t*8|)*4L' "
                        "(E embedding, t layer, m MTP, L head and loss; default: even)")
    p.add_argument("--recompute-layers", type=_counts, default=None,
                   help="per stage, layers recomputed in full (Megatron's --recompute-num-layers), e.g. 4,2,0,0")


def add_parallel_switches(p) -> None:
    """--no-sequence-parallel, --zero, --no-overlap (shared with ``pipetab plan``)."""
    p.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false",
                   help="tensor parallelism without sequence parallelism (default: with, when TP > 1)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=None,
                   help="ZeRO stage with data parallelism: 0 none, 1 optimizer state (default), 2 and gradients, "
                        "3 and weights (FSDP)")
    p.add_argument("--no-reshard-after-forward", dest="reshard_after_forward", action="store_false",
                   help="with --zero 3: keep the gathered weights from F to B (FSDP's reshard_after_forward=False)")
    p.add_argument("--no-overlap", dest="overlap", action="store_false",
                   help="do not overlap the data-parallel gradient reduction with the last backward")


def add_batch_args(p, required: bool) -> None:
    """--global-batch and --seq (shared with ``pipetab plan``)."""
    p.add_argument("--global-batch", type=common.positive_int("global batch"), default=None, required=required,
                   help="sequences per training step" + ("" if required else " (default: the model's)"))
    p.add_argument("--seq", type=common.positive_int("sequence length"), default=None,
                   help="tokens per sequence (default: the model's)")


def load_profile_arg(args):
    """The ``Profile`` named by ``--profile`` (None without it)."""
    if getattr(args, "profile", None) is None:
        return None
    from pipetab.hardware.profile import load_profile

    return load_profile(args.profile)


@dataclass(frozen=True)
class CostSource:
    """Where the simulation's costs come from: a ``system`` and ``model`` (loaded) in the
    run's ``context`` (a ``hardware.Context``, resolved for the schedule's microbatches), or
    a ``profile``."""

    system: object = None
    model: object = None
    context: Context | None = None
    contention: bool = False
    profile: object = None
    profile_path: str | None = None

    def costs(self, schedule):
        """The simulation's costs of ``schedule``."""
        from pipetab.solver.pricing import hardware_costs, profile_costs

        if self.profile is not None:
            return profile_costs(schedule, self.profile, contention=self.contention)
        return hardware_costs(schedule, self.system, self.model, self.context, contention=self.contention)

    @property
    def label(self) -> str:
        """``on SYSTEM`` with the context, or ``profile NAME``."""
        if self.profile is not None:
            return f"profile {self.profile.name}"
        ctx = self.context
        extra = "" if ctx.tp == ctx.dp == 1 and ctx.ep == 1 else f", {ctx.parallel_label}"  # type: ignore[union-attr]
        return f"on {self.system.name}{extra}"  # type: ignore[attr-defined]

    def as_dict(self) -> dict:
        """The inputs of the costs as plain data (the ``context`` of ``evaluate --format json``)."""
        if self.profile is not None:
            p = self.profile
            return {"profile": self.profile_path, "microbatch_size": p.microbatch_size, "tp": p.tp, "dp": p.dp,  # type: ignore[attr-defined]
                    "contention": self.contention}
        ctx = self.context
        return {"system": self.system.name, "model": self.model.name, "recompute": str(ctx.recompute),  # type: ignore[attr-defined,union-attr]
                "contention": self.contention, "tp": ctx.tp, "dp": ctx.dp,  # type: ignore[union-attr]
                "sequence_parallel": ctx.sequence_parallel, "zero": ctx.zero, "overlap": ctx.overlap,  # type: ignore[union-attr]
                "microbatch_size": ctx.microbatch_size, "seq_len": ctx.seq_len, "global_batch": ctx.global_batch,  # type: ignore[union-attr]
                "ep": ctx.ep, "etp": ctx.etp, "dispatch_precision": str(ctx.dispatch_precision),  # type: ignore[union-attr]
                "routing_imbalance": ctx.routing_imbalance, "node_limit": ctx.node_limit,  # type: ignore[union-attr]
                **{k: v for k, v in ctx.as_dict().items()  # type: ignore[union-attr]
                   if k in ("cp", "cp_comm", "reshard_after_forward", "layout", "recompute_layers")}}


def given_cluster_options(args) -> list[str]:
    """The flags of the real-cluster options given on the command line."""
    return [flag for attr, flag, unset in CLUSTER_OPTIONS if getattr(args, attr, unset) != unset]


def cost_source(args, stages: int, microbatches: int) -> CostSource | None:
    """The costs named on the command line for a schedule on ``stages`` devices with
    ``microbatches`` microbatches (None: no hardware); every option that does not apply is
    refused, and the system, model or profile that cannot run the request, before anything
    is generated."""
    recompute = getattr(args, "recompute", None)
    recompute = None if recompute in (None, "none") else recompute
    contention = bool(getattr(args, "contention", False))
    if args.profile is not None:
        for flag, given in (("--system", args.system), ("--model", args.model), ("--recompute", recompute),
                            *((f, True) for f in given_cluster_options(args))):
            if given:
                raise UsageError(f"{flag} does not apply with --profile (the profile's measured times fix "
                                 "the system, model, parallel split, microbatch size and recomputation)")
        return _profile_source(args.profile, stages, contention)
    if not args.system:
        for flag, given in (("--model", args.model), ("--recompute", recompute), ("--contention", contention),
                            *((f, True) for f in given_cluster_options(args))):
            if given:
                raise UsageError(f"{flag} needs --system or, for measured times, --profile "
                                 "(it sets the simulation's costs)")
        return None
    return _system_source(args, stages, microbatches, recompute or "none", contention)


def _profile_source(path: str, stages: int, contention: bool) -> CostSource:
    from pipetab.hardware.profile import load_profile

    profile = load_profile(path)
    if profile.num_stages is not None and profile.num_stages != stages:
        raise UsageError(f"--profile {path} describes {profile.num_stages} pipeline devices but --stages is "
                         f"{stages}: profile the same number of stages or give 'stages' only in [default]")
    return CostSource(contention=contention, profile=profile, profile_path=path)


def context_of(args, recompute: str = "none") -> Context:
    """The run's ``Context`` from the real-cluster options (not yet resolved for a schedule)."""
    tp, dp, cp = args.tp or 1, args.dp or 1, getattr(args, "cp", None) or 1
    for flag, given, needs in (("--no-sequence-parallel", not args.sequence_parallel and tp == 1, "--tp > 1"),
                               ("--zero", args.zero is not None and dp * cp == 1, "--dp > 1 or --cp > 1"),
                               ("--no-overlap", not args.overlap and dp == 1, "--dp > 1"),
                               ("--cp-comm", getattr(args, "cp_comm", None) is not None and cp == 1, "--cp > 1"),
                               ("--no-reshard-after-forward", not getattr(args, "reshard_after_forward", True)
                                and args.zero != 3, "--zero 3")):
        if given:
            what = {"--tp > 1": "tensor", "--cp > 1": "context", "--zero 3": "sharded data"}.get(needs, "data")
            raise UsageError(f"{flag} applies with {needs} only (it shapes {what} parallelism)")
    experts = {k: getattr(args, k) for k in ("ep", "etp", "dispatch_precision", "routing_imbalance", "node_limit",
                                             "cp_comm", "layout", "recompute_layers")
               if getattr(args, k, None) is not None}
    try:
        return Context(tp=tp, dp=dp, cp=cp, sequence_parallel=None if args.sequence_parallel else False,
                       zero=args.zero, overlap=args.overlap, microbatch_size=args.microbatch_size,
                       global_batch=args.global_batch, seq_len=args.seq, recompute=recompute,
                       reshard_after_forward=getattr(args, "reshard_after_forward", True), **experts)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _system_source(args, stages: int, microbatches: int, recompute: str, contention: bool) -> CostSource:
    from pipetab.hardware.loaders import load_model, load_system
    from pipetab.solver.pricing import check_hardware

    ctx = context_of(args, recompute)
    b, gb = args.microbatch_size, args.global_batch
    if b is not None and gb is not None and gb != ctx.dp * microbatches * b:
        raise UsageError(f"--global-batch {gb} must be dp x microbatches x --microbatch-size = "
                         f"{ctx.dp} x {microbatches} x {b} = {ctx.dp * microbatches * b} (or give one of them)")
    model = load_model(args.model or "paper_gpt")
    ctx.check(ctx.apply(model))
    system = load_system(args.system)
    gpus = stages * ctx.tp * ctx.cp * ctx.dp
    if system.num_devices is not None and gpus > system.num_devices:
        cp = f" x {ctx.cp}" if ctx.cp > 1 else ""
        raise UsageError(f"--system {system.name} has {system.num_devices} GPUs; stages x tp{' x cp' if cp else ''} "
                         f"x dp = {stages} x {ctx.tp}{cp} x {ctx.dp} needs {gpus}")
    system, model, ctx = check_hardware(system, model, stages, microbatches, ctx)
    return CostSource(system, model, ctx, contention)


# ---- the form search and bound call (solve_cmd.py) -----------------------------------------


def check_context(args, num_devices: int, num_microbatches: int) -> None:
    """``cost_source``'s refusals, before anything is generated."""
    cost_source(args, num_devices, num_microbatches)


def costs_of(args, schedule):
    """``schedule``'s costs from the command line's options (None without hardware)."""
    source = cost_source(args, schedule.num_devices, schedule.num_microbatches)
    return None if source is None else source.costs(schedule)


def costs_label(args) -> str:
    """Where the costs come from, for titles: the system (with the context) or the profile."""
    if args.profile is not None:
        return f"profile {args.profile}"
    context = "".join(f" {flag} {getattr(args, attr)}" for attr, flag, _ in CLUSTER_OPTIONS[:2] + CLUSTER_OPTIONS[5:6]
                      if getattr(args, attr, None) is not None)
    return f"{args.system}{context}"
