"""Context parallelism of 1, ZeRO below 3 and the even layout cost exactly what they cost
before they existed: every number the simulator reads, on seven configurations, against the
fingerprints made at commit ffc6140, main before context parallelism, ZeRO-3 and layouts were merged
(``experiments/costs_fingerprint.py``)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.costs_fingerprint import CASES, costs_of, fingerprint
from pipetab.hardware.layout import Layout
from pipetab.hardware.loaders import load_model
from pipetab.schedules import registry

BASELINE = json.loads((Path(__file__).parent.parent / "data" / "costs_baseline.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_costs_equal_the_baseline(case):
    assert fingerprint(costs_of(case)) == BASELINE[case[0]]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_explicit_context_parallel_one_and_even_layout_equal_the_baseline(case):
    name, sched, opts, stages, micro, system, model, ctx = case
    schedule = registry.generate(sched, stages, micro, **opts)
    m = load_model(model)
    layout = Layout.even(m.num_layers, schedule.stage_work[0], mtp=m.mtp_layers)
    explicit = (name, sched, opts, stages, micro, system, model,
                {**ctx, "cp": 1, "cp_comm": "allgather", "layout": layout.megatron()})
    assert fingerprint(costs_of(explicit)) == BASELINE[name]
    assert replace(layout) == Layout.parse(layout.megatron())
