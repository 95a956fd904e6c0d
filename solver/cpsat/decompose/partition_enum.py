"""The stage partition's search space: ``quick_bound`` (a bound of any schedule of one
split), ``least_splits`` (the splits of least quick bound by a small CP-SAT model, and a
bound of every other) and ``enumerate_partitions`` (every split below a threshold).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind

from ..engine import SolverSetup, run_solver
from ..params import DecomposeParams

if TYPE_CHECKING:
    from pipetab.solver.pricing import LayerCosts, Layers

    from ..problem import Problem

_DEFAULTS = DecomposeParams()


def _stage_work(shape: Problem, layer_costs: LayerCosts, p: int, s: int, n: int) -> int:
    """A device's work from stage (p, s) holding n layers (monotone in n)."""
    return shape.pipeline_counts.get(p, 0) * sum(layer_costs.op_ticks(k, p, s, n) for k in shape.kinds)


def quick_bound(shape: Problem, layer_costs: LayerCosts, layers: Layers) -> int:
    """A bound of every schedule of the split ``layers`` on ``shape``'s placement: per device
    and per stage alone, the work plus the least forward chain before and backward chain after
    (0 with a split backward) — messages and optimizer left out."""
    placement = shape.placed
    work = [0] * shape.num_devices
    heads: dict[int, int] = {}
    tails: dict[int, int] = {}
    one_stage = 0  # the same bound for each stage's ops alone
    for p, row in enumerate(layers):
        fsum = bsum = 0
        for s, n in enumerate(row):
            d = placement.device(p, s)
            mine = _stage_work(shape, layer_costs, p, s, n)
            tail = 0 if shape.split_backward else bsum
            work[d] += mine
            heads[d] = min(heads.get(d, fsum), fsum)
            tails[d] = min(tails.get(d, tail), tail)
            one_stage = max(one_stage, fsum + mine + tail)
            fsum += layer_costs.op_ticks(Kind.F, p, s, n)
            bsum += layer_costs.op_ticks(Kind.B, p, s, n)
    return max(one_stage, max(w + heads.get(d, 0) + tails.get(d, 0) for d, w in enumerate(work)))


@dataclass(frozen=True)
class LeastSplits:
    """``splits`` (bound, layers), least first; ``rest_bound``: bound of every other (None: none)."""

    splits: tuple[tuple[int, Layers], ...]
    rest_bound: float | None  # math.inf: every split is listed


def least_splits(shape: Problem, layer_costs: LayerCosts, count: int, deadline: float,
                 workers: int = DecomposeParams.least_workers) -> LeastSplits:
    """Up to ``count`` splits of least ``quick_bound`` until ``deadline`` (perf_counter):
    ``_quick_bound_model`` on ``workers`` threads, each split found forbidden and solved again;
    the last solve's bound holds for every split not listed (docs/partition.md)."""
    built = _quick_bound_model(shape, layer_costs, deadline)
    if built is None:
        return LeastSplits((), None)
    m, layer_vars = built
    flat = [v for row in layer_vars for v in row]
    found: list[tuple[int, Layers]] = []
    rest: int | None = None
    while len(found) < count:
        left = deadline - time.perf_counter()
        if left < 0.05:
            break
        done = run_solver(m, SolverSetup(left, workers=workers))
        solver, status = done.solver, done.code
        if status == cp_model.INFEASIBLE:
            return LeastSplits(tuple(found), math.inf)  # every split is listed
        b = solver.best_objective_bound
        if math.isfinite(b) and b > 0:
            rest = max(rest or 0, math.ceil(b - 1e-9))
        if status != cp_model.OPTIMAL:
            break
        lay = tuple(tuple(int(solver.value(v)) for v in row) for row in layer_vars)
        found.append((round(solver.objective_value), lay))
        m.add_forbidden_assignments(flat, [tuple(x for row in lay for x in row)])
    return LeastSplits(tuple(found), rest)


