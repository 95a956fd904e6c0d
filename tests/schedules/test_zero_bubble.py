"""ZB-H1, ZB-H2 and ZB-V: reference tables cell for cell, formulas, memory, W placement, errors."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import grid_cells, v_label
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.schedules import formulas, registry
from pipetab.schedules.generators.zero_bubble import (
    ZB_H1_REGIME,
    ZB_H2_REGIME,
    ZBV_REGIME,
    zb_h1,
    zb_h2,
    zbv,
)
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

UNIT = SlotDurations(1, 1, 1)

# shared/reference/schedules.md §6(d): D=4, N=8, T_F = T_B = T_W = 1 (B = input gradient)
ZB_H1_D4_N8 = """
dev0 |F0  F1  F2  F3  .   .   .   B0  W0  F4  B1  W1  F5  B2  W2  F6  B3  W3  F7  B4  W4  B5  W5  B6  W6  B7  W7
dev1 |.   F0  F1  F2  .   .   B0  F3  B1  W0  F4  B2  W1  F5  B3  W2  F6  B4  W3  F7  B5  W4  B6  W5  B7  W6  W7
dev2 |.   .   F0  F1  .   B0  F2  B1  F3  B2  W0  F4  B3  W1  F5  B4  W2  F6  B5  W3  F7  B6  W4  B7  W5  W6  W7
dev3 |.   .   .   F0  B0  F1  B1  F2  B2  F3  B3  W0  F4  B4  W1  F5  B5  W2  F6  B6  W3  F7  B7  W4  W5  W6  W7
"""

# Qi et al. (arXiv 2401.10241) Figure 3 bottom, ZB-H2 for p=4, 8 microbatches, F = B = W (its
# microbatches 1..8 written 0..7 here): every device busy from its first op to its last
ZB_H2_D4_N8 = """
dev0 |F0  F1  F2  F3  F4  F5  F6  B0  W0  F7  B1  W1  B2  W2  B3  W3  B4  W4  B5  W5  B6  W6  B7  W7  .   .   .
dev1 |.   F0  F1  F2  F3  F4  B0  F5  B1  F6  B2  W0  F7  B3  W1  B4  W2  B5  W3  B6  W4  B7  W5  W6  W7  .   .
dev2 |.   .   F0  F1  F2  B0  F3  B1  F4  B2  F5  B3  F6  B4  W0  F7  B5  W1  B6  W2  B7  W3  W4  W5  W6  W7  .
dev3 |.   .   .   F0  B0  F1  B1  F2  B2  F3  B3  F4  B4  F5  B5  F6  B6  W0  F7  B7  W1  W2  W3  W4  W5  W6  W7
"""

# §7(d): ZB-V, D=4, N=8, one slot per chunk op; upper case = stage d, lower case = stage 7-d
ZBV_D4_N8 = """
dev0 |F0  F1  F2  F3  F4  F5  F6  f0  b0  w0  f1  b1  w1  f2  b2  w2  f3  b3  w3  F7  B0  W0  f4  b4  w4  B1  W1  f5  b5  w5  B2  W2  f6  b6  w6  B3  W3  f7  b7  w7  B4  W4  B5  W5  B6  W6  B7  W7  .   .   .
dev1 |.   F0  F1  F2  F3  F4  f0  F5  f1  b0  w0  f2  b1  w1  f3  b2  w2  F6  B0  W0  f4  b3  w3  F7  B1  W1  f5  b4  w4  B2  W2  f6  b5  w5  B3  W3  f7  b6  w6  B4  b7  B5  W4  B6  W5  B7  W6  w7  W7  .   .
dev2 |.   .   F0  F1  F2  f0  F3  f1  F4  f2  b0  w0  f3  b1  w1  F5  B0  W0  f4  b2  w2  F6  B1  W1  f5  b3  w3  F7  B2  W2  f6  b4  w4  B3  W3  f7  b5  w5  B4  b6  B5  b7  B6  W4  B7  W5  w6  w7  W6  W7  .
dev3 |.   .   .   F0  f0  F1  f1  F2  f2  F3  f3  b0  w0  F4  B0  W0  f4  b1  w1  F5  B1  W1  f5  b2  w2  F6  B2  W2  f6  b3  w3  F7  B3  W3  f7  b4  w4  B4  b5  B5  b6  B6  b7  B7  W4  w5  w6  w7  W5  W6  W7
"""  # noqa: E501


def span_idle(table):
    """ZB's per-device-span bubble: (last end - first start) - busy, per device."""
    out = []
    for d in range(table.num_devices):
        es = table.device_entries(d)
        out.append(max(e.end for e in es) - min(e.start for e in es) - sum(e.duration for e in es))
    return out


