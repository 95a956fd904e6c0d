"""``hardware_op_times``: the op times and chains of ``hardware_costs`` without pricing the
devices' tails and memory (what plan's first bound reads)."""

from dataclasses import replace

import pytest

from pipetab.hardware import load_model
from pipetab.hardware.context import Context
from pipetab.schedules import registry
from pipetab.solver.pricing import hardware_costs, hardware_op_times


@pytest.mark.parametrize("name, opts, model, ctx", [
    ("1f1b", {}, "llama3_8b", Context(tp=2, dp=2, zero=1, microbatch_size=1)),
    ("zbv", {}, "llama3_8b", Context(tp=1, dp=4, zero=3, microbatch_size=1)),
    ("dualpipev", {}, "mixtral_8x7b", Context(tp=1, dp=4, ep=4, microbatch_size=1)),
])
def test_op_times_are_those_of_the_full_pricing(name, opts, model, ctx):
    m = replace(load_model(model), num_layers=16, seq_len=2048)
    sched = registry.generate(name, 4, 16, **opts)
    ctx = replace(ctx, global_batch=16 * ctx.dp)
    full = hardware_costs(sched, "dgx_h100_ib", m, ctx)
    op_time, chains = hardware_op_times(sched, "dgx_h100_ib", m, ctx)
    assert op_time == full.op_time and chains == full.chains
    assert len(op_time) == sum(len(w) for w in sched.stage_work) * (3 if sched.split_backward else 2)
