"""The search strategy: its shared state and stop rules worked by hand, the bound and
search phases on a tiny instance with a known optimum (linear S=4, B=8, F=1, K=2, C=1,
cap 4: 1F1B 49, optimum 46), restarts on stall, and the time limit on large instances."""

import dataclasses
import time

import pytest

from pipetab.schedules import registry
from pipetab.solver import deadline as deadline_module
from pipetab.solver.cpsat import (
    CpSatConfig,
    GapBelow,
    MaxRuntime,
    NoImprovement,
    idealized_problem,
    search,
)
from pipetab.solver.cpsat.model.cpmodel import RawSolve
from pipetab.solver.cpsat.model.oracle import evaluate_known
from pipetab.solver.cpsat.params import StrategyParams
from pipetab.solver.cpsat.phases import strategy
from pipetab.solver.simulate import simulate


def _start(S=4, B=8):
    problem = idealized_problem(S, B, comm=1, activation_cap=S)
    pl = problem.fixed_placement
    fixed = problem.with_placement(pl)
    return fixed, pl, evaluate_known(fixed, registry.generate("1f1b", S, B))


def test_search_state_worked_by_hand():
    """Callback values run ahead of the incumbent; a probe's event is set once a schedule
    at or below its horizon exists; the bound meeting the value makes it done."""
    _, _, start = _start()
    assert start.makespan == 49
    state = strategy.SearchState(start, 44, CpSatConfig(), time.perf_counter())
    probe = state.probe(46)
    state.improved(47)
    assert not probe.is_set() and state.value == 47 and state.incumbent is start
    state.improved(48)  # a worse report never raises the value
    assert state.value == 47
    state.improved(46)
    assert probe.is_set() and not state.done
    state.offer(None)
    state.raise_bound(None)
    state.raise_bound(45)
    state.raise_bound(40)
    assert state.snapshot() == (start, 45)
    state.offer(dataclasses.replace(start, makespan=50))  # worse than the incumbent: kept out
    assert state.incumbent is start
    better = dataclasses.replace(start, makespan=46)
    state.offer(better)
    assert state.incumbent is better and not state.done and not state.should_stop()
    state.raise_bound(46)
    assert state.done and state.should_stop() and state.stopped_by is None
    assert state.probe(45).is_set()  # moot from the start once done


def test_stop_rules_by_hand():
    assert MaxRuntime(5)(5.0, 0.0, None) and not MaxRuntime(5)(4.9, 9.0, 0.0)
    assert NoImprovement(2)(0.0, 2.0, None) and not NoImprovement(2)(9.0, 1.9, None)
    assert GapBelow(0.01)(0.0, 0.0, 0.01) and not GapBelow(0.01)(9.0, 9.0, 0.02)
    assert not GapBelow(0.01)(9.0, 9.0, None)
    for bad in (lambda: MaxRuntime(0), lambda: NoImprovement(-1), lambda: GapBelow(1.0),
                lambda: CpSatConfig(stop=("soon",)), lambda: CpSatConfig(ablate={"memory"})):
        with pytest.raises(ValueError):
            bad()
    _, _, start = _start()
    state = strategy.SearchState(start, 44, CpSatConfig(stop=(GapBelow(0.2),)), time.perf_counter())
    assert state.should_stop() and state.stopped_by == "GapBelow(gap=0.2)"  # (49 - 44) / 49 < 0.2


def _budget(det=20.0):
    return CpSatConfig(time_limit_s=60, workers=2, deterministic_time=det).deadline().slice(1.0)


def test_bound_phase_proves_step_by_step_and_finds_the_optimum():
    """From bound 44 and 1F1B's 49 the probes prove that no schedule ends by 44 or 45 and
    then find and prove one ending at 46, which goes through the evaluator."""
    fixed, pl, start = _start()
    state = strategy.SearchState(start, 44, CpSatConfig(), time.perf_counter())
    rows = []
    strategy.bound_phase(fixed, pl, CpSatConfig(workers=2, deterministic_time=20), state, _budget(), rows,
                         leave_early=False)
    found, bound = state.snapshot()
    assert bound == 46 and found.makespan == 46
    # two timed proofs, then a jump (the probes cost alike): its horizon holds the optimum
    assert [(r.horizon, r.status) for r in rows[:2]] == [(44, "infeasible"), (45, "infeasible")]
    assert len(rows) == 3 and rows[2].horizon >= 46 and rows[2].status == "optimal"
    sim = simulate(found.schedule, fixed.costs)
    assert sim.makespan == 46 and max(sim.peak_activation) <= 4


