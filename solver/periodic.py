"""The steady-state period of a repeated training step with no barrier between iterations.

Training repeats the same step: iteration k+1 runs the same per-device orders as iteration
k. Without a global barrier (no synchronous all-reduce or optimizer step between them — the
Zero Bubble paper's "optimizer post-validation"), device d may start iteration k+1 as soon as
it has finished its own last op of iteration k. The time per iteration in the steady state
is then the *period*. Three ways to it:

* ``span_period(start, end, device_of)``: the longest per-device span, from a device's
  first op to its last, of one iteration's timing — the Zero Bubble paper's cost (its
  Section 5.3 and the objective of its ILP, Appendix G). Repeating any valid timing every
  ``span_period`` of it is a valid periodic schedule; ``checked_span_period`` first checks
  that a timing (e.g. a solver's, starts free) is valid.
* ``min_period(schedule, costs)``: the least such span over all timings of the schedule's
  orders (starts free, not as soon as possible): the maximum cycle mean of the repeated
  dependency graph — per-device order, data dependencies with their transfer lags, and the
  wrap edge "last op of device d in iteration k -> first op of d in iteration k+1" —
  computed exactly (Karp's algorithm on the devices' wrap graph). ``periodic_timing``
  builds a timing that attains it.
* ``repeated_simulation(schedule, costs, iterations=K)``: the level-3 simulator on a
  schedule whose per-device orders are K iterations concatenated; its steady-state period
  is the growth of the devices' first-op starts once they repeat.

For a valid timing t of one iteration, ``span_period(t) >= min_period``; the ASAP timing
(``simulate``) starts every device's first op as early as possible, which can only lengthen
spans. With link contention off, the K-iteration simulation's steady-state period equals
``min_period`` (both are the growth rate of the same max-plus recursion). ``docs/period.md``
says where the three differ.

Times are in the costs' unit; optimizer steps and gradient all-reduces are not part of the
period (the Zero Bubble paper's costs exclude them too).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Hashable, Mapping

import numpy as np

from pipetab.schedules.evaluate import deadlock_error
from pipetab.schedules.ops import Op, data_predecessors
from pipetab.schedules.schedule import Schedule

from .simulate import Simulation, simulate

if TYPE_CHECKING:
    from .costs import Costs

# ---- the Zero Bubble paper's cost of one timing -----------------------------------------

def device_spans(start: Mapping[Op, float], end: Mapping[Op, float],
                 device_of: Callable[[Op], Hashable]) -> dict:
    """Per device, the time from the start of its first op to the end of its last."""
    first: dict = {}
    last: dict = {}
    for op, s in start.items():
        d = device_of(op)
        e = end[op]
        if d not in first or s < first[d]:
            first[d] = s
        if d not in last or e > last[d]:
            last[d] = e
    return {d: last[d] - first[d] for d in first}


def span_period(start: Mapping[Op, float], end: Mapping[Op, float],
                device_of: Callable[[Op], Hashable]) -> float:
    """The longest per-device span (first op's start to last op's end) of one iteration's
    timing: the period at which that timing can be repeated with no barrier."""
    spans = device_spans(start, end, device_of)
    if not spans:
        raise ValueError("span_period needs a timing of at least one op")
    return max(spans.values())


def checked_span_period(schedule: Schedule, costs: Costs, start: Mapping[Op, float]) -> float:
    """``span_period`` of a timing given by its ``start`` times (ends from ``costs``), after
    checking that it runs every op of ``schedule`` once and respects each device's order and
    every data dependency with its transfer (no link contention) — how a solver's timing
    with free starts is checked. ``ValueError`` naming the first violated constraint."""
    tol = 1e-9 * max(1.0, max((abs(t) for t in start.values()), default=1.0))
    expected = set(schedule.expected_ops())
    if set(start) != expected:
        odd = sorted(map(str, expected - set(start))) or sorted(map(str, set(start) - expected))
        raise ValueError(f"the timing does not match the schedule's ops (first mismatch: {odd[0]})")
    end = {op: t + costs.duration(op) for op, t in start.items()}
    nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
    for d, order in enumerate(schedule.orders):
        for a, b in itertools.pairwise(order):
            if start[b] < end[a] - tol:
                raise ValueError(f"device {d} starts {b} at {start[b]:g} before {a} ends at {end[a]:g}")
        for op in order:
            for q in data_predecessors(op, nstages[op.pipeline]):
                ready = end[q] + costs.transfer(q, schedule.device_of(q), d)
                if start[op] < ready - tol:
                    raise ValueError(f"{op} starts at {start[op]:g} before its input from {q} arrives at {ready:g}")
    return span_period(start, end, schedule.device_of)


# ---- the least period over all timings of the orders -------------------------------------

class _Graph:
    """One iteration's constraint graph on op indices: ``succ[u]`` lists (v, w) meaning
    start(v) >= start(u) + w; ``order`` is a topological order; ``first``/``last`` the
    first and last op index of each non-empty device."""

    def __init__(self, schedule: Schedule, costs: Costs):
        if costs.contention:
            raise ValueError(
                "min_period assumes messages never queue; costs with link contention have no "
                "fixed transfer lags (use repeated_simulation)"
            )
        _refuse_replicas(costs, "min_period")
        ops: list[Op] = [op for order in schedule.orders for op in order]
        index = {op: i for i, op in enumerate(ops)}
        self.ops = ops
        self.dur = [costs.duration(op) for op in ops]
        self.succ: list[list[tuple[int, float]]] = [[] for _ in ops]
        indeg = [0] * len(ops)
        self.first: list[int] = []
        self.last: list[int] = []
        nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
        for d, order in enumerate(schedule.orders):
            if not order:
                continue
            self.first.append(index[order[0]])
            self.last.append(index[order[-1]])
            for i, op in enumerate(order):
                v = index[op]
                if i:
                    u = index[order[i - 1]]
                    self.succ[u].append((v, self.dur[u]))
                    indeg[v] += 1
                for q in data_predecessors(op, nstages[op.pipeline]):
                    u = index[q]
                    src = schedule.device_of(q)
                    self.succ[u].append((v, self.dur[u] + costs.transfer(q, src, d)))
                    indeg[v] += 1
        stack = [v for v, n in enumerate(indeg) if n == 0]
        self.order: list[int] = []
        while stack:
            u = stack.pop()
            self.order.append(u)
            for v, _ in self.succ[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    stack.append(v)
        if len(self.order) != len(ops):
            done = np.zeros(len(ops), dtype=bool)  # ops are in the schedule's op order
            done[self.order] = True
            raise deadlock_error(schedule, done)
        self.exact = all(_is_int(x) for x in self.dur) and all(
            _is_int(w) for out in self.succ for _, w in out
        )

    def longest_from(self, source: int) -> list[float]:
        """Longest path lengths (start to start) from op ``source`` to every op; -inf where
        unreachable."""
        dist = [-math.inf] * len(self.ops)
        dist[source] = 0
        for u in self.order:
            du = dist[u]
            if du == -math.inf:
                continue
            for v, w in self.succ[u]:
                if du + w > dist[v]:
                    dist[v] = du + w
        return dist

    def wrap_matrix(self) -> list[list[float]]:
        """``m[a][b]``: longest time from the start of device a's first op to the end of
        device b's last op within one iteration (-inf if not connected)."""
        out = []
        for f in self.first:
            dist = self.longest_from(f)
            out.append([dist[e] + self.dur[e] if dist[e] > -math.inf else -math.inf for e in self.last])
        return out


