"""``pipetab evaluate``: a schedule at the three levels side by side (and CP-SAT on demand)."""

from __future__ import annotations

from pipetab.schedules import registry
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.table import layout
from pipetab.schedules.validate import validate

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


def evaluate_levels(args) -> dict:
    """The levels as one JSON-ready dict."""
    schedule = common.build_schedule(args)
    table = layout(schedule, common.slots_of(args))
    validate(table, schedule)
    formula = registry.formula(args.name, args.stages, args.microbatches, **common.schedule_options(args))
    metrics = table_metrics(table, schedule)
    doc = {
        "schedule": args.name,
        "stages": args.stages,
        "microbatches": args.microbatches,
        "devices": schedule.num_devices,
        "formula": formula.as_dict(),
        "table": metrics.as_dict(),
    }
    sim = costs = None
    if args.system or args.trace or args.plot:
        from pipetab.solver.costs import hardware_costs
        from pipetab.solver.simulate import simulate

        if not args.system:
            raise UsageError("pipetab evaluate: --trace and --plot need --system")
        costs = hardware_costs(schedule, args.system, args.model or "paper_gpt",
                               recompute=args.recompute, contention=args.contention)
        sim = simulate(schedule, costs)
        doc["simulation"] = simulation_dict(sim)
        if args.trace:
            from pipetab.solver.trace import write_chrome_trace

            write_chrome_trace(sim, args.trace)
        if args.plot:
            from pipetab.plot import plot_timeline

            common.save_plot(plot_timeline, args.plot, sim, rows=schedule.num_devices,
                       title=f"{args.name} S={args.stages} B={args.microbatches} on {args.system}")
    if args.solver == "cpsat":
        doc["cpsat"] = _cpsat(schedule, table, costs, args)
    return doc


def simulation_dict(sim) -> dict:
    """The ``simulation`` block of ``pipetab evaluate --format json``."""
    return {
        "makespan_s": sim.makespan,
        "idle_ratio": sim.idle_ratio,
        "exposed_comm_s": sim.exposed_comm,
        "busy_s": list(sim.busy),
        "peak_activation_bytes": [int(round(x)) for x in sim.peak_activation],
        "persistent_bytes": [int(round(x)) for x in sim.costs.persistent],
        "peak_memory_bytes": [int(round(x)) for x in sim.peak_memory],
        "capacity_bytes": [None if c is None else int(c) for c in sim.costs.capacity],
        "fits_memory": list(sim.fits_memory),
    }


def _cpsat(schedule, table, costs, args) -> dict:
    from pipetab.solver.cpsat import CpSatConfig, evaluate as cp_evaluate

    from pipetab.solver.costs import slot_costs

    if costs is None:
        result = cp_evaluate(schedule, slot_costs(schedule, common.slots_of(args)), CpSatConfig())
        return {"makespan": result.makespan, "unit": "slots", "status": result.status}
    from pipetab.solver.costs import EVALUATE_TICKS_PER_OP

    tick = args.tick or costs.default_tick(EVALUATE_TICKS_PER_OP)
    q = costs.quantized(tick)
    result = cp_evaluate(schedule, q, CpSatConfig())
    makespan = None if result.makespan is None else result.makespan * tick
    return {"makespan": makespan, "unit": "s", "status": result.status, "tick_s": tick,
            "makespan_ticks": result.makespan}


def run(args) -> None:
    doc = evaluate_levels(args)
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
        rows.append(("CP-SAT makespan", None, c["unit"] == "slots" and f"{c['makespan']} slots",
                     c["unit"] == "s" and f"{c['makespan']:.4g} s"))
    head = ("quantity", "formula", "table", "simulation")
    cells = [tuple(_fmt(x) if not isinstance(x, str) else x for x in r) for r in rows]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(4)]
    print(f"{doc['schedule']}  S={doc['stages']}  B={doc['microbatches']}  devices={doc['devices']}")
    for r in [head, *cells]:
        print("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
    print(f"formula source: {f['bubble_source']}")
