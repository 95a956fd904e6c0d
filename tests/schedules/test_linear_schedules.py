"""GPipe and 1F1B: worked tables, published formulas, memory."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import registry
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate

GPIPE_4x4 = """
t    |0   1   2   3   4   5   6   7   8   9   10  11  12  13
dev0 |F0  F1  F2  F3  .   .   .   .   .   .   B0  B1  B2  B3
dev1 |.   F0  F1  F2  F3  .   .   .   .   B0  B1  B2  B3  .
dev2 |.   .   F0  F1  F2  F3  .   .   B0  B1  B2  B3  .   .
dev3 |.   .   .   F0  F1  F2  F3  B0  B1  B2  B3  .   .   .
"""

ONE_F_ONE_B_4x8 = """
t    |0   1   2   3   4   5   6   7   8   9   10  11  12  13  14  15  16  17  18  19  20  21
dev0 |F0  F1  F2  F3  .   .   .   B0  F4  B1  F5  B2  F6  B3  F7  B4  .   B5  .   B6  .   B7
dev1 |.   F0  F1  F2  .   .   B0  F3  B1  F4  B2  F5  B3  F6  B4  F7  B5  .   B6  .   B7  .
dev2 |.   .   F0  F1  .   B0  F2  B1  F3  B2  F4  B3  F5  B4  F6  B5  F7  B6  .   B7  .   .
dev3 |.   .   .   F0  B0  F1  B1  F2  B2  F3  B3  F4  B4  F5  B5  F6  B6  F7  B7  .   .   .
"""


def test_gpipe_worked_table(reference_grid, cells):
    table = layout(registry.generate("gpipe", 4, 4), SlotDurations(1, 1))
    assert cells(table) == reference_grid(GPIPE_4x4)


def test_1f1b_worked_table(reference_grid, cells):
    table = layout(registry.generate("1f1b", 4, 8), SlotDurations(1, 1))
    assert cells(table) == reference_grid(ONE_F_ONE_B_4x8)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S,B", [(2, 1), (4, 3), (4, 8), (8, 16), (5, 7)])
@pytest.mark.parametrize("F,K", [(1, 1), (1, 2), (2, 3), (3, 1)])
def test_makespan_and_bubble_formula(name, S, B, F, K):
    schedule = registry.generate(name, S, B)
    table = layout(schedule, SlotDurations(F, K))
    m = table_metrics(table, schedule)
    assert m.makespan_slots == (B + S - 1) * (F + K)
    assert m.bubble_ratio == pytest.approx((S - 1) / (B + S - 1))
    assert registry.formula(name, S, B).bubble_ratio == pytest.approx(m.bubble_ratio)


@pytest.mark.parametrize("S,B", [(4, 8), (8, 3), (6, 6)])
def test_peak_activations(S, B):
    f1 = table_metrics(layout(registry.generate("1f1b", S, B)), None)
    assert list(f1.peak_activations) == [min(S - d, B) for d in range(S)]
    gp = table_metrics(layout(registry.generate("gpipe", S, B)), None)
    assert list(gp.peak_activations) == [B] * S
    assert list(registry.formula("1f1b", S, B).peak_activations) == [min(S - d, B) for d in range(S)]


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b"]), S=st.integers(2, 16), B=st.integers(1, 64))
def test_property_valid_and_complete(name, S, B):
    schedule = registry.generate(name, S, B)
    table = layout(schedule)
    validate(table, schedule)
    seen = {}
    for e in table.entries:
        seen[e.op] = seen.get(e.op, 0) + 1
    assert all(v == 1 for v in seen.values())
    assert len(seen) == 2 * S * B


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_one_stage_is_gradient_accumulation(name):
    # no pipeline: one device runs every microbatch's F and B; 1F1B alternates them, GPipe
    # runs the forwards first (and keeps all activations)
    sched = registry.generate(name, 1, 3)
    table = layout(sched, SlotDurations(1, 2))
    validate(table, sched)
    assert table.makespan == 9 and table_metrics(table).bubble_ratio == 0
    expected = "F0 B0 F1 B1 F2 B2" if name == "1f1b" else "F0 F1 F2 B0 B1 B2"
    assert " ".join(f"{op.kind}{op.microbatch}" for op in sched.orders[0]) == expected
    assert registry.formula(name, 1, 3).peak_activations == ((1.0,) if name == "1f1b" else (3.0,))


def test_one_stage_simulates_and_cpsat_agrees():
    from pipetab.solver.cpsat import CpSatConfig, evaluate
    from pipetab.solver.pricing import hardware_costs
    from pipetab.solver.simulate import simulate

    sched = registry.generate("1f1b", 1, 4)
    costs = hardware_costs(sched, "dgx_h100_ib", "tiny_gpt")
    sim = simulate(sched, costs)
    per = costs.op_time[(Kind.F, 0, 0)] + costs.op_time[(Kind.B, 0, 0)]
    assert sim.makespan == pytest.approx(4 * per + costs.optimizer_time[0])
    quantized = costs.quantized(costs.default_tick(1000))
    assert evaluate(sched, quantized, CpSatConfig(time_limit_s=10)).makespan == simulate(sched, quantized).makespan
    with pytest.raises(ValueError, match="stages must be an integer >= 2, got 1"):
        registry.generate("zb-h1", 1, 4)
