"""Tensor and data parallelism: hand-worked collectives, per-GPU memory, the GPU layout,
and the pure pipeline (t = d = 1) unchanged."""

from dataclasses import replace

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.costs import stage_cost
from pipetab.hardware.layer import activation_bytes_per_layer, layer_params_per_gpu
from pipetab.hardware.model import TransformerModel
from pipetab.hardware.parallel import Topology, ring_time
from pipetab.hardware.pipeline import schedule_costs
from pipetab.hardware.system import Link, System
from pipetab.schedules import registry
from pipetab.schedules.generators.linear import one_f_one_b
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate
from tests.hardware.units import MINI, UNIT

# h=8, a=2, s=4, f=32, c=2: sbh = 32 bytes-units, small enough to work by hand
MINI = replace(MINI, global_batch=8)
FAST, SLOW = Link(bandwidth=1e3, latency_s=1e-3), Link(bandwidth=1e2, latency_s=1e-2)
# nodes of 2 GPUs: FAST inside a node, SLOW between nodes
PAIRS = System.nodes("pairs", UNIT, 2, FAST, SLOW)


def ctx(tp=1, dp=1, mb=1, **kw) -> Context:
    """The pure context of these hand-worked cases: no sequence parallelism, no ZeRO
    unless asked."""
    return Context(tp=tp, dp=dp, microbatch_size=mb, **{"sequence_parallel": False, "zero": 0, **kw})


def test_parallel_validation():
    with pytest.raises(ValueError, match="tp must be an integer >= 1, got 0"):
        Context(tp=0)
    with pytest.raises(ValueError, match="zero must be one of 0, 1, 2, 3, got 4"):
        Context(dp=2, zero=4)
    with pytest.raises(ValueError, match=r"tp 3 must divide the heads \(2\)"):
        Context(tp=3).check(MINI)
    gqa = TransformerModel("g", 2, 64, 8, 4, 16, 1, kv_heads=2)
    Context(tp=4).check(gqa)  # 4 GPUs, 2 K/V heads: each head on two GPUs
    with pytest.raises(ValueError, match="must divide one another"):
        Context(tp=4).check(TransformerModel("g", 2, 96, 12, 4, 16, 1, kv_heads=3))
    # options that cannot apply are refused, the defaults derived
    with pytest.raises(ValueError, match="sequence parallelism applies with tp > 1 only"):
        Context(sequence_parallel=True)
    with pytest.raises(ValueError, match=r"ZeRO stage 1 applies with dp > 1 \(or cp > 1\) only"):
        Context(zero=1)
    assert Context(tp=8, dp=2).sequence_parallel and Context(tp=8, dp=2).zero == 1
    assert not Context().sequence_parallel and Context().zero == 0


def test_layout_numbers_ranks_tensor_first():
    lay = Topology(System.nodes("n", UNIT, 8, FAST, SLOW), ctx(tp=2, dp=2), pp=4)
    assert lay.num_gpus == 16
    assert lay.gpu(1, 0, 0) == 1 and lay.gpu(0, 1, 0) == 2 and lay.gpu(0, 0, 1) == 4
    assert lay.tp_group(3, 1) == [14, 15] and lay.dp_group(2, 1) == [9, 11]
    # tensor groups and data-parallel groups inside a node; stages 0-1 share node 0
    assert lay.tp_link(0) == FAST and lay.dp_link(3) == FAST
    assert lay.pipeline_system.link(0, 1).latency_s == pytest.approx(1e-3 + 1e-3)
    assert lay.pipeline_system.link(1, 2).latency_s == pytest.approx(1e-2 + 1e-3)
    with pytest.raises(ValueError, match="system 'two' has 8 devices, the schedule needs 16"):
        Topology(System.nodes("two", UNIT, 4, FAST, SLOW, num_devices=8), ctx(tp=2, dp=2), pp=4)


def test_ring_collectives_by_hand():
    # all-reduce of 64 B among 2 GPUs over FAST: 2*(1/2)*64/1000 + 2*1*1 ms = 66 ms
    assert ring_time(64, 2, FAST) == pytest.approx(0.066)
    # reduce-scatter (one step) among 4 over SLOW: (3/4)*400/100 + 3*10 ms = 3.03 s
    assert ring_time(400, 4, SLOW, steps=1) == pytest.approx(3.03)
    assert ring_time(400, 1, SLOW) == 0.0


