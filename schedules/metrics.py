"""Level 2: quantities measured by counting cells of a table."""

from __future__ import annotations

from dataclasses import dataclass

from .ops import Kind
from .schedule import Schedule
from .table import Table
from .validate import schedule_from_table


@dataclass(frozen=True)
class TableMetrics:
    """Level-2 metrics of one table.

    ``peak_activations[d]``: most activations live at once on device d, counting one per
    (pipeline, stage, microbatch) from the start of its F to the end of its B (of its W when
    the backward is split). ``peak_activation_share[d]`` weighs each by its stage's size in
    units of a stage holding 1/num_devices of the model. ``weight_copies[d]``: weights held,
    in the same unit.
    """

    makespan_slots: int
    bubble_ratio: float
    idle_slots: tuple[int, ...]
    busy_slots: tuple[int, ...]
    peak_activations: tuple[int, ...]
    peak_activation_share: tuple[float, ...]
    weight_copies: tuple[float, ...]

    def as_dict(self) -> dict:
        return {
            "makespan_slots": self.makespan_slots,
            "bubble_ratio": self.bubble_ratio,
            "idle_slots": list(self.idle_slots),
            "busy_slots": list(self.busy_slots),
            "peak_activations": list(self.peak_activations),
            "peak_activation_share": [round(x, 6) for x in self.peak_activation_share],
            "weight_copies": [round(x, 6) for x in self.weight_copies],
        }


def table_metrics(table: Table, schedule: Schedule | None = None) -> TableMetrics:
    """Measure ``table``; ``schedule`` (its generator's) supplies stage sizes, otherwise
    they are read off the table's forward durations."""
    schedule = schedule or schedule_from_table(table)
    makespan = table.makespan
    busy = [0] * table.num_devices
    for e in table.entries:
        busy[e.device] += e.duration
    idle = [makespan - b for b in busy]
    bubble = sum(idle) / (table.num_devices * makespan) if makespan else 0.0
    release = Kind.W if schedule.split_backward else Kind.B
    count, share = [], []
    for d in range(table.num_devices):
        events = []  # (time, order, delta_count, delta_share); frees sort before allocations
        for e in table.device_entries(d):
            size = schedule.activation_share(e.op.pipeline, e.op.stage)
            if e.op.kind is Kind.F:
                events.append((e.start, 1, 1, size))
            elif e.op.kind is release:
                events.append((e.end, 0, -1, -size))
        level_c = level_s = peak_c = 0
        peak_s = 0.0
        for _, _, dc, ds in sorted(events):
            level_c += dc
            level_s += ds
            peak_c = max(peak_c, level_c)
            peak_s = max(peak_s, level_s)
        count.append(peak_c)
        share.append(peak_s)
    return TableMetrics(
        makespan, bubble, tuple(idle), tuple(busy), tuple(count), tuple(share),
        tuple(schedule.weight_copies()),
    )
