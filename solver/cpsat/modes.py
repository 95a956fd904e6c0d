"""The modes of the CP-SAT model — evaluate, search, bound — plus the memory front and
the layer-split search, each returning a solver-independent ``Result``.

Every schedule a mode returns is re-timed by the solver-free evaluator (the simulator on
the problem's integer costs), whose objective is asserted to be no worse than the
solver's, memory-checked, and its table validated. The search on a fixed placement is
``strategy``'s; free placement solves one fixed placement after another.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Sequence

from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.costs import Costs

from .bounds import analytic_lower_bound, cap_violations, min_feasible_cap, period_horizon, safe_horizon
from .config import CpSatConfig
from .constraints import devices_identical
from .incumbent import checked, hint_incumbent
from .justify import justify, precedence_graph
from .mirror import mirror_pairs
from .model import CpSatModel
from .oracle import (KnownEval, evaluate_known, greedy_schedule, microbatch_spacing, relabel_microbatches,
                     stage_limits, warmup_depths)
from .problem import Problem, family_placement
from .result import KnownGap, PhaseRecord, Result, SolverInfo, gap_of
from .strategy import Clock, SearchState, bound_phase, search_phase, solve_record
from .variables import BuildTimeout

_FIFO_LABEL = (
    "every stage runs a pipeline's microbatches in one order (FIFO) — without loss of "
    "generality for identical microbatches: relabelling the k-th op of each kind on each "
    "stage as microbatch k keeps every time, dependency and memory profile"
)
_SYM_LABEL = "stage-0 forwards start in microbatch order (relabelling symmetry, without loss of generality)"

# Predicted cost of the start's steps and of a model build, in units of one evaluation of
# a schedule by the simulator (ratios of their times on a long pipeline, docs/cpsat.md).
_COST = {"evaluate": 1.0, "greedy": 3.0, "justify": 12.0, "build": 10.0}
# a model is built only when the time left holds this many builds (build, presolve, search)
_BUILDS_LEFT = 2.5
# the share of the time the start may take before it stops trying further schedules
# (once it has one that fits; before, it may take all the time)
_START_SHARE = 0.3
# above this many ops a known schedule that breaks the cap is not timed
_TIME_UNFIT_OPS = 20000


# ---- helpers ---------------------------------------------------------------------------------
def _base_assumptions(problem: Problem, placement_label: str) -> list[str]:
    out = [placement_label]
    if len(set(problem.microbatch2pipeline)) > 1:
        out.append("microbatch-to-pipeline assignment fixed")
    out.append("stage partition fixed (op times as given)")
    c = problem.costs
    if c.tick_s is not None:
        if c.rounding == "down":
            out.append(f"durations rounded down to ticks of {c.tick_s:g} s (a lower bound of the real-valued problem)")
        else:
            out.append(f"durations rounded up to ticks of {c.tick_s:g} s (bound of the quantized problem)")
    elif c.unit == "slots":
        out.append("idealized slot costs" + (f", ticks of {c.tick_slots:g} slot" if c.tick_slots != 1 else ""))
    if any(problem.cap(d) is not None for d in range(problem.num_devices)):
        if problem.split_backward:
            out.append("activation live from its F's start: M - M_W to its B's end, M_W to its W's end")
        else:
            out.append("activation live from its F's start to its B's end")
    if problem.objective == "period":
        out.append("objective: the longest device span from its first op's start to its last op's end "
                   "(steady state without a global barrier; all-reduce and optimizer not counted)")
    return out


def _search_assumptions(problem: Problem, placement_label: str, applied: Iterable[str]) -> tuple[str, ...]:
    out = _base_assumptions(problem, placement_label)
    applied = set(applied)
    if "fifo" in applied:
        out.append(_FIFO_LABEL)
    elif "symmetry break" in applied:
        out.append(_SYM_LABEL)
    if "device symmetry" in applied:
        out.append("device relabelling symmetry (identical devices, uniform links; without loss of generality)")
    return tuple(out)


_FAMILY_LABELS = {
    "linear": "linear (stage d on device d)",
    "bidirectional": "bidirectional (down s->s, up s->S-1-s)",
    "wave": "wave (stages zig-zag over devices)",
    "v": "v (device d holds stages d and 2S-1-d)",
    "interleaved": "interleaved (stage s on device s mod S)",
}


def _placement_label(problem: Problem, placement: Placement | None) -> str:
    if placement is None:
        return "placement free"
    if isinstance(problem.placement, str) and problem.placement != "free":
        return f"placement fixed: {_FAMILY_LABELS[problem.placement]}"
    return f"placement fixed: {[list(x) for x in placement.stage2device]}"


def _solver_info(config: CpSatConfig, families=(), stopped_by=None) -> SolverInfo:
    return SolverInfo(config.workers, config.random_seed, tuple(config.portfolio() or ()), config.time_limit_s,
                      config.deterministic_time, tuple(families), stopped_by)


def _registry_options(problem: Problem) -> dict[str, dict]:
    S, n0 = problem.num_devices, problem.num_stages[0]
    opts = {}
    if problem.num_pipelines == 1 and n0 % (2 * S) == 0:
        opts["waves"] = n0 // (2 * S)
    if problem.num_pipelines == 1 and n0 % S == 0 and n0 >= 2 * S:
        opts["chunks"] = n0 // S
    return opts


def _registry_schedules(problem: Problem, placement: Placement) -> Iterator[Schedule]:
    """The registry's schedules (default options; Hanayo with the problem's waves,
    interleaved with its chunks) of the problem's shape and placement — under a memory
    cap those of least formula peak memory first, else those of least formula bubble.
    The shape is checked on a small instance first, so large problems generate only
    those that fit it."""
    from pipetab.schedules import registry

    S, B = problem.num_devices, problem.num_microbatches
    fixed = problem.with_placement(placement)
    extra = _registry_options(problem)
    capped = any(problem.cap(d) is not None for d in range(S))
    family = problem.placement if isinstance(problem.placement, str) and problem.placement != "free" else None
    candidates = []
    for name, spec in registry.REGISTRY.items():
        names = {o.name for o in spec.options}
        opts = {k: v for k, v in extra.items() if k in names}
        try:
            if not _shape_fits(_generate(name, *_PROBE, tuple(opts.items())), problem, placement, family):
                continue
            f = spec.formula(S, B, **opts)
        except (ValueError, TypeError):
            continue
        peak = max(f.peak_activations) if f.peak_activations else math.inf
        key = peak if capped else (f.bubble_ratio if f.bubble_ratio is not None else math.inf)
        candidates.append((key, name, opts))
    for _, name, opts in sorted(candidates, key=lambda c: (c[0], c[1])):
        try:
            s = _generate(name, S, B, tuple(opts.items()))
        except (ValueError, TypeError):
            continue
        if fixed.matches(s) is None:
            yield s


@functools.lru_cache(maxsize=16)
def _generate(name: str, stages: int, microbatches: int, opts: tuple) -> Schedule:
    """A registry schedule (schedules are immutable: a free-placement search asks for the
    same ones once per placement)."""
    from pipetab.schedules import registry

    return registry.generate(name, stages, microbatches, **dict(opts))


# (devices, microbatches) of the small instance that tells a generator's shape
_PROBE = (4, 8)


def _shape_fits(probe: Schedule, problem: Problem, placement: Placement, family: str | None) -> bool:
    """Whether a generator's small ``probe`` has the problem's shape: split, stages per
    device, and the problem's placement family at the probe's size (a given placement:
    the probe's placement scaled up must be it — only checked on the full schedule)."""
    S = problem.num_devices
    if probe.split_backward != problem.split_backward or probe.num_pipelines != problem.num_pipelines:
        return False
    n = tuple(probe.num_stages(p) for p in range(probe.num_pipelines))
    if any(a * S != b * probe.num_devices for a, b in zip(n, problem.num_stages)):
        return False
    if family is None:
        return True
    try:
        return family_placement(family, probe.num_devices, n).stage2device == probe.placement.stage2device
    except ValueError:
        return False


def greedy_starts(problem: Problem, placement: Placement) -> Iterator[Schedule]:
    """The model's own starting schedules: greedy memory-aware list schedules, the
    reserving one-microbatch-window kinds first (they never deadlock and fit any feasible
    cap), then, with a split backward on one stage per device, Zero Bubble style ones
    (each device's warm-up depth from ``warmup_depths``, plus 0 or 1; W only when no B or
    fitting F is ready), with several stages per device the least-slack ones
    (``_slack_starts``, under a cap also with per-stage warm-up depths from each
    activation's lifetime, ``stage_limits``), then wider admission windows and
    forward-first priorities, and with one stage per device the least-slack ones last."""
    B, D = problem.num_microbatches, problem.num_devices
    capped = any(problem.cap(d) is not None for d in range(D))
    if capped:
        yield from filter(None, [greedy_schedule(problem, placement, None, True, "greedy-reserve", reserve=True)])
    depths = warmup_depths(problem) if problem.split_backward else None
    for extra in (0, 1) if depths else ():
        s = greedy_schedule(problem, placement, None, name=f"greedy-zb{extra}", priority="BFW",
                            inflight={(0, s): n + extra for s, n in enumerate(depths)})
        if s is not None:
            yield s
    several = len(problem.stages) > D
    if several:
        yield from _slack_starts(problem, placement, capped)
    for w in sorted({D, B, 2 * D, 1}, reverse=False if capped else True):
        if w > B:
            continue
        for bf in (True, False):
            if w == 1 and not bf:
                continue
            s = greedy_schedule(problem, placement, w, bf, name=f"greedy-w{w}{'' if bf else '-ff'}")
            if s is not None:
                yield s
    if capped:
        s = greedy_schedule(problem, placement, None, False, "greedy-reserve-ff", reserve=True)
        if s is not None:
            yield s
    if not several:
        yield from _slack_starts(problem, placement, capped)


# least-slack list schedules as (multiple of the microbatch spacing, per-stage warm-up
# depth scale of ``stage_limits`` or None: only the cap limits them), in the order tried.
# Measured on the capped bidirectional instances of ``experiments/bench_cpsat.py``: without
# depths the best at C=0, depths near 1 at C=1 (S=16, B=64, cap 16: 271 at 1.1, 287-299 at 1)
SLACK_STARTS = ((1, None), (2 / 3, None), (4 / 3, None), (1 / 2, None), (4 / 3, 1.0), (1, 1.0), (5 / 3, 1.0),
                (7 / 6, 1.1), (4 / 3, 1.1), (5 / 3, 1.1), (1 / 2, 1.1), (4 / 3, 1.25), (7 / 6, 1.5))


def _slack_starts(problem: Problem, placement: Placement, capped: bool) -> Iterator[Schedule]:
    """Least-slack list schedules (``greedy_schedule``'s ``slack``) of ``SLACK_STARTS``
    (without a cap, those without warm-up depths)."""
    spacing = microbatch_spacing(problem, placement)
    for k, depth in SLACK_STARTS:
        if depth is not None and not capped:
            continue
        inflight = None if depth is None else stage_limits(problem, placement, depth)
        s = greedy_schedule(problem, placement, None, name=f"greedy-slack{k:.2f}" + (f"-d{depth:g}" if depth else ""),
                            inflight=inflight, slack={p: k * u for p, u in spacing.items()})
        if s is not None:
            yield s


def auto_known(problem: Problem, placement: Placement) -> list[Schedule]:
    """Known schedules of this problem: the registry's of its shape and placement, and the
    greedy list schedules (``greedy_starts``)."""
    return list(_registry_schedules(problem, placement)) + list(greedy_starts(problem, placement))


class _Pace:
    """Predicts the start's steps and a model build from the measured time of one
    evaluation (``_COST``); under a deterministic limit nothing is skipped for time."""

    def __init__(self, clock: Clock, num_ops: int):
        self.clock = clock
        self.unit: float | None = None
        self.num_ops = num_ops

    def measured(self, seconds: float) -> None:
        if self.unit is None:
            self.unit = max(seconds, 1e-4)

    def fits(self, step: str, until: float, times: float = 1.0) -> bool:
        """Whether ``step`` is predicted to end (``times`` over) before ``until``."""
        if self.clock.deterministic:
            return time.perf_counter() < self.clock.deadline
        need = (self.unit or 0.0) * _COST[step] * times
        return time.perf_counter() + need < until

    def model_fits(self) -> bool:
        return self.fits("build", self.clock.deadline - self.reserve(), _BUILDS_LEFT)

    def reserve(self) -> float:
        """Time kept for re-checking a solver's schedule (evaluate and validate)."""
        return (self.unit or 0.0) * 3


def _judge(problem: Problem, schedules: Iterable[Schedule], pace: _Pace | None = None) -> tuple[list[KnownEval], list[str]]:
    """Each schedule of this problem judged by the evaluator (``pace``: measured, and a
    schedule that breaks the memory cap is not timed on large problems)."""
    evals, skipped = [], []
    for s in schedules:
        why = problem.matches(s)
        if why is not None:
            skipped.append(f"{s.name}: {why}")
            continue
        t = time.perf_counter()
        evals.append(evaluate_known(problem, s, time_unfit=pace is None or len(problem.ops) <= _TIME_UNFIT_OPS))
        if pace is not None and evals[-1].timing is not None:
            pace.measured(time.perf_counter() - t)
    return evals, skipped


def _best(evals: Iterable[KnownEval]) -> KnownEval | None:
    fitting = [e for e in evals if e.fits]
    return min(fitting, key=lambda e: e.makespan) if fitting else None


@dataclass
class _Start:
    evals: list[KnownEval]
    best: KnownEval | None
    note: str
    wall_s: float


def _start(problem: Problem, placement: Placement, config: CpSatConfig, known: Sequence[Schedule],
           clock: Clock, pace: _Pace) -> _Start:
    """Phase 1: judge the given known schedules, the registry's (``known_generators``)
    and the greedy starts, then double-justify the fitting ones, best first — each step
    only while it is predicted to end within ``_START_SHARE`` of the time."""
    t = time.perf_counter()
    until = t + _START_SHARE * max(0.0, clock.wall_left())
    evals, skipped = _judge(problem, known, pace)
    sources = []
    if config.known_generators:
        sources.append(("evaluate", _registry_schedules(problem, placement)))
    sources.append(("greedy", greedy_starts(problem, placement)))
    hard = clock.deadline - pace.reserve()
    for step, schedules in sources:
        # until one fits, a start may use all the time: without one nothing comes back
        while pace.fits(step, until if _best(evals) else hard, 1 + _COST["evaluate"] / _COST[step]):
            s = next(schedules, None)
            if s is None:
                break
            evals += _judge(problem, [s], pace)[0]
    notes = [f"{len(evals)} schedules judged"]
    if skipped:
        notes.append("skipped: " + "; ".join(skipped))
    if config.uses("justify"):
        fitting = sorted((e for e in evals if e.fits), key=lambda e: e.makespan)
        graph = precedence_graph(problem, placement) if fitting and pace.fits("justify", until) else None
        justified = []
        for e in fitting if graph is not None else ():
            if not pace.fits("justify", until, 0.75):
                break
            better = justify(problem, placement, e, graph)
            if better is not None:
                justified.append(better)
        if justified:
            notes.append("justified: " + ", ".join(f"{e.name} {e.makespan}" for e in justified))
        evals += justified
    best = _best(evals)
    if best is not None:
        notes.append(f"best start {best.name} {best.makespan}")
    return _Start(evals, best, "; ".join(notes), round(time.perf_counter() - t, 3))


def _infeasible_cap(problem: Problem, mode: str, t0: float, placement: Placement | None, reasons: list[str],
                    config: CpSatConfig, label: str | None = None) -> Result:
    mfc = min_feasible_cap(problem)
    shown = "; ".join(reasons[:2]) + (f" (and {len(reasons) - 2} more devices)" if len(reasons) > 2 else "")
    return Result(
        mode, "infeasible", None, None, None, problem.costs.unit, time.perf_counter() - t0,
        bound_assumptions=tuple(_base_assumptions(problem, label or _placement_label(problem, placement))),
        message=shown + f"; the smallest feasible activation cap is {mfc:g}",
        min_feasible_cap=mfc, tick_s=problem.costs.tick_s, objective=problem.objective,
        tick_slots=problem.costs.tick_slots, solver=_solver_info(config),
    )


# ---- evaluate ---------------------------------------------------------------------------------
def evaluate(schedule: Schedule, costs: Costs, config: CpSatConfig | None = None) -> Result:
    """CP-SAT in fixed mode: the schedule's placement and per-device orders fixed (orders
    as precedence chains) → its makespan, which must equal the evaluator's (the simulator
    with transfer lags, all-reduce and optimizer tails). A memory cap the order breaks is
    reported as ``infeasible`` naming the device (prefix sums, no solver needed); so is a
    deadlocking order. Past the time limit: ``unknown`` with the evaluator's makespan."""
    config = config or CpSatConfig()
    t0 = time.perf_counter()
    problem = Problem.from_schedule(schedule, costs)
    label = f"placement and per-device order fixed: {schedule.name}"
    known = evaluate_known(problem, schedule)
    mem = known.memory
    common = dict(tick_s=costs.tick_s, tick_slots=costs.tick_slots, peak_activations=tuple(mem.peaks),
                  solver=_solver_info(config.replace(workers=1, subsolvers=())))
    if not mem.fits or known.makespan is None:
        return Result("evaluate", "infeasible", schedule, None, None, costs.unit, time.perf_counter() - t0,
                      bound_assumptions=(label,), message=mem.violation or known.error, **common)
    oracle = known.makespan
    pace = _Pace(Clock(config, t0), len(problem.ops))
    pace.measured(time.perf_counter() - t0)
    if not pace.fits("build", pace.clock.deadline, 1.5):
        return Result("evaluate", "unknown", schedule, oracle, None, costs.unit, time.perf_counter() - t0, None,
                      (label,), message="the time limit leaves no time to build the CP-SAT model; "
                      "makespan from the evaluator", **common)
    model = CpSatModel(problem, config, schedule.placement, safe_horizon(problem, schedule.placement),
                       orders=schedule.orders)
    raw = model.solve(max(0.05, pace.clock.wall_left()), config.deterministic_time, workers=1)
    runtime = time.perf_counter() - t0
    if raw.status != "optimal":
        return Result("evaluate", "unknown" if raw.status != "infeasible" else "infeasible", schedule,
                      raw.makespan, raw.bound, costs.unit, runtime, raw.first_solution_time, (label,),
                      message=f"CP-SAT did not settle the fixed schedule ({raw.status}) within the limit",
                      **common)
    if raw.makespan != oracle:
        raise RuntimeError(
            f"CP-SAT fixed mode gives makespan {raw.makespan} for {schedule.name!r}, "
            f"the evaluator {oracle}: a modelling bug"
        )
    return Result("evaluate", "optimal", schedule, raw.makespan, raw.makespan, costs.unit, runtime,
                  raw.first_solution_time, (label,), **common)


# ---- search (fixed placement) ----------------------------------------------------------------
def _search_fixed(problem: Problem, placement: Placement, config: CpSatConfig, known: Sequence[Schedule],
                  clock: Clock, mode: str, label: str | None = None) -> Result:
    fixed = problem.with_placement(placement)
    label = label or _placement_label(problem, placement)
    t0 = clock.t0
    violations = cap_violations(fixed, placement)
    if violations:
        return _infeasible_cap(fixed, mode, t0, placement, violations, config, label)
    pace = _Pace(clock, len(fixed.ops))
    start = _start(fixed, placement, config, known, clock, pace)
    phases = [PhaseRecord("start", start.wall_s, note=start.note)]
    best = start.best
    t_first = time.perf_counter() - t0 if best else None
    lb, lb_why = analytic_lower_bound(fixed, placement)

    def finish(status, schedule, value, bound, message, families=(), stopped_by=None):
        if schedule is not None and schedule.name != "cpsat" and pace.fits("evaluate", clock.deadline + 1.0, 3):
            checked(fixed, schedule, value)  # a start: its table validated too (solver schedules are already)
        return _finish(fixed, mode, status, schedule, value, bound, t0, t_first,
                       _search_assumptions(fixed, label, families), message, start.evals, config,
                       tuple(phases), families, lb, stopped_by)

    if best is not None and lb >= best.makespan:
        return finish("optimal", best.schedule, best.makespan, lb, f"a start meets the analytic bound ({lb_why})")
    if not pace.model_fits():
        if best is None:
            return finish("unknown", None, None, lb, "no schedule within the time limit")
        return finish("feasible", best.schedule, best.makespan, lb,
                      "the time limit leaves no time to build the CP-SAT model; best start and analytic bound")
    if best is None:
        # no start: one solve of the whole model for the time left
        t = time.perf_counter()
        horizon = period_horizon(fixed, placement) if fixed.objective == "period" else safe_horizon(fixed, placement)
        try:
            model = CpSatModel(fixed, config, placement, horizon, makespan_lb=lb, deadline=clock.deadline)
        except BuildTimeout:
            return finish("unknown", None, None, lb, "no schedule within the time limit")
        wall, det = clock.budget(1.0).limits()
        raw = model.solve(wall, det)
        phases.append(PhaseRecord("solve", round(time.perf_counter() - t, 3),
                                  (solve_record("solve", config, None, raw),)))
        families = tuple(model.applied)
        found = None
        if raw.starts is not None:
            found = checked(fixed, model.schedule_from(raw), raw.makespan)
            t_first = time.perf_counter() - t0
        if raw.status == "infeasible":
            return finish("infeasible", None, None, None, "no schedule exists under these constraints", families)
        bound = max(lb, raw.bound or lb)
        if found is None:
            return finish("unknown", None, None, bound, "no schedule found within the limit", families)
        return finish("optimal" if bound >= found.makespan else "feasible", found.schedule, found.makespan,
                      min(bound, found.makespan), "", families)
    state = SearchState(best, lb, config, t0)
    rows: list = []
    t = time.perf_counter()
    shared = mode != "bound" and shared_capped(fixed, placement)
    share = 1.0 if mode == "bound" else config.bound_share
    if shared:
        share = min(share, SHARED_CAPPED_BOUND_SHARE)
    bound_phase(fixed, placement, config, state, clock.budget(share), rows, leave_early=mode != "bound")
    phases.append(PhaseRecord("bound", round(time.perf_counter() - t, 3), tuple(rows)))
    if mode != "bound" and not state.should_stop():
        rows = []
        t = time.perf_counter()
        mirror = mirror_pairs(fixed, placement) if shared else None
        search_phase(fixed, placement, config, state, clock.budget(1.0), rows, mirror)
        phases.append(PhaseRecord("search", round(time.perf_counter() - t, 3), tuple(rows)))
    incumbent, bound = state.snapshot()
    status = "optimal" if bound >= incumbent.makespan else "feasible"
    return finish(status, incumbent.schedule, incumbent.makespan, min(bound, incumbent.makespan), "",
                  state.families, state.stopped_by if not state.done else None)


# the bound phase's share of a search where a capped device holds several stages
SHARED_CAPPED_BOUND_SHARE = 0.2


def shared_capped(problem: Problem, placement: Placement) -> bool:
    """Whether a device holds several stages under a memory cap that can bind (below all
    of its microbatches' activations at once). There the model keeps a memory cumulative
    of variable-size lifetimes, under which tightening probes prove little in a search's
    time, so ``search`` gives them ``SHARED_CAPPED_BOUND_SHARE`` of it instead of
    ``bound_share``, and the mirror-restricted solve its half of the rest (docs/cpsat.md
    has the measurements)."""
    for d in range(placement.num_devices):
        held, cap = placement.stages_on(d), problem.cap(d)
        if len(held) > 1 and cap is not None:
            every = sum(problem.costs.activation[k] * problem.pipeline_counts[k[0]] for k in held)
            if cap < every - 1e-9:
                return True
    return False


def _finish(problem, mode, status, schedule, value, bound, t0, t_first, assumptions, message, evals, config,
            phases=(), families=(), analytic=None, stopped_by=None) -> Result:
    known = {}
    for e in evals:
        if e.name.startswith(("greedy", "justified-")):
            continue
        known[e.name] = KnownGap(
            e.makespan, e.fits, gap_of(e.makespan, bound) if e.fits else None,
            "" if e.fits else (e.memory.violation or e.error or ""),
        )
    if schedule is not None and schedule.name.startswith("justified-") and not message:
        message = f"best schedule is {schedule.name!r}, a known schedule improved by double justification"
    elif schedule is not None and schedule.name != "cpsat" and not message:
        message = f"best schedule is the start {schedule.name!r}"
    return Result(
        mode, status, schedule, value, bound, problem.costs.unit, time.perf_counter() - t0, t_first,
        tuple(assumptions), message, known=known, tick_s=problem.costs.tick_s, objective=problem.objective,
        tick_slots=problem.costs.tick_slots, phases=tuple(phases),
        solver=_solver_info(config, families, stopped_by), analytic_bound=analytic,
    )


# ---- search (free placement) -----------------------------------------------------------------
# above this many canonical placements free placement is one model with placement literals
MAX_PLACEMENTS = 20000


def canonical_placements(problem: Problem, limit: int) -> list[Placement] | None:
    """Every placement of the problem's stages on its devices, up to relabelling of
    identical devices (restricted growth strings); None when more than ``limit``."""
    keys = list(problem.stages)
    D = problem.num_devices
    N = len(keys)
    identical = devices_identical(problem)
    out: list[Placement] = []

    def emit(assign: list[int]) -> bool:
        per = []
        i = 0
        for n in problem.num_stages:
            per.append(tuple(assign[i:i + n]))
            i += n
        out.append(Placement(tuple(per), D))
        return len(out) <= limit

    if identical:
        assign = [0] * N

        def rec(i: int, top: int) -> bool:
            if i == N:
                return emit(assign)
            for d in range(min(top + 2, D)):
                assign[i] = d
                if not rec(i + 1, max(top, d)):
                    return False
            return True

        ok = rec(1, 0) if N > 1 else emit(assign)
    else:
        ok = True
        for combo in itertools.product(range(D), repeat=N):
            if not emit(list(combo)):
                ok = False
                break
    return out if ok else None


def _canonical_devices(schedule: Schedule) -> Schedule:
    """The schedule with devices renumbered in order of first use by its stages."""
    pl = schedule.placement
    order: list[int] = []
    for stages in pl.stage2device:
        for d in stages:
            if d not in order:
                order.append(d)
    order += [d for d in range(pl.num_devices) if d not in order]
    new_of = {old: new for new, old in enumerate(order)}
    placement = Placement(tuple(tuple(new_of[d] for d in st) for st in pl.stage2device), pl.num_devices)
    orders = [()] * pl.num_devices
    for old, ops in enumerate(schedule.orders):
        orders[new_of[old]] = ops
    return Schedule(schedule.name, placement, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)


def _search_free(problem: Problem, config: CpSatConfig, known: Sequence[Schedule], clock: Clock,
                 mode: str) -> Result:
    t0 = clock.t0
    evals, skipped = _judge(problem, known)
    placements = canonical_placements(problem, MAX_PLACEMENTS) if config.uses("decompose") else None
    if placements is None:
        return _search_free_monolithic(problem, config, evals, clock, mode)
    identical = devices_identical(problem)
    label = (
        f"placement free: all {len(placements)} placements"
        + (" up to relabelling of identical devices" if identical else "")
        + " enumerated, each solved with its placement fixed, pruned by bound"
    )
    feasible = []
    for pl in placements:
        fp = problem.with_placement(pl)
        if cap_violations(fp, pl):
            continue
        feasible.append((pl, analytic_lower_bound(fp, pl)[0]))
    if not feasible:
        return _infeasible_cap(problem, mode, t0, None, ["no placement fits the memory capacity"], config)
    # known schedules first (their placements give the first incumbent), then by bound
    known_pl: dict = {}
    for e in evals:
        if e.fits:
            key = (_canonical_devices(e.schedule) if identical else e.schedule).placement.stage2device
            known_pl.setdefault(key, []).append(e)
    feasible.sort(key=lambda x: (x[0].stage2device not in known_pl, x[1]))
    best_known = _best(evals)
    inc_sched, inc_val = (best_known.schedule, best_known.makespan) if best_known else (None, None)
    t_first = time.perf_counter() - t0 if inc_sched else None
    bounds, phases = [], []
    unsolved = 0
    families: set[str] = set()
    for idx, (pl, lb) in enumerate(feasible):
        if inc_val is not None and lb >= inc_val:
            bounds.append(lb)
            phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", 0.0,
                                      note=f"pruned: analytic bound {lb} >= {inc_val}"))
            continue
        remaining = clock.wall_left()
        if remaining <= 0.05:
            bounds.append(lb)
            unsolved += 1
            continue
        left = sum(1 for _, lb2 in feasible[idx:] if inc_val is None or lb2 < inc_val)
        slice_s = max(remaining / max(1, left), min(remaining, 0.5))
        kn = [_canonical_devices(e.schedule) if identical else e.schedule for e in known_pl.get(pl.stage2device, [])]
        if inc_sched is not None and inc_sched.placement.stage2device == pl.stage2device:
            kn.append(inc_sched)
        sub_cfg = config.replace(time_limit_s=max(0.05, slice_s), deterministic_time=None if
                                 config.deterministic_time is None else config.deterministic_time / len(feasible))
        now = time.perf_counter()
        res = _search_fixed(problem, pl, sub_cfg, kn, Clock(sub_cfg, now, now + slice_s), mode, label=label)
        families.update(res.solver.families)
        sub_lb = math.inf if res.status == "infeasible" else (res.lower_bound if res.lower_bound is not None else lb)
        bounds.append(sub_lb)
        phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", round(res.runtime_s, 3),
                                  tuple(r for ph in res.phases for r in ph.solves),
                                  f"{res.status}, {problem.objective} {res.makespan}, bound {res.lower_bound}"))
        if res.makespan is not None and (inc_val is None or res.makespan < inc_val):
            inc_sched, inc_val = res.schedule, res.makespan
            if t_first is None:
                t_first = time.perf_counter() - t0
    lb_all = min(bounds) if bounds else None
    if inc_val is not None and lb_all is not None:
        lb_all = min(lb_all, inc_val)
    if lb_all is not None and not math.isfinite(lb_all):
        lb_all = None
    if identical:
        families.add("device symmetry")
    if skipped:
        phases.insert(0, PhaseRecord("start", 0.0, note="skipped: " + "; ".join(skipped)))
    assumptions = _search_assumptions(problem, label, families)
    if inc_sched is None:
        status = "unknown" if unsolved else "infeasible"
        return _finish(problem, mode, status, None, None, lb_all, t0, None, assumptions,
                       "no schedule found" if unsolved else "no schedule exists", evals, config, phases,
                       tuple(sorted(families)))
    ev = checked(problem.with_placement(inc_sched.placement), inc_sched, inc_val)
    status = "optimal" if lb_all is not None and lb_all >= ev.makespan else "feasible"
    return _finish(problem, mode, status, inc_sched, ev.makespan, lb_all, t0, t_first, assumptions, "", evals,
                   config, phases, tuple(sorted(families)))