def test_pipeline_link_scatter_gather_by_hand():
    lay = Topology(PAIRS, ctx(tp=2, dp=2), pp=2)  # stage 0 on GPUs 0-3, stage 1 on 4-7
    msg = 64  # b*s*h*c of MINI at b = 1
    # each GPU sends 32 B between nodes (0.32 s + 10 ms), then the receiving pair
    # all-gathers 64 B over NVLink-like FAST ((1/2)*64/1000 + 1 ms)
    assert lay.pipeline_link(0, 1).time(msg) == pytest.approx(0.33 + 0.033)
    sp = Topology(PAIRS, ctx(tp=2, dp=2, sequence_parallel=True), pp=2)
    assert sp.pipeline_link(0, 1).time(msg) == pytest.approx(0.33)  # shards stay split


def test_korthikanti_tensor_and_sequence_parallel():
    # sbh(10 + 24/t + 5as/(ht)) = 32 * (10 + 12 + 2.5) and, with sequence parallelism,
    # sbh/t (34 + 5as/h) = 16 * 39 (Korthikanti et al. 2022, equations 2 and 4)
    assert activation_bytes_per_layer(MINI, ctx(tp=2)) == 32 * 24.5 == 784
    assert activation_bytes_per_layer(MINI, ctx(tp=2, sequence_parallel=True)) == 16 * 39
    assert activation_bytes_per_layer(MINI, ctx(tp=1)) == 32 * 39


def test_stage_on_a_tensor_parallel_pair_by_hand():
    par = ctx(tp=2)
    st = stage_cost(MINI, UNIT, par, 2, first=False, last=False, tp_link=FAST)
    # per GPU: GEMMs 2bs(2h^2 + n*h*f)/t + 2bs*2h*kv/t = 8*(320 + 64) = 3072, core 256
    assert st.flops_forward == 2 * (3072 + 256)
    # two all-reduces of b*s*h*c = 64 B per layer in F and in B, 66 ms each
    assert st.tp_comm_forward_s == pytest.approx(4 * 0.066) == pytest.approx(st.tp_comm_backward_s)
    assert st.forward_s == pytest.approx(6.656e-3 + 0.264)
    # parameters per GPU: 872 per layer split, norms (32) and row biases (16) replicated
    assert layer_params_per_gpu(MINI, par) == (872 + 48) // 2 == 460
    assert st.persistent_bytes == 920 * 16
    first = stage_cost(MINI, UNIT, par, 2, first=True, last=False, tp_link=FAST)
    assert first.tp_comm_forward_s == pytest.approx(5 * 0.066)  # + the embedding's all-reduce
    with pytest.raises(ValueError, match="needs the link its collectives use"):
        stage_cost(MINI, UNIT, par, 2, first=False, last=False)


@pytest.mark.parametrize("zero, expected", [(0, 920 * 16), (1, 920 * (2 + 2 + 6)), (2, 920 * (2 + 1 + 6))])
def test_zero_memory_per_gpu(zero, expected):
    assert ctx(tp=2, dp=2, zero=zero).persistent_bytes(MINI, 920) == expected


