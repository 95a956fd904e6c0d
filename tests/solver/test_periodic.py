"""The steady-state period three ways: the span of one timing, the least span over timings
(max cycle mean), and K iterations through the simulator."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import registry
from pipetab.schedules.evaluate import DeadlockError
from pipetab.schedules.ops import B, F, Kind, data_predecessors
from pipetab.schedules.schedule import Schedule
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate
from pipetab.solver.costs import ReplicaGroup
from pipetab.solver.periodic import (
    checked_span_period,
    device_spans,
    max_cycle_mean,
    min_period,
    periodic_timing,
    repeated_schedule,
    repeated_simulation,
    span_period,
)
from pipetab.solver.pricing import hardware_costs, slot_costs
from pipetab.solver.simulate import simulate

UNIT = SlotDurations(1, 1, 1)
NEG = -math.inf


def early_start_case():
    """zb-h1, S=2, B=2, no transfer time; stage 0: F 3, B 1, W 1; stage 1: F 1, B 1, W 3.
    ASAP: dev0 | F0 0-3  F1 3-6  B0 6-7  W0 7-8  B1 8-9   W1 9-10           span 10
          dev1 | F0 3-4  B0 4-5  F1 6-7  B1 7-8  W0 8-11  W1 11-14          span 11
    Device 1 starts one slot earlier than it needs: from 4 its span is 10, and device 0
    is busy 10 slots, so the least period is 10."""
    sched = registry.generate("zb-h1", 2, 2)
    times = {Kind.F: (3, 1), Kind.B: (1, 1), Kind.W: (1, 3)}
    costs = slot_costs(sched, UNIT)
    costs = replace(costs, op_time={(k, p, s): times[k][s] for (k, p, s) in costs.op_time})
    return sched, costs


def test_spans_of_a_timing():
    start = {F(0, 0): 0, B(0, 0): 5, F(0, 1): 2, B(0, 1): 3}
    end = {F(0, 0): 1, B(0, 0): 6, F(0, 1): 3, B(0, 1): 4}
    dev = {0: 0, 1: 1}
    assert device_spans(start, end, lambda op: dev[op.stage]) == {0: 6, 1: 2}
    assert span_period(start, end, lambda op: dev[op.stage]) == 6
    with pytest.raises(ValueError, match="at least one op"):
        span_period({}, {}, lambda op: 0)


def test_max_cycle_mean_by_hand():
    assert max_cycle_mean([[2, 5], [1, NEG]]) == 3  # 0 -> 1 -> 0: (5 + 1) / 2 beats the loop 2
    assert max_cycle_mean([[2, 4], [1, NEG]], exact=True) == 2.5
    assert max_cycle_mean([[7, 0], [0, 1]], exact=True) == 7
    assert max_cycle_mean([[NEG, 3], [NEG, NEG]]) == NEG  # no cycle
    # three nodes: the cycle 0 -> 1 -> 2 -> 0 of mean 10/3 beats every shorter one
    assert max_cycle_mean([[1, 4, NEG], [NEG, 2, 3], [3, NEG, 1]], exact=True) == pytest.approx(10 / 3)


def test_asap_starts_a_device_too_early():
    sched, costs = early_start_case()
    sim = simulate(sched, costs)
    assert device_spans(sim.start, sim.end, sched.device_of) == {0: 10, 1: 11}
    assert span_period(sim.start, sim.end, sched.device_of) == 11
    assert min_period(sched, costs) == 10
    timing = periodic_timing(sched, costs)
    assert timing.period == 10 and timing.start[F(0, 1)] == 4
    assert device_spans(timing.start, timing.end, sched.device_of) == {0: 10, 1: 10}
    run = repeated_simulation(sched, costs, iterations=6)
    assert run.period == 10 and run.periodic_from is not None
    assert run.first_starts[0] == (0, 3)


def test_zero_bubble_periods_at_unit_times():
    """F = B = W = 1: ZB-H2 is busy from first op to last on every device (period 3B);
    ZB-H1 keeps (S-1)(F+B-W) = S-1 idle slots on device 0 (period 3B + S - 1)."""
    for name, period in (("zb-h2", 24), ("zb-h1", 27)):
        sched = registry.generate(name, 4, 8)
        costs = slot_costs(sched, UNIT)
        assert min_period(sched, costs) == period
        assert repeated_simulation(sched, costs).period == period


def _random_costs(sched, data, comm):
    costs = slot_costs(sched, SlotDurations(1, 2, 1), comm_slots=comm)
    times = {k: data.draw(st.integers(1, 6)) for k in costs.op_time}
    return replace(costs, op_time=times)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["1f1b", "gpipe", "zb-h1", "zb-h2", "zbv", "interleaved", "dualpipev",
                          "hanayo", "chimera", "chimera-fd"]),
    shape=st.sampled_from([(2, 4), (4, 4), (4, 8), (6, 12)]),
    comm=st.integers(0, 3),
    data=st.data(),
)
def test_three_periods_agree(name, shape, comm, data):
    """Integer costs, per-stage random op times: the K-iteration simulation becomes
    periodic with the least period; the least period's timing attains it and is valid; the
    one-iteration ASAP span is never below it."""
    try:
        sched = registry.generate(name, *shape)
    except ValueError:
        return
    costs = _random_costs(sched, data, comm)
    period = _assert_periods_agree(sched, costs, 16, lambda x: pytest.approx(x, abs=1e-9))
    sim = simulate(sched, costs)
    assert span_period(sim.start, sim.end, sched.device_of) >= period - 1e-9


def _assert_periods_agree(sched, costs, iterations, approx):
    """The K-iteration run is periodic with the least period, and the least period's timing
    is valid and attains it; returns the least period."""
    period = min_period(sched, costs)
    run = repeated_simulation(sched, costs, iterations=iterations)
    assert run.periodic_from is not None
    assert run.period == approx(period)
    timing = periodic_timing(sched, costs)
    assert span_period(timing.start, timing.end, sched.device_of) == approx(period)
    _assert_valid(sched, costs, timing.start)
    return period


def _assert_valid(sched, costs, start):
    """Every device order and data dependency (with its transfer) holds in ``start`` —
    checked here independently of ``checked_span_period``, which must agree."""
    for d, order in enumerate(sched.orders):
        for a, b in itertools.pairwise(order):
            assert start[b] >= start[a] + costs.duration(a) - 1e-9
        for op in order:
            for q in data_predecessors(op, sched.num_stages(op.pipeline)):
                lag = costs.transfer(q, sched.device_of(q), d)
                assert start[op] >= start[q] + costs.duration(q) + lag - 1e-9
    end = {op: t + costs.duration(op) for op, t in start.items()}
    assert checked_span_period(sched, costs, start) == span_period(start, end, sched.device_of)


def test_checked_span_period_names_the_violation():
    sched, costs = early_start_case()
    start = dict(simulate(sched, costs).start)
    assert checked_span_period(sched, costs, start) == 11
    start[F(0, 1)] = 2.5  # before F0 of stage 0 ends at 3
    with pytest.raises(ValueError, match=r"^F0s1 starts at 2.5 before its input from F0s0 arrives at 3$"):
        checked_span_period(sched, costs, start)
    start = dict(simulate(sched, costs).start)
    start[B(0, 0)] = 5.5  # device 0 is busy with F1 until 6
    with pytest.raises(ValueError, match=r"^device 0 starts B0s0 at 5.5 before F1s0 ends at 6$"):
        checked_span_period(sched, costs, start)
    del start[B(0, 0)]
    with pytest.raises(ValueError, match="first mismatch: B0s0"):
        checked_span_period(sched, costs, start)


def test_fractional_period_repeats_every_two_iterations():
    """Chimera (a source on device 0 and one on device S-1): the critical cycle crosses two
    wrap edges, the period is 45.5 and the simulated steps alternate 46, 45."""
    sched = registry.generate("chimera", 4, 4)
    costs = slot_costs(sched, SlotDurations(1, 2), comm_slots=2)
    costs = replace(costs, op_time={(k, p, s): 1 + (4 * s + 3 * p + 2 * (k is Kind.B)) % 5
                                    for (k, p, s) in costs.op_time})
    assert min_period(sched, costs) == 45.5
    run = repeated_simulation(sched, costs, iterations=12)
    assert (run.period, run.cyclicity, run.periodic_from) == (45.5, 2, 0)
    starts = [row[0] for row in run.first_starts]
    assert [b - a for a, b in itertools.pairwise(starts)][:4] == [46, 45, 46, 45]


def test_periods_on_hardware_costs():
    """Real-valued costs (seconds): the same agreement up to rounding."""
    sched = registry.generate("zb-h2", 4, 8)
    costs = hardware_costs(sched, "mid_nw_mid_cp", "tiny_gpt")
    _assert_periods_agree(sched, costs, 12, lambda x: pytest.approx(x, rel=1e-9))


def test_periodic_timing_with_a_looser_or_too_tight_period():
    sched, costs = early_start_case()
    loose = periodic_timing(sched, costs, period=12)
    assert max(device_spans(loose.start, loose.end, sched.device_of).values()) <= 12
    _assert_valid(sched, costs, loose.start)
    with pytest.raises(ValueError, match=r"period 9\.5 is below the least period 10"):
        periodic_timing(sched, costs, period=9.5)
    with pytest.raises(ValueError, match="period must be a finite number"):
        periodic_timing(sched, costs, period=math.inf)


def test_contention_only_lengthens_the_period():
    sched = registry.generate("interleaved", 4, 8, chunks=2)
    costs = slot_costs(sched, SlotDurations(1, 2), comm_slots=2)
    free = repeated_simulation(sched, costs, iterations=10).period
    queued = repeated_simulation(sched, replace(costs, contention=True), iterations=10).period
    assert free == min_period(sched, costs) and queued >= free


def test_repeated_schedule_numbers_microbatches_per_iteration():
    sched = registry.generate("1f1b", 2, 2)
    rep = repeated_schedule(sched, 3)
    assert rep.num_microbatches == 6 and rep.params["iterations"] == 3
    assert [str(op) for op in rep.orders[1]] == [
        "F0s1", "B0s1", "F1s1", "B1s1", "F2s1", "B2s1", "F3s1", "B3s1", "F4s1", "B4s1", "F5s1", "B5s1"
    ]
    validate(layout(rep), rep)


def test_refusals(one_f_one_b_4_8):
    sched = one_f_one_b_4_8
    costs = slot_costs(sched)
    with pytest.raises(ValueError, match="iterations must be an integer >= 1, got 0"):
        repeated_simulation(sched, costs, iterations=0)
    with pytest.raises(ValueError, match="link contention"):
        min_period(sched, replace(costs, contention=True))
    replicated = replace(costs, replica_groups=(ReplicaGroup(((0, 0),), 1.0),))
    for fn in (min_period, repeated_simulation):
        with pytest.raises(ValueError, match="replicated stages"):
            fn(sched, replicated)


def test_deadlocked_orders():
    ok = registry.generate("1f1b", 2, 1)
    stuck = Schedule("stuck", ok.placement, (0,), ((F(0, 0), B(0, 0)), (B(0, 1), F(0, 1))))
    with pytest.raises(DeadlockError, match="deadlock"):
        min_period(stuck, slot_costs(stuck))


def test_one_iteration_run_reports_its_span(zb_h1_4_8):
    sched = zb_h1_4_8
    run = repeated_simulation(sched, slot_costs(sched, UNIT), iterations=1)
    assert run.period == 27 and run.periodic_from is None
    assert run.iteration_spans(0) == (27, 26, 25, 24)


def test_simulation_span_period_equals_the_dict_form():
    """The simulator's array span period and ``span_period`` over its per-op dicts agree."""
    from pipetab.schedules.registry import generate
    from pipetab.schedules.table import SlotDurations
    from pipetab.solver.pricing import slot_costs

    for name in ("1f1b", "zb-h2", "zbv", "chimera", "interleaved"):
        sched = generate(name, 4, 8)
        sim = simulate(sched, slot_costs(sched, SlotDurations(2, 3, 1), comm_slots=1))
        assert sim.span_period == span_period(sim.start, sim.end, sched.device_of)
