"""The one search strategy on a fixed placement (``docs/cpsat.md`` describes it):

1. **start**: the known schedules given, the registry's schedules of the problem's shape
   (``CpSatConfig.known_generators``) and the model's own greedy list schedules, judged
   by the evaluator, then improved by double justification; the best that fits is the
   incumbent. Every step checks the clock and is skipped when it is predicted not to fit.
2. **bound**: horizon tightening — is there a schedule whose objective is at most h? —
   with CP-SAT's shared tree search on all workers, for ``bound_share`` of the time left
   (all of it in ``bound`` mode).
3. **search**: the model hinted with the incumbent, restarted with the next search and
   seed when it stalls, until the time is up.

A phase ends early once the bound meets the incumbent or a stop rule holds. Each phase
leaves a ``PhaseRecord``; ``SearchState`` carries the incumbent and the bound between them.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Sequence

from pipetab.schedules.schedule import Placement

from .config import CpSatConfig
from .bounds import period_horizon
from .incumbent import hint_incumbent, solution_of
from .model import CpSatModel, RawSolve
from .variables import BuildTimeout
from .oracle import KnownEval
from .problem import Problem
from .result import SolveRecord, gap_of


# the phases end this share of the limit (at most SAFETY_MAX_S) early: CP-SAT's presolve
# overruns short limits by tenths of a second, and the schedule found is re-checked
# (simulated, validated) after
SAFETY_SHARE = 0.05
SAFETY_MAX_S = 1.0


class Clock:
    """The time of one call: a wall-clock deadline (``SAFETY_SHARE`` before the limit)
    always; with ``deterministic_time``, phases share CP-SAT's deterministic seconds
    instead (reproducible), the wall clock still capping every solve."""

    def __init__(self, config: CpSatConfig, t0: float | None = None, deadline: float | None = None):
        self.t0 = time.perf_counter() if t0 is None else t0
        if deadline is None:
            deadline = self.t0 + config.time_limit_s - min(SAFETY_SHARE * config.time_limit_s, SAFETY_MAX_S)
        self.deadline = deadline
        self.deterministic = config.deterministic_time is not None
        self.det_left = config.deterministic_time

    def wall_left(self) -> float:
        return self.deadline - time.perf_counter()

    def left(self) -> float:
        """Time left in the clock's unit (deterministic or wall-clock seconds)."""
        if self.deterministic:
            return self.det_left if self.wall_left() > 0 else 0.0
        return self.wall_left()

    def budget(self, share: float) -> "Budget":
        """A phase's budget: ``share`` of what is left."""
        return Budget(self, share * max(0.0, self.left()))


# deterministic seconds a model build counts per op (CP-SAT counts none for it)
_BUILD_DET = 2e-6


class Budget:
    """Part of a ``Clock`` given to one phase."""

    def __init__(self, clock: Clock, amount: float):
        self.clock = clock
        self.amount = amount
        self.wall_end = time.perf_counter() + amount if not clock.deterministic else clock.deadline

    def left(self) -> float:
        if self.clock.deterministic:
            return min(self.amount, self.clock.det_left) if self.clock.wall_left() > 0 else 0.0
        return min(self.wall_end, self.clock.deadline) - time.perf_counter()

    def end(self) -> float:
        """The wall-clock time the phase must end by."""
        return min(self.wall_end, self.clock.deadline)

    def room(self, build_s: float) -> bool:
        """Whether another model build (``build_s`` seconds, as the last one took) and a
        solve still fit: CP-SAT's presolve may overrun a short limit by tenths of a second."""
        if self.clock.deterministic:
            return self.left() >= 0.01 and self.clock.wall_left() > 0
        return self.left() >= max(0.5, 1.5 * build_s)

    def limits(self) -> tuple[float, float | None]:
        """(wall-clock, deterministic) limits of a solve that may use all of the budget."""
        wall = min(self.wall_end, self.clock.deadline) - time.perf_counter()
        return max(0.01, wall), (max(1e-3, self.left()) if self.clock.deterministic else None)

    def charge(self, raw: RawSolve, num_ops: int) -> None:
        if self.clock.deterministic:
            cost = self.cost(raw, num_ops)
            self.amount -= cost
            self.clock.det_left -= cost

    def cost(self, raw: RawSolve, num_ops: int) -> float:
        """What a solve cost in the clock's unit; deterministically, building the model
        and a solve that presolve settles count ``_BUILD_DET`` per op at least."""
        return max(raw.det_time, _BUILD_DET * num_ops) if self.clock.deterministic else raw.wall_time


