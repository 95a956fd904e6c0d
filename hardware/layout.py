"""Which layers each pipeline stage holds: ``Layout``, read from and written as Megatron-LM's
``pipeline_model_parallel_layout`` strings.

A stage holds any number of transformer layers, zero included, and the model's ends as
explicit parts: the embedding (``E``), the multi-token-prediction modules (``m``) and the
LM head with the loss (``L``, with the final norm). Layers are contiguous: stage ``i``
holds layers ``first_layer(i) .. first_layer(i) + layers - 1``.

The string form is Megatron-Core's (``megatron/core/transformer/pipeline_parallel_layer_layout.py``):
stages separated by ``|``, ``E``, ``t`` (a transformer layer), ``m`` and ``L`` in each,
``x*n`` repeating one character, ``(...)*n`` repeating a group (which may hold ``|``),
commas purely cosmetic: ``"Ettt|(tt|)*29m|L"`` is 31 stages. The i-th stage of the
string is stage i of the pipeline in model order (for an interleaved placement Megatron's
order: virtual stage ``v`` of rank ``r`` is entry ``v*pp + r``). Megatron's rules hold:
``E`` exactly once and first, ``L`` exactly once and last, ``m`` after every ``t``; pipetab
adds that the MTP modules sit on the stage of the loss (they share its head) and that no
stage is empty (a schedule's op needs work).

``Layout.even(num_layers, stage_work)`` is the split every schedule gets by default
(``hardware.model.partition``): the embedding on the first stage, head, loss and MTP on
the last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple, Sequence

from pipetab.schedules.limits import SIZE_LIMITS

from .model import partition

if TYPE_CHECKING:
    from .model import TransformerModel

_CHARS = "EtmL"


class StagePart(NamedTuple):
    """What one stage holds: the embedding, ``layers`` transformer layers, ``mtp`` MTP
    modules, the LM head and loss."""

    embedding: bool
    layers: int
    mtp: int
    head: bool

    @property
    def empty(self) -> bool:
        return not (self.embedding or self.layers or self.mtp or self.head)

    def text(self) -> str:
        """This stage in Megatron's characters, runs of ``t`` as ``t*n`` (n > 2)."""
        body = "t" * self.layers if self.layers <= 2 else f"t*{self.layers}"
        mtp = "m" * self.mtp if self.mtp <= 2 else f"m*{self.mtp}"
        return ("E" if self.embedding else "") + body + mtp + ("L" if self.head else "")


_GROUP = re.compile(r"\(([^()]+)\)\*([0-9]+)", re.ASCII)
_REPEAT = re.compile(r"(.)\*([0-9]+)", re.ASCII)
# expanded characters a layout may have: every layer, MTP module and separator of the
# largest layout within the limits, and the embedding and the loss
MAX_EXPANDED = SIZE_LIMITS["layers"] * 2 + SIZE_LIMITS["layout_stages"] + 2


def _times(match: re.Match, text: str) -> int:
    """A repeat count of ``text``, refused before it is read when it is absurdly long."""
    digits = match.group(2)
    if len(digits) > 9:
        raise ValueError(f"layout {_shown(text)} repeats {match.group(1)!r} a number of times {len(digits)} digits "
                         f"long; a layout expands to at most {MAX_EXPANDED:,} characters (see docs/limits.md)")
    return int(digits)


def _expand(text: str, pattern: re.Pattern, original: str) -> str:
    """One of Megatron's expansion passes, its size computed before it is built."""
    size = len(text) + sum(len(m.group(1)) * _times(m, original) - len(m.group(0)) for m in pattern.finditer(text))
    if size > MAX_EXPANDED:
        raise ValueError(f"layout {_shown(original)} expands to {size:,} characters, more than the {MAX_EXPANDED:,} "
                         f"of {SIZE_LIMITS['layers']:,} layers in {SIZE_LIMITS['layout_stages']:,} stages "
                         "(see docs/limits.md)")
    return pattern.sub(lambda m: m.group(1) * int(m.group(2)), text)


def _shown(text: str) -> str:
    """A layout string for a message: at most 80 characters of it."""
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


def _unroll(text: str) -> str:
    """Megatron's ``parse_str_to_list`` expansion: commas dropped, ``(...)*n`` then ``x*n``
    (ASCII digits only), each pass bounded before it is built (``MAX_EXPANDED``)."""
    out = text.replace(",", "").replace(" ", "")
    for pattern in (_GROUP, _REPEAT):
        out = _expand(out, pattern, text)
    return out


