"""The table: devices x integer time slots, each cell idle or one op.

``layout`` lays a schedule's per-device orders out on slots as soon as possible under the
dependencies (no communication time: the idealized table). A table can also be built cell
by cell (see ``formats``) and checked with ``validate``.

A table holds its ops as arrays sorted by device and start (``schedules.arrays``);
``entries``, ``by_op`` and ``grid`` build ``PlacedOp`` / ``Op`` values on first use.
Every table, however made (layout, a simulation, a CP-SAT solution, a file, a list of
``PlacedOp``), is built by ``Entries``, which sorts the arrays once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Mapping, NamedTuple

import numpy as np

from .arrays import LazyTuple, OpArrays, frozen, segment_offsets
from .evaluate import block_durations, run_orders
from .limits import check_grid
from .ops import Kind, Op

if TYPE_CHECKING:
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

    def durations(self, schedule: Schedule) -> np.ndarray:
        """Columns of every op of ``schedule`` (in its op order)."""
        w_min = min(min(ws) for ws in schedule.stage_work)
        table = [self.scaled(k, schedule.stage_work[p][s], w_min) for k, p, s in schedule.stage_kind_keys()]
        return np.array(table, np.int64)[schedule.codes]


class PlacedOp(NamedTuple):
    """An op at its device, start slot and duration in slots."""

    op: Op
    device: int
    start: int
    duration: int

    @property
    def end(self) -> int:
        return self.start + self.duration


class Entries(LazyTuple):
    """The ops of a table as arrays -- ``ops``, ``device``, ``start``, ``duration`` --
    sorted by device and start (ties, which only invalid tables have, by kind, pipeline,
    stage, microbatch). Behaves as the tuple of ``PlacedOp`` it stands for (indexing,
    iteration, ``len``, equality with such tuples), built on first use."""

    __slots__ = ("device", "duration", "ops", "start")

    def __init__(self, ops: OpArrays, device, start, duration) -> None:
        super().__init__()
        device, start, duration = (np.asarray(a, np.int64) for a in (device, start, duration))
        if not len(ops) == len(device) == len(start) == len(duration):
            raise ValueError("a table's op, device, start and duration arrays must have the same length")
        order = _sort_order(device, start, ops)
        if order is not None:
            ops, device, start, duration = ops.take(order), device[order], start[order], duration[order]
        self.ops = ops
        self.device, self.start, self.duration = (frozen(a, np.int64) for a in (device, start, duration))

    @classmethod
    def from_placed(cls, entries) -> "Entries":
        """The arrays of a sequence of ``PlacedOp``."""
        entries = entries if isinstance(entries, (list, tuple)) else list(entries)
        ops = OpArrays.from_ops([e.op for e in entries])
        columns = np.array([(e.device, e.start, e.duration) for e in entries], np.int64).reshape(-1, 3)
        return cls(ops, columns[:, 0], columns[:, 1], columns[:, 2])

    def _build(self) -> tuple[PlacedOp, ...]:
        return tuple(map(PlacedOp, self.ops.to_ops(), self.device.tolist(), self.start.tolist(),
                         self.duration.tolist()))

    def _same(self, other: "Entries") -> bool:
        return self.ops.equals(other.ops) and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in ("device", "start", "duration"))

    def __len__(self) -> int:
        return len(self.ops)


@dataclass(frozen=True)
class Table:
    """A schedule written out on integer columns of ``tick_slots`` slots each (see
    ``SlotDurations``). ``entries``: any sequence of ``PlacedOp``, kept as ``Entries``
    (arrays sorted by device and start); ``Table.from_arrays`` takes the arrays."""

    num_devices: int
    entries: Entries
    name: str = ""
    tick_slots: float = 1.0

    def __post_init__(self) -> None:
        if self.num_devices < 1:
            raise ValueError(f"a table needs at least one device, got {self.num_devices}")
        if isinstance(self.tick_slots, bool) or not isinstance(self.tick_slots, (int, float)) \
                or not math.isfinite(self.tick_slots) or self.tick_slots <= 0:
            raise ValueError(f"tick_slots must be a number > 0, got {self.tick_slots!r}")
        if not isinstance(self.entries, Entries):
            object.__setattr__(self, "entries", Entries.from_placed(self.entries))

    @classmethod
    def from_arrays(cls, num_devices: int, ops: OpArrays, device, start, duration, name: str = "",
                    tick_slots: float = 1.0) -> "Table":
        """The table of ``ops`` on ``device`` at integer ``start`` for ``duration`` columns."""
        return cls(num_devices, Entries(ops, device, start, duration), name, tick_slots)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def ops(self) -> OpArrays:
        return self.entries.ops

    @property
    def device(self) -> np.ndarray:
        return self.entries.device

    @property
    def start(self) -> np.ndarray:
        return self.entries.start

    @property
    def duration(self) -> np.ndarray:
        return self.entries.duration

    @property
    def end(self) -> np.ndarray:
        """End column of every op."""
        return self.start + self.duration

    @cached_property
    def makespan(self) -> int:
        """Columns up to the last op's end."""
        return int(self.end.max(initial=0))

    @property
    def makespan_slots(self) -> float:
        """The makespan in slots (``makespan * tick_slots``)."""
        return whole(self.makespan * self.tick_slots)

    @cached_property
    def offsets(self) -> np.ndarray:
        """Device d's ops are ``offsets[d]:offsets[d+1]`` (devices outside 0..num_devices-1,
        which only invalid tables have, lie outside every range)."""
        return segment_offsets(self.device, self.num_devices)

    @cached_property
    def shared(self) -> np.ndarray:
        """Per entry, whether it shares its device, start and end with the entry before it:
        the later ops of a block (``Schedule.blocks``), which run together with the first."""
        d, s, e = self.device, self.start, self.end
        out = np.zeros(len(d), bool)
        out[1:] = (d[1:] == d[:-1]) & (s[1:] == s[:-1]) & (e[1:] == e[:-1]) & (e[1:] > s[1:])
        return out

    def blocks(self) -> list[tuple[Op, ...]]:
        """Groups of ops sharing device, start and end: the blocks the table runs."""
        out: list[list[Op]] = []
        for i in np.nonzero(self.shared)[0].tolist():
            if out and out[-1][-1] == self.ops.op(i - 1):
                out[-1].append(self.ops.op(i))
            else:
                out.append([self.ops.op(i - 1), self.ops.op(i)])
        return [tuple(b) for b in out]

    @cached_property
    def by_op(self) -> dict[Op, PlacedOp]:
        return {e.op: e for e in self.entries}

    def device_entries(self, device: int) -> list[PlacedOp]:
        a, b = self.offsets[device], self.offsets[device + 1]
        ops = self.ops.take(slice(a, b)).to_ops()
        return list(map(PlacedOp, ops, [device] * len(ops), self.start[a:b].tolist(), self.duration[a:b].tolist()))

    def grid(self) -> list[list[Op | None]]:
        """Rows = devices, columns 0..makespan-1; each cell an op or None."""
        check_grid(self.num_devices, self.makespan)
        rows: list[list[Op | None]] = [[None] * self.makespan for _ in range(self.num_devices)]
        for e in self.entries:
            row = rows[e.device]
            row[e.start:e.end] = [e.op] * e.duration
        return rows

    @cached_property
    def microbatches(self) -> int:
        return len(np.unique(self.ops.microbatch))