def test_tightening_jumps_by_predicted_proof_time():
    """One step at a time until two proofs are timed; then the largest jump whose
    predicted time (last proof time times the clamped growth ratio per step of horizon)
    is at most half of what remains, staying below the incumbent. Hand-worked: times
    2.5, 3.0 one step apart give ratio 1.2 -> 2; 3.0 * 2**2 = 12 <= 15 but 3.0 * 2**3 =
    24 > 15, so k = 2."""
    tighten_step, predicted = strategy.tighten_step, strategy.predicted_proof_time
    assert tighten_step([], 100.0, 10) == 1
    assert tighten_step([(360, 0.1)], 100.0, 10) == 1
    assert tighten_step([(360, 2.5), (361, 3.0)], 30.0, 10) == 2
    assert tighten_step([(360, 2.0), (361, 6.0)], 400.0, 10) == 3   # ratio 3: 6 * 27 = 162 <= 200 < 6 * 81
    assert tighten_step([(360, 1.0), (361, 1.0)], 1000.0, 3) == 2   # horizon stays below the incumbent
    assert tighten_step([(360, 1.0), (361, 10.0)], 100.0, 10) == 1  # ratio 10 -> 4: 10 * 16 > 50
    assert tighten_step([(360, 1.0), (361, 1.0)], 1000.0, 1) == 1
    # a jump of 3 steps that took 6x longer grows 6 ** (1/3) = 1.82 per step -> 2, not 4
    assert predicted([(363, 4.0), (366, 24.0)], 1) == pytest.approx(48.0)
    assert predicted([(363, 1.0), (365, 16.0)], 1) == pytest.approx(64.0)  # 4 per step
    assert predicted([(363, 1.0)], 1) is None


def test_search_configs_and_proof_config():
    """On at most 2 workers with the default portfolio the search phase alternates the
    no-LP and the LP-guided search (CP-SAT's LNS on the other worker), probing off; an
    explicit portfolio or more workers keep theirs. Probes use the shared tree search on
    >= 2 workers under a wall-clock limit only."""
    cfgs = strategy.search_configs(CpSatConfig(workers=2, extra_params=(("random_seed", 3),)))
    assert [c.subsolvers for c in cfgs] == [("no_lp",), ("default_lp",)]
    assert all(c.extra_params == (("cp_model_probing_level", 0), ("random_seed", 3)) for c in cfgs)
    assert [c.subsolvers for c in strategy.search_configs(CpSatConfig(workers=4))] == [None]
    assert [c.subsolvers for c in strategy.search_configs(CpSatConfig(subsolvers=("no_lp",)))] == [("no_lp",)]
    assert strategy.proof_config(CpSatConfig(workers=2)).subsolvers == ("shared_tree",)
    assert strategy.proof_config(CpSatConfig(workers=1)).subsolvers is None
    assert strategy.proof_config(CpSatConfig(workers=2, deterministic_time=1)).subsolvers is None


def test_search_phase_improves_1f1b_to_the_optimum():
    fixed, pl, start = _start()
    state = strategy.SearchState(start, 44, CpSatConfig(), time.perf_counter())
    rows = []
    strategy.search_phase(fixed, pl, CpSatConfig(workers=2, deterministic_time=20), state, _budget(), rows)
    found, lb = state.snapshot()
    assert found.makespan == 46 and 44 <= lb <= 46
    assert [r.value for r in rows] == [46]  # one solve: deterministic limit, no stall restarts
    sim = simulate(found.schedule, fixed.costs)
    assert sim.makespan == 46 and max(sim.peak_activation) <= 4


class _FakeTime:
    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now


def test_search_phase_restarts_a_stalled_solve_with_the_next_search_and_seed(monkeypatch):
    """A stalled solve restarts from the incumbent with the other search and the next
    seed while at least half the stall limit remains. With 2.5 s the stall limit is its
    2 s floor; solves of 0.3 s leave 2.2, 1.9, 1.6, 1.3, 1.0, then 0.7 s < 1 s: six."""
    fake = _FakeTime()
    built = []

    class Stalled:
        applied = ()
        build_s = 0.0

        def __init__(self, problem, config, placement, horizon, makespan_lb=0, **_):
            self.config = config
            built.append((config.subsolvers, config.random_seed, horizon))

        def hint(self, *args):
            pass

        def solve(self, *args, **kwargs):
            fake.now += 0.3
            return RawSolve("feasible", None, 40, None, None, 0.3, 0.0, None, 0, stalled=True)

    monkeypatch.setattr(strategy, "time", fake)
    monkeypatch.setattr(deadline_module, "time", fake)
    monkeypatch.setattr(strategy, "CpSatModel", Stalled)
    fixed, pl, start = _start()
    config = CpSatConfig(workers=2, random_seed=7, time_limit_s=100)
    state = strategy.SearchState(start, 44, config, fake.now)
    rows = []
    strategy.search_phase(fixed, pl, config, state, config.deadline(fake.now).within(2.5), rows)
    assert state.snapshot() == (start, 44)
    assert [b[0] for b in built] == [("no_lp",), ("default_lp",)] * 3
    assert [b[1] for b in built] == [7, 8, 9, 10, 11, 12]
    assert all(b[2] == 49 for b in built)  # the incumbent's makespan is every horizon
    assert len(rows) == 6 and all(r.stalled for r in rows)


