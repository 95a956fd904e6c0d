"""The trained model (a Megatron-style GPT decoder) and its split into stages.

Parameter counts follow Megatron / Narayanan et al. 2021 with biases and two layer norms
per layer: a layer has ``4h^2 + 2*h*f + 9h + f`` parameters (attention QKV + output
projection, MLP with hidden size ``f``, their biases, two layer norms), which is
``12h^2 + 13h`` for ``f = 4h``. The input embedding (``V*h``) sits on the first stage of a
pipeline, the LM head (``V*h``, untied from the embedding) on the last. Position
embeddings and the final layer norm are ignored (rotary positions assumed; the final norm
is ``2h`` parameters), which keeps the first and last stage of equal size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def _int(what: str, value: object, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class TransformerModel:
    """A GPT decoder: ``num_layers`` blocks of hidden size ``hidden`` with ``heads``
    attention heads and MLP size ``ffn_hidden`` (default ``4*hidden``), sequences of
    ``seq_len`` tokens, vocabulary ``vocab``, ``global_batch`` sequences per training step.

    Bytes: ``bytes_per_param_compute`` per weight as the kernels read it, and per activation
    element / message element (2 = bf16); ``bytes_per_grad`` per gradient element
    (all-reduced); ``bytes_per_param_state`` of persistent memory per parameter
    (16 = mixed-precision Adam: 2 bf16 weight + 2 bf16 grad + 4 fp32 master + 4 m + 4 v).
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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"model name must be a non-empty string, got {self.name!r}")
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden if isinstance(self.hidden, int) else None)
        for what in ("num_layers", "hidden", "heads", "seq_len", "vocab", "global_batch",
                     "ffn_hidden", "bytes_per_param_compute", "bytes_per_grad",
                     "bytes_per_param_state"):
            _int(what, getattr(self, what))
        if self.hidden % self.heads:
            raise ValueError(
                f"heads must divide hidden ({self.hidden}), got {self.heads}"
            )

    # ---- parameter counts -------------------------------------------------------------
    @property
    def layer_params(self) -> int:
        """Parameters of one transformer layer: ``4h^2 + 2hf + 9h + f`` (= ``12h^2 + 13h``
        for ``f = 4h``)."""
        h, f = self.hidden, self.ffn_hidden
        return 4 * h * h + 2 * h * f + 9 * h + f  # type: ignore[operator]

    @property
    def embedding_params(self) -> int:
        """Input embedding ``V*h`` (first stage)."""
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """LM head ``V*h``, untied (last stage)."""
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params + self.head_params

    def stage_params(self, layers: int, first: bool, last: bool) -> int:
        """Parameters of a stage of ``layers`` layers; ``first``/``last`` add the
        embedding / LM head."""
        _int("layers", layers, 0)
        return (layers * self.layer_params + (self.embedding_params if first else 0)
                + (self.head_params if last else 0))

    def microbatch_size(self, num_microbatches: int) -> int:
        """Sequences per microbatch, ``global_batch / num_microbatches``; ``ValueError`` if
        not whole."""
        _int("num_microbatches", num_microbatches)
        if self.global_batch % num_microbatches:
            raise ValueError(
                f"global batch {self.global_batch} of model {self.name!r} cannot be split into "
                f"{num_microbatches} equal microbatches"
            )
        return self.global_batch // num_microbatches

    @property
    def description(self) -> str:
        text = (
            f"{self.name}: {self.num_layers} layers, hidden {self.hidden}, {self.heads} heads, "
            f"ffn {self.ffn_hidden}, seq {self.seq_len}, vocab {self.vocab}, "
            f"global batch {self.global_batch}, {self.total_params / 1e9:.3g} B params"
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
    _int("num_layers", num_layers)
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
