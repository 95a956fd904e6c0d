"""What one transformer layer (and the embedding and LM head) costs per GPU for one microbatch.

Every function takes the run's ``Context`` (``hardware.context``). Notation: ``b`` sequences
per microbatch (``Context.microbatch_size``), ``s`` sequence length, ``h`` hidden size, ``f``
MLP hidden size, ``a`` heads, ``kv`` the K/V width (``h * kv_heads / heads``), ``n`` MLP
matrices (2 GELU, 3 SwiGLU), ``V`` vocabulary, ``c`` = ``model.bytes_per_param_compute``
(2 = bf16), ``t`` the tensor-parallel degree. Counts are exact integers when ``t`` divides
what it splits (``Context.check`` makes sure); a multiply-add is 2 FLOPs.

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): Q, K, V, the MLP's up/gate and the
LM head are split by columns, the attention output and MLP down projections by rows, the
heads among the ``t`` GPUs; when ``t`` exceeds ``kv_heads`` each GPU keeps one K/V head
(replicated). Norms, dropout and the GEMM inputs are replicated unless sequence
parallelism (Korthikanti et al. 2022) splits them along the sequence.

FLOPs per GPU (forward; Narayanan et al. 2021 generalized to GQA and SwiGLU)
    GEMMs      ``2bs(2h^2 + 2h*kv + n*h*f) / t``    attention core ``4bs^2h / t``
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
The last stage keeps the final norm's and the head's inputs (``2csbh``) and
``logit_bytes * s*b*V/t`` of logits for the loss (none when ``logit_bytes`` is 0).

Weight part M_W of a layer's activation (split backward, Zero Bubble accounting: B frees
``M - M_W``, W frees ``M_W``): the inputs ``X`` and output gradients ``dY`` of the weight
GEMMs ``dW = X^T dY``: ``X`` = ``h`` (QKV), ``h/t`` (output projection), ``h`` (up/gate),
``f/t`` (down); ``dY`` = ``h/t + 2kv/t`` (QKV), ``h`` (output projection), ``(n-1)f/t``
(up/gate), ``h`` (down) elements per token, times ``c*s*b`` bytes, replicated terms
``/t`` with sequence parallelism; at most the layer's activation. For GPT at t = 1 this
is ``c*s*b*(8h + 2f)`` (32sbh at f=4h, c=2: the Zero Bubble paper's count).

Memory traffic (bytes moved to/from device memory; an [I] choice, not in the paper):
a layer's forward reads its weights once and writes and reads once every activation it
keeps except the score/log-sum-exp terms (fused kernels keep scores on chip):
``c*P_layer/t + 2*(activation without scores)``; the LM head ``c*V*h/t + 2*c*b*s*V/t``
(weights; logits written and read by the loss); the embedding ``2*c*b*s*h``. Backward
moves ``2 x`` (``1 + 1`` when split); ``"full"`` recomputation adds the forward to B.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .context import Context, Recompute

if TYPE_CHECKING:
    from .model import TransformerModel


def check_mb(mb: object) -> int:
    """A microbatch size: an integer >= 1 sequences."""
    if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
        raise ValueError(f"microbatch size must be an integer >= 1 sequences, got {mb!r}")
    return mb


def kv_width_per_gpu(model: TransformerModel, tp: int = 1) -> int:
    """K (or V) width one GPU holds: ``kv / t``, at least one head (replicated when
    ``t > kv_heads``)."""
    return max(model.kv_heads // tp, 1) * model.head_dim  # type: ignore[operator]


def _split(value: int, tp: int) -> int:
    return -(-value // tp)  # ceil: what the busiest GPU holds


def _mb(ctx: Context) -> int:
    return check_mb(ctx.microbatch_size)


# ---- parameters per GPU ---------------------------------------------------------------------
def layer_params_per_gpu(model: TransformerModel, ctx: Context = Context()) -> int:
    """Parameters of one layer on one GPU of a ``tp``-way group (norms and row-parallel
    biases replicated); ``model.layer_params`` at ``tp = 1``."""
    h, f, n, tp = model.hidden, model.ffn_hidden, model.mlp_matrices, ctx.tp
    kv = kv_width_per_gpu(model, tp)
    matrices = _split(2 * h * h + n * h * f, tp) + 2 * h * kv  # type: ignore[operator]
    biases = (_split(h + (n - 1) * f, tp) + 2 * kv + 2 * h) if model.bias else 0  # type: ignore[operator]
    norms = 2 * (2 * h if model.norm == "layernorm" else h)
    return matrices + biases + norms


def stage_params_per_gpu(model: TransformerModel, layers: int, first: bool, last: bool,
                         ctx: Context = Context()) -> int:
    """Parameters of a stage on one GPU (embedding and head split by vocabulary)."""
    table = _split(model.vocab, ctx.tp) * model.hidden
    return layers * layer_params_per_gpu(model, ctx) + (table if first else 0) + (table if last else 0)


# ---- FLOPs ----------------------------------------------------------------------------------
def layer_gemm_flops(model: TransformerModel, ctx: Context) -> int:
    """Forward FLOPs of a layer's GEMMs on one GPU: ``2bs(2h^2 + 2h*kv + n*h*f)/t``."""
    h, s, f, n, tp = model.hidden, model.seq_len, model.ffn_hidden, model.mlp_matrices, ctx.tp
    kv = kv_width_per_gpu(model, tp)
    return 2 * _mb(ctx) * s * (_split(2 * h * h + n * h * f, tp) + 2 * h * kv)  # type: ignore[operator]