def formula_and_table(gen, formula, stages, microbatches):
    """The unit-slot table of ``gen`` (validated), its metrics and the level-1 formula,
    after checking that the formula's bubble ratio and peaks are the table's."""
    schedule = gen(stages, microbatches)
    table = layout(schedule, UNIT)
    validate(table, schedule)
    m = table_metrics(table, schedule)
    f = formula(stages, microbatches)
    assert m.bubble_ratio == pytest.approx(f.bubble_ratio, abs=1e-12)
    assert m.peak_activation_share == pytest.approx(f.peak_activations)
    return table, m, f


def assert_complete_and_w_after_b(table, schedule):
    """Every op of every microbatch once; each W on its B's device, after that B."""
    counts = Counter(e.op for e in table.entries)
    assert set(counts.values()) == {1}
    n = schedule.num_stages()
    assert len(counts) == 3 * n * schedule.num_microbatches
    by_op = table.by_op
    for m in range(schedule.num_microbatches):
        for s in range(n):
            for kind in (Kind.F, Kind.B, Kind.W):
                assert counts[Op(kind, 0, s, m)] == 1
            b, w = by_op[Op(Kind.B, 0, s, m)], by_op[Op(Kind.W, 0, s, m)]
            assert w.device == b.device and w.start >= b.end


# ---- ZB-H1 ------------------------------------------------------------------------------


def test_zb_h1_reference_table_cell_for_cell(reference_grid, cells):
    schedule = zb_h1(4, 8)
    table = layout(schedule, UNIT)
    validate(table, schedule)
    assert table.makespan == 27
    assert cells(table) == reference_grid(ZB_H1_D4_N8)
    m = table_metrics(table, schedule)
    assert m.idle_slots == (3,) * 4  # (p-1)(T_F+T_B-T_W) = 3
    assert span_idle(table) == [3, 2, 1, 0]
    assert m.peak_activations == (4,) * 4  # p * M_B on every device
    f = formulas.zb_h1(4, 8)
    assert f.bubble_ratio == pytest.approx(m.bubble_ratio) == pytest.approx(3 / 27)
    assert f.peak_activations == m.peak_activation_share
    assert f.weight_copies == m.weight_copies == (1.0,) * 4


def test_zb_h1_shape():
    s = zb_h1(4, 8)
    assert s.name == "zb-h1" and s.split_backward
    assert s.placement.stage2device == ((0, 1, 2, 3),)
    assert s.params == {"stages": 4, "microbatches": 8}
    # device d postpones its first d weight gradients
    for d, order in enumerate(s.orders):
        b_seen = 0
        for op in order:
            if op.kind is Kind.B:
                b_seen += 1
            if op.kind is Kind.W and op.microbatch == 0:
                assert b_seen == d + 1


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("microbatches", [1, 2, 3, 4, 7, 8, 16, 33, 64])
def test_zb_h1_formula_equals_table(stages, microbatches):
    table, _m, f = formula_and_table(zb_h1, formulas.zb_h1, stages, microbatches)
    if microbatches >= stages:
        assert table.makespan == 3 * microbatches + stages - 1
        assert "Qi et al." in f.bubble_source
    else:
        assert table.makespan == 2 * (microbatches + stages - 1) + 1
        assert "measured" in f.bubble_source


@pytest.mark.parametrize("F, K, W", [(1, 2, 1), (2, 2, 1), (2, 3, 2), (3, 1, 1), (4, 4, 4)])
@pytest.mark.parametrize("stages, microbatches", [(2, 2), (4, 8), (5, 9), (8, 24)])
def test_zb_h1_paper_bubble_time_when_w_is_shortest(F, K, W, stages, microbatches):
    """ZB's (p-1)(T_F+T_B-T_W) idle time per device holds for W <= min(F, K)."""
    schedule = zb_h1(stages, microbatches)
    table = layout(schedule, SlotDurations(F, K, W))
    validate(table, schedule)
    idle = table_metrics(table, schedule).idle_slots
    assert idle == ((stages - 1) * (F + K - W),) * stages


@pytest.mark.parametrize("F, K, W", [(1, 1, 2), (1, 2, 2), (2, 1, 2)])
def test_zb_h1_paper_bubble_time_fails_for_long_w(F, K, W):
    table = layout(zb_h1(4, 8), SlotDurations(F, K, W))
    assert table.makespan > 8 * (F + K + W) + 3 * (F + K - W)


# ---- ZB-H2 ------------------------------------------------------------------------------


def test_zb_h2_paper_figure_cell_for_cell(reference_grid, cells):
    schedule = zb_h2(4, 8)
    table = layout(schedule, UNIT)
    validate(table, schedule)
    assert cells(table) == reference_grid(ZB_H2_D4_N8)
    assert table.makespan == 27  # 24 busy + the staggered start of 3
    assert span_idle(table) == [0, 0, 0, 0]  # zero bubble per device span
    m = table_metrics(table, schedule)
    assert m.idle_slots == (3,) * 4
    assert m.peak_activations == (7,) * 4  # (2p - 1) M_B on every device
    f = formulas.zb_h2(4, 8)
    assert f.bubble_ratio == pytest.approx(m.bubble_ratio) == pytest.approx(3 / 27)
    assert f.peak_activations == m.peak_activation_share
    assert f.weight_copies == m.weight_copies == (1.0,) * 4


