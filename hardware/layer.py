"""What one transformer layer (and the embedding and LM head) costs per GPU for one microbatch.

Every function takes the run's ``Context`` (``hardware.context``). Notation: ``b`` sequences
per microbatch (``Context.microbatch_size``), ``s`` sequence length, ``h`` hidden size, ``f``
MLP hidden size, ``a`` heads, ``kv`` the K/V width (``h * kv_heads / heads``), ``n`` MLP
matrices (2 GELU, 3 SwiGLU), ``V`` vocabulary, ``c`` = ``model.bytes_per_param_compute``
(2 = bf16), ``t`` the tensor-parallel degree. Counts are exact integers when ``t`` divides
what it splits (``Context.check`` makes sure); a multiply-add is 2 FLOPs.

Context parallelism (``cp`` ranks; ``hardware.cp``) splits every sequence: each rank runs
the layer on ``s/cp`` of its tokens (``gemms.local_seq``), so FLOPs, activations and
traffic above are those of ``s/cp`` tokens, except the attention core and the classic
scores, whose ``s/cp`` queries meet all ``s`` keys (``s^2 -> s^2/cp``). ``message_bytes``
stays the whole device's.

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): Q, K, V, the MLP's up/gate and the
LM head are split by columns, the attention output and MLP down projections by rows, the
heads among the ``t`` GPUs; when ``t`` exceeds ``kv_heads`` each GPU keeps one K/V head
(replicated). Norms, dropout and the GEMM inputs are replicated unless sequence
parallelism (Korthikanti et al. 2022) splits them along the sequence.

The weight GEMMs of a layer, their shapes per GPU and what TP and EP split, are listed by
``hardware.gemms``; FLOPs, parameters and M_W follow from that list. Layers differ only by
kind (dense or MoE: ``model.is_moe_layer``); the ``stage_*`` functions sum a stage's layers.

FLOPs per GPU (forward; Narayanan et al. 2021 generalized to GQA and SwiGLU)
    GEMMs      ``2bs(2h^2 + 2h*kv + n*h*f) / t``    attention core ``4bs^2h / t``
               (``sum 2*M*K*N`` over ``hardware.gemms``; the core is ``2bs^2 (a/t)
               (d_qk + d_v)`` in general: MLA's queries and keys are ``d + r`` wide)
    LM head    ``2bshV / t``                         embedding lookup 0
    full backward ``2 x forward``; split backward (Zero Bubble paper, Table 1): B = the
    GEMMs' input gradients plus the whole attention-core backward (``1 x GEMMs + 2 x core``),
    W = the GEMMs' weight gradients (``1 x GEMMs``); the LM head splits 1 + 1.
    Flash attention's backward recomputes ``QK^T``: ``+0.5 x core`` in B (FlashAttention-2
    counts 5 matmuls backward against 2 forward). Recomputation adds to B: ``"selective"``
    the core (classic attention only; fused attention already recomputes it), ``"full"``
    the layers' forward.

Activation memory of one microbatch per layer per GPU, bytes (Korthikanti et al. 2022,
generalized): replicated (``/t`` with sequence parallelism) ``2csbh`` (two norm inputs) +
``csbh`` (QKV input) + ``csbh`` (MLP input) + ``2sbh`` (dropout masks, when dropout);
split ``/t``: Q ``csbh``, K and V ``2csb*kv``, attention output ``csbh``, MLP ``2csbf``
(GELU input and output) or ``3csbf`` (SwiGLU gate, up, product); classic attention adds
the scores ``c*a*s^2*b`` (``(2c+1)*a*s^2*b`` with dropout: softmax, mask, dropped-out
probabilities), fused attention keeps ``4*a*s*b`` (fp32 log-sum-exp) instead.
For GPT (GELU, dropout, classic, t = 1, c = 2) this is ``s*b*(18h + 4f) + 5*a*s^2*b``,
``sbh(34 + 5as/h)`` at ``f = 4h``; with ``t`` it is ``sbh(10 + 24/t + 5as/(ht))`` and with
sequence parallelism ``sbh/t (34 + 5as/h)``, Korthikanti et al.'s equations.
``"selective"`` drops the score terms, ``"full"`` keeps the layer input ``csbh`` only.
Multi-head latent attention keeps, instead of Q, K and V of ``h``, ``kv`` and ``kv``: the
latents ``2*q_r + 2*kv_r + r`` (replicated) and Q, K of ``a(d + r)/t``, V of ``a*d_v/t``.
A MoE layer keeps, instead of the MLP's intermediates, the shared experts' (as a dense MLP
of ``S*f_e``), the router's fp32 probabilities ``4*T*E`` and, per routed token copy
(``hardware.gemms.routed_rows``), its input (in the dispatch precision), intermediates and
output ``c(h + n*f_e/etp)``.
The last stage keeps the final norm's and the head's inputs (``2csbh``) and
``logit_bytes * s*b*V/t`` of logits for the loss (none when ``logit_bytes`` is 0).

Weight part M_W of a layer's activation (split backward, Zero Bubble accounting: B frees
``M - M_W``, W frees ``M_W``): the inputs ``X`` and output gradients ``dY`` of the weight
GEMMs ``dW = X^T dY``: ``X`` = ``h`` (QKV), ``h/t`` (output projection), ``h`` (up/gate),
``f/t`` (down); ``dY`` = ``h/t + 2kv/t`` (QKV), ``h`` (output projection), ``(n-1)f/t``
(up/gate), ``h`` (down) elements per token, times ``c*s*b`` bytes, replicated terms
``/t`` with sequence parallelism; at most the layer's activation (every GEMM of
``hardware.gemms``: ``c * (M*K + M*N)``). For GPT at t = 1 this
is ``c*s*b*(8h + 2f)`` (32sbh at f=4h, c=2: the Zero Bubble paper's count).

Memory traffic (bytes moved to/from device memory; an [I] choice, not in the paper):
a layer's forward reads its weights once and writes and reads once every activation it
keeps except the score/log-sum-exp terms (fused kernels keep scores on chip):
``c*P_layer/t + 2*(activation without scores)``; the LM head ``c*V*h/t + 2*c*b*s*V/t``
(weights; logits written and read by the loss); the embedding ``2*c*b*s*h``. Backward
moves ``2 x`` (``1 + 1`` when split); ``"full"`` recomputation adds the forward to B.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from .activations import RECOMPUTED_GEMMS, check_modules, saved_bytes
from .context import Context, Recompute
from .gemms import (
    Gemm,
    ceil_share,
    check_mb,
    filled,
    heads_per_gpu,
    kv_heads_per_gpu,
    layer_gemms,
    local_seq,
    routed_rows,
    sp_share,
    whole,
)

if TYPE_CHECKING:
    from .model import TransformerModel



def kv_width_per_gpu(model: TransformerModel, tp: int = 1) -> int:
    """K (or V) width one GPU holds: ``kv / t``, at least one head (replicated when
    ``t > kv_heads``)."""
    return kv_heads_per_gpu(model, tp) * filled(model.head_dim)


def _mb(ctx: Context) -> int:
    return check_mb(ctx.microbatch_size)


@lru_cache(maxsize=8192)
def _gemms(model: TransformerModel, ctx: Context, moe: bool) -> tuple[Gemm, ...]:
    _mb(ctx)
    return tuple(layer_gemms(model, ctx, moe))


# ---- parameters per GPU ---------------------------------------------------------------------
def _norm_params(model: TransformerModel) -> int:
    """Norms of a layer (replicated): two over ``h``, Q/K norms, MLA's latent norms."""
    extra = 2 * filled(model.head_dim) if model.qk_norm else 0
    return 2 * model.norm_params + extra + model.q_lora_rank + model.kv_lora_rank


