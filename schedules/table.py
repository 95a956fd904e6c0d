"""The table: devices x integer time slots, each cell idle or one op.

``layout`` lays a schedule's per-device orders out on slots as soon as possible under the
dependencies (no communication time: the idealized table). A table can also be built cell
by cell (see ``formats``) and checked with ``validate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from .evaluate import asap
from .ops import Kind, Op
from .schedule import Schedule


@dataclass(frozen=True)
class SlotDurations:
    """Slots taken by one op of a stage of unit work: forward, backward (the full backward,
    or the input-gradient part when the weight gradient is split off) and weight gradient.

    Stages of other work (``Schedule.stage_work``) scale these: an op of work ``w`` on a
    schedule whose lightest stage has work ``w_min`` takes ``round_half_up(slots * w /
    w_min)`` slots, so the lightest stage keeps exactly the given slot counts.
    """

    forward: int = 1
    backward: int = 2
    weight: int = 1

    def __post_init__(self) -> None:
        for name in ("forward", "backward", "weight"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} slots must be an integer >= 1, got {value!r}")

    def base(self, kind: Kind) -> int:
        return {Kind.F: self.forward, Kind.B: self.backward, Kind.W: self.weight}[kind]

    def of(self, schedule: Schedule, op: Op) -> int:
        """Slots of ``op`` in ``schedule``."""
        w_min = min(min(ws) for ws in schedule.stage_work)
        return self.scaled(op.kind, schedule.work(op), w_min)

    def scaled(self, kind: Kind, work: float, lightest: float) -> int:
        """Slots of an op of ``kind`` on a stage of ``work`` when the lightest stage has
        ``lightest`` (see the class docstring)."""
        return max(1, math.floor(self.base(kind) * work / lightest + 0.5))


class PlacedOp(NamedTuple):
    """An op at its device, start slot and duration in slots."""

    op: Op
    device: int
    start: int
    duration: int

    @property
    def end(self) -> int:
        return self.start + self.duration


@dataclass(frozen=True)
class Table:
    """A schedule written out on integer slots. ``entries`` are sorted by device, start."""

    num_devices: int
    entries: tuple[PlacedOp, ...]
    name: str = ""

    def __post_init__(self) -> None:
        if self.num_devices < 1:
            raise ValueError(f"a table needs at least one device, got {self.num_devices}")
        object.__setattr__(
            self, "entries", tuple(sorted(self.entries, key=lambda e: (e.device, e.start, str(e.op))))
        )

    @cached_property
    def makespan(self) -> int:
        return max((e.end for e in self.entries), default=0)

    @cached_property
    def by_op(self) -> dict[Op, PlacedOp]:
        return {e.op: e for e in self.entries}

    def device_entries(self, device: int) -> list[PlacedOp]:
        return [e for e in self.entries if e.device == device]

    def grid(self) -> list[list[Op | None]]:
        """Rows = devices, columns = slots 0..makespan-1; each cell an op or None."""
        rows: list[list[Op | None]] = [[None] * self.makespan for _ in range(self.num_devices)]
        for e in self.entries:
            for t in range(e.start, e.end):
                rows[e.device][t] = e.op
        return rows

    @property
    def microbatches(self) -> int:
        return len({e.op.microbatch for e in self.entries})


def layout(schedule: Schedule, slots: SlotDurations | None = None) -> Table:
    """The idealized table of ``schedule``: ASAP on integer slots, no communication time."""
    slots = slots or SlotDurations()
    timing = asap(schedule, lambda op: slots.of(schedule, op))
    entries = tuple(
        PlacedOp(op, schedule.device_of(op), int(timing.start[op]), int(timing.end[op] - timing.start[op]))
        for op in timing.start
    )
    return Table(schedule.num_devices, entries, schedule.name)
