"""Where a command's costs come from: a system and model (the roofline), their cluster
context (tensor and data parallelism, ZeRO, microbatch size, global batch, sequence) or a
profile of measured op times — one definition for evaluate, view, search and bound.

``add_hardware_args(p)`` adds ``--system --model --recompute --contention`` and the context;
``add_context_args(p)`` the context alone (``--tp --dp --zero --no-sequence-parallel
--no-overlap --microbatch-size --global-batch --seq --profile``). ``check_context(args, S, B)``
refuses what does not apply, before any schedule is generated; ``costs_of(args, schedule)``
returns the schedule's ``Costs`` (None without ``--system`` or ``--profile``). The defaults
are ``plan``'s: sequence parallelism with ``--tp`` > 1, ZeRO-1 with ``--dp`` > 1, the
data-parallel reduction overlapped with the last backward.
"""

from __future__ import annotations

from . import common
from .common import UsageError

CONTEXT = ("tp", "dp", "zero", "no_sequence_parallel", "no_overlap", "microbatch_size", "global_batch", "seq")


def add_hardware_args(p) -> None:
    """--system, --model, --recompute, --contention and the context options."""
    p.add_argument("--system", help="system preset or TOML file; adds the simulation level")
    p.add_argument("--model", default=None, help="model preset or TOML file (default: paper_gpt)")
    p.add_argument("--recompute", choices=["none", "selective", "full"], default=None,
                   help="activation recomputation (with --system; default none)")
    p.add_argument("--contention", action="store_true",
                   help="links carry one transfer at a time (off by default, as in the paper)")
    add_context_args(p)


def add_context_args(p) -> None:
    """The cluster context of a schedule device, and ``--profile``."""
    g = p.add_argument_group("cluster context (with --system; defaults as 'pipetab plan')")
    g.add_argument("--tp", type=common.positive_int("tp"), default=None,
                   help="tensor-parallel GPUs per pipeline device (default 1)")
    g.add_argument("--dp", type=common.positive_int("dp"), default=None,
                   help="data-parallel replicas of the pipeline (default 1)")
    g.add_argument("--zero", type=int, choices=[0, 1, 2], default=None,
                   help="ZeRO stage with --dp > 1: 0 none, 1 optimizer state (default), 2 and gradients")
    g.add_argument("--no-sequence-parallel", action="store_true",
                   help="with --tp > 1: tensor parallelism without sequence parallelism")
    g.add_argument("--no-overlap", action="store_true",
                   help="with --dp > 1: do not overlap the gradient reduction with the last backward")
    g.add_argument("--microbatch-size", type=common.positive_int("microbatch-size"), default=None,
                   help="sequences per microbatch (default: the model's global batch / (dp x B))")
    g.add_argument("--global-batch", type=common.positive_int("global-batch"), default=None,
                   help="sequences per training step (default: the model's)")
    g.add_argument("--seq", type=common.positive_int("seq"), default=None,
                   help="tokens per sequence (default: the model's)")
    g.add_argument("--profile", metavar="FILE.toml", default=None,
                   help="measured op times per stage (T_F, T_B, T_W, message, memory; see docs/cluster.md) "
                        "instead of --system's roofline")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _given(args, name: str) -> bool:
    value = getattr(args, name, None)
    return value not in (None, False)


def check_context(args, num_devices: int, num_microbatches: int) -> None:
    """One line for every hardware or context option that does not apply to the others
    given; then the cheap checks of system, model and batch split."""
    profile, system = _given(args, "profile"), _given(args, "system")
    if profile:
        if system:
            raise UsageError("pipetab: error: --profile replaces --system's roofline costs; give one of them")
        for name in ("model", "recompute", "contention", *CONTEXT):
            if _given(args, name):
                raise UsageError(f"pipetab: error: {_flag(name)} does not apply with --profile (the profile "
                                 "fixes the op times, memory and parallel context)")
        return
    if not system:
        for name in ("model", "recompute", "contention", *CONTEXT):
            if _given(args, name):
                raise UsageError(f"pipetab: error: {_flag(name)} needs --system (it sets the simulation's costs)")
        return
    tp, dp = args.tp or 1, args.dp or 1
    for bad, why in (
        (args.zero is not None and dp == 1, "--zero applies with --dp >= 2 (it shards state among replicas)"),
        (args.no_overlap and dp == 1, "--no-overlap applies with --dp >= 2 (the gradient reduction of replicas)"),
        (args.no_sequence_parallel and tp == 1, "--no-sequence-parallel applies with --tp >= 2"),
        (args.microbatch_size is not None and args.global_batch is not None,
         "give --microbatch-size or --global-batch, not both (global batch = microbatch size x dp x B)"),
    ):
        if bad:
            raise UsageError(f"pipetab: error: {why}")
    from pipetab.solver.costs import check_hardware

    loaded, model = check_hardware(args.system, model_of(args), num_devices, num_microbatches, dp=dp,
                                   microbatch_size=args.microbatch_size)
    parallel_of(args).check(model)
    gpus = num_devices * tp * dp
    if loaded.num_devices is not None and gpus > loaded.num_devices:
        raise UsageError(f"pipetab: error: system {loaded.name!r} has {loaded.num_devices} GPUs; "
                         f"{num_devices} stages x --tp {tp} x --dp {dp} need {gpus}")


def parallel_of(args):
    """The ``hardware.Parallel`` the options name."""
    from pipetab.hardware.parallel import Parallel

    tp, dp = args.tp or 1, args.dp or 1
    return Parallel(tp=tp, dp=dp, sequence_parallel=tp > 1 and not args.no_sequence_parallel,
                    zero=(1 if dp > 1 else 0) if args.zero is None else args.zero,
                    overlap=not args.no_overlap)


def model_of(args):
    """The model (default paper_gpt) with ``--seq`` and ``--global-batch`` applied."""
    from dataclasses import replace

    from pipetab.hardware import load_model

    model = load_model(args.model or "paper_gpt")
    changes = {k: v for k, v in (("seq_len", args.seq), ("global_batch", args.global_batch)) if v is not None}
    return replace(model, **changes) if changes else model


def costs_of(args, schedule):
    """``schedule``'s costs: from ``--profile``, from ``--system`` in its context, or None."""
    if _given(args, "profile"):
        from pipetab.solver.costs import profile_costs

        return profile_costs(schedule, args.profile)
    if not _given(args, "system"):
        return None
    from pipetab.solver.costs import hardware_costs

    return hardware_costs(schedule, args.system, model_of(args), recompute=args.recompute or "none",
                          contention=bool(getattr(args, "contention", False)), parallel=parallel_of(args),
                          microbatch_size=args.microbatch_size)


def costs_label(args) -> str:
    """Where the costs come from, for titles: the system (and context) or the profile."""
    if _given(args, "profile"):
        return f"profile {args.profile}"
    context = "".join(f" {_flag(n)} {getattr(args, n)}" for n in ("tp", "dp", "microbatch_size")
                      if getattr(args, n) is not None)
    return f"{args.system}{context}"