def _sort_order(device: np.ndarray, start: np.ndarray, ops: OpArrays) -> np.ndarray | None:
    """The permutation sorting ops by (device, start, kind, pipeline, stage, microbatch),
    None when they already are sorted by device and strictly by start within a device."""
    if len(device) < 2:
        return None
    same = device[1:] == device[:-1]
    if ((device[1:] > device[:-1]) | (same & (start[1:] > start[:-1]))).all():
        return None
    return np.lexsort((ops.microbatch, ops.stage, ops.pipeline, ops.kind, start, device))


def timed_table(schedule: Schedule, start, end, name: str | None = None, tick_slots: float = 1.0) -> Table:
    """The table of ``schedule`` run at integer ``start`` / ``end`` times: arrays in the
    schedule's op order, or mappings from ``Op``."""
    if isinstance(start, Mapping):
        ops = schedule.ops.to_ops()
        start = [start[op] for op in ops]
        end = [end[op] for op in ops]
    start = np.asarray(start, float)
    end = np.asarray(end, float)
    s, e = np.rint(start), np.rint(end)
    if not (np.array_equal(s, start) and np.array_equal(e, end)):
        raise ValueError("a table needs whole-number times (slots or ticks)")
    return Table.from_arrays(schedule.num_devices, schedule.ops, schedule.device, s.astype(np.int64),
                             (e - s).astype(np.int64), schedule.name if name is None else name, tick_slots)


def layout(schedule: Schedule, slots: SlotDurations | None = None) -> Table:
    """The idealized table of ``schedule``: ASAP on integer columns, no communication time."""
    slots = slots or SlotDurations()
    plain = slots.durations(schedule)
    # no communication in a table: a block takes the sum of its ops
    dur = block_durations(schedule, plain, lambda b: sum(slots.of(schedule, op) for op in b))
    if int(dur.sum()) >= 2**53:
        raise ValueError("slot durations too large: the table's times would exceed 2**53 columns")
    start, end, _ = run_orders(schedule, dur, np.zeros(len(dur)))
    return timed_table(schedule, start, end, schedule.name, slots.tick_slots(schedule))


def whole(x: float) -> float | int:
    """``x`` as an int when it is whole (to 1e-9), else as it is."""
    return round(x) if abs(x - round(x)) < 1e-9 else x
