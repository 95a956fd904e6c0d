"""``pipetab search`` and ``pipetab bound``: the CP-SAT model from the command line."""

from __future__ import annotations

import re
import sys

from pipetab.schedules import registry


from . import common
from .common import UsageError, emit_json

PLACEMENTS = ("linear", "bidirectional", "wave", "free")
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> float:
    """``80e9``, ``80GB``, ``1.5TiB`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m[2].lower() not in _UNITS:
        raise UsageError(f"pipetab: error: memory cap must be bytes like 80e9, 80GB or 1.5TiB, got {text!r}")
    value = float(m[1]) * _UNITS[m[2].lower()]
    if value <= 0:
        raise UsageError(f"pipetab: error: memory cap must be > 0 bytes, got {text!r}")
    return value


def register(sub) -> None:
    for name, help_ in (("search", "CP-SAT: find a better schedule under a memory cap"),
                        ("bound", "CP-SAT: prove a lower bound on the optimal makespan")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--stages", "-S", type=common.positive_int("stages"), required=True)
        p.add_argument("--microbatches", "-B", type=common.positive_int("microbatches"), required=True)
        p.add_argument("--placement", choices=PLACEMENTS, default="linear",
                       help="linear (default), bidirectional (Chimera), wave (Hanayo), free")
        p.add_argument("--waves", type=common.positive_int("waves"), default=1, help="waves for --placement wave")
        p.add_argument("--devices", type=common.positive_int("devices"), default=None,
                       help="devices for --placement free (default: S)")
        p.add_argument("--pipelines", type=int, choices=[1, 2], default=None,
                       help="pipelines for --placement free (default 1)")
        common.add_slot_args(p, weight=False)  # the searched problems do not split the backward
        p.add_argument("--comm-slots", type=common.positive_int("comm slots", minimum=0), default=0,
                       help="slots of a message between two devices (idealized costs, default 0)")
        p.add_argument("--system", help="system preset or TOML file (hardware costs instead of slots)")
        p.add_argument("--model", default=None, help="model preset or TOML file (default paper_gpt)")
        p.add_argument("--tick", type=float, default=None,
                       help="seconds per integer tick for hardware costs (default: 1/20 of the shortest op)")
        cap = p.add_mutually_exclusive_group()
        cap.add_argument("--activation-cap", type=common.positive_int("activation cap"), default=None,
                         help="at most N activations live on any device (idealized costs)")
        cap.add_argument("--memory-cap", type=parse_bytes, default=None,
                         help="device memory in bytes (e.g. 80GB); activations get what persistent memory leaves")
        p.add_argument("--time-limit", type=float, default=30.0, help="seconds (default 30)")
        p.add_argument("--workers", type=common.positive_int("workers"), default=2, help="CP-SAT workers (default 2)")
        p.add_argument("--no-fifo", dest="fifo", action="store_false",
                       help="do not fix every stage to one microbatch order (ablation: FIFO loses nothing for "
                            "identical microbatches and makes proofs much faster)")
        p.add_argument("--format", choices=["text", "json"], default="text")
        p.set_defaults(func=run, mode=name)


def known_schedules(args) -> list:
    """The registry's schedules that share the problem's shape (for hints and gaps)."""
    S, B = args.stages, args.microbatches
    names = {"linear": [("gpipe", {}), ("1f1b", {})],
             "bidirectional": [("chimera", {})],
             "wave": [("hanayo", {"waves": args.waves})],
             "free": [("gpipe", {}), ("1f1b", {})] if (args.pipelines or 1) == 1 else [("chimera", {})]}[args.placement]
    out = []
    for name, opts in names:
        try:
            out.append(registry.generate(name, S, B, **opts))
        except ValueError:
            continue
    return out


def build_problem(args):
    """Problem, the costs' shape schedule (for hardware costs) and a description."""
    from pipetab.solver.cpsat import idealized_problem

    if args.activation_cap is not None and args.system:
        raise UsageError("pipetab: error: --activation-cap goes with idealized costs; with --system use --memory-cap")
    if args.memory_cap is not None and not args.system:
        raise UsageError("pipetab: error: --memory-cap needs --system (bytes need a model); use --activation-cap")
    if args.placement != "free" and (args.devices or args.pipelines):
        raise UsageError("pipetab: error: --devices and --pipelines apply to --placement free only")
    known = known_schedules(args)
    kw = dict(waves=args.waves)
    if args.placement == "free":
        kw.update(devices=args.devices, pipelines=args.pipelines or 1)
    if not args.system:
        problem = idealized_problem(
            args.stages, args.microbatches, args.placement,
            forward=args.forward_slots, backward=args.backward_slots, comm=args.comm_slots,
            activation_cap=args.activation_cap, **kw,
        )
        return problem, known
    from dataclasses import replace

    from pipetab.solver.costs import SEARCH_TICKS_PER_OP, hardware_costs

    if not known:
        raise UsageError("pipetab: error: no known schedule has this shape to cost it on hardware "
                         "(e.g. bidirectional needs S even and B a multiple of S)")
    if args.placement == "free" and args.devices not in (None, args.stages):
        raise UsageError("pipetab: error: --devices with --system is not supported (the costs come from an S-device schedule)")
    costs = hardware_costs(known[0], args.system, args.model or "paper_gpt")
    tick = args.tick or costs.default_tick(SEARCH_TICKS_PER_OP)
    q = costs.quantized(tick)
    if args.memory_cap is not None:
        q = replace(q, capacity=(args.memory_cap,) * len(q.capacity))
    else:
        q = replace(q, capacity=(None,) * len(q.capacity))
    shape = idealized_problem(args.stages, args.microbatches, args.placement, **kw)
    problem = replace(shape, costs=q, name=f"{args.placement} on {args.system}")
    return problem, known


