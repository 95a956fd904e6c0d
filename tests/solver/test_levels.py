"""``evaluate_levels``: one value holding the levels, equal to the parts computed directly."""

from __future__ import annotations

import pytest

from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.registry import formula, generate
from pipetab.schedules.table import SlotDurations, layout
from pipetab.solver.levels import evaluate_levels
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate


def test_levels_equal_their_parts():
    sched = generate("chimera", 4, 8)
    costs = hardware_costs(sched, "mid_nw_mid_cp", "paper_gpt")
    lv = evaluate_levels("chimera", 4, 8, slots=SlotDurations(1, 2), costs=costs, cpsat=True)
    assert lv.formula == formula("chimera", 4, 8)
    assert lv.metrics == table_metrics(layout(sched, SlotDurations(1, 2)), sched)
    assert lv.simulation.makespan == simulate(sched, costs).makespan
    # fixed-mode CP-SAT on 1/1000-of-an-op ticks, rounded up: within a tick per op of T_sim
    assert lv.cpsat.status == "optimal"
    assert lv.simulation.makespan <= lv.cpsat.makespan <= lv.simulation.makespan * 1.002
    doc = lv.as_dict()
    assert doc["table"]["makespan_slots"] == lv.metrics.makespan_slots
    assert doc["simulation"]["makespan_s"] == lv.simulation.makespan
    assert set(doc) == {"schedule", "stages", "microbatches", "devices", "formula", "table", "simulation", "cpsat"}


def test_idealized_cpsat_equals_table():
    lv = evaluate_levels("zb-h1", 4, 8, slots=SlotDurations(1, 1, 1), cpsat=True)
    assert lv.cpsat.makespan == lv.metrics.makespan_slots
    assert lv.simulation is None and "simulation" not in lv.as_dict()


def test_a_schedule_without_registry_name_has_no_formula():
    sched = generate("1f1b", 4, 4)
    from dataclasses import replace

    lv = evaluate_levels(replace(sched, name="mine"))
    assert lv.formula is None and lv.as_dict()["formula"] is None


def test_shape_arguments_only_with_a_name():
    with pytest.raises(ValueError, match="needs stages and microbatches"):
        evaluate_levels("1f1b")
    with pytest.raises(ValueError, match="apply only to a schedule given by name"):
        evaluate_levels(generate("1f1b", 2, 2), 2, 2)
