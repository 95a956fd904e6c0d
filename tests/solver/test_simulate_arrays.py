"""The array simulator against the plain per-op reference (tests/reference_core.py) on every
generator: slot costs with messages, link contention, weight memory, and hardware costs in
seconds (replica all-reduces, optimizer steps) -- with both kernels and the rounds handing
over to the loop part way. Equality is exact: the two do the same additions and maxima."""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from reference_core import KERNELS, cases, kernel, ref_simulation

from pipetab.schedules.table import SlotDurations
from pipetab.solver.pricing import hardware_costs, slot_costs
from pipetab.solver.simulate import simulate
from pipetab.solver.trace import chrome_trace


def _assert_same(sim, ref):
    assert sim.start == ref["start"] and sim.end == ref["end"]
    got = {(t.op, t.consumer): (t.start, t.end) for t in sim.transfers}
    assert got == ref["transfers"]
    assert sim.allreduces == ref["allreduces"] and sim.optimizer == ref["optimizer"]
    assert sim.busy == ref["busy"]
    assert sim.peak_activation == ref["peak_activation"]
    for d in range(sim.schedule.num_devices):
        assert sim.memory_timeline(d) == ref["timelines"][d]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(schedule=cases(), comm=st.integers(0, 3), contention=st.booleans(),
       fraction=st.sampled_from([1.0, 0.5, 0.0]), mode=st.sampled_from(KERNELS), stretch=st.integers(1, 4))
def test_slot_cost_simulation_equals_the_reference(schedule, comm, contention, fraction, mode, stretch):
    costs = replace(slot_costs(schedule, SlotDurations(1, 2), comm_slots=comm, weight_memory=fraction),
                    contention=contention)
    with kernel(mode, stretch):
        sim = simulate(schedule, costs)
    _assert_same(sim, ref_simulation(schedule, costs))
    if not comm:  # no messages: the simulation is the table
        table = sim.table()
        assert {e.op: (e.start, e.end) for e in table.entries} == {
            op: (sim.start[op], sim.end[op]) for op in sim.start}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])  # 14 schedules
@given(schedule=cases(max_stages=8, max_microbatches=32), contention=st.booleans(), mode=st.sampled_from(KERNELS),
       stretch=st.integers(1, 4), system=st.sampled_from(["mid_nw_mid_cp", "slow_nw_fast_cp", "a100_cluster"]))
def test_hardware_simulation_equals_the_reference(schedule, contention, mode, stretch, system):
    assume(512 % schedule.num_microbatches == 0)  # paper_gpt's global batch splits evenly
    costs = hardware_costs(schedule, system, "paper_gpt", contention=contention)
    with kernel(mode, stretch):
        sim = simulate(schedule, costs)
    _assert_same(sim, ref_simulation(schedule, costs))
    trace = chrome_trace(sim)["traceEvents"]
    assert sum(e.get("cat") == "send" for e in trace) == len(sim.transfers)
    ops = [e for e in trace if e.get("pid") == 0 and e["ph"] == "X" and e["name"] != "optimizer"]
    assert {(e["name"], e["tid"], e["ts"], e["dur"]) for e in ops} == {
        (str(op), sim.schedule.device_of(op), s * 1e6, (sim.end[op] - s) * 1e6) for op, s in sim.start.items()}
