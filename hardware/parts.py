"""A layer's passes as the kernels they run, on one GPU for one microbatch (kernel model:
``Device.sm_count > 0``; the kernels' times are ``hardware.kernels``).

Notation of ``hardware.layer``; ``T = b*s`` tokens through the GEMMs, ``T_r`` the tokens
of the replicated parts (``T/t`` under sequence parallelism), ``a_t`` heads per GPU.

* **GEMMs**: every weight GEMM of ``hardware.gemms`` (``M x K`` by ``K x N``) runs as
  ``M x K x N`` forward, ``M x N x K`` for the input gradient (``dX = dY W^T``, in B) and
  ``K x M x N`` for the weight gradient (``dW = X^T dY``, in W); a GPU's routed experts
  as a grouped GEMM of ``E/ep`` experts of ``rows / (E/ep)`` rows each. Under fp8
  (``Context.gemm_precision``) each forward GEMM first casts its input and weight and each
  input-gradient GEMM its output gradient to fp8 (read in the compute precision, written
  in 1 byte: the scaling overhead of Transformer Engine's and DeepSeek-V3's recipes). The
  weight gradient ``X^T dY`` needs both operands with ``M`` inner, which Hopper's fp8
  tensor cores take only as transposed copies (DeepSeek-V3 report 3.3: the activations
  are cached in fp8 and transposed for the backward; ``gemms.csv``'s ``transpose_copy``
  rows, a memory-bound kernel, time linear in bytes): ``X^T`` and ``dY^T`` read and
  written in 1 byte, ``2 (M K + M N)`` bytes; and its output accumulates into the fp32
  main gradient (read and written, 8 bytes per element: Megatron's gradient accumulation
  into ``main_grad``).
* **Attention core**: flash (one kernel, ``hardware.kernels.attention_time``; causal:
  half the ``QK^T`` and ``PV`` FLOPs) or classic (Megatron's unfused path: batched GEMMs
  ``QK^T`` and ``PV`` over ``b*a_t`` heads, a fused scale-mask-softmax reading and writing
  the ``s x s`` scores, the attention dropout; backward four batched GEMMs, the dropout's
  and the softmax's backward). The whole core backward is in B (Zero Bubble's split).
* **Memory-bound parts** (bytes per pass): two norms ``2c*T_r*h`` each (backward ``3c``:
  input and output gradient read, input gradient written), rotary embedding of Q and K on
  RMSNorm (Llama-family) models ``2c*T*(a_t + kv_t)*d`` (the same backward), the fused
  bias-dropout-residual adds ``(3c + 1)*T_r*h`` each (``3c`` without dropout; the same
  backward), GELU ``2c*T*f/t`` (backward ``3c``) or SwiGLU ``3c*T*f/t`` (backward ``5c``);
  a MoE layer's router softmax and top-k in fp32 (``8*T/t*E``), the token permutation
  before and after the experts (``2c*rows*h`` each) and the experts' activation on their
  rows.
* **Embedding** (first stage): the row gather ``2c*T*h``; its gradient scatter ``3c*T*h``
  with the weight gradients (W when split). **LM head and loss** (last stage): the final
  norm, the head GEMM ``T x h`` by ``h x V/t`` and Megatron's vocabulary-parallel
  cross-entropy in fp32 over the ``T x V/t`` logits: forward ``(c + 16)`` bytes per logit
  (the logits read, an fp32 copy written, read for the maximum and the sum, the softmax
  written back), backward ``(c + 12)`` (the saved softmax read, scaled and written, cast to
  the compute precision) [I]: Megatron-Core's ``vocab_parallel_cross_entropy`` passes.

Recomputation adds to B: ``"selective"`` the classic core's forward parts (flash already
recomputes inside its backward), ``"full"`` every forward part of the layer.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from pipetab.schedules.ops import Kind

from .activations import RECOMPUTED_GEMMS, RECOMPUTED_PARTS
from .context import Precision, Recompute
from .gemms import (
    Gemm,
    check_mb,
    filled,
    heads_per_gpu,
    kv_heads_per_gpu,
    layer_gemms,
    local_seq,
    own_tokens,
    routed_rows,
    tokens,
)
from .kernels import attention_time, gemm_terms, gemm_time, memory_time
from .layer import attention_core_flops
from .overheads import run_factor

if TYPE_CHECKING:
    from .context import Context
    from .model import TransformerModel
    from .system import Device


class Part(NamedTuple):
    """One kernel of a pass: a GEMM (``m x k`` by ``k x n``, ``batch`` of them), a flash
    attention kernel (``flops``, ``nbytes``) or a memory-bound kernel (``nbytes``);
    ``expert`` for the routed experts' kernels (the part of a MoE layer between its
    dispatch and its combine)."""

    name: str
    kind: str
    m: float = 0.0
    k: float = 0.0
    n: float = 0.0
    batch: int = 1
    flops: float = 0.0
    nbytes: float = 0.0
    fp8: bool = False
    expert: bool = False
    element_bytes: float = 2.0
    shape: tuple[int, int, bool, float, bool] | None = None

    def time(self, device: Device) -> float:
        """Seconds of this kernel on ``device`` (``hardware.kernels``)."""
        if self.kind == "gemm":
            return gemm_time(device, self.m, self.k, self.n, batch=self.batch, fp8=self.fp8,
                             bytes_per_element=self.element_bytes)
        if self.kind == "attention":
            return attention_time(device, self.flops, self.nbytes, self.fp8, self.shape)
        return memory_time(device, self.nbytes)

    def terms(self, device: Device) -> tuple[float, float, float]:
        """``(a, v, fixed)`` seconds with ``time = a / compute_efficiency + v /
        mem_efficiency + fixed`` on ``device`` (the side that bounds the kernel there)."""
        launch = device.compute_latency_s
        if self.kind == "attention":
            return 0.0, 0.0, self.time(device)
        if self.kind == "memory":
            return (0.0, self.nbytes / device.mem_bandwidth, launch) if self.nbytes > 0 else (0.0, 0.0, 0.0)
        if min(self.m, self.k, self.n) <= 0:
            return 0.0, 0.0, 0.0
        a, v = gemm_terms(device, self.m, self.k, self.n, batch=self.batch, fp8=self.fp8,
                          bytes_per_element=self.element_bytes)
        e = device.gemm_efficiency(self.fp8)
        a *= device.compute_efficiency / e  # an fp8 GEMM at its own efficiency
        return (a, 0.0, launch) if a / device.compute_efficiency >= v / device.mem_efficiency else (0.0, v, launch)

    @property
    def gemm_flops(self) -> float:
        """``2*M*K*N*batch`` of a GEMM (0 for the other kinds)."""
        return 2 * self.m * self.k * self.n * self.batch if self.kind == "gemm" else 0.0


def _mem(name: str, nbytes: float, expert: bool = False) -> Part:
    return Part(name, "memory", nbytes=nbytes, expert=expert)


def _gemm_parts(g: Gemm, kind: Kind, ctx: Context, local: int, c: int) -> list[Part]:
    """The kernels of one weight GEMM in pass ``kind`` (module docstring)."""
    fp8 = ctx.gemm_precision is Precision.FP8
    batch = local if g.expert else 1
    rows = g.rows / batch
    shape = {Kind.F: (rows, g.k, g.n), Kind.B: (rows, g.n, g.k), Kind.W: (g.k, rows, g.n)}[kind]
    # fp8's weight gradient accumulates into the fp32 main gradient: its output read and written in 4 bytes
    out_bytes = 8 if fp8 and kind is Kind.W else c
    out = [Part(f"{g.name}_{kind.name.lower()}", "gemm", *shape, batch=batch, fp8=fp8, expert=g.expert,
                element_bytes=out_bytes)]
    if fp8 and kind is not Kind.W:
        cast = g.rows * g.k + g.k * g.n * (batch if g.expert else 1) if kind is Kind.F else g.rows * g.n
        out.insert(0, _mem(f"{g.name}_fp8_cast", (c + 1) * cast, g.expert))
    elif fp8:  # X^T and dY^T as fp8 copies, M the inner dimension: read and written in 1 byte each
        out.insert(0, _mem(f"{g.name}_fp8_transpose", 2 * (g.rows * g.k + g.rows * g.n), g.expert))
    return out


def _scores(model: TransformerModel, ctx: Context) -> tuple[int, int, int, int, int]:
    """(heads of ``b`` sequences, the GPU's queries ``s/cp``, keys ``s``, d_qk, d_v) of the
    attention core on one GPU (context parallelism splits the queries)."""
    return (check_mb(ctx.microbatch_size) * heads_per_gpu(model, ctx.tp), local_seq(model, ctx),
            model.seq_len, model.qk_head_dim, filled(model.v_head_dim))


def core_parts(model: TransformerModel, ctx: Context, kind: Kind) -> list[Part]:
    """The attention core of pass ``kind`` (none in W)."""
    if kind is Kind.W:
        return []
    c, (heads, s, sk, dqk, dv) = model.bytes_per_param_compute, _scores(model, ctx)
    if model.attention == "flash":
        kv = heads if model.mla else check_mb(ctx.microbatch_size) * kv_heads_per_gpu(model, ctx.tp)
        qkvo = c * (s * heads * (dqk + dv) + sk * kv * (dqk + dv)) + 4 * s * heads
        flops = attention_core_flops(model, ctx) / 2  # causal: half the blocks
        if kind is Kind.F:
            return [Part("flash_fwd", "attention", flops=flops, nbytes=qkvo, shape=(dqk, dv, True, s, False))]
        return [Part("flash_bwd", "attention", flops=2.5 * flops, nbytes=2 * qkvo, shape=(dqk, dv, True, s, True))]
    probs = heads * s * sk
    drop = (2 * c + 1) * probs if model.dropout else 0
    if kind is Kind.F:
        return [Part("scores", "gemm", s, dqk, sk, heads, element_bytes=c), _mem("softmax", 2 * c * probs),
                _mem("attention_dropout", drop), Part("context", "gemm", s, sk, dv, heads, element_bytes=c)]
    return [Part("d_values", "gemm", sk, s, dv, heads, element_bytes=c),
            Part("d_probs", "gemm", s, dv, sk, heads, element_bytes=c), _mem("attention_dropout_bwd", drop),
            _mem("softmax_bwd", 3 * c * probs), Part("d_queries", "gemm", s, sk, dqk, heads, element_bytes=c),
            Part("d_keys", "gemm", sk, s, dqk, heads, element_bytes=c)]


def _elementwise(model: TransformerModel, ctx: Context, moe: bool, kind: Kind) -> list[Part]:
    """The memory-bound parts of a layer in pass ``kind`` (module docstring; none in W)."""
    if kind is Kind.W:
        return []
    c, h, t = model.bytes_per_param_compute, model.hidden, ctx.tp
    bwd = kind is Kind.B
    n_tok = tokens(model, ctx)
    rep = n_tok / t if ctx.sequence_parallel else n_tok
    residual = (3 * c + (1 if model.dropout else 0)) * rep * h
    out = [_mem("norms", 2 * (3 if bwd else 2) * c * rep * h), _mem("residuals", 2 * residual)]
    if model.norm == "rmsnorm":
        heads = heads_per_gpu(model, t) + (heads_per_gpu(model, t) if model.mla else kv_heads_per_gpu(model, t))
        out.append(_mem("rotary", 2 * c * n_tok * heads * model.qk_head_dim))
    act = (5 if bwd else 3) if model.mlp_matrices == 3 else (3 if bwd else 2)
    if not moe:
        return [*out, _mem("activation", act * c * n_tok * -(-filled(model.ffn_hidden) // t))]
    f_e, rows = filled(model.expert_ffn_hidden), routed_rows(model, ctx)
    if model.shared_experts:
        out.append(_mem("shared_activation", act * c * n_tok * -(-(model.shared_experts * f_e) // t)))
    out += [_mem("router_topk", 8 * own_tokens(model, ctx) * model.num_experts),
            _mem("permute", 4 * c * rows * h, True),
            _mem("expert_activation", act * c * rows * -(-f_e // ctx.etp), True)]
    return out


def layer_parts(model: TransformerModel, ctx: Context, moe: bool, kind: Kind) -> list[Part]:
    """Every kernel of one layer's pass ``kind`` (F, B the input gradient, W the weight
    gradient) on one GPU, recomputation included in B."""
    c = model.bytes_per_param_compute
    local = max(model.num_experts // ctx.ep, 1)
    parts = [p for g in layer_gemms(model, ctx, moe) for p in _gemm_parts(g, kind, ctx, local, c)]
    parts += core_parts(model, ctx, kind) + _elementwise(model, ctx, moe, kind)
    if kind is Kind.B and ctx.recompute is Recompute.FULL:
        parts += layer_parts(model, ctx.replace(recompute=Recompute.NONE), moe, Kind.F)
    elif kind is Kind.B and ctx.recompute is Recompute.SELECTIVE and model.attention == "classic":
        parts += core_parts(model, ctx, Kind.F)
    if kind is Kind.B and ctx.recompute_modules:
        parts += _recomputed_parts(model, ctx, moe)
    return parts


def _recomputed_parts(model: TransformerModel, ctx: Context, moe: bool) -> list[Part]:
    """The forward kernels the recompute modules run again in the backward
    (``hardware.activations``: their GEMMs with their fp8 casts, their memory-bound
    kernels, the attention core for ``core_attn``)."""
    modules = ctx.recompute_modules
    gemms = {g for m in modules for g in RECOMPUTED_GEMMS[m]}
    names = {p for m in modules for p in RECOMPUTED_PARTS[m]}
    names |= {f"{g}_f" for g in gemms} | {f"{g}_fp8_cast" for g in gemms}
    plain = ctx.replace(recompute=Recompute.NONE, recompute_modules=())
    out = [p for p in layer_parts(model, plain, moe, Kind.F) if p.name in names]
    if "core_attn" in modules and not (ctx.recompute is Recompute.SELECTIVE and model.attention == "classic"):
        out += core_parts(model, ctx, Kind.F)
    return out


def head_parts(model: TransformerModel, ctx: Context, kind: Kind) -> list[Part]:
    """The final norm, the LM head and the fp32 cross-entropy (module docstring)."""
    c, h, n_tok = model.bytes_per_param_compute, model.hidden, tokens(model, ctx)
    vocab = -(-model.vocab // ctx.tp)
    rep = n_tok / ctx.tp if ctx.sequence_parallel else n_tok
    head = Gemm("lm_head", n_tok, h, vocab, h * vocab, 0, True, False)
    gemm = _gemm_parts(head, kind, ctx, 1, c)
    if kind is Kind.F:
        return [_mem("final_norm", 2 * c * rep * h), *gemm, _mem("cross_entropy", (c + 16) * n_tok * vocab)]
    if kind is Kind.B:
        return [_mem("cross_entropy_bwd", (c + 12) * n_tok * vocab), *gemm, _mem("final_norm_bwd", 3 * c * rep * h)]
    return gemm


def embedding_parts(model: TransformerModel, ctx: Context, kind: Kind) -> list[Part]:
    """The embedding's row gather (F) and gradient scatter (W)."""
    nbytes = model.bytes_per_param_compute * tokens(model, ctx) * model.hidden
    return {Kind.F: [_mem("embedding", 2 * nbytes)], Kind.B: [], Kind.W: [_mem("embedding_grad", 3 * nbytes)]}[kind]


