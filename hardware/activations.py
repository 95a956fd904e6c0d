"""What each module of a layer saves for the backward, per GPU for one microbatch.

One table (``layer_saved``) lists, for a dense, GQA, MoE or MLA layer, every tensor the
backward needs, in the precision it is kept, with where it lives and which of Megatron-LM's
``--recompute-modules`` drops it. Summed with no technique on it gives ``hardware.layer``'s
per-layer activation exactly (Korthikanti et al. 2022, generalized; the formula is in that
module's docstring); the techniques act on its rows:

* **Recompute modules** (Megatron-LM ``--recompute-granularity selective
  --recompute-modules ...``; ``Context.recompute_modules``): the module keeps its input
  and drops what it saves inside; its forward runs again in the backward
  (``RECOMPUTED_GEMMS``, ``RECOMPUTED_PARTS``: the GEMMs and memory-bound kernels that
  run again, priced by ``hardware.costs`` and ``hardware.parts``).

  ==============  ===============================================================
  module          drops
  ==============  ===============================================================
  core_attn       the attention scores (classic) or flash's fp32 log-sum-exp
  layernorm       the two norms' outputs (the QKV and the MLP/MoE inputs)
  mla_up_proj     MLA's Q, K, V (the up-projections' outputs and their RoPE)
  mlp             a dense MLP's intermediates (activation input and output)
  shared_experts  the shared experts' intermediates
  moe             the whole MoE block: router probabilities, dispatched tokens,
                  routed experts' intermediates and outputs, shared experts
  moe_act         the routed experts' activation output (the down GEMM's input)
  ==============  ===============================================================

  ``Recompute.SELECTIVE`` is ``core_attn`` on classic attention (as today: with fused
  attention it changes nothing). A tensor two modules could drop is dropped once.
* **FP8 caching** (``Context.activation_precision`` fp8, with fp8 GEMMs): every GEMM's
  saved input is kept in fp8, 1 byte plus an fp32 scale per 128 elements (DeepSeek-V3
  technical report §3.3: "cache the activations in FP8 for the backward pass of the
  Linear operator", 1x128 tiles; Transformer Engine keeps the quantized input of its
  fp8 ``Linear`` for the backward), and the routed experts' SwiGLU inputs (the same
  section: "we cache the inputs of the SwiGLU operator [in MoE] ... also stored in FP8").
  Norm inputs, attention operands, the dense and shared MLPs' activation inputs, the
  experts' outputs and the router's probabilities stay in their precision; the dispatched
  tokens keep the smaller of the dispatch precision and fp8.
* **Sequence / context parallelism**: replicated rows are split ``t`` ways with sequence
  parallelism (the ceiling of their sum, as ``hardware.layer``); every row is of the
  ``s/cp`` tokens a context-parallel rank runs.

Rows (``Saved.where``): ``replicated`` (``c*s*b*h``-like, split by SP), ``split`` (TP
split), ``routed`` (per routed token copy, times ``hardware.gemms.routed_rows``),
``router`` and ``scores``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .context import Context, Precision, Recompute
from .gemms import (
    ceil_share,
    check_mb,
    filled,
    heads_per_gpu,
    kv_heads_per_gpu,
    local_seq,
    routed_rows,
    sp_share,
    whole,
)

if TYPE_CHECKING:
    from .model import TransformerModel

# the GEMMs (``hardware.gemms`` names) and memory-bound kernels (``hardware.parts`` names)
# each recompute module runs again in the backward; core_attn runs the attention core again
RECOMPUTED_GEMMS: dict[str, tuple[str, ...]] = {
    "core_attn": (), "layernorm": (), "mla_up_proj": ("q_up", "kv_up"), "mlp": ("up", "down"),
    "shared_experts": ("shared_up", "shared_down"),
    "moe": ("router", "shared_up", "shared_down", "experts_up", "experts_down"), "moe_act": ()}
RECOMPUTED_PARTS: dict[str, tuple[str, ...]] = {
    "core_attn": (), "layernorm": ("norms",), "mla_up_proj": ("rotary",), "mlp": ("activation",),
    "shared_experts": ("shared_activation",),
    "moe": ("router_topk", "permute", "expert_activation", "shared_activation"),
    "moe_act": ("expert_activation",)}
FP8_CACHE = Precision.FP8.bytes_per_element  # 1 byte + an fp32 scale per 128 elements


class Saved(NamedTuple):
    """One tensor a layer saves for its backward: ``name``, ``nbytes`` in the compute
    precision (per routed copy for ``routed`` rows), ``where`` it lives (module docstring),
    the recompute modules that drop it, and whether FP8 caching keeps it in fp8 (a GEMM's
    input, or the routed experts' SwiGLU input)."""

    name: str
    nbytes: float
    where: str
    dropped_by: tuple[str, ...] = ()
    gemm_input: bool = False


def _attention(model: TransformerModel, ctx: Context, csb: int) -> list[Saved]:
    """Q, K, V and the attention output (TP split), MLA's latents (replicated)."""
    a = heads_per_gpu(model, ctx.tp)
    if not model.mla:
        d, kv = filled(model.head_dim), kv_heads_per_gpu(model, ctx.tp) * filled(model.head_dim)
        return [Saved("q", csb * a * d, "split"), Saved("k", csb * kv, "split"), Saved("v", csb * kv, "split"),
                Saved("attn_out", csb * a * d, "split", (), True)]
    qk, dv, up = model.qk_head_dim, filled(model.v_head_dim), ("mla_up_proj",)
    qr, kvr, r = model.q_lora_rank, model.kv_lora_rank, model.qk_rope_head_dim
    return [Saved("mla_latents", csb * (qr + kvr + r), "replicated"),
            Saved("mla_latents_normed", csb * (qr + kvr), "replicated", (), True),
            Saved("q", csb * a * qk, "split", up), Saved("k", csb * a * qk, "split", up),
            Saved("v", csb * a * dv, "split", up), Saved("attn_out", csb * a * dv, "split", (), True)]


def _mlp(model: TransformerModel, ctx: Context, csb: int, moe: bool) -> list[Saved]:
    """A dense MLP's intermediates, or a MoE layer's shared experts' (as an MLP of ``S*f_e``)."""
    n = model.mlp_matrices
    ffn = model.shared_experts * filled(model.expert_ffn_hidden) if moe else filled(model.ffn_hidden)
    if ffn == 0:
        return []
    modules = ("shared_experts", "moe") if moe else ("mlp",)
    name = "shared" if moe else "mlp"
    whole, out = ceil_share(n * ffn, ctx.tp), ceil_share(ffn, ctx.tp)
    return [Saved(f"{name}_act_in", csb * (whole - out), "split", modules),
            Saved(f"{name}_act_out", csb * out, "split", modules, True)]


def _experts(model: TransformerModel, ctx: Context) -> list[Saved]:
    """Per routed token copy: its dispatched input, intermediates and output; the router's
    fp32 probabilities."""
    c, h, n = model.bytes_per_param_compute, model.hidden, model.mlp_matrices
    f = ceil_share(filled(model.expert_ffn_hidden), ctx.etp)
    router = 4 * check_mb(ctx.microbatch_size) * local_seq(model, ctx) / ctx.tp * model.num_experts
    return [Saved("dispatched", ctx.dispatch_precision.bytes_per_element * h, "routed", ("moe",), True),
            Saved("expert_act_in", c * (n - 1) * f, "routed", ("moe",), True),
            Saved("expert_act_out", c * f, "routed", ("moe", "moe_act"), True),
            Saved("expert_out", c * h, "routed", ("moe",)),
            Saved("router_probs", router, "router", ("moe",))]


def _scores(model: TransformerModel, ctx: Context) -> Saved:
    """Classic ``c*a*s^2*b`` (+``(c+1)*a*s^2*b`` with dropout) or flash's ``4*a*s*b``."""
    heads, c = heads_per_gpu(model, ctx.tp), model.bytes_per_param_compute
    s, mb = local_seq(model, ctx), check_mb(ctx.microbatch_size)
    if model.attention == "flash":
        return Saved("softmax_lse", 4 * heads * s * mb, "scores", ("core_attn",))
    per = c + (c + 1 if model.dropout else 0)
    return Saved("scores", per * heads * s * model.seq_len * mb, "scores", ("core_attn",))


def layer_saved(model: TransformerModel, ctx: Context, moe: bool = False) -> tuple[Saved, ...]:
    """Every tensor one layer saves on one GPU for one microbatch (module docstring), in
    the compute precision and before any technique."""
    c, sb = model.bytes_per_param_compute, local_seq(model, ctx) * check_mb(ctx.microbatch_size)
    csb, sbh = c * sb, sb * model.hidden
    rows = [Saved("input_norm_in", c * sbh, "replicated"),
            Saved("qkv_in", c * sbh, "replicated", ("layernorm",), True),
            Saved("mlp_norm_in", c * sbh, "replicated"),
            Saved("moe_in" if moe else "mlp_in", c * sbh, "replicated", ("layernorm",), True)]
    if model.dropout:
        rows.append(Saved("dropout_masks", 2 * sbh, "replicated"))
    rows += _attention(model, ctx, csb) + _mlp(model, ctx, csb, moe)
    if moe:
        rows += _experts(model, ctx)
    return (*rows, _scores(model, ctx))


def head_saved(model: TransformerModel, ctx: Context) -> tuple[Saved, ...]:
    """What the last stage keeps beyond its layers, per GPU for one microbatch: the final
    norm's and the LM head's inputs (replicated; the head stays in the compute precision
    under fp8 recipes) and ``logit_bytes`` per logit for the loss (TP splits the
    vocabulary); each MTP module (``model.mtp_layers``) keeps its ``2h`` projection input,
    a MoE layer (``layer_saved``) and a head of its own (``hardware.layer.head_activation_bytes``
    sums them)."""
    if model.logit_bytes == 0:
        return ()
    c, sb = model.bytes_per_param_compute, local_seq(model, ctx) * check_mb(ctx.microbatch_size)
    rows = [Saved("final_norm_in", c * sb * model.hidden, "replicated"),
            Saved("head_in", c * sb * model.hidden, "replicated"),
            Saved("logits", model.logit_bytes * sb * ceil_share(model.vocab, ctx.tp), "split")]
    if model.mtp_layers:
        rows.append(Saved("mtp_proj_in", 2 * c * sb * model.hidden, "replicated"))
    return tuple(rows)


def dropped_modules(model: TransformerModel, ctx: Context) -> frozenset[str]:
    """The recompute modules in effect: ``Context.recompute_modules``, and ``core_attn``
    with selective recomputation on classic attention."""
    extra = {"core_attn"} if ctx.recompute is Recompute.SELECTIVE and model.attention == "classic" else set()
    return frozenset(ctx.recompute_modules) | extra


def kept_bytes(model: TransformerModel, row: Saved, ctx: Context) -> float:
    """Bytes ``row`` keeps under the context's caching precision (module docstring)."""
    if ctx.activation_precision is not Precision.FP8 or not row.gemm_input:
        return row.nbytes
    if row.name == "dispatched":
        return model.hidden * min(ctx.dispatch_precision.bytes_per_element, FP8_CACHE)
    return row.nbytes * FP8_CACHE / model.bytes_per_param_compute


def saved_bytes(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """Bytes one layer keeps (not full recomputation): the table's rows that no recompute
    module in effect drops, in their kept precision, summed as ``hardware.layer`` sums
    them (replicated rows split by SP as one sum; routed rows per copy times the routed
    copies)."""
    dropped = dropped_modules(model, ctx)
    sums = {"replicated": 0.0, "split": 0.0, "routed": 0.0, "router": 0.0, "scores": 0.0}
    for row in layer_saved(model, ctx, moe):
        if not dropped.intersection(row.dropped_by):
            sums[row.where] += kept_bytes(model, row, ctx)
    whole_sums = {k: whole(v) for k, v in sums.items()}
    kept = sp_share(whole_sums["replicated"], ctx) + whole_sums["split"]
    if moe:
        kept += routed_rows(model, ctx) * whole_sums["routed"] + whole_sums["router"]
    return kept + whole_sums["scores"]


def module_table(model: TransformerModel, ctx: Context, moe: bool = False) -> list[dict]:
    """The table as plain rows (docs, benchmark): name, where, dropped_by, and the bytes
    kept per microbatch on one GPU (routed rows times the routed copies, replicated rows
    split by SP) under ``ctx``'s techniques (0 when dropped)."""
    dropped = dropped_modules(model, ctx)
    out = []
    for row in layer_saved(model, ctx, moe):
        kept = 0.0 if dropped.intersection(row.dropped_by) else kept_bytes(model, row, ctx)
        if row.where == "routed":
            kept *= routed_rows(model, ctx)
        elif row.where == "replicated" and ctx.sequence_parallel:
            kept /= ctx.tp
        out.append({"name": row.name, "where": row.where, "dropped_by": "+".join(row.dropped_by),
                    "fp8_cacheable": row.gemm_input, "bytes": kept})
    return out


def check_modules(model: TransformerModel, ctx: Context) -> None:
    """``ValueError`` for a recompute module the model does not have (mla_up_proj on a
    model without MLA, the MoE modules on a dense one, shared_experts without them)."""
    missing = {"mla_up_proj": not model.mla, "moe": not model.moe, "moe_act": not model.moe,
               "shared_experts": not (model.moe and model.shared_experts)}
    for name in ctx.recompute_modules:
        if missing.get(name):
            raise ValueError(f"recompute module {name} does not apply to model {model.name!r}")
