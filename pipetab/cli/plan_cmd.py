"""``pipetab plan``: rank (PP, TP, DP) splits, microbatch sizes, recomputation and schedules
for a model on a cluster by simulated step time (``pipetab.plan``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from . import common
from .common import UsageError, emit_json

if TYPE_CHECKING:
    from pathlib import Path

from pipetab.hardware.decisions import DECISION, MAX_GPUS, MAX_MICROBATCH_SIZE, MAX_TP, PLAN_DECISIONS, Enumerate

from .hardware_args import add_decision, add_profile_arg, load_profile_arg


def _int_list(name: str):
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be integers separated by commas, got {text!r}") from None
        if any(v < 1 or v > MAX_MICROBATCH_SIZE for v in values):
            raise argparse.ArgumentTypeError(f"{name} must be integers >= 1 and <= {MAX_MICROBATCH_SIZE:,}, "
                                             f"got {text[:60]!r}")
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
        raise argparse.ArgumentTypeError(f"cpsat time must be more than 0 and less than 1e6 seconds, got {text!r}")
    return value


PLAN_TERMS = """\
what the output says:
  PPxTPxDP     pipeline stages x tensor-parallel GPUs per stage x data-parallel replicas
  b x m        sequences per microbatch x microbatches per replica in one step
  recompute    activations recomputed in the backward: none, selective (attention scores), full
  step (s)     simulated time of one training step, +- the band of the development set's error,
               each source left out of the fit (docs/fidelity.md); tokens/s: global batch x sequence / step
  # with ~     its step time differs from #1's by less than that band: indistinguishable
  MFU          model FLOPs utilisation: the model's FLOPs of the step (3 x forward, no
               recomputation, attention unmasked as Megatron counts it) / (step x GPUs x
               peak FLOP/s); never above 100 %
  peak GiB     the most memory a GPU holds during the step (weights, gradients, optimizer
               state, live activations); fits: peak within the GPU's usable memory
  candidates   every (shape, schedule) pair; each ends as one of:
    cannot fit the memory        its peak memory exceeds the GPU (by a lower bound, or simulated)
    cannot beat those shown      a lower bound of its step time is slower than the top shown
    simulated                    run through the simulator (the table ranks these)
    not built                    the schedule does not exist for that number of stages and
                                 microbatches (outside its regime: 'pipetab schedules')
  CP-SAT       a search of the best shapes' linear schedules; its bound and gap are proven
