"""The phases that follow an unproven full model on a fixed placement, run one after
another: the upper-bound phase (re-solves from the incumbent with CP-SAT's LNS), bounds
of relaxations, and horizon tightening (destructive lower bounding). ``race`` runs a
search and the tightening at once instead."""

from __future__ import annotations

import math
import threading
import time
from typing import Sequence

from pipetab.schedules.schedule import Placement

from .config import CpSatConfig
from .incumbent import hint_incumbent, solution_of
from .model import CpSatModel
from .oracle import KnownEval
from .problem import Problem


class SearchState:
    """The incumbent and the proven bound of one search, shared by the phases and, in
    ``race``, by the threads that search and bound at once (every access under one
    lock). ``makespan`` can run ahead of ``incumbent``: a solve reports each solution's
    makespan from CP-SAT's callback (``improved``) before it returns the schedule
    (``offer``). ``done`` is set once the bound meets the makespan; the probe event of
    the running tightening solve (``probe``) is set once a schedule at or below its
    horizon exists, or with ``done``."""

    def __init__(self, incumbent: KnownEval, bound: int):
        self._lock = threading.Lock()
        self.incumbent = incumbent
        self.makespan = incumbent.makespan
        self.bound = bound
        self.done = threading.Event()
        self._probe: tuple[int, threading.Event] | None = None
        self._with_done: list[threading.Event] = []
        self._settle()

    def stop_with_done(self, event: threading.Event) -> threading.Event:
        """Have ``event`` set once the state is done (at once when it already is)."""
        with self._lock:
            self._with_done.append(event)
            self._settle()
        return event

    def abort(self) -> None:
        """Stop every solve that watches this state (an error or an interrupt elsewhere);
        incumbent and bound stay as they are."""
        with self._lock:
            self.done.set()
            self._settle()

    def snapshot(self) -> tuple[KnownEval, int]:
        """The incumbent and the bound, read together."""
        with self._lock:
            return self.incumbent, self.bound

    def bound_and_makespan(self) -> tuple[int, int]:
        """The bound and the best makespan reported so far, read together."""
        with self._lock:
            return self.bound, self.makespan

    def improved(self, makespan: int) -> None:
        """A running solve found a schedule of ``makespan``."""
        with self._lock:
            self.makespan = min(self.makespan, makespan)
            self._settle()

    def offer(self, found: KnownEval | None) -> None:
        """A judged schedule from a finished solve; kept when better than the incumbent."""
        if found is None:
            return
        with self._lock:
            if found.makespan < self.incumbent.makespan:
                self.incumbent = found
            self.makespan = min(self.makespan, found.makespan)
            self._settle()

    def raise_bound(self, bound: int | None) -> None:
        """A proven lower bound on the optimal makespan."""
        if bound is None:
            return
        with self._lock:
            self.bound = max(self.bound, bound)
            self._settle()

    def probe(self, horizon: int) -> threading.Event:
        """The stop event of a tightening solve at ``horizon`` (set at once when moot)."""
        with self._lock:
            self._probe = (horizon, threading.Event())
            self._settle()
            return self._probe[1]

    def _settle(self) -> None:
        if self.bound >= self.makespan:
            self.done.set()
        if self.done.is_set():
            for event in self._with_done:
                event.set()
        if self._probe is not None and (self.done.is_set() or self.makespan <= self._probe[0]):
            self._probe[1].set()


# presolve probing off for searches: it delays the first decision by 6-7 s on linear
# S=16, B=64 and a search hinted with the incumbent does not need it
PROBING_OFF: tuple[tuple[str, object], ...] = (("cp_model_probing_level", 0),)

# the searches of the upper-bound phase, each with CP-SAT's LNS workers on the other
# thread; a stalled solve restarts with the next one (and the next random seed)
UPPER_SEARCHES: tuple[tuple[str, ...], ...] = (("no_lp",), ("default_lp",))


def upper_phase_config(config: CpSatConfig) -> tuple[CpSatConfig, ...] | None:
    """The configurations of the upper-bound phase's solves, used in turn (None when the
    phase does not run): on at most 2 workers with the default portfolio (whose two
    workers are full searches, no LNS), one full search of ``UPPER_SEARCHES`` with
    CP-SAT's LNS workers on the other thread, presolve probing off (``PROBING_OFF``). Measured on
    that instance (experiments/bench_cpsat.py TARGET2, hinted with the incumbent): no-LP
    search + LNS reached 371 in 10 of 10 solves of 25-50 s, within 8-21 s, from
    incumbents of 372-375; the LP-guided search + LNS in 7 of 9 solves of 25 s from
    three incumbents of 372, and in none of 2 from the third."""
    if not config.upper_phase or config.subsolvers is not None or config.workers > 2:
        return None
    return tuple(config.replace(subsolvers=sub, extra_params=PROBING_OFF + config.extra_params)
                 for sub in UPPER_SEARCHES)