def _ops_records(schedule, costs) -> list[dict]:
    """Op records (as in ``pipetab table``) timed by the simulator on the solver's costs."""
    from pipetab.solver.simulate import simulate

    sim = simulate(schedule, costs)
    scale = costs.tick_s if costs.tick_s else 1
    recs = []
    for op, s in sim.start.items():
        d = schedule.device_of(op)
        recs.append({"device": d, "start": s * scale, "duration": (sim.end[op] - s) * scale,
                     "kind": op.kind.value, "pipeline": op.pipeline, "stage": op.stage, "microbatch": op.microbatch})
    recs.sort(key=lambda r: (r["device"], r["start"]))
    return recs


def run(args) -> None:
    from pipetab.solver.cpsat import CpSatConfig, bound, search

    problem, known = build_problem(args)
    config = CpSatConfig(time_limit_s=args.time_limit, workers=args.workers, fifo=args.fifo)
    costs = problem.costs
    seconds = costs.tick_s is not None
    unit = "s" if seconds else "slots"
    scale = costs.tick_s if seconds else 1

    def conv(x):
        return None if x is None else (x * scale if seconds else x)

    if args.mode == "search":
        result = search(problem, config, known)
        doc = {
            "status": result.status,
            "makespan": conv(result.makespan),
            "lower_bound": conv(result.lower_bound),
            "gap": result.gap,
            "unit": unit,
            "bound_assumptions": list(result.bound_assumptions),
            "runtime_s": round(result.runtime_s, 3),
            "time_to_first_s": result.time_to_first_s,
            "min_feasible_cap": result.min_feasible_cap,
            "message": result.message,
            "known": {k: {"makespan": conv(v.makespan), "fits": v.fits, "gap": v.gap} for k, v in result.known.items()},
            "ops": _ops_records(result.schedule, costs) if result.schedule is not None else [],
        }
        if seconds:
            doc["tick_s"] = costs.tick_s
    else:
        result = bound(problem, config, known)
        doc = {
            "lower_bound": conv(result.lower_bound),
            "status": result.status,
            "unit": unit,
            "bound_assumptions": list(result.bound_assumptions),
            "runtime_s": round(result.runtime_s, 3),
            "best_makespan": conv(result.makespan),
            "min_feasible_cap": result.min_feasible_cap,
            "message": result.message,
            "schedules": {k: {"makespan": conv(v.makespan), "gap": v.gap, "fits": v.fits}
                          for k, v in result.known.items()},
        }
    if args.format == "json":
        emit_json(doc)
        return
    _print(args, doc, result)


def _print(args, doc: dict, result) -> None:
    unit = doc["unit"]

    def f(x):
        return "-" if x is None else (f"{x:.6g}" if isinstance(x, float) else str(x))

    where = f"S={args.stages} B={args.microbatches}, placement {args.placement}"
    costs = (f"system {args.system}, model {args.model or 'paper_gpt'}" if args.system else
             f"F={args.forward_slots} K={args.backward_slots} C={args.comm_slots} slots")
    cap = (f", activation cap {args.activation_cap}" if args.activation_cap else
           f", memory cap {args.memory_cap:.4g} B" if args.memory_cap else ", no memory cap")
    print(f"{args.mode}: {where}; {costs}{cap}")
    print(f"status {doc['status']}", end="")
    if args.mode == "search":
        print(f", makespan {f(doc['makespan'])} {unit}, lower bound {f(doc['lower_bound'])}, "
              f"gap {f(None if doc['gap'] is None else round(100 * doc['gap'], 2))}%, {doc['runtime_s']} s")
    else:
        print(f", lower bound {f(doc['lower_bound'])} {unit} (best schedule found {f(doc['best_makespan'])}), "
              f"{doc['runtime_s']} s")
    if doc.get("min_feasible_cap") is not None:
        print(f"smallest feasible cap: {f(doc['min_feasible_cap'])}")
    if doc.get("message"):
        print(doc["message"])
    print("bound holds under: " + ("; ".join(doc["bound_assumptions"]) or "no restriction"))
    rows = doc["known"] if args.mode == "search" else doc["schedules"]
    for name, r in rows.items():
        gap = "-" if r["gap"] is None else f"{100 * r['gap']:.2f}%"
        print(f"  {name:<12} makespan {f(r['makespan'])} {unit}, gap to bound {gap}{'' if r['fits'] else ' (does not fit the cap)'}")
    if args.mode == "search" and result.schedule is not None and not args.system and len(doc["ops"]) <= 400:
        from pipetab.schedules import formats
        from pipetab.schedules.table import PlacedOp, Table

        entries = tuple(PlacedOp(_op(r), r["device"], int(r["start"]), int(r["duration"])) for r in doc["ops"])
        sys.stdout.write(formats.to_text(Table(result.schedule.num_devices, entries, "found")))


def _op(r):
    from pipetab.schedules.ops import Kind, Op

    return Op(Kind(r["kind"]), r["pipeline"], r["stage"], r["microbatch"])