def _search_free_monolithic(problem: Problem, config: CpSatConfig, evals, clock: Clock, mode: str) -> Result:
    """One model with placement literals (above ``MAX_PLACEMENTS`` canonical placements)."""
    if problem.objective == "period":
        raise ValueError("the period objective with free placement needs the decomposition "
                         f"(at most {MAX_PLACEMENTS} canonical placements)")
    t0 = clock.t0
    best = _best(evals)
    lb, _ = analytic_lower_bound(problem, None)
    horizon = best.makespan if best else safe_horizon(problem, None)
    if best is None:
        # a schedule on stages dealt round-robin over the devices as a first incumbent
        D = problem.num_devices
        pl = Placement(tuple(tuple(s % D for s in range(n)) for n in problem.num_stages), D)
        fp = problem.with_placement(pl)
        if not cap_violations(fp, pl):
            best = _best(evaluate_known(fp, s) for s in greedy_starts(fp, pl))
            if best is not None:
                horizon = best.makespan
    t_first = time.perf_counter() - t0 if best else None
    model = CpSatModel(problem, config, None, horizon, makespan_lb=lb)
    if config.uses("hints") and best is not None:
        sched = _canonical_devices(best.schedule) if "device symmetry" in model.applied else best.schedule
        ev = evaluate_known(problem.with_placement(sched.placement), sched)
        s2, tm = relabel_microbatches(sched, ev.timing)
        model.hint(s2, tm)
    t = time.perf_counter()
    wall, det = clock.budget(1.0).limits()
    raw = model.solve(wall, det)
    phases = (PhaseRecord("solve", round(time.perf_counter() - t, 3), (solve_record("solve", config, None, raw),)),)
    label = "placement free (one model with placement literals)"
    assumptions = _search_assumptions(problem, label, model.applied)
    chosen, value = (best.schedule, best.makespan) if best else (None, None)
    if raw.starts is not None:
        cand = model.schedule_from(raw)
        ev = checked(problem.with_placement(cand.placement), cand, raw.makespan)
        if value is None or ev.makespan < value:
            chosen, value = cand, ev.makespan
            if t_first is None:
                t_first = time.perf_counter() - t0
    fam = tuple(model.applied)
    if raw.status == "infeasible" and chosen is None:
        return _finish(problem, mode, "infeasible", None, None, None, t0, None, assumptions, "no schedule exists",
                       evals, config, phases, fam, lb)
    bound = max(lb, raw.bound) if raw.bound is not None else lb
    if chosen is None:
        return _finish(problem, mode, "unknown", None, None, bound, t0, None, assumptions,
                       "no schedule found within the limit", evals, config, phases, fam, lb)
    status = "optimal" if bound >= value else "feasible"
    return _finish(problem, mode, status, chosen, value, min(bound, value), t0, t_first, assumptions, "", evals,
                   config, phases, fam, lb)


