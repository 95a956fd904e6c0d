"""chimera-fd (Chimera with forward doubling): the reference table cell for cell, the
microbatch split, bubble against the formula, peak activations, errors, properties."""

from __future__ import annotations

from fractions import Fraction

import pytest
from conftest import assert_every_op_once, grid_cells, parse_reference_grid
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import formulas, registry
from pipetab.schedules.generators.chimera import (
    CHIMERA_FD_REGIME,
    chimera,
    chimera_forward_doubling,
)
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate

# shared/reference/schedules.md §4(d), "Forward doubling D=4, N=8, T_F=1, T_B=2 — makespan 27".
# Device 0 (first stage of the down pipeline) starts F0 F1 F2 F3 and device 3 (first stage of
# the up pipeline) F4 F5 F6 F7: microbatches 0-3 go down, 4-7 up.
FD_D4_N8_B2 = """
dev0 |F0  F1  F2  F3  F4  F5  B4  B4  F6  F7  B5  B5  .   B0  B0  B6  B6  B1  B1  B7  B7  B2  B2  .   .   B3  B3
dev1 |.   F0  F1  F4  F5  F2  F3  F6  F7  B4  B4  B0  B0  B5  B5  B1  B1  B6  B6  B2  B2  B7  B7  B3  B3  .   .
dev2 |.   F4  F5  F0  F1  F6  F7  F2  F3  B0  B0  B4  B4  B1  B1  B5  B5  B2  B2  B6  B6  B3  B3  B7  B7  .   .
dev3 |F4  F5  F6  F7  F0  F1  B0  B0  F2  F3  B1  B1  .   B4  B4  B2  B2  B5  B5  B3  B3  B6  B6  .   .   B7  B7
"""


def assert_devices_hold_their_stages(table, schedule) -> None:
    """A reference cell implies the stage: the one the row's device holds in the op's pipeline."""
    for e in table.entries:
        assert schedule.placement.device(e.op.pipeline, e.op.stage) == e.device


def test_reference_table_cell_for_cell():
    schedule = chimera_forward_doubling(4, 8)
    table = layout(schedule, SlotDurations(forward=1, backward=2))
    validate(table, schedule)
    assert table.makespan == 27
    assert grid_cells(table) == parse_reference_grid(FD_D4_N8_B2)
    assert_devices_hold_their_stages(table, schedule)
    m = table_metrics(table, schedule)
    assert m.idle_slots == (3, 3, 3, 3)  # (D/2-1)(T_F+T_B)
    assert m.bubble_ratio == pytest.approx(3 / 27)
    assert m.peak_activations == (7, 8, 8, 7)
    assert m.weight_copies == (2.0,) * 4


def test_placement_and_microbatch_split():
    s = chimera_forward_doubling(4, 16)
    assert s.name == "chimera-fd"
    assert s.params == {"stages": 4, "microbatches": 16}
    assert s.placement == chimera(4, 16).placement
    # units of 2S = 8: the first S of each unit go down, the next S up
    assert s.microbatch2pipeline == (0,) * 4 + (1,) * 4 + (0,) * 4 + (1,) * 4


def test_device_orders_d4_n16():
    """The rule of the reference (§4(a), forward doubling) on D=4, two units: device 0
    (a=2, b=0) and device 1 (a=1, b=1); in unit 1 step 1 is a x [B(own), F(own), F(own)]."""
    s = chimera_forward_doubling(4, 16)

    def text(order):
        return " ".join(f"{op.kind.value}{op.microbatch}" for op in order)

    assert text(s.orders[0]) == (
        "F0 F1 F2 F3 F4 F5 B4 F6 F7 B5 B0 B6 B1 B7 "  # unit 0, steps 1, 3, 4 (x b+H = 2)
        "B2 F8 F9 B3 F10 F11 F12 F13 B12 F14 F15 B13 B8 B14 B9 B15 "  # unit 1
        "B10 B11"  # step 5 of the last unit
    )
    assert text(s.orders[1]) == (
        "F0 F1 F4 F5 F2 F3 F6 F7 B4 B0 B5 B1 B6 B2 B7 "
        "B3 F8 F9 F12 F13 F10 F11 F14 F15 B12 B8 B13 B9 B14 B10 B15 "
        "B11"
    )


def test_each_device_does_s_forwards_and_backwards_per_pipeline_and_unit():
    S, B = 8, 48
    s = chimera_forward_doubling(S, B)
    for order in s.orders:
        for kind in (Kind.F, Kind.B):
            for p in (0, 1):
                mbs = [op.microbatch for op in order if op.kind is kind and op.pipeline == p]
                assert mbs == sorted(mbs) and len(mbs) == B // 2


