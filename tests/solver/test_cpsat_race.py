"""Searching and bounding at once: the shared state worked by hand, the race on a tiny
instance with a known optimum, when it runs, and how its threads stop each other."""

import dataclasses
import threading
import time

import pytest

from pipetab.schedules import registry
from pipetab.solver.cpsat import CpSatConfig, bound, idealized_problem, search
from pipetab.solver.cpsat.model import RawSolve
from pipetab.solver.cpsat.oracle import evaluate_known
from pipetab.solver.cpsat.phases import SearchState, all_worker_searches, proof_config, upper_phase_config
from pipetab.solver.cpsat.modes import _races, all_workers_flow_applies
from pipetab.solver.cpsat.race import race
from pipetab.solver.simulate import simulate


def _start(S=4, B=8):
    """Linear S, B, F=1, K=2, C=1, cap S with its 1F1B judged (S=4, B=8: 49, optimum 46)."""
    problem = idealized_problem(S, B, comm=1, activation_cap=S)
    pl = problem.fixed_placement
    fixed = problem.with_placement(pl)
    return fixed, pl, evaluate_known(fixed, registry.generate("1f1b", S, B))


def test_search_state_worked_by_hand():
    """Callback makespans run ahead of the incumbent; a probe's event is set once a
    schedule at or below its horizon exists; the bound meeting the makespan ends it all."""
    _, _, start = _start()
    assert start.makespan == 49
    state = SearchState(start, 44)
    probe = state.probe(46)
    state.improved(47)
    assert not probe.is_set() and state.makespan == 47 and state.incumbent is start
    state.improved(48)  # a worse report never raises the makespan
    assert state.makespan == 47
    state.improved(46)
    assert probe.is_set() and not state.done.is_set()
    state.offer(None)
    state.raise_bound(None)
    state.raise_bound(45)
    state.raise_bound(40)
    assert state.snapshot() == (start, 45)
    state.offer(dataclasses.replace(start, makespan=50))  # worse than the incumbent: kept out
    assert state.incumbent is start
    in_hand = dataclasses.replace(start, makespan=48)  # better than the incumbent, though a
    state.offer(in_hand)  # solve has reported 46: a schedule in hand is kept
    assert state.incumbent is in_hand and state.makespan == 46
    better = dataclasses.replace(start, makespan=46)
    state.offer(better)
    assert state.incumbent is better and not state.done.is_set()
    state.raise_bound(46)
    assert state.done.is_set()
    assert state.probe(45).is_set()  # moot from the start once done
    assert SearchState(start, 49).done.is_set()  # an incumbent at the bound is optimal


def test_race_proves_the_known_optimum():
    """S=4, B=8, F=1, K=2, C=1, cap 4 (optimum 46, proven in test_cpsat_search): with 2
    workers and a wall-clock limit the search races a one-worker search against a
    one-worker tightening; the result is optimal at 46, the simulator agrees, and the
    FIFO assumption of the tightening's bound is carried."""
    problem = idealized_problem(4, 8, comm=1, activation_cap=4)
    res = search(problem, CpSatConfig(time_limit_s=20, workers=2, race=True))
    assert res.details["flow"] == "race" and res.details["race"] == {"search_workers": 1, "bound_workers": 1}
    assert res.status == "optimal" and res.makespan == res.lower_bound == 46
    sim = simulate(res.schedule, problem.costs)
    assert sim.makespan == 46 and max(sim.peak_activation) <= 4
    assert any("FIFO" in a for a in res.bound_assumptions)
    assert res.details["families"]  # recorded from the race's models


def test_all_workers_flows_apply_only_on_a_wall_clock_with_two_workers():
    assert all_workers_flow_applies(CpSatConfig(workers=2))
    assert all_workers_flow_applies(CpSatConfig(workers=4))
    assert not all_workers_flow_applies(CpSatConfig(workers=1))
    assert not all_workers_flow_applies(CpSatConfig(workers=2, deterministic_time=5))
    assert not all_workers_flow_applies(CpSatConfig(workers=2, subsolvers=("no_lp", "default_lp")))
    assert not all_workers_flow_applies(CpSatConfig(workers=2, tighten=False))
    problem = idealized_problem(4, 8, comm=1, activation_cap=4)
    steady = search(problem, CpSatConfig(time_limit_s=20, workers=2, deterministic_time=20))
    assert steady.details["flow"] == "sequential" and not {"race", "bound_then_search"} & set(steady.details)
    assert steady.makespan == 46


def test_bound_then_search_proves_the_known_optimum():
    """The default flow on 2 workers and a wall clock (S=4, B=8, cap 4, optimum 46): the
    tightening on both workers proves the bound up to the optimum, a probe at or above it
    finds a schedule there; the simulator agrees and the FIFO assumption is carried."""
    problem = idealized_problem(4, 8, comm=1, activation_cap=4)
    res = search(problem, CpSatConfig(time_limit_s=20, workers=2))
    assert res.details["flow"] == "bound then search" and "race" not in res.details
    assert 0 < res.details["bound_then_search"]["tighten_until_s"] <= 0.55 * 20
    assert res.status == "optimal" and res.makespan == res.lower_bound == 46
    assert all(r["status"] == "infeasible" for r in res.details["horizon_tightening"][:-1])
    sim = simulate(res.schedule, problem.costs)
    assert sim.makespan == 46 and max(sim.peak_activation) <= 4
    assert any("FIFO" in a for a in res.bound_assumptions)