class StopSignal:
    """``is_set()`` for a solve's watch thread: the search is done, a stop rule holds, the
    ``extra`` event is set, or the wall clock is past ``deadline`` (CP-SAT's own time
    limit is not always checked in time: a solve with a 13-s limit was seen to run 25 s)."""

    def __init__(self, state: "SearchState", extra: threading.Event | None = None, deadline: float | None = None):
        self.state = state
        self.extra = extra
        self.deadline = deadline

    def is_set(self) -> bool:
        return (self.state.should_stop() or (self.extra is not None and self.extra.is_set())
                or (self.deadline is not None and time.perf_counter() > self.deadline))


class SearchState:
    """The incumbent and the proven bound of one search (under one lock: solves report
    from CP-SAT's callback thread). ``value`` can run ahead of ``incumbent``: a solve
    reports each solution's objective (``improved``) before it returns the schedule
    (``offer``). Done once the bound meets the value; stopped once done or a stop rule of
    ``config`` holds (``stopped_by`` names it)."""

    def __init__(self, incumbent: KnownEval, bound: int, config: CpSatConfig, t0: float):
        self._lock = threading.Lock()
        self.incumbent = incumbent
        self.value = incumbent.makespan
        self.bound = bound
        self.rules = config.stop_rules()
        self.t0 = t0
        self.last_change = time.perf_counter()
        self.stopped_by: str | None = None
        self.families: tuple[str, ...] = ()  # of the first model built
        self.build_s = 0.0  # the longest model build so far
        self.build_timeouts = 0
        self._probe: tuple[int, threading.Event] | None = None

    @property
    def done(self) -> bool:
        return self.bound >= self.value

    def should_stop(self) -> bool:
        if self.done:
            return True
        if self.stopped_by is None:
            now = time.perf_counter()
            gap = gap_of(self.value, self.bound)
            for rule in self.rules:
                if rule(now - self.t0, now - self.last_change, gap):
                    self.stopped_by = repr(rule)
                    break
        return self.stopped_by is not None

    def snapshot(self) -> tuple[KnownEval, int]:
        with self._lock:
            return self.incumbent, self.bound

    def improved(self, value: int) -> None:
        """A running solve found a schedule of objective ``value``."""
        with self._lock:
            self._lower_value(value)

    def offer(self, found: KnownEval | None) -> None:
        """A judged schedule from a finished solve; kept when better than the incumbent."""
        if found is None:
            return
        with self._lock:
            if found.makespan < self.incumbent.makespan:
                self.incumbent = found
            self._lower_value(found.makespan)

    def _lower_value(self, value: int) -> None:
        if value < self.value:
            self.value = value
            self.last_change = time.perf_counter()
        self._settle()

    def raise_bound(self, bound: int | None) -> None:
        """A proven lower bound on the optimal objective."""
        if bound is None:
            return
        with self._lock:
            if bound > self.bound:
                self.bound = bound
                self.last_change = time.perf_counter()
            self._settle()

    def probe(self, horizon: int) -> threading.Event:
        """The stop event of a tightening probe at ``horizon``: set once a schedule at or
        below it exists (the probe is then moot)."""
        with self._lock:
            self._probe = (horizon, threading.Event())
            self._settle()
            return self._probe[1]

    def _settle(self) -> None:
        if self._probe is not None and (self.done or self.value <= self._probe[0]):
            self._probe[1].set()


# presolve probing off for searches: it delays the first decision by seconds on long
# pipelines and a search hinted with the incumbent does not need it
PROBING_OFF: tuple[tuple[str, object], ...] = (("cp_model_probing_level", 0),)

# the search phase's solves on at most 2 workers: one full search, CP-SAT's LNS on the
# other worker; a stalled solve restarts with the next one and the next seed
SEARCHES: tuple[tuple[str, ...], ...] = (("no_lp",), ("default_lp",))

# a search solve that finds nothing better for this share of the phase restarts
STALL_SHARE = 0.4


