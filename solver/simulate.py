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

import heapq
from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import cached_property

from pipetab.schedules.evaluate import deadlock_error
from pipetab.schedules.memory import at_start, memory_change
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Schedule

from .costs import Costs, Links


@dataclass(frozen=True)
class Transfer:
    """A message from ``op`` (on ``src``) to ``consumer`` (on ``dst``)."""

    op: Op
    consumer: Op
    src: int
    dst: int
    start: float
    end: float


@dataclass(frozen=True)
class Simulation:
    """Times of every op, transfer, all-reduce and optimizer step of one training step."""

    schedule: Schedule
    costs: Costs
    start: dict[Op, float]
    end: dict[Op, float]
    allreduces: tuple[tuple[tuple[tuple[int, int], ...], float, float], ...]
    optimizer: tuple[tuple[float, float], ...]
    # (ops, devices, [(producer, consumer, start, end)]) by op index; ``transfers`` builds
    # the ``Transfer`` values on first use (building them eagerly doubles simulate's time)
    transfer_log: tuple = field(default=((), (), ()), compare=False, repr=False)

    @cached_property
    def transfers(self) -> tuple[Transfer, ...]:
        """Every message between devices, with its start and arrival."""
        ops, dev, raw = self.transfer_log
        return tuple(Transfer(ops[i], ops[j], dev[i], dev[j], s, e) for i, j, s, e in raw)

    @cached_property
    def makespan(self) -> float:
        """T_sim: time of one training step."""
        return max(e for _, e in self.optimizer)

    @cached_property
    def busy(self) -> tuple[float, ...]:
        """Compute (ops + optimizer) time per device."""
        busy = [0.0] * self.schedule.num_devices
        for op, s in self.start.items():
            busy[self.schedule.device_of(op)] += self.end[op] - s
        for d, (s, e) in enumerate(self.optimizer):
            busy[d] += e - s
        return tuple(busy)

    @cached_property
    def idle_ratio(self) -> float:
        """Share of device time idle: 1 - sum(busy) / (devices x T_sim)."""
        t = self.makespan
        n = self.schedule.num_devices
        return 1 - sum(self.busy) / (n * t) if t > 0 else 0.0

    def memory_timeline(self, device: int) -> list[tuple[float, float]]:
        """(time, bytes held) steps of ``device``: persistent memory plus live activations
        as ``schedules.memory`` defines them (F allocates at its start; B, and W when the
        backward is split, release at their end)."""
        sched, costs = self.schedule, self.costs
        split = sched.split_backward
        events = []
        for op in sched.orders[device]:
            delta = memory_change(op.kind, costs.activation[(op.pipeline, op.stage)],
                                  costs.weight_part(op.pipeline, op.stage), split)
            if delta:
                t = self.start[op] if at_start(op.kind) else self.end[op]
                events.append((t, delta > 0, delta))
        level = costs.persistent[device]
        steps = [(0.0, level)]
        for t, _, delta in sorted(events):
            level += delta
            steps.append((t, level))
        return steps

    @cached_property
    def peak_activation(self) -> tuple[float, ...]:
        """Largest activation memory live at once, per device."""
        out = []
        for d in range(self.schedule.num_devices):
            base = self.costs.persistent[d]
            out.append(max(level for _, level in self.memory_timeline(d)) - base)
        return tuple(out)

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
        return self.makespan - simulate(self.schedule, free).makespan

    def ops_frame(self):
        """One row per op: device, kind, pipeline, stage, microbatch, start, end (pandas)."""
        import pandas as pd

        rows = [
            (self.schedule.device_of(op), op.kind.value, op.pipeline, op.stage, op.microbatch, s, self.end[op])
            for op, s in self.start.items()
        ]
        cols = ["device", "kind", "pipeline", "stage", "microbatch", "start", "end"]
        return pd.DataFrame(rows, columns=cols).sort_values(["device", "start"], ignore_index=True)