def _is_int(x: float) -> bool:
    return isinstance(x, int) or (isinstance(x, float) and x.is_integer())


def _refuse_replicas(costs: Costs, what: str) -> None:
    if costs.replica_groups:
        raise ValueError(
            f"{what} has no per-iteration gradient all-reduce; costs with replicated stages "
            "(Chimera) are not supported"
        )


def max_cycle_mean(weights: list[list[float]], exact: bool = False) -> float:
    """Largest mean weight of a cycle of the complete digraph with edge weights
    ``weights[a][b]`` (-inf: no edge), by Karp's algorithm; -inf when there is no cycle.
    ``exact``: the weights are integers and the result is computed as a fraction."""
    n = len(weights)
    neg = -math.inf
    # walks from a super-source joined to every node by a 0-weight edge: D[k][v] is the
    # heaviest walk of exactly k edges ending at v (k = 1 is the source edge)
    D: list[list[float]] = [[0] * n]
    for _ in range(n):
        prev = D[-1]
        row = []
        for v in range(n):
            best = neg
            for u in range(n):
                w = weights[u][v]
                if prev[u] != neg and w != neg and prev[u] + w > best:
                    best = prev[u] + w
            row.append(best)
        D.append(row)
    top: Fraction | float | None = None
    for v in range(n):
        if D[n][v] == neg:
            continue
        worst: Fraction | float | None = None
        for k in range(n):
            if D[k][v] == neg:
                continue
            diff = D[n][v] - D[k][v]
            ratio = Fraction(int(diff), n - k) if exact else diff / (n - k)
            if worst is None or ratio < worst:
                worst = ratio
        if worst is not None and (top is None or worst > top):
            top = worst
    if top is None:
        return neg
    if isinstance(top, Fraction):
        return int(top) if top.denominator == 1 else float(top)
    return top