"""


def add_plan_decisions(p) -> None:
    """The options of ``PLAN_DECISIONS`` (the ``ContextSpace``): a comma-separated list of
    candidates, or the one value of a choice or pin."""
    for d in PLAN_DECISIONS:
        if d.plan is not Enumerate.CANDIDATES:
            add_decision(p, d, plan=True)
        elif d.kind is int:
            p.add_argument(d.plan_flag, dest=d.space, type=_int_list(d.label.replace(" size", " sizes")),
                           default=(), help=d.plan_help)
        else:
            p.add_argument(d.plan_flag, dest=d.space, type=_word_list(d.label, tuple(map(str, d.choices))),
                           default=(), help=d.plan_help)


def register(sub) -> None:
    p = sub.add_parser("plan", help="the best schedule, parallel split, microbatch size and recomputation "
                                    "for a model on a cluster, ranked by simulated step time",
                       description="Rank (schedule, PP, TP, DP, microbatch size, recomputation) for a model on a "
                                   "cluster by simulated step time, among the configurations that fit the GPU.",
                       epilog=PLAN_TERMS, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="model preset or TOML file (see 'pipetab models')")
    p.add_argument("--nodes", type=common.positive_int("nodes", maximum=MAX_GPUS), required=True,
                   help="nodes of the cluster")
    p.add_argument("--gpus-per-node", type=common.positive_int("gpus per node", maximum=MAX_TP), required=True,
                   help="GPUs per node (tensor parallelism stays inside a node)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", default=None, help="GPU: H100 (default) or A100")
    where.add_argument("--system", default=None,
                       help="system preset or TOML file giving the GPU and the intra-/inter-node links")
    add_decision(p, DECISION["global_batch"], required=True)
    add_decision(p, DECISION["seq_len"])
    add_plan_decisions(p)
    p.add_argument("--schedules", type=_word_list("schedules"), default=(),
                   help="registry schedules to try, e.g. 1f1b,zbv (default: all; see 'pipetab schedules')")
    p.add_argument("--top", type=common.positive_int("top", maximum=1000), default=10,
                   help="configurations to show, ranked exactly (default 10)")
    p.add_argument("--cpsat-shapes", type=common.positive_int("cpsat shapes", minimum=0, maximum=16), default=None,
                   help="best shapes CP-SAT searches for a better linear schedule (default 2; 0: none)")
    p.add_argument("--cpsat-time", type=_seconds, default=None, help="seconds of CP-SAT per shape (default 3)")
    add_profile_arg(p)
    p.add_argument("--plot", metavar="FILE.png", help="Pareto plot: step time against peak memory per GPU")
    p.add_argument("--html", metavar="FILE.html",
                   help="one self-contained page: the ranked configurations (sortable), the Pareto plot, the "
                        "winner's and runner-up's timelines and memory, the levels, the assumptions")
    p.add_argument("--emit", choices=["megatron", "megatron-bridge", "torchtitan", "torchtitan-toml"], default=None,
                   help="print the best configuration that fits instead of the table: Megatron-LM's launch and "
                        "arguments (the best it can run), the same as overrides of Megatron-Bridge's recipe, the "
                        "current torchtitan's command line, or the last TOML release's job file; what differs "
                        "from the plan is named on stderr and in the text")
    p.add_argument("--emit-version", metavar="VERSION", default=None,
                   help="with --emit: the framework version to write for (megatron: Megatron-LM commit "
                        "d98e8a64ddf3; megatron-bridge: 0.3.1; torchtitan: 0.3.0, or 0.2.2 for its TOML job "
                        "file; torchtitan-toml: 0.2.2; default the first)")
    p.add_argument("--emit-csv", metavar="FILE.csv", default=None,
                   help="with --emit torchtitan or torchtitan-toml: write the schedule as the CSV that "
                        "pipeline_parallel_schedule_csv reads")
    p.add_argument("--force", action="store_true",
                   help="with --emit: write the best configuration even when none fits the GPU memory "
                        "(the text says so)")
    p.add_argument("--no-substitute", action="store_true",
                   help="with --emit: refuse instead of writing a configuration that differs from the plan")
    p.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="where shapes are bounded side by side: a local process pool (default) or a Dask cluster "
                        "(the same answer as one process)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address (default with --executor dask: a LocalCluster)")
    p.add_argument("--workers", type=common.positive_int("workers", maximum=4096), default=None,
                   help="worker processes opening shapes side by side (default with --executor local: 1, in this "
                        "process: a pool was slower on 2 cores, 25.8 s against 20.8 s on DeepSeek-V3; Dask: its "
                        "cluster's)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--format", choices=["text", "json", "torch-csv"], default="text",
                   help="text (default), json, or torch-csv: the winner's schedule for PyTorch's pipelining "
                        "runtime on stdout, its stage -> rank layout and torchtitan settings on stderr")
    p.set_defaults(func=run)


# options the profile fixes: refused with --profile (``plan``'s context options but --seq, and CP-SAT's)
_PROFILED = (*((d.space, d.plan_flag, () if d.plan is Enumerate.CANDIDATES else True if d.kind is bool else None)
               for d in PLAN_DECISIONS),
             ("cpsat_shapes", "--cpsat-shapes", None), ("cpsat_time", "--cpsat-time", None))


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

    if args.nodes * args.gpus_per_node > MAX_GPUS:
        raise UsageError(f"--nodes x --gpus-per-node = {args.nodes} x {args.gpus_per_node} GPUs is more than the "
                         f"{MAX_GPUS:,} pipetab plans for")
    if args.global_batch > MAX_OPS:
        raise UsageError(f"--global-batch must be at most {MAX_OPS} sequences (a schedule holds "
                         f"at most {MAX_OPS} ops; see docs/limits.md), got {args.global_batch}")
    plot = common.check_plot_path(args.plot)
    if args.emit_csv is not None and args.emit not in ("torchtitan", "torchtitan-toml"):
        raise UsageError("--emit-csv applies with --emit torchtitan or torchtitan-toml only")
    for flag, given in (("--force", args.force), ("--no-substitute", args.no_substitute),
                        ("--emit-version", args.emit_version is not None)):
        if given and args.emit is None:
            raise UsageError(f"{flag} applies with --emit only")
    if args.emit is not None and args.format != "text":
        raise UsageError(f"--emit prints a framework's configuration: it does not combine with --format {args.format}")
    if args.emit is not None:  # an unsupported version refused before planning
        from pipetab.plan.emit import target

        try:
            target(args.emit, args.emit_version or "")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    emit_csv = common.output_path(args.emit_csv, "--emit-csv", (".csv",)) if args.emit_csv else None
    page = args.html and common.output_path(args.html, "--html", (".html", ".htm"))
    profile = load_profile_arg(args)
    gpu = args.system or args.gpu
    if profile is not None:  # what the profile records is the default, and must not be contradicted
        if gpu is None and profile.gpu is not None and profile.gpu.upper() in GPUS:
            gpu = profile.gpu
        if args.seq is None and profile.seq_len is not None:
            args.seq = profile.seq_len
    context = {d.space: getattr(args, d.space) for d in PLAN_DECISIONS
               if getattr(args, d.space) is not None}  # not given: the ContextSpace's default
    space = plan_question(args.model, args.nodes, args.gpus_per_node, args.global_batch, gpu or "H100", args.seq,
                          schedules=args.schedules, top=args.top,
                          cpsat_shapes=2 if args.cpsat_shapes is None else args.cpsat_shapes,
                          cpsat_time_s=args.cpsat_time or 3.0, **context)
    if profile is not None:
        flag = f"--system {args.system}" if args.system else f"--gpu {gpu or 'H100'}" + ("" if gpu else " (default)")
        try:
            profile.check_matches(space.model, space.model.seq_len, space.system.device.peak_flops,
                                  seq_flag="--seq" if args.seq is not None else "the model's sequence length",
                                  gpu_flag=flag)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if "selective" in args.recompute:
        from .hardware_args import check_recompute

        check_recompute("selective", space.model)
    from pipetab.console import Progress
    from pipetab.sweep import make_executor

    if args.scheduler and args.executor != "dask":
        raise UsageError("--scheduler needs --executor dask")
    if profile is not None and (args.executor != "local" or args.workers is not None):
        raise UsageError(f"--{'workers' if args.executor == 'local' else 'executor'} does not apply with --profile "
                         "(the profile fixes the shape: nothing to bound side by side)")
    try:
        workers = args.workers if args.workers is not None or args.executor != "local" else 1
        executor = make_executor(args.executor, workers, args.scheduler)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with Progress("plan", quiet=args.quiet or args.format != "text") as progress:
        try:
            result = plan(space, progress=progress, profile=profile, executor=executor)
        except ValueError as exc:
            if args.scheduler and "Dask scheduler" in str(exc):
                raise UsageError(str(exc)) from None
            raise
    if plot:
        from pipetab.plan.plot import plot_plan

        common.save_plot(plot_plan, plot, result, rows=10)
    if page:
        from pipetab.view.plan_page import write_plan_page

        common.write_output(page, "--html", lambda p: write_plan_page(p, result))
    if args.emit is not None:
        print(emitted(result, space, args, emit_csv), end="")
        if args.html:
            import sys

            print(f"page: {args.html}", file=sys.stderr)
        return
    if args.format == "json":
        emit_json(result.as_dict())
        return
    if args.format == "torch-csv":
        import sys

        if not result.configurations or not result.configurations[0].fits:
            raise UsageError("--format torch-csv: no configuration fits the GPU memory, so there is no winner to "
                             "write")
        from pipetab.schedules.table import layout

        best = result.configurations[0]
        sched = best.full_schedule()  # the whole step, not the short run it may be extrapolated from
        sys.stdout.write(common.torch_csv_of(layout(sched), sched))
        common.torch_notes(sched)
        print(f"winner: {best.label} on {best.shape.label}, {best.step_time_s:.4g} s per step", file=sys.stderr)
        return
    print_plan(result)
    if args.plot:
        print(f"plot: {args.plot}")
    if args.html:
        print(f"page: {args.html}")


def compact_labels(configurations) -> list[str]:
    """Schedule labels for a table of people's width: an option is named where it is not
    the registry's default or where the rows of that schedule differ in it
    (``interleaved(chunks=4)`` beside ``interleaved(chunks=2)``, plain ``zbv``); the JSON
    and the page name every option."""
    from pipetab.plan.space import schedule_label
    from pipetab.schedules import registry

    seen: dict[tuple[str, str], set] = {}
    for c in configurations:
        for k, v in c.options:
            seen.setdefault((c.schedule, k), set()).add(v)
    out = []
    for c in configurations:
        try:
            defaults = {o.name: o.default for o in registry.spec(c.schedule).options}
        except ValueError:  # CP-SAT's own schedules are not in the registry
            defaults = {}
        shown = {k: v for k, v in c.options if k not in defaults or v != defaults[k] or len(seen[(c.schedule, k)]) > 1}
        # one stage: no schedule to choose (its microbatches are gradient accumulation)
        out.append("no pipeline" if c.shape.pp == 1 else schedule_label(c.schedule, shown))
    return out


def emitted(result, space, args, csv_path: Path | None) -> str:
    """The configuration ``pipetab.plan.emit`` picks in ``args.emit``'s form, what differs
    from the plan on stderr; the schedule written to ``csv_path`` for torchtitan."""
    import sys

    from pipetab.plan import emit

    try:
        out = emit.emit(result, space, args.emit, str(csv_path) if csv_path else "", force=args.force,
                        no_substitute=args.no_substitute, version=args.emit_version or "")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for line in out.differs:
        print(f"differs from the plan: {line}", file=sys.stderr)
    if csv_path:
        conf = out.configuration
        sched = conf.full_schedule()
        try:
            text = emit.torch_csv(conf, sched)
        except ValueError as exc:
            raise UsageError(f"--emit-csv: {exc}") from None
        common.write_output(csv_path, "--emit-csv", lambda p: p.write_text(text))
    return out.text


# decisions of a shape that no column of the table shows: named in an "also" column where rows
# would otherwise print alike (``_distinguish``)
_OTHER = ("sequence_parallel", "overlap", "cp_comm", "dispatch_precision", "gemm_precision", "node_limit",
          "routing_imbalance", "reshard_after_forward", "layout")


def _rows(result) -> tuple[tuple, list[tuple], list[int], set[int]]:
    """The table's header and rows, the columns a narrow terminal may leave out (in that
    order) and those whose labels may wrap: the split as ``PPxTPxDP`` (or ``PPxTPxCPxDP``
    when a configuration shown uses context parallelism), EP and ZeRO where a row uses or
    differs in them, MFU with causal attention beside the frameworks' MFU where attention
    is a fifth of the FLOPs or more, and an ``also`` column naming what else tells two rows
    apart."""
    confs = result.configurations
    moe = any(c.ep_links for c in confs)
    cp = any(c.shape.cp > 1 for c in confs)
    zero = len({c.shape.zero for c in confs}) > 1 or any(c.shape.zero != 1 for c in confs)
    causal = any(c.attention_share >= 0.2 for c in confs)
    split = "PPxTPxCPxDP" if cp else "PPxTPxDP"
    head = ("#", "schedule", split, *(("EP",) if moe else ()), *(("ZeRO",) if zero else ()), "b x m", "recompute",
            "step (s)", "tokens/s", "MFU", *(("MFU causal",) if causal else ()), "peak GiB", "fits")
    rows = []
    labels = compact_labels(confs)
    from pipetab.plan.result import fidelity_band, indistinguishable

    band, tied = fidelity_band(), indistinguishable(confs)
    for i, c in enumerate(confs, 1):
        s = c.shape
        shape = f"{s.pp}x{s.tp}x{s.cp}x{s.dp}" if cp else f"{s.pp}x{s.tp}x{s.dp}"
        ep = ((f"{s.ep}" + (f"x{s.etp}" if s.etp > 1 else "")),) if moe else ()
        z = (str(s.zero),) if zero else ()
        mfu_c = (f"{100 * c.mfu_causal:.1f}%",) if causal else ()
        step = f"{c.step_time_s:#.4g}".rstrip(".") + "\u00b1" + f"{band * c.step_time_s:#.2g}".rstrip(".")
        rows.append((f"{i}~" if tied[i - 1] else str(i), labels[i - 1], shape, *ep, *z,
                     f"{s.microbatch_size} x {s.microbatches}", c.recompute_label, step, f"{c.tokens_per_s:,.0f}",
                     f"{100 * c.mfu:.1f}%", *mfu_c, f"{c.peak_memory_bytes / 2**30:.1f}", "yes" if c.fits else "NO"))
    head, rows = _distinguish(confs, head, rows)
    drop = [head.index(h) for h in ("tokens/s", "fits", "also") if h in head and (h != "fits" or
                                                                                  all(c.fits for c in confs))]
    wrap = {head.index(h) for h in ("schedule", "recompute", "also") if h in head}
    return head, rows, drop, wrap


def _distinguish(confs, head: tuple, rows: list[tuple]) -> tuple[tuple, list[tuple]]:
    """``head`` and ``rows`` with an ``also`` column naming the decisions (``_OTHER``) in
    which rows that would print alike differ; unchanged when every row is distinct."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(r[1:], []).append(i)
    alike = [g for g in groups.values() if len(g) > 1]
    if not alike:
        return head, rows
    values = [{**{k: confs[i].shape.as_dict()[k] for k in _OTHER if k != "layout"}, "layout": confs[i].layout}
              for i in range(len(rows))]
    keys = [k for k in _OTHER if any(len({str(values[i][k]) for i in g}) > 1 for g in alike)]
    also = [" ".join(f"{k}={values[i][k]}" for k in keys) for i in range(len(rows))]
    return (*head, "also"), [(*r, a) for r, a in zip(rows, also)]