class _FakeModel:
    """Stands in for CpSatModel in ``phases``: a model whose horizon is the incumbent's
    makespan is the search's, any other a tightening probe; what each solve does comes
    from the class attributes ``search`` and ``probe`` (callables of the model and the
    solve's arguments)."""

    applied: list = []
    search = None
    probe = None
    incumbent_makespan = 49

    def __init__(self, problem, config, placement, horizon, makespan_lb=0, **_):
        self.config = config
        self.horizon = horizon

    def hint(self, *args):
        pass

    def solve(self, time_limit, workers=None, stall_s=None, stop=None, on_solution=None):
        role = self.search if self.horizon == self.incumbent_makespan else self.probe
        return role(self, stop, on_solution)


def _raw(status, bound=None, wall=0.0):
    return RawSolve(status, None, bound, None, None, wall, None, 0)


def _race_with_fakes(monkeypatch, search_solve, probe_solve, bound, seconds=60.0):
    """Race from 1F1B (49) on S=4, B=8 and ``bound``, ``seconds`` to the deadline, with
    ``phases.CpSatModel`` replaced by ``_FakeModel`` solving as given; returns the state,
    the details and the seconds the race took."""
    from pipetab.solver.cpsat import phases

    fake = type("Fake", (_FakeModel,), {"search": staticmethod(search_solve), "probe": staticmethod(probe_solve)})
    monkeypatch.setattr(phases, "CpSatModel", fake)
    fixed, pl, start = _start()
    state = SearchState(start, bound)
    details = {}
    t0 = time.perf_counter()
    race(fixed, pl, CpSatConfig(workers=2), state, t0 + seconds, details)
    return state, details, time.perf_counter() - t0


def test_a_schedule_found_by_the_search_stops_the_probe_it_makes_moot(monkeypatch):
    """From bound 47 and 1F1B's 49 the first probe asks for a schedule ending by 47 and
    would run a minute; the search reports one of 47, which stops the probe and meets
    the bound: the race ends at once."""
    stopped = []

    def search_solve(model, stop, on_solution):
        on_solution(47)
        return _raw("feasible", 44)

    def probe_solve(model, stop, on_solution):
        stopped.append((model.horizon, stop.wait(60)))
        return _raw("unknown")

    state, details, seconds = _race_with_fakes(monkeypatch, search_solve, probe_solve, 47)
    assert seconds < 10
    assert stopped in ([(47, True)], [])  # stopped, or never started once done
    assert state.done.is_set() and state.makespan == 47 and state.bound == 47
    assert [r["status"] for r in details["upper_phase"]] == ["feasible"]


def test_an_error_in_one_thread_stops_the_other_and_is_raised(monkeypatch):
    """A probe that fails (here: a modelling bug surfacing as RuntimeError) stops the
    search, which would otherwise run until the deadline a minute away."""
    search_stopped = threading.Event()

    def search_solve(model, stop, on_solution):
        if stop.wait(60):
            search_stopped.set()
        return _raw("feasible", 44)

    def probe_solve(model, stop, on_solution):
        raise RuntimeError("modelling bug")

    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="modelling bug"):
        _race_with_fakes(monkeypatch, search_solve, probe_solve, 44)
    assert search_stopped.is_set() and time.perf_counter() - t0 < 10


def test_proofs_raise_the_bound_until_it_meets_the_search(monkeypatch):
    """Probes at 44, 45, 46 are infeasible (each proves horizon + 1) while the search,
    having found 47, waits: the bound climbs to 47 and stops the search."""
    horizons = []

    def search_solve(model, stop, on_solution):
        on_solution(47)
        stop.wait(60)
        return _raw("feasible", 44)

    def probe_solve(model, stop, on_solution):
        horizons.append(model.horizon)
        return _raw("infeasible", wall=0.01)

    state, details, _ = _race_with_fakes(monkeypatch, search_solve, probe_solve, 44)
    assert state.bound == state.makespan == 47
    assert horizons[0] == 44 and horizons[-1] == 46 and all(h < 47 for h in horizons)
    assert [r["status"] for r in details["horizon_tightening"]] == ["infeasible"] * len(horizons)