def min_period(schedule: Schedule, costs: Costs) -> float:
    """The least per-device span (first op's start to last op's end, maximised over
    devices) over all timings of ``schedule``'s per-device orders under ``costs`` — the
    steady-state time per iteration of the orders repeated with no barrier. Exact (an int
    or a fraction's float) when every duration and transfer is an integer. Raises
    ``DeadlockError`` for orders that cannot run; refuses link contention and replicated
    stages."""
    g = _Graph(schedule, costs)
    return max_cycle_mean(g.wrap_matrix(), exact=g.exact)


@dataclass(frozen=True)
class PeriodicTiming:
    """A timing of one iteration whose per-device spans are all at most ``period``:
    repeated every ``period`` it is a valid steady state. Earliest such starts, the first
    op at time 0."""

    period: float
    start: dict[Op, float]
    end: dict[Op, float]


def periodic_timing(schedule: Schedule, costs: Costs, period: float | None = None) -> PeriodicTiming:
    """The earliest timing of one iteration of ``schedule`` whose device spans all fit in
    ``period`` (default ``min_period``): longest paths of the one-iteration constraints plus
    "first op of d starts no earlier than its last op ends minus the period".
    ``ValueError`` when ``period`` is below ``min_period``."""
    g = _Graph(schedule, costs)
    if period is None:
        period = max_cycle_mean(g.wrap_matrix(), exact=g.exact)
    if not isinstance(period, (int, float)) or isinstance(period, bool) or not math.isfinite(period):
        raise ValueError(f"period must be a finite number, got {period!r}")
    start = [0.0] * len(g.ops)
    scale = max(1.0, sum(g.dur))
    for _ in range(len(g.first) + 2):
        for u in g.order:
            su = start[u]
            for v, w in g.succ[u]:
                if su + w > start[v]:
                    start[v] = su + w
        changed = False
        for f, e in zip(g.first, g.last):
            need = start[e] + g.dur[e] - period
            if need > start[f] + 1e-12 * scale:
                start[f] = need
                changed = True
        if not changed:
            break
    else:
        raise ValueError(
            f"period {period} is below the least period {min_period(schedule, costs)} of these orders"
        )
    t0 = min(start)
    st = {op: start[i] - t0 for i, op in enumerate(g.ops)}
    en = {op: st[op] + g.dur[i] for i, op in enumerate(g.ops)}
    return PeriodicTiming(period, st, en)


# ---- K iterations through the simulator --------------------------------------------------

def repeated_schedule(schedule: Schedule, iterations: int) -> Schedule:
    """``schedule`` repeated ``iterations`` times as one schedule: microbatch m of
    iteration k becomes microbatch k*B + m, and each device's order is its order for
    iteration 0, then 1, ... (no barrier between iterations)."""
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    n = schedule.num_microbatches
    orders = tuple(
        tuple(op._replace(microbatch=k * n + op.microbatch) for k in range(iterations) for op in order)
        for order in schedule.orders
    )
    return Schedule(
        f"{schedule.name}x{iterations}", schedule.placement, schedule.microbatch2pipeline * iterations,
        orders, schedule.stage_work, schedule.split_backward,
        {**schedule.params, "iterations": iterations},
    )


@dataclass(frozen=True)
class RepeatedRun:
    """K iterations simulated back to back. ``first_starts[k][d]`` / ``last_ends[k][d]``:
    when device d starts / ends iteration k (d over the devices that run ops: all of them
    for every registry schedule). ``period``: the steady-state time per
    iteration, the largest per-device growth of first-op starts over the last
    ``cyclicity`` iterations divided by ``cyclicity``; ``periodic_from``: the first
    iteration from which every device's starts repeat with that growth (None if they had
    not yet become periodic, with at least two repetitions seen, within the K iterations —
    ``period`` is then the last iteration's growth)."""

    iterations: int
    first_starts: tuple[tuple[float, ...], ...]
    last_ends: tuple[tuple[float, ...], ...]
    period: float
    periodic_from: int | None
    cyclicity: int
    simulation: Simulation = field(compare=False, repr=False)

    def iteration_spans(self, k: int) -> tuple[float, ...]:
        """Per device, the span of iteration ``k`` (first op's start to last op's end)."""
        return tuple(e - s for s, e in zip(self.first_starts[k], self.last_ends[k]))


