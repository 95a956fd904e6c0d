"""``pipetab plan``: rank (PP, TP, DP) splits, microbatch sizes, recomputation and schedules
for a model on a cluster by simulated step time (``pipetab.plan``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from . import common
from .common import UsageError, emit_json

if TYPE_CHECKING:
    from pathlib import Path

from .hardware_args import (
    add_batch_args,
    add_cp_switches,
    add_expert_switches,
    add_parallel_switches,
    add_profile_arg,
    load_profile_arg,
)


def _int_list(name: str):
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be integers separated by commas, got {text!r}") from None
        if any(v < 1 for v in values):
            raise argparse.ArgumentTypeError(f"{name} must be integers >= 1, got {text!r}")
        return values

    parse.__name__ = name
    return parse


def _word_list(name: str, allowed: tuple[str, ...] | None = None):
    def parse(text: str) -> tuple[str, ...]:
        values = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [v for v in values if allowed is not None and v not in allowed]
        if not values or bad:
            raise argparse.ArgumentTypeError(
                f"{name} must be a comma-separated list of {', '.join(allowed or ('names',))}, got {text!r}")
        return values

    parse.__name__ = name
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cpsat time must be a number of seconds, got {text!r}") from None
    if not (value > 0 and value < 1e6):
        raise argparse.ArgumentTypeError(f"cpsat time must be between 0 and 1e6 seconds, got {text!r}")
    return value


def register(sub) -> None:
    from pipetab.hardware.context import Recompute

    p = sub.add_parser("plan", help="the best schedule, parallel split, microbatch size and recomputation "
                                    "for a model on a cluster, ranked by simulated step time")
    p.add_argument("--model", required=True, help="model preset or TOML file (see 'pipetab models')")
    p.add_argument("--nodes", type=common.positive_int("nodes"), required=True, help="nodes of the cluster")
    p.add_argument("--gpus-per-node", type=common.positive_int("gpus per node"), required=True,
                   help="GPUs per node (tensor parallelism stays inside a node)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", default=None, help="GPU: H100 (default) or A100")
    where.add_argument("--system", default=None,
                       help="system preset or TOML file giving the GPU and the intra-/inter-node links")
    add_batch_args(p, required=True)
    p.add_argument("--microbatch-sizes", type=_int_list("microbatch sizes"), default=(),
                   help="sequences per microbatch to try, e.g. 1,2,4 (default: powers of two up to 32768 tokens)")
    p.add_argument("--recompute", type=_word_list("recompute", tuple(Recompute)), default=(),
                   help="recomputation options to try, e.g. none,full (default: all that apply)")
    p.add_argument("--schedules", type=_word_list("schedules"), default=(),
                   help="registry schedules to try, e.g. 1f1b,zbv (default: all; see 'pipetab schedules')")
    add_parallel_switches(p)
    add_cp_switches(p)
    for dim, what in (("pp", "pipeline stages"), ("tp", "tensor-parallel GPUs"), ("cp", "context-parallel GPUs"),
                      ("dp", "data-parallel replicas")):
        p.add_argument(f"--{dim}", type=_int_list(dim), default=(),
                       help=f"{what} to consider, e.g. 8 or 4,8 (default: every value that splits the cluster"
                            + ("; CP only for sequences of 16384 tokens or more)" if dim == "cp" else ")"))
    p.add_argument("--ep", type=_int_list("ep"), default=(),
                   help="expert-parallel sizes to try for a MoE model, e.g. 8,16 (default: every divisor of "
                        "the expert count that divides a stage's GPUs)")
    p.add_argument("--etp", type=_int_list("etp"), default=(),
                   help="expert tensor-parallel sizes to try for a MoE model (default 1)")
    add_expert_switches(p)
    p.add_argument("--top", type=common.positive_int("top"), default=10,
                   help="configurations to show, ranked exactly (default 10)")
    p.add_argument("--cpsat-shapes", type=common.positive_int("cpsat shapes", minimum=0), default=None,
                   help="best shapes CP-SAT searches for a better linear schedule (default 2; 0: none)")
    p.add_argument("--cpsat-time", type=_seconds, default=None, help="seconds of CP-SAT per shape (default 3)")
    add_profile_arg(p)
    p.add_argument("--plot", metavar="FILE.png", help="Pareto plot: step time against peak memory per GPU")
    p.add_argument("--emit", choices=["megatron", "torchtitan"], default=None,
                   help="print the best configuration as Megatron-LM arguments or a torchtitan TOML section "
                        "instead of the table (Megatron: the best it can run)")
    p.add_argument("--emit-csv", metavar="FILE.csv", default=None,
                   help="with --emit torchtitan: write the schedule as the CSV that "
                        "pipeline_parallel_schedule_csv reads")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=run)


# options the profile fixes: refused with --profile
_PROFILED = (("microbatch_sizes", "--microbatch-sizes", ()), ("recompute", "--recompute", ()),
             ("ep", "--ep", ()), ("etp", "--etp", ()), ("dispatch_precision", "--dispatch", None),
             ("routing_imbalance", "--routing-imbalance", None), ("node_limit", "--node-limit", None),
             ("zero", "--zero", None), ("sequence_parallel", "--no-sequence-parallel", True),
             ("overlap", "--no-overlap", True), ("cpsat_shapes", "--cpsat-shapes", None),
             ("cpsat_time", "--cpsat-time", None), ("pp", "--pp", ()), ("tp", "--tp", ()), ("cp", "--cp", ()),
             ("dp", "--dp", ()), ("cp_comm", "--cp-comm", None), ("reshard_after_forward", "--no-reshard-after-forward",
                                                                 True))


def run(args) -> None:
    from pipetab.plan import plan, plan_question
    from pipetab.plan.space import GPUS

    if args.profile:
        for attr, flag, default in _PROFILED:
            if getattr(args, attr) != default:
                raise UsageError(f"{flag} does not apply with --profile (the profile fixes "
                                 "the split, microbatch size, recomputation and op times)")
    if args.cpsat_time is not None and args.cpsat_shapes == 0:
        raise UsageError("--cpsat-time does not apply with --cpsat-shapes 0")
    if args.gpu is not None and args.gpu.upper() not in GPUS:
        raise UsageError(f"--gpu must be one of {', '.join(GPUS)}, got {args.gpu!r} (for another GPU give "
                         "--system FILE.toml)")
    from pipetab.schedules.limits import MAX_OPS

    if args.global_batch > MAX_OPS:
        raise UsageError(f"--global-batch must be at most {MAX_OPS} sequences (a schedule holds "
                         f"at most {MAX_OPS} ops; see docs/limits.md), got {args.global_batch}")
    plot = common.check_plot_path(args.plot)
    if args.emit_csv is not None and args.emit != "torchtitan":
        raise UsageError("--emit-csv applies with --emit torchtitan only")
    if args.emit is not None and args.format == "json":
        raise UsageError("--emit prints a framework's configuration: it does not combine with --format json")
    emit_csv = common.output_path(args.emit_csv, "--emit-csv", (".csv",)) if args.emit_csv else None
    t0 = time.perf_counter()

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"plan [{time.perf_counter() - t0:5.1f} s] {message}", file=sys.stderr, flush=True)

    space = plan_question(
        args.model, args.nodes, args.gpus_per_node, args.global_batch, args.system or args.gpu or "H100",
        args.seq, microbatch_sizes=args.microbatch_sizes, recompute=args.recompute, schedules=args.schedules,
        zero=args.zero, sequence_parallel=args.sequence_parallel,
        overlap=args.overlap, top=args.top, cpsat_shapes=2 if args.cpsat_shapes is None else args.cpsat_shapes,
        cpsat_time_s=args.cpsat_time or 3.0, ep=args.ep, etp=args.etp,
        dispatch_precision=args.dispatch_precision or "bf16", routing_imbalance=args.routing_imbalance or 1.0,
        node_limit=args.node_limit, pp=args.pp, tp=args.tp, cp=args.cp, dp=args.dp,
        cp_comm=args.cp_comm or "p2p", reshard_after_forward=args.reshard_after_forward,
    )
    result = plan(space, progress=progress, profile=load_profile_arg(args))
    if plot:
        from pipetab.plan.plot import plot_plan

        common.save_plot(plot_plan, plot, result, rows=10)
    if args.emit is not None:
        print(emitted(result, space, args.emit, emit_csv), end="")
        return
    if args.format == "json":
        emit_json(result.as_dict())
        return
    print_plan(result)
    if args.plot:
        print(f"plot: {args.plot}")


def emitted(result, space, framework: str, csv_path: Path | None) -> str:
    """The best configuration (for Megatron, the best it runs) in ``framework``'s form;
    the schedule written to ``csv_path`` for torchtitan."""
    from pipetab.plan import emit
    from pipetab.schedules import registry

    fits = [c for c in result.evaluated if c.fits] or list(result.configurations)
    if framework == "megatron":
        runnable = [c for c in fits if c.schedule in emit.MEGATRON_SCHEDULES]
        if not runnable:
            raise UsageError("--emit megatron: no configuration found runs a schedule Megatron-LM runs "
                             f"({', '.join(emit.MEGATRON_SCHEDULES)}); give --schedules 1f1b,interleaved")
        conf = runnable[0]
        note = "" if conf is fits[0] else f"# the best configuration, {fits[0].label}, is not a Megatron schedule\n"
        return note + emit.megatron_text(conf, space.model, space.num_gpus)
    conf = fits[0]
    if csv_path:
        sched = registry.generate(conf.schedule, conf.shape.pp, conf.shape.microbatches, **dict(conf.options))
        common.write_output(csv_path, "--emit-csv", lambda p: p.write_text(emit.torch_csv(conf, sched)))
    return emit.torchtitan_toml(conf, space.num_gpus, str(csv_path) if csv_path else "")


def _rows(result) -> tuple[tuple, list[tuple]]:
    """The table's header and rows; the CP, EP and ZeRO columns only when one of the shown
    configurations uses them."""
    confs = result.configurations
    moe = any(c.ep_links for c in confs)
    cp = any(c.shape.cp > 1 for c in confs)
    zero = any(c.shape.zero == 3 for c in confs)
    uneven = any(c.shape.layout is not None for c in confs)
    head = ("#", "schedule", "PP", "TP", "CP" if cp else "", "DP", "EP" if moe else "", "ZeRO" if zero else "",
            "layers" if uneven else "", "mb", "micro", "recompute", "step (s)", "tokens/s", "MFU", "peak GiB",
            "free GiB", "fits")
    rows = []
    for i, c in enumerate(confs, 1):
        s = c.shape
        ep = (f"{s.ep}" + (f"x{s.etp}" if s.etp > 1 else "")) if moe else ""
        layers = ("uneven" if s.layout is not None else "even") if uneven else ""
        rows.append((str(i), c.label, str(s.pp), str(s.tp), str(s.cp) if cp else "", str(s.dp), ep,
                     str(s.zero) if zero else "", layers, str(s.microbatch_size), str(s.microbatches),
                     c.recompute_label,
                     f"{c.step_time_s:#.4g}".rstrip("."), f"{c.tokens_per_s:,.0f}", f"{100 * c.mfu:.1f}%",
                     f"{c.peak_memory_bytes / 2**30:.1f}", f"{c.headroom_bytes / 2**30:.1f}",
                     "yes" if c.fits else "NO"))
    return head, rows


def _print_best(result) -> None:
    """#1's all-to-all (MoE), its layers per stage and Megatron layout."""
    best = result.configurations[0]
    if best.ep_links:
        hidden = f", {100 * best.a2a_hidden_s / best.a2a_s:.0f} % of it hidden by overlapped pairs" \
            if best.a2a_s else ""
        print(f"#1 all-to-all: {best.a2a_s:.3g} s per step on the busiest GPU over {best.ep_links}{hidden}")
    if best.layout:
        from pipetab.plan.result import runs

        print(f"#1 layers per stage: {runs(best.layers_per_stage)} (pipeline_model_parallel_layout {best.layout!r})")
    if best.sample_microbatches:
        print(f"#1 step time and memory extrapolated from runs of {best.sample_microbatches} microbatches "
              "(periodic schedule, exact)")


