"""``pipetab search`` and ``pipetab bound``: the CP-SAT model from the command line.

The whole command — reading the options, building and solving the model, writing the
output — keeps to ``--time-limit``: the solver's ``Deadline`` begins when the process
began and ends early by the time the output is predicted to take (``OutputBudget``)."""

from __future__ import annotations

import json
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipetab.schedules.placements import PlacementFamily, traits
from pipetab.solver.cpsat.problem import TIME_OBJECTIVES, Objective

from . import common, hardware_args, partition_args
from .common import UsageError

_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class _TimeObjectives:
    """What ``--objective`` takes, as ``common.enum_choice`` reads it: the objectives
    ``search`` and ``bound`` minimize (the memory objective has its own entry)."""

    def __call__(self, text: str) -> Objective:
        value = Objective(text)
        if value not in TIME_OBJECTIVES:
            raise ValueError(text)
        return value

    def __iter__(self):
        return iter(TIME_OBJECTIVES)


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
        if not (value > 0 and math.isfinite(value)) or (upper is not None and value > upper):
            allowed = f"between 0 (exclusive) and {upper:g}" if upper is not None else "> 0 (finite)"
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
        p.add_argument("--placement", type=common.enum_choice(PlacementFamily), choices=list(PlacementFamily),
                       default=PlacementFamily.LINEAR,
                       help="linear (default), bidirectional (Chimera), wave (Hanayo), v (ZB-V, DualPipeV), "
                            "interleaved, free")
        p.add_argument("--waves", type=common.positive_int("waves"), default=None, help="waves for --placement wave")
        p.add_argument("--chunks", type=common.positive_int("chunks", minimum=2), default=None,
                       help="stages per device for --placement interleaved (default 2)")
        p.add_argument("--devices", type=common.positive_int("devices"), default=None,
                       help="devices for --placement free (default: S; at most S x --pipelines)")
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
        p.add_argument("--objective", type=common.enum_choice(_TimeObjectives()), choices=list(TIME_OBJECTIVES),
                       default=Objective.MAKESPAN,
                       help="makespan: one synchronous step (default); period: steady-state time of a repeated "
                            "step without a global barrier (longest device span)")
        p.add_argument("--system", help="system preset or TOML file (hardware costs instead of slots)")
        p.add_argument("--model", default=None, help="model preset or TOML file (default paper_gpt; with --system)")
        p.add_argument("--recompute", choices=["none", "selective", "full"], default=None,
                       help="activation recomputation (with --system, default none)")
        p.add_argument("--tick", type=_positive_float("tick"), default=None,
                       help="seconds per integer tick for hardware costs (default: 1/20 of the shortest op, refined "
                            "until rounding moves a schedule's time by at most 0.5%%)")
        cap = p.add_mutually_exclusive_group()
        cap.add_argument("--activation-cap", type=_positive_float("activation-cap"), default=None,
                         help="at most this many activations of a stage holding 1/S of the model (M_B) live on "
                              "any device (idealized costs)")
        cap.add_argument("--memory-cap", type=parse_bytes, default=None,
                         help="usable memory per device in bytes (e.g. 76.6GiB; default: the system's usable "
                              "memory, its device memory less its reserve, the figure plan prints); activations "
                              "get what persistent memory leaves")
        p.add_argument("--time-limit", type=_positive_float("time-limit"), default=30.0, help="seconds (default 30)")
        p.add_argument("--workers", type=common.positive_int("workers"), default=2, help="CP-SAT workers (default 2)")
        p.add_argument("--no-known", dest="known_generators", action="store_false",
                       help="start from the model's own greedy schedules only, not the registry's")
        p.add_argument("--no-fifo", dest="fifo", action="store_false",
                       help="do not fix every stage to one microbatch order (ablation: FIFO loses nothing for "
                            "identical microbatches and makes proofs much faster)")
        p.add_argument("--quiet", action="store_true", help="no live progress line on a terminal")
        p.add_argument("--format", choices=["text", "json", "torch-csv"], default="text",
                       help="text (default); json: the result and the schedule's ops as columns in integer ticks "
                            "(pipetab check reads it); torch-csv: the schedule in PyTorch's pipelining CSV")
        p.add_argument("--overlap-pairs", default=None, metavar="on|off",
                       help="with a MoE model's expert parallelism on --system: let CP-SAT run a forward and a "
                            "backward of different microbatches as one overlapped block, their all-to-alls "
                            "hidden under each other's compute (default on; off: every op alone)")
        p.add_argument("--no-ops", action="store_true",
                       help="leave the schedule out: no ops in JSON, no table in text (the summary only)")
        hardware_args.add_context_args(p)
        partition_args.add_partition_options(p)
        p.set_defaults(func=run, mode=name)


