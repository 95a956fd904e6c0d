"""``pipetab evaluate``: a schedule at the three levels side by side (and CP-SAT on demand)."""

from __future__ import annotations

from . import common
from .common import UsageError, emit_json


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="formula, table and simulation of a schedule side by side")
    common.add_schedule_args(p)
    p.add_argument("--system", help="system preset or TOML file; adds the simulation level")
    p.add_argument("--model", default=None, help="model preset or TOML file (default: paper_gpt)")
    p.add_argument("--recompute", choices=["none", "selective", "full"], default="none",
                   help="activation recomputation assumed for activation memory (default none)")
    p.add_argument("--contention", action="store_true",
                   help="links carry one transfer at a time (off by default, as in the paper)")
    p.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace of the simulation")
    p.add_argument("--plot", metavar="FILE.png", help="draw the simulated timeline")
    p.add_argument("--solver", choices=["cpsat"], help="also evaluate with the CP-SAT model")
    p.add_argument("--tick", type=float, default=None,
                   help="CP-SAT tick in seconds for hardware costs (default: 1/1000 of the shortest op)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.set_defaults(func=run)


def levels_of(args):
    """The schedule named on the command line at the levels (``evaluate_levels``), writing
    the trace and the picture when asked."""
    from pipetab.solver.levels import evaluate_levels

    if (args.trace or args.plot) and not args.system:
        raise UsageError("pipetab evaluate: --trace and --plot need --system")
    costs = None
    if args.system:
        from pipetab.solver.costs import check_hardware, hardware_costs

        # refuse a system or model that cannot run the request before generating anything
        system, model = check_hardware(args.system, args.model or "paper_gpt", args.stages, args.microbatches)
    schedule = common.build_schedule(args)
    if args.system:
        costs = hardware_costs(schedule, system, model, recompute=args.recompute, contention=args.contention)
    levels = evaluate_levels(schedule, slots=common.slots_of(args), costs=costs,
                             cpsat=args.solver == "cpsat", tick_s=args.tick)
    sim = levels.simulation
    if args.trace:
        from pipetab.solver.trace import write_chrome_trace

        write_chrome_trace(sim, args.trace)
    if args.plot:
        from pipetab.plot import plot_timeline

        common.save_plot(plot_timeline, args.plot, sim, rows=schedule.num_devices,
                         title=f"{args.name} S={args.stages} B={args.microbatches} on {args.system}")
    return levels


def run(args) -> None:
    doc = levels_of(args).as_dict()
    doc["schedule"], doc["stages"] = args.name, args.stages
    if args.format == "json":
        emit_json(doc)
        return
    print_levels(doc)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + " ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _mem_unit(sim: dict | None) -> tuple[str, float]:
    """GiB, or TiB when the largest peak exceeds 1 TiB."""
    if not sim:
        return "GiB", 2**30
    return ("TiB", 2**40) if max(sim["peak_memory_bytes"]) >= 2**40 else ("GiB", 2**30)


def _in(values, scale) -> list[float] | None:
    return None if values is None else [round(v / scale, 3) for v in values]


def print_levels(doc: dict) -> None:
    """The levels as an aligned text table: quantity | formula | table | simulation."""
    f, t, s = doc["formula"], doc["table"], doc.get("simulation")
    unit, scale = _mem_unit(s)
    rows = [
        ("bubble / idle ratio", f["bubble_ratio"], t["bubble_ratio"], s and s["idle_ratio"]),
        ("makespan", None, f"{t['makespan_slots']} slots", s and f"{s['makespan_s']:.4g} s"),
        (f"peak activations (stage units | {unit})", f["peak_activations"], t["peak_activation_share"],
         s and _in(s["peak_activation_bytes"], scale)),
        (f"weights (stage copies | {unit} persistent)", f["weight_copies"], t["weight_copies"],
         s and _in(s["persistent_bytes"], scale)),
    ]
    if s:
        rows.append((f"peak memory ({unit})", None, None, _in(s["peak_memory_bytes"], scale)))
        rows.append(("fits memory", None, None, s["fits_memory"]))
        rows.append(("exposed communication", None, None, f"{s['exposed_comm_s']:.4g} s"))
    if "cpsat" in doc:
        c = doc["cpsat"]
        shown = c["status"] if c["makespan"] is None else (
            f"{c['makespan']} slots" if c["unit"] == "slots" else f"{c['makespan']:.4g} s")
        rows.append(("CP-SAT makespan", None, shown if c["unit"] == "slots" else None,
                     shown if c["unit"] != "slots" else None))
    head = ("quantity", "formula", "table", "simulation")
    cells = [tuple(_fmt(x) if not isinstance(x, str) else x for x in r) for r in rows]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(4)]
    print(f"{doc['schedule']}  S={doc['stages']}  B={doc['microbatches']}  devices={doc['devices']}")
    for r in [head, *cells]:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
    print(f"formula source: {f['bubble_source']}")