def repeated_simulation(schedule: Schedule, costs: Costs, iterations: int = 8) -> RepeatedRun:
    """Simulate ``iterations`` consecutive iterations of ``schedule`` with the level-3
    simulator (``simulate`` on ``repeated_schedule``): each iteration's microbatches depend
    only on each other, each device starts iteration k+1 after its own last op of iteration
    k, and there is no barrier between iterations. Reports the steady-state period and when
    the starts became periodic (see ``RepeatedRun``). Refuses replicated stages (their
    per-iteration all-reduce is not modelled)."""
    _refuse_replicas(costs, "repeated_simulation")
    rep = repeated_schedule(schedule, iterations)
    sim = simulate(rep, costs)
    lengths = [len(o) for o in schedule.orders]
    devices = [d for d, n in enumerate(lengths) if n]
    firsts, lasts = [], []
    for k in range(iterations):
        firsts.append(tuple(sim.start[rep.orders[d][k * lengths[d]]] for d in devices))
        lasts.append(tuple(sim.end[rep.orders[d][(k + 1) * lengths[d] - 1]] for d in devices))
    periodic_from, cyclicity = _periodicity(firsts)
    c = cyclicity
    last = iterations - 1
    if iterations == 1:
        period = max(e - s for s, e in zip(firsts[0], lasts[0]))
    else:
        period = max((a - b) / c for a, b in zip(firsts[last], firsts[last - c]))
    return RepeatedRun(iterations, tuple(firsts), tuple(lasts), period, periodic_from, c, sim)


def _periodicity(x: list[tuple[float, ...]]) -> tuple[int | None, int]:
    """(first iteration k0, cyclicity c) such that x[k+c] - x[k] is the same vector for every
    k >= k0, seen at least twice (k0 + 2c <= K-1); smallest c, then smallest k0. (None, 1)
    when no such pair exists."""
    K = len(x)
    scale = max((abs(v) for row in x for v in row), default=1.0)
    tol = 1e-9 * max(1.0, scale)

    def same(a, b) -> bool:
        return all(abs(p - q) <= tol for p, q in zip(a, b))

    for c in range(1, K // 2 + 1):
        steps = [tuple(p - q for p, q in zip(x[k + c], x[k])) for k in range(K - c)]
        # the longest tail of equal steps
        k0 = K - c - 1
        while k0 > 0 and same(steps[k0 - 1], steps[-1]):
            k0 -= 1
        if k0 + 2 * c <= K - 1:
            return k0, c
    return None, 1


# ---- a periodic schedule's blocks through the simulator ----------------------------------

@dataclass(frozen=True)
class BlockRun:
    """A schedule of ``blocks`` blocks of ``block`` microbatches simulated as one step (the
    first microbatches of a periodic schedule, ``cpsat.cyclic.Kernel.expand``).
    ``period``: how much later every op of microbatch m + block starts than that of m,
    over the middle blocks (``periodic_from`` to ``periodic_to``, where the starts repeat
    with that growth; None when they do not); the first and last blocks are the warm-up
    and cool-down, where ops wait less."""

    blocks: int
    block: int
    period: float | None
    periodic_from: int | None
    periodic_to: int | None
    simulation: Simulation = field(compare=False, repr=False)


def block_simulation(schedule: Schedule, costs: Costs, block: int) -> BlockRun:
    """Simulate ``schedule`` (whose microbatches come in blocks of ``block``) with the
    level-3 simulator and measure the growth per block of every op's start: the longest
    run of consecutive blocks b with start(op of m + block) - start(op of m) the same for
    every op of every microbatch m of block b (``BlockRun``)."""
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        raise ValueError(f"block must be an integer >= 1, got {block!r}")
    n = schedule.num_microbatches // block
    if n < 3:
        raise ValueError(f"block_simulation needs at least 3 blocks of {block}, got {schedule.num_microbatches} "
                         "microbatches")
    sim = simulate(schedule, costs)
    ops = schedule.ops
    keep = ops.microbatch < n * block
    key = schedule.codes[keep]
    b, j = np.divmod(ops.microbatch[keep], block)
    width = int(key.max()) + 1
    grid = np.full((n, block * width), np.nan)
    grid[b, j * width + key] = sim.start_times[keep]
    steps = np.diff(grid, axis=0)  # steps[i]: block i+1 minus block i
    growth = np.nanmax(steps, axis=1)
    same = np.array([np.allclose(row[~np.isnan(row)], g) for row, g in zip(steps, growth)])
    best: tuple[int, int] | None = None
    i = 0
    while i < len(same):
        if not same[i]:
            i += 1
            continue
        k = i
        while k + 1 < len(same) and same[k + 1] and np.isclose(growth[k + 1], growth[i]):
            k += 1
        if best is None or k - i > best[1] - best[0]:
            best = (i, k)
        i = k + 1
    if best is None:
        return BlockRun(n, block, None, None, None, sim)
    return BlockRun(n, block, float(growth[best[0]]), best[0], best[1] + 1, sim)