def _refuse_options(args) -> None:
    """One line for every option that does not apply to the others given."""
    hw = args.system is not None or args.profile is not None
    family = traits(args.placement)
    rules = [
        (args.waves is not None and family.size_option != "waves",
         "--waves applies to --placement wave only"),
        (args.chunks is not None and family.size_option != "chunks",
         "--chunks applies to --placement interleaved only"),
        ((args.devices or args.pipelines) and family.fixed,
         "--devices and --pipelines apply to --placement free only"),
        (args.devices is not None and args.devices > args.stages * (args.pipelines or 1),
         f"--devices must be at most the stages of the pipelines, {args.stages * (args.pipelines or 1)}: each "
         f"stage runs on one device, so more devices would stay idle"),
        (args.weight_slots is not None and not args.split_backward, "--weight-slots needs --split-backward"),
        (args.weight_memory is not None and not args.split_backward, "--weight-memory needs --split-backward"),
        (hw and args.comm_slots is not None, "--comm-slots goes with idealized costs; with --system or --profile "
                                             "messages cost what the system's links say"),
        (hw and any(x is not None for x in (args.forward_slots, args.backward_slots, args.weight_slots)),
         "--forward-slots, --backward-slots and --weight-slots go with idealized costs; with --system op times "
         "come from the model's FLOPs, with --profile from the profile"),
        (hw and args.weight_memory is not None, "--weight-memory goes with idealized costs; with --system or "
                                                "--profile M_W is derived per layer"),
        (hw and args.activation_cap is not None, "--activation-cap goes with idealized costs; with --system or "
                                                 "--profile use --memory-cap"),
        (not hw and args.memory_cap is not None, "--memory-cap needs --system (bytes need a model); use "
                                                 "--activation-cap"),
        (not hw and args.model is not None, "--model needs --system"),
        (not hw and args.recompute is not None, "--recompute needs --system (idealized activations count 1 each)"),
        (not hw and args.tick is not None, "--tick needs --system (idealized costs are already integers)"),
        (hw and args.placement is PlacementFamily.FREE and args.devices not in (None, args.stages),
         "--devices with --system is not supported (the costs come from an S-device shape)"),
    ]
    rules += [
        (args.format == "torch-csv" and not family.torch_csv(args.pipelines or 1),
         "--format torch-csv holds one pipeline; --placement bidirectional and --pipelines 2 have two"),
        (args.format == "torch-csv" and args.no_ops, "--no-ops leaves nothing for --format torch-csv to write"),
    ]
    for bad, why in rules + partition_args.partition_rules(args):
        if bad:
            raise UsageError(f"{why}")


def _shape(args):
    from pipetab.solver.cpsat import idealized_problem

    kw = dict(waves=args.waves or 1, chunks=args.chunks or 2, split_backward=args.split_backward,
              objective=args.objective)
    if args.placement is PlacementFamily.FREE:
        kw.update(devices=args.devices, pipelines=args.pipelines or 1)
    if args.system or args.profile:
        return idealized_problem(args.stages, args.microbatches, args.placement, **kw)
    return idealized_problem(
        args.stages, args.microbatches, args.placement, forward=args.forward_slots or 1,
        backward=args.backward_slots or 2, weight=args.weight_slots or 1, comm=args.comm_slots or 0,
        activation_cap=args.activation_cap, weight_memory=1.0 if args.weight_memory is None else args.weight_memory,
        **kw)