def test_a_hopeless_next_probe_hands_the_workers_to_the_search(monkeypatch):
    """Two proofs of 100 s each predict the next probe at 200 s (ratio clamped to 2),
    more than the minute left: the tightening ends, the one-worker search is stopped and
    restarts on both workers with the upper phase's no-LP search + LNS, which here finds
    and proves 47."""
    searches = []

    def search_solve(model, stop, on_solution):
        searches.append((model.config.workers, model.config.subsolvers))
        if model.config.workers == 1:
            stop.wait(60)
            return _raw("feasible", 44)
        on_solution(47)
        return _raw("optimal", 47)

    def probe_solve(model, stop, on_solution):
        return _raw("infeasible", wall=100.0)

    state, details, seconds = _race_with_fakes(monkeypatch, search_solve, probe_solve, 44)
    assert seconds < 10
    assert searches == [(1, None), (2, ("no_lp",))]
    assert [r["workers"] for r in details["upper_phase"]] == [1, 2]
    assert [r["status"] for r in details["horizon_tightening"]] == ["infeasible", "infeasible", "not tried"]
    assert details["horizon_tightening"][-1]["predicted_s"] == 200.0
    assert 50 < details["race"]["handover_s"] <= 60
    assert state.bound == state.makespan == 47


def test_no_search_on_all_workers_while_a_probe_runs(monkeypatch):
    """Stalled one-worker searches stop restarting when less than half a stall limit is
    left (3 s race: stall limit 2 s, so below 1 s left; the all-worker search's 2-s
    minimum lowered to 0.1 s so that time would be enough for it); the probe still runs
    to the deadline, so the search must not restart on both workers (three threads on
    two cores)."""
    from pipetab.solver.cpsat import race as race_module

    monkeypatch.setattr(race_module, "HANDOVER_MIN_S", 0.1)
    searches = []

    def search_solve(model, stop, on_solution):
        searches.append(model.config.workers)
        time.sleep(0.05)
        return RawSolve("feasible", None, 44, None, None, 0.05, None, 0, stalled=True)

    def probe_solve(model, stop, on_solution):
        stop.wait(max(0.0, deadline - time.perf_counter()))
        return _raw("unknown")

    deadline = time.perf_counter() + 3.0
    state, details, _ = _race_with_fakes(monkeypatch, search_solve, probe_solve, 44, seconds=3.0)
    assert searches and set(searches) == {1}
    assert "handover_s" not in details["race"]
    assert [r["status"] for r in details["horizon_tightening"]] == ["unknown"]


def test_proof_config_uses_the_shared_tree_on_two_or_more_workers():
    """Tightening probes split the search tree among the workers when they have at least
    two and CP-SAT's portfolio is left to the config; otherwise the config stays."""
    two = proof_config(CpSatConfig(workers=2, extra_params=(("log_search_progress", False),)))
    assert two.subsolvers == ("shared_tree",)
    assert two.extra_params == (("shared_tree_num_workers", 2), ("log_search_progress", False))
    assert proof_config(CpSatConfig(workers=4)).extra_params == (("shared_tree_num_workers", 4),)
    for kept in (CpSatConfig(workers=1), CpSatConfig(workers=2, deterministic_time=5),
                 CpSatConfig(workers=2, subsolvers=("no_lp", "default_lp")),
                 CpSatConfig(workers=2, tree_proofs=False)):
        assert proof_config(kept) is kept
    for share in (0, 1, 1.5):
        with pytest.raises(ValueError, match="bound_share must be between 0 and 1"):
            CpSatConfig(bound_share=share)


def test_bound_mode_tightens_alone_on_all_workers():
    """``bound`` on a wall clock with 2 workers runs no search beside the tightening: its
    probes (shared tree on both workers) prove the optimum 46 of S=4, B=8, cap 4, a
    schedule of 46 comes with it and the simulator confirms it, and the FIFO assumption
    of the tightening's models is carried."""
    problem = idealized_problem(4, 8, comm=1, activation_cap=4)
    res = bound(problem, CpSatConfig(time_limit_s=20, workers=2))
    assert res.details["flow"] == "bound first" and res.details["workers"] == 2
    assert not {"race", "bound_then_search", "upper_phase"} & set(res.details)
    assert res.status == "optimal" and res.lower_bound == res.makespan == 46
    assert all(r["status"] == "infeasible" for r in res.details["horizon_tightening"][:-1])
    sim = simulate(res.schedule, problem.costs)
    assert sim.makespan == 46 and max(sim.peak_activation) <= 4
    assert any("FIFO" in a for a in res.bound_assumptions)
    assert res.known["1f1b"].makespan == 49 and res.known["1f1b"].gap == pytest.approx(3 / 49)


def test_the_default_races_only_where_a_device_holds_several_stages():
    """Bound first where every device holds one stage (linear); the race where devices
    hold several (bidirectional: two stages each); ``race`` set overrides both ways."""
    from pipetab.solver.cpsat.problem import family_placement

    linear = family_placement("linear", 4, (4,))
    both = family_placement("bidirectional", 4, (4, 4))
    assert not _races(CpSatConfig(), linear) and _races(CpSatConfig(), both)
    assert _races(CpSatConfig(race=True), linear) and not _races(CpSatConfig(race=False), both)


def test_all_worker_searches_are_the_upper_phase_or_the_portfolio_without_probing():
    two = CpSatConfig(workers=2)
    assert all_worker_searches(two) == upper_phase_config(two)
    four = CpSatConfig(workers=4, extra_params=(("log_search_progress", False),))
    (only,) = all_worker_searches(four)
    assert only.workers == 4 and only.subsolvers is None
    assert only.extra_params == (("cp_model_probing_level", 0), ("log_search_progress", False))