def test_data_parallel_tail_by_hand():
    """1F1B on 2 stages of 2 layers, one microbatch, TP 2 x DP 2 on nodes of 2 GPUs."""
    sched = one_f_one_b(2, 1)
    for zero, overlap in ((0, False), (1, False), (0, True)):
        par = ctx(tp=2, dp=2, mb=None, zero=zero, overlap=overlap)
        sc = schedule_costs(sched, PAIRS, MINI, par)  # b = 8 / (2 * 1) = 4
        assert sc.microbatch_size == 4
        params = 2 * 460 + 8 * 8  # two layers and half of the 16 x 8 embedding
        grads = 2 * params
        opt_bytes = 2 * 16 * (params if zero == 0 else params // 2)
        # the data-parallel pair of GPU 0 is GPUs 0 and 2: different nodes, SLOW
        if zero == 0:
            sync = 2 * 0.5 * grads / 1e2 + 2 * 1e-2
        else:  # reduce-scatter of gradients, all-gather of bf16 weights
            sync = (0.5 * grads / 1e2 + 1e-2) + (0.5 * 2 * params / 1e2 + 1e-2)
        if overlap:  # hidden behind stage 0's backward, at least 1/2 (two layers) exposed
            sync = max(sync - sc.stage(0, 0).backward_s, sync / 2)
        assert sc.dp_sync_s[0] == pytest.approx(sync)
        assert sc.optimizer_s[0] == pytest.approx(sync + opt_bytes / 1e6)
    costs = hardware_costs(sched, PAIRS, MINI, ctx(tp=2, dp=2, mb=None))
    sim = simulate(sched, costs)
    c0, c1 = schedule_costs(sched, PAIRS, MINI, ctx(tp=2, dp=2, mb=None)).stages[0]
    msg = Topology(PAIRS, ctx(tp=2, dp=2), 2).pipeline_link(0, 1).time(c0.fwd_message_bytes)
    chain = c0.forward_s + msg + c1.forward_s + c1.backward_s + msg + c0.backward_s
    assert sim.makespan == pytest.approx(chain + costs.optimizer_time[0])


# Values computed by pipetab before tensor and data parallelism existed (commit d143b92):
# T_sim (s) and the largest peak memory (bytes) of schedules on one GPU per stage, on the
# presets as they were then (the real systems' efficiencies have since been calibrated).
BEFORE = [
    ("gpipe", 4, 8, {}, "mid_nw_mid_cp", "paper_gpt", "none", 189.8087899516149, 53432775868416.0),
    ("1f1b", 8, 16, {}, "dgx_h100_ib", "paper_gpt", "selective", 106.75073407052486, 2391370891264.0),
    ("chimera", 4, 8, {}, "slow_nw_fast_cp", "paper_gpt", "none", 24.384477528942845, 26869369929728.0),
    ("interleaved", 4, 8, {"chunks": 2}, "dgx_h100_ib", "tiny_gpt", "full", 0.0012171407523714757, 66273280.0),
    ("hanayo", 4, 8, {"waves": 2}, "a100_cluster", "tiny_gpt", "none", 0.0015779958404446646, 243482624.0),
    ("chimera-asym", 4, 8, {"split": (1, 2)}, "fast_nw_slow_cp", "paper_gpt", "selective",
     1797.239709146759, 4879137374208.0),
]


@pytest.mark.parametrize("name, S, B, opts, system, model, rc, t_sim, peak", BEFORE)
def test_pure_pipeline_reproduces_before(name, S, B, opts, system, model, rc, t_sim, peak):
    from dataclasses import replace

    from pipetab.hardware.loaders import load_system

    sched = registry.generate(name, S, B, **opts)
    system = load_system(system)
    if system.name in ("dgx_h100_ib", "a100_cluster"):  # uncalibrated, as at d143b92
        system = replace(system, device=replace(system.device, compute_efficiency=0.7, efficiency_half_tokens=0.0,
                                                reserved_bytes=0.0, sm_count=0, compute_latency_s=1e-6,
                                                mem_efficiency=0.8, p2p_efficiency=1.0))  # the op roofline of then
    for par in (Context(recompute=rc), Context(tp=1, dp=1, zero=0, sequence_parallel=False, recompute=rc)):
        sim = simulate(sched, hardware_costs(sched, system, model, par))
        assert sim.makespan == t_sim
        assert max(sim.peak_memory) == peak


def test_gqa_swiglu_flash_layer_by_hand():
    """h=8, 4 heads of 2 (2 K/V heads: kv width 4), SwiGLU f=12, no dropout, flash, c=2."""
    from pipetab.hardware.layer import (
        head_activation_bytes,
        layer_forward_flops,
        weight_memory_bytes_per_layer,
    )

    m = TransformerModel("g", num_layers=2, hidden=8, heads=4, seq_len=4, vocab=10, global_batch=1,
                         kv_heads=2, ffn_hidden=12, mlp="swiglu", norm="rmsnorm", bias=False, dropout=False)
    # kept per token: norms and GEMM inputs 4*c*h = 64, Q + attention output 2*c*h = 32,
    # K and V 2*c*4 = 16, gate, up and product 3*c*f = 72, log-sum-exp 4 bytes x 4 heads = 16
    assert activation_bytes_per_layer(m, ctx()) == 4 * (64 + 32 + 16 + 72 + 16) == 800
    # M_W per token: X of QKV, output projection, gate/up, down: h + h + h + f; dY of them:
    # (h + 2*kv) + h + 2f + h, i.e. 6h + 3f + 2kv = 92 elements of c bytes
    assert weight_memory_bytes_per_layer(m, ctx()) == 4 * 2 * 92 == 736
    # forward FLOPs: 2*s*(2h^2 + 2*h*kv + 3*h*f) + 4*s^2*h
    assert layer_forward_flops(m, ctx()) == 2 * 4 * (128 + 64 + 288) + 4 * 16 * 8
    # the last stage keeps the head's inputs 2*c*s*h = 128 and fp32 logits 4*s*V = 160
    assert head_activation_bytes(m, ctx()) == 128 + 160
    # tp = 2: one K/V head per GPU, sequence parallelism splits the replicated part
    assert activation_bytes_per_layer(m, ctx(tp=2, sequence_parallel=True)) == 4 * (32 + 16 + 8 + 36 + 8)
