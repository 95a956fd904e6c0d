"""CP-SAT chooses which activations to offload (issue 40, item 6)."""

import itertools
import math

import pytest

from pipetab.solver.cpsat.decompose.offload import search_offload
from pipetab.solver.cpsat.params import CpSatConfig
from pipetab.solver.cpsat.problem import idealized_problem
from pipetab.solver.cpsat.result import Status
from pipetab.solver.offload import CopyRates

CONFIG = CpSatConfig(time_limit_s=30.0, workers=1)
FREE = CopyRates(math.inf, math.inf)


def _solve(problem, rates, choices=None, recompute=True, share=1.0):
    return search_offload(problem, rates, CONFIG, choices, workers=1, det_limit=30.0, recompute=recompute,
                          share=share)


@pytest.mark.parametrize("S,B,cap,rate", [(2, 3, 1, 1.0), (2, 2, 1, 0.5), (3, 2, 1, 1.0)])
def test_free_choices_equal_the_best_fixed_choice(S, B, cap, rate):
    """The model with free offload literals reaches the least optimum of the fixed-choice
    model over all 2^(S*B) choices (F 1, B 2 slots, activation 1, cap ``cap`` activations,
    copies of 1/rate slots); every answer re-simulated with its choices, within the cap."""
    problem = idealized_problem(S, B, activation_cap=cap)
    rates = CopyRates(rate, rate)
    free = _solve(problem, rates, recompute=False)
    assert free.status is Status.OPTIMAL
    keys = [(0, s, m) for s in range(S) for m in range(B)]
    best = None
    for bits in itertools.product((False, True), repeat=len(keys)):
        fixed = _solve(problem, rates, {k: "offload" if b else "keep" for k, b in zip(keys, bits)})
        assert fixed.status in (Status.OPTIMAL, Status.INFEASIBLE)
        if fixed.status is Status.OPTIMAL:
            assert fixed.sim.makespan <= fixed.makespan and all(fixed.sim.fits_memory)
            assert {k for k, b in zip(keys, bits) if b} == set(fixed.offload.fraction)
            best = fixed.makespan if best is None else min(best, fixed.makespan)
    assert free.makespan == best
    assert free.sim.makespan == free.makespan and all(free.sim.fits_memory)
    no_offload = _solve(problem, rates, dict.fromkeys(keys, "keep"))
    assert no_offload.makespan >= free.makespan


@pytest.mark.parametrize("S,B,cap,rate", [(2, 3, 1.5, 1.0), (2, 2, 1.5, 0.5)])
def test_a_share_below_one_equals_the_best_fixed_choice(S, B, cap, rate):
    """Half of each chosen activation moves (``share`` 0.5; copies of 1/(2 rate) slots, the
    other half held from F to B): the free model's optimum is the least of the fixed-choice
    models over all 2^(S*B) choices, every answer re-simulated with half of each chosen
    activation on the copy stream, within the cap of 1.5 activations."""
    problem = idealized_problem(S, B, activation_cap=cap)
    rates = CopyRates(rate, rate)
    free = _solve(problem, rates, recompute=False, share=0.5)
    assert free.status is Status.OPTIMAL
    keys = [(0, s, m) for s in range(S) for m in range(B)]
    best = None
    for bits in itertools.product((False, True), repeat=len(keys)):
        fixed = _solve(problem, rates, {k: "offload" if b else "keep" for k, b in zip(keys, bits)}, share=0.5)
        if fixed.status is Status.OPTIMAL:
            assert set(fixed.offload.fraction.values()) <= {0.5} and all(fixed.sim.fits_memory)
            best = fixed.makespan if best is None else min(best, fixed.makespan)
    assert free.makespan == best and free.sim.makespan == free.makespan and all(free.sim.fits_memory)


def test_free_link_offload_reaches_the_uncapped_step():
    """Cap 1 activation on 2 stages x 4 microbatches (F 1, B 2). Without offload each
    device holds a microbatch from its F to its B: one microbatch at a time, 4 x 6 = 24
    slots. Over an infinitely fast link an activation is held only while its F or B runs
    (ops of a device run one at a time), so the uncapped 1F1B step (4 + 2 - 1) x 3 = 15 is
    reached; copies of 1 slot cost some of it back (between the two, proven optimal)."""
    problem = idealized_problem(2, 4, activation_cap=1)
    keys = [(0, s, m) for s in range(2) for m in range(4)]
    assert _solve(problem, FREE, dict.fromkeys(keys, "keep")).makespan == 24
    free = _solve(problem, FREE, recompute=False)
    assert free.makespan == 15 and free.status is Status.OPTIMAL and free.sim.makespan == 15
    slow = _solve(problem, CopyRates(1.0, 1.0), recompute=False)
    assert slow.status is Status.OPTIMAL and 15 < slow.makespan < 24 and slow.bound == slow.makespan
    assert free.assumptions and "relaxation" in free.assumptions[1]


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_offload_and_recompute_equal_the_enumeration(rate):
    """Keep, offload or recompute each of 2 stages x 2 microbatches' activations (3^4
    fixed-choice models) at cap 1: the free model's optimum is the least of them; each
    answer simulated with its recomputed backwards (B lasts F + B) at CP-SAT's times."""
    problem = idealized_problem(2, 2, activation_cap=1)
    rates = CopyRates(rate, rate)
    keys = [(0, s, m) for s in range(2) for m in range(2)]
    best = None
    for picks in itertools.product(("keep", "offload", "recompute"), repeat=len(keys)):
        fixed = _solve(problem, rates, dict(zip(keys, picks)))
        if fixed.status is Status.OPTIMAL:
            assert fixed.offload.recompute == {k for k, c in zip(keys, picks) if c == "recompute"}
            assert fixed.sim.makespan == fixed.makespan and all(fixed.sim.fits_memory)
            best = fixed.makespan if best is None else min(best, fixed.makespan)
    free = _solve(problem, rates)
    assert free.status is Status.OPTIMAL and free.makespan == best


@pytest.mark.parametrize("S,B,cap,rate", [(2, 4, 1, 0.5), (3, 4, 1, 0.5), (3, 3, 1, 1.0)])
def test_fifo_loses_nothing_on_small_instances(S, B, cap, rate):
    """The base model's FIFO per stage (proven for identical microbatches without offload
    decisions) gives the same optimum as the model without it (and without the last-stage
    dominance) on small instances; the answer names it as an assumption."""
    problem = idealized_problem(S, B, activation_cap=cap)
    plain = _solve(problem, CopyRates(rate, rate))
    config = CpSatConfig(time_limit_s=60.0, workers=1, ablate=frozenset({"fifo", "dominance"}))
    free = search_offload(problem, CopyRates(rate, rate), config, workers=1, det_limit=60.0)
    assert plain.status is free.status is Status.OPTIMAL and plain.makespan == free.makespan
    assert any("FIFO" in a for a in plain.assumptions) and not any("FIFO" in a for a in free.assumptions)


def test_offload_search_refuses_free_placement():
    with pytest.raises(ValueError, match="fixed placement"):
        search_offload(idealized_problem(2, 2, "free", activation_cap=1), CopyRates(1.0, 1.0), CONFIG)
    with pytest.raises(ValueError, match="minimizes the makespan"):
        search_offload(idealized_problem(2, 2, objective="period", activation_cap=1), CopyRates(1.0, 1.0), CONFIG)
