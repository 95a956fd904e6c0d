"""Context parallelism: the K/V exchange per ring step and per layer worked by hand, the
per-GPU work and activations of ``s/cp`` tokens, the links each group spans, Megatron's
rank order and the expert groups over ``tp x cp x dp``."""

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.costs import activation_bytes_per_layer, attention_core_flops, layer_gemm_flops, stage_cost
from pipetab.hardware.cp import kv_bytes, layer_cp_comm, ring_step
from pipetab.hardware.moe import edp_group, ep_group
from pipetab.hardware.parallel import Topology
from pipetab.hardware.system import Link, System
from tests.hardware.units import LINK, MINI, UNIT

# h=8, a=2 (d=4, MHA), s=4, f=32, V=16: classic attention, no loss activation


def cp2(**kw) -> Context:
    return Context(cp=2, microbatch_size=1, **kw)


def test_work_and_activations_of_a_rank_by_hand():
    # a rank holds s/cp = 2 tokens: GEMMs 24*b*(s/2)*h^2 = 24*2*64; its 2 queries meet all 4 keys:
    # core 2*b*(s/2)*s*a*(d+d) = 2*2*4*2*8 = 256, half of 4*b*s^2*h = 512
    assert layer_gemm_flops(MINI, cp2()) == 3072 == layer_gemm_flops(MINI, Context(microbatch_size=1)) // 2
    assert attention_core_flops(MINI, cp2()) == 256
    # Korthikanti's s*b*h*(34 + 5as/h) with s -> 2 everywhere but the scores' key length:
    # 2*8*34 + 5*a*2*4 = 544 + 80 = 624, half of 1248
    assert activation_bytes_per_layer(MINI, cp2()) == 624


def test_ring_step_by_hand():
    # K and V of 2 tokens, 2 heads of 4 each, 2 bytes: 2*1*2*(2*2*4) = 64 bytes
    assert kv_bytes(MINI, cp2()) == 64
    # forward: core 256 FLOPs = 256 us at 1 MFLOP/s, 128 us per step; the chunk takes
    # 64 B / 1 kB/s + 1 ms = 65 ms: 1 exposed transfer of 65 - 0.128 ms
    fwd = ring_step(MINI, cp2(), LINK, 256e-6, backward=False)
    assert fwd.compute_s == pytest.approx(128e-6) and fwd.transfer_bytes == 64
    assert fwd.transfer_s == pytest.approx(0.065) and fwd.exposed_s == pytest.approx(0.065 - 128e-6)
    # backward: K, V and their gradients (128 B, 129 ms) against 2 x the core (256 us per step)
    bwd = ring_step(MINI, cp2(), LINK, 512e-6, backward=True)
    assert bwd.transfer_bytes == 128 and bwd.exposed_s == pytest.approx(0.129 - 256e-6)
    # what a layer adds (classic attention: backward core = 2 x forward)
    assert layer_cp_comm(MINI, UNIT, cp2(), LINK, 256, 4, flash=False) == pytest.approx(
        (0.065 - 128e-6, 0.129 - 256e-6))
    # a fast link hides the transfer under the step's attention
    fast = Link(bandwidth=1e9, latency_s=0.0)
    assert layer_cp_comm(MINI, UNIT, cp2(), fast, 256, 4, flash=False) == (0.0, 0.0)


def test_all_gather_by_hand():
    # Llama 3: all-gather of cp*kv = 128 B (ring, one step: 1/2 * 128 B / 1 kB/s + 1 ms),
    # backward: gathered again and the gradients reduce-scattered
    ag = cp2(cp_comm="allgather")
    assert layer_cp_comm(MINI, UNIT, ag, LINK, 256, 4, flash=False) == pytest.approx((0.065, 0.130))