@lru_cache(maxsize=4096)
def _params(model: TransformerModel, tp: int, ep: int, etp: int, moe: bool) -> tuple[int, int]:
    """(all, routed-expert) parameters of a layer on one GPU (they depend on the split only)."""
    gemms = layer_gemms(model, Context(tp=tp, dp=ep * etp, ep=ep, etp=etp, microbatch_size=1), moe)
    return (sum(g.weights + g.bias for g in gemms) + _norm_params(model),
            sum(g.weights + g.bias for g in gemms if g.expert))


def layer_params_per_gpu(model: TransformerModel, ctx: Context = Context(), moe: bool = False) -> int:
    """Parameters of one layer on one GPU of a ``tp``-way group (norms and row-parallel
    biases replicated; routed experts ``E/ep`` split ``etp`` ways); ``model.layer_params``
    at ``tp = 1``."""
    return _params(model, ctx.tp, ctx.ep, ctx.etp, moe)[0]


def layer_expert_params_per_gpu(model: TransformerModel, ctx: Context = Context(), moe: bool = True) -> int:
    """The routed experts' share of ``layer_params_per_gpu`` (reduced and sharded over
    the expert data-parallel ranks only)."""
    return _params(model, ctx.tp, ctx.ep, ctx.etp, True)[1] if moe else 0


