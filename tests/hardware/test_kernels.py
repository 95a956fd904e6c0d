"""The kernel model: GEMM tiles and waves, kernels of a layer, stage times, fp8, the
end-of-step synchronisation and the kernel-model calibration (issue 27)."""

from dataclasses import replace

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.costs import stage_cost
from pipetab.hardware.kernels import TILE_EPILOGUE_K, gemm_efficiency, gemm_tiles, gemm_time, gemm_waves
from pipetab.hardware.layer import attention_core_flops, head_forward_flops, layer_gemm_flops
from pipetab.hardware.loaders import load_model, load_system
from pipetab.hardware.model import TransformerModel
from pipetab.hardware.overheads import end_of_step_s
from pipetab.hardware.parallel import Topology
from pipetab.hardware.parts import head_parts, layer_parts
from pipetab.hardware.system import Device
from pipetab.schedules.ops import Kind

# 4 multiprocessors of 1e6 FLOP/s each at efficiency 1, 128 x 128 tiles, 1 GB/s, 1 us launch
GPU = Device(peak_flops=4e6, compute_efficiency=1.0, compute_latency_s=1e-6, mem_bandwidth=1e9, mem_efficiency=1.0,
             mem_latency_s=0.0, memory_bytes=1e9, sm_count=4, tile_m=128, tile_n=128, fp8_peak_flops=8e6)


def test_one_tile_more_than_a_full_wave_takes_two_waves():
    # 4 SMs: 512 x 128 is 4 tiles, one wave; 640 x 128 is 5 tiles, two waves
    assert (gemm_tiles(GPU, 512, 128), gemm_waves(GPU, 512, 128)) == (4, 1)
    assert (gemm_tiles(GPU, 640, 128), gemm_waves(GPU, 640, 128)) == (5, 2)
    # a wave: every SM one tile of the whole K, 2*128*128*(K + 128) FLOPs at 1e6 FLOP/s
    wave = 2 * 128 * 128 * (1024 + TILE_EPILOGUE_K) / 1e6
    assert gemm_time(GPU, 512, 1024, 128) == pytest.approx(wave + 1e-6)
    assert gemm_time(GPU, 640, 1024, 128) == pytest.approx(2 * wave + 1e-6)
    assert gemm_time(GPU, 513, 1024, 128) == gemm_time(GPU, 640, 1024, 128)  # a partial tile costs a whole one
    assert gemm_efficiency(GPU, 640, 128) == pytest.approx(5 / 8)
    assert gemm_efficiency(GPU, 100, 100, batch=4) == pytest.approx(100 * 100 / (128 * 128))


def test_gemm_time_memory_side_and_fp8():
    # K = 1: the operands and output, 2 bytes each, dominate: (100*1 + 1*100 + 100*100) * 2 bytes at 1 GB/s
    assert gemm_time(GPU, 100, 1, 100) == pytest.approx(max(2 * 128 * 128 * 129 / 1e6, 20400 / 1e9) + 1e-6)
    # fp8: twice the peak, so half the compute time of a compute-bound GEMM
    bf16, fp8 = gemm_time(GPU, 512, 4096, 128), gemm_time(GPU, 512, 4096, 128, fp8=True)
    assert fp8 - 1e-6 == pytest.approx((bf16 - 1e-6) / 2)
    with pytest.raises(ValueError, match="fp8_peak_flops"):
        gemm_time(replace(GPU, fp8_peak_flops=0.0), 512, 4096, 128, fp8=True)
    assert gemm_time(GPU, 0, 4096, 128) == 0.0


GPT = TransformerModel("g", num_layers=4, hidden=256, heads=4, seq_len=128, vocab=1000, global_batch=8,
                       attention="classic")
LLAMA = TransformerModel("l", num_layers=4, hidden=256, heads=4, kv_heads=2, seq_len=128, vocab=1000, global_batch=8,
                         mlp="swiglu", norm="rmsnorm", bias=False, dropout=False, ffn_hidden=512)


