"""The solver-free longest-path evaluator: the specification every other timing agrees with.

Each op starts as soon as (a) the previous op in its device's order has ended and (b) every
data predecessor has ended plus the lag of the edge (a transfer time when the two stages sit
on different devices). Because all constraints are difference constraints, this
as-soon-as-possible timing is simultaneously earliest for every op, hence makespan-optimal
for the given placement and order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

from .ops import Op, data_predecessors
from .schedule import Schedule

Duration = Callable[[Op], float]
Lag = Callable[[Op, Op, bool], float]
"""``lag(pred, op, crosses_devices)``: extra delay between pred's end and op's start."""


class DeadlockError(ValueError):
    """The per-device orders cannot all run: some devices wait on each other."""

    def __init__(self, message: str, cycle: list[tuple[int, Op, Op]]):
        super().__init__(message)
        self.cycle = cycle  # (device, op waiting at the head of its order, op it waits for)


def no_lag(pred: Op, op: Op, crosses: bool) -> float:
    return 0


@dataclass(frozen=True)
class Timing:
    """Start and end of every op of a schedule."""

    start: dict[Op, float]
    end: dict[Op, float]

    @property
    def makespan(self) -> float:
        return max(self.end.values())


def asap(schedule: Schedule, duration: Duration, lag: Lag = no_lag) -> Timing:
    """As-soon-as-possible timing of ``schedule``; raises ``DeadlockError`` naming the
    devices and ops that wait on each other when the orders cannot run."""
    nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
    device_of = schedule.device_of
    pos = {}
    for order in schedule.orders:
        for i, op in enumerate(order):
            pos[op] = i
    # successors (with whether the edge carries data) and in-degrees
    indeg: dict[Op, int] = {}
    succ: dict[Op, list[tuple[Op, bool]]] = {op: [] for op in pos}
    for order in schedule.orders:
        for i, op in enumerate(order):
            preds = data_predecessors(op, nstages[op.pipeline])
            for q in preds:
                succ[q].append((op, True))
            if i:
                succ[order[i - 1]].append((op, False))
            indeg[op] = len(preds) + (1 if i else 0)
    start: dict[Op, float] = {}
    end: dict[Op, float] = {}
    ready_at: dict[Op, float] = dict.fromkeys(pos, 0)
    queue = deque(op for op, n in indeg.items() if n == 0)
    while queue:
        op = queue.popleft()
        t = ready_at[op]
        start[op] = t
        e = t + duration(op)
        end[op] = e
        dev = device_of(op)
        for nxt, carries_data in succ[op]:
            cand = e + lag(op, nxt, device_of(nxt) != dev) if carries_data else e
            if cand > ready_at[nxt]:
                ready_at[nxt] = cand
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                queue.append(nxt)
    if len(start) != len(pos):
        raise deadlock_error(schedule, start)
    return Timing(start, end)


def deadlock_error(schedule: Schedule, done: dict[Op, float]) -> DeadlockError:
    """Describe the cycle of devices waiting on each other, given the ops that ran."""
    nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
    heads: dict[int, Op] = {}
    for d, order in enumerate(schedule.orders):
        for op in order:
            if op not in done:
                heads[d] = op
                break
    waits: dict[int, tuple[Op, Op]] = {}
    for d, op in heads.items():
        for q in data_predecessors(op, nstages[op.pipeline]):
            if q not in done:
                waits[d] = (op, q)
                break
    # follow the wait-for chain from any blocked device until it repeats
    d = next(iter(waits))
    seen: list[int] = []
    while d not in seen:
        seen.append(d)
        d = schedule.device_of(waits[d][1])
        if d not in waits:  # pragma: no cover - a blocked chain always ends in a cycle
            break
    cycle_devices = seen[seen.index(d):] if d in seen else seen
    cycle = [(dev, waits[dev][0], waits[dev][1]) for dev in cycle_devices]
    parts = "; ".join(
        f"device {dev} waits at {op} for {q} (device {schedule.device_of(q)})" for dev, op, q in cycle
    )
    return DeadlockError(f"deadlock in schedule {schedule.name!r}: {parts}", cycle)
