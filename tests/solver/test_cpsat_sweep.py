"""The sweep over the microbatches (``cpsat.sweep``): a hand-worked case, and never above
the optimum of an enumeration of every FIFO order of tiny instances (no CP-SAT)."""

import itertools

import pytest

from pipetab.schedules.ops import Op
from pipetab.solver.cpsat import idealized_problem
from pipetab.solver.cpsat.oracle import evaluate_known
from pipetab.solver.cpsat.sweep import sweep_lower_bound


def test_two_stages_two_microbatches_by_hand():
    """F=1, B=2, no messages: F(0,0)=0, F(1,0)=1, B(1,0) ends 4, B(0,0) 6; F(0,1)=1,
    F(1,1)=2, B(1,1) ends max(2+3, 4+2, device 1's F(0,1)..: 1 + 2 x 3) = 7, B(0,1) ends
    7 + 2 = 9: 1F1B's (B + S - 1)(F + B) = 9, which is optimal."""
    problem = idealized_problem(2, 2)
    assert sweep_lower_bound(problem, problem.fixed_placement) == 9


def test_memory_window_and_device_load_by_hand():
    """S=2, B=3, F=1, B=2, a message of 1, one activation per device: every microbatch
    runs alone. F(0,0) 0, F(1,0) 2, B(1,0) ends 5, B(0,0) ends 8; F(0,1) starts when B(0,0)
    ends (window): 8, ... each microbatch takes 8: 3 x 8 = 24."""
    problem = idealized_problem(2, 3, comm=1, activation_cap=1)
    assert sweep_lower_bound(problem, problem.fixed_placement) == 24


def _orders(problem, stage_ops):
    """Every per-device order with each kind in microbatch order and F(j) < B(j) < W(j)."""
    kinds, B = problem.kinds, problem.num_microbatches

    def rec(done, seq):
        if all(d == B for d in done):
            yield tuple(seq)
            return
        for i, kind in enumerate(kinds):
            j = done[i]
            if j < B and (i == 0 or done[i - 1] > j):
                done[i] += 1
                seq.append(stage_ops(kind, j))
                yield from rec(done, seq)
                seq.pop()
                done[i] -= 1

    yield from rec([0] * len(kinds), [])


@pytest.mark.parametrize("S, B, F, Bk, W, comm, cap, split, wm", [
    (2, 3, 1, 2, 1, 1, 2, False, 1.0), (2, 3, 1, 1, 1, 1, 1.5, True, 0.5), (3, 2, 1, 2, 1, 1, 1, False, 1.0),
    (2, 4, 2, 3, 1, 0, 2, False, 1.0), (3, 2, 1, 1, 1, 2, 1.5, True, 0.5), (2, 3, 3, 4, 2, 1, None, True, 0.5),
    (3, 3, 1, 2, 1, 1, 2, False, 1.0), (2, 3, 1, 1, 1, 1, 2, True, 1.0),
])
def test_never_above_the_enumerated_optimum(S, B, F, Bk, W, comm, cap, split, wm):
    problem = idealized_problem(S, B, forward=F, backward=Bk, weight=W, comm=comm, activation_cap=cap,
                                split_backward=split, weight_memory=wm)
    per_device = [list(_orders(problem, lambda k, j, s=s: Op(k, 0, s, j))) for s in range(S)]
    best = None
    for orders in itertools.product(*per_device):
        ev = evaluate_known(problem, problem.schedule("enum", problem.fixed_placement, orders))
        if ev.fits and (best is None or ev.makespan < best):
            best = ev.makespan
    assert sweep_lower_bound(problem, problem.fixed_placement) <= best
