"""The memory objective (``least_peak_memory``: the least peak of live activations at a
fixed makespan) against the makespan objective under memory caps (``search`` with an
activation cap): on tiny instances, where both solve to proven optimality, the least peak
at makespan T is the least cap under which the least makespan is at most T — two
implementations of the same trade-off agreeing."""

from __future__ import annotations

import pytest

from pipetab.solver.cpsat import CpSatConfig, Objective, Status, idealized_problem, search
from pipetab.solver.cpsat.api import least_peak_memory
from pipetab.solver.cpsat.model.objectives import OBJECTIVES
from pipetab.solver.cpsat.model.oracle import memory_check

CFG = CpSatConfig(time_limit_s=60, deterministic_time=5, workers=1)


def least_makespan_per_cap(S: int, B: int, **opts) -> dict[int, int]:
    out = {}
    for cap in range(1, B + 1):
        res = search(idealized_problem(S, B, "linear", comm=1, activation_cap=cap, **opts), CFG)
        assert res.status is Status.OPTIMAL
        out[cap] = res.makespan
    return out


@pytest.mark.parametrize("S,B,opts", [(2, 3, {}), (3, 4, {}), (2, 3, {"split_backward": True})])
def test_least_peak_at_a_makespan_is_the_least_cap_reaching_it(S, B, opts):
    by_cap = least_makespan_per_cap(S, B, **opts)
    problem = idealized_problem(S, B, "linear", comm=1, **opts)
    for T in range(min(by_cap.values()) - 1, max(by_cap.values()) + 2):
        res = least_peak_memory(problem, T, CFG)
        reaching = [cap for cap, m in by_cap.items() if m <= T]
        if not reaching:
            assert res.status is Status.INFEASIBLE and res.peak_memory is None
            continue
        assert res.status is Status.OPTIMAL
        assert res.objective is Objective.MEMORY and res.objective_unit == "bytes"
        assert res.objective_value == res.peak_memory == min(reaching)
        # the schedule returned: its step ends by T, and its peak as the evaluator counts it
        assert res.makespan <= T
        assert max(memory_check(problem, res.schedule).peaks) == pytest.approx(res.peak_memory)


def test_objectives_are_registered_by_name_with_their_unit():
    assert set(OBJECTIVES) == set(Objective)
    assert {o: OBJECTIVES[o].unit for o in Objective} == {
        Objective.MAKESPAN: "ticks", Objective.PERIOD: "ticks", Objective.MEMORY: "bytes"}
    assert all(OBJECTIVES[o].name is o for o in Objective)


def test_search_and_bound_take_only_the_time_objectives():
    problem = idealized_problem(2, 3, "linear", comm=1, objective="memory")
    with pytest.raises(ValueError, match="least_peak_memory"):
        search(problem, CFG)


def test_a_time_objective_value_is_its_makespan():
    res = search(idealized_problem(2, 3, "linear", comm=1, activation_cap=2), CFG)
    assert res.objective_value == res.makespan and res.objective_unit == res.unit
