"""Level 2: quantities measured by counting cells of a table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .memory import check_weight_fraction, event_times, live_levels, memory_deltas, peaks
from .table import Table, whole
from .validate import schedule_from_table

if TYPE_CHECKING:
    from .schedule import Schedule


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
    num_devices = table.num_devices
    spans = table.duration * ~table.shared  # a block's ops share their slots: counted once
    busy = np.bincount(table.device, weights=spans, minlength=num_devices).astype(np.int64).tolist()
    idle = [makespan - b for b in busy]
    bubble = sum(idle) / (num_devices * makespan) if makespan else 0.0
    tick = table.tick_slots
    ops = table.ops
    shares = np.array([schedule.activation_share(p, s) for p, s in schedule.stage_keys])
    size = shares[schedule.stage_base[ops.pipeline] + ops.stage]
    ones = np.ones(len(ops))
    split = schedule.split_backward
    count_delta = memory_deltas(ops.kind, ones, fraction * ones, split)
    share_delta = memory_deltas(ops.kind, size, fraction * size, split)
    time = event_times(ops.kind, table.start, table.end)
    _, offsets, (count, share) = live_levels(table.device, time, [count_delta, share_delta], num_devices)
    return TableMetrics(
        whole(makespan * tick), bubble, tuple(whole(x * tick) for x in idle),
        tuple(whole(x * tick) for x in busy), tuple(whole(x) for x in peaks(count, offsets).tolist()),
        tuple(peaks(share, offsets).tolist()), tuple(schedule.weight_copies()), makespan, tick,
    )