def search_configs(config: CpSatConfig) -> tuple[CpSatConfig, ...]:
    """The search phase's solves, used in turn: on at most 2 workers with the default
    portfolio one full search of ``SEARCHES`` each (CP-SAT fills the other worker with
    LNS), otherwise ``config``'s portfolio; presolve probing off."""
    extra = PROBING_OFF + config.extra_params
    if config.subsolvers is not None or config.workers > 2:
        return (config.replace(extra_params=extra),)
    return tuple(config.replace(subsolvers=sub, extra_params=extra) for sub in SEARCHES)


def proof_config(config: CpSatConfig) -> CpSatConfig:
    """A tightening probe's config: on at least 2 workers with the default portfolio and
    a wall-clock limit, CP-SAT's shared tree search on all of them (the workers split one
    search tree — the kind of search an infeasibility proof needs); else ``config``.
    Used only on models without a memory cumulative (``bound_phase``): with cumulatives
    of variable-size lifetimes a shared-tree task ran 43 s past a 14-s limit."""
    if config.workers < 2 or config.subsolvers is not None or config.deterministic_time is not None:
        return config
    return config.replace(subsolvers=("shared_tree",),
                          extra_params=(("shared_tree_num_workers", config.workers),) + config.extra_params)


def build_model(problem: Problem, placement: Placement, config: CpSatConfig, cap: int, bound: int,
                deadline: float | None = None, mirror=None) -> CpSatModel:
    """The model of the schedules whose objective is at most ``cap`` (for the makespan
    the horizon; for the period ``period_horizon`` of it bounds every time), the
    objective at least ``bound``. Building past ``deadline`` raises ``BuildTimeout``."""
    if problem.objective == "makespan":
        return CpSatModel(problem, config, placement, cap, makespan_lb=bound, deadline=deadline, mirror=mirror)
    return CpSatModel(problem, config, placement, period_horizon(problem, placement, cap), makespan_lb=bound,
                      objective_cap=cap, deadline=deadline, mirror=mirror)


def search_phase(problem: Problem, placement: Placement, config: CpSatConfig, state: SearchState,
                 budget: Budget, rows: list, mirror=None) -> None:
    """The model hinted with the incumbent until the budget is spent; a solve that finds
    nothing better for ``STALL_SHARE`` of the budget restarts from the incumbent with the
    next of ``search_configs`` and the next seed (not under a deterministic limit). With
    ``mirror`` pairs (``mirror.mirror_pairs``) the mirror-restricted model gets the first
    ``MIRROR_SHARE`` of the budget: its schedules count, its bound does not."""
    configs = search_configs(config)
    if mirror and not state.should_stop() and budget.room(state.build_s):
        _mirror_solve(problem, placement, configs[0], state, budget, rows, mirror)
    stall_s = max(2.0, budget.left() * STALL_SHARE)
    attempt = 0
    while not state.should_stop() and budget.room(state.build_s):
        incumbent, bound = state.snapshot()
        base = configs[attempt % len(configs)]
        cfg = base.replace(random_seed=base.random_seed + attempt)
        model = _built(state, lambda: build_model(problem, placement, cfg, incumbent.makespan, bound,
                                                  deadline=budget.end()))
        if model is None:
            break
        hint_incumbent(model, problem, incumbent)
        wall, det = budget.limits()
        raw = model.solve(wall, det, stall_s=stall_s, stop=StopSignal(state, deadline=budget.end()),
                          on_solution=state.improved)
        budget.charge(raw, len(problem.ops))
        rows.append(solve_record("search", cfg, None, raw))
        state.offer(solution_of(problem, model, raw))
        state.raise_bound(raw.bound)
        if not raw.stalled or budget.left() < stall_s / 2:
            break  # finished, or too little time for a restart to get past presolve
        attempt += 1


# share of the search phase the mirror-restricted model gets first, where it applies
MIRROR_SHARE = 0.5


def _mirror_solve(problem, placement, config, state, budget, rows, mirror) -> None:
    """One solve of the mirror-restricted model for ``MIRROR_SHARE`` of ``budget``, hinted
    with the incumbent; its schedule is offered (re-checked), its bound dropped."""
    incumbent, bound = state.snapshot()
    model = _built(state, lambda: build_model(problem, placement, config, incumbent.makespan, bound,
                                              deadline=budget.end(), mirror=mirror))
    if model is None:
        return
    hint_incumbent(model, problem, incumbent)
    wall, det = budget.limits()
    wall, det = wall * MIRROR_SHARE, None if det is None else det * MIRROR_SHARE
    raw = model.solve(wall, det, stop=StopSignal(state, deadline=budget.end()), on_solution=state.improved)
    budget.charge(raw, len(problem.ops))
    rows.append(solve_record("search (mirror)", config, None, raw))
    state.offer(solution_of(problem, model, raw))


