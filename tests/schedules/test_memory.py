"""The one activation-memory definition (F allocates M; B frees M - M_W; W frees M_W) as
table metrics, the simulator and the CP-SAT oracle count it."""

from __future__ import annotations

import pytest

from pipetab.schedules.memory import memory_change
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.ops import Kind
from pipetab.schedules.registry import generate
from pipetab.schedules.table import SlotDurations, layout
from pipetab.solver.costs import slot_costs
from pipetab.solver.cpsat.oracle import memory_check
from pipetab.solver.cpsat.problem import Problem
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
