"""``pipetab search`` and ``pipetab bound``: the CP-SAT model from the command line."""

from __future__ import annotations

import re
import sys

from . import common, hardware_args, partition_args
from .common import UsageError, emit_json

PLACEMENTS = ("linear", "bidirectional", "wave", "v", "interleaved", "free")
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> float:
    """``80e9``, ``80GB``, ``1.5TiB`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m[2].lower() not in _UNITS:
        raise UsageError(f"memory cap must be bytes like 80e9, 80GB or 1.5TiB, got {text!r}")
    value = float(m[1]) * _UNITS[m[2].lower()]
    if value <= 0:
        raise UsageError(f"memory cap must be > 0 bytes, got {text!r}")
    return value


def _positive_float(name: str, upper: float | None = None):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not value > 0 or (upper is not None and value > upper):
            allowed = f"between 0 (exclusive) and {upper:g}" if upper is not None else "> 0"
            raise UsageError(f"--{name} must be a number {allowed}, got {text!r}")
        return value
    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise UsageError(f"--weight-memory must be a fraction M_W/M between 0 and 1, got {text!r}")
    return value


def register(sub) -> None:
    for name, help_ in (("search", "CP-SAT: find a better schedule under a memory cap"),
                        ("bound", "CP-SAT: prove a lower bound on the optimal makespan or period")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--stages", "-S", type=common.positive_int("stages"), required=True,
                       help="devices of the pipeline")
        p.add_argument("--microbatches", "-B", type=common.positive_int("microbatches"), required=True)
        p.add_argument("--placement", choices=PLACEMENTS, default="linear",
                       help="linear (default), bidirectional (Chimera), wave (Hanayo), v (ZB-V, DualPipeV), "
                            "interleaved, free")
        p.add_argument("--waves", type=common.positive_int("waves"), default=None, help="waves for --placement wave")
        p.add_argument("--chunks", type=common.positive_int("chunks", minimum=2), default=None,
                       help="stages per device for --placement interleaved (default 2)")
        p.add_argument("--devices", type=common.positive_int("devices"), default=None,
                       help="devices for --placement free (default: S)")
        p.add_argument("--pipelines", type=int, choices=[1, 2], default=None,
                       help="pipelines for --placement free (default 1)")
        p.add_argument("--split-backward", action="store_true",
                       help="split each backward into B (input gradient) and W (weight gradient)")
        p.add_argument("--forward-slots", type=common.positive_int("forward slots"), default=None,
                       help="slots of one forward (idealized costs, default 1)")
        p.add_argument("--backward-slots", type=common.positive_int("backward slots"), default=None,
                       help="slots of one backward, B when split (idealized costs, default 2)")
        p.add_argument("--weight-slots", type=common.positive_int("weight slots"), default=None,
                       help="slots of one W with --split-backward (idealized costs, default 1)")
        p.add_argument("--weight-memory", type=_fraction, default=None,
                       help="M_W/M: the share of an activation kept from B's end to W's end with "
                            "--split-backward (idealized costs, default 1; on hardware derived per layer)")
        p.add_argument("--comm-slots", type=common.positive_int("comm slots", minimum=0), default=None,
                       help="slots of a message between two devices (idealized costs, default 0)")
        p.add_argument("--objective", choices=["makespan", "period"], default="makespan",
                       help="makespan: one synchronous step (default); period: steady-state time of a repeated "
                            "step without a global barrier (longest device span)")
        p.add_argument("--system", help="system preset or TOML file (hardware costs instead of slots)")
        p.add_argument("--model", default=None, help="model preset or TOML file (default paper_gpt; with --system)")
        p.add_argument("--recompute", choices=["none", "selective", "full"], default=None,
                       help="activation recomputation (with --system, default none)")
        p.add_argument("--tick", type=_positive_float("tick"), default=None,
                       help="seconds per integer tick for hardware costs (default: 1/20 of the shortest op)")
        cap = p.add_mutually_exclusive_group()
        cap.add_argument("--activation-cap", type=_positive_float("activation-cap"), default=None,
                         help="at most this many activations of a stage holding 1/S of the model (M_B) live on "
                              "any device (idealized costs)")
        cap.add_argument("--memory-cap", type=parse_bytes, default=None,
                         help="device memory in bytes (e.g. 80GB; default: the system's device memory); "
                              "activations get what persistent memory leaves")
        p.add_argument("--time-limit", type=_positive_float("time-limit"), default=30.0, help="seconds (default 30)")
        p.add_argument("--workers", type=common.positive_int("workers"), default=2, help="CP-SAT workers (default 2)")
        p.add_argument("--no-known", dest="known_generators", action="store_false",
                       help="start from the model's own greedy schedules only, not the registry's")
        p.add_argument("--no-fifo", dest="fifo", action="store_false",
                       help="do not fix every stage to one microbatch order (ablation: FIFO loses nothing for "
                            "identical microbatches and makes proofs much faster)")
        p.add_argument("--format", choices=["text", "json"], default="text")
        hardware_args.add_context_args(p)
        partition_args.add_partition_options(p)
        p.set_defaults(func=run, mode=name)


def _refuse_options(args) -> None:
    """One line for every option that does not apply to the others given."""
    hw = args.system is not None or args.profile is not None
    rules = [
        (args.waves is not None and args.placement != "wave", "--waves applies to --placement wave only"),
        (args.chunks is not None and args.placement != "interleaved",
         "--chunks applies to --placement interleaved only"),
        ((args.devices or args.pipelines) and args.placement != "free",
         "--devices and --pipelines apply to --placement free only"),
        (args.weight_slots is not None and not args.split_backward, "--weight-slots needs --split-backward"),
        (args.weight_memory is not None and not args.split_backward, "--weight-memory needs --split-backward"),
        (hw and args.comm_slots is not None, "--comm-slots goes with idealized costs; with --system messages "
                                             "cost what the system's links say"),
        (hw and any(x is not None for x in (args.forward_slots, args.backward_slots, args.weight_slots)),
         "--forward-slots, --backward-slots and --weight-slots go with idealized costs; with --system op times "
         "come from the model's FLOPs"),
        (hw and args.weight_memory is not None, "--weight-memory goes with idealized costs; with --system M_W is "
                                                "derived per layer"),
        (hw and args.activation_cap is not None, "--activation-cap goes with idealized costs; with --system use "
                                                 "--memory-cap"),
        (not hw and args.memory_cap is not None, "--memory-cap needs --system (bytes need a model); use "
                                                 "--activation-cap"),
        (not hw and args.model is not None, "--model needs --system"),
        (not hw and args.recompute is not None, "--recompute needs --system (idealized activations count 1 each)"),
        (not hw and args.tick is not None, "--tick needs --system (idealized costs are already integers)"),
        (hw and args.placement == "free" and args.devices not in (None, args.stages),
         "--devices with --system is not supported (the costs come from an S-device shape)"),
    ]
    for bad, why in rules + partition_args.partition_rules(args):
        if bad:
            raise UsageError(f"{why}")


def _shape(args):
    from pipetab.solver.cpsat import idealized_problem

    kw = dict(waves=args.waves or 1, chunks=args.chunks or 2, split_backward=args.split_backward,
              objective=args.objective)
    if args.placement == "free":
        kw.update(devices=args.devices, pipelines=args.pipelines or 1)
    if args.system or args.profile:
        return idealized_problem(args.stages, args.microbatches, args.placement, **kw)
    return idealized_problem(
        args.stages, args.microbatches, args.placement, forward=args.forward_slots or 1,
        backward=args.backward_slots or 2, weight=args.weight_slots or 1, comm=args.comm_slots or 0,
        activation_cap=args.activation_cap, weight_memory=1.0 if args.weight_memory is None else args.weight_memory,
        **kw)


def shape_schedule(problem):
    """A schedule of the problem's shape for costing its stages on hardware."""
    from pipetab.solver.cpsat.partition import shape_schedule as of_shape

    return of_shape(problem)


