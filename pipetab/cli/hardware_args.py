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

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipetab.hardware.context import Context, recompute_of
from pipetab.hardware.decisions import CLUSTER_DECISIONS, DECISION, MAX_GPUS, Decision
from pipetab.schedules.limits import MAX_DEVICES, check_size
from pipetab.schedules.placements import traits

from . import common
from .common import UsageError

if TYPE_CHECKING:
    from pipetab.hardware.model import TransformerModel
    from pipetab.hardware.profile import Profile
    from pipetab.hardware.system import System

# the model of a hardware run without --model: GPT-3 2.7B (Brown et al. 2020) with one
# sequence per microbatch, which fits an 80 GB GPU on every preset system from two stages
# with 1F1B-like schedules (paper_gpt, the paper's model, needs TiB per GPU: the paper does
# not cap memory)
DEFAULT_MODEL = "gpt3_2p7b"
DEFAULT_MICROBATCH_SIZE = 1  # with DEFAULT_MODEL only, when neither --microbatch-size nor --global-batch is given

MAX_MEMORY_BYTES = 2.0**60  # --memory-cap: 1 EiB
MAX_TICKS = 2**36  # a CP-SAT step in integer ticks: CP-SAT's domains stay within int64 over 10^6 ops

# (attribute, flag, value when not given): the real-cluster options, in the order a refusal names them
CLUSTER_OPTIONS = tuple((d.dest, d.flag, True if d.kind is bool else None) for d in CLUSTER_DECISIONS)


def add_hardware_args(p) -> None:
    """--system, --model, --recompute, --contention, then ``add_context_args``."""
    p.add_argument("--system", help="system preset or TOML file; adds the simulation level")
    p.add_argument("--model", default=None,
                   help=f"model preset or TOML file (default: {DEFAULT_MODEL} with one sequence per microbatch)")
    add_decision(p, DECISION["recompute"])
    p.add_argument("--contention", action="store_true",
                   help="links carry one transfer at a time (off by default, as in the paper)")
    add_context_args(p)


def add_profile_arg(p) -> None:
    """--profile FILE.toml (measured op times)."""
    p.add_argument("--profile", metavar="FILE.toml", default=None,
                   help="measured op times per stage (T_F, T_B, T_W, message, memory; docs/cluster.md) "
                        "instead of the roofline model of --system")


def add_context_args(p) -> None:
    """--profile and the real-cluster options (module docstring), one per ``CLUSTER_DECISIONS``."""
    add_profile_arg(p)
    g = p.add_argument_group("real cluster (with --system; names and defaults as in 'pipetab plan')")
    for d in CLUSTER_DECISIONS:
        add_decision(g, d)


def add_decision(p, d: Decision, plan: bool = False, required: bool = False) -> None:
    """The option of decision ``d`` for a command that takes one value of it: a switch
    (``--no-...``) for a boolean, a choice, an integer in its range, a number, a layout or
    per-stage counts; ``plan``: with ``plan``'s help where it has its own, ``required``
    (``plan``'s global batch) without the default's words."""
    flag = d.flag
    if d.kind is bool:
        p.add_argument(flag, dest=d.dest, action="store_false", help=d.help)
        return
    kw: dict = {"dest": d.dest, "default": None, "help": d.plan_help if plan and d.plan_help else d.help}
    if d.choices:
        kw.update(choices=[c if isinstance(c, int) else str(c) for c in d.choices],
                  type=int if d.kind is int else None)
    elif d.kind is int:
        kw["type"] = common.positive_int(d.label, maximum=d.maximum)
    else:
        kw["type"] = {float: _number_from(d), "layout": _layout, "counts": _counts, "modules": _modules}[d.kind]
    if d.name == "global_batch":
        kw.update(required=required, help=d.help + ("" if required else " (default: the model's)"))
    p.add_argument(flag, **{k: v for k, v in kw.items() if v is not None or k == "default"})


def _number_from(d: Decision):
    def parse(text: str) -> float:
        import argparse

        try:
            value = float(text)
        except ValueError:
            value = float("nan")  # refused by the declaration's check below, with its message
        try:
            d.check(value)
        except ValueError as exc:  # the declaration's own message, with the text as given
            raise argparse.ArgumentTypeError(str(exc).rsplit(", got ", 1)[0] + f", got {text!r}") from None
        return value

    parse.__name__ = d.name
    return parse


