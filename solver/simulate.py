"""Level 3: communication-aware execution simulation of a schedule on given costs.

Rules (the execution graph, see ``solver.graph``):

* a device runs its ops one at a time in its order; an op starts when the previous op of its
  device has ended and its input has arrived;
* an op's output crosses to another device as a transfer that starts when the op ends and
  takes ``costs.transfer`` (latency + bytes / bandwidth); the sender does not wait for it
  (communication overlaps compute); the receiver waits for arrival;
* with ``costs.contention`` a directed link carries one transfer at a time, first come first
  served by ready time; otherwise transfers never queue (the paper's model);
* stages replicated on several devices (Chimera) all-reduce their gradients once the last
  backward of every replica has ended; the all-reduce overlaps other compute;
* each device then runs its optimizer step, after its own last op and after the all-reduces
  of the stages it holds. T_sim (``makespan``) is the latest optimizer end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from pipetab.schedules.arrays import F_CODE, LazyTuple
from pipetab.schedules.evaluate import Timing, block_durations, run_orders
from pipetab.schedules.memory import event_times, live_levels, memory_deltas, peaks
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.table import Table, timed_table

from .costs import Costs, Links, Rounding

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule


@dataclass(frozen=True)
class Transfer:
    """A message from ``op`` (on ``src``) to ``consumer`` (on ``dst``)."""

    op: Op
    consumer: Op
    src: int
    dst: int
    start: float
    end: float


class Transfers(LazyTuple):
    """The messages of a simulation as arrays (producer and consumer op index, start,
    arrival), behaving as a tuple of ``Transfer`` built on first use."""

    __slots__ = ("consumer", "end", "producer", "schedule", "start")

    def __init__(self, schedule: Schedule, producer, consumer, start, end) -> None:
        super().__init__()
        self.schedule, self.producer, self.consumer, self.start, self.end = schedule, producer, consumer, start, end

    def _build(self) -> tuple[Transfer, ...]:
        ops, dev = self.schedule.ops, self.schedule.device
        src, dst = self.producer, self.consumer
        return tuple(map(Transfer, ops.take(src).to_ops(), ops.take(dst).to_ops(), dev[src].tolist(),
                         dev[dst].tolist(), self.start.tolist(), self.end.tolist()))

    def _same(self, other: "Transfers") -> bool:
        return self.tuple() == other.tuple()

    def __len__(self) -> int:
        return len(self.producer)


@dataclass(frozen=True, eq=False)
class Simulation:
    """Times of every op, transfer, all-reduce and optimizer step of one training step.

    ``start_times`` / ``end_times``: per op, in the schedule's op order (``schedule.ops``);
    ``transfer_times``: (producer index, consumer index, start, end) arrays of every message
    between devices. ``start``, ``end`` and ``transfers`` give the same as ``Op``-keyed
    values, built on first use."""

    schedule: Schedule
    costs: Costs
    start_times: np.ndarray
    end_times: np.ndarray
    allreduces: tuple[tuple[tuple[tuple[int, int], ...], float, float], ...]
    optimizer: tuple[tuple[float, float], ...]
    transfer_times: tuple = field(default=(), repr=False)

    @cached_property
    def start(self) -> dict[Op, float]:
        """Start of every op (one ``Op`` per op: not for the hot path)."""
        return dict(zip(self.schedule.ops.to_ops(), self.start_times.tolist()))

    @cached_property
    def end(self) -> dict[Op, float]:
        """End of every op (one ``Op`` per op: not for the hot path)."""
        return dict(zip(self.schedule.ops.to_ops(), self.end_times.tolist()))

    @cached_property
    def transfers(self) -> "Transfers":
        """Every message between devices, with its start and arrival (by consumer): a
        sequence of ``Transfer`` whose length needs no ``Transfer`` values."""
        return Transfers(self.schedule, *self.transfer_times)

    @cached_property
    def makespan(self) -> float:
        """T_sim: time of one training step."""
        return max(e for _, e in self.optimizer)

    @cached_property
    def device_spans(self) -> tuple[float, ...]:
        """Per device, from the start of its first op to the end of its last (0 for a device
        without ops); all-reduces and the optimizer step are not part of it."""
        n = self.schedule.num_devices
        first = np.full(n, np.inf)
        last = np.full(n, -np.inf)
        np.minimum.at(first, self.schedule.device, self.start_times)
        np.maximum.at(last, self.schedule.device, self.end_times)
        return tuple(np.where(last >= first, last - first, 0.0).tolist())

    @cached_property
    def span_period(self) -> float:
        """The longest per-device span: the steady-state iteration time of this timing
        repeated with no barrier between steps (the Zero Bubble paper's cost; see
        ``solver.periodic`` for the least period over all timings of the same orders)."""
        return max(self.device_spans)

    @cached_property
    def busy(self) -> tuple[float, ...]:
        """Compute (ops + optimizer) time per device."""
        spans = self.end_times - self.start_times
        if self.schedule.blocks:  # a block's later ops run within its first
            spans = spans.copy()
            spans[self.schedule.block_members[1]] = 0.0
        busy = np.bincount(self.schedule.device, weights=spans, minlength=self.schedule.num_devices).tolist()
        return tuple(b + (e - s) for b, (s, e) in zip(busy, self.optimizer))

    @cached_property
    def idle_ratio(self) -> float:
        """Share of device time idle: 1 - sum(busy) / (devices x T_sim)."""
        t = self.makespan
        n = self.schedule.num_devices
        return 1 - sum(self.busy) / (n * t) if t > 0 else 0.0

    @cached_property
    def _memory(self):
        """Live-memory levels of every device (``schedules.memory.live_levels``)."""
        sched, costs = self.schedule, self.costs
        keys = sched.stage_keys
        size = np.array([costs.activation[k] for k in keys], float)[sched.stage_ids]
        part = np.array([costs.weight_part(*k) for k in keys], float)[sched.stage_ids]
        delta = memory_deltas(sched.ops.kind, size, part, sched.split_backward)
        time = event_times(sched.ops.kind, self.start_times, self.end_times)
        device = sched.device
        extra = self._memory_events()
        if extra is not None:  # copies to and from the host, recomputation (``solver.offload``)
            device, time, delta = (np.concatenate([a, b]) for a, b in zip((device, time, delta), extra))
        changes = delta != 0  # ops that change nothing make no step
        time, delta, device = time[changes], delta[changes], device[changes]
        order, offsets, (levels,) = live_levels(device, time, [delta], sched.num_devices,
                                                np.array(costs.persistent, float))
        return time[order], offsets, levels

    def _memory_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(device, time, change) of memory events besides the ops' own (None: none)."""
        return None

    def memory_timeline(self, device: int) -> list[tuple[float, float]]:
        """(time, bytes held) steps of ``device``: persistent memory plus live activations
        as ``schedules.memory`` defines them (F allocates at its start; B, and W when the
        backward is split, release at their end)."""
        times, offsets, levels = self._memory
        a, b = int(offsets[device]), int(offsets[device + 1])
        steps = levels[a + device:b + device + 1].tolist()
        return [(0.0, steps[0]), *list(zip(times[a:b].tolist(), steps[1:]))]

    @cached_property
    def peak_activation(self) -> tuple[float, ...]:
        """Largest activation memory live at once, per device."""
        _, offsets, levels = self._memory
        return tuple(p - b for p, b in zip(peaks(levels, offsets).tolist(), self.costs.persistent))

    @cached_property
    def peak_memory(self) -> tuple[float, ...]:
        """Persistent plus peak activation memory, per device."""
        return tuple(p + a for p, a in zip(self.costs.persistent, self.peak_activation))

    @cached_property
    def fits_memory(self) -> tuple[bool, ...]:
        """Whether each device's peak memory is within its capacity."""
        return tuple(
            cap is None or peak <= cap + 1e-9 for peak, cap in zip(self.peak_memory, self.costs.capacity)
        )

    @cached_property
    def exposed_comm(self) -> float:
        """How much later the step ends than with free point-to-point messages (same
        orders; gradient all-reduces keep their time)."""
        free = replace(self.costs, links=Links(constant=0), contention=False)
        return self.makespan - self._again(free).makespan

    def _again(self, costs: Costs) -> "Simulation":
        """The same schedule simulated on ``costs`` by the same rules (``solver.offload``'s copies too)."""
        return simulate(self.schedule, costs)

    def table(self, name: str | None = None) -> Table:
        """The ops' times as a table (whole-number times only: slot or tick costs)."""
        return timed_table(self.schedule, self.start_times, self.end_times, name,
                           self.costs.tick_slots if self.costs.unit == "slots" else 1.0)

    def ops_frame(self):
        """One row per op: device, kind, pipeline, stage, microbatch, start, end (pandas)."""
        import pandas as pd

        ops = self.schedule.ops
        frame = pd.DataFrame({
            "device": self.schedule.device, "kind": np.array(["F", "B", "W"])[ops.kind],
            "pipeline": ops.pipeline, "stage": ops.stage, "microbatch": ops.microbatch,
            "start": self.start_times, "end": self.end_times,
        })
        return frame.sort_values(["device", "start"], ignore_index=True, kind="stable")