def bound_phase(problem: Problem, placement: Placement, config: CpSatConfig, state: SearchState,
                budget: Budget, rows: list, leave_early: bool) -> None:
    """Horizon tightening: while the budget lasts, ask whether a schedule with objective
    at most h >= the bound exists (the model rebuilt for h, so presolve works on tight
    domains). Infeasible proves h + 1; a schedule found improves the incumbent (optimal
    when proven); unknown ends the phase. After two timed proofs h jumps ahead
    (``tighten_step``). With ``leave_early`` the phase ends once even a one-step probe is
    predicted to need more than the budget left, leaving the time to the search. Probes
    of models without a memory cumulative run ``proof_config``."""
    proofs: list[tuple[int, float]] = []
    while not state.should_stop() and budget.room(state.build_s):
        remaining = budget.left()
        bound, value = state.bound, state.value
        predicted = predicted_proof_time(proofs, 1)
        if leave_early and predicted is not None and predicted > remaining:
            break
        h = bound + tighten_step(proofs, remaining, value - bound) - 1
        stop = state.probe(h)
        model = _built(state, lambda: build_model(problem, placement, config, h, bound, deadline=budget.end()))
        if model is None:
            break
        if "cumulative" not in model.applied:
            model.config = proof_config(config)
        wall, det = budget.limits()
        raw = model.solve(wall, det, stop=StopSignal(state, stop, budget.end()), on_solution=state.improved)
        budget.charge(raw, len(problem.ops))
        rows.append(solve_record("bound", model.config, h, raw))
        if raw.status == "infeasible":
            proofs.append((h, budget.cost(raw, len(problem.ops))))
            state.raise_bound(h + 1)
            continue
        state.offer(solution_of(problem, model, raw))
        if raw.status == "optimal":
            state.raise_bound(raw.makespan)
            break
        if raw.bound is not None:  # the probe's model holds every schedule of objective <= h
            state.raise_bound(min(raw.bound, h + 1))
        if raw.makespan is not None or stop.is_set():
            continue
        break


def _built(state: "SearchState", build) -> CpSatModel | None:
    """``build()``, its time and families noted in ``state``; None when it ran out of time."""
    try:
        model = build()
    except BuildTimeout:
        state.build_timeouts += 1
        return None
    state.build_s = max(state.build_s, model.build_s)
    state.families = state.families or tuple(a for a in model.applied if not a.startswith("mirror"))
    return model


def tighten_step(proofs: Sequence[tuple[int, float]], remaining: float, gap: int) -> int:
    """How far the next probe jumps (1: the bound itself), from earlier ``proofs`` as
    (horizon, time): the largest k whose ``predicted_proof_time`` is at most half the time
    left, below the incumbent. Proof times grow about geometrically near the optimum, so
    climbing one step at a time spends as long on the easy steps as on the last."""
    k = 1
    while k + 1 < gap and (predicted_proof_time(proofs, k + 1) or math.inf) <= remaining / 2:
        k += 1
    return k


def predicted_proof_time(proofs: Sequence[tuple[int, float]], k: int) -> float | None:
    """The predicted time of a probe ``k`` steps above the last proof's horizon: the last
    proof time times the growth ratio per step (from the last two proofs, clamped to
    2-4) to the power ``k``; None before two proofs."""
    if len(proofs) < 2:
        return None
    (h0, t0), (h1, t1) = proofs[-2], proofs[-1]
    ratio = (max(t1, 1e-3) / max(t0, 1e-3)) ** (1.0 / max(1, h1 - h0))
    return t1 * min(4.0, max(2.0, ratio)) ** k


def solve_record(phase: str, config: CpSatConfig, horizon: int | None, raw: RawSolve) -> SolveRecord:
    """The record of one solve of ``phase`` with ``config``."""
    return SolveRecord(phase, "+".join(config.portfolio() or ("cp-sat",)), config.random_seed, horizon,
                       raw.status, raw.makespan, raw.bound, round(raw.wall_time, 3), round(raw.det_time, 3),
                       raw.stalled)
