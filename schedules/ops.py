"""Ops: one forward, backward or weight-gradient pass of one microbatch on one stage.

An op's compact text form is ``F3s2`` (forward of microbatch 3 on stage 2 of pipeline 0)
or ``B3p1s2`` (backward of microbatch 3 on stage 2 of pipeline 1); ``Op.parse`` inverts
``str(op)``.
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple


class Kind(enum.Enum):
    """What an op computes: forward, backward (input gradient, or full backward when the
    weight gradient is not split off), or weight gradient."""

    F = "F"
    B = "B"
    W = "W"

    def __str__(self) -> str:
        return self.value

    # members are singletons: identity hashing is correct and much faster than Enum's
    __hash__ = object.__hash__


_OP_RE = re.compile(r"^([FBW])(\d+)(?:p(\d+))?s(\d+)$")


class Op(NamedTuple):
    """One op: ``kind`` of ``microbatch`` at ``stage`` (its index along ``pipeline``)."""

    kind: Kind
    pipeline: int
    stage: int
    microbatch: int

    def __str__(self) -> str:
        pipe = f"p{self.pipeline}" if self.pipeline else ""
        return f"{self.kind.value}{self.microbatch}{pipe}s{self.stage}"

    @classmethod
    def parse(cls, text: str) -> "Op":
        """Parse the compact form produced by ``str(op)``."""
        match = _OP_RE.match(text.strip())
        if not match:
            raise ValueError(
                f"op {text!r} is malformed; expected e.g. 'F3s2' or 'B3p1s2' "
                "(kind F/B/W, microbatch, optional pipeline, stage)"
            )
        kind, mb, pipe, stage = match.groups()
        return cls(Kind(kind), int(pipe or 0), int(stage), int(mb))


def F(microbatch: int, stage: int, pipeline: int = 0) -> Op:
    """Forward op shorthand."""
    return Op(Kind.F, pipeline, stage, microbatch)


def B(microbatch: int, stage: int, pipeline: int = 0) -> Op:
    """Backward op shorthand."""
    return Op(Kind.B, pipeline, stage, microbatch)


def W(microbatch: int, stage: int, pipeline: int = 0) -> Op:
    """Weight-gradient op shorthand."""
    return Op(Kind.W, pipeline, stage, microbatch)


def data_predecessors(op: Op, num_stages: int) -> tuple[Op, ...]:
    """The ops whose results ``op`` consumes, within its microbatch's chain.

    F(s) after F(s-1); B(s) after B(s+1), or after F(last) on the last stage;
    W(s) after B(s).
    """
    kind, p, s, m = op
    if kind is Kind.F:
        return (Op(Kind.F, p, s - 1, m),) if s > 0 else ()
    if kind is Kind.B:
        if s < num_stages - 1:
            return (Op(Kind.B, p, s + 1, m),)
        return (Op(Kind.F, p, s, m),)
    return (Op(Kind.B, p, s, m),)


def data_successors(op: Op, num_stages: int, split: bool) -> list[Op]:
    """The ops that consume ``op``'s result within its microbatch's chain (``split``: the
    backward is split, so a B also feeds its W)."""
    k, p, s, m = op
    if k is Kind.F:
        return [Op(Kind.F, p, s + 1, m) if s + 1 < num_stages else Op(Kind.B, p, s, m)]
    if k is Kind.B:
        out = [Op(Kind.B, p, s - 1, m)] if s > 0 else []
        if split:
            out.append(Op(Kind.W, p, s, m))
        return out
    return []