def print_plan(result) -> None:
    """The ranked configurations as an aligned table, then what the search did."""
    q = result.question
    print(f"plan: {q['model']} on {q['gpus']} GPUs ({q['gpus_per_node']} per node, {q['system']}), "
          f"global batch {q['global_batch']} x {q['seq_len']} tokens")
    head, rows = _rows(result)
    if not rows:
        print("no configuration: no split of the GPUs, microbatch size and schedule fits the question")
    else:
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        left = (1, head.index("recompute"))
        for r in [head, *rows]:
            cells = [x.ljust(w) if j in left else x.rjust(w) for j, (x, w) in enumerate(zip(r, widths)) if w]
            print("  ".join(cells))
        if not result.configurations[0].fits:
            print("none of these fits the GPU memory: the closest are shown")
        _print_best(result)
    refused = result.candidates - result.pruned_memory - result.pruned_time - result.simulated
    outside = f", {refused} outside their schedule's regime (microbatches, stages)" if refused else ""
    print(f"searched {result.candidates} candidates: {result.pruned_memory} cannot fit the memory, "
          f"{result.pruned_time} cannot beat the configurations shown, {result.simulated} simulated"
          f"{outside}; {result.runtime_s:.1f} s")
    for note in result.notes:
        print(f"note: {note}")
    for note in result.cpsat_notes:
        print(f"CP-SAT {note}")