def test_stage_cost_adds_the_exchange():
    one = stage_cost(MINI, UNIT, Context(microbatch_size=1), 1, first=False, last=False)
    two = stage_cost(MINI, UNIT, cp2(), 1, first=False, last=False, cp_link=LINK)
    # compute-bound forward: (3072 + 256) FLOPs = 3.328 ms, plus the exposed transfer
    assert two.flops_forward == 3328 and two.forward_s == pytest.approx(3.328e-3 + 0.065 - 128e-6)
    assert two.cp_comm_forward_s == pytest.approx(0.065 - 128e-6)
    assert two.activation_bytes == one.activation_bytes / 2
    assert two.fwd_message_bytes == one.fwd_message_bytes  # the whole device's activation
    assert two.params == one.params  # context ranks hold the same layers
    full = stage_cost(MINI, UNIT, cp2(recompute="full"), 1, first=False, last=False, cp_link=LINK)
    assert full.cp_comm_backward_s == pytest.approx(two.cp_comm_backward_s + two.cp_comm_forward_s)
    with pytest.raises(ValueError, match="context-parallel group of 2 GPUs needs the link"):
        stage_cost(MINI, UNIT, cp2(), 1, first=False, last=False)


def test_sequence_must_split_into_two_cp_chunks():
    with pytest.raises(ValueError, match=r"cp 4 must split the sequence of 4 tokens into 2 x cp = 8"):
        Context(cp=4, microbatch_size=1).check(MINI)
    Context(cp=2, microbatch_size=1).check(MINI)


def test_groups_follow_megatron_order_and_span_links():
    nodes = System.nodes("c", UNIT, 4, Link(1e6, 0.0), LINK, 16)
    # tp 2, cp 2, dp 2: GPU = t + 2*(k + 2*(j + 2*r))
    topo = Topology(nodes, Context(tp=2, cp=2, dp=2), 2)
    assert topo.tp_group(1, 1, 1) == [14, 15] and topo.cp_group(0, 1, 1) == [5, 7]
    assert sorted(topo.dp_group(0, 0)) == [0, 2, 4, 6]  # the dp x cp GPUs holding the same weights
    assert topo.cp_link(0) == Link(1e6, 0.0)  # {0, 2}: one node
    assert topo.dp_link(0) == LINK  # {0, 2, 4, 6}: two nodes
    # tp 4 fills a node: the context ranks sit on different nodes
    assert Topology(nodes, Context(tp=4, cp=2), 2).cp_link(0) == LINK
    # a stage's message: tp x cp pairs each carry 1/4 of it over the inter-node link
    assert Topology(nodes, Context(tp=2, cp=2, dp=2), 2).pipeline_link(0, 1) == Link(4e3, 1e-3)


def test_experts_regroup_tp_cp_dp():
    ctx = Context(tp=2, cp=2, dp=2, ep=4, microbatch_size=1)
    assert ctx.edp == 2
    topo = Topology(System.uniform("u", UNIT, LINK, 16), ctx, 2)
    assert ep_group(topo, 1) == [8, 9, 10, 11] and edp_group(topo, 0) == [0, 4]
    with pytest.raises(ValueError, match=r"must divide tp x cp x dp \(2 x 2 x 1\)"):
        Context(tp=2, cp=2, ep=8)


def test_periodic_links_equal_the_enumerated_ones():
    # a pair override that changes nothing (0 and 1 share a node) turns the residue shortcut off
    base = System.nodes("c", UNIT, 4, Link(1e6, 0.0), LINK, 64)
    plain = System("p", UNIT, LINK, 64, {(0, 1): Link(1e6, 0.0)}, 4, Link(1e6, 0.0))
    for tp, cp, dp in [(1, 2, 4), (2, 2, 2), (2, 1, 4), (4, 2, 1), (1, 4, 2), (2, 4, 1), (1, 1, 8)]:
        for pp in (1, 2, 4):
            a, b = Topology(base, Context(tp=tp, cp=cp, dp=dp), pp), Topology(plain, Context(tp=tp, cp=cp, dp=dp), pp)
            assert a.period == 4 and b.period is None
            for r in range(pp):
                assert (a.tp_link(r), a.cp_link(r), a.dp_link(r)) == (b.tp_link(r), b.cp_link(r), b.dp_link(r))
                for r2 in range(r + 1, pp):
                    assert a.pipeline_link(r, r2) == b.pipeline_link(r, r2)