def mtp_parts(model: TransformerModel, ctx: Context, kind: Kind) -> list[Part]:
    """One MTP module: its ``2h x h`` projection (split by TP), a MoE layer, an LM head."""
    proj = Gemm("mtp_proj", tokens(model, ctx), 2 * model.hidden, -(-model.hidden // ctx.tp),
                0, 0, True, False)
    own = _gemm_parts(proj, kind, ctx, 1, model.bytes_per_param_compute)
    return own + layer_parts(model, ctx, True, kind) + head_parts(model, ctx, kind)


def _parts_of(model: TransformerModel, ctx: Context, what: str, kind: Kind) -> list[Part]:
    if what in ("dense", "moe"):
        return layer_parts(model, ctx, what == "moe", kind)
    return {"head": head_parts, "embedding": embedding_parts, "mtp": mtp_parts}[what](model, ctx, kind)


def stage_parts(model: TransformerModel, ctx: Context, layers: int, *, first: bool, last: bool, first_layer: int,
                kind: Kind, split_backward: bool) -> list[tuple[Part, int]]:
    """Every kernel of a stage's pass ``kind`` with how often it runs (B takes W's kernels
    too without a split backward)."""
    kinds = [kind] if split_backward or kind is Kind.F else ([] if kind is Kind.W else [Kind.B, Kind.W])
    moe = model.moe_layers_in(first_layer, first_layer + layers)
    counts = {"dense": layers - moe, "moe": moe, "head": int(last), "embedding": int(first),
              "mtp": model.mtp_layers if last else 0}
    return [(p, n) for k in kinds for what, n in counts.items() if n for p in _parts_of(model, ctx, what, k)]


@lru_cache(maxsize=16384)
def _split_time(model: TransformerModel, device: Device, ctx: Context, what: str, kind: Kind) -> tuple[float, float]:
    """(non-expert, routed-expert) seconds of ``what`` (dense, moe, head, embedding, mtp)."""
    parts, run = _parts_of(model, ctx, what, kind), run_factor(device)  # run overhead: hardware.overheads
    return (run * sum(p.time(device) for p in parts if not p.expert),
            run * sum(p.time(device) for p in parts if p.expert))


def kernel_seconds(model: TransformerModel, device: Device, ctx: Context, what: str, kind: Kind,
                   split_backward: bool = True) -> tuple[float, float]:
    """(non-expert, expert) seconds of ``what``'s pass ``kind``; without a split backward
    B is the input and the weight gradient together (and W nothing)."""
    if split_backward or kind is Kind.F:
        return _split_time(model, device, ctx, what, kind)
    if kind is Kind.W:
        return 0.0, 0.0
    b, w = _split_time(model, device, ctx, what, Kind.B), _split_time(model, device, ctx, what, Kind.W)
    return b[0] + w[0], b[1] + w[1]


def stage_segments(model: TransformerModel, device: Device, ctx: Context, layers: int, *, first: bool, last: bool,
                   first_layer: int, kind: Kind, split_backward: bool) -> list[float]:
    """A stage's pass ``kind`` as compute seconds in forward order, one entry per element of
    ``hardware.costs._moe_parts`` (a dense layer; a MoE layer's attention side and its
    routed experts; the head; each MTP module's two sides); the embedding joins the first."""
    def sec(what: str) -> tuple[float, float]:
        return kernel_seconds(model, device, ctx, what, kind, split_backward)

    out: list[float] = []
    moe = dense = None  # each kind's seconds once: every layer of a kind costs the same
    for i in range(first_layer, first_layer + layers):
        if model.is_moe_layer(i):
            moe = moe or list(sec("moe"))
            out += moe
        else:
            dense = dense if dense is not None else sum(sec("dense"))
            out.append(dense)
    if last:
        out.append(sum(sec("head")))
        out += list(sec("mtp")) * model.mtp_layers if model.mtp_layers else []
    if first:
        emb = sum(sec("embedding"))
        out = [out[0] + emb, *out[1:]] if out else [emb]
    return out
