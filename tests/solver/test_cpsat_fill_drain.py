"""The fill-and-drain device bound (``bounds._fill_drain_bound``): hand-worked values and
never above the optimum, which CP-SAT proves on small instances without being told any
bound."""

import random

import pytest

from pipetab.solver.cpsat import CpSatConfig, idealized_problem
from pipetab.solver.cpsat.bounds import min_feasible_cap, safe_horizon
from pipetab.solver.cpsat.model import CpSatModel
from pipetab.solver.cpsat.objectives import analytic_lower_bound


@pytest.mark.parametrize("placement,C,expected", [
    # bidirectional S=8, B=32 (16 per direction), cap 8, F=1, B=2: device 3 holds down
    # stage 3 and up stage 4; load 16 * 2 * 3 = 96.
    # C=0: first backward at 14 (up stage 4: forwards to 8, backwards 7..5 take 6), least
    # forward tail 19 (up stage 4: 3 forwards + 8 backwards), least backward tail 6;
    # fill min(14 - 3, 8) = 8, drain min(19 - 6, 8 * 2) = 13: 14 + 19 + 96 - 21 = 108.
    ("bidirectional", 0, 108),
    # C=1 (every hop 1 slot): first backward 24, forward tail 29, backward tail 9;
    # fill min(24 - 6, 8) = 8, drain min(29 - 9, 16) = 16: 24 + 29 + 96 - 24 = 125.
    ("bidirectional", 1, 125),
    # linear: device 0, first backward 22, forward tail 23, fill 8, drain 16:
    # 22 + 23 + 96 - 24 = 117 = (B + S - 1) * 3, 1F1B's makespan.
    ("linear", 0, 117),
])
def test_hand_worked(placement, C, expected):
    problem = idealized_problem(8, 32, placement, comm=C, activation_cap=8)
    lb, why = analytic_lower_bound(problem, problem.fixed_placement)
    assert (lb, "fill and drain" in why) == (expected, True)


def _optimum(problem) -> int:
    placement = problem.fixed_placement
    model = CpSatModel(problem, CpSatConfig(workers=2), placement, safe_horizon(problem, placement))
    raw = model.solve(20.0)
    assert raw.status == "optimal"
    return raw.makespan


def _cases(n, seed=7):
    rng = random.Random(seed)
    for _ in range(n):
        placement = rng.choice(["linear", "bidirectional", "bidirectional", "v", "interleaved"])
        S = rng.choice([2, 3, 4]) if placement != "interleaved" else 2
        if placement == "bidirectional":
            S = rng.choice([2, 4])
        B = rng.randint(2, 6) if placement != "bidirectional" else rng.randint(S // 2 + 1, 6)
        split = rng.random() < 0.3
        f, b, w = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 2)
        pipes = 2 if placement == "bidirectional" else 1
        stages = {"v": 2 * S, "interleaved": 2 * S}.get(placement, S)
        work = tuple(tuple(rng.choice((1, 1, 2, 3)) for _ in range(stages)) for _ in range(pipes)) \
            if rng.random() < 0.4 else None
        yield placement, S, B, split, f, b, w, rng.randint(0, 2), rng.random(), work


@pytest.mark.parametrize("case", list(_cases(80)), ids=str)
def test_never_above_the_optimum(case):
    problem = _problem(case)
    lb, why = analytic_lower_bound(problem, problem.fixed_placement)
    assert lb <= _optimum(problem), why


def _problem(case):
    placement, S, B, split, f, b, w, C, cap_draw, work = case
    opts = dict(forward=f, backward=b, weight=w, comm=C, split_backward=split, stage_work=work)
    least = min_feasible_cap(idealized_problem(S, B, placement, **opts))
    return idealized_problem(S, B, placement, activation_cap=least * (1 + round(2 * cap_draw, 1)) + 0.01, **opts)


def test_the_cases_exercise_it():
    """The bound decides the analytic bound in many of the cases above (else the test
    above would not test it)."""
    whys = [analytic_lower_bound(p, p.fixed_placement)[1] for p in map(_problem, _cases(80))]
    assert sum("fill and drain" in why for why in whys) >= 20