@dataclass(frozen=True)
class Layout:
    """The parts of every stage of one pipeline, in pipeline order (module docstring)."""

    stages: tuple[StagePart, ...]

    def __post_init__(self) -> None:
        parts = self.stages
        if not parts:
            raise ValueError("a layout needs at least one stage")
        for i, p in enumerate(parts):
            if p.empty:
                raise ValueError(f"layout stage {i} holds nothing (no E, t, m or L): every stage needs work")
        if [p.embedding for p in parts].count(True) != 1 or not parts[0].embedding:
            raise ValueError("layout must hold the embedding E exactly once, on its first stage")
        if [p.head for p in parts].count(True) != 1 or not parts[-1].head:
            raise ValueError("layout must hold the loss L exactly once, on its last stage")
        if any(p.mtp for p in parts[:-1]):
            raise ValueError("layout's MTP layers m must sit on the last stage, with the loss L")

    # ---- reading and writing ----------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> Layout:
        """A Megatron layout string (module docstring); ``ValueError`` naming what is wrong."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"layout must be a Megatron layout string such as 'Et*3|t*4|t*3L', got {text!r}")
        flat = _unroll(text)
        bad = sorted(set(flat) - set(_CHARS) - {"|"})
        if bad:
            raise ValueError(f"layout {text!r} has characters {''.join(bad)!r}: allowed are E, t, m, L, '|', "
                             "'(...)*n', 'x*n' and commas")
        parts = []
        for stage in flat.split("|"):
            if not re.fullmatch(r"E?t*m*L?", stage):
                raise ValueError(f"layout stage {stage!r} of {text!r} must read E, then t, then m, then L")
            parts.append(StagePart("E" in stage, stage.count("t"), stage.count("m"), "L" in stage))
        return cls(tuple(parts))

    def __str__(self) -> str:
        return self.megatron()

    def megatron(self) -> str:
        """The Megatron string: runs of equal stages written ``(...|)*n``; parses back to
        this layout."""
        texts = [p.text() for p in self.stages]
        out: list[str] = []
        i = 0
        while i < len(texts):
            j = i
            while j + 1 < len(texts) and texts[j + 1] == texts[i]:
                j += 1
            run = j - i + 1
            last = j == len(texts) - 1
            if run > 2 and not last:
                out.append(f"({texts[i]}|)*{run}")
            elif run > 2:
                out.append(f"({texts[i]}|)*{run - 1}{texts[i]}")
            else:
                out.append("|".join(texts[i:j + 1]) + ("" if last else "|"))
            i = j + 1
        return "".join(out)

    @classmethod
    def even(cls, num_layers: int, stage_work: Sequence[float] | None = None, num_stages: int | None = None,
             mtp: int = 0) -> Layout:
        """``partition(stage_work, num_layers)`` (default: ``num_stages`` equal stages) with
        the embedding first and head, loss and ``mtp`` MTP modules last."""
        work = tuple(stage_work) if stage_work is not None else (1.0,) * (num_stages or 1)
        counts = partition(work, num_layers)
        n = len(counts)
        return cls(tuple(StagePart(s == 0, c, mtp if s == n - 1 else 0, s == n - 1) for s, c in enumerate(counts)))

    @classmethod
    def of_layers(cls, layers: Sequence[int], mtp: int = 0) -> Layout:
        """Stages of ``layers`` transformer layers each, embedding first, head last."""
        n = len(layers)
        return cls(tuple(StagePart(s == 0, int(c), mtp if s == n - 1 else 0, s == n - 1)
                         for s, c in enumerate(layers)))

    # ---- questions --------------------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def num_layers(self) -> int:
        return sum(p.layers for p in self.stages)

    @property
    def layers(self) -> tuple[int, ...]:
        """Transformer layers per stage."""
        return tuple(p.layers for p in self.stages)

    @property
    def first_layers(self) -> tuple[int, ...]:
        """Index of each stage's first layer."""
        return tuple([0, *accumulate(self.layers)][:-1])

    def check(self, model: TransformerModel, num_stages: int | None = None) -> None:
        """``ValueError`` unless this layout splits ``model`` (its layers and MTP modules)
        into ``num_stages`` stages (when given)."""
        if num_stages is not None and num_stages != self.num_stages:
            raise ValueError(f"layout {self.megatron()!r} has {self.num_stages} stages, the schedule "
                             f"{num_stages} (pipeline stages, virtual stages included)")
        if self.num_layers != model.num_layers:
            raise ValueError(f"layout {self.megatron()!r} holds {self.num_layers} transformer layers t, "
                             f"model {model.name!r} has {model.num_layers}")
        mtp = sum(p.mtp for p in self.stages)
        if mtp != model.mtp_layers:
            raise ValueError(f"layout {self.megatron()!r} holds {mtp} MTP layers m, model {model.name!r} "
                             f"has {model.mtp_layers}")


def layout_of(value: object) -> Layout | None:
    """``value`` (a ``Layout``, a Megatron string or None) as a ``Layout``."""
    if value is None or isinstance(value, Layout):
        return value
    if isinstance(value, str):
        return Layout.parse(value)
    raise ValueError(f"layout must be a Megatron layout string, got {value!r}")
