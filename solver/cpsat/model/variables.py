"""Variables of the CP-SAT model: a fixed-size interval per op, placement literals and
shared-start optional intervals under free placement, lifetime intervals, all-reduce starts
and transfer lags; each objective adds its own (``objectives``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipetab.schedules.ops import Kind, Op, data_predecessors, data_successors

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from pipetab.schedules.schedule import Placement

    from ..problem import Problem


def predecessor(op: Op, num_stages: int) -> Op | None:
    """The single data predecessor of ``op`` (None for the first forward)."""
    return next(iter(data_predecessors(op, num_stages)), None)


def min_lag(problem: Problem, placement: Placement | None, pred: Op, op: Op) -> int:
    """The transfer lag of the edge pred -> op: exact under a fixed placement; under free
    placement the smallest over device pairs (0, as both stages may share a device)."""
    if placement is None:
        return 0
    src = placement.device(pred.pipeline, pred.stage)
    dst = placement.device(op.pipeline, op.stage)
    return problem.lag(pred, src, dst) if src != dst else 0


def heads_tails(problem: Problem, placement: Placement | None) -> tuple[dict[Op, int], dict[Op, int]]:
    """Per op, the least time before its start (head) and after its end (tail, without
    optimizer and all-reduce) within its microbatch, with lags; from microbatch 0 per pipeline."""
    head: dict[Op, int] = {}
    tail: dict[Op, int] = {}
    split = problem.split_backward
    for p, n in enumerate(problem.num_stages):
        # heads in topological order (F up, B down, W after B)
        order = [Op(Kind.F, p, s, 0) for s in range(n)] + [Op(Kind.B, p, s, 0) for s in reversed(range(n))]
        if split:
            order += [Op(Kind.W, p, s, 0) for s in range(n)]
        for op in order:
            pr = predecessor(op, n)
            head[op] = 0 if pr is None else head[pr] + problem.duration(pr) + min_lag(problem, placement, pr, op)
        for op in reversed(order):
            tail[op] = max((min_lag(problem, placement, op, nx) + problem.duration(nx) + tail[nx]
                            for nx in data_successors(op, n, split)), default=0)
    return head, tail


def lifetime_min(problem: Problem, placement: Placement | None, p: int, s: int, kind: Kind) -> int:
    """Least time from the start of F(p, s) to the end of its op ``kind`` (B or W)."""
    head, _ = heads_tails(problem, placement)
    rel = Op(kind, p, s, 0)
    return head[rel] + problem.duration(rel) - head[Op(Kind.F, p, s, 0)]


class BuildTimeout(Exception):
    """The model could not be built within the time limit."""


@dataclass
class Variables:
    """All variables of one model. ``placement`` None means free placement."""

    problem: Problem
    placement: Placement | None
    horizon: int
    makespan_lb: int = 0
    ops: tuple[Op, ...] = ()
    index: dict[Op, int] = field(default_factory=dict)
    dur: list[int] = field(default_factory=list)
    start: list[cp_model.IntVar] = field(default_factory=list)
    interval: list[cp_model.IntervalVar] = field(default_factory=list)
    device: list[int | None] = field(default_factory=list)
    x: dict[tuple[int, int], list[cp_model.IntVar]] = field(default_factory=dict)
    alt: list[list[cp_model.IntervalVar]] = field(default_factory=list)
    lag: dict[tuple[Op, Op], object] = field(default_factory=dict)  # int or LinearExpr
    lag_vars: dict[tuple[Kind, int, int], tuple[cp_model.LinearExprT, list]] = field(default_factory=dict)
    lifetime_size: dict[tuple[int, int, int, Kind], cp_model.IntVar] = field(default_factory=dict)
    ar: list[cp_model.IntVar] = field(default_factory=list)
    makespan: cp_model.IntVar | None = None
    period: cp_model.IntVar | None = None
    first: list[cp_model.IntVar] = field(default_factory=list)  # period: each device's first start
    last: list[cp_model.IntVar] = field(default_factory=list)  # period: each device's last end
    peak: cp_model.IntVar | None = None  # memory: every device's live activations at most this
    memory_scale: float = 1.0  # memory: the peak counts units of 1/scale (``bounds.activation_scale``)
    # precedences between op chains (kind, pipeline, stage) under FIFO: (a, c) -> k means
    # op (a, j) ends before op (c, j + k) starts (memory windows, last-stage glue)
    chain_shift: dict[tuple[tuple, tuple], int] = field(default_factory=dict)
    order_lits: list[tuple[cp_model.IntVar, int, int]] = field(default_factory=list)  # (lit, a, c): a before c
    # overlapped pairs chosen by the model (``pairing``): (forward, backward) index ->
    # (literal, block ticks); a paired op's alone literal and end variable; blocks per device
    pair_lits: dict[tuple[int, int], tuple[cp_model.IntVar, int]] = field(default_factory=dict)
    alone: dict[int, cp_model.IntVar] = field(default_factory=dict)
    ends: list = field(default_factory=list)  # end variable per op (None: start + duration)
    block_intervals: dict[int, list[cp_model.IntervalVar]] = field(default_factory=dict)
    deadline: float | None = None  # building past it raises BuildTimeout
    _steps: int = 0

    def check(self) -> None:
        """In the builder's loops: past ``deadline`` (checked every 2048 calls) raise ``BuildTimeout``."""
        self._steps += 1
        if self.deadline is not None and not self._steps & 2047 and time.perf_counter() > self.deadline:
            raise BuildTimeout("the time limit ran out while building the CP-SAT model")

    @classmethod
    def build(
        cls, model: cp_model.CpModel, problem: Problem, placement: Placement | None,
        horizon: int, makespan_lb: int = 0, intervals: bool = True, deadline: float | None = None,
        objective_variables=None, pairs=None,
    ) -> "Variables":
        """Every op's start and interval, placement literals (free placement), the objective's
        own variables, the all-reduce starts and, with ``pairs``, the overlapped pairs."""
        v = cls(problem, placement, horizon, makespan_lb, deadline=deadline)
        v.ops = problem.ops
        v.index = {op: i for i, op in enumerate(v.ops)}
        head, tail = heads_tails(problem, placement)
        D = problem.num_devices
        min_opt = min((problem.optimizer(d) for d in range(D)), default=0)
        for op in v.ops:
            v.check()
            key = op._replace(microbatch=0)
            d = problem.duration(op)
            lo = head[key]
            hi = horizon - d - tail[key] - min_opt
            if problem.blocks:  # durations differ within a chain: no per-chain bounds
                lo, hi = 0, horizon - d
            if hi < lo:
                hi = lo  # horizon too small: precedence/makespan constraints make it infeasible
            s = model.new_int_var(lo, hi, f"s_{op}")
            v.dur.append(d)
            v.start.append(s)
            if intervals:
                v.interval.append(model.new_fixed_size_interval_var(s, d, f"i_{op}"))
            v.device.append(None if placement is None else placement.device(op.pipeline, op.stage))
        if placement is None:
            for p, st in problem.stages:
                v.x[(p, st)] = [model.new_bool_var(f"x_p{p}s{st}_d{d}") for d in range(D)]
                model.add_exactly_one(v.x[(p, st)])
            for i, op in enumerate(v.ops):
                lits = v.x[(op.pipeline, op.stage)]
                v.alt.append([
                    model.new_optional_fixed_size_interval_var(v.start[i], v.dur[i], lits[d], f"i_{op}_d{d}")
                    for d in range(D)
                ])
        if pairs is not None:
            add_pair_variables(model, v, pairs)
        if objective_variables is not None:
            objective_variables(model, v, makespan_lb)
        for g_i, _ in enumerate(problem.costs.replica_groups):
            v.ar.append(model.new_int_var(0, horizon, f"ar_{g_i}"))
        return v

    def end(self, i: int):
        """Op i's end: its start plus its duration, or its end variable when it may pair."""
        e = self.ends[i] if self.ends else None
        return self.start[i] + self.dur[i] if e is None else e

    def op_start(self, op: Op):
        return self.start[self.index[op]]

    def device_ops(self, device: int) -> list[int]:
        """Indices of the ops on ``device`` (fixed placement only)."""
        return [i for i, d in enumerate(self.device) if d == device]


