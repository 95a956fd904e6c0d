"""Least-slack list schedules (``greedy_schedule(slack=...)``, the ``greedy-slack*`` starts)."""

from __future__ import annotations

import pytest

from pipetab.schedules.validate import validate
from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.heuristics.greedy import microbatch_spacing
from pipetab.solver.cpsat.heuristics.starts import greedy_starts
from pipetab.solver.cpsat.model.objectives import analytic_lower_bound
from pipetab.solver.cpsat.model.oracle import evaluate_known, memory_check, table_of


def test_microbatch_spacing_by_hand(linear_4_8):
    # F=1, B=2: a linear device runs 3 slots per microbatch; a bidirectional device serves
    # both directions, so one direction's microbatches pass every 6
    lin = linear_4_8
    bi = idealized_problem(4, 8, "bidirectional")
    assert microbatch_spacing(lin, lin.fixed_placement) == {0: 3.0}
    assert microbatch_spacing(bi, bi.fixed_placement) == {0: 6.0, 1: 6.0}


@pytest.mark.parametrize("S, B, placement, cap, comm", [
    (2, 4, "bidirectional", 2, 1), (4, 8, "bidirectional", 4, 1), (4, 8, "bidirectional", None, 0),
    (4, 8, "v", 4, 1), (4, 8, "interleaved", 4, 1), (4, 8, "linear", 4, 1), (4, 6, "wave", 8, 0),
])
def test_slack_starts_are_valid_and_fit_the_cap(S, B, placement, cap, comm):
    pr = idealized_problem(S, B, placement, comm=comm, activation_cap=cap)
    pl = pr.fixed_placement
    starts = [s for s in greedy_starts(pr, pl) if s.name.startswith("greedy-slack")]
    assert starts
    for s in starts:
        e = evaluate_known(pr, s)
        assert e.fits and memory_check(pr, s).fits
        validate(table_of(pr, s, e.timing), s)


@pytest.mark.parametrize("S, B, cap, optimum", [(8, 32, 8, 108), (16, 64, 16, 220)])
def test_a_slack_start_meets_the_fill_and_drain_bound(S, B, cap, optimum):
    """Bidirectional under a cap of S, C=0: a least-slack list schedule reaches the
    analytic bound (device S/2 - 1's load with its memory-bound fill and drain), so it is
    optimal. Chimera takes 126 and 262. The bounds by hand: S=8 in
    test_cpsat_fill_drain.py; S=16, device 7 (down stage 7, up stage 8), load 32 x 2 x 3 =
    192: the first backward at 30 (up stage 8: forwards to 16, backwards 15..9 take 14),
    least forward tail 39 (up stage 8: 7 forwards + 16 backwards), least backward tail 14
    (down stage 7); fill min(30 - 7, 16) = 16, drain min(39 - 14, 16 x 2) = 25:
    30 + 39 + 192 - 41 = 220."""
    pr = idealized_problem(S, B, "bidirectional", activation_cap=cap)
    pl = pr.fixed_placement
    assert analytic_lower_bound(pr, pl)[0] == optimum
    best = min(evaluate_known(pr, s).makespan for s in greedy_starts(pr, pl) if s.name.startswith("greedy-slack"))
    assert best == optimum
    if S == 8:
        res = search(pr, CpSatConfig(time_limit_s=20))
        assert (res.status, res.makespan, res.lower_bound) == ("optimal", optimum, optimum)


def test_slack_starts_compute_each_depth_once_and_begin_none_past_their_end(monkeypatch):
    """The per-stage warm-up depths of a scale are computed once however many slack
    multiples use them, and past ``until`` no least-slack start is begun (their depths
    take seconds at the largest sizes, before a list schedule can give up)."""
    import time

    from pipetab.solver.cpsat.heuristics import greedy as greedy_module
    from pipetab.solver.cpsat.heuristics import starts
    from pipetab.solver.cpsat.params import StartParams

    problem = idealized_problem(4, 16, "v", comm=1, activation_cap=4)
    calls: list[float] = []
    real = greedy_module.stage_limits

    def counted(problem, placement, scale):
        calls.append(scale)
        return real(problem, placement, scale)

    monkeypatch.setattr(starts, "stage_limits", counted)
    placement = problem.fixed_placement
    made = list(starts.slack_starts(problem, placement, True))
    depths = [d for _, d in StartParams().slack_starts if d is not None]
    assert len(made) >= 1 and sorted(calls) == sorted(set(depths)) and len(set(depths)) < len(depths)
    calls.clear()
    past = time.perf_counter() - 1.0
    assert list(starts.slack_starts(problem, placement, True, until=lambda: past)) == [] and calls == []
