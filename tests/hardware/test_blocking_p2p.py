"""Pipeline messages as Megatron-LM sends them (issue 41): blocking sends (``Context.overlap_p2p``
False) and NCCL's send/receive share of NVLink (``Device.p2p_efficiency``), worked by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipetab.hardware import Context, load_model, load_system, schedule_costs
from pipetab.hardware.parallel import Topology
from pipetab.schedules import registry

# zb_1p5b: hidden 2304; a microbatch of 6 sequences of 1024 tokens in bf16 sends
# 6 x 1024 x 2304 x 2 = 28,311,552 bytes between stages
MESSAGE = 6 * 1024 * 2304 * 2


def _stages(ctx: Context, efficiency: float = 1.0):
    a100 = load_system("a100_cluster")
    a100 = replace(a100, device=replace(a100.device, p2p_efficiency=efficiency))
    sched = registry.generate("1f1b", 2, 4)
    return schedule_costs(sched, a100, load_model("zb_1p5b"), ctx).stages[0]


def test_a_blocking_send_holds_its_sender_for_the_message():
    """Two stages on one node (NVLink 300 GB/s, 1 us): stage 0's forward lasts its compute
    plus 28,311,552 / 300e9 + 1e-6 = 95.372 us, stage 1's backward the same; the message is
    then inside the op (0 bytes left), and the ends send nothing extra."""
    ctx = dict(microbatch_size=6, seq_len=1024)
    free, blocking = _stages(Context(**ctx)), _stages(Context(**ctx, overlap_p2p=False))
    assert free[0].fwd_message_bytes == MESSAGE == free[1].bwd_message_bytes
    hop = MESSAGE / 300e9 + 1e-6
    assert hop == pytest.approx(95.372e-6, abs=1e-9)
    assert blocking[0].forward_s - free[0].forward_s == pytest.approx(hop, rel=1e-12)
    assert blocking[1].backward_s - free[1].backward_s == pytest.approx(hop, rel=1e-12)
    assert (blocking[0].backward_s, blocking[1].forward_s) == (free[0].backward_s, free[1].forward_s)
    assert (blocking[0].fwd_message_bytes, blocking[1].bwd_message_bytes) == (0, 0)


def test_blocking_sends_at_nccls_share_of_nvlink():
    """At p2p_efficiency 0.154 the same hop is 28,311,552 / (0.154 x 300e9) + 1e-6 = 613.80 us."""
    ctx = dict(microbatch_size=6, seq_len=1024)
    free = _stages(Context(**ctx), 0.154)
    blocking = _stages(Context(**ctx, overlap_p2p=False), 0.154)
    hop = MESSAGE / (0.154 * 300e9) + 1e-6
    assert hop == pytest.approx(613.80e-6, abs=1e-8)
    assert blocking[0].forward_s - free[0].forward_s == pytest.approx(hop, rel=1e-12)


def test_p2p_efficiency_slows_pipeline_messages_inside_a_node_only():
    """a100_cluster (p2p_efficiency fitted): a pipeline hop inside a node runs at 0.154 x 300
    = 46.2 GB/s, one between nodes at InfiniBand's 25 GB/s as before; the TP all-reduce of
    a node's 8 GPUs keeps NVLink's full rate."""
    a100 = load_system("a100_cluster")
    assert a100.device.p2p_efficiency == 0.154
    topo = Topology(a100, Context(), 16)
    assert topo.pipeline_link(0, 1).bandwidth == pytest.approx(46.2e9)
    assert topo.pipeline_link(7, 8).bandwidth == 25e9
    assert topo.pipeline_system.message_time(0, 1, 46.2e6) == pytest.approx(1e-3 + 1e-6)
    nominal = replace(a100, device=replace(a100.device, p2p_efficiency=1.0))
    tp = Context(tp=8, sequence_parallel=False)
    assert Topology(a100, tp, 1).collective(list(range(8)), 1e9) == Topology(nominal, tp, 1).collective(
        list(range(8)), 1e9)
