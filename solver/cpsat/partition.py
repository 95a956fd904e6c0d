"""Stage partitions as a decision: how many of the model's layers each stage holds.

A partition gives every pipeline's stages layer counts (each >= 1, each pipeline's summing
to the model's layers); it is a ``stage_work`` of integers, so costs follow the layers
through the usual paths. ``Partition`` is ``even`` (``hardware.model.partition`` of equal
shares), ``fixed`` (a list per pipeline) or ``free`` (the solver chooses).

Costs of a partition come from a ``solver.pricing.LayerCosts``: ``IdealizedLayers``
(per-layer slots, the LM head and the embedding as extra slots on a pipeline's last and
first stage) or ``HardwareLayers`` (``hardware_costs`` of a schedule whose ``stage_work``
is the layer counts: op times, activation bytes, messages and persistent memory follow
the layers, the embedding on each pipeline's first stage, the LM head and loss on its
last).

The free partition is solved exactly by enumeration: partitions whose busiest device's work
(plus the forward and backward chains before it, ``quick_bound``) reaches the incumbent are
pruned while they are enumerated; the others are visited in order of that bound, each
pruned again by the model's analytic bound or searched with its partition fixed
(``search``/``bound``) on a share of the time; the incumbent's orders seed every later
partition (orders do not depend on the layer counts). The free problem's bound is the least
bound over all partitions: proven ones for those searched, analytic or quick ones for the
others, the incumbent for those pruned.
"""

from __future__ import annotations

import functools
import heapq
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.pricing import Layers, LayerCosts, even_layers, with_layers

from .bounds import analytic_lower_bound, cap_violations
from .config import CpSatConfig
from .problem import Problem
from .result import PhaseRecord, Result, gap_of
from .strategy import Clock

PARTITION_FORMS = "even, free, or layer counts per stage such as 8,8,8,8 (bidirectional: DOWN/UP, e.g. 9,8,8,7/7,8,8,9)"
# at most this many partitions are enumerated; past it the bound of the rest is the
# enumeration's bound of what is left (valid, weaker)
MAX_CANDIDATES = 50_000
# ... or after this many nodes of the enumeration tree per candidate allowed
NODES_PER_CANDIDATE = 20
# share of the time the first (even) partition gets before the others are enumerated
FIRST_SHARE = 0.25
# share of the time left the enumeration may take
ENUMERATION_SHARE = 0.2
# splits of least quick bound found by CP-SAT and searched first, and the share of the
# time left after the even split that finding them may take (``least_splits``)
LEAST_SPLITS = 8
LEAST_SHARE = 0.15
# least time a visited partition gets (seconds)
MIN_SLICE_S = 0.5


@dataclass(frozen=True)
class Partition:
    """``mode`` ``even``, ``free`` or ``fixed`` (``layers`` per pipeline and stage)."""

    mode: str = "even"
    layers: Layers | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("even", "free", "fixed"):
            raise ValueError(f"partition must be {PARTITION_FORMS}, got {self.mode!r}")
        if (self.layers is not None) != (self.mode == "fixed"):
            raise ValueError("a fixed partition needs its layer counts, even and free take none")

    @classmethod
    def parse(cls, text: str) -> "Partition":
        """``even``, ``free``, ``8,8,8,8`` or ``9,8,8,7/7,8,8,9`` (one list per pipeline)."""
        t = str(text).strip().lower()
        if t in ("even", "free"):
            return cls(t)
        try:
            layers = tuple(tuple(int(x) for x in part.split(",")) for part in t.split("/"))
        except ValueError:
            raise ValueError(f"partition must be {PARTITION_FORMS}, got {text!r}") from None
        return cls("fixed", layers)

    def label(self, layers: Layers | None = None) -> str:
        if self.mode == "free":
            return "partition free"
        return f"partition fixed: {format_layers(layers or self.layers)}"


def format_layers(layers: Layers) -> str:
    return "/".join(",".join(str(n) for n in row) for row in layers)


