"""The stage partition as a question (docs/partition.md): ``Partition`` is ``even``, ``fixed``
(layer counts per pipeline and stage, ``check_layers``) or ``free`` — parsed and checked here,
solved by ``solver.cpsat.decompose.partition`` (the free one by enumeration); a shape's stages
are priced for it on ``shape_schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.ops import Kind, Op
from pipetab.solver.pricing import with_layers

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule
    from pipetab.solver.cpsat.problem import Problem
    from pipetab.solver.pricing import Layers

PARTITION_FORMS = "even, free, or layer counts per stage such as 8,8,8,8 (bidirectional: DOWN/UP, e.g. 9,8,8,7/7,8,8,9)"


class PartitionMode(StrEnum):
    EVEN = "even"
    FREE = "free"
    FIXED = "fixed"


@dataclass(frozen=True)
class Partition:
    """``mode`` ``even``, ``free`` or ``fixed`` (``layers`` per pipeline and stage)."""

    mode: PartitionMode = PartitionMode.EVEN
    layers: Layers | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", PartitionMode(self.mode))
        except ValueError:
            raise ValueError(f"partition must be {PARTITION_FORMS}, got {self.mode!r}") from None
        if (self.layers is not None) != (self.mode is PartitionMode.FIXED):
            raise ValueError("a fixed partition needs its layer counts, even and free take none")

    @classmethod
    def parse(cls, text: str) -> "Partition":
        """``even``, ``free``, ``8,8,8,8`` or ``9,8,8,7/7,8,8,9`` (one list per pipeline)."""
        t = str(text).strip().lower()
        if t in (PartitionMode.EVEN, PartitionMode.FREE):
            return cls(PartitionMode(t))
        try:
            layers = tuple(tuple(int(x) for x in part.split(",")) for part in t.split("/"))
        except ValueError:
            raise ValueError(f"partition must be {PARTITION_FORMS}, got {text!r}") from None
        return cls(PartitionMode.FIXED, layers)

    def label(self, layers: Layers | None = None) -> str:
        if self.mode is PartitionMode.FREE:
            return "partition free"
        return f"partition fixed: {format_layers(layers or self.layers or ())}"


def format_layers(layers: Layers) -> str:
    return "/".join(",".join(str(n) for n in row) for row in layers)


def check_layers(layers: Layers, num_layers: int, num_stages: Sequence[int]) -> Layers:
    """``layers`` (one list for all pipelines or one per pipeline) when each has one integer
    >= 1 per stage summing to ``num_layers``; else ``ValueError`` naming what is allowed."""
    rows = tuple(tuple(r) for r in layers)
    if len(rows) == 1 and len(num_stages) > 1:
        rows = rows * len(num_stages)
    if len(rows) != len(num_stages):
        raise ValueError(f"partition gives {len(rows)} lists, the placement has {len(num_stages)} pipelines")
    for p, (row, n) in enumerate(zip(rows, num_stages)):
        where = f" of pipeline {p}" if len(num_stages) > 1 else ""
        if len(row) != n:
            raise ValueError(f"partition{where} lists {len(row)} stages, the placement has {n}")
        if any(isinstance(x, bool) or not isinstance(x, int) for x in row):
            raise ValueError(f"partition{where} must list whole layer counts, got {list(row)}")
        if min(row) < 1:
            raise ValueError(f"partition{where} gives a stage {min(row)} layers; every stage needs >= 1")
        if sum(row) != num_layers:
            raise ValueError(f"partition{where} sums to {sum(row)} layers, the model has {num_layers}")
    return rows


def shape_schedule(problem: Problem, stage_work: Layers | None = None) -> Schedule:
    """A schedule of the problem's shape (one microbatch at a time on a placement of it;
    ``stage_work`` if given, else the problem's) for costing its stages on hardware."""
    placement = problem.fixed_placement or problem.dealt
    orders: list[list[Op]] = [[] for _ in range(problem.num_devices)]
    for m, p in enumerate(problem.microbatch2pipeline):
        n = problem.num_stages[p]
        chain = [Op(Kind.F, p, s, m) for s in range(n)] + [Op(Kind.B, p, s, m) for s in reversed(range(n))]
        if problem.split_backward:
            chain += [Op(Kind.W, p, s, m) for s in reversed(range(n))]
        for op in chain:
            orders[placement.device(op.pipeline, op.stage)].append(op)
    sched = problem.schedule("shape", placement, orders)
    return sched if stage_work is None else with_layers(sched, stage_work)
