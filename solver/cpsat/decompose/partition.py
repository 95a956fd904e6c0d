"""Stage partitions as a decision (docs/partition.md): a ``solver.partition.Partition``
(``even``, ``fixed`` or ``free``) solved as a ``stage_work`` of integers priced by a
``solver.pricing.LayerCosts``. The free one is solved exactly by enumeration
(``partition_enum``): splits visited in order of their bound, each pruned or searched with
its split fixed on a slice of the deadline; the free bound is the least over all splits.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Sequence

from pipetab.solver.partition import Partition, PartitionMode, check_layers, format_layers
from pipetab.solver.pricing import LayerCosts, Layers, even_layers, with_layers

from ..model.bounds import cap_violations
from ..model.objectives import analytic_lower_bound
from ..result import PhaseRecord, Result, SolveLog, Status, gap_of
from .partition_enum import enumerate_partitions, least_splits, quick_bound

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule
    from pipetab.solver.deadline import Deadline

    from ..params import CpSatConfig
    from ..problem import Problem


def partition_problem(shape: Problem, layer_costs: LayerCosts, layers: Layers) -> Problem:
    """The problem of ``shape`` with its stages holding ``layers`` layers."""
    return replace(shape, costs=layer_costs.costs(layers), stage_work=tuple(tuple(float(x) for x in w)
                                                                            for w in layers))


# ---- enumeration -----------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionSearch:
    """A partition search: ``result`` (its schedule's ``stage_work`` the chosen split, its bound
    the free problem's), the ``layers`` chosen, and one row per split visited or pruned."""

    result: Result
    layers: Layers | None
    rows: tuple[dict, ...] = ()
    enumerated: int = 0
    even: Result | None = None  # free: the even split's own search, the first visited


def relabel(result: Result, label: str, layers: Layers | None = None) -> Result:
    """``result`` with the stage-partition assumption replaced by ``label`` and its
    schedule carrying ``layers`` as its stage work (a registry start carries equal shares)."""
    assumptions = tuple(label if a.startswith("stage partition") else a for a in result.bound_assumptions)
    sched = result.schedule
    if sched is not None and layers is not None:
        sched = with_layers(sched, layers)
    return replace(result, bound_assumptions=assumptions, schedule=sched)


def _restamp(schedule: Schedule, layers: Layers) -> Schedule:
    """The same orders with another layer split (orders do not depend on it)."""
    return replace(with_layers(schedule, layers), name=f"{schedule.name}@{format_layers(layers)}")


def search_partition(shape: Problem, layer_costs: LayerCosts, partition: Partition, config: CpSatConfig,
                     run: Callable, known: Sequence[Schedule], deadline: Deadline) -> PartitionSearch:
    """``run`` (``api.search`` or ``api.bound``) on ``shape`` (placement fixed, costs
    replaced) with its partition even, fixed or free; ``api.solve_partition`` is the entry."""
    if shape.fixed_placement is None:
        raise ValueError("a partition search needs a fixed placement (linear, bidirectional, ...)")
    if shape.overlap_pairs and partition.mode is PartitionMode.FREE:
        raise ValueError("a free partition search bounds its splits with ops one at a time: overlap_pairs "
                         "needs an even or fixed partition")
    L = layer_costs.num_layers
    if partition.mode is not PartitionMode.FREE:
        layers = (even_layers(L, shape.num_stages) if partition.mode is PartitionMode.EVEN
                  else check_layers(partition.layers, L, shape.num_stages))  # type: ignore[arg-type]
        res = run(partition_problem(shape, layer_costs, layers), config, known, deadline=deadline)
        return PartitionSearch(relabel(res, partition.label(layers), layers), layers)
    return _FreeSplit(shape, layer_costs, config, run, known, deadline).solve()


class _FreeSplit:
    """The free partition's search (module docstring): its open splits (a heap of
    (bound, order, layers, times searched, last slice)), incumbent, rows and phases."""

    def __init__(self, shape: Problem, layer_costs: LayerCosts, config: CpSatConfig, run: Callable,
                 known: Sequence[Schedule], deadline: Deadline):
        self.shape, self.layer_costs, self.config, self.run = shape, layer_costs, config, run
        self.known, self.deadline, self.params = known, deadline, config.decompose
        self.heap: list = []
        self.best: Result | None = None
        self.best_layers: Layers | None = None
        self.rows: list[dict] = []
        self.phases: list[PhaseRecord] = []
        self.searched = 0

    def _sub(self, seconds: float, parts: int) -> Deadline:
        det = None if self.config.deterministic_time is None else self.config.deterministic_time / max(1, parts)
        return self.deadline.within(max(0.05, seconds), det)

    def solve(self) -> PartitionSearch:
        shape, lc, p = self.shape, self.layer_costs, self.params
        even = even_layers(lc.num_layers, shape.num_stages)
        first_s = max(p.min_slice_s, p.first_share * self.deadline.wall_left())
        first = self.run(partition_problem(shape, lc, even), self.config, self.known, deadline=self._sub(first_s, 1))
        self.best, self.best_layers = (first, even) if first.makespan is not None else (None, None)
        self._record(even, None, first, None)
        if first.status is not Status.INFEASIBLE and (first.lower_bound is None or self.best is None
                                                      or first.lower_bound < self.best.makespan):
            lb0 = first.lower_bound if first.lower_bound is not None else quick_bound(shape, lc, even)
            self.heap.append((lb0, -1, even, 1, first_s))
        seen, self.searched, enumerated, limit = {even}, 1, 0, p.max_candidates
        least = least_splits(shape, lc, p.least_splits, time.perf_counter() + p.least_share * self.deadline.wall_left(),
                             p.least_workers)
        self._push(least.splits, seen)
        while True:
            # enumerate below the incumbent; when an enumeration stops before the end and its
            # candidates are all settled, enumerate again below the new incumbent, twice as far
            enum = enumerate_partitions(shape, lc, self.best.makespan if self.best else math.inf, limit,  # type: ignore[arg-type]
                                        time.perf_counter() + p.enumeration_share * self.deadline.wall_left(),
                                        p.nodes_per_candidate)
            enumerated = max(enumerated, enum.enumerated)
            self._push(enum.candidates, seen)
            self._visit()
            if enum.rest_bound is None or self.heap or self.deadline.wall_left() < p.min_slice_s:
                break
            limit *= 2
        bounds = [e[0] for e in self.heap]
        if enum.rest_bound is not None:  # splits neither enumerated nor listed by least_splits
            bounds.append(max(enum.rest_bound, least.rest_bound or 0))
        return self._result(first, bounds, len(least.splits), replace(enum, enumerated=enumerated))

    def _push(self, splits, seen: set) -> None:
        for b, lay in splits:
            if lay not in seen:
                seen.add(lay)
                heapq.heappush(self.heap, (b, len(seen), lay, 0, 0.0))

    def _record(self, lay: Layers, quick, res: Result | None, visit: int | None) -> None:
        row = {"layers": format_layers(lay), "quick": quick}
        if res is not None:
            row.update(status=res.status, objective=res.makespan, bound=res.lower_bound)
            self.phases.append(PhaseRecord(f"partition {format_layers(lay)}", round(res.runtime_s, 3),
                                           tuple(res.log.solves()),
                                           f"{res.status}, {res.objective} {res.makespan}, bound {res.lower_bound}"))
        if visit is not None:
            row["visit"] = visit
        self.rows.append(row)

    def _visit(self) -> None:
        """Visit open partitions least bound first until the least bound reaches the
        incumbent (the heap is then emptied: all are pruned) or the time ends."""
        heap, min_slice = self.heap, self.params.min_slice_s
        while heap:
            inc = self.best.makespan if self.best else math.inf
            qb, i, lay, visits, last_s = heap[0]
            if qb >= inc:  # type: ignore[operator]
                heap.clear()
                break
            left = self.deadline.wall_left()
            if left < min_slice / 2:
                break
            heapq.heappop(heap)
            problem = partition_problem(self.shape, self.layer_costs, lay)
            if visits == 0:
                if cap_violations(problem, problem.fixed_placement):  # type: ignore[arg-type]
                    self.rows.append({"layers": format_layers(lay), "quick": qb, "status": Status.INFEASIBLE})
                    continue
                ab, _ = analytic_lower_bound(problem, problem.fixed_placement)
                if ab > qb:  # visit it again once its turn comes by the stronger bound
                    heapq.heappush(heap, (ab, i, lay, -1, 0.0))
                    continue
            open_n = sum(1 for e in heap if e[0] < inc) + 1
            slice_s = min(left, max(min_slice, 2 * last_s, left / open_n))
            seeds = list(self.known) + ([_restamp(self.best.schedule, lay)]
                                        if self.best and self.best.schedule is not None else [])
            res = self.run(problem, self.config, seeds, deadline=self._sub(slice_s, open_n))
            self.searched += visits <= 0
            self._record(lay, qb, res, max(1, visits + 1))
            if res.makespan is not None and (self.best is None or res.makespan < self.best.makespan):
                self.best, self.best_layers = res, lay
            if res.status not in (Status.INFEASIBLE, Status.OPTIMAL):
                nb = qb if res.lower_bound is None else max(qb, res.lower_bound)
                heapq.heappush(heap, (nb, i, lay, max(1, visits + 1), slice_s))

    def _result(self, first: Result, bounds: list, n_least: int, enum) -> PartitionSearch:
        label = (f"partition free: {n_least} split{'' if n_least == 1 else 's'} of least work-and-chain bound "
                 f"found by CP-SAT, {enum.enumerated} splits enumerated, {len(enum.candidates)} below the "
                 f"incumbent by their work bound, {self.searched} searched with the split fixed (least bound "
                 "first), the rest pruned by bound"
                 + ("" if enum.rest_bound is None else "; the enumeration stopped before the end, the rest "
                    "bounded by the least work-and-chain bound of any split (CP-SAT over the layer counts)"))
        runtime = time.perf_counter() - self.deadline.t0
        log = SolveLog(tuple(self.phases))
        if self.best is None:
            lb = min(bounds) if bounds else None
            status = (Status.INFEASIBLE if all(r.get("status") == Status.INFEASIBLE for r in self.rows)
                      else Status.UNKNOWN)
            res = replace(relabel(first, label), status=status, lower_bound=None if lb in (None, math.inf) else lb,
                          runtime_s=runtime, log=log)
            return PartitionSearch(res, None, tuple(self.rows), enum.enumerated, first)
        lb = min([*bounds, self.best.makespan])
        status = Status.OPTIMAL if lb >= self.best.makespan else Status.FEASIBLE  # type: ignore[operator]
        res = replace(relabel(self.best, label, self.best_layers), status=status, lower_bound=lb, runtime_s=runtime,
                      log=log, known={k: replace(v, gap=gap_of(v.makespan, lb) if v.fits else None)
                                      for k, v in first.known.items()})
        return PartitionSearch(res, self.best_layers, tuple(self.rows), enum.enumerated, first)
