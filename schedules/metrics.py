"""Level 2: quantities measured by counting cells of a table."""

from __future__ import annotations

from dataclasses import dataclass

from .memory import at_start, check_weight_fraction, memory_change
from .schedule import Schedule
from .table import Table, whole
from .validate import schedule_from_table


@dataclass(frozen=True)
class TableMetrics:
    """Level-2 metrics of one table, times in slots (``makespan_ticks``: in the table's
    columns of ``tick_slots`` slots, see ``SlotDurations``).

    ``peak_activations[d]``: most activations live at once on device d, counting one per
    (pipeline, stage, microbatch) as ``schedules.memory`` defines it (from its F's start to
    its B's end; with a split backward the weight fraction ``weight_memory`` of it until its
    W's end). ``peak_activation_share[d]`` weighs each by its stage's size in units of a
    stage holding 1/num_devices of the model. ``weight_copies[d]``: weights held, in the
    same unit.
    """

    makespan_slots: float
    bubble_ratio: float
    idle_slots: tuple[float, ...]
    busy_slots: tuple[float, ...]
    peak_activations: tuple[float, ...]
    peak_activation_share: tuple[float, ...]
    weight_copies: tuple[float, ...]
    makespan_ticks: int = 0
    tick_slots: float = 1.0

    def as_dict(self) -> dict:
        return {
            "makespan_slots": self.makespan_slots,
            "makespan_ticks": self.makespan_ticks,
            "tick_slots": self.tick_slots,
            "bubble_ratio": self.bubble_ratio,
            "idle_slots": list(self.idle_slots),
            "busy_slots": list(self.busy_slots),
            "peak_activations": list(self.peak_activations),
            "peak_activation_share": [round(x, 6) for x in self.peak_activation_share],
            "weight_copies": [round(x, 6) for x in self.weight_copies],
        }


def table_metrics(table: Table, schedule: Schedule | None = None, weight_memory: float = 1.0) -> TableMetrics:
    """Measure ``table``; ``schedule`` (its generator's) supplies stage sizes, otherwise
    they are read off the table's forward durations. ``weight_memory``: the share M_W / M
    of an activation held from B's end until W's end when the backward is split."""
    fraction = check_weight_fraction(weight_memory)
    schedule = schedule or schedule_from_table(table)
    makespan = table.makespan
    busy = [0] * table.num_devices
    for e in table.entries:
        busy[e.device] += e.duration
    idle = [makespan - b for b in busy]
    bubble = sum(idle) / (table.num_devices * makespan) if makespan else 0.0
    tick = table.tick_slots
    split = schedule.split_backward
    count, share = [], []
    for d in range(table.num_devices):
        events = []  # (time, frees first, delta_count, delta_share)
        for e in table.device_entries(d):
            kind = e.op.kind
            size = schedule.activation_share(e.op.pipeline, e.op.stage)
            dc = memory_change(kind, 1.0, fraction, split)
            ds = memory_change(kind, size, fraction * size, split)
            if dc or ds:
                events.append((e.start if at_start(kind) else e.end, dc > 0, dc, ds))
        level_c = level_s = peak_c = peak_s = 0.0
        for _, _, dc, ds in sorted(events):
            level_c += dc
            level_s += ds
            peak_c = max(peak_c, level_c)
            peak_s = max(peak_s, level_s)
        count.append(whole(peak_c))
        share.append(peak_s)
    return TableMetrics(
        whole(makespan * tick), bubble, tuple(whole(x * tick) for x in idle),
        tuple(whole(x * tick) for x in busy), tuple(count), tuple(share),
        tuple(schedule.weight_copies()), makespan, tick,
    )
