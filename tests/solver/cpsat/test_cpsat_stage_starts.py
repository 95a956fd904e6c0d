"""Per-stage warm-up depths for placements with several stages per device
(``oracle.stage_limits``) and the list schedules they limit (the ``greedy-slack*-d*``
starts)."""

from __future__ import annotations

import pytest

from pipetab.schedules.ops import Kind
from pipetab.schedules.validate import validate
from pipetab.solver.cpsat import idealized_problem
from pipetab.solver.cpsat.heuristics.greedy import greedy_schedule, stage_limits
from pipetab.solver.cpsat.heuristics.starts import greedy_starts
from pipetab.solver.cpsat.model.oracle import evaluate_known, memory_check, table_of
from pipetab.solver.cpsat.model.variables import lifetime_min


def test_residency_and_limits_by_hand():
    # bidirectional S=2: down stage 0 and up stage 1 on device 0. F=1, B=2, C=1: down stage 0's
    # activation lives F0 1 + msg 1 + F1 1 + B1 2 + msg 1 + B0 2 = 8; the last stage's F+B = 3.
    # Device 0 runs 2 microbatches of each direction x 3 = 12 slots: one per direction every 6.
    pr = idealized_problem(2, 4, "bidirectional", comm=1, activation_cap=4)
    pl = pr.fixed_placement
    assert {k: lifetime_min(pr, pl, *k, Kind.B) for k in pr.stages} == {(0, 0): 8, (0, 1): 3, (1, 0): 8, (1, 1): 3}
    assert stage_limits(pr, pl, 1) == {(0, 0): 2, (0, 1): 1, (1, 0): 2, (1, 1): 1}  # ceil(8/6), ceil(3/6)
    assert stage_limits(pr, pl, 2) == {(0, 0): 3, (0, 1): 1, (1, 0): 3, (1, 1): 1}  # ceil(16/6), 1: 4 <= cap 4
    # cap 2: 2 + 1 activations need 3 > 2, so both shrink by 2/3 (floor, at least 1)
    tight = idealized_problem(2, 4, "bidirectional", comm=1, activation_cap=2)
    assert stage_limits(tight, pl, 1) == {(0, 0): 1, (0, 1): 1, (1, 0): 1, (1, 1): 1}


def test_a_depth_of_one_everywhere_runs_one_microbatch_at_a_time_per_stage():
    # linear S=2, F=1, B=2, no messages, each stage at most one forward ahead of its backwards:
    # mb 0 F0 [0,1] F1 [1,2] B1 [2,4] B0 [4,6]; stage 0 starts mb 1 only when B0 of mb 0 starts (4)
    pr = idealized_problem(2, 2, "linear", activation_cap=2)
    s = greedy_schedule(pr, pr.fixed_placement, inflight={(0, 0): 1, (0, 1): 1})
    assert evaluate_known(pr, s).makespan == 12  # two microbatches back to back, nothing overlaps


@pytest.mark.parametrize("S, B, placement, cap, comm", [
    (2, 4, "bidirectional", 2, 1), (4, 8, "bidirectional", 4, 1), (4, 8, "bidirectional", 4, 0),
    (4, 8, "bidirectional", 8, 1), (4, 8, "v", 4, 1), (4, 8, "interleaved", 4, 1),
])
def test_stage_starts_are_valid_and_fit_the_cap(S, B, placement, cap, comm):
    pr = idealized_problem(S, B, placement, comm=comm, activation_cap=cap)
    pl = pr.fixed_placement
    starts = [s for s in greedy_starts(pr, pl) if s.name.startswith("greedy-slack") and "-d" in s.name]
    assert starts, "a capped placement with several stages per device gets depth-limited starts"
    for s in starts:
        e = evaluate_known(pr, s)
        assert e.fits and memory_check(pr, s).fits
        validate(table_of(pr, s, e.timing), s)
