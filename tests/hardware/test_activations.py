"""Activations per module, as saved for backward (``hardware.activations``): hand-worked
bytes of one dense (GQA), one MoE and one MLA layer with no technique, each recompute
module alone and FP8 caching; the table summed with no technique is today's per-layer
number; the recompute modules cost their forward GEMMs again in the backward.

The three layers: h=8, 2 heads of d=4, s=4, b=1, bf16 (c=2), SwiGLU f=16, flash attention
without dropout, so ``c*s*b = 8`` and ``c*s*b*h = 64`` bytes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipetab.hardware.activations import check_modules, module_table
from pipetab.hardware.context import Context
from pipetab.hardware.layer import activation_bytes_per_layer, recompute_flops
from pipetab.hardware.loaders import load_model
from pipetab.hardware.model import TransformerModel

DENSE = TransformerModel("dense", num_layers=2, hidden=8, heads=2, kv_heads=1, seq_len=4, vocab=16, global_batch=4,
                         ffn_hidden=16, mlp="swiglu", norm="rmsnorm", bias=False, dropout=False)
MOE = replace(DENSE, name="moe", num_experts=4, experts_per_token=2, expert_ffn_hidden=8, shared_experts=1)
MLA = replace(DENSE, name="mla", kv_heads=None, q_lora_rank=4, kv_lora_rank=4, qk_rope_head_dim=2, head_dim=4,
              v_head_dim=4)
ONE = Context(microbatch_size=1)
FP8 = Context(microbatch_size=1, gemm_precision="fp8", activation_precision="fp8")
SCALED = 1 + 4 / 128  # an fp8 element and its share of a 1x128 tile's fp32 scale


def test_a_dense_gqa_layer_by_hand():
    """Norm inputs and outputs 4 x 64, Q 64, K and V one head 32 each, attention output 64,
    SwiGLU gate+up 256 and product 128, the log-sum-exp 4*a*s*b = 32: 864 bytes."""
    assert activation_bytes_per_layer(DENSE, ONE) == 864
    with_modules = {m: activation_bytes_per_layer(DENSE, ONE.replace(recompute_modules=(m,)))
                    for m in ("layernorm", "core_attn", "mlp")}
    assert with_modules == {"layernorm": 864 - 128, "core_attn": 864 - 32, "mlp": 864 - 384}
    # fp8 caching: the GEMM inputs (QKV and MLP inputs, attention output 64 each, product 128)
    assert activation_bytes_per_layer(DENSE, FP8) == pytest.approx(864 - 320 + 320 / 2 * SCALED)
    # TP2 with sequence parallelism: replicated rows halved, one K/V head each, MLP halved
    tp2 = Context(tp=2, dp=1, microbatch_size=1)
    assert activation_bytes_per_layer(DENSE, tp2) == 128 + (32 + 32 + 32 + 32) + (128 + 64) + 16
    assert activation_bytes_per_layer(DENSE, ONE.replace(recompute="full")) == 64


def test_a_moe_layer_by_hand():
    """4 experts, top 2, f_e = 8, one shared expert: 8 routed copies of 16 (input) + 32
    (gate+up) + 16 (product) + 16 (output) bytes, router probabilities 4*T*E = 64, the
    shared expert's 128 + 64: 1376 bytes."""
    assert activation_bytes_per_layer(MOE, ONE, True) == 256 + 192 + 192 + 8 * 80 + 64 + 32
    by_module = {m: activation_bytes_per_layer(MOE, ONE.replace(recompute_modules=(m,)), True)
                 for m in ("moe", "moe_act", "shared_experts", "layernorm")}
    assert by_module == {"moe": 1376 - 192 - 640 - 64, "moe_act": 1376 - 8 * 16, "shared_experts": 1376 - 192,
                         "layernorm": 1376 - 128}
    # fp8: QKV, MoE inputs, attention output, shared product 64 each; per routed copy its
    # input, SwiGLU input and product (DeepSeek-V3 3.3), not its output
    fp8 = 4 * 64 / 2 * SCALED + 8 * ((16 + 32 + 16) / 2 * SCALED + 16)
    assert activation_bytes_per_layer(MOE, FP8, True) == pytest.approx(1376 - 256 - 8 * 64 + fp8 - 8 * 16)