def _layer_kinds(model: TransformerModel, first_layer: int, layers: int) -> tuple[int, int]:
    """(dense, MoE) layers among ``layers`` layers from ``first_layer``."""
    moe = model.moe_layers_in(first_layer, first_layer + layers)
    return layers - moe, moe


def _per_stage(model: TransformerModel, first_layer: int, layers: int, per_layer) -> int:
    dense, moe = _layer_kinds(model, first_layer, layers)
    return (dense * per_layer(False) if dense else 0) + (moe * per_layer(True) if moe else 0)


def mtp_params_per_gpu(model: TransformerModel, ctx: Context) -> tuple[int, int]:
    """(all, routed-expert) parameters of the MTP modules on one GPU of the last stage: a
    MoE layer, the ``2h x h`` projection (split by TP) and three norms each."""
    if not model.mtp_layers:
        return 0, 0
    one = ceil_share(2 * model.hidden * model.hidden, ctx.tp) + 3 * model.norm_params
    layer = layer_params_per_gpu(model, ctx, True)
    return (model.mtp_layers * (one + layer),
            model.mtp_layers * layer_expert_params_per_gpu(model, ctx))


def stage_params_per_gpu(model: TransformerModel, layers: int, first: bool, last: bool,
                         ctx: Context = Context(), first_layer: int = 0) -> int:
    """Parameters of a stage on one GPU (embedding and head split by vocabulary; the MTP
    modules on the last stage)."""
    table = ceil_share(model.vocab, ctx.tp) * model.hidden
    body = _per_stage(model, first_layer, layers, lambda moe: layer_params_per_gpu(model, ctx, moe))
    end = (table + mtp_params_per_gpu(model, ctx)[0]) if last else 0
    return body + (table if first else 0) + end


def stage_expert_params_per_gpu(model: TransformerModel, layers: int, last: bool, ctx: Context = Context(),
                                first_layer: int = 0) -> int:
    """The routed experts' share of ``stage_params_per_gpu``."""
    if not model.moe:
        return 0
    body = _per_stage(model, first_layer, layers, lambda moe: layer_expert_params_per_gpu(model, ctx, moe))
    return body + (mtp_params_per_gpu(model, ctx)[1] if last else 0)


