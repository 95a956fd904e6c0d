"""The one activation-memory definition (F allocates M; B frees M - M_W; W frees M_W) as
table metrics, the simulator and the CP-SAT oracle count it; ZB-H1 and ZB-H2 peaks under it."""

from __future__ import annotations

import pytest

from pipetab.schedules.formulas import zb_h1_peak_activations, zb_h2_peak_activations
from pipetab.schedules.memory import memory_change
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind
from pipetab.schedules.registry import generate
from pipetab.schedules.table import SlotDurations, layout
from pipetab.solver.cpsat.model.oracle import memory_check
from pipetab.solver.cpsat.problem import Problem
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

UNIT = SlotDurations(1, 1, 1)


def test_memory_change_of_each_kind():
    assert memory_change(Kind.F, 4.0, 1.0, True) == 4.0
    assert memory_change(Kind.B, 4.0, 1.0, True) == -3.0
    assert memory_change(Kind.W, 4.0, 1.0, True) == -1.0
    assert memory_change(Kind.B, 4.0, 1.0, False) == -4.0


def test_zb_h1_s2_b3_peaks_by_hand():
    """zb-h1, S=2, B=3, F=B=W=1 slot:
    dev0 | F0 F1 .  B0 W0 F2 B1 W1 B2 W2   live (M_W = 1/4): 1 2 2 1.25 1 2 1.25 1 .25 0
    dev1 | .  F0 B0 F1 B1 W0 F2 B2 W1 W2   live: 1 .25 1.25 .5 .25 1.25 .5 .25 0
    so the peaks are 2 and 1.25; holding the whole activation until W, 2 and 2."""
    sched = generate("zb-h1", 2, 3)
    table = layout(sched, UNIT)
    assert table_metrics(table, sched, weight_memory=0.25).peak_activations == (2, 1.25)
    assert table_metrics(table, sched).peak_activations == (2, 2)


@pytest.mark.parametrize("name,S,B", [("zb-h1", 4, 8), ("zbv", 4, 8), ("dualpipev", 4, 8)])
@pytest.mark.parametrize("fraction", [0.0, 0.4, 1.0])
def test_metrics_simulator_and_oracle_agree(name, S, B, fraction):
    """Three counts of the same definition: cells of the table, the simulator's timeline on
    the same slot costs, and the CP-SAT oracle's prefix sums over each device's order."""
    sched = generate(name, S, B)
    table = layout(sched, UNIT)
    costs = slot_costs(sched, UNIT, weight_memory=fraction)
    metrics = table_metrics(table, sched, weight_memory=fraction)
    sim = simulate(sched, costs)
    oracle = memory_check(Problem.from_schedule(sched, costs), sched)
    assert tuple(sim.peak_activation) == pytest.approx(metrics.peak_activations)
    assert oracle.peaks == pytest.approx(metrics.peak_activations)


def test_weight_fraction_out_of_range_is_refused():
    sched = generate("zb-h1", 2, 2)
    with pytest.raises(ValueError, match="weight memory must be a fraction"):
        table_metrics(layout(sched), sched, weight_memory=1.5)
    with pytest.raises(ValueError, match="weight memory must be a fraction"):
        slot_costs(sched, weight_memory=float("nan"))


def test_zb_h2_s2_b3_peaks_by_hand():
    """zb-h2, S=2, B=3, F=B=W=1 slot:
    dev0 | F0 F1 F2 B0 W0 B1 W1 B2 W2 .    live (M_W = 1/4): 1 2 3 2.25 2 1.25 1 .25 0
    dev1 | .  F0 B0 F1 B1 F2 B2 W0 W1 W2   live: 1 .25 1.25 .5 1.5 .75 .5 .25 0
    so the peaks are 3 and 1.5; holding the whole activation until W, 3 and 3."""
    sched = generate("zb-h2", 2, 3)
    table = layout(sched, UNIT)
    assert table_metrics(table, sched, weight_memory=0.25).peak_activations == (3, 1.5)
    assert table_metrics(table, sched).peak_activations == (3, 3)


# Qi et al. Section 2.3: worker i = d + 1 of p holds (p-i+1) M_B + (i-1) M_W under ZB-H1 and
# (2p-2i+1) M_B + (2i-2) M_W under ZB-H2; at p = 4 with M_W = f M_B that is
# ZB-H1: 4, 3+f, 2+2f, 1+3f and ZB-H2: 7, 5+2f, 3+4f, 1+6f.
HAND_PEAKS_S4 = {
    ("zb-h1", 0.0): (4, 3, 2, 1),
    ("zb-h1", 0.25): (4, 3.25, 2.5, 1.75),
    ("zb-h1", 0.5): (4, 3.5, 3, 2.5),
    ("zb-h1", 1.0): (4, 4, 4, 4),
    ("zb-h2", 0.0): (7, 5, 3, 1),
    ("zb-h2", 0.25): (7, 5.5, 4, 2.5),
    ("zb-h2", 0.5): (7, 6, 5, 4),
    ("zb-h2", 1.0): (7, 7, 7, 7),
}


@pytest.mark.parametrize("name,fraction", sorted(HAND_PEAKS_S4))
@pytest.mark.parametrize("B", [8, 12])
@pytest.mark.parametrize("slots", [UNIT, SlotDurations(2, 3, 1), SlotDurations(1, 1, 3)])
def test_zb_peaks_under_three_part_accounting(name, fraction, B, slots):
    """Per-device peaks of ZB-H1 and ZB-H2 (S=4) equal the hand-worked values above in
    the table, the simulator and the CP-SAT oracle, for any op durations (a device's live
    memory depends only on its own order)."""
    sched = generate(name, 4, B)
    expected = HAND_PEAKS_S4[(name, fraction)]
    metrics = table_metrics(layout(sched, slots), sched, weight_memory=fraction)
    costs = slot_costs(sched, slots, comm_slots=1, weight_memory=fraction)
    assert metrics.peak_activations == pytest.approx(expected)
    assert simulate(sched, costs).peak_activation == pytest.approx(expected)
    assert memory_check(Problem.from_schedule(sched, costs), sched).peaks == pytest.approx(expected)
    peaks = zb_h1_peak_activations if name == "zb-h1" else zb_h2_peak_activations
    assert peaks(4, B, fraction) == pytest.approx(expected)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_zb_peak_formulas_for_every_b(fraction):
    """The closed forms hold also when B is too small to fill the warm-up (S <= 8, B <= 20)."""
    for S in range(2, 9):
        for B in range(1, 21):
            for name, peaks in (("zb-h1", zb_h1_peak_activations), ("zb-h2", zb_h2_peak_activations)):
                sched = generate(name, S, B)
                got = table_metrics(layout(sched, UNIT), sched, weight_memory=fraction).peak_activations
                assert got == pytest.approx(peaks(S, B, fraction)), (name, S, B)