def attention_core_flops(model: TransformerModel, ctx: Context) -> int:
    """``4bs^2h/t``: the ``QK^T`` and ``softmax*V`` products of one layer on one GPU."""
    return 4 * _mb(ctx) * model.seq_len ** 2 * _split(model.hidden, ctx.tp)


def layer_forward_flops(model: TransformerModel, ctx: Context) -> int:
    """GEMMs plus attention core (``24bsh^2 + 4bs^2h`` for GPT at t = 1)."""
    return layer_gemm_flops(model, ctx) + attention_core_flops(model, ctx)


def head_forward_flops(model: TransformerModel, ctx: Context) -> int:
    """LM head ``2bshV/t``."""
    return 2 * _mb(ctx) * model.seq_len * model.hidden * _split(model.vocab, ctx.tp)


def model_flops_per_sequence(model: TransformerModel) -> int:
    """Model FLOPs of one sequence's training step (forward + backward, no recomputation,
    all GPUs): ``3 x (layers' forward + LM head)`` — the numerator of MFU."""
    one = Context(microbatch_size=1)
    return 3 * (model.num_layers * layer_forward_flops(model, one) + head_forward_flops(model, one))


# ---- activation memory and traffic -------------------------------------------------------
def _replicated(model: TransformerModel, mb: int) -> int:
    """Bytes per layer that TP replicates (sequence parallelism splits them)."""
    c, sbh = model.bytes_per_param_compute, model.seq_len * mb * model.hidden
    return 4 * c * sbh + (2 * sbh if model.dropout else 0)


def _tp_split(model: TransformerModel, mb: int, tp: int) -> int:
    """Bytes per layer that TP splits (Q, K, V, attention output, MLP intermediates)."""
    c, s, h, f = model.bytes_per_param_compute, model.seq_len, model.hidden, model.ffn_hidden
    kv = kv_width_per_gpu(model, tp)
    mlp = model.mlp_matrices
    return c * s * mb * (_split(2 * h + mlp * f, tp) + 2 * kv)  # type: ignore[operator]


def _scores(model: TransformerModel, mb: int, tp: int) -> int:
    """Score-related bytes: classic ``c*a*s^2*b`` (+``(c+1)*a*s^2*b`` with dropout),
    fused ``4*a*s*b``, per GPU (``a/t`` heads)."""
    s, heads, c = model.seq_len, _split(model.heads, tp), model.bytes_per_param_compute
    if model.attention == "flash":
        return 4 * heads * s * mb
    per = c + (c + 1 if model.dropout else 0)
    return per * heads * s * s * mb


