"""A problem in seconds answered by the CP-SAT model: ``solve_seconds`` searches on
durations rounded up to integer ticks, bounds on durations rounded down (the memory-aware
CP-SAT bound, not only the analytic one), re-simulates the schedule on the real-valued
costs and reports seconds. The CLI's ``search`` and ``bound``, sweeps and ``plan`` all
call it, so the same question gets the same numbers wherever it is asked; ``search`` and
``bound`` run the same solves (a bound is never weaker for having asked for a schedule).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

from .costs import Costs, Rounding
from .cpsat.api import bound, search
from .cpsat.objectives import objective
from .cpsat.params import CpSatConfig
from .cpsat.result import Mode, Result, Status, gap_of
from .cpsat.starts import as_searched, generator_of, registry_schedules
from .simulate import simulate

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule

    from .cpsat.params import SecondsParams
    from .cpsat.problem import Objective, Problem
    from .deadline import Deadline


@dataclass(frozen=True)
class KnownSeconds:
    """A known schedule judged in seconds: its objective on the real-valued costs, whether
    it fits, and its gap to the answer's bound."""

    seconds: float | None
    fits: bool
    gap: float | None

    def as_dict(self) -> dict:
        return {"makespan": self.seconds, "fits": self.fits, "gap": self.gap}


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A problem in seconds answered (``solve_seconds``): the ``schedule`` found and its
    objective in ``seconds`` on the real-valued costs (simulated), ``lower_bound_s`` a
    bound of the real-valued problem (proven with durations rounded down to ticks of
    ``tick_s``), ``status`` (``optimal`` only when the two meet; else the message says
    why), ``rounding``: how far the schedule's time on durations rounded up lies above
    its time on durations rounded down, as a share of its real time (what the ticks alone
    can hide of the gap), the known schedules in seconds, the assumptions, and the solves
    behind it (``search``: durations rounded up; ``bound``: rounded down)."""

    mode: Mode
    status: Status
    schedule: Schedule | None
    seconds: float | None
    lower_bound_s: float | None
    tick_s: float
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
        """The solve whose schedule this is: the search's (the bound's when the search
        found none)."""
        if self.search is not None and (self.search.schedule is not None or self.schedule is None):
            return self.search
        return self.bound


def rounding_spread(schedule: Schedule, real: Costs, tick: float) -> float:
    """How far ``schedule``'s simulated step on durations rounded up to ticks of ``tick``
    lies above its step on durations rounded down, as a share of its real-valued one:
    about what the ticks can hide of a gap between a schedule so timed and a bound
    proven on durations rounded down."""
    value = simulate(schedule, real).makespan
    up = simulate(schedule, real.quantized(tick, Rounding.UP)).makespan * tick
    down = simulate(schedule, real.quantized(tick, Rounding.DOWN)).makespan * tick
    return max(0.0, up - down) / value if value > 0 else 0.0


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
    """``shape`` (its placement, pipelines, split and objective) on ``real`` costs in
    seconds: a search on durations rounded up to ticks of ``tick_s`` (as given; default
    ``choose_tick``'s) for
    ``SecondsParams.search_share`` of the time, then a bound — memory-aware, CP-SAT's,
    seeded with that schedule — on durations rounded down for the rest; ``mode`` only
    says what was asked (both run the same solves, so ``search`` and ``bound`` report the
    same bound). The schedule is re-simulated on ``real`` (a schedule's real objective is
    at most its rounded-up one), and the bound holds for the real-valued problem.
    ``known_costs``: what the known schedules are judged on (default ``real``)."""
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
    # the search's schedule (its bound solve's only when the search found none)
    schedule = next((r.schedule for r in (found, proof) if r.schedule is not None), None)
    seconds = None if schedule is None else spec.seconds(shape, schedule, real)
    lb = None if proof.status is Status.INFEASIBLE or proof.lower_bound is None else proof.lower_bound * tick
    if seconds is not None and lb is not None and lb > seconds + 1e-12 * max(1.0, seconds):
        raise RuntimeError(f"lower bound {lb} s above the simulated {seconds} s: a rounding bug")
    rounding = None if schedule is None else rounding_spread(schedule, real, tick)
    status, message = _status(found, proof, seconds, lb, rounding, tick)
    assumptions = tuple(a if not a.startswith("durations rounded") else
                        "lower bound: durations rounded down to ticks (a bound of the real-valued problem); "
                        "schedules searched with durations rounded up, timed by the simulator"
                        for a in proof.bound_assumptions)
    return Answer(mode=mode, status=status, schedule=schedule, seconds=seconds, lower_bound_s=lb, tick_s=tick,
                  objective=shape.objective, search=found, bound=proof,
                  known=_known_seconds(shape, found, known, known_costs, lb), message=message,
                  assumptions=assumptions, runtime_s=time.perf_counter() - deadline.t0, rounding=rounding)


def _status(found: Result, proof: Result, seconds: float | None, lb: float | None, rounding: float | None,
            tick: float) -> tuple[Status, str]:
    """``optimal`` only where the bound meets the real-valued time; otherwise ``feasible``
    with a message saying how much of the gap the ticks can explain."""
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


def _known_seconds(shape: Problem, res: Result, known: Sequence[Schedule], costs: Costs,
                   lb: float | None) -> dict[str, KnownSeconds]:
    """The known schedules ``res`` judged, in seconds on ``costs`` (the given ones and the
    registry's of the shape; only those ``res`` names are generated again)."""
    from pipetab.schedules.registry import REGISTRY

    spec, out = objective(shape), {}
    placement = shape.fixed_placement
    unjudged = set(REGISTRY) - {generator_of(k) for k in res.known}
    pool = {s.name: s for s in (registry_schedules(shape, placement, done=unjudged) if placement is not None else ())}
    pool.update({s.name: s for s in known})
    for name, k in res.known.items():
        s = pool.get(name)
        value = None if s is None or k.makespan is None else spec.seconds(shape, s, costs)
        out[name] = KnownSeconds(value, k.fits, gap_of(value, lb) if k.fits else None)
    return out