@pytest.mark.parametrize("model", [GPT, LLAMA])
@pytest.mark.parametrize("tp", [1, 2])
def test_a_layers_gemm_kernels_do_its_gemm_flops_in_each_pass(model, tp):
    ctx = Context(tp=tp, microbatch_size=2)
    for kind in (Kind.F, Kind.B, Kind.W):
        parts = layer_parts(model, ctx, False, kind)
        weights = sum(p.gemm_flops for p in parts if p.name.startswith(("qkv", "out", "up", "down")))
        assert weights == layer_gemm_flops(model, ctx)
    core = sum(p.gemm_flops for p in layer_parts(GPT, ctx, False, Kind.F) if p.name in ("scores", "context"))
    assert core == attention_core_flops(GPT, ctx)  # classic: QK^T and PV as batched GEMMs
    backward_core = sum(p.gemm_flops for p in layer_parts(GPT, ctx, False, Kind.B) if p.name.startswith("d_"))
    assert backward_core == 2 * attention_core_flops(GPT, ctx)


def test_head_kernels_by_hand():
    ctx = Context(microbatch_size=2)
    f = {p.name: p for p in head_parts(GPT, ctx, Kind.F)}
    assert f["lm_head_f"].gemm_flops == head_forward_flops(GPT, ctx)
    # fp32 cross-entropy over T x V logits: (c + 16) bytes each forward, (c + 12) backward
    assert f["cross_entropy"].nbytes == 18 * 256 * 1000
    b = {p.name: p for p in head_parts(GPT, ctx, Kind.B)}
    assert b["cross_entropy_bwd"].nbytes == 14 * 256 * 1000
    assert [p.name for p in head_parts(GPT, ctx, Kind.W)] == ["lm_head_w"]


@pytest.mark.parametrize("model", [GPT, LLAMA])
@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_stage_times_are_the_sums_of_their_kernels(model, split, recompute):
    ctx = Context(microbatch_size=2, recompute=recompute)
    cost = stage_cost(model, GPU, ctx, 2, first=False, last=True, split_backward=split)

    def total(kinds):
        parts = [p for k in kinds for p in 2 * layer_parts(model, ctx, False, k) + head_parts(model, ctx, k)]
        return sum(p.time(GPU) for p in parts)

    assert cost.forward_s == pytest.approx(total([Kind.F]))
    assert cost.backward_s == pytest.approx(total([Kind.B] if split else [Kind.B, Kind.W]))
    assert cost.weight_s == pytest.approx(total([Kind.W]) if split else 0.0)


def test_recomputation_adds_forward_kernels_to_b():
    ctx = Context(microbatch_size=2)
    plain = layer_parts(GPT, ctx, False, Kind.B)
    sel = layer_parts(GPT, ctx.replace(recompute="selective"), False, Kind.B)
    assert [p.name for p in sel[len(plain):]] == ["scores", "softmax", "attention_dropout", "context"]
    flash = replace(GPT, attention="flash")  # flash recomputes inside its own backward
    assert layer_parts(flash, ctx.replace(recompute="selective"), False, Kind.B) == layer_parts(flash, ctx, False,
                                                                                                 Kind.B)
    full = layer_parts(GPT, ctx.replace(recompute="full"), False, Kind.B)
    assert full[len(plain):] == layer_parts(GPT, ctx, False, Kind.F)


def test_fp8_gemms_cast_their_inputs():
    ctx = Context(microbatch_size=2, gemm_precision="fp8")
    parts = {p.name: p for p in layer_parts(LLAMA, ctx, False, Kind.F)}
    assert parts["qkv_f"].fp8 and not parts["scores" if "scores" in parts else "flash_fwd"].fp8
    # the input (T x h) and the weight (h x n) read in bf16 and written in 1 byte
    qkv = parts["qkv_f"]
    assert parts["qkv_fp8_cast"].nbytes == 3 * (256 * 256 + 256 * qkv.n)
    assert "qkv_fp8_cast" not in {p.name for p in layer_parts(LLAMA, ctx, False, Kind.W)}


