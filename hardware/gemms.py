"""The weight GEMMs of one layer on one GPU: the shapes its FLOPs, parameters and M_W
follow from.

A layer's forward runs, per microbatch on each GPU, ``Y = X W`` for every weight matrix
it holds: ``rows`` tokens (M) of width ``k`` (K) times a ``k x n`` weight (N), ``2*M*K*N``
FLOPs; its input-gradient and weight-gradient passes run one GEMM of the same size each.
Tensor parallelism (Megatron-LM) splits a *column-parallel* GEMM's output and a
*row-parallel* GEMM's input by ``t``; the input of a column-parallel GEMM and the output
(gradient) of a row-parallel one are the full activation every TP rank holds — stored as a
``1/t`` shard under sequence parallelism (``x_replicated`` / ``dy_replicated``).

Attention: Q, K, V (one column-parallel GEMM), the output projection (row-parallel); under
multi-head latent attention the down projections ``W_DQ`` and ``W_DKV`` are replicated on
every TP rank (they are small: ``q_r`` and ``kv_r + r`` wide) and the up projections
``W_UQ``, ``W_UKV`` column-parallel. A dense MLP: up/gate column-, down row-parallel.

Mixture of experts (Megatron-Core's MoE layer; DeepSeek-V3): the router ``h x E`` runs on
the GPU's own tokens ``T = b*s/(t*cp)`` (sequence-parallel shard; ``b*s/cp`` at ``t = 1``), shared
experts as a dense MLP of ``S * f_e`` split by TP, and the ``E / ep`` routed experts a GPU
holds (each split ``etp`` ways) run on the tokens dispatched to it: ``T * k`` on average
(``experts_per_token`` copies of each of the EP group's tokens, spread over its ``ep``
ranks), times the routing imbalance (busiest rank / mean), times ``etp`` (the expert-TP
group gathers its members' tokens). A grouped GEMM over the local experts has those rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .context import Context
    from .model import TransformerModel


class Gemm(NamedTuple):
    """One weight GEMM of a layer on one GPU (module docstring): ``rows x k`` times
    ``k x n``; ``weights`` and ``bias`` the parameters this GPU holds for it; ``expert``
    for routed experts (sharded over expert parallelism)."""

    name: str
    rows: float
    k: int
    n: int
    weights: int
    bias: int
    x_replicated: bool
    dy_replicated: bool
    expert: bool = False

    @property
    def flops(self) -> float:
        """``2*M*K*N``: one pass (forward, input gradient or weight gradient)."""
        return 2 * self.rows * self.k * self.n


def ceil_share(value: int, tp: int) -> int:
    """One of ``tp`` GPUs' share of ``value``, rounded up: what the busiest GPU holds."""
    return -(-value // tp)


def filled(value: int | None) -> int:
    """A size ``TransformerModel`` derives on construction where not given (``head_dim``,
    ``v_head_dim``, ``ffn_hidden``; ``expert_ffn_hidden`` of a mixture-of-experts model):
    an integer on every model built."""
    if value is None:
        raise ValueError("a model size that TransformerModel derives on construction is missing")
    return value


def sp_share(value: float, ctx: Context) -> float:
    """One GPU's share of ``value`` bytes kept once per tensor group: ``1/tp`` of it with
    sequence parallelism (rounded up when whole), all of it without."""
    if not ctx.sequence_parallel:
        return value
    return ceil_share(value, ctx.tp) if isinstance(value, int) else value / ctx.tp


def whole(value: float) -> float:
    """``value`` as an int when it is one (byte counts print and compare as integers)."""
    return int(value) if float(value).is_integer() else value


def heads_per_gpu(model: TransformerModel, tp: int) -> int:
    return ceil_share(model.heads, tp)


def kv_heads_per_gpu(model: TransformerModel, tp: int) -> int:
    """K/V heads one GPU holds: ``kv_heads / t``, at least one (replicated when ``t >
    kv_heads``)."""
    return max(model.kv_heads // tp, 1)


def local_seq(model: TransformerModel, ctx: Context) -> int:
    """Tokens of a sequence on one context-parallel rank: ``s/cp`` (``Context.check``
    makes ``2 cp`` divide ``s``)."""
    return model.seq_len // ctx.cp


def check_mb(mb: object) -> int:
    """A microbatch size: an integer >= 1 sequences."""
    if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
        raise ValueError(f"microbatch size must be an integer >= 1 sequences, got {mb!r}")
    return mb


def tokens(model: TransformerModel, ctx: Context) -> int:
    """Tokens of one microbatch through a column-parallel GEMM: ``b*s/cp``."""
    return check_mb(ctx.microbatch_size) * local_seq(model, ctx)


def own_tokens(model: TransformerModel, ctx: Context) -> float:
    """Tokens a GPU routes (its sequence-parallel shard): ``b*s/(t*cp)``."""
    return tokens(model, ctx) / ctx.tp


def routed_rows(model: TransformerModel, ctx: Context) -> float:
    """Token copies the busiest GPU's routed experts process (module docstring)."""
    return own_tokens(model, ctx) * model.experts_per_token * ctx.routing_imbalance * ctx.etp


def _column(name: str, rows: float, k: int, n: int, bias: bool) -> Gemm:
    return Gemm(name, rows, k, n, k * n, n if bias else 0, True, False)


def _row(name: str, rows: float, k: int, n: int, bias: bool) -> Gemm:
    return Gemm(name, rows, k, n, k * n, n if bias else 0, False, True)


def attention_gemms(model: TransformerModel, ctx: Context) -> list[Gemm]:
    """The attention projections of a layer on one GPU."""
    h, t, m = model.hidden, ctx.tp, tokens(model, ctx)
    a = heads_per_gpu(model, t)
    if not model.mla:
        kv = kv_heads_per_gpu(model, t) * model.head_dim
        return [_column("qkv", m, h, a * model.head_dim + 2 * kv, bool(model.qkv_bias)),
                _row("out", m, a * model.head_dim, h, bool(model.out_bias))]
    r, qr, kvr = model.qk_rope_head_dim, model.q_lora_rank, model.kv_lora_rank
    out = []
    if qr:
        out.append(Gemm("q_down", m, h, qr, h * qr, 0, True, True))
    out += [_column("q_up", m, qr or h, a * model.qk_head_dim, False),
            Gemm("kv_down", m, h, kvr + r, h * (kvr + r), 0, True, True),
            _column("kv_up", m, kvr, a * (model.head_dim + model.v_head_dim), False),
            _row("out", m, a * model.v_head_dim, h, False)]
    return out


def mlp_gemms(model: TransformerModel, ctx: Context, ffn: int, prefix: str = "") -> list[Gemm]:
    """A dense MLP of hidden size ``ffn`` split by TP: up/gate and down."""
    h, t, m, n = model.hidden, ctx.tp, tokens(model, ctx), model.mlp_matrices
    f = ceil_share(ffn, t)
    bias = bool(model.mlp_bias)
    return [_column(f"{prefix}up", m, h, (n - 1) * f, bias), _row(f"{prefix}down", m, f, h, bias)]


def expert_gemms(model: TransformerModel, ctx: Context) -> list[Gemm]:
    """The router, the shared experts and the GPU's routed experts (module docstring)."""
    h, n = model.hidden, model.mlp_matrices
    local = model.num_experts // ctx.ep
    ffn = model.expert_ffn_hidden or 0  # set on every mixture-of-experts model
    f = ceil_share(ffn, ctx.etp)
    rows = routed_rows(model, ctx)
    bias = model.mlp_bias
    out = [Gemm("router", own_tokens(model, ctx), h, model.num_experts, h * model.num_experts, 0, False, False)]
    if model.shared_expert_gate:  # Qwen2-MoE: a sigmoid gate h x 1 on the shared experts' output
        out.append(Gemm("shared_gate", own_tokens(model, ctx), h, 1, h, 0, False, False))
    if model.shared_experts:
        out += mlp_gemms(model, ctx, model.shared_experts * ffn, "shared_")
    out += [Gemm("experts_up", rows, h, (n - 1) * f, local * h * (n - 1) * f,
                 local * (n - 1) * f if bias else 0, False, False, True),
            Gemm("experts_down", rows, f, h, local * f * h, local * h if bias else 0, False, False, True)]
    return out


def layer_gemms(model: TransformerModel, ctx: Context, moe: bool = False) -> list[Gemm]:
    """Every weight GEMM of one dense (``moe`` False) or MoE layer on one GPU."""
    ffn = expert_gemms(model, ctx) if moe else mlp_gemms(model, ctx, model.ffn_hidden)
    return attention_gemms(model, ctx) + ffn