def build_problem(args):
    """The problem's shape (idealized costs: the problem itself) and, on hardware, its
    real-valued costs in seconds (None for idealized costs)."""
    from dataclasses import replace

    from pipetab.solver.partition import shape_schedule

    _refuse_options(args)
    hardware_args.check_context(args, args.stages, args.microbatches)
    shape = _shape(args)
    if not (args.system or args.profile):
        if args.overlap_pairs is not None:
            raise UsageError("--overlap-pairs needs --system with a MoE model and --ep (idealized ops hold no "
                             "communication to hide)")
        return shape, None
    try:
        costs = hardware_args.costs_of(args, shape_schedule(shape))
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise UsageError(f"{exc}") from None
    if args.memory_cap is not None:
        costs = replace(costs, capacity=(args.memory_cap,) * len(costs.capacity))
    shape = replace(shape, name=f"{args.placement} on {hardware_args.costs_label(args)}")
    if costs.offload_fraction:
        _refuse_with_offload(args)
    return replace(shape, overlap_pairs=_overlap_pairs(args, bool(costs.chains) and not costs.offload_fraction)), costs


def _refuse_with_offload(args) -> None:
    """What CP-SAT's offload decisions (``cpsat.decompose.offload``) do not take, one line each."""
    partitioned = args.layers is not None or (args.partition is not None and args.partition.mode != "even")
    for bad, why in ((args.placement is PlacementFamily.FREE, "a fixed placement, not --placement free"),
                     (partitioned, "the even partition, not --partition or --layers"),
                     (args.objective is not Objective.MAKESPAN, "--objective makespan"),
                     (args.overlap_pairs not in (None, "off"), "ops run alone, not --overlap-pairs on"),
                     (getattr(args, "contention", False), "links without --contention")):
        if bad:
            raise UsageError(f"--offload-activations (CP-SAT choosing which activations go to host memory) needs "
                             f"{why}")


def _overlap_pairs(args, chains: bool) -> bool:
    """Whether the search may overlap forward-backward pairs: ``--overlap-pairs`` (default
    on where an op's costs hold communication to hide), refused where it cannot apply."""
    from pipetab.schedules import registry

    partitioned = args.partition is not None and args.partition.mode == "free"
    if args.overlap_pairs is None:
        return (chains and args.placement is not PlacementFamily.FREE and args.objective is Objective.MAKESPAN
                and not partitioned)
    try:
        on = registry.parse_flag(args.overlap_pairs)
    except ValueError as exc:
        raise UsageError(f"--{exc.args[0]}") from None
    if on and not chains:
        raise UsageError("--overlap-pairs on needs an op that communicates inside it (a MoE model with expert "
                         "parallelism, --ep): there is nothing for a pair to hide")
    if on and args.placement is PlacementFamily.FREE:
        raise UsageError("--overlap-pairs on needs a fixed placement, not --placement free")
    if on and args.objective is not Objective.MAKESPAN:
        raise UsageError("--overlap-pairs on needs --objective makespan")
    if on and partitioned:
        raise UsageError("--overlap-pairs on goes with an even or given partition, not --partition free (its "
                         "bounds count ops one at a time)")
    return on


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


def _doc(args, result, **fields) -> dict:
    """The JSON document of a result: its own fields, ``fields`` on top."""
    doc = {"status": str(result.status), "objective": str(args.objective), "makespan": result.makespan,
           "lower_bound": result.lower_bound, "gap": result.gap, "unit": result.unit,
           "tick_slots": result.tick_slots, "tick_s": result.tick_s,
           "bound_assumptions": list(result.bound_assumptions), "runtime_s": round(result.runtime_s, 3),
           "time_to_first_s": result.time_to_first_s, "min_feasible_cap": result.min_feasible_cap,
           "message": result.message, "known": {k: v.as_dict() for k, v in result.known.items()},
           "partition": None, "phases": result.log.as_list(), "devices": args.devices or args.stages,
           "cyclic": _cyclic_doc(result.cyclic, result.tick_slots if result.unit == "slots" else result.tick_s)}
    doc.update(fields)
    return doc


def _cyclic_doc(info, scale: float | None) -> dict | None:
    """What the cyclic phase proved, in the output's unit (slots or seconds)."""
    if info is None:
        return None
    scale = scale or 1.0
    return {**info.as_dict(), "period": info.period * scale, "period_bound": info.period_bound * scale,
            "per_microbatch": info.period * scale / info.block, "unit_ticks": scale,
            "blocks": [[k, None if p is None else p * scale, b * scale] for k, p, b in info.blocks]}


def _slots_doc(args, shape, config, deadline):
    """Idealized costs: the CP-SAT result as it is, in slots."""
    from pipetab.solver.cpsat import bound, search

    return _slots_doc_of(args, (search if args.mode == "search" else bound)(shape, config, deadline=deadline), shape)