# ---- public modes ----------------------------------------------------------------------------
def search(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = ()) -> Result:
    """Free the per-device orders (and the placement when ``problem.placement`` is
    ``"free"``) under the memory caps; return the best schedule found (never worse than the
    best start that fits), its objective, the proven lower bound and the gap, within the
    time limit (``strategy``). An infeasible cap returns status ``infeasible`` with
    ``min_feasible_cap``."""
    config = config or CpSatConfig()
    clock = Clock(config)
    if problem.is_free:
        return _search_free(problem, config, known, clock, "search")
    return _search_fixed(problem, problem.fixed_placement, config, known, clock, "search")


def bound(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = ()) -> Result:
    """The proven lower bound on the optimal objective (max of analytic and CP-SAT bounds)
    and each known schedule's gap to it (``Result.known``); also the best schedule found
    on the way. The bound phase gets all of the time after the start."""
    config = config or CpSatConfig()
    clock = Clock(config)
    if problem.is_free:
        res = _search_free(problem, config, known, clock, "bound")
        if not res.known and problem.num_pipelines == 1 and problem.num_stages[0] == problem.num_devices:
            # judge the linear known schedules against the free-placement bound too
            pl = Placement((tuple(range(problem.num_devices)),), problem.num_devices)
            evals, _ = _judge(problem, _registry_schedules(problem.with_placement(pl), pl))
            known_gaps = {e.name: KnownGap(e.makespan, e.fits, gap_of(e.makespan, res.lower_bound) if e.fits else None)
                          for e in evals}
            res = replace(res, known=known_gaps)
        return res
    return _search_fixed(problem, problem.fixed_placement, config, known, clock, "bound")


@dataclass(frozen=True)
class FrontPoint:
    """One point of the makespan-memory front."""

    cap: float | None
    status: str
    makespan: float | None
    lower_bound: float | None
    gap: float | None
    min_feasible_cap: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def memory_front(problem: Problem, caps: Sequence[int | None], config: CpSatConfig | None = None,
                 known: Sequence[Schedule] = ()) -> list[FrontPoint]:
    """Sweep activation caps (idealized: live activations per device; otherwise the
    memory left for activations, in the costs' unit); ``config.time_limit_s`` is per cap.
    Caps are solved in increasing order and every schedule found is a known schedule for
    the larger caps (it fits them too)."""
    config = config or CpSatConfig()
    order = sorted(caps, key=lambda c: math.inf if c is None else c)
    found: list[Schedule] = []
    points = {}
    for cap in order:
        costs = problem.costs.with_activation_cap(cap)
        res = search(problem.with_costs(costs), config, list(known) + found)
        if res.schedule is not None and not problem.is_free:
            found.append(res.schedule)
        points[cap] = FrontPoint(cap, res.status, res.makespan, res.lower_bound, res.gap, res.min_feasible_cap)
    return [points[c] for c in caps]