def test_zb_h2_s2_b3_by_hand(cells):
    """Device 0 warms up with 2(S-1)+1 = 3 forwards, device 1 with 1; device 1 delays its
    W's by 2 microbatches:
    dev0 | F0 F1 F2 B0 W0 B1 W1 B2 W2 .
    dev1 | .  F0 B0 F1 B1 F2 B2 W0 W1 W2"""
    schedule = zb_h2(2, 3)
    assert [[str(op) for op in order] for order in schedule.orders] == [
        ["F0s0", "F1s0", "F2s0", "B0s0", "W0s0", "B1s0", "W1s0", "B2s0", "W2s0"],
        ["F0s1", "B0s1", "F1s1", "B1s1", "F2s1", "B2s1", "W0s1", "W1s1", "W2s1"],
    ]
    table = layout(schedule, UNIT)
    assert cells(table) == [
        ["F0", "F1", "F2", "B0", "W0", "B1", "W1", "B2", "W2", "."],
        [".", "F0", "B0", "F1", "B1", "F2", "B2", "W0", "W1", "W2"],
    ]


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("microbatches", [1, 2, 3, 4, 7, 8, 15, 16, 31, 33, 64])
def test_zb_h2_formula_equals_table(stages, microbatches):
    table, m, f = formula_and_table(zb_h2, formulas.zb_h2, stages, microbatches)
    assert m.peak_activations == (min(2 * stages - 1, microbatches),) * stages
    if microbatches >= 2 * stages - 1:
        assert table.makespan == 3 * microbatches + stages - 1
        assert span_idle(table) == [0] * stages
        assert "Qi et al." in f.bubble_source
    else:
        assert table.makespan == 2 * stages + 1 + (5 * (microbatches - 1)) // 2
        assert "measured" in f.bubble_source


@pytest.mark.parametrize("F, K, W, C", [(2, 2, 1, 0), (3, 2, 1, 1), (2, 3, 2, 2), (4, 4, 1, 3), (1, 3, 1, 2)])
@pytest.mark.parametrize("stages, microbatches", [(2, 3), (4, 8), (5, 12), (8, 24)])
def test_zb_h2_paper_span_bubble(F, K, W, C, stages, microbatches):
    """ZB's (p-1)(T_F+T_B-2T_W) span idle time (Table 2), plus 2(p-1)T_comm with messages
    (the authors' check in their Table 5 computation), when T_W <= min(T_F, T_B) and
    2 T_comm <= T_F + T_B: the longest device span minus the busy time."""
    schedule = zb_h2(stages, microbatches)
    sim = simulate(schedule, slot_costs(schedule, SlotDurations(F, K, W), comm_slots=C))
    spans = [max(sim.end[o] for o in order) - min(sim.start[o] for o in order) for order in schedule.orders]
    assert max(spans) - microbatches * (F + K + W) == (stages - 1) * (F + K + 2 * C - 2 * W)


def test_zb_h2_paper_span_bubble_needs_short_messages():
    """With 2 T_comm > T_F + T_B the 2S-1 warm-up forwards no longer cover the first round trip."""
    schedule = zb_h2(4, 8)
    sim = simulate(schedule, slot_costs(schedule, UNIT, comm_slots=2))
    spans = [max(sim.end[o] for o in order) - min(sim.start[o] for o in order) for order in schedule.orders]
    assert max(spans) - 24 > 3 * (1 + 1 + 4 - 2)


def test_zb_h2_shape():
    s = zb_h2(4, 8)
    assert s.name == "zb-h2" and s.split_backward
    assert s.placement.stage2device == ((0, 1, 2, 3),)
    assert s.params == {"stages": 4, "microbatches": 8}
    for d, order in enumerate(s.orders):
        kinds = [op.kind for op in order]
        assert kinds.index(Kind.B) == 2 * (4 - 1 - d) + 1  # warm-up forwards
        b_seen = 0
        for op in order:  # device d postpones its first 2d weight gradients
            b_seen += op.kind is Kind.B
            if op.kind is Kind.W and op.microbatch == 0:
                assert b_seen == 2 * d + 1


# ---- ZB-V -------------------------------------------------------------------------------