def _quick_bound_model(shape: Problem, layer_costs: LayerCosts, deadline: float):
    """A CP-SAT model minimizing ``quick_bound`` over all splits (layer counts >= 1 summing to
    the model's, op times looked up per count): (model, count variables per pipeline), or None
    past ``deadline``."""
    placement = shape.placed
    count = shape.pipeline_counts
    L = layer_costs.num_layers
    m = cp_model.CpModel()
    loads: dict[int, list] = {}
    heads: dict[int, list] = {}
    tails: dict[int, list] = {}
    z = m.new_int_var(0, 1 << 40, "z")
    layer_vars: list[list[cp_model.IntVar]] = []

    def lookup(name: str, table: list[int], index) -> cp_model.IntVar:
        v = m.new_int_var(min(table), max(table), name)
        m.add_element(index, table, v)
        return v

    for p, S in enumerate(shape.num_stages):
        hi = L - S + 1
        n = [m.new_int_var(1, hi, f"n{p}_{s}") for s in range(S)]
        layer_vars.append(n)
        m.add(sum(n) == L)
        fsum: cp_model.LinearExpr | int = 0
        bsum: cp_model.LinearExpr | int = 0
        for s in range(S):
            if time.perf_counter() > deadline:
                return None
            d = placement.device(p, s)
            index = m.new_int_var(0, hi - 1, f"i{p}_{s}")
            m.add(index == n[s] - 1)
            ticks = {k: [layer_costs.op_ticks(k, p, s, c) for c in range(1, hi + 1)] for k in shape.kinds}
            mine = lookup(f"w{p}_{s}", [count.get(p, 0) * sum(t[c] for t in ticks.values()) for c in range(hi)], index)
            tail = 0 if shape.split_backward else bsum
            loads.setdefault(d, []).append(mine)
            heads.setdefault(d, []).append(fsum)
            tails.setdefault(d, []).append(tail)
            m.add(z >= fsum + mine + tail)
            fsum = fsum + lookup(f"f{p}_{s}", ticks[Kind.F], index)
            bsum = bsum + lookup(f"b{p}_{s}", ticks[Kind.B], index)
    for d, ws in loads.items():
        ends = []
        for name, exprs in (("h", heads[d]), ("t", tails[d])):
            v = m.new_int_var(0, 1 << 40, f"{name}{d}")
            m.add_min_equality(v, exprs)
            ends.append(v)
        m.add(z >= sum(ws) + ends[0] + ends[1])
    m.minimize(z)
    return m, layer_vars


@dataclass(frozen=True)
class Enumeration:
    """Splits of quick bound below a threshold (``candidates``: (bound, layers), least first),
    how many were enumerated, and ``rest_bound`` of those not enumerated (None: all were)."""

    candidates: tuple[tuple[int, Layers], ...]
    enumerated: int
    rest_bound: int | None