def stage_kind_table(schedule: Schedule, value) -> np.ndarray:
    """``value(kind, pipeline, stage)`` for every (stage, kind) code of ``schedule`` (0
    where the kind does not occur), as an array indexed by ``schedule.codes``."""
    split = schedule.split_backward
    return np.array([value(k, p, s) if (k is not Kind.W or split) else 0.0
                     for k, p, s in schedule.stage_kind_keys()], float)


def simulate(schedule: Schedule, costs: Costs) -> Simulation:
    """Simulate one training step of ``schedule`` under ``costs`` (see module docstring).

    Raises ``DeadlockError`` (naming the devices and the ops that wait on each other) when
    the per-device orders cannot all run.
    """
    if costs.offload_fraction:
        raise ValueError("these costs offload activations to host memory: time them with "
                         "solver.offload.simulated (the copy streams), not simulate")
    codes, pred = schedule.codes, schedule.pred
    op_time = costs.op_time
    dur = stage_kind_table(schedule, lambda k, p, s: op_time[(k, p, s)])[codes]
    if schedule.blocks:
        dur = block_durations(schedule, dur, costs.block_time)
    lag_of, link_of = _messages(schedule, costs)
    lag, link_in = lag_of[codes], link_of[codes]
    consumers = np.nonzero(link_in >= 0)[0]
    producers = pred[consumers]
    link = None
    if costs.contention:  # per op, the link its output crosses
        link = np.full(len(codes), -1, np.int64)
        link[producers] = link_in[consumers]
    start, end, sent = run_orders(schedule, dur, lag, link)
    t0 = end[producers] if sent is None else sent[consumers]
    allreduces, optimizer = _tails(schedule, costs, end)
    return Simulation(schedule, costs, start, end, allreduces, optimizer,
                      (producers, consumers, t0, t0 + lag[consumers]))