def test_an_mla_layer_by_hand():
    """Latents q_r + kv_r + r = 10 and their normed q_r + kv_r = 8 (replicated), Q and K of
    a(d + r) = 12, V and the output a*d_v = 8 per token: 400 + 320 + 384 + 32 = 1136 bytes."""
    assert activation_bytes_per_layer(MLA, ONE) == 1136
    assert activation_bytes_per_layer(MLA, ONE.replace(recompute_modules=("mla_up_proj",))) == 1136 - 256
    assert activation_bytes_per_layer(MLA, FP8) == pytest.approx(1136 - 384 + 384 / 2 * SCALED)


@pytest.mark.parametrize("name", ["deepseek_v3", "llama3_405b", "mixtral_8x7b", "gpt3_175b"])
def test_the_table_sums_to_the_layer_s_activation(name):
    """With no technique the table's rows add up to the per-layer formula as it stood before
    the table (``layer._kept``, the formula's terms without scores, plus the scores term
    written out here: ``4 a s b`` per GPU for fused attention, ``(c [+ c + 1 with dropout])
    a s^2 b`` classic) -- the number the costs fingerprint pins."""
    from pipetab.hardware.gemms import heads_per_gpu, local_seq
    from pipetab.hardware.layer import _kept

    model = load_model(name)
    for ctx in (Context(tp=8, dp=8, ep=8 if model.moe else 1, microbatch_size=1), Context(microbatch_size=2)):
        mb, seq, heads = ctx.microbatch_size, local_seq(model, ctx), heads_per_gpu(model, ctx.tp)
        c = model.bytes_per_param_compute
        scores = 4 * heads * seq * mb if model.attention == "flash" else \
            (c + (c + 1 if model.dropout else 0)) * heads * seq * model.seq_len * mb
        for moe in (False, True) if model.moe else (False,):
            rows = module_table(model, ctx, moe)
            assert sum(r["bytes"] for r in rows) == pytest.approx(_kept(model, ctx, moe) + scores)
            assert activation_bytes_per_layer(model, ctx, moe) == pytest.approx(_kept(model, ctx, moe) + scores)


def test_recompute_modules_cost_their_forward_gemms():
    """``mlp`` runs the up (4 x 8 by 8 x 32) and down (4 x 16 by 16 x 8) GEMMs again:
    2*4*8*32 + 2*4*16*8 = 3072 FLOPs; ``mla_up_proj`` the two up-projections
    (4 x 4 by 4 x 12 and 4 x 4 by 4 x 16): 384 + 512."""
    assert recompute_flops(DENSE, ONE.replace(recompute_modules=("mlp",))) == 3072
    assert recompute_flops(MLA, ONE.replace(recompute_modules=("mla_up_proj",))) == 2 * 4 * 4 * 12 + 2 * 4 * 4 * 16
    assert recompute_flops(DENSE, ONE) == 0


def test_techniques_that_do_not_apply_are_refused():
    """One line naming the option: MLA's module on a GQA model, fp8 caching without fp8
    GEMMs, modules with full recomputation, an unknown module."""
    with pytest.raises(ValueError, match="recompute module mla_up_proj does not apply to model 'dense'"):
        check_modules(DENSE, ONE.replace(recompute_modules=("mla_up_proj",)))
    with pytest.raises(ValueError, match=r"activation precision fp8 .* applies with gemm precision fp8 only"):
        Context(activation_precision="fp8")
    with pytest.raises(ValueError, match="recompute modules apply with selective or no recomputation"):
        Context(recompute="full", recompute_modules=("mlp",))
    with pytest.raises(ValueError, match="recompute modules must be among core_attn, layernorm"):
        Context(recompute_modules=("attention",))
    assert Context(recompute_modules="mlp,layernorm").recompute_modules == ("layernorm", "mlp")


