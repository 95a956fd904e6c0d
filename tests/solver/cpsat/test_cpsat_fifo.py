"""FIFO (one microbatch order per stage and kind) loses nothing: equal optima with and
without it, on instances where the relabelling argument is easy to get wrong (several
stages per device, two pipelines, split backward, tight caps, latencies)."""

import pytest

from pipetab.schedules import registry
from pipetab.schedules.rewrite import relabel_microbatches
from pipetab.solver.cpsat import CpSatConfig, idealized_problem
from pipetab.solver.cpsat.model.bounds import safe_horizon
from pipetab.solver.cpsat.model.cpmodel import CpSatModel
from pipetab.solver.cpsat.model.oracle import evaluate_known

CASES = [
    # family, S, B, forward, backward, comm, cap, split
    ("linear", 4, 6, 1, 2, 1, 2, False),
    ("linear", 3, 5, 2, 1, 2, 2, True),
    ("linear", 4, 4, 1, 3, 0, 4, False),
    ("bidirectional", 4, 5, 2, 3, 2, 1, False),
    ("bidirectional", 2, 5, 1, 3, 2, 3, True),
    ("wave", 2, 4, 1, 2, 2, 4, True),
    ("wave", 3, 4, 2, 3, 2, None, False),
    ("wave", 2, 5, 1, 2, 1, 2, False),
]


def _optimum(problem, fifo, order_literals=True):
    pl = problem.fixed_placement
    off = ({"fifo"} if not fifo else set()) | ({"order_literals"} if not order_literals else set())
    config = CpSatConfig(time_limit_s=30, workers=2, ablate=off)
    model = CpSatModel(problem, config, pl, safe_horizon(problem, pl))
    if problem.placement == "linear":
        assert ("order literals" in model.applied) == (fifo and order_literals)
    raw = model.solve(30)
    assert raw.status == "optimal"
    return raw.makespan


@pytest.mark.parametrize("family,S,B_,f,k,c,cap,split", CASES)
def test_fifo_is_without_loss_of_generality(family, S, B_, f, k, c, cap, split):
    problem = idealized_problem(S, B_, family, forward=f, backward=k, comm=c, activation_cap=cap,
                                split_backward=split)
    assert _optimum(problem, True) == _optimum(problem, False)


@pytest.mark.parametrize("name,S,B_", [("chimera", 4, 8), ("hanayo", 4, 4), ("1f1b", 4, 8)])
def test_fifo_relabelling_keeps_time_and_memory(name, S, B_):
    """The relabelling used for hints: same makespan, same peaks, satisfies FIFO."""
    schedule = registry.generate(name, S, B_)
    family = {"chimera": "bidirectional", "hanayo": "wave", "1f1b": "linear"}[name]
    problem = idealized_problem(S, B_, family, comm=1)
    k = evaluate_known(problem, schedule)
    s2, t2 = relabel_microbatches(schedule, k.timing)
    k2 = evaluate_known(problem, s2)
    assert k2.makespan == k.makespan
    assert k2.memory.peaks == k.memory.peaks
    for op, t in t2.start.items():
        if op.microbatch + 1 < B_:
            nxt = op._replace(microbatch=op.microbatch + 1)
            same_pipeline = problem.microbatch2pipeline[nxt.microbatch] == problem.microbatch2pipeline[op.microbatch]
            if nxt in t2.start and same_pipeline:
                assert t2.start[nxt] > t


@pytest.mark.parametrize("S,B_,f,k,c,cap,split", [
    (4, 6, 1, 2, 1, 2, False), (3, 5, 2, 1, 2, 2, True), (4, 4, 1, 3, 0, 4, False),
    (3, 6, 1, 2, 1, None, True), (5, 7, 2, 3, 1, 3, False), (4, 8, 1, 2, 2, 3, True),
])
def test_order_literals_equal_the_no_overlap(S, B_, f, k, c, cap, split):
    """Under FIFO the pairwise order literals replace each
    one-stage device's no-overlap: the same optimum as the interval model, with two
    chains (F, B) or three (F, B, W) per device."""
    problem = idealized_problem(S, B_, "linear", forward=f, backward=k, comm=c, activation_cap=cap,
                                split_backward=split)
    assert _optimum(problem, True) == _optimum(problem, True, order_literals=False)
