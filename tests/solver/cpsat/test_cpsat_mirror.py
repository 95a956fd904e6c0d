"""Mirror-symmetric schedules of bidirectional problems (``mirror.mirror_pairs``): when
they apply, and that the restricted model's schedules are schedules of the problem."""

from __future__ import annotations

import pytest

from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.heuristics.mirror import mirror_pairs
from pipetab.solver.cpsat.model.bounds import safe_horizon
from pipetab.solver.cpsat.model.cpmodel import CpSatModel
from pipetab.solver.cpsat.model.oracle import checked


def _pairs(S, B, placement="bidirectional", **kw):
    pr = idealized_problem(S, B, placement, **kw)
    return mirror_pairs(pr, pr.fixed_placement)


def test_which_problems_are_mirror_symmetric():
    pairs = _pairs(4, 8, comm=1, activation_cap=4)
    assert len(pairs) == 2 * 4 * 4  # F and B of 4 stages of the 4 microbatches per direction
    assert all(a.pipeline == 0 and b.pipeline == 1 and (a.kind, a.stage) == (b.kind, b.stage) for a, b in pairs)
    assert _pairs(4, 8, "linear") is None and _pairs(4, 8, "v") is None
    assert _pairs(4, 6) is None  # 4 microbatches down, 2 up
    assert _pairs(4, 8, stage_work=((1, 1, 1, 1), (2, 1, 1, 1))) is None  # the directions split differently
    assert _pairs(4, 8, stage_work=((2, 1, 1, 1), (2, 1, 1, 1))) is not None


def test_the_restricted_optimum_is_a_schedule_no_better_than_the_optimum():
    # bidirectional S=4, B=8, cap 4, C=1: the optimum is 35 (docs/bench/cpsat_bidirectional.csv)
    pr = idealized_problem(4, 8, "bidirectional", comm=1, activation_cap=4)
    pl = pr.fixed_placement
    horizon = safe_horizon(pr, pl)
    full = CpSatModel(pr, CpSatConfig(), pl, horizon).solve(20)
    restricted = CpSatModel(pr, CpSatConfig(), pl, horizon, mirror=mirror_pairs(pr, pl))
    raw = restricted.solve(20)
    assert full.status == raw.status == "optimal" and full.makespan == 35
    assert raw.makespan >= full.makespan
    ev = checked(pr, restricted.schedule_from(raw), raw.makespan)  # simulated, memory-checked, validated
    assert ev.makespan == raw.makespan


@pytest.mark.slow
def test_search_proves_the_fill_and_drain_bound_with_a_mirror_schedule():
    """Bidirectional S=8, B=32, cap 8, C=1: every least-slack start takes 137; the mirror
    model reaches 125, the fill-and-drain bound (hand-worked in test_cpsat_fill_drain.py)."""
    # deterministic seconds, not wall-clock ones: the mirror solve gets half of what a 5 %
    # bound phase leaves (23.75); one worker, so the run is the same on a loaded machine
    # (with two workers and a 120-s wall-clock limit it once ended at 127 under a load of
    # about 4); the wall-clock limit only guards against a hang (19 s alone)
    cfg = CpSatConfig(time_limit_s=600, deterministic_time=50, bound_share=0.05, workers=1)
    res = search(idealized_problem(8, 32, "bidirectional", comm=1, activation_cap=8), cfg)
    assert (res.status, res.makespan, res.lower_bound) == ("optimal", 125, 125)
    assert any(r.phase == "search (mirror)" for ph in res.log.phases for r in ph.solves)