def _layout(text: str):
    import argparse

    from pipetab.hardware.layout import Layout

    try:
        return Layout.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _modules(text: str) -> tuple[str, ...]:
    import argparse

    from pipetab.hardware.context import recompute_modules_of

    try:
        return recompute_modules_of(text)
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

    system: System | None = None
    model: TransformerModel | None = None
    context: Context | None = None
    contention: bool = False
    profile: Profile | None = None
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
        system, _, ctx = self.priced
        extra = "" if ctx.tp == ctx.dp == 1 and ctx.ep == 1 else f", {ctx.parallel_label}"
        return f"on {system.name}{extra}"

    @property
    def priced(self) -> tuple[System, TransformerModel, Context]:
        """The system, model and context of costs from the roofline model."""
        if self.system is None or self.model is None or self.context is None:
            raise ValueError("costs from a profile have no system, model or context")
        return self.system, self.model, self.context

    def as_dict(self) -> dict:
        """The inputs of the costs as plain data (the ``context`` of ``evaluate --format json``)."""
        if self.profile is not None:
            p = self.profile
            return {"profile": self.profile_path, "microbatch_size": p.microbatch_size, "tp": p.tp, "dp": p.dp,
                    "contention": self.contention}
        system, model, ctx = self.priced
        values = ctx.as_dict()
        return {"system": system.name, "model": model.name, "recompute": str(ctx.recompute),
                "contention": self.contention, **{k: values[k] for k in _SOURCE_KEYS}}


# the context's fields in the ``context`` of ``evaluate --format json``: every real-cluster decision
_SOURCE_KEYS = tuple(d.name for d in CLUSTER_DECISIONS)


def given_cluster_options(args) -> list[str]:
    """The flags of the real-cluster options given on the command line."""
    return [flag for attr, flag, unset in CLUSTER_OPTIONS if getattr(args, attr, unset) != unset]


def cost_source(args, stages: int, microbatches: int) -> CostSource | None:
    """The costs named on the command line for a schedule on ``stages`` devices with
    ``microbatches`` microbatches (None: no hardware); every option that does not apply is
    refused, and the system, model or profile that cannot run the request, before anything
    is generated. Without ``--model`` a hardware run takes ``DEFAULT_MODEL`` (and sets
    ``args.model`` to it, so every later step names the same model)."""
    check_sizes(args, stages, microbatches)
    recompute = getattr(args, "recompute", None)
    recompute = None if recompute in (None, "none") else recompute
    contention = bool(getattr(args, "contention", False))
    if args.profile is not None:
        profile = load_profile_arg(args)
        recorded = {"--system": profile.gpu_label, "--model": profile.model and repr(profile.model),
                    "--seq": profile.seq_len and f"{profile.seq_len} tokens",
                    "--recompute": profile.recompute and repr(profile.recompute)}
        values = {"--seq": getattr(args, "seq", None)}
        for flag, given in (("--system", args.system), ("--model", args.model), ("--recompute", recompute),
                            *((f, True) for f in given_cluster_options(args))):
            if given:
                shown = given if isinstance(given, str) else values.get(flag)
                what = f" (it records {recorded[flag]})" if recorded.get(flag) else ""
                raise UsageError(f"{flag}{'' if shown is None else f' {shown}'} does not apply with --profile: the "
                                 "profile's measured times fix the system, model, parallel split, microbatch size "
                                 f"and recomputation{what}")
        return _profile_source(args.profile, profile, stages, contention)
    if not args.system:
        for flag, given in (("--model", args.model), ("--recompute", recompute), ("--contention", contention),
                            *((f, True) for f in given_cluster_options(args))):
            if given:
                raise UsageError(f"{flag} needs --system or, for measured times, --profile "
                                 "(it sets the simulation's costs)")
        return None
    return _system_source(args, stages, microbatches, recompute or "none", contention)


