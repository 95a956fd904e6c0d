"""DualPipeV: the reference table (op order per device; cell for cell under DualPipe's own
timing rules), formulas, memory, W placement, errors.

pipetab splits every backward into B and W. A DualPipe "full" backward (2 slots in the
reference table, written ``b3 b3``) is our B immediately followed by its W (``b3 w3``); a
B* (1 slot) is our B alone, its W later where the step loop pops it. The reference times a
full backward as one 2-slot op and starts an overlapped pair F&B only when the inputs of
both are there; ``dualpipe_timing`` below lays our orders out under those two rules.
"""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import grid_cells, v_label
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import formulas, registry
from pipetab.schedules.generators.dualpipe import (
    DUALPIPEV_REGIME,
    dualpipev,
    full_backwards,
    overlapped_pairs,
)
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind, Op, data_predecessors
from pipetab.schedules.table import PlacedOp, SlotDurations, Table, layout
from pipetab.schedules.validate import validate
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

UNIT = SlotDurations(1, 1, 1)

# shared/reference/schedules.md §8(d): DualPipeV, 4 ranks / 8 stages, N=8; upper = stage r,
# lower = stage 7-r; F=1, B*=W=1, full B=2 (two cells); `*` = cell of an overlapped pair.
DUALPIPEV_R4_N8 = """
dev0 |F0  F1  F2  F3  F4  F5  F6  f0  b0  w0  f1  b1  w1  f2  b2  w2  f3  F7* b3* b3* .   .   .   f4* B0* B0* b4  b4  .   f5* B1* B1* b5  b5  .   f6* B2* B2* b6  b6  .   f7* B3* B3* b7  b7  B4  W4  B5  W5  B6  W6  B7  W7
dev1 |.   F0  F1  F2  F3  F4  f0  F5  f1  b0  w0  f2  b1  w1  f3  F6* b2* b2* .   .   f4* B0* B0* F7* b3* b3* f5* B1* B1* b4  b4  .   f6* B2* B2* b5  b5  .   f7* B3* B3* b6  b6  B4  B4  .   b7  B5  w7  B6  W5  B7  W6  W7
dev2 |.   .   F0  F1  F2  f0  F3  f1  F4  f2  b0  w0  f3  F5* b1* b1* .   f4* B0* B0* F6* b2* b2* f5* B1* B1* F7* b3* b3* f6* B2* B2* b4  b4  .   f7* B3* B3* b5  b5  B4  B4  .   b6  b6  B5  .   b7  B6  W5  B7  w7  W6  W7
dev3 |.   .   .   F0  f0  F1  f1  F2  f2  F3  f3  F4  b0  b0  f4* B0* B0* F5* b1* b1* f5* B1* B1* F6* b2* b2* f6* B2* B2* F7* b3* b3* f7* B3* B3* b4  b4  B4  B4  .   b5  b5  B5  B5  .   b6  B6  .   b7  B7  w6  W6  w7  W7
"""  # noqa: E501


def reference_in_our_ops(reference_grid) -> list[list[str]]:
    """The reference cells with '*' dropped and each full backward's second cell written
    as its W (``b3 b3`` -> ``b3 w3``)."""
    rows = []
    for row in reference_grid(DUALPIPEV_R4_N8):
        row = [c.rstrip("*") for c in row]
        out = []
        for i, c in enumerate(row):
            if i and c != "." and c[0] in "Bb" and c == row[i - 1] and out[-1] == c:
                c = ("W" if c[0] == "B" else "w") + c[1:]
            out.append(c)
        rows.append(out)
    return rows


def order_letters(schedule, devices) -> list[list[str]]:
    return [
        [f"{op.kind.value if op.stage == d else op.kind.value.lower()}{op.microbatch}" for op in order]
        for d, order in enumerate(schedule.orders)
    ]