def test_fp8_weight_gradients_transpose_their_operands_and_accumulate_in_fp32():
    # issue 41: dW = X^T dY needs X (T x h) and dY (T x n) transposed in fp8 (1 byte read, 1 written),
    # and writes into the fp32 main gradient (read and written: 8 bytes per h x n element)
    ctx = Context(microbatch_size=2, gemm_precision="fp8")
    w = {p.name: p for p in layer_parts(LLAMA, ctx, False, Kind.W)}
    qkv = w["qkv_w"]
    t, h = 256, 256  # 2 sequences of 128 tokens, hidden 256
    assert (qkv.m, qkv.k, qkv.n) == (h, t, qkv.n) and qkv.fp8 and qkv.element_bytes == 8
    assert w["qkv_fp8_transpose"].nbytes == 2 * (t * h + t * qkv.n)
    # memory side of the GEMM: fp8 operands (h x T and T x n, 1 byte) and the fp32 output read and written
    from pipetab.hardware.kernels import gemm_terms
    _, memory = gemm_terms(GPU, h, t, qkv.n, fp8=True, bytes_per_element=8)
    assert memory == pytest.approx((h * t + t * qkv.n + 8 * h * qkv.n) / 1e9)
    bf16 = {p.name for p in layer_parts(LLAMA, Context(microbatch_size=2), False, Kind.W)}
    assert not any("fp8" in name for name in bf16)
    with pytest.raises(ValueError, match="gemm precision must be one of bf16, fp8"):
        Context(gemm_precision="fp4")


def test_end_of_step_synchronisation_by_hand():
    h100 = load_system("dgx_h100_ib")
    # 16 GPUs over two nodes: 3 all-reduces of 2*log2(16) = 8 hops of the InfiniBand latency (3 us)
    assert end_of_step_s(Topology(h100, Context(tp=8), 2)) == pytest.approx(3 * 8 * 3e-6)
    # 8 GPUs in one node: 2*3 NVLink hops (1 us)
    assert end_of_step_s(Topology(h100, Context(tp=4), 2)) == pytest.approx(3 * 6 * 1e-6)
    assert end_of_step_s(Topology(h100, Context(), 1)) == 0.0


def test_kernel_calibration_recovers_the_efficiencies_that_made_the_profile():
    from pipetab.hardware.calibrate import calibrate
    from pipetab.schedules import registry
    from pipetab.solver.pricing import costs_profile, hardware_costs

    base = load_system("a100_cluster")
    # a profile times each op alone: its kernels, without the run overhead a step adds
    truth = replace(base, device=replace(base.device, compute_efficiency=0.7, mem_efficiency=0.5, run_overhead=0.0))
    model = load_model("zb_1p5b")
    sched = registry.generate("zb-h1", 4, 8)
    ctx = Context(microbatch_size=2)
    prof = costs_profile(sched, hardware_costs(sched, truth, model, ctx), microbatch_size=2)
    prof = replace(prof, stages=tuple(replace(s, layers=n) for s, n in zip(prof.stages, (6, 6, 5, 5))))
    fit = calibrate(prof, model, base)
    assert fit.compute_efficiency == pytest.approx(0.7, rel=1e-6)
    assert fit.mem_efficiency == pytest.approx(0.5, rel=1e-6)
    assert all(abs(o.error) < 1e-6 for o in fit.ops)


