"""The CP-SAT public entry points (the CLI, sweeps and ``plan`` call them); each makes one
``Deadline`` from its config (or takes a caller's slice), and every schedule returned was
re-timed by the evaluator, memory-checked and validated (``oracle.checked``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules import registry
from pipetab.schedules.registry import REGISTRY
from pipetab.schedules.rewrite import generator_of
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.costs import Costs, Rounding
from pipetab.solver.simulate import rounding_spread, simulate

from .decompose.partition import PartitionSearch, search_partition
from .decompose.placement import search_free
from .heuristics.starts import Pace, as_searched, judge, registry_schedules
from .model.bounds import safe_horizon
from .model.cpmodel import CpSatModel
from .model.objectives import analytic_lower_bound, objective
from .model.oracle import evaluate_known
from .params import CpSatConfig
from .phases.fixed import search_fixed, solver_info
from .problem import TIME_OBJECTIVES, Objective, Problem
from .result import KnownGap, Mode, Result, Status, gap_of

if TYPE_CHECKING:
    from pipetab.solver.deadline import Deadline
    from pipetab.solver.partition import Partition
    from pipetab.solver.pricing import LayerCosts

    from .params import SecondsParams


def evaluate(schedule: Schedule, costs: Costs, config: CpSatConfig | None = None) -> Result:
    """CP-SAT with the schedule's placement and per-device orders fixed (orders as precedence
    chains): its makespan, which must equal the evaluator's. A memory cap the order breaks
    (named by device, no solver needed) or a deadlocking order is ``infeasible``; past the
    time limit: ``unknown`` with the evaluator's makespan."""
    config = config or CpSatConfig()
    deadline = config.deadline()
    problem = Problem.from_schedule(schedule, costs, blocks=True)
    known = evaluate_known(problem, schedule)

    def result(status: Status, makespan: int | None, lower_bound: int | None, message: str = "",
               first: float | None = None) -> Result:
        return Result(mode=Mode.EVALUATE, status=status, schedule=schedule, makespan=makespan,
                      lower_bound=lower_bound, unit=costs.unit, runtime_s=time.perf_counter() - deadline.t0,
                      bound_assumptions=(f"placement and per-device order fixed: {schedule.name}",),
                      tick_s=costs.tick_s, tick_slots=costs.tick_slots, peak_activations=tuple(known.memory.peaks),
                      solver=solver_info(config.replace(workers=1, subsolvers=())), message=message,
                      time_to_first_s=first)

    if not known.memory.fits or known.makespan is None:
        return result(Status.INFEASIBLE, None, None, known.memory.violation or known.error or "")
    pace = Pace(deadline, config.start)
    pace.measured(time.perf_counter() - deadline.t0)
    if not pace.fits("build", deadline.end, 1.5):
        return result(Status.UNKNOWN, known.makespan, None,
                      "the time limit leaves no time to build the CP-SAT model; makespan from the evaluator")
    model = CpSatModel(problem, config, schedule.placement, safe_horizon(problem, schedule.placement),
                       orders=schedule.orders)
    raw = model.solve(max(0.05, deadline.wall_left()), config.deterministic_time, workers=1)
    if raw.status is not Status.OPTIMAL:
        return result(Status.INFEASIBLE if raw.status is Status.INFEASIBLE else Status.UNKNOWN, raw.makespan,
                      raw.bound, f"CP-SAT did not settle the fixed schedule ({raw.status}) within the limit",
                      raw.first_solution_time)
    if raw.makespan != known.makespan:
        raise RuntimeError(f"CP-SAT fixed mode gives makespan {raw.makespan} for {schedule.name!r}, "
                           f"the evaluator {known.makespan}: a modelling bug")
    return result(Status.OPTIMAL, raw.makespan, raw.makespan, first=raw.first_solution_time)


def search(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = (), *,
           deadline: Deadline | None = None) -> Result:
    """The best schedule found with the per-device orders (and a ``free`` placement) free under
    the memory caps — never worse than the best start that fits — its objective, the proven
    lower bound and the gap. An infeasible cap is ``infeasible`` with ``min_feasible_cap``."""
    return _solve(problem, config or CpSatConfig(), known, deadline, Mode.SEARCH)


