"""Interleaved 1F1B: the reference table cell for cell, formulas over the regime, errors."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import formulas, registry
from pipetab.schedules.generators.interleaved import (
    INTERLEAVED_REGIME,
    interleaved,
    warmup,
)
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

# shared/reference/schedules.md §3(d): D=4, v=2, N=8, one slot per chunk op; upper case =
# chunk 0 (stage d), lower case = chunk 1 (stage 4+d).
D4_V2_N8 = """
dev0 |F0  F1  F2  F3  f0  f1  f2  f3  F4  F5  F6  b0  F7  b1  .   .   f4  b2  f5  b3  f6  B0  f7  B1  B2  B3  .   b4  .   b5  .   b6  .   b7  B4  B5  B6  B7
dev1 |.   F0  F1  F2  F3  f0  f1  f2  f3  F4  b0  F5  b1  F6  b2  F7  b3  f4  B0  f5  B1  f6  B2  f7  B3  .   b4  .   b5  .   b6  .   b7  B4  B5  B6  B7  .
dev2 |.   .   F0  F1  F2  F3  f0  f1  f2  b0  f3  b1  F4  b2  F5  b3  F6  B0  F7  B1  f4  B2  f5  B3  f6  b4  f7  b5  .   b6  .   b7  B4  B5  B6  B7  .   .
dev3 |.   .   .   F0  F1  F2  F3  f0  b0  f1  b1  f2  b2  f3  b3  F4  B0  F5  B1  F6  B2  F7  B3  f4  b4  f5  b5  f6  b6  f7  b7  B4  B5  B6  B7  .   .   .
"""  # noqa: E501

UNIT = SlotDurations(1, 1, 1)


def chunk_letters(table, devices):
    """Cells as the reference writes them: the chunk's letter case, then the microbatch."""
    rows = []
    for d, row in enumerate(table.grid()):
        cells = []
        for op in row:
            if op is None:
                cells.append(".")
                continue
            chunk, dev = divmod(op.stage, devices)
            assert dev == d
            letter = op.kind.value if chunk == 0 else op.kind.value.lower()
            assert chunk in (0, 1)
            cells.append(f"{letter}{op.microbatch}")
        rows.append(cells)
    return rows


def test_reference_table_cell_for_cell(reference_grid):
    schedule = interleaved(4, 8, chunks=2)
    table = layout(schedule, UNIT)
    validate(table, schedule)
    assert table.makespan == 38
    assert chunk_letters(table, 4) == reference_grid(D4_V2_N8)
    m = table_metrics(table, schedule)
    assert table.tick_slots == 0.5 and m.idle_slots == (3,) * 4  # 6 ticks of half a slot
    assert m.bubble_ratio == pytest.approx(3 / 19)
    assert m.peak_activations == (11, 9, 7, 5)  # chunk activations (torch liveness slots)
    f = formulas.interleaved(4, 8, 2)
    assert f.bubble_ratio == pytest.approx(3 / 19)
    assert m.peak_activation_share == pytest.approx(f.peak_activations) == (5.5, 4.5, 3.5, 2.5)
    assert m.weight_copies == pytest.approx((1.0,) * 4) == f.weight_copies


def test_placement_and_shape():
    s = interleaved(4, 8, chunks=3)
    assert s.placement.stage2device == ((0, 1, 2, 3) * 3,)
    assert s.num_stages() == 12 and s.name == "interleaved"
    assert s.stage_work == ((1.0,) * 12,)
    assert not s.split_backward
    assert s.params == {"stages": 4, "microbatches": 8, "chunks": 3}
    for d in range(4):
        assert [st for _, st in s.placement.stages_on(d)] == [d, 4 + d, 8 + d]
        assert warmup(4, 8, 3, d) == 2 * 4 + 2 * (3 - d)
        assert sum(1 for op in s.orders[d][: warmup(4, 8, 3, d)] if op.kind is Kind.F) == warmup(4, 8, 3, d)


REGIME_SAMPLE = [
    (s, v, k * s)
    for s in (2, 3, 4, 5, 8, 16)
    for v in (2, 3, 4)
    for k in (1, 2, 3)
    if k * s <= 64
] + [(2, 16, 2), (4, 2, 64), (7, 5, 63)]


@pytest.mark.parametrize("stages, chunks, microbatches", REGIME_SAMPLE)
def test_bubble_and_peaks_equal_formula_in_regime(stages, chunks, microbatches):
    schedule = interleaved(stages, microbatches, chunks)
    table = layout(schedule, UNIT)
    validate(table, schedule)
    assert table.makespan == 2 * chunks * microbatches + 2 * (stages - 1)
    m = table_metrics(table, schedule)
    f = formulas.interleaved(stages, microbatches, chunks)
    assert m.bubble_ratio == pytest.approx(f.bubble_ratio, abs=1e-12)
    assert f.bubble_ratio == pytest.approx((stages - 1) / (chunks * microbatches + stages - 1))
    assert m.peak_activation_share == pytest.approx(f.peak_activations)
    if microbatches > stages:  # the reference's ((v-1)D + 2(D-1-d) + 1)/v
        assert f.peak_activations == pytest.approx(
            [((chunks - 1) * stages + 2 * (stages - 1 - d) + 1) / chunks for d in range(stages)]
        )