def test_zbv_reference_table_cell_for_cell(reference_grid):
    schedule = zbv(4, 8)
    table = layout(schedule, UNIT)
    validate(table, schedule)
    assert table.makespan == 51  # 48 busy + staggered start 3
    assert grid_cells(table, v_label(4)) == reference_grid(ZBV_D4_N8)
    assert span_idle(table) == [0, 0, 0, 0]
    m = table_metrics(table, schedule)
    assert table.tick_slots == 0.5 and m.idle_slots == (1.5,) * 4  # 3 ticks of half a slot
    assert m.makespan_slots == 25.5 and m.makespan_ticks == 51
    assert m.peak_activations == (8,) * 4  # half-stage activations (torch liveness: 8)
    assert m.peak_activation_share == pytest.approx((4.0,) * 4)
    f = formulas.zbv(4, 8)
    assert f.bubble_ratio == pytest.approx(m.bubble_ratio) == pytest.approx(3 / 51)
    assert f.peak_activations == pytest.approx(m.peak_activation_share)
    assert f.weight_copies == pytest.approx(m.weight_copies) == (1.0,) * 4


def test_zbv_shape():
    s = zbv(4, 8)
    assert s.name == "zbv" and s.split_backward
    assert s.placement.stage2device == ((0, 1, 2, 3, 3, 2, 1, 0),)
    assert s.stage_work == ((1.0,) * 8,)
    assert s.params == {"stages": 4, "microbatches": 8}


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("microbatches", [1, 2, 3, 5, 6, 7, 8, 12, 23, 31, 64])
def test_zbv_formula_equals_table_for_every_b(stages, microbatches):
    """B < 2S-1 uses the B_eff = 2S-1 construction with missing microbatches dropped."""
    table, m, f = formula_and_table(zbv, formulas.zbv, stages, microbatches)
    assert table.makespan == max(6 * microbatches + stages - 1, 4 * microbatches + 4 * stages - 2)
    assert m.peak_activations == tuple(
        min(2 * stages, 2 * microbatches, microbatches + 1 + d) for d in range(stages)
    )
    assert m.peak_activation_share == pytest.approx(f.peak_activations)
    # zero bubble in ZB's per-device-span convention exactly when B >= 2S-1
    assert (span_idle(table) == [0] * stages) == (microbatches >= 2 * stages - 1)
    if microbatches >= 2 * stages - 1:
        assert f.peak_activations == pytest.approx((float(stages),) * stages)


def test_zbv_is_zero_bubble_only_for_equal_times():
    table = layout(zbv(4, 8), SlotDurations(1, 2, 1))
    assert max(span_idle(table)) > 0


# ---- both -------------------------------------------------------------------------------


@pytest.mark.parametrize("gen, name", [(zb_h1, "zb-h1"), (zb_h2, "zb-h2"), (zbv, "zbv")])
@pytest.mark.parametrize(
    "stages, microbatches, message",
    [
        (1, 4, "stages must be an integer >= 2, got 1"),
        (True, 4, "stages must be an integer >= 2, got True"),
        (4, 0, "microbatches must be an integer >= 1, got 0"),
        (4, 2.0, "microbatches must be an integer >= 1, got 2.0"),
    ],
)
def test_errors(gen, name, stages, microbatches, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        gen(stages, microbatches)
    with pytest.raises(ValueError, match=f"^{message}$"):
        registry.generate(name, stages, microbatches)


def test_registry_entries():
    assert ZB_H1_REGIME == ZB_H2_REGIME == ZBV_REGIME == "S >= 2, B >= 1"
    assert registry.spec("zb-h1").regime == ZB_H1_REGIME
    assert registry.spec("zb-h2").regime == ZB_H2_REGIME
    assert registry.generate("zb-h2", 4, 8) == zb_h2(4, 8)
    assert registry.formula("zb-h2", 4, 8) == formulas.zb_h2(4, 8)
    assert registry.spec("zbv").regime == ZBV_REGIME
    assert registry.generate("zb-h1", 4, 8) == zb_h1(4, 8)
    assert registry.generate("zbv", 3, 5) == zbv(3, 5)
    assert registry.formula("zbv", 3, 5) == formulas.zbv(3, 5)
    with pytest.raises(ValueError, match="takes no option 'chunks'"):
        registry.generate("zbv", 4, 8, chunks=2)


@settings(max_examples=25, deadline=None)
@given(
    gen=st.sampled_from([zb_h1, zb_h2, zbv]),
    stages=st.integers(2, 16),
    microbatches=st.integers(1, 64),
    slots=st.sampled_from([UNIT, SlotDurations(1, 2, 1), SlotDurations(2, 3, 1)]),
)
def test_property_tables_validate(gen, stages, microbatches, slots):
    schedule = gen(stages, microbatches)
    table = layout(schedule, slots)
    validate(table, schedule)
    assert_complete_and_w_after_b(table, schedule)
    assert simulate(schedule, slot_costs(schedule, slots)).makespan == table.makespan
    sim = simulate(schedule, slot_costs(schedule, UNIT))
    assert sim.makespan == layout(schedule, UNIT).makespan
