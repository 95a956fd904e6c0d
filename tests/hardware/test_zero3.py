"""ZeRO-3 / FSDP: memory per GPU and all-gather volumes per step worked by hand, the
collectives' exposed time in each op, and the tail that is left."""

from dataclasses import replace

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.costs import stage_cost
from pipetab.hardware.pipeline import schedule_costs
from pipetab.hardware.system import Link, System
from pipetab.hardware.zero3 import buffer_bytes, op_collectives, step_volumes
from pipetab.schedules.generators.linear import one_f_one_b
from tests.hardware.units import LINK, MINI, UNIT

# h=8, a=2, s=4, f=32, V=16: a layer has 4h^2 + 2hf + 9h + f = 872 parameters, the
# embedding and the head V*h = 128 each
MINI = replace(MINI, global_batch=8)


def z3(**kw) -> Context:
    return Context(dp=4, zero=3, microbatch_size=1, **kw)


def test_memory_per_gpu_by_hand():
    # stage 0 of two: layers 0-1 and the embedding, 2*872 + 128 = 1872 parameters
    assert z3().persistent_bytes(MINI, 1872) == 16 * 1872 // 4 == 7488  # weights, grads, state / 4
    assert Context(dp=4, zero=2).persistent_bytes(MINI, 1872) == 2 * 1872 + 14 * 1872 // 4
    stage0 = [(0, 2, True, False)]
    # resharding: two gathered layers (2 x 872 x 2 B) and one layer's gradient (872 x 2 B)
    assert buffer_bytes(MINI, z3(), stage0) == 2 * 872 * 2 + 872 * 2 == 5232
    # kept from F to B: every weight of the stage (1872 x 2 B) and one layer's gradient
    assert buffer_bytes(MINI, z3(reshard_after_forward=False), stage0) == 1872 * 2 + 872 * 2 == 5488
    assert buffer_bytes(MINI, Context(dp=4, zero=1), stage0) == 0
    # the schedule's devices: 1F1B on two stages, 4 microbatches of 1 sequence
    costs = schedule_costs(one_f_one_b(2, 2), System.uniform("u", UNIT, LINK), MINI, z3())
    assert costs.persistent_bytes == (7488 + 5232, 7488 + 5232)  # both stages hold 1872 parameters


def test_volumes_per_step_by_hand():
    # 2 microbatches, a gather before F and before B, (R-1)/R of 1872 x 2 B each
    gathered, reduced = step_volumes(MINI, z3(), 1872, 2)
    assert gathered == 2 * 2 * 3 / 4 * 3744 == 11232
    assert reduced == 2 * 3 / 4 * 3744 == 5616
    assert step_volumes(MINI, z3(reshard_after_forward=False), 1872, 2)[0] == 5616


def test_collectives_in_the_ops_by_hand():
    ag, rs = op_collectives(MINI, z3(), 1872, 0, (LINK, None))
    # ring, one step: 3/4 * 3744 B / 1 kB/s + 3 * 1 ms
    assert ag == pytest.approx(2.811) and rs == pytest.approx(2.811)
    stage = stage_cost(MINI, UNIT, z3(), 2, first=True, last=False, shard_links=(LINK, None))
    plain = stage_cost(MINI, UNIT, Context(dp=4, microbatch_size=1), 2, first=True, last=False)
    # the gathers dwarf the compute: all but the compute window exposed
    assert stage.forward_s == pytest.approx(2.811)
    assert stage.backward_s == pytest.approx(2 * 2.811)
    assert stage.zero3_comm_s[0] == pytest.approx(2.811 - plain.forward_s)
    # split backward: B gathers the weights, W reduce-scatters the gradients
    split = stage_cost(MINI, UNIT, z3(), 2, first=True, last=False, split_backward=True, shard_links=(LINK, None))
    assert split.backward_s == pytest.approx(2.811) and split.weight_s == pytest.approx(2.811)
    kept = stage_cost(MINI, UNIT, z3(reshard_after_forward=False), 2, first=True, last=False,
                      shard_links=(LINK, None))
    assert kept.backward_s == pytest.approx(2.811)  # only the reduce-scatter


def test_exposed_share_on_a_fast_link():
    fast = Link(bandwidth=1e9, latency_s=0.0)
    stage = stage_cost(MINI, UNIT, z3(), 2, first=True, last=False, shard_links=(fast, None))
    plain = stage_cost(MINI, UNIT, Context(dp=4, microbatch_size=1), 2, first=True, last=False)
    ag = 0.75 * 3744 / 1e9
    # prefetching hides all but the first of the stage's 3 units (2 layers, embedding)
    assert stage.forward_s == pytest.approx(plain.forward_s + ag / 3)
    assert stage.backward_s == pytest.approx(plain.backward_s + 2 * ag / 3)


def test_no_tail_but_the_optimizer():
    costs = schedule_costs(one_f_one_b(2, 2), System.uniform("u", UNIT, LINK), MINI, z3())
    assert costs.dp_sync_s == (0.0, 0.0)
    # Adam on 1872 / 4 parameters: 2 x 16 B each at 1 MB/s
    assert costs.optimizer_s == pytest.approx((2 * 16 * 468 / 1e6,) * 2)


def test_zero3_needs_replicas():
    with pytest.raises(ValueError, match="ZeRO stage 3 applies with dp > 1"):
        Context(zero=3)
    assert Context(cp=2, zero=3).replicas == 2
