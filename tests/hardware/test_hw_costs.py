"""Cost model: FLOPs, traffic, activation and persistent bytes, schedule_costs."""

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.costs import (
    activation_bytes_per_layer,
    allreduce_time,
    attention_core_flops,
    head_forward_flops,
    layer_forward_flops,
    layer_forward_traffic,
    message_bytes,
    optimizer_time,
    ring_allreduce_time,
    stage_cost,
)
from pipetab.hardware.loaders import load_model
from pipetab.hardware.pipeline import schedule_costs
from pipetab.hardware.system import Link, System
from pipetab.schedules.generators.linear import gpipe, one_f_one_b
from pipetab.schedules.ops import B, F, W
from pipetab.schedules.schedule import Placement, Schedule
from tests.hardware.units import LINK, MINI, UNIT

# h=8, a=2, s=4, V=16, f=32: small enough to work every number by hand; the GPT family
# with classic (score-storing) attention and no loss activation, as before model families
# 1 MFLOP/s, 1 MB/s, no latencies, efficiency 1: a time is FLOPs/1e6 or bytes/1e6 seconds
UNIFORM = System.uniform("unit", UNIT, LINK)


def mb(b: int, recompute: str = "none") -> Context:
    """One GPU per stage, microbatches of ``b`` sequences."""
    return Context(microbatch_size=b, recompute=recompute)


def test_flops_by_hand():
    # 24*b*s*h^2 + 4*b*s^2*h = 24*1*4*64 + 4*1*16*8 = 6144 + 512
    assert layer_forward_flops(MINI, mb(1)) == 6656
    assert layer_forward_flops(MINI, mb(3)) == 3 * 6656
    # LM head 2*b*s*h*V = 2*1*4*8*16
    assert head_forward_flops(MINI, mb(1)) == 1024


def test_traffic_and_message_by_hand():
    # c*P_layer + c*b*s*(18h + 4f) = 2*872 + 2*1*4*(144 + 128) = 1744 + 2176
    assert layer_forward_traffic(MINI, mb(1)) == 3920
    # b*s*h*c = 1*4*8*2
    assert message_bytes(MINI, mb(1)) == 64


def test_korthikanti_activation_by_hand():
    # s*b*h*(34 + 5*a*s/h) = 4*1*8*(34 + 5*2*4/8) = 32*39
    assert activation_bytes_per_layer(MINI, mb(1)) == 1248
    assert activation_bytes_per_layer(MINI, mb(1, "selective")) == 34 * 32
    assert activation_bytes_per_layer(MINI, mb(1, "full")) == 2 * 32
    tiny = load_model("tiny_gpt")  # s=128, h=256, a=4; b=2: sbh = 65536, 5as/h = 10
    assert activation_bytes_per_layer(tiny, mb(2)) == 65536 * 44 == 2_883_584
    with pytest.raises(ValueError, match="recompute must be one of none, selective, full, got 'some'"):
        activation_bytes_per_layer(MINI, mb(1, "some"))


def test_stage_cost_by_hand():
    mid = stage_cost(MINI, UNIT, mb(1), 2, first=False, last=False)
    # F: 2*6656 FLOPs = 13.312 ms vs 2*3920 B = 7.84 ms -> compute-bound
    assert mid.flops_forward == 13312 and mid.traffic_forward == 7840
    assert mid.forward_s == pytest.approx(13.312e-3)
    assert mid.backward_s == pytest.approx(2 * 13.312e-3)  # backward = 2x forward
    assert mid.weight_s == 0.0
    assert mid.fwd_message_bytes == mid.bwd_message_bytes == 64
    assert mid.activation_bytes == 2 * 1248
    assert mid.persistent_bytes == 2 * 872 * 16

    first = stage_cost(MINI, UNIT, mb(1), 2, first=True, last=False)
    assert first.bwd_message_bytes == 0 and first.fwd_message_bytes == 64
    # (2 layers + embedding 16*8) params * 16 bytes
    assert first.params == 2 * 872 + 128 and first.persistent_bytes == (2 * 872 + 128) * 16
    assert first.flops_forward == mid.flops_forward  # the lookup costs no FLOPs

    last = stage_cost(MINI, UNIT, mb(1), 2, first=False, last=True)
    assert last.fwd_message_bytes == 0
    assert last.flops_forward == 13312 + 1024

    split = stage_cost(MINI, UNIT, mb(1), 2, first=False, last=False, split_backward=True)
    # Zero Bubble paper, Table 1: B = GEMMs + 2 x attention core, W = GEMMs
    # (per layer GEMMs 24*b*s*h^2 = 6144, core 4*b*s^2*h = 512)
    assert split.flops_backward == 2 * (6144 + 2 * 512) == 14336
    assert split.flops_weight == 2 * 6144
    assert split.flops_backward + split.flops_weight == 2 * split.flops_forward
    assert split.backward_s == pytest.approx(14.336e-3) and split.weight_s == pytest.approx(12.288e-3)

    sel = stage_cost(MINI, UNIT, mb(1, "selective"), 2, first=False, last=False)
    assert sel.flops_backward == 2 * 13312 + 2 * 512  # + 4*b*s^2*h per layer
    full = stage_cost(MINI, UNIT, mb(1, "full"), 2, first=False, last=False)
    assert full.flops_backward == 3 * 13312
    assert full.activation_bytes == 2 * 64