def bound(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = (), *,
          deadline: Deadline | None = None) -> Result:
    """The proven lower bound on the optimal objective (max of analytic and CP-SAT bounds),
    each known schedule's gap to it (``Result.known``) and the best schedule found on the way."""
    config = config or CpSatConfig()
    res = _solve(problem, config, known, deadline, Mode.BOUND)
    if problem.is_free and not res.known and problem.num_stages == (problem.num_devices,):
        # judge the linear known schedules against the free-placement bound too
        pl = Placement((tuple(range(problem.num_devices)),), problem.num_devices)
        evals, _ = judge(problem, registry_schedules(problem.with_placement(pl), pl, config.start.probe))
        res = replace(res, known={e.name: KnownGap(e.makespan, e.fits, gap_of(e.makespan, res.lower_bound)
                                                   if e.fits else None) for e in evals})
    return res


def least_peak_memory(problem: Problem, makespan: int, config: CpSatConfig | None = None) -> Result:
    """The least peak live activation memory over devices (bytes, or idealized activation
    units) among schedules of ``problem`` — placement fixed, orders free, caps kept — whose
    step ends by ``makespan`` (ticks): the ``memory`` objective in one model with that horizon.
    In ``Result.peak_memory`` (``analytic_bound``: its solver-free bound); ``infeasible``: no
    schedule ends by ``makespan``."""
    config = config or CpSatConfig()
    deadline = config.deadline()
    placement = problem.fixed_placement
    if placement is None:
        raise ValueError("the memory objective needs a fixed placement")
    shape = replace(problem, objective=Objective.MEMORY)
    lb, _ = objective(shape).lower_bound(shape, placement)
    model = CpSatModel(shape, config, placement, makespan, makespan_lb=lb, deadline=deadline.end)
    raw = model.solve(*deadline.limits())
    scale = model.vars.memory_scale
    schedule = None if raw.starts is None else model.schedule_from(raw, "cpsat-memory")
    step = None if schedule is None else evaluate_known(problem, schedule).makespan
    return Result(mode=Mode.SEARCH, status=raw.status, schedule=schedule, makespan=step, lower_bound=None,
                  unit=problem.costs.unit, runtime_s=time.perf_counter() - deadline.t0, objective=Objective.MEMORY,
                  peak_memory=None if raw.makespan is None else raw.makespan / scale,
                  bound_assumptions=(f"placement fixed, step at most {makespan}", *model.applied),
                  analytic_bound=lb / scale, tick_s=problem.costs.tick_s, tick_slots=problem.costs.tick_slots,
                  solver=solver_info(config, model.applied), time_to_first_s=raw.first_solution_time)


def _solve(problem: Problem, config: CpSatConfig, known: Sequence[Schedule], deadline: Deadline | None,
           mode: Mode) -> Result:
    """``search`` or ``bound`` (``mode``) of a time objective, the placement fixed or free."""
    if problem.objective not in TIME_OBJECTIVES:
        raise ValueError(f"search and bound minimize {' or '.join(TIME_OBJECTIVES)}; the {problem.objective} "
                         "objective is least_peak_memory's")
    deadline = deadline or config.deadline()
    known = as_searched(problem, known)
    if problem.is_free:
        return search_free(problem, config, known, deadline, mode)
    return search_fixed(problem, problem.placed, config, known, deadline, mode)


