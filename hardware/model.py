"""The trained model (a decoder-only transformer, dense or mixture-of-experts) and its
split into stages.

A model is a family of choices, each a field of ``TransformerModel``:

* attention with ``heads`` query heads and ``kv_heads`` key/value heads (``kv_heads =
  heads``: multi-head; fewer: grouped-query, GQA; 1: multi-query, MQA) of ``head_dim``
  each (default ``hidden / heads``; Qwen3 sets it apart), so the K and V projections are
  ``hidden x kv_hidden`` with ``kv_hidden = kv_heads * head_dim``; ``qk_norm`` adds an
  RMSNorm of ``head_dim`` on Q and on K (Qwen3);
* or **multi-head latent attention** (MLA; DeepSeek-V2, arXiv 2405.04434 section 2.1,
  and DeepSeek-V3) when ``kv_lora_rank > 0``: Q through a low-rank ``q_lora_rank`` (0:
  a full ``h x a*(d+r)`` projection), K and V from one shared latent of
  ``kv_lora_rank`` plus a decoupled RoPE key of ``qk_rope_head_dim`` (``r``); each head
  has ``head_dim`` (``d``, the no-RoPE part) + ``r`` for queries and keys and
  ``v_head_dim`` for values. Weights: ``W_DQ h x q_r``, ``W_UQ q_r x a(d+r)``,
  ``W_DKV h x (kv_r + r)``, ``W_UKV kv_r x a(d + d_v)``, ``W_O a*d_v x h``, and RMSNorms of
  ``q_r`` and ``kv_r``;
* an MLP of hidden size ``ffn_hidden``: ``"gelu"`` (two matrices, up and down) or
  ``"swiglu"`` (three: gate, up, down);
* or a **mixture of experts** when ``num_experts > 0`` (Shazeer et al. 2017; Mixtral,
  arXiv 2401.04088; DeepSeekMoE, arXiv 2401.06066): a router ``h x E``, ``num_experts``
  routed experts of ``expert_ffn_hidden`` each (``experts_per_token`` of them per
  token) and ``shared_experts`` always-active experts of the same size, each expert an
  MLP of the model's kind. The first ``dense_layers`` layers keep a dense MLP of
  ``ffn_hidden`` (DeepSeek's ``first_k_dense_replace``), and after them every
  ``moe_layer_freq``-th layer is a MoE layer (``i % moe_layer_freq == 0``, DeepSeek's
  rule); ``mtp_layers`` multi-token-prediction modules (DeepSeek-V3 section 2.2: a
  ``2h x h`` projection, two norms and one MoE layer each, sharing the embedding and the
  LM head) run on the last stage and are counted apart from ``total_params``, as the
  published counts do;
  ``mlp_only_layers`` lists further layers that keep the dense MLP (Qwen-MoE's key of that
  name; ``hardware.hf`` reads its ``decoder_sparse_step`` into this list too);
  ``shared_expert_gate`` adds Qwen2-MoE's ``h x 1`` sigmoid gate on the shared experts'
  output (counted with the router);
* ``"layernorm"`` (weight and bias, ``2h``) or ``"rmsnorm"`` (weight only, ``h``), two
  per layer; biases on the linear layers or not (``bias``), or per projection:
  ``qkv_bias`` (Q, K and V; Qwen2), ``out_bias`` (the attention output), ``mlp_bias``
  (the MLPs and experts), each ``bias`` unless given;
* an input embedding ``V*h`` on the first stage of a pipeline and an LM head ``V*h`` on the
  last; ``tied_embeddings`` shares one matrix (counted once in ``total_params``, but each
  end stage holds a copy whose gradients are summed, as Megatron-LM does);
* the attention kernel (``"flash"``: fused, scores never stored; ``"classic"``: scores
  stored), ``dropout`` (1-byte masks stored) and ``logit_bytes`` (bytes per logit the loss
  keeps for its backward; 0 counts no LM-head or loss activation). These change activation
  memory and traffic only (``hardware.layer``).

Parameters of a dense layer: attention ``2h*a*d + 2*h*kv_hidden`` (+ biases ``a*d + h +
2*kv_hidden``), MLP ``n*h*f`` with ``n`` = 2 (GELU) or 3 (SwiGLU) (+ biases ``(n-1)*f +
h``), two norms. For the GPT default (GELU, biases, LayerNorm, multi-head, ``a*d = h``)
that is ``4h^2 + 2hf + 9h + f`` (``12h^2 + 13h`` at ``f = 4h``), as in Megatron /
Narayanan et al. 2021. A MoE layer replaces the MLP by the router and ``E + S`` expert
MLPs. Position embeddings and the final norm are not counted (rotary positions assumed;
the final norm is at most ``2h`` parameters), which keeps the first and last stage of
equal size.

Active parameters (``active_params``): what one token's forward uses — every layer's
attention and norms, the router, ``k`` routed and all shared experts, the input embedding
and the LM head (Mistral's and Qwen's convention for "active"); ``active_matmul_params``
leaves out the input embedding (a table lookup, no multiply), the convention of
DeepSeek's published counts (DeepSeek-V2's 21 B and V3's 37 B) and of ``6N`` FLOP counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, overload

from pipetab.schedules.checks import check_count

MLPS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
ATTENTIONS = ("flash", "classic")


def _choice(what: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")


def _flag(what: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false, got {value!r}")


class _Derived:
    """A field the constructor takes as ``int | None`` (None, the default: derive it) and
    that reads as ``int``: ``__post_init__`` derives it before anything else reads it
    (``_given`` reads what the constructor was given)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type) -> None: ...
    @overload
    def __get__(self, obj: TransformerModel, owner: type) -> int: ...
    def __get__(self, obj: TransformerModel | None, owner: type) -> int | None:
        return None if obj is None else obj.__dict__[self.key]

    def __set__(self, obj: TransformerModel, value: int | None) -> None:
        obj.__dict__[self.key] = value