def _slots_doc_of(args, result, problem):
    known = {k: {"makespan": result.in_slots(v.makespan), "fits": v.fits, "gap": v.gap}
             for k, v in result.known.items()}
    doc = _doc(args, result, makespan=result.in_slots(result.makespan), known=known,
               lower_bound=result.in_slots(result.lower_bound))
    return doc, result.schedule, problem.costs


def _seconds_doc(args, shape, real, config, deadline):
    """Hardware or profiled costs: ``cpsat.api.solve_seconds`` (the answer sweeps and
    ``plan`` give the same question), its schedule timed on the real-valued costs; the
    ops in ticks of durations rounded up."""
    from pipetab.solver.costs import Rounding
    from pipetab.solver.cpsat.api import solve_seconds

    answer = solve_seconds(shape, real, args.mode, config, tick_s=args.tick, deadline=deadline)
    res = answer.result
    assumptions, layers = list(answer.assumptions), None
    if args.system:
        layers, label = partition_args.even_layers_of(args, shape)
        assumptions = [label if a.startswith("stage partition") else a for a in assumptions]
    phases = [{**ph, "rounding": rounding} for solve, rounding in ((answer.search, "up"), (answer.bound, "down"))
              if solve is not None for ph in solve.log.as_list()]
    doc = _doc(args, res, status=str(answer.status), makespan=answer.seconds, lower_bound=answer.lower_bound_s,
               gap=answer.gap, unit="s", tick_s=answer.tick_s, bound_assumptions=assumptions,
               runtime_s=round(answer.runtime_s, 3), message=answer.message, rounding=answer.rounding,
               min_feasible_cap=answer.bound.min_feasible_cap if res.min_feasible_cap is None else res.min_feasible_cap,
               known={k: v.as_dict() for k, v in answer.known.items()},
               partition=None if layers is None else [list(r) for r in layers], phases=phases,
               cyclic=_cyclic_doc(res.cyclic, answer.tick_s))
    doc.pop("tick_slots")
    doc["_real"] = real
    return doc, answer.schedule, real.quantized(answer.tick_s, Rounding.UP)


def _partition_doc(args, shape, config, deadline):
    """The stage partition as a decision (``--partition free|LIST`` on hardware, or
    ``--layers``): its search, the chosen split's schedule timed on its real costs."""
    from pipetab.solver.costs import Rounding
    from pipetab.solver.cpsat.api import partition_seconds

    problem, result, real, known_real, layers = partition_args.solve_layers(args, shape, config, deadline)
    if real is None:
        doc, _, costs = _slots_doc_of(args, result, problem)
        return {**doc, "partition": [list(r) for r in layers] if layers else None}, result.schedule, costs
    answer = partition_seconds(problem, result, real, known_real, args.stages, args.microbatches)
    tick = answer.tick_s
    doc = _doc(args, result, status=str(answer.status), makespan=answer.seconds, lower_bound=answer.lower_bound_s,
               gap=answer.gap, unit="s", tick_s=tick, message=answer.message,
               known={k: v.as_dict() for k, v in answer.known.items()},
               partition=None if layers is None else [list(r) for r in layers])
    doc.pop("tick_slots")
    doc["_real"] = real
    return doc, result.schedule, real.quantized(tick, Rounding.UP) if tick else problem.costs


def _offload_doc(args, shape, real, config, deadline):
    """Costs that offload activations (``--offload-activations``): CP-SAT chooses which
    activations move that share to host memory beside the orders (``offload_seconds``), the
    schedule timed with its copies by the simulator on the real costs."""
    from pipetab.solver.costs import Rounding
    from pipetab.solver.cpsat.decompose.offload import offload_seconds
    from pipetab.solver.cpsat.result import Status

    # the command's deadline, output budget kept back, as the other CP-SAT paths take it
    answer = offload_seconds(shape, real, config.replace(time_limit_s=max(0.05, deadline.wall_left())), args.tick)
    sim = answer.sim
    gap = None if answer.makespan is None or answer.bound is None else \
        max(0.0, answer.makespan - answer.bound) / answer.makespan
    copies = [] if sim is None else sim.copies
    message = "" if sim is not None else "no schedule fits the memory cap with this offload share" \
        if answer.status is Status.INFEASIBLE else "no schedule found within the time limit and the memory cap"
    doc = {"status": str(answer.status), "objective": str(args.objective), "makespan": answer.makespan,
           "lower_bound": answer.bound, "gap": gap, "unit": "s", "tick_s": answer.tick_s,
           "bound_assumptions": list(answer.assumptions), "runtime_s": round(time.perf_counter() - _started(args), 3),
           "min_feasible_cap": None, "message": message, "known": {}, "partition": None, "phases": [],
           "devices": args.devices or args.stages, "cyclic": None,
           "offload": {"share": real.offload_fraction, "offloaded": len({c.key for c in copies}),
                       "copies": len(copies), "host_peak_bytes": [] if sim is None else list(sim.host_peaks(1))}}
    tick = answer.tick_s or 1.0  # offload_seconds gives its tick
    ticks = real.quantized(tick, Rounding.UP)
    if sim is not None:
        doc["_sims"] = (_tick_sim(sim, tick), sim)
    doc["_real"] = real
    return doc, None if sim is None else sim.schedule, ticks