# ---- FLOPs ----------------------------------------------------------------------------------
def layer_gemm_flops(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """Forward FLOPs of a layer's GEMMs on one GPU: ``2bs(2h^2 + 2h*kv + n*h*f)/t`` for
    a dense layer (``sum 2*M*K*N`` over ``hardware.gemms``)."""
    total = sum(g.flops for g in _gemms(model, ctx, moe))
    return int(total) if float(total).is_integer() else total


def expert_gemm_flops(model: TransformerModel, ctx: Context) -> float:
    """The routed experts' part of a MoE layer's ``layer_gemm_flops``."""
    return sum(g.flops for g in _gemms(model, ctx, True) if g.expert)


def attention_core_flops(model: TransformerModel, ctx: Context) -> int:
    """``2bs^2 (a/t)(d_qk + d_v)``, ``4bs^2h/t`` for standard attention: the ``QK^T`` and
    ``softmax*V`` products of one layer on one GPU."""
    width = model.qk_head_dim + filled(model.v_head_dim)
    return 2 * _mb(ctx) * local_seq(model, ctx) * model.seq_len * heads_per_gpu(model, ctx.tp) * width


def layer_forward_flops(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """GEMMs plus attention core (``24bsh^2 + 4bs^2h`` for GPT at t = 1)."""
    return layer_gemm_flops(model, ctx, moe) + attention_core_flops(model, ctx)


def head_forward_flops(model: TransformerModel, ctx: Context) -> int:
    """LM head ``2bshV/t``."""
    return 2 * _mb(ctx) * local_seq(model, ctx) * model.hidden * ceil_share(model.vocab, ctx.tp)


def mtp_forward_flops(model: TransformerModel, ctx: Context) -> float:
    """The MTP modules on the last stage: each a MoE layer, the ``2h x h`` projection and
    an LM head."""
    if not model.mtp_layers:
        return 0
    proj = 2 * _mb(ctx) * local_seq(model, ctx) * ceil_share(2 * model.hidden * model.hidden, ctx.tp)
    return model.mtp_layers * (layer_forward_flops(model, ctx, True) + proj + head_forward_flops(model, ctx))


def model_flops_per_sequence(model: TransformerModel) -> float:
    """Model FLOPs of one sequence's training step (forward + backward, no recomputation,
    all GPUs): ``3 x (layers' forward + LM head)`` — the numerator of MFU. For a MoE
    model the routed experts count ``experts_per_token`` experts per token (active
    parameters); the MTP modules are not counted (DeepSeek-V3's MFU-style counts leave
    them out as well)."""
    one = Context(microbatch_size=1)
    dense, moe = _layer_kinds(model, 0, model.num_layers)
    layers = dense * layer_forward_flops(model, one) + (moe * layer_forward_flops(model, one, True) if moe else 0)
    total = 3 * (layers + head_forward_flops(model, one))
    return int(total) if float(total).is_integer() else total



def attention_flops_share(model: TransformerModel) -> float:
    """Share of ``model_flops_per_sequence`` in the attention core (``QK^T`` and ``PV``),
    counted unmasked as Megatron counts it: counting causal attention as half would lower
    an MFU by the factor ``1 - share / 2``."""
    one = Context(microbatch_size=1)
    return 3 * model.num_layers * attention_core_flops(model, one) / model_flops_per_sequence(model)

# ---- activation memory and traffic -------------------------------------------------------
def _replicated(model: TransformerModel, mb: int, seq: int) -> int:
    """Bytes per layer that TP replicates (sequence parallelism splits them)."""
    c, sbh = model.bytes_per_param_compute, seq * mb * model.hidden
    return 4 * c * sbh + (2 * sbh if model.dropout else 0)


def _attention_split(model: TransformerModel, tp: int) -> int:
    """Per token, elements of Q, K, V and the attention output one GPU keeps (TP split)."""
    a = heads_per_gpu(model, tp)
    if model.mla:
        return a * (2 * model.qk_head_dim + 2 * filled(model.v_head_dim))
    return 2 * a * filled(model.head_dim) + 2 * kv_width_per_gpu(model, tp)


def _latents(model: TransformerModel) -> int:
    """Per token, MLA's replicated latents (down-projection outputs and their norms)."""
    return 2 * model.q_lora_rank + 2 * model.kv_lora_rank + model.qk_rope_head_dim if model.mla else 0


def _tp_split(model: TransformerModel, mb: int, tp: int, moe: bool, s: int) -> int:
    """Bytes per layer that TP splits (Q, K, V, attention output, MLP intermediates)."""
    c, f = model.bytes_per_param_compute, filled(model.ffn_hidden)
    ffn = model.shared_experts * filled(model.expert_ffn_hidden) if moe else f
    return c * s * mb * (ceil_share(model.mlp_matrices * ffn, tp) + _attention_split(model, tp))


def _experts(model: TransformerModel, ctx: Context) -> float:
    """Bytes a MoE layer keeps for its router and routed experts (module docstring); the
    dispatched copies are kept in the dispatch precision (DeepSeek-V3 caches them in FP8)."""
    c = model.bytes_per_param_compute
    kept = ctx.dispatch_precision.bytes_per_element * model.hidden
    per_copy = kept + c * (model.hidden + model.mlp_matrices * ceil_share(filled(model.expert_ffn_hidden), ctx.etp))
    router = 4 * _mb(ctx) * local_seq(model, ctx) / ctx.tp * model.num_experts
    return routed_rows(model, ctx) * per_copy + router


def _kept(model: TransformerModel, ctx: Context, moe: bool) -> float:
    """Activation bytes of a layer without the score terms."""
    mb, seq = _mb(ctx), local_seq(model, ctx)
    c = model.bytes_per_param_compute
    replicated = _replicated(model, mb, seq) + c * seq * mb * _latents(model)
    kept = sp_share(replicated, ctx) + _tp_split(model, mb, ctx.tp, moe, seq)
    return kept + (_experts(model, ctx) if moe else 0)


def activation_bytes_per_layer(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """Bytes one layer keeps on one GPU for the backward of one microbatch (module
    docstring); ``sbh(34 + 5as/h)`` for GPT with classic attention at t = 1."""
    mb = _mb(ctx)
    if ctx.recompute is Recompute.FULL:
        return sp_share(model.bytes_per_param_compute * local_seq(model, ctx) * mb * model.hidden, ctx)
    return whole(saved_bytes(model, ctx, moe))  # hardware.activations: the per-module table


def recompute_flops(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """Forward FLOPs one layer runs again in its backward for ``ctx.recompute_modules``
    (``hardware.activations``): their GEMMs, and the attention core for ``core_attn``
    (beyond what ``Recompute.SELECTIVE`` already runs again on classic attention)."""
    modules = set(ctx.recompute_modules)
    names = {g for m in modules for g in RECOMPUTED_GEMMS[m]}
    flops = sum(g.flops for g in _gemms(model, ctx, moe) if g.name in names)
    if "core_attn" in modules and not (ctx.recompute is Recompute.SELECTIVE and model.attention == "classic"):
        flops += attention_core_flops(model, ctx)
    return flops


def recompute_traffic(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """Bytes the recomputation of ``ctx.recompute_modules`` moves in the backward: the
    dropped tensors written and read again (``2 x`` the bytes the modules save) [I]."""
    if not ctx.recompute_modules:
        return 0
    plain = ctx.replace(recompute_modules=())
    return 2 * (saved_bytes(model, plain, moe) - saved_bytes(model, ctx, moe))


def module_choices(model: TransformerModel, ctx: Context, moe: bool = False) -> dict[str, tuple[float, float]]:
    """Per recompute module the layer has, on top of ``ctx``'s techniques: (bytes it frees
    per microbatch on one GPU, forward FLOPs it runs again in the backward) — what a
    choice of recomputation or offload per module weighs (0 bytes: already dropped)."""
    kept, out = saved_bytes(model, ctx, moe), {}
    for name in RECOMPUTED_GEMMS:
        one = ctx.replace(recompute_modules=(name,))
        try:
            check_modules(model, one)
        except ValueError:
            continue
        more = ctx.replace(recompute_modules=(*ctx.recompute_modules, name))
        out[name] = (kept - saved_bytes(model, more, moe), recompute_flops(model, one, moe))
    return out


def stage_recompute(model: TransformerModel, ctx: Context, layers: int, first_layer: int = 0) -> tuple[float, float]:
    """(FLOPs, traffic) of a stage's layers' recompute modules in one backward."""
    if not ctx.recompute_modules:
        return 0, 0
    return (_per_stage(model, first_layer, layers, lambda moe: recompute_flops(model, ctx, moe)),
            _per_stage(model, first_layer, layers, lambda moe: recompute_traffic(model, ctx, moe)))


def weight_memory_bytes_per_layer(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """M_W of one layer on one GPU: inputs and output gradients of its weight GEMMs, at
    most its activation (module docstring); ``c*s*b*(8h + 2f)`` for GPT at t = 1."""
    elements = 0.0
    for g in _gemms(model, ctx, moe):
        elements += (sp_share(g.rows * g.k, ctx) if g.x_replicated else g.rows * g.k)
        elements += (sp_share(g.rows * g.n, ctx) if g.dy_replicated else g.rows * g.n)
    part = model.bytes_per_param_compute * elements
    return whole(min(part, activation_bytes_per_layer(model, ctx, moe)))


def stage_activation_bytes(model: TransformerModel, ctx: Context, layers: int, first_layer: int = 0) -> float:
    """Activation bytes of a stage's layers (``activation_bytes_per_layer`` by kind)."""
    return _per_stage(model, first_layer, layers, lambda moe: activation_bytes_per_layer(model, ctx, moe))


def stage_weight_memory_bytes(model: TransformerModel, ctx: Context, layers: int, first_layer: int = 0) -> float:
    """M_W of a stage's layers (``weight_memory_bytes_per_layer`` by kind)."""
    return _per_stage(model, first_layer, layers, lambda moe: weight_memory_bytes_per_layer(model, ctx, moe))


def head_activation_bytes(model: TransformerModel, ctx: Context) -> float:
    """What the last stage keeps beyond its layers: the final norm's and the head's inputs
    ``2csbh`` and ``logit_bytes * s*b*V/t`` (0 when ``logit_bytes`` is 0); the MTP
    modules keep a MoE layer, their projection's input and their own logits each."""
    mb = _mb(ctx)
    if model.logit_bytes == 0:
        return 0
    sb = local_seq(model, ctx) * mb
    inputs = sp_share(2 * model.bytes_per_param_compute * sb * model.hidden, ctx)
    head = inputs + model.logit_bytes * sb * ceil_share(model.vocab, ctx.tp)
    if model.mtp_layers:
        proj = sp_share(2 * model.bytes_per_param_compute * sb * model.hidden, ctx)
        head += model.mtp_layers * (activation_bytes_per_layer(model, ctx, True) + proj + head)
    return whole(head)


def layer_forward_traffic(model: TransformerModel, ctx: Context, moe: bool = False) -> float:
    """``c*P_layer/t + 2*(activation without scores)`` bytes (module docstring)."""
    params = layer_params_per_gpu(model, ctx, moe)
    return whole(model.bytes_per_param_compute * params + 2 * _kept(model, ctx, moe))


def head_forward_traffic(model: TransformerModel, ctx: Context) -> int:
    """``c*V*h/t + 2*c*b*s*V/t`` bytes (weights read; logits written and read)."""
    c, v = model.bytes_per_param_compute, ceil_share(model.vocab, ctx.tp)
    return c * v * model.hidden + 2 * c * _mb(ctx) * local_seq(model, ctx) * v


def embedding_forward_traffic(model: TransformerModel, ctx: Context) -> int:
    """``2*c*b*s*h`` bytes (embedding rows gathered, output written)."""
    return 2 * model.bytes_per_param_compute * _mb(ctx) * local_seq(model, ctx) * model.hidden


def message_bytes(model: TransformerModel, ctx: Context) -> int:
    """Bytes of one activation (forward) or its gradient (backward) between stages:
    ``b*s*h*c`` for the whole tensor-parallel group (each GPU sends ``1/t`` of it)."""
    return _mb(ctx) * model.seq_len * model.hidden * model.bytes_per_param_compute