def build_problem(args):
    """The problem to solve and, on hardware, its real-valued costs in seconds (None for
    idealized costs)."""
    from dataclasses import replace

    _refuse_options(args)
    hardware_args.check_context(args, args.stages, args.microbatches)
    shape = _shape(args)
    if not (args.system or args.profile):
        return shape, None
    from pipetab.solver.costs import SEARCH_TICKS_PER_OP

    try:
        costs = hardware_args.costs_of(args, shape_schedule(shape))
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise UsageError(f"{exc}") from None
    if args.memory_cap is not None:
        costs = replace(costs, capacity=(args.memory_cap,) * len(costs.capacity))
    tick = args.tick or costs.default_tick(SEARCH_TICKS_PER_OP)
    # bounds of the real-valued problem need durations rounded down; schedules are
    # searched with durations rounded up (their real time is at most the quantized one)
    q = costs.quantized(tick, "down" if args.mode == "bound" else "up")
    return replace(shape, costs=q, name=f"{args.placement} on {hardware_args.costs_label(args)}"), costs


def _ops_records(schedule, costs, scale: float = 1.0) -> list[dict]:
    """Op records (as in ``pipetab table``) timed by the simulator, times times ``scale``."""
    from pipetab.solver.simulate import simulate

    sim = simulate(schedule, costs)
    recs = []
    for op, s in sim.start.items():
        recs.append({"device": schedule.device_of(op), "start": s * scale, "duration": (sim.end[op] - s) * scale,
                     "kind": op.kind.value, "pipeline": op.pipeline, "stage": op.stage, "microbatch": op.microbatch})
    recs.sort(key=lambda r: (r["device"], r["start"]))
    return recs