def check_sizes(args, stages: int, microbatches: int) -> None:
    """Size and number guards of every command that prices a schedule, before any work:
    the pipeline's devices and ops (``schedules.limits``), the GPUs of the run, a finite
    ``--memory-cap`` and ``--tick``."""
    chunks = getattr(args, "chunks", None) or 2
    waves = getattr(args, "waves", None) or 1
    placement = getattr(args, "placement", None)
    family = traits(placement) if placement else None
    per_microbatch = stages * (family.stages_per_device(waves=waves, chunks=chunks) if family else 1)
    devices = getattr(args, "devices", None) or stages
    option, sizes = family.size_option if family else None, {"chunks": chunks, "waves": waves}
    if option is not None and sizes[option] > MAX_DEVICES:
        raise UsageError(f"--{option} must be at most {MAX_DEVICES}, got {sizes[option]}")
    kinds = 3 if getattr(args, "split_backward", False) else 2
    try:
        check_size(max(stages, devices), microbatches * per_microbatch * kinds,
                   f"S={stages}, B={microbatches}" + (f" with {per_microbatch // stages} stages per device"
                                                      if per_microbatch > stages else ""))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    tp, dp = getattr(args, "tp", None) or 1, getattr(args, "dp", None) or 1
    if stages * tp * dp > MAX_GPUS:
        raise UsageError(f"stages x tp x dp = {stages} x {tp} x {dp} GPUs is more than the {MAX_GPUS:,} "
                         "pipetab plans for")
    cap = getattr(args, "memory_cap", None)
    if cap is not None and not (math.isfinite(cap) and cap <= MAX_MEMORY_BYTES):
        raise UsageError(f"--memory-cap must be a finite number of bytes at most {MAX_MEMORY_BYTES:.3g} "
                         f"(1 EiB), got {cap:g}")
    tick = getattr(args, "tick", None)
    if tick is not None and not (math.isfinite(tick) and tick >= 1e-12):
        raise UsageError(f"--tick must be a finite number of seconds >= 1e-12 (a picosecond), got {tick:g}")


def check_ticks(schedule, costs, tick_s: float | None, ticks_per_op: int, flag: str = "--tick") -> None:
    """``schedule``'s step on ``costs`` in ticks of ``tick_s`` (default: 1/``ticks_per_op``
    of the shortest op) must stay within ``MAX_TICKS``: ``UsageError`` otherwise (a tick far
    too small, or op times spanning too many orders of magnitude)."""
    if costs.unit != "s":
        return
    tick = tick_s or costs.default_tick(ticks_per_op)
    work = sum(costs.duration(op) for order in schedule.orders for op in order) + sum(costs.optimizer_time)
    shortest = min(costs.op_time.values())
    if work / tick > MAX_TICKS:
        given = f"{flag} {tick:g} s" if tick_s else f"the default tick ({tick:.3g} s, 1/{ticks_per_op} of the " \
                                                      f"shortest op, {shortest:.3g} s)"
        raise UsageError(f"{given} counts the step's {work:.3g} s of work in {work / tick:.3g} ticks, more than "
                         f"the {MAX_TICKS:.3g} CP-SAT's integers hold; give a coarser --tick (or op times of a "
                         "narrower range)")


def _profile_source(path: str, profile, stages: int, contention: bool) -> CostSource:
    if profile.num_stages is not None and profile.num_stages != stages:
        raise UsageError(f"--profile {path} describes {profile.num_stages} pipeline devices but --stages is "
                         f"{stages}: profile the same number of stages or give 'stages' only in [default]")
    check_profile_possible(profile, stages)
    return CostSource(contention=contention, profile=profile, profile_path=path)


def check_profile_possible(profile, stages: int, model=None, peak_flops: float | None = None, where: str = "") -> None:
    """``hardware.profile.check_possible`` on the model and GPU peak given, else the ones the
    profile records (skipped when neither is known)."""
    from pipetab.hardware.loaders import load_model
    from pipetab.hardware.profile import check_possible

    if model is None and profile.model is not None:
        try:
            model = load_model(profile.model)
        except ValueError:
            return  # a model file elsewhere: its FLOPs are not known here
        if profile.seq_len is not None:
            from dataclasses import replace

            model = replace(model, seq_len=profile.seq_len)
    peak = peak_flops or profile.peak_flops
    if model is None or peak is None:
        return
    check_possible(profile, model, peak, stages, where)