@dataclass(frozen=True)
class FrontPoint:
    """One point of the makespan-memory front."""

    cap: float | None
    status: Status
    makespan: float | None
    lower_bound: float | None
    gap: float | None
    min_feasible_cap: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def memory_front(problem: Problem, caps: Sequence[int | None], config: CpSatConfig | None = None,
                 known: Sequence[Schedule] = ()) -> list[FrontPoint]:
    """``search`` at each activation cap (idealized: live activations per device; else the
    memory left for activations, in the costs' unit), ``config.time_limit_s`` each, in
    increasing order: every schedule found is a known one for the larger caps."""
    config = config or CpSatConfig()
    order = sorted(caps, key=lambda c: math.inf if c is None else c)
    found: list[Schedule] = []
    points = {}
    for cap in order:
        res = search(problem.with_costs(problem.costs.with_activation_cap(cap)), config, list(known) + found)
        if res.schedule is not None and not problem.is_free:
            found.append(res.schedule)
        points[cap] = FrontPoint(cap, res.status, res.makespan, res.lower_bound, res.gap, res.min_feasible_cap)
    return [points[c] for c in caps]


def solve_partition(shape: Problem, layer_costs: LayerCosts, partition: Partition,
                    config: CpSatConfig | None = None, mode: Mode | str = Mode.SEARCH,
                    known: Sequence[Schedule] = (), *, deadline: Deadline | None = None) -> PartitionSearch:
    """``search`` or ``bound`` of ``shape`` with its stage partition even, fixed or free."""
    config = config or CpSatConfig()
    run = search if Mode(mode) is Mode.SEARCH else bound
    return search_partition(shape, layer_costs, partition, config, run, known, deadline or config.deadline())


@dataclass(frozen=True)
class KnownSeconds:
    """A known schedule's objective on the real-valued costs, whether it fits, its gap."""

    seconds: float | None
    fits: bool
    gap: float | None

    def as_dict(self) -> dict:
        return {"makespan": self.seconds, "fits": self.fits, "gap": self.gap}


@dataclass(frozen=True, kw_only=True)
class Answer:
    """``solve_seconds``'s (and ``partition_seconds``') answer: the ``schedule`` and its
    simulated objective in ``seconds``, ``lower_bound_s`` a bound of the real-valued problem
    (proven on durations rounded down to ticks of ``tick_s``), ``status`` (``optimal`` only when
    the two meet), ``rounding`` (``rounding_spread`` of the schedule), and the solves behind it
    (``search``: durations rounded up; ``bound``: rounded down)."""

    mode: Mode
    status: Status
    schedule: Schedule | None
    seconds: float | None
    lower_bound_s: float | None
    tick_s: float | None  # None: a partition search that solved no split
    objective: Objective
    search: Result | None
    bound: Result
    known: dict[str, KnownSeconds] = field(default_factory=dict)
    message: str = ""
    assumptions: tuple[str, ...] = ()
    runtime_s: float = 0.0
    rounding: float | None = None

    @property
    def gap(self) -> float | None:
        return gap_of(self.seconds, self.lower_bound_s)

    @property
    def result(self) -> Result:
        """The solve whose schedule this is (the bound's when the search found none)."""
        if self.search is not None and (self.search.schedule is not None or self.schedule is None):
            return self.search
        return self.bound


def choose_tick(shape: Problem, real: Costs, params: SecondsParams, known: Sequence[Schedule] = (),
                tick: float | None = None, timed: list[float] | None = None) -> float:
    """The tick: ``tick`` (default 1/``ticks_per_op`` of the shortest op), refined until
    ``rounding_spread`` of a reference schedule (the first known one, else the registry's
    first of the shape) is at most ``max_rounding`` (the tick divided by the factor the
    spread predicts, at most ``refinements`` times: none keeps a tick as given).
    ``timed``: gets the seconds one simulation of the reference took."""
    tick = tick or real.default_tick(params.ticks_per_op)
    if params.refinements < 1:
        return tick
    placement = shape.fixed_placement
    reference = next(iter(known), None)
    if reference is None and placement is not None:
        reference = next(registry_schedules(shape, placement), None)
    if reference is None:
        return tick
    for _ in range(params.refinements):
        t = time.perf_counter()
        spread = rounding_spread(reference, real, tick)
        if timed is not None:
            timed.append((time.perf_counter() - t) / 3)
        if spread <= params.max_rounding:
            break
        tick /= math.ceil(1.1 * spread / params.max_rounding)
    return tick