def _tick_sim(sim, tick: float):
    """``sim`` with its times in ticks of ``tick`` (the JSON's integer columns)."""
    from dataclasses import replace

    return replace(sim, start_times=sim.start_times / tick, end_times=sim.end_times / tick)


@dataclass(frozen=True)
class OutputBudget:
    """What the command keeps back from ``--time-limit`` for its output, in CPU seconds of
    an idle machine times the process's measured ``contention``: ``fixed_s`` plus, per op
    of the schedule, ``json_s_per_op`` (timing the ops and writing them as columns; with
    costs in seconds ``times_s_per_op`` more for their times) or ``torch_s_per_op`` (laying
    the schedule out and writing torch's CSV); ``text_s`` for the summary, and
    ``exit_s_per_op`` for the interpreter freeing the problem's objects as the process ends;
    at most ``most_share`` of the limit. Each about 1.5 times the CPU time measured on 1F1B
    at S=128, B=4,096 (1,048,576 ops: 0.59 s for JSON or torch CSV, 0.08 s to exit) and on
    Llama 3 70B at S=64, B=1,024 (131,072 ops, 0.21 s for JSON with ``times_s``)."""

    fixed_s: float = 0.15
    json_s_per_op: float = 1e-6
    times_s_per_op: float = 1.5e-6
    torch_s_per_op: float = 1e-6
    text_s: float = 0.05
    exit_s_per_op: float = 1.5e-7
    most_share: float = 0.5

    def seconds(self, args, num_ops: int, contention: float = 1.0, timed: bool = False) -> float:
        """At most ``most_share`` of the limit: the solves need time to find something.
        ``timed``: the ops' times in seconds are written too (JSON of costs in seconds)."""
        if args.no_ops or args.format == "text":
            write = self.text_s
        elif args.format == "torch-csv":
            write = self.torch_s_per_op * num_ops
        else:
            write = (self.json_s_per_op + self.times_s_per_op * timed) * num_ops
        cpu = self.fixed_s + write + self.exit_s_per_op * num_ops
        return min(self.most_share * args.time_limit, cpu * contention)


def contention(started: float) -> float:
    """How many times longer than its CPU time the process has taken since ``started`` (its
    interpreter's start-up and imports: 3.0 at load 10 on 2 cores, where writing 1M ops of
    JSON took 2.6 times its CPU time), between 1 and 8; 1 when started just now (in-process)."""
    wall, cpu = time.perf_counter() - started, time.process_time()
    return min(8.0, max(1.0, wall / cpu)) if wall > 0.05 and cpu > 0 else 1.0


def _started(args) -> float:
    """When the command began (``time.perf_counter`` time): the process's start when run
    as ``pipetab`` (its interpreter's start-up counts against the limit), else now."""
    now = time.perf_counter()
    name = Path(sys.argv[0]).name if sys.argv else ""
    if name not in ("pipetab", "__main__.py") or args.mode not in sys.argv[1:2]:
        return now
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        import os

        return now - max(0.0, min(uptime - ticks / os.sysconf("SC_CLK_TCK"), 5.0))
    except (OSError, ValueError, IndexError):
        return now