def context_of(args, recompute: str = "none") -> Context:
    """The run's ``Context`` from the real-cluster options (not yet resolved for a schedule)."""
    given = {d.name: getattr(args, d.dest, None) for d in CLUSTER_DECISIONS}
    degrees = {"tp": given["tp"] or 1, "dp": given["dp"] or 1, "cp": given["cp"] or 1, "zero": given["zero"]}
    for d in CLUSTER_DECISIONS:
        value = given[d.name]
        given_here = value is False if d.kind is bool else value is not None  # a switch: turned off
        if d.needs is not None and given_here and not d.needs.holds(degrees):
            raise UsageError(f"{d.flag} applies with {d.needs.text} only (it shapes {d.needs.shapes} parallelism)")
    if given["sequence_parallel"] is not False:
        del given["sequence_parallel"]  # derived: on with tp > 1
    try:
        return Context(**{k: v for k, v in given.items() if v is not None}, recompute=recompute_of(recompute))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_recompute(recompute: str, model, flag: str = "--recompute") -> None:
    """Selective recomputation drops the stored attention scores and nothing else: on a
    model with fused (flash) attention, which stores none, it changes nothing -- refused."""
    if str(recompute) == "selective" and model.attention == "flash":
        raise UsageError(f"{flag} selective changes nothing on model {model.name!r}: its fused (flash) attention "
                         "stores no attention scores, the only activations selective recomputation drops; "
                         "use none or full")


def _system_source(args, stages: int, microbatches: int, recompute: str, contention: bool) -> CostSource:
    from pipetab.hardware.loaders import load_model, load_system
    from pipetab.solver.pricing import check_hardware

    if args.model is None:  # the default model, as every later step (labels, partitions) names it
        args.model = DEFAULT_MODEL
        if args.microbatch_size is None and args.global_batch is None:
            args.microbatch_size = DEFAULT_MICROBATCH_SIZE
    ctx = context_of(args, recompute)
    b, gb = args.microbatch_size, args.global_batch
    if b is not None and gb is not None and gb != ctx.dp * microbatches * b:
        raise UsageError(f"--global-batch {gb} must be dp x microbatches x --microbatch-size = "
                         f"{ctx.dp} x {microbatches} x {b} = {ctx.dp * microbatches * b} (or give one of them)")
    model = load_model(args.model)
    check_recompute(recompute, model)
    ctx.check(ctx.apply(model))
    system = load_system(args.system)
    if ctx.offload_activations and system.host_link is None:
        raise UsageError(f"--offload-activations needs a system with a host link (a [host_link] table: the GPU's "
                         f"PCIe or NVLink-C2C to host memory); {system.name} has none")
    if str(ctx.gemm_precision) == "fp8" and not (system.device.kernels and system.device.fp8_peak_flops):
        raise UsageError(f"--gemm-precision fp8 needs a system priced by its kernels with an fp8 peak "
                         f"(sm_count and fp8_peak_flops); {system.name} has none")
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
    """``schedule``'s costs from the command line's options (None without hardware),
    checked to fit CP-SAT's integer ticks (``check_ticks``)."""
    from pipetab.solver.costs import SEARCH_TICKS_PER_OP

    source = cost_source(args, schedule.num_devices, schedule.num_microbatches)
    if source is None:
        return None
    costs = source.costs(schedule)
    check_ticks(schedule, costs, getattr(args, "tick", None), SEARCH_TICKS_PER_OP)
    check_persistent(args, costs)
    return costs


def check_persistent(args, costs) -> None:
    """A search or bound whose weights, gradients and optimizer state alone exceed a
    device's memory has no schedule: answered at once with what to change. With the
    partition free, the devices' average is what every split must hold at least."""
    caps = [getattr(args, "memory_cap", None) or c for c in costs.capacity]
    persistent = list(costs.persistent)
    if not persistent or any(c is None for c in caps):
        return
    partition = getattr(args, "partition", None)
    free = partition is not None and getattr(partition, "mode", "even") == "free"
    if free:
        need, where = sum(persistent) / len(persistent), "on average over the devices (any layer split)"
        over = need > min(caps)
    else:
        worst = max(range(len(persistent)), key=lambda d: persistent[d] - caps[d])
        need, where = persistent[worst], f"on device {worst}"
        over = need > caps[worst]
    if over:
        raise UsageError(f"no schedule fits: weights, gradients and optimizer state alone need {need / 2**30:.4g} GiB "
                         f"{where}, more than the {min(caps) / 2**30:.4g} GiB of device memory; use more stages, "
                         "--tp, --dp with --zero, a smaller --model or a larger --memory-cap")


def costs_label(args) -> str:
    """Where the costs come from, for titles: the system (with the context) or the profile."""
    if args.profile is not None:
        return f"profile {args.profile}"
    shown = ("tp", "dp", "microbatch_size")  # the sizes a title names
    context = "".join(f" {flag} {getattr(args, attr)}" for attr, flag, _ in CLUSTER_OPTIONS
                      if attr in shown and getattr(args, attr, None) is not None)
    return f"{args.system}{context}"
