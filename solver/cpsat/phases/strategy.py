"""The bound and search phases on a fixed placement (``fixed`` runs start → bound →
search; docs/cpsat.md): ``bound_phase`` tightens the horizon, ``search_phase`` hints the model
with the incumbent and restarts it when it stalls; ``SearchState`` carries both between them.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Sequence

from ..model.cpmodel import CpSatModel, RawSolve
from ..model.objectives import objective
from ..model.oracle import KnownEval, checked, hint_form
from ..model.variables import BuildTimeout
from ..result import SolveRecord, Status, gap_of

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement
    from pipetab.solver.deadline import Deadline

    from ..params import CpSatConfig
    from ..problem import Problem


class StopSignal:
    """``is_set()`` for a solve's watch thread: the search done, a stop rule holding, ``extra``
    set, or the wall clock past ``deadline`` (CP-SAT's own limit is not always checked in time)."""

    def __init__(self, state: "SearchState", extra: threading.Event | None = None, deadline: float | None = None):
        self.state = state
        self.extra = extra
        self.deadline = deadline

    def is_set(self) -> bool:
        return (self.state.should_stop() or (self.extra is not None and self.extra.is_set())
                or (self.deadline is not None and time.perf_counter() > self.deadline))


class SearchState:
    """The incumbent and proven bound of one search, under one lock (solves report from CP-SAT's
    callback thread): ``value`` (``improved``) can run ahead of ``incumbent`` (``offer``). Done
    once the bound meets the value; stopped once done or a stop rule holds (``stopped_by``)."""

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
        """A proven lower bound on the optimal objective (None: none)."""
        with self._lock:
            if bound is not None and bound > self.bound:
                self.bound = bound
                self.last_change = time.perf_counter()
            self._settle()

    def probe(self, horizon: int) -> threading.Event:
        """A probe's stop event at ``horizon``: set once a schedule at or below it exists."""
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

def search_configs(config: CpSatConfig, num_ops: int = 0) -> tuple[CpSatConfig, ...]:
    """The search phase's solves, in turn: on at most 2 workers with the default portfolio one
    full search per ``StrategyParams.searches`` (CP-SAT fills the other worker with LNS; LP ones
    only up to ``lp_max_ops`` ops), else ``config``'s portfolio; presolve probing off."""
    extra = PROBING_OFF + config.extra_params
    if config.subsolvers is not None or config.workers > 2:
        return (config.replace(extra_params=extra),)
    searches = [sub for sub in config.strategy.searches
                if num_ops <= config.strategy.lp_max_ops or not any("lp" in s and "no_lp" not in s for s in sub)]
    return tuple(config.replace(subsolvers=sub, extra_params=extra) for sub in searches or config.strategy.searches[:1])


def proof_config(config: CpSatConfig) -> CpSatConfig:
    """A probe's config: on 2+ workers with the default portfolio and a wall-clock limit,
    CP-SAT's shared tree search on all (what an infeasibility proof needs); else ``config``. Only
    for models without a memory cumulative (with one it overran its limit by far, docs/cpsat.md)."""
    if config.workers < 2 or config.subsolvers is not None or config.deterministic_time is not None:
        return config
    return config.replace(subsolvers=("shared_tree",),
                          extra_params=(("shared_tree_num_workers", config.workers), *config.extra_params))


def build_model(problem: Problem, placement: Placement, config: CpSatConfig, cap: int, bound: int,
                deadline: float | None = None, mirror=None, around: KnownEval | None = None) -> CpSatModel:
    """The model of schedules of objective at most ``cap``, at least ``bound``; ``BuildTimeout``
    past ``deadline``; ``around``: the incumbent whose pairs a cut pair set keeps."""
    horizon, objective_cap = objective(problem).model_horizon(problem, placement, cap)
    return CpSatModel(problem, config, placement, horizon, makespan_lb=bound, objective_cap=objective_cap,
                      deadline=deadline, mirror=mirror, around=None if around is None else around.schedule)


def solution_of(problem: Problem, model: CpSatModel, raw: RawSolve) -> KnownEval | None:
    """The schedule of a solve, re-checked by the evaluator (None when none was found)."""
    return None if raw.starts is None else checked(problem, model.schedule_from(raw, name="cpsat"), raw.makespan)


def search_phase(problem: Problem, placement: Placement, config: CpSatConfig, state: SearchState,
                 deadline: Deadline, rows: list, mirror=None) -> None:
    """The model hinted with the incumbent until the deadline; a solve that improves nothing
    for ``StrategyParams.stall_share`` of the phase restarts with the next of ``search_configs``
    and seed (not under a deterministic limit). With ``mirror`` pairs the restricted model gets
    the first ``mirror_share``: its schedules count, its bound does not."""
    params = config.strategy
    configs = search_configs(config, problem.num_ops)
    if mirror and not state.should_stop() and deadline.room(state.build_s):
        _mirror_solve(problem, placement, configs[0], state, deadline, rows, mirror)
    stall_s = max(params.stall_min_s, deadline.left() * params.stall_share)
    attempt = 0
    while not state.should_stop() and deadline.room(state.build_s):
        incumbent, bound = state.snapshot()
        base = configs[attempt % len(configs)]
        cfg = base.replace(random_seed=base.random_seed + attempt)
        model = _built(state, lambda: build_model(problem, placement, cfg, incumbent.makespan, bound,  # type: ignore[arg-type]
                                                  deadline=deadline.end, around=incumbent))
        if model is None:
            break
        raw = _hinted_solve(problem, model, state, deadline, rows, "search", 1.0, stall_s)
        state.raise_bound(raw.bound)
        if not raw.stalled or deadline.left() < stall_s / 2:
            break  # finished, or too little time for a restart to get past presolve
        attempt += 1


def _mirror_solve(problem, placement, config, state, deadline: Deadline, rows, mirror) -> None:
    """One solve of the mirror-restricted model for ``mirror_share`` of the deadline (``near_share``
    within ``near_gap``), hinted with the incumbent; its schedule is offered (re-checked), its bound dropped."""
    incumbent, bound = state.snapshot()
    near = (gap_of(incumbent.makespan, bound) or 0) <= config.strategy.near_gap
    share = config.strategy.near_share if near else config.strategy.mirror_share
    model = _built(state, lambda: build_model(problem, placement, config, incumbent.makespan, bound,
                                              deadline=deadline.end, mirror=mirror, around=incumbent))
    if model is not None:
        _hinted_solve(problem, model, state, deadline, rows, "search (mirror)", share)


def _hinted_solve(problem: Problem, model: CpSatModel, state: SearchState, deadline: Deadline, rows: list,
                  phase: str, share: float, stall_s: float | None = None) -> RawSolve:
    """``model`` hinted (unless ablated) with the incumbent in the form its families accept,
    solved on ``share`` of the limits; its schedule offered."""
    if model.config.uses("hints"):
        h = hint_form(problem, state.snapshot()[0], "last-stage glue" in model.applied)
        model.hint(h.schedule, h.timing)
    wall, det = deadline.limits()
    raw = model.solve(wall * share, None if det is None else det * share, stall_s=stall_s,
                      stop=StopSignal(state, deadline=deadline.end), on_solution=state.improved)
    deadline.charge(raw, problem.num_ops)
    rows.append(solve_record(phase, model.config, None, raw))
    state.offer(solution_of(problem, model, raw))
    return raw


def bound_phase(problem: Problem, placement: Placement, config: CpSatConfig, state: SearchState,
                deadline: Deadline, rows: list, leave_early: bool) -> None:
    """Horizon tightening: while time lasts, is there a schedule of objective at most h >= the
    bound (the model rebuilt for h: presolve on tight domains)? Infeasible proves h + 1; a
    schedule improves the incumbent; unknown ends the phase. After two timed proofs h jumps
    (``tighten_step``); ``leave_early``: end once even one step is predicted too long. Models
    without a memory cumulative probe with ``proof_config``. With ``leave_early`` a probe before any
    proof within ``near_gap`` of the incumbent gets ``near_share``: the search is sooner."""
    proofs: list[tuple[int, float]] = []
    params = config.strategy
    while not state.should_stop() and deadline.room(state.build_s):
        remaining = deadline.left()
        bound, value = state.bound, state.value
        if leave_early and (predicted_proof_time(proofs, 1, params.growth_clamp) or -math.inf) > remaining:
            break
        h = bound + tighten_step(proofs, remaining, value - bound, params.growth_clamp) - 1
        stop = state.probe(h)
        model = _built(state, lambda: build_model(problem, placement, config, h, bound, deadline=deadline.end,
                                                  around=state.snapshot()[0]))
        if model is None:
            break
        if "cumulative" not in model.applied:
            model.config = proof_config(config)
        wall, det = deadline.limits()
        if leave_early and not proofs and (gap_of(value, bound) or 0) <= params.near_gap:  # search: sooner
            wall, det = wall * params.near_share, det and det * params.near_share
        raw = model.solve(wall, det, stop=StopSignal(state, stop, deadline.end), on_solution=state.improved)
        deadline.charge(raw, problem.num_ops)
        rows.append(solve_record("bound", model.config, h, raw))
        if raw.status is Status.INFEASIBLE:
            proofs.append((h, deadline.cost(raw, problem.num_ops)))
            state.raise_bound(h + 1)
            continue
        state.offer(solution_of(problem, model, raw))
        if raw.status is Status.OPTIMAL:
            state.raise_bound(raw.makespan)
            break
        state.raise_bound(None if raw.bound is None else min(raw.bound, h + 1))  # the probe holds all <= h
        if raw.makespan is None and not stop.is_set():
            break


def _built(state: "SearchState", build) -> CpSatModel | None:
    """``build()``, its time and families noted in ``state``; None when it ran out of time."""
    try:
        model = build()
    except BuildTimeout:
        return None
    state.build_s = max(state.build_s, model.build_s)
    state.families = state.families or tuple(a for a in model.applied if not a.startswith("mirror"))
    return model


def tighten_step(proofs: Sequence[tuple[int, float]], remaining: float, gap: int,
                 clamp: tuple[float, float] = (2.0, 4.0)) -> int:
    """How far the next probe jumps (1: the bound itself): the largest k below the incumbent
    whose ``predicted_proof_time`` is at most half the time left (proof times grow about
    geometrically near the optimum)."""
    k = 1
    while k + 1 < gap and (predicted_proof_time(proofs, k + 1, clamp) or math.inf) <= remaining / 2:
        k += 1
    return k


def predicted_proof_time(proofs: Sequence[tuple[int, float]], k: int,
                         clamp: tuple[float, float] = (2.0, 4.0)) -> float | None:
    """A probe ``k`` steps above the last proof: its time times the growth per step (from the
    last two ``proofs``, clamped to ``clamp``) to the ``k``; None before two proofs."""
    if len(proofs) < 2:
        return None
    (h0, t0), (h1, t1) = proofs[-2], proofs[-1]
    ratio = (max(t1, 1e-3) / max(t0, 1e-3)) ** (1.0 / max(1, h1 - h0))
    return t1 * min(clamp[1], max(clamp[0], ratio)) ** k


def solve_record(phase: str, config: CpSatConfig, horizon: int | None, raw: RawSolve) -> SolveRecord:
    """The record of one solve of ``phase`` with ``config``."""
    return SolveRecord(phase, "+".join(config.portfolio() or ("cp-sat",)), config.random_seed, horizon,
                       raw.status, raw.makespan, raw.bound, round(raw.wall_time, 3), round(raw.det_time, 3),
                       raw.stalled)
