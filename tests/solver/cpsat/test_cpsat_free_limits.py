"""Free placement within its time limit: the one-model search is built only where it fits
(op-device intervals, predicted build time), else the dealt placement is searched; the
decomposition prunes by device load, bounds the placements it had no time to visit by their
loads and gives the time left to the open ones; the free horizon's transfers are computed
once per message size."""

import time
from dataclasses import replace
from unittest.mock import patch

from pipetab.schedules import registry
from pipetab.schedules.ops import Kind, data_successors
from pipetab.schedules.schedule import Placement
from pipetab.solver.costs import Links
from pipetab.solver.cpsat import CpSatConfig, bound, idealized_problem, search
from pipetab.solver.cpsat.decompose.placement import _dealt_search, search_free
from pipetab.solver.cpsat.heuristics.starts import Pace, best_of, greedy_starts, start_phase
from pipetab.solver.cpsat.model.bounds import safe_horizon
from pipetab.solver.cpsat.model.objectives import analytic_lower_bound
from pipetab.solver.cpsat.model.oracle import evaluate_known
from pipetab.solver.cpsat.params import DecomposeParams
from pipetab.solver.cpsat.result import Mode
from pipetab.solver.deadline import Deadline
from pipetab.solver.simulate import simulate

CFG = CpSatConfig(time_limit_s=300, deterministic_time=5.0, workers=1)


def test_free_horizon_equals_every_device_pair():
    # messages of 1 to 3 bytes by stage, the pair (0, 1) at half the bandwidth of the others
    base = idealized_problem(3, 4, "free")
    sizes = {(k, 0, s): float(s + 1) for k in (Kind.F, Kind.B) for s in range(3)}
    links = Links(latency=1.0, bandwidth=1.0, pairs={(0, 1): (1.0, 0.5)})
    problem = replace(base, costs=replace(base.costs, links=links, message_bytes=sizes))
    D = problem.num_devices
    total, largest = 0, set()
    for op in problem.ops:
        total += problem.duration(op)
        for _ in data_successors(op, problem.num_stages[op.pipeline], problem.split_backward):
            lag = max(problem.lag(op, a, b) for a in range(D) for b in range(D) if a != b)
            largest.add(lag)
            total += lag
    assert largest == {3, 5, 7}  # 1 + 2 x bytes over the slow pair: the cache must tell the sizes apart
    assert safe_horizon(problem, None) == total
    # 24 ops of F = 1 and B = 2 (36); per microbatch the edges F0-F1, F1-F2, B2-B1, B1-B0
    # carry 1, 2, 3, 2 bytes (the turn F2-B2 sends the stage-2 forward's 3 bytes): 3+5+7+7+5
    assert total == 36 + 4 * (3 + 5 + 7 + 7 + 5)


def test_fixed_horizon_counts_each_transfer_between_devices():
    # interleaved S=2: stages 0..3 on devices 0, 1, 0, 1 — every chain edge crosses devices
    problem = idealized_problem(2, 4, "interleaved", comm=2)
    pl = problem.fixed_placement
    total = 0
    for op in problem.ops:
        total += problem.duration(op)
        for nx in data_successors(op, problem.num_stages[op.pipeline], problem.split_backward):
            src, dst = pl.device(op.pipeline, op.stage), pl.device(nx.pipeline, nx.stage)
            total += problem.lag(op, src, dst) if src != dst else 0
    assert safe_horizon(problem, pl) == total
    # 4 microbatches x (4 forwards of 1 tick + 4 backwards of 2; ticks of half slots), and per
    # microbatch 6 edges that cross devices (3 up, 3 down; the turn stays on device 1) of a
    # message of 2 slots, 4 ticks
    assert total == 4 * (4 * 1 + 4 * 2) + 4 * 6 * 4


def test_one_model_over_its_interval_limit_searches_the_dealt_placement():
    problem = idealized_problem(4, 8, "free", comm=1, activation_cap=4)
    cfg = CFG.replace(decompose=DecomposeParams(max_placements=0, free_model_max_intervals=10))
    res = search(problem, cfg)
    assert res.message == ("the stages dealt round-robin searched; no model with placement literals: "
                           "256 op-device intervals are more than one model takes (10)")
    assert [p.name for p in res.log.phases] == ["placement [[0, 1, 2, 3]]"]
    assert res.schedule is not None and res.makespan == simulate(res.schedule, problem.costs).makespan
    linear = search(problem.with_placement(res.schedule.placement), CFG)
    assert linear.status == "optimal" and res.makespan == linear.makespan
    # every other placement counts with the free analytic bound: stage 3's device, alone,
    # after three forwards (messages cost nothing where stages may share a device), its 8 x 3
    # and three backwards of 2
    assert res.lower_bound == analytic_lower_bound(problem, None)[0] == 3 + 8 * 3 + 6 < res.makespan
    assert res.status == "feasible"
    assert any("every other placement bounded analytically" in a for a in res.bound_assumptions)