def dualpipe_timing(schedule, full, pairs) -> Table:
    """Lay the orders out (one slot per op) under DualPipe's rules: a full backward's input
    gradient leaves only after its W, and a pair's forward starts only once its backward's
    input is there too."""
    n = schedule.num_stages()
    pair_backward = dict(pairs)
    end: dict[Op, int] = {}

    def ready(op, ops):
        t = 0
        for x in ops:
            for q in data_predecessors(x, n):
                if q not in end:
                    return None
                t = max(t, end[q] + (1 if q in full and x.kind is Kind.B else 0))
        return t

    heads = [0] * schedule.num_devices
    free = [0] * schedule.num_devices
    start: dict[Op, int] = {}
    moved = True
    while moved:
        moved = False
        for d, order in enumerate(schedule.orders):
            while heads[d] < len(order):
                op = order[heads[d]]
                t = ready(op, (op, pair_backward[op]) if op in pair_backward else (op,))
                if t is None:
                    break
                start[op] = max(t, free[d])
                end[op] = free[d] = start[op] + 1
                heads[d] += 1
                moved = True
    assert len(start) == schedule.num_ops, "orders deadlock under DualPipe timing"
    return Table(schedule.num_devices, tuple(PlacedOp(op, schedule.device_of(op), t, 1) for op, t in start.items()))


def test_reference_op_order_per_device(reference_grid):
    schedule = dualpipev(4, 8)
    ref = reference_in_our_ops(reference_grid)
    assert order_letters(schedule, 4) == [[c for c in row if c != "."] for row in ref]


def test_reference_table_cell_for_cell_under_dualpipe_timing(reference_grid):
    schedule = dualpipev(4, 8)
    table = dualpipe_timing(schedule, full_backwards(4, 8), overlapped_pairs(4, 8))
    validate(table, schedule)
    assert table.makespan == 54
    assert grid_cells(table, v_label(4)) == reference_in_our_ops(reference_grid)
    m = table_metrics(table, schedule)
    assert m.idle_slots == (6,) * 4  # (PP/2-1)(F&B+B-3W) = 3 * (3+2-3)
    assert m.bubble_ratio == pytest.approx(formulas.dualpipev(4, 8).bubble_ratio) == pytest.approx(6 / 54)
    assert m.peak_activations == (9,) * 4  # PP+1 (torch liveness: 9)


def test_blocks_give_dualpipe_timing_op_for_op():
    """pipetab's own table of dualpipev (full backwards and overlapped pairs as blocks)
    equals ``dualpipe_timing``, written independently above, op for op."""
    for stages, microbatches in ((4, 8), (3, 7 + 3), (5, 13), (8, 16)):
        schedule = dualpipev(stages, microbatches)
        ours = layout(schedule, UNIT)
        validate(ours, schedule)
        theirs = dualpipe_timing(schedule, full_backwards(stages, microbatches),
                                 overlapped_pairs(stages, microbatches))
        starts = {e.op: e.start for e in theirs.entries}
        ends = {e.op: e.end for e in theirs.entries}
        for e in ours.entries:  # ours: a block's ops share its slots; theirs: one slot each
            block = next((b for b in schedule.blocks if e.op in b), (e.op,))
            assert e.start == starts[block[0]] and e.end == ends[block[-1]], e.op


def test_serial_pairs_table_is_shorter_than_dualpipe_timing():
    """Without overlap the pairs are plain ops: a pair's F does not wait for its B's input,
    so 3 idle slots per device instead of 6."""
    schedule = dualpipev(4, 8, overlap=False)
    assert schedule.params["overlap"] is False
    table = layout(schedule, UNIT)
    validate(table, schedule)
    assert table.makespan == 51
    m = table_metrics(table, schedule)
    assert table.tick_slots == 0.5 and m.idle_slots == (1.5,) * 4  # 3 ticks of half a slot
    assert m.peak_activations == (9,) * 4
    assert m.peak_activation_share == pytest.approx((4.5,) * 4)
    assert m.bubble_ratio < formulas.dualpipev(4, 8).bubble_ratio


def test_full_backwards_and_pairs():
    schedule = dualpipev(4, 8)
    full = full_backwards(4, 8)
    for d, order in enumerate(schedule.orders):
        pos = {op: i for i, op in enumerate(order)}
        for op in order:
            if op in full:  # its own W right after it
                assert order[pos[op] + 1] == Op(Kind.W, 0, op.stage, op.microbatch)
    pairs = overlapped_pairs(4, 8)
    # step 4 has B-2S+r+1 iterations of two pairs, step 5 S-r-1 of one; the last device
    # runs the first pair of its step 4 one op after the other (the reference's choice)
    assert len(pairs) == sum(2 * (8 - 8 + r + 1) + (4 - r - 1) for r in range(4)) - 1
    for f, b in pairs:
        assert f.kind is Kind.F and b.kind is Kind.B and b in full
        order = schedule.orders[schedule.device_of(f)]
        assert order[order.index(f) + 1] == b