def test_peak_capped_at_b_equal_s():
    # B = S: device 0's warm-up would exceed vB, so it holds all of them
    m = table_metrics(layout(interleaved(4, 4), UNIT), interleaved(4, 4))
    assert m.peak_activations == (8, 8, 7, 5)
    assert formulas.interleaved(4, 4).peak_activations == (4.0, 4.0, 3.5, 2.5)


@pytest.mark.parametrize("forward, backward", [(1, 2), (1, 3), (2, 3), (3, 1)])
@pytest.mark.parametrize("stages, microbatches, chunks", [(4, 8, 2), (4, 16, 3), (8, 16, 2), (5, 10, 4)])
def test_bubble_formula_holds_for_any_slot_lengths(forward, backward, stages, microbatches, chunks):
    """Megatron's (S-1)(T_F+T_B)/v bubble per device holds for unequal chunk-op lengths too:
    makespan (vB + S - 1)(F + K)."""
    schedule = interleaved(stages, microbatches, chunks)
    table = layout(schedule, SlotDurations(forward, backward))
    validate(table, schedule)
    assert table.makespan == (chunks * microbatches + stages - 1) * (forward + backward)
    m = table_metrics(table, schedule)
    assert m.bubble_ratio == pytest.approx(formulas.interleaved(stages, microbatches, chunks).bubble_ratio)


@pytest.mark.parametrize(
    "stages, microbatches, chunks, message",
    [
        (4, 6, 2, r"microbatches must be a multiple of stages \(4\) for interleaved, got 6"),
        (4, 2, 2, r"microbatches must be a multiple of stages \(4\) for interleaved, got 2"),
        (4, 4, 1, "chunks must be an integer from 2 to 16 for interleaved, got 1"),
        (4, 4, 17, "chunks must be an integer from 2 to 16 for interleaved, got 17"),
        (4, 4, True, "chunks must be an integer from 2 to 16 for interleaved, got True"),
        (4, 4, 2.0, "chunks must be an integer from 2 to 16 for interleaved, got 2.0"),
        (1, 4, 2, "stages must be an integer >= 2, got 1"),
        (4, 0, 2, "microbatches must be an integer >= 1, got 0"),
    ],
)
def test_errors(stages, microbatches, chunks, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        interleaved(stages, microbatches, chunks)


def test_registry_entry():
    assert INTERLEAVED_REGIME == "2 <= v <= 16, B a multiple of S"
    entry = registry.spec("interleaved")
    assert entry.regime == INTERLEAVED_REGIME
    assert [(o.name, o.flag, o.default) for o in entry.options] == [("chunks", "chunks", 2),
                                                                    ("overlap", "overlap-pairs", False)]
    assert registry.generate("interleaved", 4, 8) == interleaved(4, 8, 2)
    assert registry.generate("interleaved", 4, 8, chunks=3) == interleaved(4, 8, 3)
    assert registry.formula("interleaved", 4, 8, chunks=3) == formulas.interleaved(4, 8, 3)
    with pytest.raises(ValueError, match="chunks must be an integer from 2 to 16"):
        registry.generate("interleaved", 4, 8, chunks=1)
    with pytest.raises(ValueError, match="takes no option 'waves'"):
        registry.generate("interleaved", 4, 8, waves=2)


@st.composite
def shapes(draw):
    stages = draw(st.integers(2, 16))
    microbatches = stages * draw(st.integers(1, 64 // stages))
    chunks = draw(st.integers(2, 4))
    return stages, microbatches, chunks


@settings(max_examples=25, deadline=None)
@given(shape=shapes(), backward=st.integers(1, 2))
def test_property_tables_validate(shape, backward):
    stages, microbatches, chunks = shape
    schedule = interleaved(stages, microbatches, chunks)
    slots = SlotDurations(1, backward, 1)
    table = layout(schedule, slots)
    validate(table, schedule)
    counts = Counter(e.op for e in table.entries)
    assert set(counts.values()) == {1}
    assert len(counts) == 2 * chunks * stages * microbatches
    for m in range(microbatches):
        for s in range(chunks * stages):
            for kind in (Kind.F, Kind.B):
                assert counts[Op(kind, 0, s, m)] == 1
    assert simulate(schedule, slot_costs(schedule, slots)).makespan == table.makespan
    if backward == 1:
        assert table.makespan == 2 * chunks * microbatches + 2 * (stages - 1)
