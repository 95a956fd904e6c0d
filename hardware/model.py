"""The trained model (a decoder-only transformer) and its split into stages.

A model is a family of choices, each a field of ``TransformerModel``:

* attention with ``heads`` query heads and ``kv_heads`` key/value heads (``kv_heads =
  heads``: multi-head; fewer: grouped-query, GQA; 1: multi-query, MQA), head size
  ``hidden / heads``, so the K and V projections are ``hidden x kv_hidden`` with
  ``kv_hidden = hidden * kv_heads / heads``;
* an MLP of hidden size ``ffn_hidden``: ``"gelu"`` (two matrices, up and down) or
  ``"swiglu"`` (three: gate, up, down);
* ``"layernorm"`` (weight and bias, ``2h``) or ``"rmsnorm"`` (weight only, ``h``), two
  per layer; biases on the linear layers or not (``bias``);
* an input embedding ``V*h`` on the first stage of a pipeline and an LM head ``V*h`` on the
  last; ``tied_embeddings`` shares one matrix (counted once in ``total_params``, but each
  end stage holds a copy whose gradients are summed, as Megatron-LM does);
* the attention kernel (``"flash"``: fused, scores never stored; ``"classic"``: scores
  stored), ``dropout`` (1-byte masks stored) and ``logit_bytes`` (bytes per logit the loss
  keeps for its backward; 0 counts no LM-head or loss activation). These change activation
  memory and traffic only (``hardware.layer``).

Parameters of a layer: attention ``2h^2 + 2*h*kv_hidden`` (+ biases ``2h + 2*kv_hidden``),
MLP ``n*h*f`` with ``n`` = 2 (GELU) or 3 (SwiGLU) (+ biases ``(n-1)*f + h``), two norms.
For the GPT default (GELU, biases, LayerNorm, multi-head) that is ``4h^2 + 2hf + 9h + f``
(``12h^2 + 13h`` at ``f = 4h``), as in Megatron / Narayanan et al. 2021. Position
embeddings and the final norm are not counted (rotary positions assumed; the final norm is
at most ``2h`` parameters), which keeps the first and last stage of equal size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

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


@dataclass(frozen=True)
class TransformerModel:
    """A decoder-only transformer: ``num_layers`` blocks of hidden size ``hidden`` with
    ``heads`` attention heads (``kv_heads`` of them for keys and values, default all) and
    MLP size ``ffn_hidden`` (default ``4*hidden``), sequences of ``seq_len`` tokens,
    vocabulary ``vocab``, ``global_batch`` sequences per training step (a default: the
    planner and ``hardware_costs`` take the microbatch size explicitly). Family fields:
    see the module docstring.

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
    ffn_hidden: int | None = None
    bytes_per_param_compute: int = 2
    bytes_per_grad: int = 2
    bytes_per_param_state: int = 16
    summary: str = ""
    kv_heads: int | None = None
    mlp: str = "gelu"
    norm: str = "layernorm"
    bias: bool = True
    tied_embeddings: bool = False
    attention: str = "flash"
    dropout: bool = True
    logit_bytes: int = 4

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"model name must be a non-empty string, got {self.name!r}")
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden if isinstance(self.hidden, int) else None)
        kv_heads = self.heads if self.kv_heads is None else self.kv_heads
        object.__setattr__(self, "kv_heads", kv_heads)
        for what in ("num_layers", "hidden", "heads", "seq_len", "vocab", "global_batch",
                     "ffn_hidden", "bytes_per_param_compute", "bytes_per_grad",
                     "bytes_per_param_state", "kv_heads"):
            check_count(what, getattr(self, what))
        check_count("logit_bytes", self.logit_bytes, 0)
        if self.hidden % self.heads:
            raise ValueError(
                f"heads must divide hidden ({self.hidden}), got {self.heads}"
            )
        if self.heads % kv_heads:
            raise ValueError(f"kv_heads must divide heads ({self.heads}), got {kv_heads}")
        _choice("mlp", self.mlp, MLPS)
        _choice("norm", self.norm, NORMS)
        _choice("attention", self.attention, ATTENTIONS)
        for what in ("bias", "tied_embeddings", "dropout"):
            _flag(what, getattr(self, what))
        if self.bytes_per_param_state < self.bytes_per_param_compute + self.bytes_per_grad:
            raise ValueError(
                f"bytes_per_param_state ({self.bytes_per_param_state}) must hold at least the "
                f"weight and the gradient ({self.bytes_per_param_compute + self.bytes_per_grad} bytes)"
            )

    # ---- shape --------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of the K (and of the V) projection: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim  # type: ignore[operator]

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of the MLP: 2 (GELU: up, down) or 3 (SwiGLU: gate, up, down)."""
        return 3 if self.mlp == "swiglu" else 2

    @property
    def bytes_per_optimizer_state(self) -> int:
        """Persistent bytes per parameter beyond weight and gradient (ZeRO-1 shards them)."""
        return self.bytes_per_param_state - self.bytes_per_param_compute - self.bytes_per_grad

    # ---- parameter counts -------------------------------------------------------------
    @property
    def layer_params(self) -> int:
        """Parameters of one transformer layer (module docstring); ``12h^2 + 13h`` for
        the GPT default."""
        h, f, kv, n = self.hidden, self.ffn_hidden, self.kv_hidden, self.mlp_matrices
        attention = 2 * h * h + 2 * h * kv
        mlp = n * h * f  # type: ignore[operator]
        biases = (2 * h + 2 * kv) + (n - 1) * f + h if self.bias else 0  # type: ignore[operator]
        norms = 2 * (2 * h if self.norm == "layernorm" else h)
        return attention + mlp + biases + norms

    @property
    def embedding_params(self) -> int:
        """Input embedding ``V*h`` (first stage)."""
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """LM head ``V*h`` (last stage; a copy of the embedding when tied)."""
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """Parameters of the model (a tied embedding counted once)."""
        head = 0 if self.tied_embeddings else self.head_params
        return self.num_layers * self.layer_params + self.embedding_params + head

    def stage_params(self, layers: int, first: bool, last: bool) -> int:
        """Parameters a stage of ``layers`` layers holds; ``first``/``last`` add the
        embedding / LM head (each end stage holds its copy when they are tied)."""
        check_count("layers", layers, 0)
        return (layers * self.layer_params + (self.embedding_params if first else 0)
                + (self.head_params if last else 0))

    @property
    def family(self) -> str:
        """A short description of the family: ``GQA 64/8, SwiGLU, RMSNorm, ...``."""
        a, k = self.heads, self.kv_heads
        attn = "MHA" if k == a else ("MQA" if k == 1 else f"GQA {a}/{k}")
        parts = [attn, "SwiGLU" if self.mlp == "swiglu" else "GELU",
                 "RMSNorm" if self.norm == "rmsnorm" else "LayerNorm",
                 "tied" if self.tied_embeddings else "untied", f"{self.attention} attention"]
        return ", ".join(parts)

    @property
    def description(self) -> str:
        text = (
            f"{self.name}: {self.num_layers} layers, hidden {self.hidden}, {self.heads} heads, "
            f"ffn {self.ffn_hidden}, seq {self.seq_len}, vocab {self.vocab}, "
            f"global batch {self.global_batch}, {self.total_params / 1e9:.3g} B params ({self.family})"
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