def run(args) -> None:
    from pipetab.solver.cpsat import CpSatConfig

    started = _started(args)
    shape, real = build_problem(args)
    # the CP-SAT entry of this command: its one config and deadline, from the command line
    config = CpSatConfig(time_limit_s=args.time_limit, workers=args.workers, known_generators=args.known_generators,
                         ablate=frozenset() if args.fifo else {"fifo"})
    output = OutputBudget().seconds(args, shape.num_ops, contention(started), real is not None)
    limit = max(0.05 * args.time_limit, args.time_limit - output)
    deadline = config.replace(time_limit_s=limit).deadline(t0=started)
    from pipetab.console import Progress

    with Progress(args.mode, quiet=getattr(args, "quiet", False)) as progress:
        progress(f"CP-SAT {'searching' if args.mode == 'search' else 'bounding'} {shape.num_ops} ops",
                 budget_s=args.time_limit)
        if args.layers is not None or (args.system and args.partition and args.partition.mode != "even"):
            doc, schedule, ops_costs = _partition_doc(args, shape, config, deadline)
        elif real is not None and real.offload_fraction:
            doc, schedule, ops_costs = _offload_doc(args, shape, real, config, deadline)
        elif real is not None:
            doc, schedule, ops_costs = _seconds_doc(args, shape, real, config, deadline)
        else:
            doc, schedule, ops_costs = _slots_doc(args, shape, config, deadline)
    real_costs = doc.pop("_real", None)  # the schedule's costs in seconds (hardware, a profile)
    sims = doc.pop("_sims", None)
    if args.format == "json":
        _emit_json(doc, None if args.no_ops else schedule, ops_costs, real_costs, sims)
    elif args.format == "torch-csv":
        _emit_torch_csv(schedule)
    else:
        _print(args, doc, schedule, ops_costs)


def ops_columns(schedule, costs, real=None, sims=None) -> tuple[dict, dict | None]:
    """The schedule's ops as columns (``device``, ``start``, ``duration``, ``kind`` as one
    string of letters, ``pipeline``, ``stage``, ``microbatch``; ``device`` and
    ``pipeline``, long runs of equal values, as ``{"runs": [[value, count], ...]}`` where
    that is shorter, ``_runs``), by device and start,
    timed by the simulator on integer ``costs`` (ticks): the compact form of a table that
    ``schedules.formats.from_json`` reads; with ``real`` costs in seconds also the ops'
    ``start`` and ``end`` there, in the same order; ``sims``: those two simulations, made
    already (an offload search's, its copies in them)."""
    import numpy as np

    from pipetab.solver.simulate import simulate

    sim = sims[0] if sims else simulate(schedule, costs)
    start = np.rint(sim.start_times).astype(np.int64)
    duration = np.rint(sim.end_times).astype(np.int64) - start
    order = np.lexsort((start, schedule.device))
    ops = schedule.ops
    cols = {"device": _runs(schedule.device[order]), "start": start[order].tolist(),
            "duration": duration[order].tolist(),
            "kind": "".join(np.array(["F", "B", "W"])[ops.kind[order]].tolist()),
            "pipeline": _runs(ops.pipeline[order]), "stage": ops.stage[order].tolist(),
            "microbatch": ops.microbatch[order].tolist()}
    if real is None:
        return cols, None
    timed = sims[1] if sims else simulate(schedule, real)
    return cols, {"start": timed.start_times[order].tolist(), "end": timed.end_times[order].tolist()}


def _runs(values) -> list | dict:
    """A column as a list, or as ``{"runs": [[value, count], ...]}`` when it has fewer
    than a quarter as many runs of equal values as values (device, pipeline and stage
    columns sorted by device: a few runs)."""
    import numpy as np

    change = np.flatnonzero(np.diff(values)) + 1
    if 4 * (len(change) + 1) >= len(values):
        return values.tolist()
    bounds = np.concatenate([[0], change, [len(values)]])
    return {"runs": np.stack([values[bounds[:-1]], np.diff(bounds)], axis=1).tolist()}


def _emit_json(doc: dict, schedule, ops_costs, real=None, sims=None) -> None:
    """The document with its ops as compact columns (``ops_columns``; an empty list
    without a schedule) and, in seconds, ``times_s``; indented except the columns."""
    head = json.dumps({k: v for k, v in doc.items()}, indent=1)
    if schedule is None:
        sys.stdout.write(head[:-2] + ',\n "ops": []\n}\n')
        return
    cols, seconds = ops_columns(schedule, ops_costs, real, sims)

    def block(name: str, values: dict) -> str:
        body = ",\n".join(f'  "{k}": {json.dumps(v, separators=(",", ":"))}' for k, v in values.items())
        return f',\n "{name}": {{\n' + body + "\n }"

    tail = block("ops", cols) + ("" if seconds is None else block("times_s", seconds))
    sys.stdout.write(head[:-2] + tail + "\n}\n")


