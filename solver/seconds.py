"""A problem in seconds answered by the CP-SAT model: ``solve_seconds`` searches on
durations rounded up to integer ticks, bounds on durations rounded down (the memory-aware
CP-SAT bound, not only the analytic one), re-simulates the schedule on the real-valued
costs and reports seconds. The CLI's ``search`` and ``bound``, sweeps and ``plan`` all
call it, so the same question gets the same numbers wherever it is asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from .costs import SEARCH_TICKS_PER_OP, Costs, Rounding
from .cpsat.api import bound, search
from .cpsat.objectives import objective
from .cpsat.params import CpSatConfig
from .cpsat.result import Mode, Result, Status, gap_of
from .cpsat.starts import registry_schedules

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule

    from .cpsat.problem import Objective, Problem
    from .deadline import Deadline

# share of the time a search in seconds spends on the rounded-up search; the rest proves the
# bound on durations rounded down, seeded with what the search found
SEARCH_SHARE = 0.75


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
    why), the known schedules in seconds, the assumptions, and the solves behind it
    (``search``: durations rounded up; ``bound``: rounded down)."""

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

    @property
    def gap(self) -> float | None:
        return gap_of(self.seconds, self.lower_bound_s)

    @property
    def result(self) -> Result:
        """The solve whose schedule this is: the search's, the bound's in ``bound`` mode
        (or when the search found none)."""
        if self.search is not None and (self.search.schedule is not None or self.schedule is None):
            return self.search
        return self.bound


def solve_seconds(shape: Problem, real: Costs, mode: Mode | str = Mode.SEARCH, config: CpSatConfig | None = None,
                  known: Sequence[Schedule] = (), *, tick_s: float | None = None, known_costs: Costs | None = None,
                  deadline: Deadline | None = None) -> Answer:
    """``shape`` (its placement, pipelines, split and objective) on ``real`` costs in
    seconds: in ``search`` mode a search on durations rounded up to ticks of ``tick_s``
    (default: 1/``SEARCH_TICKS_PER_OP`` of the shortest op) for ``SEARCH_SHARE`` of the
    time, then a bound — memory-aware, CP-SAT's, seeded with that schedule — on durations
    rounded down for the rest; in ``bound`` mode the bound alone. The search's schedule
    (the bound's in ``bound`` mode) is re-simulated on ``real`` (a schedule's real
    objective is at most its rounded-up one), and the bound holds for the real-valued
    problem.
    ``known_costs``: what the known schedules are judged on (default ``real``)."""
    mode, config = Mode(mode), config or CpSatConfig()
    deadline = deadline or config.deadline()
    tick = tick_s or real.default_tick(SEARCH_TICKS_PER_OP)
    down = shape.with_costs(real.quantized(tick, Rounding.DOWN))
    found = None
    if mode is Mode.SEARCH:
        found = search(shape.with_costs(real.quantized(tick, Rounding.UP)), config, known,
                       deadline=deadline.slice(SEARCH_SHARE))
        seeds = list(known) + ([found.schedule] if found.schedule is not None else [])
        proof = bound(down, config, seeds, deadline=deadline.slice(1.0))
    else:
        proof = bound(down, config, known, deadline=deadline)
    return _answer(shape, real, mode, tick, found, proof, known, known_costs or real, deadline)


def _answer(shape: Problem, real: Costs, mode: Mode, tick: float, found: Result | None, proof: Result,
            known: Sequence[Schedule], known_costs: Costs, deadline: Deadline) -> Answer:
    spec = objective(shape)
    # the search's schedule (its bound solve's only when the search found none)
    schedule = next((r.schedule for r in (found, proof) if r is not None and r.schedule is not None), None)
    seconds = None if schedule is None else spec.seconds(shape, schedule, real)
    lb = None if proof.status is Status.INFEASIBLE or proof.lower_bound is None else proof.lower_bound * tick
    if seconds is not None and lb is not None and lb > seconds + 1e-12 * max(1.0, seconds):
        raise RuntimeError(f"lower bound {lb} s above the simulated {seconds} s: a rounding bug")
    status, message = (found or proof).status, (found or proof).message
    if status is Status.OPTIMAL and (lb is None or seconds is None or lb < seconds - 1e-12 * max(1.0, seconds)):
        status = Status.FEASIBLE
        message = ("optimal on the quantized durations; the real-valued time lies above the bound of "
                   "durations rounded down")
    if proof.status is Status.INFEASIBLE:
        status, message = Status.INFEASIBLE, proof.message
    assumptions = tuple(a if not a.startswith("durations rounded") else
                        "lower bound: durations rounded down to ticks (a bound of the real-valued problem); "
                        "schedules searched with durations rounded up, timed by the simulator"
                        for a in proof.bound_assumptions)
    return Answer(mode=mode, status=status, schedule=schedule, seconds=seconds, lower_bound_s=lb, tick_s=tick,
                  objective=shape.objective, search=found, bound=proof,
                  known=_known_seconds(shape, found or proof, known, known_costs, lb),
                  message=message, assumptions=assumptions, runtime_s=time.perf_counter() - deadline.t0)


def _known_seconds(shape: Problem, res: Result, known: Sequence[Schedule], costs: Costs,
                   lb: float | None) -> dict[str, KnownSeconds]:
    """The known schedules ``res`` judged, in seconds on ``costs`` (the given ones and the
    registry's of the shape)."""
    spec, out = objective(shape), {}
    placement = shape.fixed_placement
    pool = {s.name: s for s in (registry_schedules(shape, placement) if placement is not None else ())}
    pool.update({s.name: s for s in known})
    for name, k in res.known.items():
        s = pool.get(name)
        value = None if s is None or k.makespan is None else spec.seconds(shape, s, costs)
        out[name] = KnownSeconds(value, k.fits, gap_of(value, lb) if k.fits else None)
    return out