def check_layers(layers: Layers, num_layers: int, num_stages: Sequence[int]) -> Layers:
    """``layers`` (one list for every pipeline, or one per pipeline) when each pipeline's
    list has one integer >= 1 per stage summing to ``num_layers``; ``ValueError`` naming
    what is allowed otherwise."""
    rows = tuple(tuple(r) for r in layers)
    if len(rows) == 1 and len(num_stages) > 1:
        rows = rows * len(num_stages)
    if len(rows) != len(num_stages):
        raise ValueError(f"partition gives {len(rows)} lists, the placement has {len(num_stages)} pipelines")
    for p, (row, n) in enumerate(zip(rows, num_stages)):
        where = f" of pipeline {p}" if len(num_stages) > 1 else ""
        if len(row) != n:
            raise ValueError(f"partition{where} lists {len(row)} stages, the placement has {n}")
        if any(isinstance(x, bool) or not isinstance(x, int) for x in row):
            raise ValueError(f"partition{where} must list whole layer counts, got {list(row)}")
        if min(row) < 1:
            raise ValueError(f"partition{where} gives a stage {min(row)} layers; every stage needs >= 1")
        if sum(row) != num_layers:
            raise ValueError(f"partition{where} sums to {sum(row)} layers, the model has {num_layers}")
    return rows


def shape_schedule(problem: Problem, stage_work: Layers | None = None) -> Schedule:
    """A schedule of the problem's shape (one microbatch at a time on a placement of it;
    ``stage_work`` if given, else the problem's) for costing its stages on hardware."""
    placement = problem.fixed_placement or Placement(
        tuple(tuple(s % problem.num_devices for s in range(n)) for n in problem.num_stages), problem.num_devices)
    orders = [[] for _ in range(problem.num_devices)]
    for m, p in enumerate(problem.microbatch2pipeline):
        n = problem.num_stages[p]
        chain = [Op(Kind.F, p, s, m) for s in range(n)] + [Op(Kind.B, p, s, m) for s in reversed(range(n))]
        if problem.split_backward:
            chain += [Op(Kind.W, p, s, m) for s in reversed(range(n))]
        for op in chain:
            orders[placement.device(op.pipeline, op.stage)].append(op)
    sched = problem.schedule("shape", placement, orders)
    return sched if stage_work is None else with_layers(sched, stage_work)


def partition_problem(shape: Problem, layer_costs: LayerCosts, layers: Layers) -> Problem:
    """The problem of ``shape`` with its stages holding ``layers`` layers."""
    return replace(shape, costs=layer_costs.costs(layers), stage_work=tuple(tuple(float(x) for x in w)
                                                                            for w in layers))


# ---- enumeration -----------------------------------------------------------------------------
def _counts(shape: Problem) -> list[int]:
    out = [0] * shape.num_pipelines
    for p in shape.microbatch2pipeline:
        out[p] += 1
    return out


def quick_bound(shape: Problem, layer_costs: LayerCosts, layers: Layers) -> int:
    """A lower bound of every schedule of the split ``layers`` on ``shape``'s fixed
    placement: for each device, and for each stage's ops alone, their work plus the least
    forward chain before the first and the least backward chain after the last (0 with a
    split backward: W ends a chain) — messages and optimizer left out."""
    placement = shape.fixed_placement
    counts = _counts(shape)
    work = [0] * shape.num_devices
    heads: dict[int, int] = {}
    tails: dict[int, int] = {}
    one_stage = 0  # the same bound for each stage's ops alone
    for p, row in enumerate(layers):
        fsum = bsum = 0
        for s, n in enumerate(row):
            d = placement.device(p, s)
            mine = counts[p] * sum(layer_costs.op_ticks(k, p, s, n) for k in shape.kinds)
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
    """Splits by least ``quick_bound`` (``least_splits``): ``splits`` as (bound, layers),
    least first, and ``rest_bound``: a bound of every split not listed (None: none
    proven)."""

    splits: tuple[tuple[int, Layers], ...]
    rest_bound: float | None  # math.inf: every split is listed


