"""``pipetab evaluate``: a schedule at the three levels side by side (and CP-SAT on demand)."""

from __future__ import annotations

from . import common
from .common import UsageError, emit_json
from .hardware_args import add_hardware_args, check_ticks, cost_source

MIN_TICKS_PER_OP = 10  # --tick at most 1/10 of the shortest op: rounding adds <= 10% per op


LEVEL_TERMS = """\
what the output says (one column per level: formula, table, simulation):
  bubble / idle ratio   idle share: of the table's cells up to its makespan (formula and table),
                        of devices x simulated step time (simulation)
  makespan              the table's length in slots; the simulated step in seconds
  peak activations      the most activations live on a device at once: in stage units (a stage
                        holding 1/S of the model) for formula and table, in GiB simulated
  weights               copies of a stage's weights per device; GiB of weights, gradients and
                        optimizer state per GPU (persistent memory)
  peak memory, fits     persistent + live activations at the worst moment; whether that is
                        within the GPU's usable memory
  exposed communication the time devices wait for messages (not hidden behind compute)
  formula source        where the closed form comes from, or that the schedule has none
"""


def register(sub) -> None:
    import argparse

    p = sub.add_parser("evaluate", help="formula, table and simulation of a schedule side by side",
                       epilog=LEVEL_TERMS, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_schedule_args(p)
    add_hardware_args(p)
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace of the simulation")
    p.add_argument("--plot", metavar="FILE.png", help="draw the simulated timeline")
    p.add_argument("--solver", choices=["cpsat"], help="also evaluate with the CP-SAT model")
    p.add_argument("--tick", type=common.positive_float("tick"), default=None,
                   help="CP-SAT tick in seconds for hardware costs (default: 1/1000 of the shortest op)")
    p.add_argument("--format", choices=["text", "json", "torch-csv"], default="text",
                   help="text (default), json, or torch-csv: the schedule for PyTorch's pipelining runtime on "
                        "stdout, its stage -> rank layout and torchtitan settings on stderr (docs/torch.md)")
    p.set_defaults(func=run)


def levels_of(args):
    """The schedule named on the command line at the levels (``evaluate_levels``) and the
    ``CostSource`` of its simulation (None without one), writing the trace and the picture
    when asked."""
    from pipetab.solver.levels import evaluate_levels

    source = cost_source(args, args.stages, args.microbatches)
    for flag, given in (("--trace", args.trace), ("--plot", args.plot)):
        if given and source is None:
            raise UsageError(f"{flag} needs --system or --profile (it shows the simulation)")
    plot = common.check_plot_path(args.plot)
    trace = args.trace and common.output_path(args.trace, "--trace", (".json",))
    if args.tick is not None and (args.solver != "cpsat" or source is None):
        raise UsageError("--tick applies to --solver cpsat with --system or --profile only "
                         "(idealized costs are whole slots)")
    offload = source is not None and source.context is not None and source.context.offload_activations
    if offload and args.solver == "cpsat":
        raise UsageError("--solver cpsat does not apply with --offload-activations (CP-SAT's fixed evaluation has "
                         "no copy streams; the simulation times the offload; 'pipetab search' chooses it)")
    schedule = common.build_schedule(args)
    if offload and schedule.blocks:
        raise UsageError(f"--offload-activations does not apply to {args.name}: its ops run in pairs (blocks), and "
                         "the copy streams are simulated for ops that run alone")
    costs = None if source is None else source.costs(schedule)
    if args.tick is not None and args.tick > costs.default_tick(MIN_TICKS_PER_OP):
        raise UsageError(f"--tick must be at most {costs.default_tick(MIN_TICKS_PER_OP):.3g} s "
                         f"(1/{MIN_TICKS_PER_OP} of the shortest op, so rounding each op up to whole ticks "
                         f"adds at most {100 // MIN_TICKS_PER_OP}%), got {args.tick:g}")
    if args.solver == "cpsat" and costs is not None:
        from pipetab.solver.costs import EVALUATE_TICKS_PER_OP

        check_ticks(schedule, costs, args.tick, EVALUATE_TICKS_PER_OP)
    levels = evaluate_levels(schedule, slots=common.slots_of(args), costs=costs,
                             cpsat=args.solver == "cpsat", tick_s=args.tick)
    sim = levels.simulation
    if trace:
        from pipetab.solver.trace import write_chrome_trace

        common.write_output(trace, "--trace", lambda p: write_chrome_trace(sim, p))
    if plot:
        from pipetab.plot import plot_timeline

        common.save_plot(plot_timeline, plot, sim, rows=schedule.num_devices,
                         title=f"{common.schedule_title(args, args.name)} S={args.stages} B={args.microbatches} "
                               f"{source.label}")
    return levels, source


def run(args) -> None:
    if args.format == "torch-csv":
        if args.solver is not None:
            raise UsageError("--solver does not apply with --format torch-csv (the CSV is the schedule's order)")
        from pipetab.schedules.limits import check_grid_ops
        from pipetab.schedules.registry import check_request, num_ops

        options = common.schedule_options(args, args.name)
        check_request(args.name, args.stages, args.microbatches, **options)
        check_grid_ops(num_ops(args.name, args.stages, args.microbatches, **options) or 0)
    levels, source = levels_of(args)
    if args.format == "torch-csv":
        import sys

        sys.stdout.write(common.torch_csv_of(levels.table, levels.schedule))
        common.torch_notes(levels.schedule)
        return
    doc = levels.as_dict()
    doc["schedule"], doc["stages"] = args.name, args.stages
    if source is not None:
        doc["context"] = source.as_dict()
    if args.format == "json":
        emit_json(doc)
        return
    print_levels(doc)


def print_levels(doc: dict) -> None:
    """The levels as an aligned text table: quantity | formula | table | simulation."""
    from pipetab.formatting import HEADER, formula_source, level_rows

    rows = [HEADER, *level_rows(doc)]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    print(f"{doc['schedule']}  S={doc['stages']}  B={doc['microbatches']}  devices={doc['devices']}")
    for r in rows:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
    from pipetab.console import say

    say(f"formula source: {formula_source(doc)}")