def real_lower_bound(problem, real, result) -> float | None:
    """A lower bound in seconds that holds for the real-valued problem: the result's own
    bound when its durations were rounded down, else the analytic bound of the problem
    with durations rounded down."""
    from dataclasses import replace

    from pipetab.solver.cpsat import analytic_lower_bound

    if problem.costs.rounding == "down":
        return None if result.lower_bound is None else result.lower_bound * problem.costs.tick_s
    down = replace(problem, costs=real.quantized(problem.costs.tick_s, "down"))
    placement = down.fixed_placement
    if placement is None and result.schedule is None:
        return None
    lb, _ = analytic_lower_bound(down, placement)
    if placement is None:
        lb = min(lb, analytic_lower_bound(down.with_placement(result.schedule.placement),
                                          result.schedule.placement)[0])
    return lb * problem.costs.tick_s


def _real_known(name: str, args, real) -> float | None:
    """The simulator's real-valued makespan of the registry schedule ``name`` (with the
    problem's waves and chunks)."""
    from pipetab.schedules import registry
    from pipetab.solver.simulate import simulate

    names = {o.name for o in registry.spec(name).options}
    opts = {k: v for k, v in (("waves", args.waves), ("chunks", args.chunks)) if v is not None and k in names}
    try:
        return simulate(registry.generate(name, args.stages, args.microbatches, **opts), real).makespan
    except ValueError:
        return None


def run(args) -> None:
    from pipetab.solver.cpsat import CpSatConfig, bound, search
    from pipetab.solver.cpsat.result import gap_of
    from pipetab.solver.simulate import simulate

    problem, real = build_problem(args)
    config = CpSatConfig(time_limit_s=args.time_limit, workers=args.workers, known_generators=args.known_generators,
                         ablate=frozenset() if args.fifo else {"fifo"})
    layers, known_real = None, real
    if args.layers is not None or (args.system and args.partition and args.partition.mode != "even"):
        problem, result, real, known_real, layers = partition_args.solve_layers(args, problem, config)
    else:
        result = (search if args.mode == "search" else bound)(problem, config)
        result, layers = partition_args.even_on_hardware(args, problem, result)
    if real is None:
        unit = "slots"
        value, lb = result.in_slots(result.makespan), result.in_slots(result.lower_bound)
        known = {k: {"makespan": result.in_slots(v.makespan), "fits": v.fits, "gap": v.gap}
                 for k, v in result.known.items()}
        ops_costs = problem.costs
    else:
        # hardware: times of schedules by the simulator on the real-valued costs; bounds
        # of the real-valued problem (durations rounded down)
        unit = "s"
        period = args.objective == "period"
        value = None
        if result.schedule is not None:
            value = result.makespan * problem.costs.tick_s if period else simulate(result.schedule, real).makespan
        lb = None if result.status == "infeasible" else real_lower_bound(problem, real, result)
        if value is not None and lb is not None and lb > value + 1e-12:
            raise RuntimeError(f"lower bound {lb} s above the simulated {value} s: a rounding bug")
        known = {}
        for k, v in result.known.items():
            t = _real_known(k, args, known_real) if not period else (
                None if v.makespan is None else v.makespan * problem.costs.tick_s)
            known[k] = {"makespan": t, "fits": v.fits, "gap": gap_of(t, lb) if v.fits else None}
        ops_costs = real
    status, message = result.status, result.message
    if real is not None and status == "optimal" and (lb is None or value is None or lb < value - 1e-12):
        status = "feasible"
        message = ("optimal on the quantized durations; the real-valued time lies above the bound of "
                   "durations rounded down")
    doc = {
        "status": status,
        "objective": args.objective,
        "makespan": value,
        "lower_bound": lb,
        "gap": gap_of(value, lb),
        "unit": unit,
        "tick_slots": problem.costs.tick_slots if real is None else None,
        "tick_s": problem.costs.tick_s,
        "bound_assumptions": [a if real is None or not a.startswith("durations rounded up") else
                              "lower bound: durations rounded down to ticks (a bound of the real-valued problem); "
                              "schedules searched with durations rounded up, timed by the simulator"
                              for a in result.bound_assumptions],
        "runtime_s": round(result.runtime_s, 3),
        "time_to_first_s": result.time_to_first_s,
        "min_feasible_cap": result.min_feasible_cap,
        "message": message,
        "known": known,
        "partition": None if layers is None else [list(row) for row in layers],
        "phases": [ph.as_dict() for ph in result.log.phases],
    }
    if args.format == "json":
        scale = problem.costs.tick_slots if real is None else 1.0
        doc["ops"] = _ops_records(result.schedule, ops_costs, scale) if result.schedule is not None else []
        emit_json(doc)
        return
    _print(args, doc, result, ops_costs)


