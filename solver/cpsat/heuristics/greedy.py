"""Greedy memory-aware list scheduling, the model's own starting schedules: ops dispatched
as devices become idle (event-driven), steered by ``warmup_depths``, ``stage_limits`` and
``microbatch_spacing``.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Callable

from pipetab.schedules.memory import memory_change
from pipetab.schedules.ops import Kind, Op, data_successors
from pipetab.schedules.schedule import Placement

from ..model.variables import heads_tails

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule

    from ..problem import Problem


def greedy_schedule(
    problem: Problem,
    placement: Placement,
    window: int | None = None,
    backward_first: bool = True,
    name: str = "greedy",
    reserve: bool = False,
    priority: str | None = None,
    inflight: dict[tuple[int, int], int] | None = None,
    slack: dict[int, float] | None = None,
    until: float | None = None,
) -> Schedule | None:
    """Dispatch ops as devices become idle: a ready backward (B, then W) of the smallest
    microbatch first (``backward_first``; else forwards first), else the smallest microbatch's
    ready forward whose activation fits; at most ``window`` microbatches in flight. ``priority``
    (a permutation of "FBW") overrides the order: "BFW" runs a W only when no B or fitting F is
    ready (Zero Bubble's idea). None when it deadlocks. ``inflight[(p, s)]``: the stage's k-th
    forward only after its (k - inflight)-th backward started. ``reserve``: a microbatch enters
    only when every device of its pipeline can hold its activations, reserved until freed
    (never deadlocks). ``slack``: the ready op of least slack first — head plus ``slack[p]``
    per earlier microbatch of p, less its tail. ``until`` (perf_counter): give up past it."""
    if priority is None:
        priority = "BWF" if backward_first else "FBW"
    if sorted(priority) != ["B", "F", "W"]:
        raise ValueError(f"priority must be a permutation of 'FBW', got {priority!r}")
    key = _priority_key(problem, placement, {Kind[c]: i for i, c in enumerate(priority)}, slack)
    run = _ListScheduler(problem, placement, window or problem.num_microbatches, reserve, inflight, key)
    orders = run.schedule(until)
    return None if orders is None else problem.schedule(name, placement, orders)


def _priority_key(problem: Problem, placement: Placement, prio: dict[Kind, int],
                  slack: dict[int, float] | None) -> Callable[[Op], tuple]:
    if slack is None:
        return lambda op: (prio[op.kind], op.microbatch, op.stage)
    head, tail = heads_tails(problem, placement)
    rank = {m: j for mbs in problem.pipeline_microbatches.values() for j, m in enumerate(mbs)}

    def key(op: Op) -> tuple:
        k = op._replace(microbatch=0)
        return head[k] + slack[op.pipeline] * rank[op.microbatch] - tail[k], prio[op.kind], op.microbatch, op.stage

    return key


class _ListScheduler:
    """The event loop of ``greedy_schedule``: time jumps from event to event (a release
    of memory, a microbatch's end, an op becoming ready, a device becoming free)."""

    def __init__(self, problem: Problem, placement: Placement, window: int, reserve: bool,
                 inflight: dict[tuple[int, int], int] | None, key: Callable[[Op], tuple]):
        D = placement.num_devices
        self.problem, self.window, self.reserve, self.inflight, self.key = problem, window, reserve, inflight, key
        self.act = problem.costs.activation
        self.dev_of = {(p, s): placement.device(p, s) for p, s in problem.stages}
        self.caps = [problem.cap(d) for d in range(D)]
        self.ops_per_mb = [problem.num_stages[p] * len(problem.kinds) for p in problem.microbatch2pipeline]
        self.done = [0] * problem.num_microbatches
        self.live = [0.0] * D
        self.free_at = [0] * D
        self.started: dict[tuple[int, int], int] = defaultdict(int)  # forwards minus backwards per stage
        self.ready: list[list[tuple[tuple, Op]]] = [[] for _ in range(D)]
        self.pending: list[tuple[int, int, Op]] = []  # (ready time, seq, op)
        self.releases: list[tuple[int, int, float]] = []  # (time, device, amount)
        self.finishes: list[int] = []  # end times of finished microbatches
        self.orders: list[list[Op]] = [[] for _ in range(D)]
        self.admitted = self.in_flight = self.seq = 0
        self.remaining = problem.num_ops
        self.need: dict[int, dict[int, float]] = {}
        for p in set(problem.microbatch2pipeline):
            self.need[p] = defaultdict(float)
            for s in range(problem.num_stages[p]):
                self.need[p][self.dev_of[(p, s)]] += self.act[(p, s)]
        # per op kind of a stage (microbatches are identical): its duration, the memory its
        # end frees, and its successors' kinds with the message lag to their device
        self.chain: dict[tuple, tuple[int, float, list]] = {}
        for p, s in problem.stages:
            d = self.dev_of[(p, s)]
            for k in problem.kinds:
                op = Op(k, p, s, 0)
                nxt = [(n.kind, n.stage, problem.lag(op, d, self.dev_of[(p, n.stage)])
                        if self.dev_of[(p, n.stage)] != d else 0)
                       for n in data_successors(op, problem.num_stages[p], problem.split_backward)]
                freed = -memory_change(k, self.act[(p, s)], problem.weight_part(p, s), problem.split_backward)
                self.chain[(k, p, s)] = (problem.duration(op), freed, nxt)

    def schedule(self, until: float | None = None) -> list[list[Op]] | None:
        t = 0
        while self.remaining:
            if until is not None and time.perf_counter() > until:
                return None
            self._advance(t)
            for d in range(len(self.free_at)):
                if self.free_at[d] <= t and self.ready[d]:
                    op = self._choose(d)
                    if op is not None:
                        self._run(op, d, t)
            if not self.remaining:
                break
            future = [x for x in (self.releases[0][0] if self.releases else None,
                                  self.finishes[0] if self.finishes else None,
                                  self.pending[0][0] if self.pending else None) if x is not None and x > t]
            future += [f for f in self.free_at if f > t]
            if not future:
                return None  # deadlock: every waiting forward lacks memory and nothing runs
            t = min(future)
        return self.orders

    def _admissible(self, m: int) -> bool:
        if not self.reserve:
            return True
        return all(self.caps[d] is None or self.live[d] + a <= self.caps[d] + 1e-9  # type: ignore[operator]
                   for d, a in self.need[self.problem.microbatch2pipeline[m]].items())

    def _advance(self, t: int) -> None:
        """Memory released, microbatches finished, microbatches admitted, ops made ready by ``t``."""
        while self.releases and self.releases[0][0] <= t:
            _, d, a = heapq.heappop(self.releases)
            self.live[d] -= a
        while self.finishes and self.finishes[0] <= t:
            heapq.heappop(self.finishes)
            self.in_flight -= 1
        B = self.problem.num_microbatches
        while self.admitted < B and self.in_flight < self.window and self._admissible(self.admitted):
            m, p = self.admitted, self.problem.microbatch2pipeline[self.admitted]
            if self.reserve:
                for d, a in self.need[p].items():
                    self.live[d] += a
            self._push_pending(t, Op(Kind.F, p, 0, m))
            self.admitted += 1
            self.in_flight += 1
        while self.pending and self.pending[0][0] <= t:
            _, _, op = heapq.heappop(self.pending)
            heapq.heappush(self.ready[self.dev_of[(op.pipeline, op.stage)]], (self.key(op), op))

    def _push_pending(self, t: int, op: Op) -> None:
        heapq.heappush(self.pending, (t, self.seq, op))
        self.seq += 1

    def _choose(self, d: int) -> Op | None:
        """Device ``d``'s first ready op by priority that memory and warm-up depth allow."""
        skipped, chosen = [], None
        B = self.problem.num_microbatches
        while self.ready[d]:
            item = heapq.heappop(self.ready[d])
            op = item[1]
            stage = (op.pipeline, op.stage)
            if op.kind is Kind.F and self.caps[d] is not None and not self.reserve \
                    and self.live[d] + self.act[stage] > self.caps[d] + 1e-9:  # type: ignore[operator]
                skipped.append(item)
                continue
            if op.kind is Kind.F and self.inflight is not None and self.started[stage] >= self.inflight.get(stage, B):
                skipped.append(item)
                continue
            chosen = op
            break
        for it in skipped:
            heapq.heappush(self.ready[d], it)
        return chosen

    def _run(self, op: Op, d: int, t: int) -> None:
        kind, p, st, m = op
        duration, freed, nxt = self.chain[(kind, p, st)]
        end = t + duration
        self.free_at[d] = end
        self.orders[d].append(op)
        self.remaining -= 1
        if kind is Kind.F:
            if not self.reserve:
                self.live[d] += self.act[(p, st)]
        elif freed > 0:
            heapq.heappush(self.releases, (end, d, freed))
        self.done[m] += 1
        if kind is not Kind.W:
            self.started[(p, st)] += 1 if kind is Kind.F else -1
        if self.done[m] == self.ops_per_mb[m]:
            heapq.heappush(self.finishes, end)
        for k2, s2, lag in nxt:
            self._push_pending(end + lag, Op(k2, p, s2, m))


def warmup_depths(problem: Problem) -> tuple[int, ...] | None:
    """Per device of a linear one-pipeline problem, the forwards that fit between its first
    forward's start and the first microbatch's earliest backward there, in [1, what memory
    holds]: Zero Bubble style warm-up depths. None for other shapes."""
    if problem.num_pipelines != 1 or problem.num_stages[0] != problem.num_devices:
        return None
    S = problem.num_devices
    head, _ = heads_tails(problem, Placement((tuple(range(S)),), S))  # stage d on device d
    out = []
    for d in range(S):
        f = Op(Kind.F, 0, d, 0)
        n = max(1, (head[Op(Kind.B, 0, d, 0)] - head[f]) // problem.duration(f))
        fit = problem.activations_fit(problem.cap(d), 0, d)
        out.append(int(min(n, fit)) if fit else int(n))
    return tuple(out)


def stage_limits(problem: Problem, placement: Placement, scale: float) -> dict[tuple[int, int], int]:
    """Per-stage warm-up depths for several stages per device (Little's law): ``scale`` x a
    stage's least lifetime (its forward's start to its backward's end, ``heads_tails``) over the
    time between two of its microbatches on a busy device, at least 1, shrunk in proportion
    where a device's depths together exceed its cap."""
    counts, work = problem.pipeline_counts, device_work(problem, placement)
    head, _ = heads_tails(problem, placement)
    out = {}
    for p, s in problem.stages:
        gap = work[placement.device(p, s)] / counts[p]
        back = Op(Kind.B, p, s, 0)
        lifetime = head[back] + problem.duration(back) - head[Op(Kind.F, p, s, 0)]
        out[(p, s)] = max(1, math.ceil(scale * lifetime / gap))
    act = problem.costs.activation
    for d in range(placement.num_devices):
        cap = problem.cap(d)
        mine = [k for k in out if placement.device(*k) == d]
        need = sum(out[k] * act[k] for k in mine)
        if cap is not None and need > cap + 1e-9:
            for k in mine:
                out[k] = max(1, math.floor(out[k] * cap / need + 1e-9))
    return out


def device_work(problem: Problem, placement: Placement) -> dict[int, int]:
    """Each device's total op time over all microbatches."""
    work: dict[int, int] = defaultdict(int)
    for p, s in problem.stages:
        work[placement.device(p, s)] += problem.pipeline_counts[p] * sum(
            problem.duration(Op(k, p, s, 0)) for k in problem.kinds)
    return work


def microbatch_spacing(problem: Problem, placement: Placement) -> dict[int, float]:
    """Per pipeline, the busiest device's work per microbatch: how far apart its microbatches
    pass when that device never idles (linear F=1, B=2: 3; bidirectional: 6)."""
    work = device_work(problem, placement)
    return {p: max(work[placement.device(p, s)] for s in range(problem.num_stages[p])) / n
            for p, n in problem.pipeline_counts.items()}