def test_kernel_calibration_keeps_a_memory_efficiency_the_profile_cannot_identify():
    """Issue 44: on a kernel-priced system a profile many times slower than the GPU's peak
    (real runs measured from outside are) was refused as "faster than the system can", its
    memory coefficient coming out <= 0 and read as an efficiency of 1e+09. Forwards 2 (7) x and
    backwards 8 (10) x the priced ones: the GEMM efficiency is fitted, the memory one kept from
    the preset and reported as not identified; nothing is refused."""
    from pipetab.hardware.calibrate import calibrate
    from pipetab.schedules import registry
    from pipetab.solver.pricing import costs_profile, hardware_costs

    base = load_system("dgx_h100_ib")
    model = load_model("llama3_8b")
    sched = registry.generate("1f1b", 4, 8)
    ctx = Context(microbatch_size=1, seq_len=model.seq_len)
    prof = costs_profile(sched, hardware_costs(sched, base, model, ctx), microbatch_size=1)
    for f, b in ((2, 8), (7, 10)):  # the two that had been refused
        slow = replace(prof, stages=tuple(replace(s, forward_s=f * s.forward_s, backward_s=b * s.backward_s,
                                                  layers=8) for s in prof.stages))
        fit = calibrate(slow, model, base)
        assert 0 < fit.compute_efficiency < base.device.compute_efficiency
        assert not fit.mem_identified and fit.mem_efficiency == base.device.mem_efficiency


# ---- memory per GPU, hand-worked (Korthikanti et al. 2022's per-layer counts) --------------------
DENSE = TransformerModel("dense", num_layers=4, hidden=8, heads=2, seq_len=4, vocab=16, global_batch=4,
                         attention="classic", logit_bytes=0)
GQA = TransformerModel("gqa", num_layers=4, hidden=8, heads=4, kv_heads=2, seq_len=4, vocab=16, global_batch=4,
                       ffn_hidden=12, mlp="swiglu", norm="rmsnorm", bias=False, dropout=False, attention="classic",
                       logit_bytes=0)


@pytest.mark.parametrize("model, recompute, expected", [
    # dense GPT: 2 layers x 872 + embedding 128 = 1872 parameters x 16 bytes = 29,952; a layer keeps
    # sbh(34 + 5as/h) = 32 x 39 = 1,248 bytes, 34sbh = 1,088 with selective recomputation (no scores);
    # 1F1B on 2 devices: device 0 holds 2 microbatches of its 2 layers at the peak
    (DENSE, "none", 29952 + 2 * 2 * 1248),
    (DENSE, "selective", 29952 + 2 * 2 * 1088),
    # GQA (4 heads of 2, 2 K/V heads: kv width 4), SwiGLU f = 12, RMSNorm, no biases or dropout:
    # a layer has 2*8*8 + 2*8*4 + 3*8*12 + 2*8 = 496 parameters; stage 0: 2 x 496 + 128 = 1,120 x 16 =
    # 17,920 bytes; a layer keeps 4csbh = 256 (norm, QKV and MLP inputs), Q 64, K and V 2 x 2*4*4 = 64,
    # attention output 64, SwiGLU 3csbf = 288, scores c*a*s^2*b = 128: 864, without the scores 736
    (GQA, "none", 17920 + 2 * 2 * 864),
    (GQA, "selective", 17920 + 2 * 2 * 736),
])
def test_memory_per_gpu_by_hand(model, recompute, expected):
    from pipetab.hardware.system import Link, System
    from pipetab.schedules import registry
    from pipetab.solver.pricing import hardware_costs
    from pipetab.solver.simulate import simulate

    unit = Device(peak_flops=1e6, compute_efficiency=1.0, compute_latency_s=0.0, mem_bandwidth=1e6,
                  mem_efficiency=1.0, mem_latency_s=0.0, memory_bytes=1e9)
    for device in (unit, GPU):  # the kernel model changes times, not memory
        system = System.uniform("unit", device, Link(1e3, 1e-3))
        sched = registry.generate("1f1b", 2, 4)
        sim = simulate(sched, hardware_costs(sched, system, model, Context(microbatch_size=1, recompute=recompute)))
        assert sim.peak_memory[0] == expected
