"""Hanayo: reference tables cell for cell, the bubble formula over its regime, memory, errors."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import formulas, registry
from pipetab.schedules.evaluate import asap
from pipetab.schedules.generators.hanayo import (
    HANAYO_REGIME,
    chunk_stage,
    hanayo,
    list_schedule_orders,
)
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.placements import PlacementFamily, family_placement
from pipetab.schedules.schedule import Schedule
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate

# Reference grids from shared/reference/schedules.md §5(d): `Fm.c` = forward of microbatch m
# on chunk c of the row's device.
P4_W1_N4 = """
dev0 |F0.0 F1.0 F2.0 F3.0 .    .    .    F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 B0.0 .    B1.0 .    B2.0 .    B3.0
dev1 |.    F0.0 F1.0 F2.0 F3.0 .    F0.1 .    F1.1 B0.1 F2.1 B1.1 F3.1 B2.1 B0.0 B3.1 B1.0 .    B2.0 .    B3.0 .
dev2 |.    .    F0.0 F1.0 F2.0 F0.1 F3.0 F1.1 .    F2.1 B0.1 F3.1 B1.1 B0.0 B2.1 B1.0 B3.1 B2.0 .    B3.0 .    .
dev3 |.    .    .    F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 B0.1 B0.0 B1.1 B1.0 B2.1 B2.0 B3.1 B3.0 .    .    .
"""

P4_W2_N4 = """
dev0 |F0.0 F1.0 F2.0 F3.0 .    .    .    F0.1 F0.2 F1.1 F1.2 F2.1 F2.2 F3.1 F3.2 F0.3 B0.3 F1.3 B1.3 F2.3 B2.3 F3.3 B3.3 B0.2 B0.1 B1.2 B1.1 B2.2 B2.1 B3.2 B3.1 B0.0 .    B1.0 .    B2.0 .    B3.0
dev1 |.    F0.0 F1.0 F2.0 F3.0 .    F0.1 .    F1.1 F0.2 F2.1 F1.2 F3.1 F2.2 F0.3 F3.2 F1.3 B0.3 F2.3 B1.3 F3.3 B2.3 B0.2 B3.3 B1.2 B0.1 B2.2 B1.1 B3.2 B2.1 B0.0 B3.1 B1.0 .    B2.0 .    B3.0 .
dev2 |.    .    F0.0 F1.0 F2.0 F0.1 F3.0 F1.1 .    F2.1 F0.2 F3.1 F1.2 F0.3 F2.2 F1.3 F3.2 F2.3 B0.3 F3.3 B1.3 B0.2 B2.3 B1.2 B3.3 B2.2 B0.1 B3.2 B1.1 B0.0 B2.1 B1.0 B3.1 B2.0 .    B3.0 .    .
dev3 |.    .    .    F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 F0.2 F0.3 F1.2 F1.3 F2.2 F2.3 F3.2 F3.3 B0.3 B0.2 B1.3 B1.2 B2.3 B2.2 B3.3 B3.2 B0.1 B0.0 B1.1 B1.0 B2.1 B2.0 B3.1 B3.0 .    .    .
"""  # noqa: E501


def parse_grid(text: str) -> list[list[str]]:
    """Rows of cells ('.' = idle) of a reference grid 'devN |c c c ...'."""
    return [line.split("|", 1)[1].split() for line in text.strip().splitlines()]


def our_grid(table, devices: int) -> list[list[str]]:
    rows = []
    for d, row in enumerate(table.grid()):
        cells = []
        for op in row:
            if op is None:
                cells.append(".")
                continue
            chunk = op.stage // devices  # chunk c of a device lies in sweep c
            assert chunk_stage(chunk, d, devices) == op.stage
            cells.append(f"{op.kind.value}{op.microbatch}.{chunk}")
        rows.append(cells)
    return rows


def bubble(stages: int, microbatches: int, waves: int) -> float:
    schedule = hanayo(stages, microbatches, waves)
    table = layout(schedule, SlotDurations(forward=1, backward=1))
    return table_metrics(table, schedule).bubble_ratio


@pytest.mark.parametrize(
    "grid, waves, makespan", [(P4_W1_N4, 1, 22), (P4_W2_N4, 2, 38)], ids=["P4-W1-N4", "P4-W2-N4"]
)
def test_reference_tables_cell_for_cell(grid, waves, makespan):
    schedule = hanayo(4, 4, waves)
    table = layout(schedule, SlotDurations(forward=1, backward=1))
    validate(table, schedule)
    assert table.makespan == makespan
    assert our_grid(table, 4) == parse_grid(grid)
    m = table_metrics(table, schedule)
    assert m.idle_slots == tuple(x * table.tick_slots for x in (6,) * 4)  # 6 ticks per device
    assert table.tick_slots == 1 / (2 * waves)
    assert m.bubble_ratio == pytest.approx(3 / (2 * waves * 4 + 3))


@pytest.mark.parametrize("devices", [2, 3, 4, 5])
@pytest.mark.parametrize("waves", [1, 2, 3, 8])
def test_wave_placement(devices, waves):
    placement = family_placement(PlacementFamily.WAVE, devices, (2 * waves * devices,))
    assert placement.num_pipelines == 1
    assert placement.num_stages() == 2 * waves * devices
    for s in range(2 * waves * devices):
        k, j = divmod(s, devices)
        assert placement.device(0, s) == (j if k % 2 == 0 else devices - 1 - j)
    for d in range(devices):
        chunks = [chunk_stage(c, d, devices) for c in range(2 * waves)]
        assert sorted(chunks) == sorted(s for _, s in placement.stages_on(d))
    # the turn-arounds stay on one device; the last stage sits on device 0
    assert placement.device(0, 2 * waves * devices - 1) == 0


def test_schedule_shape():
    s = hanayo(4, 8, waves=2)
    assert s.name == "hanayo"
    assert s.num_pipelines == 1 and s.num_stages() == 16
    assert s.microbatch2pipeline == (0,) * 8
    assert s.params == {"stages": 4, "microbatches": 8, "waves": 2}
    assert s.weight_copies() == pytest.approx([1.0] * 4)


# The formula over the regime (B a multiple of S): a sampled grid. The full sweep behind
# HANAYO_REGIME (S 2..16, W 1..4, B 1..64) is recorded in the generator's docstring.
REGIME_SAMPLE = [
    (s, w, k * s)
    for s in (2, 3, 4, 5, 7, 8, 12, 16)
    for w in (1, 2, 3, 4)
    for k in (1, 2, 3)
    if k * s <= 64 and s * w * k <= 96
] + [(2, 8, 2), (2, 1, 64), (4, 8, 4), (16, 1, 64)]


@pytest.mark.parametrize("stages, waves, microbatches", REGIME_SAMPLE)
def test_bubble_equals_formula_in_regime(stages, waves, microbatches):
    schedule = hanayo(stages, microbatches, waves)
    table = layout(schedule, SlotDurations(forward=1, backward=1))
    validate(table, schedule)
    assert table.makespan == 4 * waves * microbatches + 2 * (stages - 1)
    expected = (stages - 1) / (2 * waves * microbatches + stages - 1)
    m = table_metrics(table, schedule)
    assert m.bubble_ratio == pytest.approx(expected, abs=1e-12)
    f = formulas.hanayo(stages, microbatches, waves)
    assert f.bubble_ratio == pytest.approx(expected)
    assert m.peak_activation_share == pytest.approx(f.peak_activations)


def _greedy_makespan(stages: int, microbatches: int, waves: int) -> float:
    """Makespan of the greedy order outside the regime (the generator refuses these)."""
    s = Schedule(
        "greedy", family_placement(PlacementFamily.WAVE, stages, (2 * waves * stages,)), (0,) * microbatches,
        list_schedule_orders(stages, microbatches, waves),
    )
    return asap(s, lambda op: 1).makespan


@pytest.mark.parametrize(
    "stages, waves, microbatches",
    [(2, 1, 1), (2, 2, 3), (3, 1, 4), (4, 1, 5), (4, 2, 7), (4, 1, 63), (5, 3, 12), (8, 1, 9)],
)
def test_outside_regime_the_greedy_order_misses_the_formula(stages, waves, microbatches):
    """Why the regime is B % S == 0: otherwise the makespan exceeds 4WB + 2(S-1) by
    exactly 2(2W-1)(S - B mod S) slots (measured for S 2..16, W 1..4, B 1..64)."""
    excess = 2 * (2 * waves - 1) * (stages - microbatches % stages)
    formula_makespan = 4 * waves * microbatches + 2 * (stages - 1)
    assert _greedy_makespan(stages, microbatches, waves) == formula_makespan + excess


def test_peak_activations_ramp_at_b_equal_s_and_balance_from_2s():
    # reference §5(c): S=4, W=1, N=4 gives [2.5, 3, 3.5, 4] stage activations
    schedule = hanayo(4, 4)
    m = table_metrics(layout(schedule, SlotDurations(1, 1)), schedule)
    assert m.peak_activations == (5, 6, 7, 8)  # chunk activations of A/2 each
    assert m.peak_activation_share == pytest.approx((2.5, 3.0, 3.5, 4.0))
    assert formulas.hanayo(4, 4).peak_activations == pytest.approx((2.5, 3.0, 3.5, 4.0))
    schedule = hanayo(4, 8, waves=2)
    m = table_metrics(layout(schedule, SlotDurations(1, 1)), schedule)
    assert m.peak_activations == (16,) * 4
    assert m.peak_activation_share == pytest.approx((4.0,) * 4)
    assert formulas.hanayo(4, 8, 2).peak_activations == pytest.approx((4.0,) * 4)
    assert formulas.hanayo(4, 3).peak_activations is None


@pytest.mark.parametrize("backward", [2, 3])
def test_other_backward_lengths_validate(backward):
    """The order comes from the unit-time simulation; other slot lengths lay it out ASAP."""
    schedule = hanayo(4, 8)
    table = layout(schedule, SlotDurations(forward=1, backward=backward))
    validate(table, schedule)
    assert table_metrics(table, schedule).bubble_ratio > formulas.hanayo(4, 8).bubble_ratio


@pytest.mark.parametrize(
    "stages, microbatches, waves, message",
    [
        (4, 6, 1, r"microbatches must be a multiple of stages \(4\) for hanayo, got 6"),
        (4, 2, 1, r"microbatches must be a multiple of stages \(4\) for hanayo, got 2"),
        (4, 4, 0, "waves must be an integer from 1 to 8 for hanayo, got 0"),
        (4, 4, 9, "waves must be an integer from 1 to 8 for hanayo, got 9"),
        (4, 4, True, "waves must be an integer from 1 to 8 for hanayo, got True"),
        (4, 4, 1.0, "waves must be an integer from 1 to 8 for hanayo, got 1.0"),
        (1, 4, 1, "stages must be an integer >= 2, got 1"),
        (4, 0, 1, "microbatches must be an integer >= 1, got 0"),
    ],
)
def test_errors(stages, microbatches, waves, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        hanayo(stages, microbatches, waves)


def test_registry_entry():
    assert HANAYO_REGIME == "1 <= W <= 8, B a multiple of S"
    assert registry.spec("hanayo").regime == HANAYO_REGIME
    assert registry.generate("hanayo", 4, 8, waves=2) == hanayo(4, 8, 2)
    assert registry.generate("hanayo", 4, 8) == hanayo(4, 8, 1)
    with pytest.raises(ValueError, match="waves must be an integer from 1 to 8"):
        registry.generate("hanayo", 4, 8, waves=9)


@st.composite
def hanayo_shapes(draw):
    stages = draw(st.integers(2, 16))
    microbatches = stages * draw(st.integers(1, 64 // stages))
    waves = draw(st.integers(1, 3))
    return stages, microbatches, waves


@settings(max_examples=30, deadline=None)
@given(shape=hanayo_shapes(), backward=st.integers(1, 2))
def test_property_hanayo_tables_validate(shape, backward):
    stages, microbatches, waves = shape
    schedule = hanayo(stages, microbatches, waves)
    table = layout(schedule, SlotDurations(forward=1, backward=backward))
    validate(table, schedule)
    counts = Counter(e.op for e in table.entries)
    assert set(counts.values()) == {1}
    num_stages = 2 * waves * stages
    assert len(counts) == 2 * num_stages * microbatches
    for m in range(microbatches):
        for s in range(num_stages):
            for kind in (Kind.F, Kind.B):
                assert counts[Op(kind, 0, s, m)] == 1
    if backward == 1:
        assert table.makespan == 4 * waves * microbatches + 2 * (stages - 1)