def _best_lines(result) -> list[str]:
    """#1's all-to-all (MoE), its layers per stage and Megatron layout, and whether its
    step was extrapolated."""
    best = result.configurations[0]
    out = []
    if best.ep_links:
        hidden = f", {max(0.0, 100 * best.a2a_hidden_s / best.a2a_s):.0f} % of it hidden by overlapped pairs" \
            if best.a2a_s else ""
        out.append(f"#1 all-to-all: {best.a2a_s:.3g} s per step on the busiest GPU over {best.ep_links}{hidden}")
    if best.layout and best.shape.pp > 1:
        from pipetab.plan.result import runs

        uneven = [f"#{i} {runs(c.layers_per_stage)}" for i, c in enumerate(result.configurations[1:], 2)
                  if c.layout and len(set(c.layers_per_stage)) > 1]
        out.append(f"#1 layers per stage: {runs(best.layers_per_stage)} "
                   f"(pipeline_model_parallel_layout {best.layout!r})"
                   + (f"; uneven layouts of the others: {', '.join(uneven)}" if uneven else ""))
    if best.sample_microbatches:
        out.append(f"#1 step time and memory extrapolated from runs of {best.sample_microbatches} microbatches "
                   "(periodic schedule, exact)")
    return out


def numeric_columns(head: tuple) -> set[int]:
    """The right-aligned columns of the plan table."""
    numbers = ("#", "PPxTPxDP", "PPxTPxCPxDP", "EP", "ZeRO", "b x m", "step (s)", "tokens/s", "MFU", "MFU causal",
               "peak GiB")
    return {i for i, h in enumerate(head) if h in numbers}


