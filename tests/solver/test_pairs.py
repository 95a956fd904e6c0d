"""Overlapped pairs chosen on a searched order (``solver.pairs``): which adjacent forward and
backward pair up (worked by hand on 1F1B), and that every candidate is a valid schedule
whose simulated step equals CP-SAT's fixed-order evaluation of it (two implementations)."""

from dataclasses import replace

import pytest

from pipetab.schedules import registry
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.table import layout
from pipetab.schedules.validate import validate
from pipetab.solver.cpsat import evaluate
from pipetab.solver.pairs import _paired, paired_on_order
from pipetab.solver.pricing import idealized_costs
from pipetab.solver.simulate import simulate


def _costs(devices: int, stages: int | None = None, comm_share: int = 1, split: bool = False):
    """F and B of 2 slots each: F computes then sends (its all-to-all), B receives then
    computes; run together as a pair the two overlap into 2 slots instead of 4."""
    stages = stages or devices
    base = idealized_costs(devices, (stages,), forward=2, backward=2, comm=0, split_backward=split)
    f = ((False, 2 - comm_share), (True, comm_share)) if comm_share else ((False, 2),)
    b = ((True, comm_share), (False, 2 - comm_share)) if comm_share else ((False, 2),)
    chains = {(kind, 0, s): chain for s in range(stages) for kind, chain in ((Kind.F, f), (Kind.B, b))}
    return replace(base, chains=chains)


def F(m, s):
    return Op(Kind.F, 0, s, m)


def B(m, s):
    return Op(Kind.B, 0, s, m)


def test_pairs_on_1f1b_by_hand():
    """Device 0 of 1F1B (S=2, 4 microbatches) runs F0 F1 B0 F2 B1 F3 B2 B3: its adjacent
    forward-then-backward of different microbatches are F1-B0, F2-B1, F3-B2. Device 1 runs
    F0 B0 F1 B1 ...: each F is followed by its own B, so pairs form there only when a
    backward may pair with the forward after it (swapped: B0-F1 becomes F1&B0). Those
    deadlock: F1&B0 on device 1 needs F1 of device 0, which its pair F1&B0 there hands on
    only after B0, which needs device 1's B0. So the swapped candidate loses its device-1
    pairs one by one and is the plain one again: one candidate."""
    sched = registry.generate("1f1b", 2, 4)
    costs = _costs(2)
    assert costs.block_time((F(1, 0), B(0, 0))) == 2
    (plain,) = paired_on_order(sched, costs)
    assert plain.blocks == ((F(1, 0), B(0, 0)), (F(2, 0), B(1, 0)), (F(3, 0), B(2, 0)))
    assert plain.orders[1] == sched.orders[1]
    orders, swapped = _paired(sched, costs, swap=True)
    assert swapped[3:] == [(F(1, 1), B(0, 1)), (F(2, 1), B(1, 1)), (F(3, 1), B(2, 1))]
    assert orders[1] == [F(0, 1), F(1, 1), B(0, 1), F(2, 1), B(1, 1), F(3, 1), B(2, 1), B(3, 1)]


def test_nothing_to_pair_without_communication_or_on_a_paired_schedule():
    sched = registry.generate("1f1b", 2, 4)
    assert paired_on_order(sched, _costs(2, comm_share=0)) == []  # the block is the sum: no gain
    assert paired_on_order(sched, idealized_costs(2, (2,))) == []  # no chains at all
    paired = paired_on_order(sched, _costs(2))[0]
    assert paired_on_order(paired, _costs(2)) == []


@pytest.mark.parametrize("name, S, m",
                         [("1f1b", 4, 12), ("zb-h1", 4, 12), ("interleaved", 4, 16), ("dualpipev", 4, 10)])
def test_every_candidate_is_valid_and_simulates_as_cpsat_evaluates_it(name, S, m):
    sched = registry.generate(name, S, m)
    if sched.blocks:
        sched = sched.with_blocks(())
    costs = _costs(sched.placement.num_devices, len(sched.placement.stage2device[0]), split=sched.split_backward)
    candidates = paired_on_order(sched, costs)
    assert candidates
    for paired in candidates:
        validate(layout(paired), paired)
        sim = simulate(paired, costs)
        start = sim.start
        assert all(start[a] == start[b] for a, b in paired.blocks)
        fixed = evaluate(paired, costs)
        assert fixed.makespan == pytest.approx(sim.makespan)


def test_a_search_on_costs_with_an_all_to_all_says_its_bound_excludes_pairs():
    """The search orders ops one at a time; where the costs hold communication a pair could
    hide, its bound says it is a bound of schedules without pairs (and a problem without
    such costs does not)."""
    from pipetab.solver.cpsat import CpSatConfig, Problem, search

    sched = registry.generate("1f1b", 2, 4)
    config = CpSatConfig(time_limit_s=30, deterministic_time=2.0, workers=1)
    for costs, said in ((_costs(2), True), (idealized_costs(2, (2,)), False)):
        result = search(Problem.from_schedule(sched, costs), config)
        assert any("no overlapped forward-backward pairs" in a for a in result.bound_assumptions) is said


def test_the_pairing_rounds_stop_where_the_longest_round_would_pass_until(monkeypatch):
    """The budget rule with a fake clock that advances 1 s per reading: a round reads it
    three times (its check, its start, its end), so round k is checked at 3(k-1) s and the
    longest round lasts 1 s; a round begins only while check + longest < until. On 1F1B
    (S=2, 4 microbatches) the unbudgeted search runs 1 round for the plain pairs and at
    least one more for the swapped ones (test above)."""
    import pipetab.solver.pairs as pairs

    rounds = []
    real = pairs._paired

    def counted(*args, **kwargs):
        rounds.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pairs, "_paired", counted)
    sched, costs = registry.generate("1f1b", 2, 4), _costs(2)

    def run(until):
        rounds.clear()
        ticks = iter(range(10_000))
        out = paired_on_order(sched, costs, until=until, clock=lambda: float(next(ticks)))
        return len(rounds), out

    unbudgeted = run(None)
    assert unbudgeted[0] >= 2
    assert run(0.0) == (0, [])  # the first check at 0 s: nothing begins
    n, out = run(4.0)  # round 2 checked at 3 s, predicted to end at 4 s: not begun
    assert n == 1 and [s.blocks for s in out] == [s.blocks for s in unbudgeted[1]]
    assert run(5.0)[0] == 2  # round 2 predicted at 4 s < 5 s; round 3 at 6 + 1 s > 5 s