def test_shape():
    s = dualpipev(4, 8)
    assert s.name == "dualpipev" and s.split_backward
    assert s.placement.stage2device == ((0, 1, 2, 3, 3, 2, 1, 0),)
    assert s.params == {"stages": 4, "microbatches": 8}
    assert s.weight_copies() == pytest.approx([1.0] * 4)


SAMPLE = [(s, b) for s in (2, 3, 4, 5, 8, 16) for b in (2 * s, 2 * s + 1, 3 * s, 64) if b <= 64]


@pytest.mark.slow
@pytest.mark.parametrize("stages, microbatches", SAMPLE)
def test_formula(stages, microbatches):
    schedule = dualpipev(stages, microbatches)
    f = formulas.dualpipev(stages, microbatches)
    # DeepSeek's bubble is exact under DualPipe's timing rules
    dp = dualpipe_timing(schedule, full_backwards(stages, microbatches), overlapped_pairs(stages, microbatches))
    validate(dp, schedule)
    assert dp.makespan == 6 * microbatches + 2 * (stages - 1)
    assert table_metrics(dp, schedule).bubble_ratio == pytest.approx(f.bubble_ratio, abs=1e-12)
    assert layout(schedule, UNIT).makespan == dp.makespan
    # pairs run one op after the other: S-1 idle slots per device
    table = layout(dualpipev(stages, microbatches, overlap=False), UNIT)
    m = table_metrics(table, schedule)
    assert table.makespan == 6 * microbatches + stages - 1
    assert m.bubble_ratio == pytest.approx((stages - 1) / (6 * microbatches + stages - 1))
    assert m.bubble_ratio == pytest.approx(formulas.dualpipev(stages, microbatches, overlap=False).bubble_ratio)
    # PP+1 = 2S+1 chunk activations on every device, in both timings
    assert m.peak_activations == (2 * stages + 1,) * stages
    assert table_metrics(dp, schedule).peak_activations == (2 * stages + 1,) * stages
    assert m.peak_activation_share == pytest.approx(f.peak_activations)
    assert f.weight_copies == pytest.approx(m.weight_copies)


@pytest.mark.parametrize(
    "stages, microbatches, message",
    [
        (4, 7, r"microbatches must be at least 2 x stages \(8\) for dualpipev, got 7"),
        (2, 1, r"microbatches must be at least 2 x stages \(4\) for dualpipev, got 1"),
        (1, 4, "stages must be an integer >= 2, got 1"),
        (4, 0, "microbatches must be an integer >= 1, got 0"),
    ],
)
def test_errors(stages, microbatches, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        dualpipev(stages, microbatches)


def test_registry_entry():
    assert DUALPIPEV_REGIME == "B >= 2S (S devices, 2S stages)"
    assert registry.spec("dualpipev").regime == DUALPIPEV_REGIME
    assert registry.generate("dualpipev", 4, 8) == dualpipev(4, 8)
    assert registry.formula("dualpipev", 4, 8) == formulas.dualpipev(4, 8)
    with pytest.raises(ValueError, match="at least 2 x stages"):
        registry.generate("dualpipev", 4, 5)


@st.composite
def shapes(draw):
    stages = draw(st.integers(2, 16))
    microbatches = draw(st.integers(2 * stages, 64))
    return stages, microbatches


@settings(max_examples=25, deadline=None)
@given(shape=shapes(), slots=st.sampled_from([UNIT, SlotDurations(1, 2, 1), SlotDurations(2, 3, 1)]))
def test_property_tables_validate(shape, slots):
    stages, microbatches = shape
    schedule = dualpipev(stages, microbatches)
    table = layout(schedule, slots)
    validate(table, schedule)
    counts = Counter(e.op for e in table.entries)
    assert set(counts.values()) == {1}
    assert len(counts) == 3 * 2 * stages * microbatches
    by_op = table.by_op
    for m in range(microbatches):
        for s in range(2 * stages):
            for kind in (Kind.F, Kind.B, Kind.W):
                assert counts[Op(kind, 0, s, m)] == 1
            b, w = by_op[Op(Kind.B, 0, s, m)], by_op[Op(Kind.W, 0, s, m)]
            same_block = (w.start, w.end) == (b.start, b.end)  # a full backward: B and its W run as one
            assert w.device == b.device and (w.start >= b.end or same_block)
    assert simulate(schedule, slot_costs(schedule, slots)).makespan == table.makespan