def simulate(schedule: Schedule, costs: Costs) -> Simulation:
    """Simulate one training step of ``schedule`` under ``costs`` (see module docstring).

    Raises ``DeadlockError`` (naming the devices and the ops that wait on each other) when
    the per-device orders cannot all run.
    """
    ops: list[Op] = []
    dev: list[int] = []
    for d, order in enumerate(schedule.orders):
        ops.extend(order)
        dev.extend([d] * len(order))
    n = len(ops)
    # integer keys: ((pipeline * max_stages + stage) * num_mb + microbatch) * 3 + kind
    nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
    max_s, num_mb = max(nstages), schedule.num_microbatches
    code = {Kind.F: 0, Kind.B: 1, Kind.W: 2}
    index = [-1] * (3 * num_mb * max_s * len(nstages))
    keys = [0] * n
    for i, op in enumerate(ops):
        k = ((op.pipeline * max_s + op.stage) * num_mb + op.microbatch) * 3 + code[op.kind]
        keys[i] = k
        index[k] = i
    op_time = costs.op_time
    dur = [op_time[(op.kind, op.pipeline, op.stage)] for op in ops]
    # one device predecessor and at most one data predecessor per op
    dev_prev = [-1] * n
    first = 0
    for order in schedule.orders:
        for k in range(1, len(order)):
            dev_prev[first + k] = first + k - 1
        first += len(order)
    data_pred = [-1] * n
    lag = [0.0] * n
    step_s = 3 * num_mb  # key distance between neighbouring stages
    transfer_cache: dict[tuple[int, int, int], float] = {}
    for i in range(n):
        k = keys[i]
        c = k % 3
        if c == 0:  # F(s) after F(s-1)
            q = index[k - step_s] if ops[i].stage > 0 else -1
        elif c == 1:  # B(s) after B(s+1), or after F on the last stage
            op = ops[i]
            q = index[k + step_s] if op.stage < nstages[op.pipeline] - 1 else index[k - 1]
        else:  # W after B
            q = index[k - 1]
        data_pred[i] = q
        if q >= 0 and dev[q] != dev[i]:
            ck = (keys[q] // 3 // num_mb * 3 + keys[q] % 3, dev[q], dev[i])  # (stage, kind), link
            t = transfer_cache.get(ck)
            if t is None:
                t = transfer_cache[ck] = costs.transfer(ops[q], dev[q], dev[i])
            lag[i] = t
    start = [0.0] * n
    end = [-1.0] * n  # -1: not run yet
    if costs.contention:
        transfers, done = _run_with_contention(ops, dev, dur, dev_prev, data_pred, lag, start, end)
    else:
        done = _run(schedule, dur, data_pred, lag, start, end)
        transfers = [(q, i, end[q], end[q] + lag[i]) for i, q in enumerate(data_pred)
                     if q >= 0 and dev[q] != dev[i]]
    if done != n:
        raise deadlock_error(schedule, {ops[i]: 0.0 for i in range(n) if end[i] >= 0})
    start_map = dict(zip(ops, start))
    end_map = dict(zip(ops, end))
    allreduces, optimizer = _tails(schedule, costs, ops, dev, end)
    return Simulation(
        schedule, costs, start_map, end_map, allreduces, optimizer, (ops, dev, transfers),
    )


def _run(schedule: Schedule, dur, data_pred, lag, start, end) -> int:
    """Sweep the devices, running each one's order as far as its inputs allow, until no
    device can advance. Returns the number of ops run."""
    bounds, first = [], 0
    for order in schedule.orders:
        bounds.append([first, first + len(order)])
        first += len(order)
    dev_end = [0.0] * len(bounds)
    done = 0
    progressed = True
    while progressed:
        progressed = False
        for d, (i, stop) in enumerate(bounds):
            i0, free = i, dev_end[d]
            while i < stop:
                q = data_pred[i]
                if q >= 0:
                    eq = end[q]
                    if eq < 0:
                        break
                    eq += lag[i]
                    t = eq if eq > free else free
                else:
                    t = free
                start[i] = t
                free = t + dur[i]
                end[i] = free
                i += 1
            if i != i0:
                bounds[d][0] = i
                dev_end[d] = free
                done += i - i0
                progressed = True
    return done


def _run_with_contention(ops, dev, dur, dev_prev, data_pred, lag, start, end):
    """Event-driven run in which each directed link carries one transfer at a time, served
    first come first served by ready time (ties by producing op). Returns the transfers
    and the number of ops run."""
    n = len(ops)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i in range(n):
        for q in (dev_prev[i], data_pred[i]):
            if q >= 0:
                succs[q].append(i)
                indeg[i] += 1
    arrive = [0.0] * n
    dev_free = [0.0] * n
    link_free: dict[tuple[int, int], float] = defaultdict(float)
    heap: list[tuple[float, int, int]] = []  # (ready time, producer, consumer)
    transfers: list[tuple[int, int, float, float]] = []
    done = 0

    def release(j: int) -> None:
        nonlocal done
        stack = [j]
        while stack:
            i = stack.pop()
            t = arrive[i] if arrive[i] > dev_free[i] else dev_free[i]
            start[i] = t
            e = t + dur[i]
            end[i] = e
            done += 1
            for k in succs[i]:
                if data_pred[k] == i:
                    if dev[k] != dev[i]:
                        heapq.heappush(heap, (e, i, k))
                        continue  # released when the transfer arrives
                    arrive[k] = e
                if dev_prev[k] == i:
                    dev_free[k] = e
                indeg[k] -= 1
                if indeg[k] == 0:
                    stack.append(k)

    for i in [i for i in range(n) if indeg[i] == 0]:
        release(i)
    while heap:
        ready, i, k = heapq.heappop(heap)
        key = (dev[i], dev[k])
        s = ready if ready > link_free[key] else link_free[key]
        e = s + lag[k]
        link_free[key] = e
        transfers.append((i, k, s, e))
        arrive[k] = e
        indeg[k] -= 1
        if indeg[k] == 0:
            release(k)
    return transfers, done


def _tails(schedule: Schedule, costs: Costs, ops: list[Op], dev: list[int], end: list[float]):
    """All-reduces of replicated stages and per-device optimizer steps."""
    last_bwd = Kind.W if schedule.split_backward else Kind.B
    stage_last: dict[tuple[int, int], float] = defaultdict(float)
    dev_last = [0.0] * schedule.num_devices
    for op, d, e in zip(ops, dev, end):
        if e > dev_last[d]:
            dev_last[d] = e
    if costs.replica_groups:
        for op, e in zip(ops, end):
            if op.kind is last_bwd:
                key = (op.pipeline, op.stage)
                if e > stage_last[key]:
                    stage_last[key] = e
    ready = list(dev_last)
    allreduces = []
    for group in costs.replica_groups:
        s = max(stage_last[k] for k in group.stages)
        e = s + group.allreduce_time
        allreduces.append((group.stages, s, e))
        for p, st in group.stages:
            d = schedule.placement.device(p, st)
            ready[d] = max(ready[d], e)
    opt = costs.optimizer_time or (0,) * schedule.num_devices
    optimizer = tuple((r, r + opt[d]) for d, r in enumerate(ready))
    return tuple(allreduces), optimizer
