"""The sweep over the microbatches (``cpsat.model.sweep``): a hand-worked case, and never above
the optimum of an enumeration of every FIFO order of tiny instances (no CP-SAT)."""

import itertools

import pytest

from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import idealized_problem
from pipetab.solver.cpsat.model.oracle import evaluate_known
from pipetab.solver.cpsat.model.sweep import sweep_lower_bound


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


def test_device_load_after_the_first_backward_by_hand():
    """S=2, B=4, F=B=W=1, a message of 1, two activations per device, W freeing them.
    Microbatch 0: F(0) 0, F(1) 2, B(1) 3, B(0) starts 5, W(0) ends 7. From B(0, 0)'s start
    device 0 runs B and W of microbatches 0 and 1 and F(0, 2) before F(0, 3) (F(0, 3) waits
    for W(0, 1)): F(0, 3) >= 5 + 5 = 10, and microbatch 3 takes 7 more: 17, the optimum of
    every FIFO order (below). From F(0, 0)'s start alone the rule gave 16."""
    problem = idealized_problem(2, 4, forward=1, backward=1, weight=1, comm=1, activation_cap=2,
                                split_backward=True)
    assert sweep_lower_bound(problem, problem.fixed_placement) == 17


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
    assert sweep_lower_bound(problem, problem.fixed_placement) <= _enumerated_optimum(problem)


def _enumerated_optimum(problem, window=None):
    """The least makespan over every FIFO order that fits; ``window`` (W holding the whole
    activation): leave out orders where F(j + window) precedes W(j) on a device, which
    cannot fit."""
    def fits(order):
        pos = {op: i for i, op in enumerate(order)}
        return all(pos[Op(Kind.W, 0, op.stage, op.microbatch - window)] < i for i, op in enumerate(order)
                   if op.kind is Kind.F and op.microbatch >= window)

    per_device = [[o for o in _orders(problem, lambda k, j, s=s: Op(k, 0, s, j)) if window is None or fits(o)]
                  for s in range(problem.num_stages[0])]
    best = None
    for orders in itertools.product(*per_device):
        ev = evaluate_known(problem, problem.schedule("enum", problem.fixed_placement, orders))
        if ev.fits and (best is None or ev.makespan < best):
            best = ev.makespan
    return best


@pytest.mark.slow
@pytest.mark.parametrize("F, Bk, W, expected", [(1, 1, 1, 17), (1, 2, 2, 25)])
def test_device_load_after_the_first_backward_is_tight(F, Bk, W, expected):
    """S=2, B=4, a message of 1, cap 2, W freeing all: the rule from a backward's start
    lifts the sweep (from 16 and 23) to the enumerated optimum."""
    problem = idealized_problem(2, 4, forward=F, backward=Bk, weight=W, comm=1, activation_cap=2,
                                split_backward=True)
    assert sweep_lower_bound(problem, problem.fixed_placement) == expected == _enumerated_optimum(problem, window=2)