def _emit_torch_csv(schedule) -> None:
    """The schedule in PyTorch's compute-only CSV (its per-rank order laid out on slots)."""
    from pipetab.schedules import formats
    from pipetab.schedules.table import layout

    if schedule is None:
        raise UsageError("no schedule was found within the time limit: nothing to write as torch CSV")
    sys.stdout.write(formats.to_torch_csv(layout(schedule)))


def _print(args, doc: dict, schedule, ops_costs) -> None:
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
           f", usable memory {args.memory_cap / 2**30:.1f} GiB per device (--memory-cap {args.memory_cap:.4g} B)"
           if args.memory_cap else
           ", the system's usable memory" if args.system or args.profile else ", no memory cap")
    print(f"{args.mode}: {where}; {costs}{cap}; objective {args.objective}")
    gap = "-" if doc["gap"] is None else f"{100 * doc['gap']:.2f}%"
    if doc.get("rounding") is not None and doc["gap"]:
        gap += (f" (rounding to ticks of {doc['tick_s']:.3g} s moves the schedule's time by "
                f"{100 * doc['rounding']:.2f}%)")
    value = "-" if doc["makespan"] is None else f"{f(doc['makespan'])} {unit}"
    bound = "-" if doc["lower_bound"] is None else f"{f(doc['lower_bound'])} {unit}"
    print(f"status {doc['status']}, {args.objective} {value}, lower bound {bound}, gap {gap}, {doc['runtime_s']} s")
    if doc.get("min_feasible_cap") is not None:
        print(f"smallest feasible cap: {f(doc['min_feasible_cap'])}")
    if doc.get("offload"):
        off = doc["offload"]
        print(f"offload: {off['offloaded']} activations move {off['share']:g} of themselves to host memory and back "
              f"({off['copies']} copies on the copy streams)")
    if doc.get("partition"):
        print("partition (layers per stage): " + " / ".join(",".join(map(str, r)) for r in doc["partition"]))
        print(f"pipeline_model_parallel_layout: {_layout_text(doc['partition'][0])}")
    if doc.get("message"):
        print(doc["message"])
    cyc = doc.get("cyclic")
    if cyc:
        proven = "proven least" if cyc["proven"] else f"least possible {f(cyc['period_bound'])}"
        print(f"steady state: a block of {cyc['block']} microbatches every {f(cyc['period'])} {unit} "
              f"({f(cyc['per_microbatch'])} per microbatch; {proven} among periodic schedules of that block"
              + (" with overlapped pairs" if cyc.get("pairs") else "")
              + (", durations rounded up" if unit == "s" else "") + ")")
    print("bound holds under: " + ("; ".join(doc["bound_assumptions"]) or "no restriction"))
    for name, r in doc["known"].items():
        g = "-" if r["gap"] is None else f"{100 * r['gap']:.2f}%"
        print(f"  {name:<12} {args.objective} {f(r['makespan'])} {unit}, gap to bound {g}"
              f"{'' if r['fits'] else ' (does not fit the cap)'}")
    if (args.mode == "search" and not args.no_ops and schedule is not None and not (args.system or args.profile)
            and schedule.num_ops <= 400):
        from pipetab.schedules import formats
        from pipetab.schedules.table import PlacedOp, Table

        recs = _ops_records(schedule, ops_costs)
        entries = tuple(PlacedOp(_op(r), r["device"], int(r["start"]), int(r["duration"])) for r in recs)
        sys.stdout.write(formats.to_text(Table(schedule.num_devices, entries, "found")))


def _op(r):
    from pipetab.schedules.ops import Kind, Op

    return Op(Kind(r["kind"]), r["pipeline"], r["stage"], r["microbatch"])


def _layout_text(layers) -> str:
    """Megatron's layout string of one pipeline's layers per stage ('-' when a stage would
    hold nothing)."""
    from pipetab.hardware.layout import Layout

    try:
        return Layout.of_layers(layers).megatron()
    except ValueError:
        return "-"
