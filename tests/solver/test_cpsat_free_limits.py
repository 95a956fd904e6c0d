"""Free placement within its time limit: the one-model search is built only where it fits
(op-device intervals, predicted build time), else the dealt placement is searched; the
decomposition prunes by device load, bounds the placements it had no time to visit by their
loads and gives the time left to the open ones; the free horizon's transfers are computed
once per message size."""

import time

from pipetab.schedules import registry
from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.bounds import safe_horizon
from pipetab.solver.cpsat.objectives import analytic_lower_bound
from pipetab.solver.cpsat.params import DecomposeParams
from pipetab.solver.cpsat.placement import search_free
from pipetab.solver.cpsat.result import Mode
from pipetab.solver.cpsat.variables import successors
from pipetab.solver.deadline import Deadline
from pipetab.solver.simulate import simulate

CFG = CpSatConfig(time_limit_s=300, deterministic_time=5.0, workers=1)


def test_free_horizon_equals_every_device_pair():
    # uneven messages (a message per stage) so that the largest transfer differs by op
    problem = idealized_problem(3, 4, "free", comm=2, activation_cap=None)
    D = problem.num_devices
    total = 0
    for op in problem.ops:
        total += problem.duration(op)
        for _ in successors(op, problem.num_stages[op.pipeline], problem.split_backward):
            total += max(problem.lag(op, a, b) for a in range(D) for b in range(D) if a != b)
    assert safe_horizon(problem, None) == total
    # 24 ops of F = 1 and B = 2 (36) and 20 chain edges of a message of 2 (40)
    assert total == 36 + 40


def test_one_model_over_its_interval_limit_searches_the_dealt_placement():
    problem = idealized_problem(4, 8, "free")
    cfg = CFG.replace(decompose=DecomposeParams(max_placements=0, free_model_max_intervals=10))
    res = search(problem, cfg)
    assert res.message == ("the stages dealt round-robin searched; no model with placement literals: "
                           "256 op-device intervals are more than one model takes (10)")
    assert [p.name for p in res.log.phases] == ["placement [[0, 1, 2, 3]]"]
    assert res.schedule is not None and res.makespan == simulate(res.schedule, problem.costs).makespan
    assert res.makespan == (8 + 4 - 1) * 3  # 1F1B's, optimal on the linear placement (its device load + fill)
    # every other placement counts with the free analytic bound, stage 0's backwards: the
    # first after four forwards and three backwards (10), then 8 of 2
    assert res.lower_bound == analytic_lower_bound(problem, None)[0] == 10 + 8 * 2
    assert res.status == "feasible"
    assert any("every other placement bounded analytically" in a for a in res.bound_assumptions)


def test_decomposition_out_of_time_bounds_unvisited_placements_by_their_loads():
    problem = idealized_problem(4, 8, "free")
    now = time.perf_counter()
    res = search_free(problem, CFG, [registry.generate("1f1b", 4, 8)], Deadline(now, now - 1.0), Mode.SEARCH)
    assert res.makespan == 33  # the known 1F1B
    # no placement visited: the least load, one stage per device, 8 x (F + B)
    assert res.lower_bound == 8 * 3
    assert res.status == "feasible"


def test_placements_pruned_by_load_and_the_time_left_to_the_open_ones():
    # 203 placements of 6 stages on 6 identical devices; all but the one-stage-per-device one
    # carry two stages' load on a device (24 x 3 x 2 = 144 ticks); each gets 1/203 of the time
    problem = idealized_problem(6, 24, "free", comm=1, activation_cap=6)
    cfg = CFG.replace(deterministic_time=2.0)
    linear = search(problem.with_placement(registry.generate("1f1b", 6, 24).placement), cfg)
    assert linear.status == "optimal"
    res = search(problem, cfg)
    first, pruned, again = res.log.phases
    assert first.name == again.name == "placement [[0, 1, 2, 3, 4, 5]]"
    assert first.note.startswith("feasible")  # its slice did not prove it; the time left did
    assert pruned.note.startswith(f"pruned: a device's load at least 144 >= {linear.makespan}")
    assert res.status == "optimal" and res.makespan == linear.makespan
    assert res.makespan == simulate(res.schedule, problem.costs).makespan