def least_splits(shape: Problem, layer_costs: LayerCosts, count: int, deadline: float) -> LeastSplits:
    """Up to ``count`` splits of least ``quick_bound`` until ``deadline``
    (``time.perf_counter``): ``_quick_bound_model`` solved, the split found forbidden,
    solved again. The last solve's bound holds for every split not listed, however few
    the enumeration reaches (docs/partition.md)."""
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
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = left
        solver.parameters.num_workers = 2
        status = solver.solve(m)
        if status == cp_model.INFEASIBLE:
            return LeastSplits(tuple(found), math.inf)  # every split is listed
        b = solver.best_objective_bound
        if math.isfinite(b) and b > 0:
            rest = max(rest or 0, int(math.ceil(b - 1e-9)))
        if status != cp_model.OPTIMAL:
            break
        lay = tuple(tuple(int(solver.value(v)) for v in row) for row in layer_vars)
        found.append((int(round(solver.objective_value)), lay))
        m.add_forbidden_assignments(flat, [tuple(x for row in lay for x in row)])
    return LeastSplits(tuple(found), rest)


def _quick_bound_model(shape: Problem, layer_costs: LayerCosts, deadline: float):
    """A CP-SAT model minimizing ``quick_bound`` over all splits: the layer counts as
    integers (>= 1, each pipeline's summing to the model's), op times looked up per count.
    Returns (model, layer count variables per pipeline), or None past ``deadline``."""
    placement = shape.fixed_placement
    counts = _counts(shape)
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
        fsum = bsum = 0
        for s in range(S):
            if time.perf_counter() > deadline:
                return None
            d = placement.device(p, s)
            index = m.new_int_var(0, hi - 1, f"i{p}_{s}")
            m.add(index == n[s] - 1)
            ticks = {k: [layer_costs.op_ticks(k, p, s, c) for c in range(1, hi + 1)] for k in shape.kinds}
            mine = lookup(f"w{p}_{s}", [counts[p] * sum(t[c] for t in ticks.values()) for c in range(hi)], index)
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
    """Partitions whose quick bound is below a threshold (``candidates``: (bound,
    layers), least first), how many were enumerated, and ``rest_bound``: a bound of the
    partitions not enumerated when ``MAX_CANDIDATES`` stopped it (None: all were)."""

    candidates: tuple[tuple[int, Layers], ...]
    enumerated: int
    rest_bound: int | None