def _sp(value: int, ctx: Context) -> int:
    return _split(value, ctx.tp) if ctx.sequence_parallel else value


def activation_bytes_per_layer(model: TransformerModel, ctx: Context) -> int:
    """Bytes one layer keeps on one GPU for the backward of one microbatch (module
    docstring); ``sbh(34 + 5as/h)`` for GPT with classic attention at t = 1."""
    mb = _mb(ctx)
    if ctx.recompute is Recompute.FULL:
        return _sp(model.bytes_per_param_compute * model.seq_len * mb * model.hidden, ctx)
    kept = _sp(_replicated(model, mb), ctx) + _tp_split(model, mb, ctx.tp)
    if ctx.recompute is Recompute.NONE or model.attention == "flash":
        kept += _scores(model, mb, ctx.tp)
    return kept


def weight_memory_bytes_per_layer(model: TransformerModel, ctx: Context) -> int:
    """M_W of one layer on one GPU: inputs and output gradients of its weight GEMMs, at
    most its activation (module docstring); ``c*s*b*(8h + 2f)`` for GPT at t = 1."""
    h, f, n, tp = model.hidden, model.ffn_hidden, model.mlp_matrices, ctx.tp
    assert f is not None  # TransformerModel sets it (default 4 * hidden)
    kv = kv_width_per_gpu(model, tp)
    replicated = 4 * h  # X of QKV and up/gate, dY of the output and down projections
    split = _split(2 * h + n * f, tp) + 2 * kv  # X: out-proj, down; dY: QKV, up/gate
    per_token = _sp(replicated, ctx) + split
    part = model.bytes_per_param_compute * model.seq_len * _mb(ctx) * per_token
    return min(part, activation_bytes_per_layer(model, ctx))


def head_activation_bytes(model: TransformerModel, ctx: Context) -> int:
    """What the last stage keeps beyond its layers: the final norm's and the head's inputs
    ``2csbh`` and ``logit_bytes * s*b*V/t`` (0 when ``logit_bytes`` is 0)."""
    mb = _mb(ctx)
    if model.logit_bytes == 0:
        return 0
    sb = model.seq_len * mb
    inputs = _sp(2 * model.bytes_per_param_compute * sb * model.hidden, ctx)
    return inputs + model.logit_bytes * sb * _split(model.vocab, ctx.tp)


def layer_forward_traffic(model: TransformerModel, ctx: Context) -> int:
    """``c*P_layer/t + 2*(activation without scores)`` bytes (module docstring)."""
    mb = _mb(ctx)
    kept = _sp(_replicated(model, mb), ctx) + _tp_split(model, mb, ctx.tp)
    return model.bytes_per_param_compute * layer_params_per_gpu(model, ctx) + 2 * kept


def head_forward_traffic(model: TransformerModel, ctx: Context) -> int:
    """``c*V*h/t + 2*c*b*s*V/t`` bytes (weights read; logits written and read)."""
    c, v = model.bytes_per_param_compute, _split(model.vocab, ctx.tp)
    return c * v * model.hidden + 2 * c * _mb(ctx) * model.seq_len * v


def embedding_forward_traffic(model: TransformerModel, ctx: Context) -> int:
    """``2*c*b*s*h`` bytes (embedding rows gathered, output written)."""
    return 2 * model.bytes_per_param_compute * _mb(ctx) * model.seq_len * model.hidden


def message_bytes(model: TransformerModel, ctx: Context) -> int:
    """Bytes of one activation (forward) or its gradient (backward) between stages:
    ``b*s*h*c`` for the whole tensor-parallel group (each GPU sends ``1/t`` of it)."""
    return _mb(ctx) * model.seq_len * model.hidden * model.bytes_per_param_compute