def enumerate_partitions(shape: Problem, layer_costs: LayerCosts, threshold: float = math.inf,
                         limit: int = _DEFAULTS.max_candidates, deadline: float = math.inf,
                         nodes_per_candidate: int = _DEFAULTS.nodes_per_candidate) -> Enumeration:
    """Every split (compositions per pipeline) of quick bound below ``threshold``, stage by
    stage in device order, a branch cut once a device's work reaches it; stops after ``limit``
    candidates, ``nodes_per_candidate * limit`` nodes or ``deadline``, bounding the rest."""
    walk = _Walk(shape, layer_costs, threshold, limit, deadline, nodes_per_candidate)
    walk.rec(0)
    rest = None
    if walk.stopped:
        # what was not enumerated: some device does at least the average of the least
        # total work of any split (per pipeline over all its stages)
        total = int(sum(walk.least_rest(p, tuple(range(n)), layer_costs.num_layers)
                        for p, n in enumerate(shape.num_stages)))
        rest = max(1, -(-total // shape.num_devices))
    walk.out.sort(key=lambda x: x[0])
    return Enumeration(tuple(walk.out), walk.enumerated, rest)


class _Walk:
    """``enumerate_partitions``'s tree: stages in device order, balanced layer counts first."""

    def __init__(self, shape: Problem, layer_costs: LayerCosts, threshold: float, limit: int, deadline: float,
                 nodes_per_candidate: int):
        self.shape, self.layer_costs, self.threshold = shape, layer_costs, threshold
        self.limit, self.deadline, self.max_nodes = limit, deadline, nodes_per_candidate * limit
        self.placement = placement = shape.placed
        L = layer_costs.num_layers
        self.keys = keys = sorted(shape.stages, key=lambda k: (placement.device(*k), k))  # type: ignore[union-attr]
        self.left_after = {}  # stages of each pipeline still to assign after key i
        seen = [0] * shape.num_pipelines
        for i in reversed(range(len(keys))):
            self.left_after[i] = seen[keys[i][0]]
            seen[keys[i][0]] += 1
        self.memo: dict = {}
        # the most layers stage (p, s) can take alone on its device; per key, what the
        # pipeline's stages after it can take at most (a branch that leaves more is cut)
        most = {}
        for p, s in keys:
            hi = L - shape.num_stages[p] + 1
            most[(p, s)] = next((n - 1 for n in range(1, hi + 1) if self.work(p, s, n) >= threshold), hi)
        self.room_after = {}
        room = [0] * shape.num_pipelines
        for i in reversed(range(len(keys))):
            self.room_after[i] = room[keys[i][0]]
            room[keys[i][0]] += most[keys[i]]
        self.layers = [[0] * n for n in shape.num_stages]
        self.remaining = [L] * shape.num_pipelines
        self.load = [0] * shape.num_devices
        self.out: list[tuple[int, Layers]] = []
        self.enumerated = self.nodes = 0
        self.stopped = False
        # the stages still open after key i (per pipeline) and the devices they sit on
        self.open_stages = [{p: tuple(s for q, s in keys[i:] if q == p) for p in range(shape.num_pipelines)}
                            for i in range(len(keys) + 1)]
        self.open_devices = [sorted({placement.device(*k) for k in keys[i:]})  # type: ignore[union-attr]
                             for i in range(len(keys) + 1)]
        self.least_rest = functools.lru_cache(maxsize=None)(self._least_rest)

    def work(self, p: int, s: int, n: int) -> int:
        key = (p, s, n)
        if key not in self.memo:
            self.memo[key] = _stage_work(self.shape, self.layer_costs, p, s, n)
        return self.memo[key]

    def _least_rest(self, p: int, stages: tuple[int, ...], n: int) -> float:
        """The least work of ``n`` layers over ``stages`` of pipeline p, >= 1 layer each."""
        if not stages:
            return 0 if n == 0 else math.inf
        if len(stages) == 1:
            return self.work(p, stages[0], n) if n >= 1 else math.inf
        return min((self.work(p, stages[0], k) + self.least_rest(p, stages[1:], n - k)
                    for k in range(1, n - len(stages) + 2)), default=math.inf)

    def doomed(self, i: int) -> bool:
        """Averaging cut: the open devices end with their load plus at least the least work left;
        when that reaches the threshold on each, one device's work (part of every bound) does."""
        devs = self.open_devices[i]
        rest = sum(self.least_rest(p, st, self.remaining[p]) for p, st in self.open_stages[i].items() if st)
        return sum(self.load[d] for d in devs) + rest >= len(devs) * self.threshold

    def rec(self, i: int) -> None:
        self.nodes += 1
        if self.stopped or len(self.out) >= self.limit or self.nodes >= self.max_nodes or (
                self.nodes % 4096 == 0 and time.perf_counter() > self.deadline):
            self.stopped = True
            return
        if 0 < i < len(self.keys) and self.doomed(i):
            return
        if i == len(self.keys):
            self.enumerated += 1
            lay = tuple(tuple(r) for r in self.layers)
            b = quick_bound(self.shape, self.layer_costs, lay)
            if b < self.threshold:
                self.out.append((b, lay))
            return
        p, s = self.keys[i]
        d = self.placement.device(p, s)  # type: ignore[union-attr]
        hi = self.remaining[p] - self.left_after[i]
        lo = hi if self.left_after[i] == 0 else max(1, self.remaining[p] - self.room_after[i])
        while hi >= lo and self.load[d] + self.work(p, s, hi) >= self.threshold:
            hi -= 1  # work grows with n
        ideal = self.remaining[p] / (self.left_after[i] + 1)
        for n in sorted(range(lo, hi + 1), key=lambda n: abs(n - ideal)):  # balanced first
            w = self.work(p, s, n)
            self.layers[p][s] = n
            self.remaining[p] -= n
            self.load[d] += w
            self.rec(i + 1)
            self.load[d] -= w
            self.remaining[p] += n