@dataclass(frozen=True)
class PairCandidates:
    """(forward, backward, block ticks) per pair; ``restricted``: a cut set, bounds do not count."""

    pairs: tuple[tuple[Op, Op, int], ...]
    restricted: bool = False

    def label(self) -> str:
        if self.restricted:
            return (f"overlapped pairs: {len(self.pairs)} candidates near the incumbent's pairs "
                    "(a restriction of the search; its bounds are not used)")
        return f"overlapped pairs: {len(self.pairs)} candidates, every pair that can occur"


def add_pair_variables(model: cp_model.CpModel, v: Variables, candidates: PairCandidates) -> None:
    """The pair literals, each paired op's end and alone literal, its own interval optional
    (when alone) and each pair's block interval: ``v.pair_lits``, ``v.ends``, ``v.block_intervals``."""
    by_op: dict[int, list] = {}
    for f, b, t in candidates.pairs:
        v.check()
        i, j = v.index[f], v.index[b]
        y = model.new_bool_var(f"pair_{f}_{b}")
        v.pair_lits[(i, j)] = (y, t)
        by_op.setdefault(i, []).append(y)
        by_op.setdefault(j, []).append(y)
        model.add(v.start[j] == v.start[i]).only_enforce_if(y)
        d = v.device[i]
        v.block_intervals.setdefault(d, []).append(  # type: ignore[arg-type]
            model.new_optional_fixed_size_interval_var(v.start[i], t, y, f"blk_{f}_{b}"))
    v.ends = [None] * len(v.ops)
    for i, ys in by_op.items():
        v.check()
        alone = model.new_bool_var(f"alone_{v.ops[i]}")
        model.add(sum(ys) + alone == 1)
        v.alone[i] = alone
        v.interval[i] = model.new_optional_fixed_size_interval_var(v.start[i], v.dur[i], alone, f"i_{v.ops[i]}")
        e = model.new_int_var(0, v.horizon, f"e_{v.ops[i]}")
        model.add(e >= v.start[i] + v.dur[i])  # a block lasts at least each of its ops (``block_ticks``)
        model.add(e == v.start[i] + v.dur[i]).only_enforce_if(alone)
        v.ends[i] = e
    for (i, j), (y, t) in v.pair_lits.items():
        model.add(v.ends[i] == v.start[i] + t).only_enforce_if(y)  # type: ignore[operator]
        model.add(v.ends[j] == v.start[i] + t).only_enforce_if(y)  # type: ignore[operator]