def test_ring_allreduce_by_hand():
    # R=4: 2*3/4 * 1000 B / 1000 B/s + 2*3*1 ms = 1.5 s + 6 ms
    assert ring_allreduce_time(1000, 4, LINK) == pytest.approx(1.506)
    assert ring_allreduce_time(1000, 1, LINK) == 0.0
    # the ring runs at its slowest hop
    s = System("n", UNIT, Link(10, 0.5), links={(0, 1): Link(100, 0.0)})
    assert allreduce_time(s, [1, 0], 100) == pytest.approx(100 / 100)  # R=2, both hops fast
    # ring 0-1-2-0: hops 1-2 and 2-0 use the default 10 B/s, 0.5 s link
    assert allreduce_time(s, [2, 1, 0], 100) == pytest.approx(2 * 2 / 3 * 100 / 10 + 2 * 2 * 0.5)
    assert allreduce_time(s, [3, 3], 100) == 0.0


def test_optimizer_by_hand():
    # memory-bound: 2 * 16 B/param * 1000 params / 1e6 B/s
    assert optimizer_time(UNIT, MINI, 1000) == pytest.approx(0.032)


def test_schedule_costs_1f1b():
    tiny = load_model("tiny_gpt")
    sched = one_f_one_b(4, 8)
    c = schedule_costs(sched, UNIFORM, tiny)
    assert c.microbatch_size == 8
    assert [st.layers for st in c.stages[0]] == [4, 4, 4, 4]
    assert [st.first_layer for st in c.stages[0]] == [0, 4, 8, 12]
    assert c.stage(0, 0).has_embedding and c.stage(0, 3).has_head
    assert c.allreduces == () and c.allreduce_s(0, 1) == 0.0
    lp = tiny.layer_params
    assert c.persistent_bytes == (
        (4 * lp + tiny.embedding_params) * 16, 4 * lp * 16, 4 * lp * 16,
        (4 * lp + tiny.head_params) * 16,
    )
    assert c.optimizer_s[1] == pytest.approx(optimizer_time(UNIT, tiny, 4 * lp))
    assert c.op_time(F(0, 2)) == c.stage(0, 2).forward_s
    assert c.op_time(B(0, 2)) == c.stage(0, 2).backward_s
    with pytest.raises(ValueError, match="backward is not split"):
        c.op_time(W(0, 2))
    msg = c.stage(0, 0).fwd_message_bytes
    assert msg == 8 * 128 * 256 * 2
    assert c.message_time(0, 1, msg) == pytest.approx(msg / 1e3 + 1e-3)
    assert c.message_time(1, 1, msg) == 0.0
    # GPipe and 1F1B cost the same per op
    assert schedule_costs(gpipe(4, 8), UNIFORM, tiny).stages == c.stages


def test_schedule_costs_errors():
    tiny = load_model("tiny_gpt")
    with pytest.raises(ValueError, match=r"global batch 64 .* 3 equal microbatches"):
        schedule_costs(one_f_one_b(4, 3), UNIFORM, tiny)
    small = System.uniform("two", UNIT, LINK, num_devices=2)
    with pytest.raises(ValueError, match="system 'two' has 2 devices, the schedule needs 4"):
        schedule_costs(one_f_one_b(4, 8), small, tiny)
    with pytest.raises(ValueError, match="cannot split 16 layers into 32 stages"):
        schedule_costs(one_f_one_b(32, 32), UNIFORM, tiny)