def all_worker_searches(config: CpSatConfig) -> tuple[CpSatConfig, ...]:
    """The solves of a search on all of ``config``'s workers: the upper phase's
    (``upper_phase_config``) or, where that does not apply, CP-SAT's portfolio with
    presolve probing off."""
    return upper_phase_config(config) or (config.replace(extra_params=PROBING_OFF + config.extra_params),)


def improve_upper(problem, placement, configs, state: SearchState, deadline, details, stall_fraction=0.4,
                  concurrent=False, stop: threading.Event | None = None, restart_from_start=False) -> None:
    """The upper-bound phase: the model rebuilt with the incumbent as horizon and hint,
    solved with ``configs[0]`` until ``deadline``; a solve that finds nothing better for
    ``stall_fraction`` of the phase is stopped and restarted from the incumbent with the
    next of ``configs`` and the next random seed (the time to improve is heavy-tailed
    and depends on the search: on linear S=16, B=64, cap 16, C=1, from one 372 the
    LP-guided search stayed at 372 for 25 s with 2 seeds, the no-LP search found 371 in
    19 s with each of 3). Under a deterministic time limit solves do not stall
    (``CpSatModel.solve``), so there is one. Improves ``state`` in place; with
    ``concurrent`` (``race``) its solves report each solution as it comes and stop once
    ``stop`` (default: ``state.done``) is set. With ``restart_from_start`` a restart
    starts again from the phase's first incumbent (hint and horizon) instead of the
    current one: a different basin rather than the one the stalled solve is stuck in."""
    if stop is None:
        stop = state.done
    first = state.snapshot()[0]
    stall_s = max(2.0, (deadline - time.perf_counter()) * stall_fraction)
    rows = []
    attempt = 0
    while not (state.done.is_set() or stop.is_set()) and deadline - time.perf_counter() >= 0.5:
        incumbent, bound = state.snapshot()
        start = first if restart_from_start and attempt > 0 else incumbent
        base = configs[attempt % len(configs)]
        config = base.replace(random_seed=base.random_seed + attempt)
        model = CpSatModel(problem, config, placement, start.makespan, makespan_lb=bound)
        details.setdefault("families", list(model.applied))
        hint_incumbent(model, problem, start)
        raw = model.solve(deadline - time.perf_counter(), stall_s=stall_s,
                          stop=stop if concurrent else None,
                          on_solution=state.improved if concurrent else None)
        rows.append({"search": "+".join(config.portfolio() or ("cp-sat",)), "workers": config.workers,
                     "seed": config.random_seed, "start": start.makespan,
                     "status": raw.status, "makespan": raw.makespan, "bound": raw.bound,
                     "wall_s": round(raw.wall_time, 3), "stalled": raw.stalled})
        state.offer(solution_of(problem, model, raw))
        state.raise_bound(raw.bound)
        if not raw.stalled or deadline - time.perf_counter() < stall_s / 2:
            break  # finished, or too little time left for a restart to get past presolve
        attempt += 1
    details["upper_phase"] = rows


