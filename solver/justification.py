"""Double justification (forward-backward improvement, Valls, Ballestín & Quintanilla, EJOR
165(2), 2005, for resource-constrained project scheduling) of a schedule on a precedence
graph: ops with a device and a duration, start-to-start lags between them, one op at a
time per device. It alternates two serial schedule generation passes with gap insertion —
every op as late as possible before the current makespan, latest-ending first, then every
op as early as possible in the order of those late starts. Each pass keeps every
constraint, and a pass may move an op past others on its device into an idle gap, which
changes the per-device orders — unlike re-timing a fixed order. Solver-free; the CP-SAT
start phase builds its graphs (``cpsat.heuristics.starts``) and re-checks what it returns.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

if TYPE_CHECKING:
    from pipetab.schedules.ops import Op

Edge = tuple[int, int]  # (other op's index, least start-to-start lag)


@dataclass(frozen=True)
class PrecedenceGraph:
    """The ops of a fixed-placement problem (``problem.ops`` order) with their device,
    duration and start-to-start lags to successors and from predecessors."""

    ops: tuple[Op, ...]
    num_devices: int
    device: tuple[int, ...]
    duration: tuple[int, ...]
    succ: tuple[tuple[Edge, ...], ...]
    pred: tuple[tuple[Edge, ...], ...]

    def makespan(self, starts: Sequence[int]) -> int:
        return max((s + d for s, d in zip(starts, self.duration)), default=0)


def _by_priority(key: Sequence[float], after: Sequence[Sequence[Edge]],
                 before: Sequence[Sequence[Edge]]) -> Iterator[int]:
    """Op indices in an order where every op comes after all its ``before`` neighbours,
    the smallest ``key`` first among those available."""
    waiting = [len(b) for b in before]
    heap = [(key[i], i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        yield i
        for j, _lag in after[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(heap, (key[j], j))


def _earliest_gap(busy: list[tuple[int, int]], earliest: int, length: int) -> int:
    """The earliest t >= ``earliest`` with [t, t + length) clear of the sorted, disjoint
    intervals ``busy``."""
    t = earliest
    i = bisect.bisect_right(busy, (t, math.inf)) - 1
    if i >= 0 and busy[i][1] > t:
        t = busy[i][1]
    i += 1
    while i < len(busy) and busy[i][0] < t + length:
        t = max(t, busy[i][1])
        i += 1
    return t


def _latest_gap(busy: list[tuple[int, int]], latest_end: int, length: int) -> int:
    """The latest start t with t + length <= ``latest_end`` and [t, t + length) clear of
    ``busy``."""
    end = latest_end
    j = bisect.bisect_left(busy, (end, -math.inf)) - 1
    while j >= 0 and busy[j][1] > end - length:
        end = min(end, busy[j][0])
        j -= 1
    return end - length


def left_pass(graph: PrecedenceGraph, priority: Sequence[float]) -> list[int]:
    """Every op as early as possible (into the earliest idle gap of its device that its
    predecessors allow), taken in ``priority`` order among the ops whose predecessors are
    placed."""
    starts = [0] * len(graph.ops)
    busy: list[list[tuple[int, int]]] = [[] for _ in range(graph.num_devices)]
    for i in _by_priority(priority, graph.succ, graph.pred):
        ready = max((starts[a] + lag for a, lag in graph.pred[i]), default=0)
        t = _earliest_gap(busy[graph.device[i]], ready, graph.duration[i])
        starts[i] = t
        bisect.insort(busy[graph.device[i]], (t, t + graph.duration[i]))
    return starts


def right_pass(graph: PrecedenceGraph, priority: Sequence[float], horizon: int) -> list[int]:
    """Every op as late as possible with all ops ending by ``horizon``, taken in
    ``priority`` order among the ops whose successors are placed."""
    starts = [0] * len(graph.ops)
    busy: list[list[tuple[int, int]]] = [[] for _ in range(graph.num_devices)]
    for i in _by_priority(priority, graph.pred, graph.succ):
        dur = graph.duration[i]
        due = min((starts[b] - lag + dur for b, lag in graph.succ[i]), default=horizon)
        t = _latest_gap(busy[graph.device[i]], due, dur)
        starts[i] = t
        bisect.insort(busy[graph.device[i]], (t, t + dur))
    return starts


def double_justify(graph: PrecedenceGraph, starts: Sequence[int], max_rounds: int = 8,
                   until: float | None = None) -> list[int]:
    """Rounds of (right pass in order of latest end, left pass in order of the right
    pass's starts) from a feasible ``starts`` until a round no longer shortens the
    makespan (or ``until``, a ``time.perf_counter`` time, has passed); the best starts
    seen."""
    import time

    best = list(starts)
    best_makespan = graph.makespan(best)
    current = best
    for _ in range(max_rounds):
        if until is not None and time.perf_counter() > until:
            break
        horizon = graph.makespan(current)
        late = right_pass(graph, [-(s + d) for s, d in zip(current, graph.duration)], horizon)
        current = left_pass(graph, late)
        makespan = graph.makespan(current)
        if makespan >= best_makespan:
            break
        best, best_makespan = current, makespan
    return best
