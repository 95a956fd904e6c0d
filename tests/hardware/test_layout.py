"""Layouts: Megatron's ``pipeline_model_parallel_layout`` strings read and written, checked
against the model, and the costs of stages holding any number of layers, zero included."""

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.layout import Layout, StagePart
from pipetab.hardware.loaders import load_model
from pipetab.hardware.pipeline import schedule_costs
from pipetab.hardware.system import Link, System
from pipetab.schedules.generators.linear import one_f_one_b
from tests.hardware.units import MINI, UNIT

UNIFORM = System.uniform("unit", UNIT, Link(bandwidth=1e3, latency_s=1e-3))


@pytest.mark.parametrize("text, layers", [
    ("Ettt|(tt|)*29mL", (3,) + (2,) * 29 + (0,)),  # Megatron's docstring example, MTP with the loss
    ("E|t*4|t*4|t*4|L", (0, 4, 4, 4, 0)),
    ("E,t*3|(t*4|)*2,t*3L", (3, 4, 4, 3)),  # commas are cosmetic
    ("(Et|)*1t|tL", (1, 1, 1)),
    ("EL", (0,)),
])
def test_megatron_strings_read_and_write(text, layers):
    layout = Layout.parse(text)
    assert layout.layers == layers
    assert Layout.parse(layout.megatron()) == layout


def test_parts_and_the_written_form():
    layout = Layout.parse("E|t*4|t*4|t*4|L")
    assert layout.stages[0] == StagePart(True, 0, 0, False) and layout.stages[-1] == StagePart(False, 0, 0, True)
    assert layout.first_layers == (0, 0, 4, 8, 12)
    assert layout.megatron() == "E|(t*4|)*3L"
    # Llama 3 405B's run: 126 layers on 16 stages, one fewer on the first and the last
    meta = Layout.parse("Et*7|(t*8|)*14t*7L")
    assert meta.num_layers == 126 and meta.layers[0] == meta.layers[-1] == 7
    meta.check(load_model("llama3_405b"), 16)
    assert Layout.even(126, num_stages=16).megatron() == "Et*8|(t*8|)*13t*7|t*7L"


@pytest.mark.parametrize("text, message", [
    ("Et*3|t*4|t*4|t*3", "loss L exactly once, on its last stage"),
    ("t*3|Et*4|t*4|t*3L", "embedding E exactly once, on its first stage"),
    ("Et*3||t*4|t*4L", "stage 1 holds nothing"),
    ("Et*3|tx|t*4L", "characters 'x'"),
    ("Et*3|Lt|t*4", "must read E, then t, then m, then L"),
    ("Et*3|m|t*4L", "MTP layers m must sit on the last stage"),
    ("", "layout must be a Megatron layout string"),
])
def test_bad_strings(text, message):
    with pytest.raises(ValueError, match=message):
        Layout.parse(text)


def test_layout_must_fit_the_model_and_the_schedule():
    with pytest.raises(ValueError, match="holds 5 transformer layers t, model 'mini' has 4"):
        Layout.parse("Et*2|t*3L").check(MINI)
    with pytest.raises(ValueError, match="has 2 stages, the schedule 4"):
        Layout.parse("Et*2|t*2L").check(MINI, 4)
    with pytest.raises(ValueError, match="has 3 stages, the schedule 2"):
        schedule_costs(one_f_one_b(2, 4), UNIFORM, MINI, Context(layout="Et|t*2|tL"))


def test_empty_transformer_stages_cost_their_ends_only():
    costs = schedule_costs(one_f_one_b(4, 4), UNIFORM, MINI, Context(layout="E|t*2|t*2|L"))
    emb, mid, _, head = costs.stages[0]
    even = schedule_costs(one_f_one_b(4, 4), UNIFORM, MINI, Context())
    # the embedding's stage: no FLOPs, its lookup's traffic 2*c*b*s*h = 128 B at 1 MB/s
    assert (emb.layers, emb.flops_forward, emb.traffic_forward) == (0, 0, 128)
    assert emb.forward_s == pytest.approx(128e-6) and emb.params == 128 and emb.activation_bytes == 0
    # the head's stage: 2*b*s*h*V = 1024 FLOPs, the head's 128 parameters
    assert head.layers == 0 and head.flops_forward == 1024 and head.params == 128
    assert (mid.layers, mid.first_layer) == (2, 0) and costs.stages[0][2].first_layer == 2
    assert mid.flops_forward == 2 * even.stages[0][1].flops_forward
    assert sum(costs.persistent_bytes) == sum(even.persistent_bytes)
