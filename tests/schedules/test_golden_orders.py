"""LoopedBFS, interleaved zero bubble, V-Half and V-Min: every device's order equals the one
torch's and the authors' code computes (``tests/data/golden_orders.json``, made by
``experiments/golden_orders.py`` from torch's schedules.py at pytorch commit 00722e6 and
sail-sg/zero-bubble-pipeline-parallelism commit 39f2c18)."""

import json
import re
from pathlib import Path

import pytest

from pipetab.schedules import registry
from pipetab.schedules.ops import Kind

GOLDEN = json.loads((Path(__file__).parent.parent / "data" / "golden_orders.json").read_text())
TORCH = {"ScheduleLoopedBFS": "looped-bfs", "ScheduleInterleavedZeroBubble": "interleaved-zb"}


def actions(sched) -> list[list[str]]:
    """Each device's ops as torch actions (I the input gradient of a split backward)."""
    letter = {Kind.F: "F", Kind.B: "I" if sched.split_backward else "B", Kind.W: "W"}
    return [[f"{op.stage}{letter[op.kind]}{op.microbatch}" for op in order] for order in sched.orders]


def cases():
    out = []
    for key in GOLDEN["torch"]:
        cls, s, b, v = re.match(r"(\w+) S=(\d+) B=(\d+) v=(\d+)", key).groups()
        out.append(("torch", key, TORCH[cls], int(s), int(b), {"chunks": int(v)}))
    for key in GOLDEN["sail"]:
        name, s, b = re.match(r"([\w-]+) S=(\d+) B=(\d+)", key).groups()
        out.append(("sail", key, name, int(s), int(b), {}))
    return out


@pytest.mark.parametrize("source, key, name, S, B, opts", cases(), ids=[c[1] for c in cases()])
def test_orders_equal_the_reference(source, key, name, S, B, opts):
    assert actions(registry.generate(name, S, B, **opts)) == GOLDEN[source][key]


def test_interleaved_zb_refuses_rounds_that_do_not_divide():
    with pytest.raises(ValueError, match="microbatches must be a multiple of the 2 rounds"):
        registry.generate("interleaved-zb", 4, 9)


NEW = [("looped-bfs", {"chunks": 2}), ("looped-bfs", {"chunks": 3}), ("interleaved-zb", {"chunks": 2}),
       ("interleaved-zb", {"chunks": 4}), ("v-half", {}), ("v-min", {})]


@pytest.mark.parametrize("name, opts", NEW, ids=[f"{n}{o}" for n, o in NEW])
@pytest.mark.parametrize("S, B", [(2, 4), (3, 6), (4, 8), (4, 12)])
def test_table_simulator_and_cpsat_agree(name, opts, S, B):
    from pipetab.schedules.metrics import table_metrics
    from pipetab.schedules.table import SlotDurations, layout
    from pipetab.schedules.validate import validate
    from pipetab.solver.cpsat import CpSatConfig, evaluate
    from pipetab.solver.pricing import slot_costs
    from pipetab.solver.simulate import simulate

    sched = registry.generate(name, S, B, **opts)
    slots = SlotDurations(1, 2, 1) if sched.split_backward else SlotDurations(1, 2)
    table = layout(sched, slots)
    validate(table, sched)
    costs = slot_costs(sched, slots)  # no communication
    sim = simulate(sched, costs)
    metrics = table_metrics(table, sched)
    assert sim.makespan == metrics.makespan_ticks
    assert sim.idle_ratio == pytest.approx(metrics.bubble_ratio)
    assert evaluate(sched, costs, CpSatConfig(time_limit_s=20)).makespan == sim.makespan