@pytest.mark.slow
def test_no_improvement_rule_ends_the_search_early(capped_16_64):
    """On linear S=16, B=64, cap 16, C=1 (not provable in seconds) NoImprovement(1)
    ends a 60-s search long before its limit and says so."""
    problem = capped_16_64
    res = search(problem, CpSatConfig(time_limit_s=60, workers=2, stop=(NoImprovement(1.0),)))
    assert res.status == "feasible" and res.runtime_s < 30
    assert res.solver.stopped_by == "NoImprovement(seconds=1.0)"


@pytest.mark.slow
@pytest.mark.parametrize("S,placement,limit", [(32, "linear", 2.0), (16, "bidirectional", 2.0)])
def test_time_limit_holds_on_large_instances(S, placement, limit):
    """Start, model building and solves all within 10 % (+1 s) of the limit."""
    problem = idealized_problem(S, 8 * S if placement == "linear" else 2 * S, placement, comm=1, activation_cap=S)
    t0 = time.perf_counter()
    res = search(problem, CpSatConfig(time_limit_s=limit, workers=2))
    assert time.perf_counter() - t0 <= 1.1 * limit + 1.0
    assert res.status in ("feasible", "optimal") and res.lower_bound <= res.makespan


def test_the_model_stands_without_seeds():
    """Without the registry's schedules the model's own greedy starts give a schedule on
    issue 14's largest idealized instances (S=16, split backward, tight cap) at once."""
    problem = idealized_problem(16, 64, forward=3, backward=4, weight=2, comm=1, activation_cap=16,
                                split_backward=True, weight_memory=32 / 34)
    res = search(problem, CpSatConfig(time_limit_s=3, workers=2, known_generators=False))
    assert res.status in ("feasible", "optimal") and not res.known
    assert res.schedule is not None and res.lower_bound <= res.makespan
    assert all(simulate(res.schedule, problem.costs).fits_memory)


def test_shared_capped_devices_are_those_with_a_binding_cap_and_several_stages():
    from pipetab.solver.cpsat.phases.fixed import shared_capped

    def shared(placement, cap):
        pr = idealized_problem(4, 8, placement, activation_cap=cap)
        return shared_capped(pr, pr.fixed_placement)

    assert shared("bidirectional", 4) and shared("v", 4)
    assert not shared("linear", 4) and not shared("bidirectional", None)
    assert not shared("bidirectional", 8)  # 4 microbatches per direction x 2 stages: 8 never binds



def _recording_model(limits: list, applied: tuple):
    """A model class whose every solve notes its deterministic limit and ends unknown."""
    def solve(self, wall, det, **_):
        limits.append(det)
        return RawSolve("unknown", None, None, None, None, 0.1, 0.0, None, 0)

    def init(self, problem, config, *args, **kwargs):
        self.config = config

    return type("Recording", (), {"applied": applied, "build_s": 0.0, "__init__": init, "solve": solve,
                                  "hint": lambda self, *a: None})


def _near_config():
    return CpSatConfig(workers=2, deterministic_time=20,
                       strategy=StrategyParams(near_gap=0.05, near_share=0.25, mirror_share=0.5))


def test_a_first_probe_within_the_gap_gets_its_share_in_search_mode(monkeypatch):
    """With ``near_gap`` 5 %, 1F1B's 49 against a bound of 47 is a gap of 2/49 (4.1 %):
    searching, the probe at 47 gets a quarter of the 20 deterministic s, 5; against 44 (5/49,
    10.2 %) or in bound mode all 20. Each probe ends unknown here, which ends the phase."""
    limits: list = []
    monkeypatch.setattr(strategy, "CpSatModel", _recording_model(limits, ("cumulative",)))
    fixed, pl, start = _start()
    config = _near_config()
    for bound, leave_early in ((47, True), (44, True), (47, False)):
        state = strategy.SearchState(start, bound, config, time.perf_counter())
        strategy.bound_phase(fixed, pl, config, state, _budget(), [], leave_early=leave_early)
    assert limits == pytest.approx([5.0, 20.0, 20.0], abs=0.01)


def test_the_mirror_solve_gets_the_near_share_within_the_gap(monkeypatch):
    """Against 47 (4.1 %, within a 5 % ``near_gap``) the mirror solve gets a quarter of the 20
    deterministic s, 5; against 44 (10.2 %) ``mirror_share``, half: 10."""
    limits: list = []
    monkeypatch.setattr(strategy, "CpSatModel", _recording_model(limits, ()))
    fixed, pl, start = _start()
    config = _near_config()
    for bound in (47, 44):
        state = strategy.SearchState(start, bound, config, time.perf_counter())
        strategy._mirror_solve(fixed, pl, config, state, _budget(), [], mirror=())
    assert limits == pytest.approx([5.0, 10.0], abs=0.01)
