"""The CP-SAT model's public entry points, each returning a solver-independent result:
``evaluate`` (a known schedule, its choices fixed), ``search`` (better orders and
placements), ``bound`` (the proven least objective) and ``memory_front`` (over memory
caps); ``solver.seconds.solve_seconds`` answers a problem in seconds on top of them.

Every entry makes one ``Deadline`` from its config (or takes a caller's slice) and hands it
down; every schedule it returns was re-timed by the solver-free evaluator, memory-checked
and its table validated (``oracle.checked``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.schedule import Placement, Schedule

from .bounds import safe_horizon
from .fixed import search_fixed, solver_info
from .model import CpSatModel
from .oracle import evaluate_known
from .params import CpSatConfig
from .placement import search_free
from .problem import Problem
from .result import KnownGap, Mode, Result, Status, gap_of
from .starts import Pace, as_searched, judge, registry_schedules

if TYPE_CHECKING:
    from pipetab.solver.costs import Costs
    from pipetab.solver.deadline import Deadline


def evaluate(schedule: Schedule, costs: Costs, config: CpSatConfig | None = None) -> Result:
    """CP-SAT in fixed mode: the schedule's placement and per-device orders fixed (orders
    as precedence chains) → its makespan, which must equal the evaluator's (the simulator
    with transfer lags, all-reduce and optimizer tails). A memory cap the order breaks is
    reported as ``infeasible`` naming the device (prefix sums, no solver needed); so is a
    deadlocking order. Past the time limit: ``unknown`` with the evaluator's makespan."""
    config = config or CpSatConfig()
    deadline = config.deadline()
    problem = Problem.from_schedule(schedule, costs, blocks=True)
    label = f"placement and per-device order fixed: {schedule.name}"
    known = evaluate_known(problem, schedule)
    mem = known.memory
    common = dict(mode=Mode.EVALUATE, schedule=schedule, unit=costs.unit, bound_assumptions=(label,),
                  tick_s=costs.tick_s, tick_slots=costs.tick_slots, peak_activations=tuple(mem.peaks),
                  solver=solver_info(config.replace(workers=1, subsolvers=())))
    if not mem.fits or known.makespan is None:
        return Result(status=Status.INFEASIBLE, makespan=None, lower_bound=None,
                      runtime_s=time.perf_counter() - deadline.t0, message=mem.violation or known.error or "",
                      **common)  # type: ignore[arg-type]
    oracle = known.makespan
    pace = Pace(deadline, config.start)
    pace.measured(time.perf_counter() - deadline.t0)
    if not pace.fits("build", deadline.end, 1.5):
        return Result(status=Status.UNKNOWN, makespan=oracle, lower_bound=None,
                      runtime_s=time.perf_counter() - deadline.t0,
                      message="the time limit leaves no time to build the CP-SAT model; makespan from the evaluator",
                      **common)  # type: ignore[arg-type]
    model = CpSatModel(problem, config, schedule.placement, safe_horizon(problem, schedule.placement),
                       orders=schedule.orders)
    raw = model.solve(max(0.05, deadline.wall_left()), config.deterministic_time, workers=1)
    runtime = time.perf_counter() - deadline.t0
    if raw.status != "optimal":
        return Result(status=Status.INFEASIBLE if raw.status == "infeasible" else Status.UNKNOWN,
                      makespan=raw.makespan, lower_bound=raw.bound, runtime_s=runtime,
                      time_to_first_s=raw.first_solution_time,
                      message=f"CP-SAT did not settle the fixed schedule ({raw.status}) within the limit",
                      **common)  # type: ignore[arg-type]
    if raw.makespan != oracle:
        raise RuntimeError(f"CP-SAT fixed mode gives makespan {raw.makespan} for {schedule.name!r}, "
                           f"the evaluator {oracle}: a modelling bug")
    return Result(status=Status.OPTIMAL, makespan=raw.makespan, lower_bound=raw.makespan, runtime_s=runtime,
                  time_to_first_s=raw.first_solution_time, **common)  # type: ignore[arg-type]


def search(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = (), *,
           deadline: Deadline | None = None) -> Result:
    """Free the per-device orders (and the placement when it is ``free``) under the
    memory caps; return the best schedule found (never worse than the best start that
    fits), its objective, the proven lower bound and the gap, within the time limit
    (``strategy``) or the caller's ``deadline``. An infeasible cap returns status
    ``infeasible`` with ``min_feasible_cap``."""
    config = config or CpSatConfig()
    deadline = deadline or config.deadline()
    known = as_searched(problem, known)
    if problem.is_free:
        return search_free(problem, config, known, deadline, Mode.SEARCH)
    return search_fixed(problem, problem.fixed_placement, config, known, deadline, Mode.SEARCH)  # type: ignore[arg-type]


def bound(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = (), *,
          deadline: Deadline | None = None) -> Result:
    """The proven lower bound on the optimal objective (max of analytic and CP-SAT bounds)
    and each known schedule's gap to it (``Result.known``); also the best schedule found
    on the way. The bound phase gets all of the time after the start."""
    config = config or CpSatConfig()
    deadline = deadline or config.deadline()
    known = as_searched(problem, known)
    if not problem.is_free:
        return search_fixed(problem, problem.fixed_placement, config, known, deadline, Mode.BOUND)  # type: ignore[arg-type]
    res = search_free(problem, config, known, deadline, Mode.BOUND)
    if not res.known and problem.num_pipelines == 1 and problem.num_stages[0] == problem.num_devices:
        # judge the linear known schedules against the free-placement bound too
        pl = Placement((tuple(range(problem.num_devices)),), problem.num_devices)
        evals, _ = judge(problem, registry_schedules(problem.with_placement(pl), pl, config.start.probe))
        res = replace(res, known={e.name: KnownGap(e.makespan, e.fits, gap_of(e.makespan, res.lower_bound)
                                                   if e.fits else None) for e in evals})
    return res


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
        res = search(problem.with_costs(problem.costs.with_activation_cap(cap)), config, list(known) + found)
        if res.schedule is not None and not problem.is_free:
            found.append(res.schedule)
        points[cap] = FrontPoint(cap, str(res.status), res.makespan, res.lower_bound, res.gap, res.min_feasible_cap)
    return [points[c] for c in caps]