def _given(model: TransformerModel, name: str) -> int | None:
    """What the constructor was given for the ``_Derived`` field ``name`` (None: derive it)."""
    return model.__dict__[f"_{name}"]


@dataclass(frozen=True)
class TransformerModel:
    """A decoder-only transformer: ``num_layers`` blocks of hidden size ``hidden`` with
    ``heads`` attention heads (``kv_heads`` of them for keys and values, default all) and
    MLP size ``ffn_hidden`` (default ``4*hidden``), sequences of ``seq_len`` tokens,
    vocabulary ``vocab``, ``global_batch`` sequences per training step (a default: the
    planner and ``hardware_costs`` take the microbatch size explicitly). Family fields
    (attention variant, mixture of experts): see the module docstring.

    Bytes: ``bytes_per_param_compute`` per weight as the kernels read it, and per activation
    element / message element (2 = bf16); ``bytes_per_grad`` per gradient element
    (reduced among data-parallel replicas); ``bytes_per_param_state`` of persistent memory
    per parameter in all (16 = mixed-precision Adam: 2 bf16 weight + 2 bf16 grad + 4 fp32
    master + 4 m + 4 v); the optimizer's share is what remains after weight and gradient
    (ZeRO shards it).
    """

    name: str
    num_layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    global_batch: int
    ffn_hidden: _Derived = _Derived()
    bytes_per_param_compute: int = 2
    bytes_per_grad: int = 2
    bytes_per_param_state: int = 16
    summary: str = ""
    kv_heads: _Derived = _Derived()
    mlp: str = "gelu"
    norm: str = "layernorm"
    bias: bool = True
    tied_embeddings: bool = False
    attention: str = "flash"
    dropout: bool = True
    logit_bytes: int = 4
    head_dim: _Derived = _Derived()
    qk_norm: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: _Derived = _Derived()
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn_hidden: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    moe_layer_freq: int = 1
    mtp_layers: int = 0
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_gate: bool = False
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    mlp_bias: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"model name must be a non-empty string, got {self.name!r}")
        put = object.__setattr__  # frozen: derived defaults are set once, here
        if _given(self, "ffn_hidden") is None:
            put(self, "ffn_hidden", 4 * self.hidden if isinstance(self.hidden, int) else None)
        if _given(self, "kv_heads") is None:
            put(self, "kv_heads", self.heads)
        for what in ("num_layers", "hidden", "heads", "seq_len", "vocab", "global_batch",
                     "ffn_hidden", "bytes_per_param_compute", "bytes_per_grad",
                     "bytes_per_param_state", "kv_heads"):
            check_count(what, getattr(self, what))
        for what in ("logit_bytes", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "num_experts",
                     "experts_per_token", "shared_experts", "dense_layers", "mtp_layers"):
            check_count(what, getattr(self, what), 0)
        check_count("moe_layer_freq", self.moe_layer_freq)
        if _given(self, "head_dim") is None:
            if self.hidden % self.heads:
                raise ValueError(f"heads must divide hidden ({self.hidden}) unless head_dim is given, "
                                 f"got {self.heads}")
            put(self, "head_dim", self.hidden // self.heads)
        check_count("head_dim", self.head_dim)
        if _given(self, "v_head_dim") is None:
            put(self, "v_head_dim", self.head_dim)
        check_count("v_head_dim", self.v_head_dim)
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads must divide heads ({self.heads}), got {self.kv_heads}")
        for what in ("qkv_bias", "out_bias", "mlp_bias"):
            if getattr(self, what) is None:
                put(self, what, self.bias)
        _choice("mlp", self.mlp, MLPS)
        _choice("norm", self.norm, NORMS)
        _choice("attention", self.attention, ATTENTIONS)
        for what in ("bias", "tied_embeddings", "dropout", "qk_norm", "qkv_bias", "out_bias", "mlp_bias",
                     "shared_expert_gate"):
            _flag(what, getattr(self, what))
        self._check_mla()
        self._check_moe()
        if self.bytes_per_param_state < self.bytes_per_param_compute + self.bytes_per_grad:
            raise ValueError(
                f"bytes_per_param_state ({self.bytes_per_param_state}) must hold at least the "
                f"weight and the gradient ({self.bytes_per_param_compute + self.bytes_per_grad} bytes)"
            )

    def _check_mla(self) -> None:
        if not self.kv_lora_rank:
            for what in ("q_lora_rank", "qk_rope_head_dim"):
                if getattr(self, what):
                    raise ValueError(f"{what} applies to multi-head latent attention only (kv_lora_rank > 0)")
            return
        if self.kv_heads != self.heads:
            raise ValueError("multi-head latent attention has no separate kv_heads (leave it out or set it to heads)")
        if self.qk_norm:
            raise ValueError("qk_norm applies to standard attention only, not multi-head latent attention")

    def _check_moe(self) -> None:
        if not self.num_experts:
            for what in ("experts_per_token", "shared_experts", "dense_layers", "mtp_layers"):
                if getattr(self, what):
                    raise ValueError(f"{what} applies to mixture-of-experts models only (num_experts > 0)")
            if self.expert_ffn_hidden is not None or self.moe_layer_freq != 1:
                raise ValueError("expert_ffn_hidden and moe_layer_freq apply to mixture-of-experts models only "
                                 "(num_experts > 0)")
            if self.mlp_only_layers or self.shared_expert_gate:
                raise ValueError("mlp_only_layers and shared_expert_gate apply to mixture-of-experts models only "
                                 "(num_experts > 0)")
            return
        if not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(f"experts_per_token must be between 1 and num_experts ({self.num_experts}), "
                             f"got {self.experts_per_token}")
        if self.expert_ffn_hidden is None:
            raise ValueError("a mixture-of-experts model needs expert_ffn_hidden (the size of one expert's MLP)")
        check_count("expert_ffn_hidden", self.expert_ffn_hidden)
        if self.dense_layers >= self.num_layers:
            raise ValueError(f"dense_layers must be below num_layers ({self.num_layers}), got {self.dense_layers}")
        only = self.mlp_only_layers
        if (not isinstance(only, tuple) or list(only) != sorted(set(only))
                or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.num_layers for i in only)):
            raise ValueError(f"mlp_only_layers must be a sorted tuple of distinct layer indices below num_layers "
                             f"({self.num_layers}), got {only!r}")
        if self.shared_expert_gate and not self.shared_experts:
            raise ValueError("shared_expert_gate needs shared experts (shared_experts > 0)")

    # ---- shape --------------------------------------------------------------------------
    @property
    def kv_hidden(self) -> int:
        """Width of the K (and of the V) projection: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (``kv_lora_rank > 0``)."""
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        """A mixture-of-experts model (``num_experts > 0``)."""
        return self.num_experts > 0

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head: ``head_dim`` (+ the RoPE part under MLA)."""
        return self.head_dim + self.qk_rope_head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of the MLP: 2 (GELU: up, down) or 3 (SwiGLU: gate, up, down)."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def bytes_per_optimizer_state(self) -> int:
        """Persistent bytes per parameter beyond weight and gradient (ZeRO-1 shards them)."""
        return self.bytes_per_param_state - self.bytes_per_param_compute - self.bytes_per_grad

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has experts (module docstring)."""
        return (self.moe and layer >= self.dense_layers and layer % self.moe_layer_freq == 0
                and layer not in self.mlp_only_layers)

    @property
    def one_layer_kind(self) -> bool:
        """Whether every layer is of one kind (dense, or MoE from the first on): then a
        stage's costs do not depend on which layers it holds, only on how many."""
        return not self.moe or (self.dense_layers == 0 and self.moe_layer_freq == 1 and not self.mlp_only_layers)

    def moe_layers_in(self, start: int, stop: int) -> int:
        """MoE layers among layers ``start .. stop - 1`` (counted: the multiples of
        ``moe_layer_freq`` from ``dense_layers`` on, less the ``mlp_only_layers``)."""
        if not self.moe or stop <= start:
            return 0
        lo, f = max(start, self.dense_layers), self.moe_layer_freq
        rule = max(0, (stop - 1) // f - (lo - 1) // f) if stop > lo else 0
        return rule - sum(1 for i in self.mlp_only_layers if lo <= i < stop and i % f == 0)

    @property
    def num_moe_layers(self) -> int:
        return self.moe_layers_in(0, self.num_layers)

    # ---- parameter counts -------------------------------------------------------------
    @property
    def norm_params(self) -> int:
        """One norm over the hidden size (``2h`` LayerNorm, ``h`` RMSNorm)."""
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    @property
    def attention_params(self) -> int:
        """Attention projections (and biases, Q/K or latent norms) of one layer."""
        h, a = self.hidden, self.heads
        if self.mla:
            r, qr, kvr = self.qk_rope_head_dim, self.q_lora_rank, self.kv_lora_rank
            q = (h * qr + qr + qr * a * self.qk_head_dim) if qr else h * a * self.qk_head_dim
            kv = h * (kvr + r) + kvr + kvr * a * (self.head_dim + self.v_head_dim)
            return q + kv + a * self.v_head_dim * h
        q, kv = a * self.head_dim, self.kv_hidden
        weights = 2 * h * q + 2 * h * kv
        biases = ((q + 2 * kv) if self.qkv_bias else 0) + (h if self.out_bias else 0)
        return weights + biases + (2 * self.head_dim if self.qk_norm else 0)

    def mlp_params(self, ffn: int) -> int:
        """One MLP of hidden size ``ffn`` (an expert is one too)."""
        n = self.mlp_matrices
        return n * self.hidden * ffn + (((n - 1) * ffn + self.hidden) if self.mlp_bias else 0)

    @property
    def expert_params(self) -> int:
        """One expert's MLP."""
        return self.mlp_params(self.expert_ffn_hidden or 0)

    @property
    def router_params(self) -> int:
        """The router ``h x E`` and the shared experts' gate ``h x 1`` (``shared_expert_gate``)."""
        return self.hidden * (self.num_experts + (1 if self.shared_expert_gate else 0))

    def layer_params_of(self, moe: bool, active: bool = False) -> int:
        """Parameters of a dense (``moe`` False) or MoE layer; ``active``: only the
        ``k`` routed experts a token uses."""
        base = self.attention_params + 2 * self.norm_params
        if not moe:
            return base + self.mlp_params(self.ffn_hidden)
        routed = self.experts_per_token if active else self.num_experts
        return base + self.router_params + (routed + self.shared_experts) * self.expert_params

    @property
    def layer_params(self) -> int:
        """Parameters of one dense transformer layer (module docstring); ``12h^2 + 13h``
        for the GPT default."""
        return self.layer_params_of(False)

    def layers_params(self, start: int, stop: int, active: bool = False) -> int:
        """Parameters of layers ``start .. stop - 1``."""
        moe = self.moe_layers_in(start, stop)
        return (moe * self.layer_params_of(True, active)
                + (stop - start - moe) * self.layer_params_of(False))

    @property
    def embedding_params(self) -> int:
        """Input embedding ``V*h`` (first stage)."""
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """LM head ``V*h`` (last stage; a copy of the embedding when tied)."""
        return self.vocab * self.hidden

    @property
    def mtp_params(self) -> int:
        """The multi-token-prediction modules (embedding and head shared with the model):
        a ``2h x h`` projection, two norms and a MoE layer each, and a final norm."""
        one = 2 * self.hidden * self.hidden + 3 * self.norm_params + self.layer_params_of(True)
        return self.mtp_layers * one

    @property
    def total_params(self) -> int:
        """Parameters of the model (a tied embedding counted once; MTP modules apart)."""
        head = 0 if self.tied_embeddings else self.head_params
        return self.layers_params(0, self.num_layers) + self.embedding_params + head

    @property
    def active_matmul_params(self) -> int:
        """Parameters one token multiplies by: the active layers and the LM head."""
        return self.layers_params(0, self.num_layers, active=True) + self.head_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses (module docstring): ``active_matmul_params`` plus the
        input embedding (unless tied to the head); ``total_params`` for a dense model."""
        return self.active_matmul_params + (0 if self.tied_embeddings else self.embedding_params)

    def stage_params(self, layers: int, first: bool, last: bool, first_layer: int = 0) -> int:
        """Parameters a stage of ``layers`` layers from ``first_layer`` holds; ``first`` /
        ``last`` add the embedding / LM head (each end stage holds its copy when they are
        tied) and ``last`` the MTP modules."""
        check_count("layers", layers, 0)
        return (self.layers_params(first_layer, first_layer + layers)
                + (self.embedding_params if first else 0)
                + (self.head_params + self.mtp_params if last else 0))

    @property
    def family(self) -> str:
        """A short description of the family: ``GQA 64/8, SwiGLU, RMSNorm, ...``."""
        a, k = self.heads, self.kv_heads
        attn = "MHA" if k == a else ("MQA" if k == 1 else f"GQA {a}/{k}")
        attn = f"MLA {a} heads" if self.mla else attn
        parts = [attn, "SwiGLU" if self.mlp == "swiglu" else "GELU",
                 "RMSNorm" if self.norm == "rmsnorm" else "LayerNorm",
                 "tied" if self.tied_embeddings else "untied", f"{self.attention} attention"]
        if self.moe:
            shared = f" + {self.shared_experts} shared" if self.shared_experts else ""
            parts.insert(1, f"MoE {self.num_experts} experts top-{self.experts_per_token}{shared}")
        return ", ".join(parts)

    @property
    def description(self) -> str:
        size = f"{self.total_params / 1e9:.3g} B params"
        if self.moe:
            size += f" ({self.active_params / 1e9:.3g} B active)"
        text = (
            f"{self.name}: {self.num_layers} layers, hidden {self.hidden}, {self.heads} heads, "
            f"ffn {self.ffn_hidden}, seq {self.seq_len}, vocab {self.vocab}, "
            f"global batch {self.global_batch}, {size} ({self.family})"
        )
        return f"{text} -- {self.summary}" if self.summary else text


def partition(stage_work: Sequence[float], num_layers: int) -> tuple[int, ...]:
    """Split ``num_layers`` layers into stages in proportion to ``stage_work``.

    Largest-remainder rounding: each stage first gets ``floor(L * w_i / sum(w))`` layers,
    the layers left over go one each to the stages with the largest fractional remainders
    (ties: lower stage index). A stage left with 0 layers then takes one from the stage
    most above its exact quota (ties: lower index), so every stage has >= 1 layer.
    Example: ``partition([1, 1, 2, 2], 128) == (21, 21, 43, 43)``.
    """
    check_count("num_layers", num_layers)
    works = list(stage_work)
    if not works:
        raise ValueError("stage_work must name at least one stage")
    for w in works:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"stage_work values must be finite numbers > 0, got {w!r}")
    if len(works) > num_layers:
        raise ValueError(
            f"cannot split {num_layers} layers into {len(works)} stages: every stage needs "
            f"at least one layer"
        )
    total = sum(works)
    quotas = [num_layers * w / total for w in works]
    counts = [math.floor(q) for q in quotas]
    left = num_layers - sum(counts)
    by_remainder = sorted(range(len(works)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[:left]:
        counts[i] += 1
    for i in range(len(counts)):
        if counts[i] == 0:
            donor = min(
                (j for j in range(len(counts)) if counts[j] > 1),
                key=lambda j: (-(counts[j] - quotas[j]), j),
            )
            counts[donor] -= 1
            counts[i] = 1
    return tuple(counts)