def relaxation_sets(problem: Problem, placement: Placement) -> list[frozenset[int]]:
    """Device subsets for relaxation bounds, smallest first: for one pipeline with one
    stage per device (at least 6 devices), the first max(1, D/8) devices together with
    the last 3, 5, 7, ... (up to half of the devices) — where the memory-bound round
    trips start and turn; other shapes get none. Odd tails: on linear S=16, B=64, cap 16,
    C=1 (experiments/bench_cpsat.py TARGET2) the last 5 and 7 devices proved 366 and 367
    within the budget where the last 2, 4, 6 and 8 stopped at 365 (interval model). Their
    own optima are weaker than the full problem's: with only the analytic bound given,
    {0, 1, 13, 14, 15} has optimum 364 and {0, 1, 11, ..., 15} 366 (order literals)."""
    D = problem.num_devices
    if problem.num_pipelines != 1 or D < 6 or sorted(placement.stage2device[0]) != list(range(D)):
        return []
    by_stage = list(placement.stage2device[0])
    a = max(1, D // 8)
    out = []
    for b in range(3, D // 2 + 1, 2):
        if a + b >= D:
            break
        out.append(frozenset(by_stage[:a] + by_stage[D - b:]))
    return out


def relaxation_bounds(problem, placement, config, sets, incumbent: KnownEval, bound, deadline, details) -> int:
    """Raise ``bound`` with CP-SAT bounds of relaxations (only the devices of a set keep
    their no-overlap and memory constraints): every relaxation's bound is a bound of the
    problem. The incumbent hints each relaxation and caps its horizon. The sets grow; a
    set neither solved nor raising the bound ends the phase (on linear S=16, B=64, cap
    16, C=1 the first set's own optimum is 364, below what the full model proves, so
    the phase usually ends after it there)."""
    rows = []
    makespan = incumbent.makespan
    for i, devs in enumerate(sets):
        remaining = deadline - time.perf_counter()
        if remaining < 0.2:
            break
        model = CpSatModel(problem, config, placement, makespan, makespan_lb=bound, resource_devices=devs)
        hint_incumbent(model, problem, incumbent)
        # half of what remains while larger sets follow: the first set is usually the
        # one that raises the bound, the early stop below often ends the phase after it
        raw = model.solve(remaining / 2 if i + 1 < len(sets) else remaining)
        raised = raw.bound is not None and raw.bound > bound
        if raised:
            bound = raw.bound
        rows.append({"devices": sorted(devs), "status": raw.status, "bound": raw.bound,
                     "wall_s": round(raw.wall_time, 3)})
        if bound >= makespan or not (raised or raw.status == "optimal"):
            # a set left unsolved without a better bound: the larger ones are harder still
            break
    details["relaxations"] = rows
    return bound


def proof_config(config: CpSatConfig) -> CpSatConfig:
    """The config of a tightening probe: with ``tree_proofs`` on at least 2 workers,
    CP-SAT's portfolio left to the config and a wall-clock limit, CP-SAT's shared tree
    search on all workers (they split the search tree and share what they learn: the
    kind of search an infeasibility proof needs). On linear S=16, B=64, cap 16, C=1 (2
    workers, normal machine speed) it proved "no schedule ends by 367" in 14-39 s where
    the 2-worker portfolio (no-LP search and lower-bound search) took 48 s and one
    worker 42-61 s, and "by 368" in 106 and 139 s (experiments/prove_bound.py).
    Otherwise ``config`` as it is."""
    if (not config.tree_proofs or config.workers < 2 or config.subsolvers is not None
            or config.deterministic_time is not None):
        return config
    return config.replace(subsolvers=("shared_tree",),
                          extra_params=(("shared_tree_num_workers", config.workers),) + config.extra_params)


def tighten_step(proofs: Sequence[tuple[int, float]], remaining: float, gap: int) -> int:
    """How far the next tightening probe jumps (1: the bound itself), from the earlier
    ``proofs`` as (horizon, seconds). Proof times grow about geometrically as the horizon
    nears the optimum (linear S=16, B=64, cap 16, C=1, slow day: 2.2-2.6, 2.7-3.0, 4.1,
    7.0, 12.5 s for 361-365, 21-28 s for 366, 48 s for 367), so climbing one by one
    spends about as long on the easy steps as on the last one. After two proofs the
    predicted time of the probe at horizon bound + k - 1 is ``predicted_proof_time``; the
    largest k whose prediction is at most half the remaining time is taken, below the
    incumbent. With a ratio floor of 1.5 a jump from 363 to 367 was predicted at 14 s
    and ran out after 29 s, ending at 363 where one-by-one climbing reached 366."""
    k = 1
    while k + 1 < gap and (predicted_proof_time(proofs, k + 1) or math.inf) <= remaining / 2:
        k += 1
    return k


def predicted_proof_time(proofs: Sequence[tuple[int, float]], k: int) -> float | None:
    """The predicted time of a tightening probe ``k`` steps above the last proof's
    horizon: the last proof time times the growth ratio per step to the power ``k``,
    the ratio taken from the last two proofs (per step of horizon between them, so a
    jump does not inflate it) and clamped to 2-4 (the early, easy steps grow slower than
    the hard ones near the optimum, where it is about 2); None before two proofs."""
    if len(proofs) < 2:
        return None
    (h0, t0), (h1, t1) = proofs[-2], proofs[-1]
    ratio = (max(t1, 1e-3) / max(t0, 1e-3)) ** (1.0 / max(1, h1 - h0))
    return t1 * min(4.0, max(2.0, ratio)) ** k


def tighten_horizon(problem, placement, config, state: SearchState, deadline, details, proofs=(),
                    concurrent=False) -> None:
    """Destructive lower bounding: while time remains, ask CP-SAT whether any schedule
    ends by a horizon ``h`` >= the bound (the model rebuilt with that horizon, so presolve
    works on the tight domains; ``h`` jumps ahead of the bound once proof times are known,
    ``tighten_step``). Infeasible proves ``h + 1``; a schedule found improves the
    incumbent and is optimal when the solve proves it; unknown stops. On linear S=16,
    B=64, cap 16, C=1 this proves 368 where the optimisation model's bound stays at 367.
    With ``concurrent`` (``race``, ``bound_then_search``) a probe stops once a schedule at
    or below its horizon exists (its own first one, or one of the race's search) and the
    next probe is planned below it, and the tightening ends when even a one-step probe
    is predicted to need more than the time left (``predicted_proof_time``), leaving
    the workers to the search. Improves
    ``state`` in place. ``proofs``: earlier (horizon, seconds) to predict from (tests).
    Probes run with ``proof_config``."""
    config = proof_config(config)
    rows = []
    proofs = list(proofs)
    while not state.done.is_set():
        remaining = deadline - time.perf_counter()
        if remaining < 0.5:
            break
        bound, makespan = state.bound_and_makespan()
        predicted = predicted_proof_time(proofs, 1)
        if concurrent and predicted is not None and predicted > remaining:
            rows.append({"horizon": bound, "status": "not tried", "predicted_s": round(predicted, 1)})
            break  # hopeless in the time left: the search can use the workers better
        horizon = bound + tighten_step(proofs, remaining, makespan - bound) - 1
        stop = state.probe(horizon) if concurrent else None
        model = CpSatModel(problem, config, placement, horizon, makespan_lb=bound)
        details.setdefault("families", list(model.applied))
        raw = model.solve(max(0.05, deadline - time.perf_counter()), stop=stop,
                          on_solution=state.improved if concurrent else None)
        rows.append({"horizon": horizon, "status": raw.status, "wall_s": round(raw.wall_time, 3)})
        if raw.status == "infeasible":
            proofs.append((horizon, raw.wall_time))
            state.raise_bound(horizon + 1)
            continue
        state.offer(solution_of(problem, model, raw))
        if raw.status == "optimal":  # also any schedule found at horizon == bound
            state.raise_bound(raw.makespan)
            break
        if raw.bound is not None:  # the horizon's model holds every schedule ending by it
            state.raise_bound(min(raw.bound, horizon + 1))
        if raw.makespan is not None or (stop is not None and stop.is_set()):
            continue
        break
    details["horizon_tightening"] = rows


def bound_then_search(problem, placement, config: CpSatConfig, state: SearchState, deadline, details) -> None:
    """All workers on the bound, then all on the search: the tightening (shared tree
    search on all workers, ``proof_config``) for at most ``config.bound_share`` of the
    time left, ending sooner once its next probe is predicted to need more than its
    share has left; then the upper phase on all workers (``upper_phase_config``; on more
    than 2 workers CP-SAT's own portfolio) from the incumbent until ``deadline``.
    Bound first, so the search's share is known when it starts. Measured on linear
    S=16, B=64, cap 16, C=1 (2 cores, 120 s, experiments/bench_cpsat.py TARGET2, normal
    machine speed): with a share of 0.55 the tightening proved 368 20-63 s into the run
    and the search's last improvement, from the justified 375 to 371, came 14-26 s into
    its first solve (7 of 7 runs); with 0.4 the share ended before the probe of 367
    (twice 371/367); on a machine a third slower, once too. Improves ``state`` in
    place."""
    now = time.perf_counter()
    share = config.bound_share * (deadline - now)
    details["bound_then_search"] = {"tighten_until_s": round(share, 3)}
    tighten_horizon(problem, placement, config, state, now + share, details, concurrent=True)
    if state.done.is_set():
        return
    details["bound_then_search"]["search_s"] = round(deadline - time.perf_counter(), 3)
    improve_upper(problem, placement, all_worker_searches(config), state, deadline, details)