def manual_chimera(stages: int, microbatches: int) -> Schedule:
    """Chimera's placement (down: stage s on device s; up: stage s on device S-1-s), first
    half of the microbatches down, second half up; per-device order is irrelevant here."""
    down, up = tuple(range(stages)), tuple(reversed(range(stages)))
    placement = Placement((down, up), stages)
    m2p = tuple(0 if m < microbatches // 2 else 1 for m in range(microbatches))
    orders = [[] for _ in range(stages)]
    for m, p in enumerate(m2p):
        for s in range(stages):
            orders[placement.device(p, s)] += [F(m, s, p), B(m, s, p)]
    return Schedule("chimera-manual", placement, m2p, tuple(map(tuple, orders)))


def chimera(stages: int, microbatches: int) -> Schedule:
    from pipetab.schedules import registry

    return registry.generate("chimera", stages, microbatches)


@pytest.mark.parametrize("make", [manual_chimera, chimera])
def test_chimera_persistent_is_twice_1f1b(make):
    tiny = load_model("tiny_gpt")
    ch = schedule_costs(make(4, 8), UNIFORM, tiny)
    base = schedule_costs(one_f_one_b(4, 8), UNIFORM, tiny)
    assert ch.persistent_bytes == tuple(2 * b for b in base.persistent_bytes)
    # stage s of both pipelines holds the same layers: one all-reduce per stage, between
    # devices s and S-1-s, ring with R=2: n/BW + 2L
    assert [a.members for a in ch.allreduces] == [((0, s), (1, s)) for s in range(4)]
    assert [a.devices for a in ch.allreduces] == [(0, 3), (1, 2), (1, 2), (0, 3)]
    first = ch.allreduces[0]
    assert first.embedding and not first.head and first.layers == (0, 4)
    assert first.nbytes == (4 * tiny.layer_params + tiny.embedding_params) * 2
    assert first.time_s == pytest.approx(first.nbytes / 1e3 + 2e-3)
    assert ch.allreduces[3].head
    assert ch.allreduce_s(1, 0) == first.time_s
    assert ch.device_allreduce_s(0) == pytest.approx(first.time_s + ch.allreduces[3].time_s)
    # each device updates both of its replicas
    assert ch.optimizer_s[1] == pytest.approx(optimizer_time(UNIT, tiny, 8 * tiny.layer_params))


def test_uneven_replicas_grouped_by_layer_ranges():
    # down works [1, 2] -> (5, 11) layers, up works [2, 1] -> (11, 5), tiny has 16 layers
    tiny = load_model("tiny_gpt")
    placement = Placement(((0, 1), (1, 0)), 2)
    orders = ([F(0, 0), F(1, 1, 1), B(1, 1, 1), B(0, 0)], [F(1, 0, 1), F(0, 1), B(0, 1), B(1, 0, 1)])
    sched = Schedule("asym", placement, (0, 1), tuple(map(tuple, orders)),
                     stage_work=((1.0, 2.0), (2.0, 1.0)))
    c = schedule_costs(sched, UNIFORM, tiny)
    assert [st.layers for st in c.stages[0]] == [5, 11]
    assert [st.layers for st in c.stages[1]] == [11, 5]
    groups = [(a.members, a.layers, a.devices) for a in c.allreduces]
    assert groups == [
        (((0, 0), (1, 0)), (0, 5), (0, 1)),
        (((0, 1), (1, 0)), (5, 11), (1,)),  # both copies on device 1: local, 0 s
        (((0, 1), (1, 1)), (11, 16), (0, 1)),
    ]
    assert c.allreduces[1].time_s == 0.0
    assert sum(a.params for a in c.allreduces) == tiny.total_params


def test_split_backward_schedule():
    tiny = load_model("tiny_gpt")
    placement = Placement(((0, 1),), 2)
    orders = ((F(0, 0), B(0, 0), W(0, 0)), (F(0, 1), B(0, 1), W(0, 1)))
    sched = Schedule("zb-mini", placement, (0,), orders, split_backward=True)
    c = schedule_costs(sched, UNIFORM, tiny)  # 1 microbatch of 64 sequences
    st = c.stage(0, 1)
    assert c.microbatch_size == 64
    assert st.weight_s > 0 and c.op_time(W(0, 1)) == st.weight_s
    assert st.flops_backward + st.flops_weight == 2 * st.flops_forward
    assert st.flops_backward - st.flops_weight == 2 * 8 * attention_core_flops(tiny, mb(64))  # 8 layers