def test_the_free_bound_sees_each_stages_device():
    # S=64 stages, B=512: stage 63's device alone runs 512 x 3 after 63 forwards and before 63
    # backwards of 2 (1725, 1F1B's makespan); sharing it would take 2 x 1536. Total work over
    # devices gives 1536 only.
    problem = idealized_problem(64, 512, "free")
    assert analytic_lower_bound(problem, None) == (512 * 3 + 63 + 126, "the device of each stage, alone or shared")
    assert simulate(registry.generate("1f1b", 64, 512), problem.costs).makespan == (512 + 63) * 3 == 1725


def test_decomposition_out_of_time_bounds_unvisited_placements_by_their_loads():
    problem = idealized_problem(4, 8, "free", devices=3)
    now = time.perf_counter()
    res = search_free(problem, CFG, [], Deadline(now, now - 1.0), Mode.SEARCH)
    assert res.status == "unknown" and res.makespan is None  # none visited, none known
    # each placement counts with the larger of its busiest device's load and the free bound:
    # on 3 devices two stages share one (2 x 8 x 3 = 48, above the free bound: 96 / 3 = 32
    # over the devices, and stage 3's device, 33 alone or 48 shared)
    assert analytic_lower_bound(problem, None)[0] == 33
    assert res.lower_bound == 2 * 8 * 3


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
    assert pruned.note.startswith(f"pruned: a device's load, or the free bound, at least 144 >= {linear.makespan}")
    assert res.status == "optimal" and res.makespan == linear.makespan
    assert res.makespan == simulate(res.schedule, problem.costs).makespan


def test_a_known_schedule_at_its_placements_load_is_not_called_infeasible():
    # ZB-H2 reaches the period of its placement's load (8 x 3 = 24): the only placement with
    # that load is the known one, so every placement is pruned before any is visited
    problem = idealized_problem(4, 8, "free", split_backward=True, objective="period", forward=1, backward=1,
                                weight=1)
    res = search(problem, CFG, [registry.generate("zb-h2", 4, 8)])
    assert res.status == "optimal" and res.makespan == res.lower_bound == 8 * 3


def test_a_heavier_known_placement_prunes_no_lighter_one():
    # two devices, 4 stages: known schedules on (0, 0, 1, 1) and the heavier (0, 0, 0, 1); the
    # alternating placements have the lighter load of the first and must still be searched
    problem = idealized_problem(4, 8, "free", devices=2)
    known = []
    for stages in ((0, 0, 1, 1), (0, 0, 0, 1)):
        pl = Placement((stages,), 2)
        fixed = problem.with_placement(pl)
        known.append(best_of(evaluate_known(fixed, s) for s in greedy_starts(fixed, pl)).schedule)
    alone = search(problem, CFG, known[:1])
    both = search(problem, CFG, known)
    assert both.status == alone.status == "optimal" and both.makespan == alone.makespan
    assert any(p.name == "placement [[0, 1, 0, 1]]" for p in both.log.phases)


def test_the_dealt_placement_alone_proves_no_infeasibility():
    # device 1 holds less than an activation, so the dealt placement (0, 1) breaks the cap
    # while (0, 0) fits: the one-model path, not built, must not answer "no schedule exists"
    base = idealized_problem(2, 4, "free", activation_cap=2)
    c = base.costs
    problem = base.with_costs(replace(c, capacity=(c.capacity[0], c.persistent[1] + 0.5)))
    assert search(problem.with_placement(Placement(((0, 0),), 2)), CFG).status == "optimal"
    cfg = CFG.replace(decompose=DecomposeParams(max_placements=0, free_model_max_intervals=10))
    for run in (search, bound):
        res = run(problem, cfg)
        assert res.status == "unknown" and res.makespan is None and res.lower_bound is not None


def test_the_dealt_search_goes_on_from_the_start_already_run():
    # the one-model path judged the dealt placement's starts before finding no time to build:
    # the fixed search of that placement takes them instead of running its start phase again
    problem = idealized_problem(4, 8, "free", comm=1, activation_cap=4)
    dealt = Placement(((0, 1, 2, 3),), 4)
    fixed = problem.with_placement(dealt)
    deadline = CFG.deadline()
    start = start_phase(fixed, dealt, CFG, (), deadline, Pace(deadline, CFG.start))
    assert start.best is not None
    with patch("pipetab.solver.cpsat.phases.fixed.start_phase", side_effect=AssertionError("a second start phase")):
        res = _dealt_search(problem, CFG, list(start.evals), deadline, Mode.SEARCH, "no time", start)
    again = search(fixed, CFG)  # the same placement searched from scratch
    assert res.makespan == simulate(res.schedule, problem.costs).makespan <= start.best.makespan
    assert res.makespan == again.makespan