def solve_seconds(shape: Problem, real: Costs, mode: Mode | str = Mode.SEARCH, config: CpSatConfig | None = None,
                  known: Sequence[Schedule] = (), *, tick_s: float | None = None, known_costs: Costs | None = None,
                  deadline: Deadline | None = None) -> Answer:
    """``shape`` on ``real`` costs in seconds: a search on durations rounded up to ticks of
    ``tick_s`` (default ``choose_tick``'s) for ``SecondsParams.search_share`` of the time, then
    CP-SAT's memory-aware bound, seeded with that schedule, on durations rounded down. Both
    modes run the same solves (``mode`` only says what was asked). The schedule is re-simulated
    on ``real``; the bound holds for the real-valued problem. ``known_costs``: what the known
    schedules are judged on (default ``real``)."""
    mode, config = Mode(mode), config or CpSatConfig()
    deadline = deadline or config.deadline()
    params = config.seconds
    known = as_searched(shape, known)  # what the search, the bound and the report judge
    timed: list[float] = []
    tick = choose_tick(shape, real, params if tick_s is None else replace(params, refinements=0), known, tick_s, timed)
    down = shape.with_costs(real.quantized(tick, Rounding.DOWN))
    # keep back what judging the answer takes: a simulation per known schedule and three more
    left = deadline.wall_left()
    work = deadline if deadline.deterministic or not timed else deadline.within(
        max(params.least_work_share * left, left - max(timed) * (len(known) + params.answer_simulations)))
    found = search(shape.with_costs(real.quantized(tick, Rounding.UP)), config, known,
                   deadline=work.slice(params.search_share))
    seeds = list(known) + ([found.schedule] if found.schedule is not None else [])
    proof = bound(down, config, seeds, deadline=work.slice(1.0))
    return _answer(shape, real, mode, tick, found, proof, known, known_costs or real, deadline)


def _answer(shape: Problem, real: Costs, mode: Mode, tick: float, found: Result, proof: Result,
            known: Sequence[Schedule], known_costs: Costs, deadline: Deadline) -> Answer:
    spec = objective(shape)
    schedule = next((r.schedule for r in (found, proof) if r.schedule is not None), None)  # search's, else bound's
    t = time.perf_counter()
    seconds = None if schedule is None else spec.seconds(shape, schedule, real)
    one = time.perf_counter() - t  # a simulation: rounding takes 3, a known schedule 1; none past the deadline
    lb = None if proof.status is Status.INFEASIBLE or proof.lower_bound is None else proof.lower_bound * tick
    if seconds is not None and lb is not None and lb > seconds + 1e-12 * max(1.0, seconds):
        raise RuntimeError(f"lower bound {lb} s above the simulated {seconds} s: a rounding bug")
    rounding = None if schedule is None or t + 4 * one > deadline.end else rounding_spread(schedule, real, tick)
    status, message = _status(found, proof, seconds, lb, rounding, tick)
    assumptions = tuple(a if not a.startswith("durations rounded") else
                        "lower bound: durations rounded down to ticks (a bound of the real-valued problem); "
                        "schedules searched with durations rounded up, timed by the simulator"
                        for a in proof.bound_assumptions)
    return Answer(mode=mode, status=status, schedule=schedule, seconds=seconds, lower_bound_s=lb, tick_s=tick,
                  objective=shape.objective, search=found, bound=proof,
                  known=_known_seconds(shape, found, known, known_costs, lb, deadline.end - one), message=message,
                  assumptions=assumptions, runtime_s=time.perf_counter() - deadline.t0, rounding=rounding)