@pytest.mark.parametrize("stages", [4, 6, 8, 12, 16])
@pytest.mark.parametrize("units", [1, 2, 4, 8])
def test_bubble_equals_formula_backward_twice_forward(stages, units):
    """K=2 (T_B = 2 T_F): forward doubling has no intermediate bubbles; every device idles
    (S/2-1)(T_F+T_B) = 3(S/2-1) slots and the table's bubble is exactly (S-2)/(2B+S-2)."""
    microbatches = 2 * stages * units
    schedule = chimera_forward_doubling(stages, microbatches)
    table = layout(schedule, SlotDurations(forward=1, backward=2))
    validate(table, schedule)
    m = table_metrics(table, schedule)
    assert m.idle_slots == (3 * (stages // 2 - 1),) * stages
    assert table.makespan == 3 * microbatches + 3 * (stages // 2 - 1)
    expected = Fraction(stages - 2, 2 * microbatches + stages - 2)
    assert Fraction(sum(m.idle_slots), stages * table.makespan) == expected
    assert m.bubble_ratio == pytest.approx(float(expected), abs=1e-12)
    assert formulas.chimera_fd(stages, microbatches).bubble_ratio == pytest.approx(float(expected))


def _exact(stages, microbatches, forward, backward):
    schedule = chimera_forward_doubling(stages, microbatches)
    table = layout(schedule, SlotDurations(forward, backward))
    idle = table.makespan - microbatches * (forward + backward)  # per device, all equal
    return Fraction(idle, table.makespan) == Fraction(stages - 2, 2 * microbatches + stages - 2)


@pytest.mark.parametrize("stages", [4, 8])
@pytest.mark.parametrize(
    "forward, backward, one_unit, more_units",
    [
        (1, 1, True, True),
        (1, 2, True, True),
        (2, 3, True, True),
        (2, 4, True, True),
        (3, 6, True, True),
        (1, 3, True, False),  # T_B = 3 T_F: exact for one unit only
        (2, 6, True, False),
        (1, 4, False, False),
        (2, 1, False, False),  # T_B < T_F
    ],
)
def test_where_the_formula_is_exact(stages, forward, backward, one_unit, more_units):
    """Measured: exact for T_F <= T_B <= 2 T_F at any B; for one unit (B = 2S) also up to
    T_B = 3 T_F; not exact for T_B < T_F or T_B > 3 T_F."""
    assert _exact(stages, 2 * stages, forward, backward) is one_unit
    assert _exact(stages, 6 * stages, forward, backward) is more_units


def test_bubble_s8_b16_below_direct_concatenation():
    """S=8, B=16, K=2: forward doubling 9 of 57 slots idle per device (15.8 % = 3/19, the
    formula); direct concatenation (plain chimera) 18 of 66 (27.3 %)."""
    fd = chimera_forward_doubling(8, 16)
    t = layout(fd, SlotDurations(1, 2))
    assert t.makespan == 57
    assert table_metrics(t, fd).bubble_ratio == pytest.approx(3 / 19)
    plain = chimera(8, 16)
    assert table_metrics(layout(plain, SlotDurations(1, 2)), plain).bubble_ratio == pytest.approx(3 / 11)


@pytest.mark.parametrize("stages", [2, 4, 6, 8, 12, 16])
@pytest.mark.parametrize("units", [1, 3])
@pytest.mark.parametrize("backward", [1, 2, 3])
def test_peak_activations(stages, units, backward):
    """3S/2 + 1 + min(d, S-1-d): S more than plain Chimera on every device (2S in the middle,
    about twice), whatever the number of units and the slot lengths."""
    microbatches = 2 * stages * units
    schedule = chimera_forward_doubling(stages, microbatches)
    m = table_metrics(layout(schedule, SlotDurations(1, backward)), schedule)
    half = stages // 2
    expected = tuple(3 * half + 1 + min(d, stages - 1 - d) for d in range(stages))
    assert m.peak_activations == expected
    assert formulas.chimera_fd(stages, microbatches).peak_activations == tuple(map(float, expected))
    plain = chimera(stages, microbatches)
    plain_peak = table_metrics(layout(plain, SlotDurations(1, backward)), plain).peak_activations
    assert tuple(x - y for x, y in zip(m.peak_activations, plain_peak)) == (stages,) * stages
    assert formulas.chimera_fd(stages, microbatches).weight_copies == (2.0,) * stages


@pytest.mark.parametrize(
    "stages, microbatches, message",
    [
        (5, 20, "stages must be even for chimera-fd, got 5"),
        (4, 6, r"microbatches must be a multiple of 2\*stages \(8\) for chimera-fd, got 6"),
        (4, 4, r"microbatches must be a multiple of 2\*stages \(8\) for chimera-fd, got 4"),
        (4, 12, r"microbatches must be a multiple of 2\*stages \(8\) for chimera-fd, got 12"),
        (1, 4, "stages must be an integer >= 2, got 1"),
        (4, 0, "microbatches must be an integer >= 1, got 0"),
    ],
)
def test_errors(stages, microbatches, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        chimera_forward_doubling(stages, microbatches)


def test_registry_entry():
    entry = registry.spec("chimera-fd")
    assert entry.regime == CHIMERA_FD_REGIME == "S even, B a multiple of 2S"
    assert "2x activation memory" in entry.summary
    assert entry.options == ()
    assert registry.generate("chimera-fd", 4, 8) == chimera_forward_doubling(4, 8)
    f = registry.formula("chimera-fd", 8, 16)
    assert f.bubble_ratio == pytest.approx(3 / 19)
    with pytest.raises(ValueError, match=r"multiple of 2\*stages \(8\) for chimera-fd, got 4"):
        registry.generate("chimera-fd", 4, 4)


@st.composite
def fd_shapes(draw):
    stages = 2 * draw(st.integers(1, 8))
    microbatches = 2 * stages * draw(st.integers(1, 64 // (2 * stages)))
    return stages, microbatches


@settings(max_examples=30, deadline=None)
@given(shape=fd_shapes(), forward=st.integers(1, 2), backward=st.integers(1, 4))
def test_property_tables_validate(shape, forward, backward):
    stages, microbatches = shape
    schedule = chimera_forward_doubling(stages, microbatches)
    table = layout(schedule, SlotDurations(forward=forward, backward=backward))
    validate(table, schedule)
    assert_every_op_once(table, schedule)