def _messages(schedule: Schedule, costs: Costs) -> tuple[np.ndarray, np.ndarray]:
    """Per (stage, kind) code: the time of the message into such an op from its data
    predecessor (0 on the same device) and the id of the directed link it crosses (-1:
    none). The predecessor's stage, and so the link, follow from the placement."""
    keys = schedule.stage_kind_keys()
    lag = np.zeros(len(keys))
    link = np.full(len(keys), -1, np.int64)
    links: dict[tuple[int, int], int] = {}
    device = schedule.placement.device
    for c, (k, p, s) in enumerate(keys):
        last = schedule.num_stages(p) - 1
        if k is Kind.F:
            if s == 0:
                continue
            q = Op(Kind.F, p, s - 1, 0)
        elif k is Kind.B:
            q = Op(Kind.B, p, s + 1, 0) if s < last else Op(Kind.F, p, s, 0)
        else:
            q = Op(Kind.B, p, s, 0)
        src, dst = device(p, q.stage), device(p, s)
        if src != dst:
            lag[c] = costs.transfer(q, src, dst)
            link[c] = links.setdefault((src, dst), len(links))
    return lag, link


def _tails(schedule: Schedule, costs: Costs, end: np.ndarray):
    """All-reduces of replicated stages and per-device optimizer steps."""
    num = schedule.num_devices
    dev_last = np.zeros(num)
    np.maximum.at(dev_last, schedule.device, end)
    ready = dev_last.tolist()
    allreduces = []
    if costs.replica_groups:
        last_bwd = 2 if schedule.split_backward else 1
        mine = schedule.ops.kind == last_bwd
        stage_last = np.zeros(len(schedule.stage_keys))
        np.maximum.at(stage_last, schedule.stage_ids[mine], end[mine])
        for group in costs.replica_groups:
            s = max(float(stage_last[schedule.stage_base[p] + st]) for p, st in group.stages)
            e = s + group.allreduce_time
            allreduces.append((group.stages, s, e))
            for p, st in group.stages:
                d = schedule.placement.device(p, st)
                ready[d] = max(ready[d], e)
    opt = costs.optimizer_time or (0,) * num
    optimizer = tuple((r, r + opt[d]) for d, r in enumerate(ready))
    return tuple(allreduces), optimizer


