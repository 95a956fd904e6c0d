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

    A *slot* is the time of an op on a stage holding 1/num_devices of the model, so a
    device's work per microbatch is the same for every placement: a device holding v stages
    of a pipeline runs each op in 1/v of the slots. Tables are laid out on integer
    *columns* (ticks) of ``tick_slots(schedule)`` slots, the share of the model of the
    lightest stage (1 for GPipe, 1F1B, Chimera; 1/v for interleaved; 1/2 for ZB-V and
    DualPipeV; 1/(2W) for Hanayo; 2a/(a+b) for chimera-asym): an op of a stage of work
    ``w`` takes ``round_half_up(slots * w / w_min)`` columns, so the lightest stage takes
    exactly the given counts in columns.
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

    @staticmethod
    def tick_slots(schedule: Schedule) -> float:
        """Slots per table column of ``schedule``: the share of the model (in units of
        1/num_devices) of its lightest stage."""
        p, s = min(((p, s) for p, ws in enumerate(schedule.stage_work) for s in range(len(ws))),
                   key=lambda k: schedule.stage_work[k[0]][k[1]])
        return schedule.activation_share(p, s)

    def of(self, schedule: Schedule, op: Op) -> int:
        """Columns of ``op`` in ``schedule``."""
        w_min = min(min(ws) for ws in schedule.stage_work)
        return self.scaled(op.kind, schedule.work(op), w_min)

    def scaled(self, kind: Kind, work: float, lightest: float) -> int:
        """Columns of an op of ``kind`` on a stage of ``work`` when the lightest stage has
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
    """A schedule written out on integer columns of ``tick_slots`` slots each (see
    ``SlotDurations``). ``entries`` are sorted by device, start."""

    num_devices: int
    entries: tuple[PlacedOp, ...]
    name: str = ""
    tick_slots: float = 1.0

    def __post_init__(self) -> None:
        if self.num_devices < 1:
            raise ValueError(f"a table needs at least one device, got {self.num_devices}")
        if isinstance(self.tick_slots, bool) or not isinstance(self.tick_slots, (int, float)) \
                or not math.isfinite(self.tick_slots) or self.tick_slots <= 0:
            raise ValueError(f"tick_slots must be a number > 0, got {self.tick_slots!r}")
        object.__setattr__(
            self, "entries", tuple(sorted(self.entries, key=lambda e: (e.device, e.start, str(e.op))))
        )

    @cached_property
    def makespan(self) -> int:
        """Columns up to the last op's end."""
        return max((e.end for e in self.entries), default=0)

    @property
    def makespan_slots(self) -> float:
        """The makespan in slots (``makespan * tick_slots``)."""
        return whole(self.makespan * self.tick_slots)

    @cached_property
    def by_op(self) -> dict[Op, PlacedOp]:
        return {e.op: e for e in self.entries}

    def device_entries(self, device: int) -> list[PlacedOp]:
        return [e for e in self.entries if e.device == device]

    def grid(self) -> list[list[Op | None]]:
        """Rows = devices, columns 0..makespan-1; each cell an op or None."""
        rows: list[list[Op | None]] = [[None] * self.makespan for _ in range(self.num_devices)]
        for e in self.entries:
            for t in range(e.start, e.end):
                rows[e.device][t] = e.op
        return rows

    @property
    def microbatches(self) -> int:
        return len({e.op.microbatch for e in self.entries})


def layout(schedule: Schedule, slots: SlotDurations | None = None) -> Table:
    """The idealized table of ``schedule``: ASAP on integer columns, no communication time."""
    slots = slots or SlotDurations()
    timing = asap(schedule, lambda op: slots.of(schedule, op))
    entries = tuple(
        PlacedOp(op, schedule.device_of(op), int(timing.start[op]), int(timing.end[op] - timing.start[op]))
        for op in timing.start
    )
    return Table(schedule.num_devices, entries, schedule.name, slots.tick_slots(schedule))


def whole(x: float) -> float | int:
    """``x`` as an int when it is whole (to 1e-9), else as it is."""
    return int(round(x)) if abs(x - round(x)) < 1e-9 else x