def _status(found: Result, proof: Result, seconds: float | None, lb: float | None, rounding: float | None,
            tick: float) -> tuple[Status, str]:
    """``optimal`` only where the bound meets the real time; else ``feasible``, saying what ticks explain."""
    if proof.status is Status.INFEASIBLE:
        return Status.INFEASIBLE, proof.message
    if seconds is None:
        return found.status if found.status is not Status.OPTIMAL else Status.UNKNOWN, found.message
    if lb is not None and lb >= seconds - 1e-12 * max(1.0, seconds):
        return Status.OPTIMAL, found.message
    gap = gap_of(seconds, lb)
    if found.status is Status.OPTIMAL and rounding is not None and gap is not None:
        return Status.FEASIBLE, (f"optimal for durations rounded up to ticks of {tick:.3g} s; the bound is proven on "
                                 f"durations rounded down, and rounding moves this schedule's time by "
                                 f"{100 * rounding:.2f}% (gap {100 * gap:.2f}%)")
    return Status.FEASIBLE, found.message


def _known_seconds(shape: Problem, res: Result, known: Sequence[Schedule], costs: Costs, lb: float | None,
                   end: float = math.inf) -> dict[str, KnownSeconds]:
    """The known schedules ``res`` judged, in seconds on ``costs`` (the given ones and the
    registry's of the shape; only those ``res`` names are generated again), none begun after ``end``."""
    spec, out = objective(shape), {}
    placement = shape.fixed_placement
    unjudged = set(REGISTRY) - {generator_of(k) for k in res.known}
    pool = {s.name: s for s in (registry_schedules(shape, placement, done=unjudged) if placement is not None else ())}
    pool.update({s.name: s for s in known})
    for name, k in res.known.items():
        s = pool.get(name)
        value = None if s is None or k.makespan is None or time.perf_counter() > end else spec.seconds(shape, s, costs)
        out[name] = KnownSeconds(value, k.fits, gap_of(value, lb) if k.fits else None)
    return out


def partition_seconds(problem: Problem, result: Result, real: Costs, known_costs: Costs, num_stages: int,
                      num_microbatches: int) -> Answer:
    """A partition search's ``result`` in seconds (its ``search`` and ``bound``): its schedule
    simulated on ``real``, the ``real_lower_bound``, the registry schedules it judged timed on
    ``known_costs`` (the even split's), and ``optimal`` only where the bound meets the
    real-valued time."""
    value = None if result.schedule is None else simulate(result.schedule, real).makespan
    tick = problem.costs.tick_s
    lb = None if result.status is Status.INFEASIBLE else real_lower_bound(problem, real, result)
    if value is not None and lb is not None and lb > value + 1e-12:
        raise RuntimeError(f"lower bound {lb} s above the simulated {value} s: a rounding bug")
    known = {}
    for name, k in result.known.items():
        t = _registry_seconds(name, num_stages, num_microbatches, known_costs)
        known[name] = KnownSeconds(t, k.fits, gap_of(t, lb) if k.fits else None)
    status, message = result.status, result.message
    if value is not None and (lb is None or lb < value - 1e-12) and result.status is Status.OPTIMAL:
        status = Status.FEASIBLE
        message = (f"optimal for durations rounded to ticks of {tick:.3g} s; the bound holds for durations "
                   "rounded down, below the real-valued time")
    return Answer(mode=result.mode, status=status, schedule=result.schedule, seconds=value, lower_bound_s=lb,
                  tick_s=tick, objective=result.objective, search=result, bound=result, known=known, message=message,
                  runtime_s=result.runtime_s)


def real_lower_bound(problem: Problem, real: Costs, result: Result) -> float | None:
    """A bound in seconds of a partition search's real-valued problem: the result's own when
    its durations were rounded down, else the analytic bound on durations rounded down."""
    if problem.costs.tick_s is None:  # no split was solved within the time: no bound in seconds
        return None
    if problem.costs.rounding is Rounding.DOWN:
        return None if result.lower_bound is None else result.lower_bound * problem.costs.tick_s
    down = replace(problem, costs=real.quantized(problem.costs.tick_s, Rounding.DOWN))
    return analytic_lower_bound(down, down.fixed_placement)[0] * problem.costs.tick_s


def _registry_seconds(name: str, num_stages: int, num_microbatches: int, costs: Costs) -> float | None:
    """The simulator's real-valued makespan of the registry schedule ``name``."""
    try:
        return simulate(registry.generate(name, num_stages, num_microbatches), costs).makespan
    except ValueError:
        return None
