"""The fill-and-drain device bound (``bounds._fill_drain_bound``): hand-worked values and
never above the optimum, which CP-SAT proves on small instances without being told any
bound."""

import random

import pytest

from pipetab.schedules.ops import Kind
from pipetab.solver.cpsat import CpSatConfig, idealized_problem
from pipetab.solver.cpsat.model import bounds
from pipetab.solver.cpsat.model.bounds import _drain_work, min_feasible_cap, safe_horizon
from pipetab.solver.cpsat.model.cpmodel import CpSatModel
from pipetab.solver.cpsat.model.objectives import analytic_lower_bound


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


def test_split_backward_drain_by_hand():
    """Linear S=4, B=16, F=3, B=4, W=2, a message of 1, cap 4, W freeing the whole
    activation. Device 0: first backward at 4 x 3 + 3 x 4 + 6 = 30, forward tail
    3 x 3 + 4 x 4 + 6 + 2 = 33, load 16 x 9 = 144, fill min(30, 4 x 3) = 12. After the
    last forward's deadline at most 4 activations are live, each owing B + W: drain
    min(33, 4 x 6) = 24. 30 + 33 + 144 - 36 = 171, ZB-H1's makespan, proven optimal by
    CP-SAT (without the memory term the drain was 33 and the bound 165 from the sweep)."""
    problem = idealized_problem(4, 16, forward=3, backward=4, weight=2, comm=1, activation_cap=4,
                                split_backward=True)
    lb, why = analytic_lower_bound(problem, problem.fixed_placement)
    assert (lb, "fill and drain" in why) == (171, True)


@pytest.mark.parametrize("weight_memory,cap,expected", [
    # W holds all: 4 live activations, each owing B + W = 1 + 2
    (1.0, 4, 12),
    # M_W = M/4: n owing B + W (memory 1 each), the rest owing W alone (1/4 each):
    # n = 0 gives 16 x 2 = 32, the most (n = 4 gives 12)
    (0.25, 4, 32),
    # M_W = M/2, cap 3: n = 0: 6 x 2 = 12; n = 1: 3 + 4 x 2 = 11; ... n = 3: 9
    (0.5, 3, 12),
])
def test_drain_work_by_hand(weight_memory, cap, expected):
    problem = idealized_problem(2, 4, forward=1, backward=1, weight=2, split_backward=True,
                                weight_memory=weight_memory)
    assert _drain_work(problem, [(0, 0)], cap) == expected


def test_drain_work_unbounded_without_weight_memory():
    """W keeps nothing: W's owed at the end are not bounded by memory."""
    problem = idealized_problem(2, 4, split_backward=True, weight_memory=0.0)
    assert _drain_work(problem, [(0, 0)], 2) == float("inf")


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


@pytest.mark.slow
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


def _split_cases(n, seed=28):
    """Split backward under tight caps, W keeping all or half of the activation."""
    rng = random.Random(seed)
    for _ in range(n):
        placement = rng.choice(["linear", "linear", "v"])
        S = rng.choice([2, 3, 4])
        f, b, w = rng.choice([(1, 1, 1), (1, 2, 1), (3, 4, 2), (1, 2, 2), (2, 3, 1)])
        yield placement, S, rng.randint(S, 2 * S), f, b, w, rng.choice([0, 1, 2]), rng.choice([1, 1, 1.5, 2]), \
            rng.choice([0.5, 1.0])


def _split_problem(case):
    placement, S, B, f, b, w, C, cap, wm = case
    return idealized_problem(S, B, placement, forward=f, backward=b, weight=w, comm=C, activation_cap=cap * S,
                             split_backward=True, weight_memory=wm)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_split_cases(32)), ids=str)
def test_split_drain_never_above_the_optimum(case):
    problem = _split_problem(case)
    lb, why = analytic_lower_bound(problem, problem.fixed_placement)
    assert lb <= _proven_optimum(problem), why


def _proven_optimum(problem) -> int:
    """CP-SAT's optimum under a deterministic limit, one worker (reproducible)."""
    placement = problem.fixed_placement
    model = CpSatModel(problem, CpSatConfig(workers=1), placement, safe_horizon(problem, placement))
    raw = model.solve(120.0, det_limit=20.0, workers=1)
    assert raw.status == "optimal"
    return raw.makespan


def test_split_cases_exercise_the_drain():
    """The fill-and-drain bound decides many of the split cases above."""
    whys = [analytic_lower_bound(p, p.fixed_placement)[1] for p in map(_split_problem, _split_cases(32))]
    assert sum("fill and drain" in why for why in whys) >= 8


def test_drain_windows_by_hand():
    """Linear S=4, B=16, F:B:W = 3:4:2, a message of 1, cap 8, W freeing the whole
    activation. Device 3: first backward at 4 x 3 + 3 x 1 = 15, forward tail
    r = 4 + 3 x (1 + 4) + 2 = 21, its B's tail 3 x (1 + 4) + 2 = 17, its W's 0, load
    16 x 9 = 144, fill min(15 - 12, 8 x 3) = 3. In the last 21 slots only backwards run, a
    B only in the first 21 - 17 = 4 of them: drain min(21, max over n of min(4n, 4) +
    min(8 x 2, 21)) = 20, and 15 + 21 + 144 - 3 - 20 = 157 (156 without the B's window).
    The search finds a schedule of 157, so it is the optimum."""
    problem = idealized_problem(4, 16, forward=3, backward=4, weight=2, comm=1, activation_cap=8,
                                split_backward=True)
    lb, why = analytic_lower_bound(problem, problem.fixed_placement)
    assert (lb, why) == (157, "load of device 3 with its memory-bound fill and drain")
    assert _drain_work(problem, [(0, 3)], 8, {Kind.B: 4, Kind.W: 21}) == 20
    assert _drain_work(problem, [(0, 3)], 8) == 8 * 6


# Small split-backward cases where a backward kind's own window raises the bound (without
# it the bound is one to three slots lower); the bound equals CP-SAT's proven optimum.
WINDOW_CASES = [
    # placement, S, B, F, B, W, C, cap (x S), M_W / M
    ("linear", 2, 4, 3, 4, 2, 1, 1.5, 1.0),
    ("linear", 2, 4, 3, 4, 2, 2, 1.5, 1.0),
    ("linear", 2, 4, 2, 3, 1, 0, 1.5, 1.0),
    ("linear", 2, 6, 2, 3, 1, 2, 2, 1.0),
    ("linear", 2, 8, 3, 4, 2, 2, 1.5, 1.0),
    ("linear", 2, 8, 2, 3, 1, 1, 2, 1.0),
    ("linear", 3, 6, 3, 4, 2, 1, 1.5, 1.0),
    ("linear", 3, 6, 2, 3, 1, 0, 1.5, 1.0),
    ("v", 3, 3, 2, 3, 1, 0, 1, 0.5),
    ("v", 3, 6, 2, 3, 1, 1, 1.5, 1.0),  # a message of 1 slot: 2 ticks of half slots
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_drain_windows_reach_the_optimum(case, monkeypatch):
    problem = _split_problem(case)
    lb, _ = analytic_lower_bound(problem, problem.fixed_placement)
    assert lb == _proven_optimum(problem)
    plain = bounds._drain_work
    monkeypatch.setattr(bounds, "_drain_work", lambda pr, keys, cap, windows=None: plain(pr, keys, cap))
    assert analytic_lower_bound(problem, problem.fixed_placement)[0] < lb