def test_the_memory_reserve_term_by_term():
    """A dense TP8 DP2 PP4 GPU belongs to TP, DP and PP communicators: 3 x 16 channels x 2
    neighbours x 4 MiB = 384 MiB of NCCL buffers, plus the 512 MiB context, 64 MiB of
    workspaces and 2 % of an 80 GiB device; with fp8 GEMMs 2 bytes per parameter more; a
    MoE GPU at EP4 (EDP 4) adds two communicators."""
    from pipetab.hardware.reserve import communicators, memory_reserve
    from pipetab.hardware.system import Device

    mib = 2**20
    device = Device(peak_flops=1e15, compute_efficiency=0.5, compute_latency_s=0.0, mem_bandwidth=3e12,
                    mem_efficiency=0.8, mem_latency_s=0.0, memory_bytes=80 * 2**30)
    ctx = Context(tp=8, dp=2, pp=4)
    r = memory_reserve(device, ctx)
    assert r.communicators == ("TP", "DP", "PP") and r.nccl == 384 * mib
    assert r.total == pytest.approx(512 * mib + 64 * mib + 384 * mib + 0.02 * 80 * 2**30)
    assert memory_reserve(device, ctx.replace(gemm_precision="fp8"), params=10**9).fp8_copies == 2e9
    assert communicators(Context(tp=2, dp=8, ep=4), moe=True) == ("TP", "DP", "EP", "EDP")
    assert communicators(Context()) == ()


def test_a_stage_s_backward_runs_its_recompute_modules_again():
    """Two dense layers with ``mlp`` recomputed: the backward's FLOPs grow by 2 x 3072 and
    nothing else does; the stage's activation drops by 2 x 384 bytes; on the unit device
    (1 MFLOP/s, 1 MB/s, roofline) B is at least that much longer."""
    from pipetab.hardware.costs import stage_cost
    from tests.hardware.units import UNIT

    plain = stage_cost(DENSE, UNIT, ONE, 2, first=False, last=False)
    mlp = stage_cost(DENSE, UNIT, ONE.replace(recompute_modules=("mlp",)), 2, first=False, last=False)
    assert mlp.flops_backward - plain.flops_backward == 2 * 3072
    assert (mlp.flops_forward, mlp.forward_s) == (plain.flops_forward, plain.forward_s)
    assert plain.activation_bytes - mlp.activation_bytes == 2 * 384
    assert mlp.backward_s >= plain.backward_s + 2 * 3072 / 1e6 - 1e-12


@pytest.mark.parametrize("name", ["deepseek_v3", "llama3_8b"])
def test_the_head_rows_sum_to_the_last_stage_s_extra(name):
    """The final norm's and head's inputs and the logits (and, with MTP, per module its
    projection input, a MoE layer and a head again) add up to ``head_activation_bytes``."""
    from pipetab.hardware.activations import head_saved
    from pipetab.hardware.layer import head_activation_bytes

    model, ctx = load_model(name), Context(tp=2, dp=1, microbatch_size=1)
    rows = {r.name: r.nbytes / (ctx.tp if r.where == "replicated" else 1) for r in head_saved(model, ctx)}
    head = rows["final_norm_in"] + rows["head_in"] + rows["logits"]
    if model.mtp_layers:
        head += model.mtp_layers * (activation_bytes_per_layer(model, ctx, True) + rows["mtp_proj_in"] + head)
    assert head == pytest.approx(head_activation_bytes(model, ctx))


def test_each_module_s_bytes_freed_and_flops_again():
    """What a per-module choice weighs on the dense layer: ``mlp`` frees 384 bytes for
    3072 FLOPs, ``layernorm`` 128 bytes for none (a memory-bound pass), ``core_attn`` the
    32-byte log-sum-exp for the attention core again (2*b*s*s*a*(d+d) = 256 FLOPs); the
    MLA and MoE modules are not the dense model's."""
    from pipetab.hardware.layer import module_choices

    got = module_choices(DENSE, ONE)
    assert got == {"core_attn": (32, 2 * 4 * 4 * 2 * 8), "layernorm": (128, 0), "mlp": (384, 3072)}
    assert module_choices(DENSE, ONE.replace(recompute_modules=("mlp",)))["mlp"] == (0, 3072)