def _print(args, doc: dict, result, ops_costs) -> None:
    unit = doc["unit"]

    def f(x):
        return "-" if x is None else (f"{x:.6g}" if isinstance(x, float) else str(x))

    where = f"S={args.stages} B={args.microbatches}, placement {args.placement}"
    if args.split_backward:
        where += ", split backward"
    costs = (f"profile {args.profile}" if args.profile else
             f"system {hardware_args.costs_label(args)}, model {args.model or 'paper_gpt'}" if args.system else
             f"F={args.forward_slots or 1} B={args.backward_slots or 2}"
             + (f" W={args.weight_slots or 1} M_W/M={1.0 if args.weight_memory is None else args.weight_memory:g}"
                if args.split_backward else "") + f" C={args.comm_slots or 0} slots")
    cap = (f", activation cap {args.activation_cap:g} M_B" if args.activation_cap else
           f", memory cap {args.memory_cap:.4g} B" if args.memory_cap else
           ", device memory" if args.system or args.profile else ", no memory cap")
    print(f"{args.mode}: {where}; {costs}{cap}; objective {args.objective}")
    gap = "-" if doc["gap"] is None else f"{100 * doc['gap']:.2f}%"
    value = "-" if doc["makespan"] is None else f"{f(doc['makespan'])} {unit}"
    print(f"status {doc['status']}, {args.objective} {value}, lower bound "
          f"{f(doc['lower_bound'])}, gap {gap}, {doc['runtime_s']} s")
    if doc.get("min_feasible_cap") is not None:
        print(f"smallest feasible cap: {f(doc['min_feasible_cap'])}")
    if doc.get("partition"):
        print("partition (layers per stage): " + " / ".join(",".join(map(str, r)) for r in doc["partition"]))
    if doc.get("message"):
        print(doc["message"])
    print("bound holds under: " + ("; ".join(doc["bound_assumptions"]) or "no restriction"))
    for name, r in doc["known"].items():
        g = "-" if r["gap"] is None else f"{100 * r['gap']:.2f}%"
        print(f"  {name:<12} {args.objective} {f(r['makespan'])} {unit}, gap to bound {g}"
              f"{'' if r['fits'] else ' (does not fit the cap)'}")
    schedule = result.schedule
    if args.mode == "search" and schedule is not None and not (args.system or args.profile) and schedule.num_ops <= 400:
        from pipetab.schedules import formats
        from pipetab.schedules.table import PlacedOp, Table

        recs = _ops_records(schedule, ops_costs)
        entries = tuple(PlacedOp(_op(r), r["device"], int(r["start"]), int(r["duration"])) for r in recs)
        sys.stdout.write(formats.to_text(Table(schedule.num_devices, entries, "found")))


def _op(r):
    from pipetab.schedules.ops import Kind, Op

    return Op(Kind(r["kind"]), r["pipeline"], r["stage"], r["microbatch"])
