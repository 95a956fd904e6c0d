"""Sweep rows: the levels of ``evaluate_levels`` in one flat vocabulary, one simulation per
memory-cap group, equal to evaluating each configuration on its own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipetab.hardware import load_system
from pipetab.schedules.table import SlotDurations
from pipetab.solver.levels import evaluate_levels
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate
from pipetab.sweep import expand, flat_levels, parse_config
from pipetab.sweep.run import evaluate_group, evaluate_task


def configs(caps, mode="simulate", schedules=("chimera",)):
    config = parse_config({
        "grid": {"schedules": list(schedules), "stages": [4], "microbatches": [8],
                 "systems": ["mid_nw_mid_cp"], "caps": caps},
        "run": {"mode": mode},
    })
    return expand(config)[0]


def test_flat_levels_keeps_the_vocabulary_and_reduces_device_lists():
    doc = {"devices": 2, "formula": None, "table": {"bubble_ratio": 0.5, "idle_slots": [3, 7]},
           "simulation": {"makespan_s": 1.5, "fits_memory": [True, False], "capacity_bytes": [None, None]}}
    assert flat_levels(doc) == {"devices": 2, "table_bubble_ratio": 0.5, "table_idle_slots": 7,
                                "simulation_makespan_s": 1.5, "simulation_fits_memory": False,
                                "simulation_capacity_bytes": None}


@pytest.mark.parametrize("caps", [["device", "none", "1act", "3act", "25000GB"]])
def test_a_cap_group_shares_one_simulation_and_equals_each_cap_alone(caps):
    group = configs(caps)
    assert len({c.simulation_key for c in group}) == 1 and len(group) == len(caps)
    rows = evaluate_group(group)
    lv = evaluate_levels("chimera", 4, 8, slots=SlotDurations(1, 2))
    costs = hardware_costs(lv.schedule, "mid_nw_mid_cp", "paper_gpt")
    memory = load_system("mid_nw_mid_cp").device.memory_bytes
    biggest = max(costs.activation.values())
    expected_caps = {"device": memory, "none": None, "1act": 1, "3act": 3, "25000GB": 25000e9}
    fits_seen = set()
    for c, row in zip(group, rows):
        cap = expected_caps[c.cap]
        capacity = tuple(cap if not isinstance(cap, int) else p + cap * biggest for p in costs.persistent)
        alone = simulate(lv.schedule, replace(costs, capacity=capacity))  # the simulator's own judgement
        assert row["simulation_fits_memory"] == all(alone.fits_memory)
        assert row["simulation_makespan_s"] == alone.makespan
        assert row["simulation_peak_memory_bytes"] == round(max(alone.peak_memory))
        assert row["simulation_capacity_bytes"] == (None if cap is None else int(max(capacity)))
        assert row["table_bubble_ratio"] == lv.metrics.bubble_ratio and row["cap"] == c.cap
        fits_seen.add(row["simulation_fits_memory"])
    assert fits_seen == {True, False}  # the caps straddle the peak: both answers are exercised


def test_rows_are_levels_as_dict_flattened():
    (c,) = configs(["device"], schedules=("hanayo",))
    (row,) = evaluate_group([c])
    sched_levels = evaluate_levels("hanayo", 4, 8, options={"waves": 1}, slots=SlotDurations(1, 2))
    costs = hardware_costs(sched_levels.schedule, "mid_nw_mid_cp", "paper_gpt")
    capacity = (float(load_system("mid_nw_mid_cp").device.memory_bytes),) * len(costs.persistent)
    expected = flat_levels(sched_levels.simulated(replace(costs, capacity=capacity)).as_dict())
    assert {k: row[k] for k in expected} == expected


def test_a_failing_group_is_an_error_outcome_for_each_of_its_configurations(monkeypatch):
    group = configs(["device", "none"])
    import pipetab.sweep.run as run

    def boom(*a, **k):
        raise ZeroDivisionError("no")

    monkeypatch.setattr(run, "_costs", boom)
    out = evaluate_task(group)
    assert [o.key for o in out] == [c.key for c in group]
    assert all(o.row is None and o.error == "ZeroDivisionError: no" for o in out)
    with pytest.raises(ValueError, match="differ only in their cap"):
        evaluate_group(configs(["device"]) + configs(["device"], schedules=("1f1b",)))


def test_the_run_finds_what_cannot_exist_as_expand_does(tmp_path):
    from pipetab.sweep import ResultStore, run_sweep

    config = parse_config({
        "grid": {"schedules": ["gpipe", "chimera", "hanayo", "dualpipev"], "stages": [4, 6],
                 "microbatches": [4, 8, 12], "systems": ["mid_nw_mid_cp"], "models": ["tiny_gpt"]},
    })
    todo, skipped = expand(config)
    with ResultStore(tmp_path / "s.sqlite") as store:
        summary = run_sweep(config, store, progress=False)
        assert store.done_keys() == {c.key for c in todo}
    assert summary.total == len(todo) and summary.new_rows == len(todo) and not summary.errors
    found = {(s.configuration.key, s.kind, s.reason) for s in summary.skipped}
    assert found == {(s.configuration.key, s.kind, s.reason) for s in skipped}
    assert {k for _, k, _ in found} == {"regime", "batch"}  # tiny_gpt's batch 64 is not split in 12