def _band_line(result) -> str:
    """How far a step time may be off, and which rows it cannot tell from #1."""
    from pipetab.plan.result import fidelity_band, indistinguishable

    tied = sum(indistinguishable(result.configurations))
    which = f"; {tied} marked ~ differ from #1 by less: indistinguishable from it" if tied else ""
    return (f"step times \u00b1{100 * fidelity_band():.1f} %: the development set's error with each source left "
            f"out of the fit (90th percentile, docs/fidelity.md){which}")


def _memory_line(result) -> str:
    """The usable memory per GPU, how it follows from the GPU's, and the same figure as
    ``search`` and ``bound`` take it (their ``--memory-cap`` is usable memory too)."""
    q, usable = result.question, result.configurations[0].capacity_bytes
    if result.configurations[0].profiled or "gpu_memory_bytes" not in q:
        return f"usable GPU memory {usable / 2**30:.1f} GiB"
    return (f"usable GPU memory {usable / 2**30:.1f} GiB (the GPU's {q['gpu_memory_bytes'] / 2**30:.1f} GiB less a "
            f"{q['reserved_bytes'] / 2**30:.1f} GiB reserve; search and bound: --memory-cap "
            f"{usable / 2**30:.1f}GiB)")


def print_plan(result) -> None:
    """The ranked configurations as an aligned table (a rich table on a terminal), then what
    the search did, every line at most 100 columns (``pipetab.console``)."""
    from pipetab.console import say, table

    q = result.question
    say(f"plan: {q['model']} on {q['gpus']} GPUs ({q['gpus_per_node']} per node, {q['system']}), "
        f"global batch {q['global_batch']} x {q['seq_len']} tokens")
    head, rows, drop, wrap = _rows(result)
    if not rows:
        say("no configuration: no split of the GPUs, microbatch size and schedule fits the question")
    else:
        table(head, rows, right=numeric_columns(head), drop=drop, wrap=wrap)
        say(_memory_line(result) + "; columns: 'pipetab plan --help'")
        say(_band_line(result))
        if not result.configurations[0].fits:
            say("none of these fits the GPU memory: the closest are shown")
        for line in _best_lines(result):
            say(line)
    unbuilt = result.unbuilt
    outside = f", {unbuilt} not built (outside their schedule's regime)" if unbuilt else ""
    refined = f" (and {result.refined} refinements of the best)" if result.refined else ""
    say(f"searched {result.candidates} candidates: {result.pruned_memory} cannot fit the memory, "
        f"{result.pruned_time} cannot beat those shown, {result.simulated - result.refined} simulated{refined}"
        f"{outside}; {result.runtime_s:.1f} s")
    for note in result.notes:
        say(f"note: {note}", "  ")
    for note in result.cpsat_notes:
        say(f"CP-SAT {note}", "    ")
    cert = result.certificate
    if cert is not None:
        say(f"certificate: {cert.text()}")
        for line in cert.assumes:
            say(f"  assumes: {line}", "    ")