# ---- judging a schedule: its timing, its order's memory, what ticks hide -----------------
class SimTiming(Timing):
    """A ``Timing`` read from a simulation: the op-keyed dictionaries are built only when
    asked for (``start``, ``end``); ``arrays`` gives the times in the schedule's op order."""

    sim: Simulation

    def __init__(self, sim: Simulation) -> None:
        object.__setattr__(self, "sim", sim)

    @property  # type: ignore[override]
    def start(self) -> dict[Op, float]:
        return self.sim.start

    @property  # type: ignore[override]
    def end(self) -> dict[Op, float]:
        return self.sim.end

    @property
    def makespan(self) -> float:
        return float(self.sim.end_times.max()) if len(self.sim.end_times) else 0.0

    def arrays(self):
        return self.sim.start_times, self.sim.end_times


@dataclass(frozen=True)
class MemoryCheck:
    """Peak live activation memory per device and the first cap violation, if any."""

    peaks: tuple[float, ...]
    violation: str | None

    @property
    def fits(self) -> bool:
        return self.violation is None


def order_memory(schedule: Schedule, costs: Costs, split_backward: bool) -> MemoryCheck:
    """Activation memory as ``schedules.memory`` defines it (F allocates at its start, B and W
    release at their end): a prefix sum over each device's order (one cumsum per device),
    against each device's activation capacity (the CP-SAT oracle's memory check)."""
    keys = schedule.stage_keys
    size = np.array([costs.activation[k] for k in keys], float)[schedule.stage_ids]
    part = np.array([costs.weight_part(*k) for k in keys], float)[schedule.stage_ids]
    kind = schedule.ops.kind
    delta = memory_deltas(kind, size, part, split_backward)
    offsets = schedule.offsets
    found, violation = [], None
    for d in range(schedule.num_devices):
        a, b = int(offsets[d]), int(offsets[d + 1])
        live = np.cumsum(delta[a:b])
        forwards = kind[a:b] == F_CODE
        peak = float(live[forwards].max()) if forwards.any() else 0.0
        found.append(max(0.0, peak))
        cap = costs.activation_capacity(d)
        if violation is None and cap is not None and peak > cap + 1e-9:
            i = int(np.flatnonzero(forwards & (live > cap + 1e-9))[0])
            violation = (f"device {d} exceeds its activation capacity {cap:g} at op {schedule.ops.op(a + i)} "
                         f"({float(live[i]):g} live)")
    return MemoryCheck(tuple(found), violation)


def rounding_spread(schedule: Schedule, real: Costs, tick: float) -> float:
    """``schedule``'s simulated step on durations rounded up to ticks of ``tick`` less its step
    on durations rounded down, as a share of its real-valued step: what ticks can hide of a gap."""
    value = simulate(schedule, real).makespan
    up = simulate(schedule, real.quantized(tick, Rounding.UP)).makespan * tick
    down = simulate(schedule, real.quantized(tick, Rounding.DOWN)).makespan * tick
    return max(0.0, up - down) / value if value > 0 else 0.0