def enumerate_partitions(shape: Problem, layer_costs: LayerCosts, threshold: float = math.inf,
                         limit: int = MAX_CANDIDATES, deadline: float = math.inf) -> Enumeration:
    """Every split (compositions of the layers per pipeline; bidirectional: one per
    direction) whose quick bound is below ``threshold``, generated stage by stage in
    device order: a branch is cut as soon as a device's work reaches the threshold. Stops
    after ``limit`` candidates, ``NODES_PER_CANDIDATE * limit`` nodes or at
    ``deadline`` (``time.perf_counter``), bounding the rest (``Enumeration.rest_bound``)."""
    placement = shape.fixed_placement
    L, counts = layer_costs.num_layers, _counts(shape)
    keys = sorted(shape.stages, key=lambda k: (placement.device(*k), k))
    left_after = {}  # stages of each pipeline still to assign after key i
    seen = [0] * shape.num_pipelines
    for i in reversed(range(len(keys))):
        p = keys[i][0]
        left_after[i] = seen[p]
        seen[p] += 1
    # a device's work from one of its stages of n layers (monotone in n)
    memo: dict = {}

    def work(p: int, s: int, n: int) -> int:
        key = (p, s, n)
        if key not in memo:
            memo[key] = counts[p] * sum(layer_costs.op_ticks(k, p, s, n) for k in shape.kinds)
        return memo[key]

    # the most layers stage (p, s) can take alone on its device; per key, what the
    # pipeline's stages after it can take at most (a branch that leaves more is cut)
    most = {}
    for p, s in keys:
        hi = L - shape.num_stages[p] + 1
        most[(p, s)] = next((n - 1 for n in range(1, hi + 1) if work(p, s, n) >= threshold), hi)
    room_after = {}
    room = [0] * shape.num_pipelines
    for i in reversed(range(len(keys))):
        p = keys[i][0]
        room_after[i] = room[p]
        room[p] += most[keys[i]]
    layers = [[0] * n for n in shape.num_stages]
    remaining = [L] * shape.num_pipelines
    load = [0] * shape.num_devices
    out: list[tuple[int, Layers]] = []
    enumerated = 0
    nodes = [0]
    stopped = False
    # the stages still open after key i (per pipeline) and the devices they sit on
    open_stages = [{p: tuple(s for q, s in keys[i:] if q == p) for p in range(shape.num_pipelines)}
                   for i in range(len(keys) + 1)]
    open_devices = [sorted({placement.device(*k) for k in keys[i:]}) for i in range(len(keys) + 1)]

    @functools.lru_cache(maxsize=None)
    def least_rest(p: int, stages: tuple[int, ...], n: int) -> float:
        """The least work of ``n`` layers over ``stages`` of pipeline p, >= 1 layer each."""
        if not stages:
            return 0 if n == 0 else math.inf
        if len(stages) == 1:
            return work(p, stages[0], n) if n >= 1 else math.inf
        return min((work(p, stages[0], k) + least_rest(p, stages[1:], n - k)
                    for k in range(1, n - len(stages) + 2)), default=math.inf)

    def doomed(i: int) -> bool:
        """Averaging cut: the devices with stages still open end with their load so far
        plus at least the least work of the layers left; when that reaches the threshold
        on each of them, one device's work (a part of every quick bound) reaches it."""
        devs = open_devices[i]
        rest = sum(least_rest(p, st, remaining[p]) for p, st in open_stages[i].items() if st)
        return sum(load[d] for d in devs) + rest >= len(devs) * threshold

    def rec(i: int) -> None:
        nonlocal enumerated, stopped
        nodes[0] += 1
        if stopped or len(out) >= limit or nodes[0] >= NODES_PER_CANDIDATE * limit or (
                nodes[0] % 4096 == 0 and time.perf_counter() > deadline):
            stopped = True
            return
        if 0 < i < len(keys) and doomed(i):
            return
        if i == len(keys):
            enumerated += 1
            lay = tuple(tuple(r) for r in layers)
            b = quick_bound(shape, layer_costs, lay)
            if b < threshold:
                out.append((b, lay))
            return
        p, s = keys[i]
        d = placement.device(p, s)
        hi = remaining[p] - left_after[i]
        lo = hi if left_after[i] == 0 else max(1, remaining[p] - room_after[i])
        while hi >= lo and load[d] + work(p, s, hi) >= threshold:
            hi -= 1  # work grows with n
        ideal = remaining[p] / (left_after[i] + 1)
        for n in sorted(range(lo, hi + 1), key=lambda n: abs(n - ideal)):  # balanced first
            w = work(p, s, n)
            layers[p][s] = n
            remaining[p] -= n
            load[d] += w
            rec(i + 1)
            load[d] -= w
            remaining[p] += n

    rec(0)
    rest = None
    if stopped:
        # what was not enumerated: some device does at least the average of the least
        # total work of any split (per pipeline by dynamic programming over its stages)
        total = sum(_least_work(shape.num_stages[p], L, lambda s, n, p=p: work(p, s, n))
                    for p in range(shape.num_pipelines))
        rest = max(1, -(-total // shape.num_devices))
    out.sort(key=lambda x: x[0])
    return Enumeration(tuple(out), enumerated, rest)


def _least_work(num_stages: int, num_layers: int, work: Callable[[int, int], int]) -> int:
    """The least sum of ``work(s, n_s)`` over splits of ``num_layers`` into ``num_stages``
    stages of >= 1 layer each."""
    best = {0: 0}  # layers used so far -> least work
    for s in range(num_stages):
        left = num_stages - s - 1
        nxt: dict[int, int] = {}
        for used, w in best.items():
            for n in range(1, num_layers - used - left + 1):
                if left == 0 and used + n != num_layers:
                    continue
                v = w + work(s, n)
                if v < nxt.get(used + n, math.inf):
                    nxt[used + n] = v
        best = nxt
    return best[num_layers]


# ---- search ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionSearch:
    """The result of a partition search: ``result`` (its schedule's ``stage_work`` is the
    chosen split, its bound the free problem's), ``layers`` chosen, and one row per
    partition visited or pruned (``rows``: layers, quick and analytic bounds, status,
    objective, bound)."""

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
        sched = replace(sched, stage_work=tuple(tuple(float(x) for x in w) for w in layers))
    return replace(result, bound_assumptions=assumptions, schedule=sched)


def _restamp(schedule: Schedule, layers: Layers) -> Schedule:
    """The same orders with another layer split (orders do not depend on it)."""
    return replace(schedule, name=f"{schedule.name}@{format_layers(layers)}",
                   stage_work=tuple(tuple(float(x) for x in w) for w in layers))


def solve_partition(shape: Problem, layer_costs: LayerCosts, partition: Partition,
                    config: CpSatConfig | None = None, mode: str = "search",
                    known: Sequence[Schedule] = ()) -> PartitionSearch:
    """``search`` (or ``bound``) of ``shape`` — a problem with a fixed placement, its
    costs replaced — with its stage partition even, fixed or free (module docstring)."""
    from .modes import bound, search

    config = config or CpSatConfig()
    if shape.fixed_placement is None:
        raise ValueError("a partition search needs a fixed placement (linear, bidirectional, ...)")
    run = search if mode == "search" else bound
    L = layer_costs.num_layers
    if partition.mode != "free":
        layers = (even_layers(L, shape.num_stages) if partition.mode == "even"
                  else check_layers(partition.layers, L, shape.num_stages))
        res = run(partition_problem(shape, layer_costs, layers), config, known)
        return PartitionSearch(relabel(res, partition.label(layers), layers), layers)
    return _solve_free(shape, layer_costs, config, run, known)


def _solve_free(shape, layer_costs, config, run, known) -> PartitionSearch:
    clock = Clock(config)
    t0 = clock.t0
    L = layer_costs.num_layers
    even = even_layers(L, shape.num_stages)
    first_s = max(MIN_SLICE_S, FIRST_SHARE * clock.wall_left())
    first = run(partition_problem(shape, layer_costs, even), _sliced(config, first_s, 1), known)
    best, best_layers = (first, even) if first.makespan is not None else (None, None)
    rows = [_row(even, None, first)]
    phases = [PhaseRecord(f"partition {format_layers(even)}", round(first.runtime_s, 3),
                          tuple(r for ph in first.phases for r in ph.solves), _note(first))]
    # open partitions, least bound first: (bound, order, layers, searched before, slice)
    heap: list = []
    if first.status != "infeasible" and (first.lower_bound is None or best is None
                                         or first.lower_bound < best.makespan):
        lb0 = first.lower_bound if first.lower_bound is not None else quick_bound(shape, layer_costs, even)
        heap.append((lb0, -1, even, 1, first_s))
    seen, searched, enumerated, limit = {even}, 1, 0, MAX_CANDIDATES
    least = least_splits(shape, layer_costs, LEAST_SPLITS, time.perf_counter() + LEAST_SHARE * clock.wall_left())
    for b, lay in least.splits:
        if lay not in seen:
            seen.add(lay)
            heapq.heappush(heap, (b, len(seen), lay, 0, 0.0))
    while True:
        # enumerate below the incumbent; when an enumeration stops before the end and its
        # candidates are all settled, enumerate again below the new incumbent, twice as far
        enum = enumerate_partitions(shape, layer_costs, best.makespan if best else math.inf, limit,
                                    deadline=time.perf_counter() + ENUMERATION_SHARE * clock.wall_left())
        enumerated = max(enumerated, enum.enumerated)
        for b, lay in enum.candidates:
            if lay not in seen:
                seen.add(lay)
                heapq.heappush(heap, (b, len(seen), lay, 0, 0.0))
        best, best_layers, searched = _visit(shape, layer_costs, config, run, known, clock, heap, best,
                                             best_layers, searched, rows, phases)
        if enum.rest_bound is None or heap or clock.wall_left() < MIN_SLICE_S:
            break
        limit *= 2
    bounds = [e[0] for e in heap]
    if enum.rest_bound is not None:  # splits neither enumerated nor listed by least_splits
        bounds.append(max(enum.rest_bound, least.rest_bound or 0))
    enum = replace(enum, enumerated=enumerated)
    n_least = len(least.splits)
    label = (f"partition free: {n_least} split{'' if n_least == 1 else 's'} of least work-and-chain bound found "
             "by CP-SAT, "
             f"{enum.enumerated} splits enumerated, {len(enum.candidates)} below the incumbent "
             f"by their work bound, {searched} searched with the split fixed (least bound first), the rest pruned by "
             "bound"
             + ("" if enum.rest_bound is None else "; the enumeration stopped before the end, the rest bounded "
                "by the least work-and-chain bound of any split (CP-SAT over the layer counts)"))
    if best is None:
        lb = min(bounds) if bounds else None
        status = "infeasible" if all(r.get("status") == "infeasible" for r in rows) else "unknown"
        res = replace(relabel(first, label), status=status, lower_bound=None if lb in (None, math.inf) else lb,
                      runtime_s=time.perf_counter() - t0, phases=tuple(phases))
        return PartitionSearch(res, None, tuple(rows), enum.enumerated, first)
    lb = min(bounds + [best.makespan])
    status = "optimal" if lb >= best.makespan else "feasible"
    res = replace(relabel(best, label, best_layers), status=status, lower_bound=lb, runtime_s=time.perf_counter() - t0,
                  phases=tuple(phases), known={k: replace(v, gap=gap_of(v.makespan, lb) if v.fits else None)
                                               for k, v in first.known.items()})
    return PartitionSearch(res, best_layers, tuple(rows), enum.enumerated, first)


def _visit(shape, layer_costs, config, run, known, clock, heap, best, best_layers, searched, rows, phases):
    """Visit open partitions least bound first until the least bound reaches the incumbent
    (the heap is then emptied: all are pruned) or the time ends; returns the incumbent,
    its layers and the count of splits searched."""
    while heap:
        inc = best.makespan if best else math.inf
        qb, i, lay, visits, last_s = heap[0]
        if qb >= inc:
            heap.clear()
            break
        left = clock.wall_left()
        if left < MIN_SLICE_S / 2:
            break
        heapq.heappop(heap)
        problem = partition_problem(shape, layer_costs, lay)
        if visits == 0:
            if cap_violations(problem, problem.fixed_placement):
                rows.append({**_row(lay, qb, None), "status": "infeasible"})
                continue
            ab, _ = analytic_lower_bound(problem, problem.fixed_placement)
            if ab > qb:  # visit it again once its turn comes by the stronger bound
                heapq.heappush(heap, (ab, i, lay, -1, 0.0))
                continue
        open_n = sum(1 for e in heap if e[0] < inc) + 1
        slice_s = min(left, max(MIN_SLICE_S, 2 * last_s, left / open_n))
        seeds = list(known) + ([_restamp(best.schedule, lay)] if best and best.schedule is not None else [])
        res = run(problem, _sliced(config, slice_s, max(1, open_n)), seeds)
        searched += visits <= 0
        rows.append({**_row(lay, qb, res), "visit": max(1, visits + 1)})
        phases.append(PhaseRecord(f"partition {format_layers(lay)}", round(res.runtime_s, 3),
                                  tuple(r for ph in res.phases for r in ph.solves), _note(res)))
        if res.makespan is not None and (best is None or res.makespan < best.makespan):
            best, best_layers = res, lay
        if res.status != "infeasible" and res.status != "optimal":
            nb = qb if res.lower_bound is None else max(qb, res.lower_bound)
            heapq.heappush(heap, (nb, i, lay, max(1, visits + 1), slice_s))
    return best, best_layers, searched


def _sliced(config: CpSatConfig, seconds: float, parts: int) -> CpSatConfig:
    det = None if config.deterministic_time is None else config.deterministic_time / max(1, parts)
    return config.replace(time_limit_s=max(0.05, seconds), deterministic_time=det)


def _row(layers: Layers, quick, res: Result | None) -> dict:
    row = {"layers": format_layers(layers), "quick": quick}
    if res is not None:
        row.update(status=res.status, objective=res.makespan, bound=res.lower_bound)
    return row


def _note(res: Result) -> str:
    return f"{res.status}, {res.objective} {res.makespan}, bound {res.lower_bound}"
