"""Periodic schedules, solver-free (docs/cpsat.md, "The cyclic model"): a **kernel** is a block
of k template microbatches whose ops start at given times, repeated every ``period``
(microbatch j + q k runs each op q periods after j); its check, least period and expansion.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from pipetab.schedules.arrays import KIND_CODES, OpArrays
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Schedule
from pipetab.solver.simulate import simulate

from .pairing import block_ticks, device_savings
from .variables import heads_tails, min_lag, predecessor

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..problem import Problem

ChainKey = tuple[Kind, int, int]  # (kind, pipeline, stage): one op of every microbatch


def pattern_period(problem: Problem) -> int:
    """The least n with microbatch m on microbatch m mod n's pipeline (Chimera's split: S)."""
    mb2p = problem.microbatch2pipeline
    return next(n for n in range(1, len(mb2p) + 1) if all(mb2p[m] == mb2p[m % n] for m in range(n, len(mb2p))))


def pipeline_mix(problem: Problem) -> tuple[int, ...] | None:
    """The shortest pipeline sequence that, repeated, gives each pipeline its share of
    microbatches spread evenly (bidirectional with equal halves: 0, 1), where shorter than
    ``pattern_period``; else None. The problem in this mix (``mixed_twin``) is the same problem
    relabelled (a pipeline's microbatches are identical), with smaller blocks."""
    if problem.blocks:  # fixed blocks name microbatches
        return None
    counts = problem.pipeline_counts
    g = math.gcd(*counts.values())
    unit = {p: n // g for p, n in counts.items()}
    if sum(unit.values()) >= pattern_period(problem):
        return None
    spread = sorted(((i + 0.5) / u, p) for p, u in unit.items() for i in range(u))
    return tuple(p for _, p in spread)


def mixed_twin(problem: Problem) -> Problem | None:
    """The problem with its microbatches' pipelines in ``pipeline_mix`` (None where there
    is none): its schedules are the problem's, relabelled (``relabelled``)."""
    mix = pipeline_mix(problem)
    return None if mix is None else replace(problem, microbatch2pipeline=mix * (problem.num_microbatches // len(mix)))


def relabelled(schedule: Schedule, labels: Sequence[int]) -> Schedule:
    """``schedule`` with microbatch m on pipeline ``labels[m]`` (each pipeline's r-th stays r-th)."""
    src, dst = np.asarray(schedule.microbatch2pipeline), np.asarray(labels)
    mapping = np.empty(len(src), np.int64)
    for p in np.unique(src):
        here, there = np.flatnonzero(src == p), np.flatnonzero(dst == p)
        if len(here) != len(there):
            raise ValueError(f"pipeline {p} has {len(here)} microbatches in the schedule and {len(there)} in labels")
        mapping[here] = there
    if len(dst) != len(src):
        raise ValueError(f"labels name {len(dst)} microbatches, the schedule has {len(src)}")
    ops = schedule.ops
    renamed = OpArrays(ops.kind, ops.pipeline, ops.stage, mapping[ops.microbatch])
    blocks = tuple(tuple(op._replace(microbatch=int(mapping[op.microbatch])) for op in b) for b in schedule.blocks)
    return Schedule.from_arrays(schedule.name, schedule.placement, tuple(int(p) for p in dst), renamed,
                                schedule.offsets, schedule.stage_work, schedule.split_backward, schedule.params,
                                blocks)


def blocks(problem: Problem, largest: int) -> list[int]:
    """Block sizes up to ``largest``: multiples of ``pattern_period`` leaving two blocks at least."""
    n = pattern_period(problem)
    B = problem.num_microbatches
    return [k for k in range(n, min(largest, B // 2) + 1, n) if all(
        p in problem.microbatch2pipeline[:k] for p in range(problem.num_pipelines))]


def template_size(problem: Problem, block: int) -> int:
    """How many ops ``template_ops`` has (without making them)."""
    return len(problem.kinds) * sum(problem.num_stages[problem.microbatch2pipeline[j]] for j in range(block))


def template_ops(problem: Problem, block: int) -> tuple[Op, ...]:
    """The ops of template microbatches 0..block-1."""
    mb2p = problem.microbatch2pipeline
    return tuple(Op(k, mb2p[j], s, j) for j in range(block) for s in range(problem.num_stages[mb2p[j]])
                 for k in problem.kinds)


def template_pipelines(problem: Problem, block: int) -> dict[int, list[int]]:
    """Each pipeline's template microbatches, in order."""
    mb2p = problem.microbatch2pipeline[:block]
    return {p: [j for j, x in enumerate(mb2p) if x == p] for p in dict.fromkeys(mb2p)}


# ---- the period's lower bound -------------------------------------------------------------
def period_lower_bound(problem: Problem, placement: Placement, block: int,
                       per_microbatch: tuple[dict, dict] | None = None) -> tuple[int, str]:
    """(bound, which one): the least period of any periodic schedule of ``block`` microbatches:
    each device's load, and under a cap the activations' least lifetimes over the cyclic window
    (Little's law: sum of M x least lifetime / period is at most the cap), a load less the most
    overlapped pairs save (``Problem.overlap_pairs``). ``per_microbatch``: ``per_microbatch_work``'s value."""
    load, held = per_microbatch or per_microbatch_work(problem, placement)
    count = defaultdict(int, {p: len(js) for p, js in template_pipelines(problem, block).items()})
    saved = device_savings(problem, placement, count) if problem.overlap_pairs else {}
    best, why = 1, "one op"
    for d in range(problem.num_devices):
        ld = sum(count[p] * load[p][d] for p in count) - (saved[d].most if d in saved else 0)
        if ld > best:
            best, why = ld, f"load of device {d}"
        cap = problem.cap(d)
        area = sum(count[p] * held[p][d] for p in count)
        if cap is not None and cap > 0 and area > 0:
            need = math.ceil(area / cap - 1e-9)
            if need > best:
                best, why = need, f"activation lifetimes of device {d} over its memory cap"
    return best, why


def per_microbatch_work(problem: Problem, placement: Placement) -> tuple[dict, dict]:
    """Per pipeline and device: a microbatch's load and its sum of size x least lifetime."""
    head, _ = heads_tails(problem, placement)
    load = {p: [0] * problem.num_devices for p in range(problem.num_pipelines)}
    held = {p: [0.0] * problem.num_devices for p in range(problem.num_pipelines)}
    for p, n in enumerate(problem.num_stages):
        for s in range(n):
            d, f = placement.device(p, s), Op(Kind.F, p, s, 0)
            load[p][d] += sum(problem.duration(Op(k, p, s, 0)) for k in problem.kinds)
            for kind, part in problem.lifetimes(p, s):
                rel = Op(kind, p, s, 0)
                held[p][d] += part * (head[rel] + problem.duration(rel) - head[f])
    return load, held


# ---- time windows of the template's ops ---------------------------------------------------
def longest(problem: Problem, placement: Placement) -> Callable[[Op], int]:
    """The most ticks an op can hold its device: its own time or its longest overlapped pair's."""
    most: dict[tuple, int] = defaultdict(int)
    for (f, b), t in (block_ticks(problem, placement) if problem.overlap_pairs else {}).items():
        for key in ((Kind.F, *f), (Kind.B, *b)):
            most[key] = max(most[key], t)
    return lambda op: max(problem.duration(op), most[(op.kind, op.pipeline, op.stage)])


def _fit(problem: Problem, placement: Placement, p: int, s: int) -> int | None:
    """Periods' worth of copies of an activation of (p, s) its device's cap holds; None uncapped."""
    cap = problem.cap(placement.device(p, s))
    parts = [x for _, x in problem.lifetimes(p, s)]
    return None if cap is None or not parts else math.floor(cap / max(parts) + 1e-9)


def op_windows(problem: Problem, placement: Placement, period: int) -> dict[ChainKey, tuple[int, int]]:
    """Per chain key, the least and largest start of its op after its microbatch's first
    forward, over some periodic schedule of least period — the model's horizon. Some such
    schedule is in this normal form (docs/cpsat.md): an op moved by whole periods keeps its
    phase; B and W moved earlier only shorten lifetimes (each within a period of its input); a
    forward fed from an uncapped device moves later with its predecessor to within a period of
    it; one fed from a capped device starts before that input's activation is freed (live under
    copies-the-cap-holds + 1 periods). FIFO relabelling keeps these windows. An op lasts at
    most ``longest`` (moving a paired op by whole periods keeps it paired at its phase)."""
    head, _ = heads_tails(problem, placement)
    span = longest(problem, placement)
    out: dict[ChainKey, tuple[int, int]] = {}
    for p, n in enumerate(problem.num_stages):
        order = [Op(Kind.F, p, s, 0) for s in range(n)] + [Op(Kind.B, p, s, 0) for s in reversed(range(n))]
        if problem.split_backward:
            order += [Op(Kind.W, p, s, 0) for s in range(n)]
        hi = {order[0]: 0}
        for op in order[1:]:
            pred = predecessor(op, n)
            assert pred is not None  # only F of stage 0 has none
            fit = _fit(problem, placement, p, pred.stage) if op.kind is Kind.F else None
            wait = period - 1 if fit is None else (fit + 1) * period
            hi[op] = hi[pred] + span(pred) + min_lag(problem, placement, pred, op) + wait
            out_lo = head[op] - head[Op(Kind.F, p, 0, 0)]
            out[(op.kind, p, op.stage)] = (out_lo, max(out_lo, hi[op]))
        out[(Kind.F, p, 0)] = (0, 0)
    return out


def copies_bound(problem: Problem, placement: Placement, period: int, windows) -> dict[tuple[int, int], int]:
    """Per stage, the most whole periods an activation of it can be live (its n)."""
    out, most, rel = {}, longest(problem, placement), problem.release_kind
    for p, s in problem.stages:
        fit = _fit(problem, placement, p, s)
        n = (windows[(rel, p, s)][1] + most(Op(rel, p, s, 0)) - windows[(Kind.F, p, s)][0]) // period + 1
        out[(p, s)] = n if fit is None else min(n, fit)
    return out


# ---- kernels -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Kernel:
    """A periodic schedule: ``start`` of each template op (``template_ops``), every ``period``."""

    problem: Problem
    placement: Placement
    block: int
    period: int
    start: Mapping[Op, int]

    @property
    def per_microbatch(self) -> float:
        return self.period / self.block

    @cached_property
    def pairs(self) -> dict[Op, int]:
        """The template ops in overlapped pairs (``Problem.overlap_pairs``), each to its block's
        ticks: a forward and a backward of one device at one phase whose pair gains."""
        ticks = block_ticks(self.problem, self.placement) if self.problem.overlap_pairs else {}
        at = defaultdict(list)  # (device, phase) -> its ops, forwards first
        for o, t in sorted(self.start.items(), key=lambda x: x[0].kind is not Kind.F):
            at[(self.placement.device(o.pipeline, o.stage), t % self.period)].append(o)
        blocks = {(f, b): ticks.get(((f.pipeline, f.stage), (b.pipeline, b.stage))) for f, b in
                  (g for g in at.values() if len(g) == 2) if f.kind is Kind.F and b.kind is Kind.B}
        return {o: t for pair, t in blocks.items() if t is not None for o in pair}

    def arrays(self):
        """(ops, device, start, time held: a pair's block or the op's own) of the template, in order."""
        ops = template_ops(self.problem, self.block)
        pl, pr = self.placement, self.problem
        dev = np.array([pl.device(o.pipeline, o.stage) for o in ops], np.int64)
        st = np.array([self.start[o] for o in ops], np.int64)
        du = np.array([self.pairs.get(o) or pr.duration(o) for o in ops], np.int64)
        return ops, dev, st, du

    def expand(self, microbatches: int | None = None, name: str = "cyclic",
               labels: Sequence[int] | None = None) -> Schedule:
        """The schedule of the periodic schedule's first ``microbatches`` (default: the
        problem's), each device's ops by start, its pairs as blocks where both ops are in it;
        ``labels``: microbatches renamed to those pipelines (a ``mixed_twin``'s kernel)."""
        B, k, P = self.problem.num_microbatches if microbatches is None else microbatches, self.block, self.period
        ops, dev, st, _ = self.arrays()
        q = np.arange(-(-B // k), dtype=np.int64)
        j = np.array([o.microbatch for o in ops], np.int64)
        mb = (j[None, :] + k * q[:, None]).ravel()
        keep = mb < B
        times = (st[None, :] + P * q[:, None]).ravel()[keep]
        devs = np.tile(dev, len(q))[keep]
        kind = np.tile(np.array([KIND_CODES[o.kind] for o in ops], np.int8), len(q))[keep]
        pipe, stage = (np.tile(np.array([o[i] for o in ops], np.int64), len(q))[keep] for i in (1, 2))
        order = np.lexsort((kind, times, devs))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(devs, minlength=self.placement.num_devices))])
        mb2p = tuple(self.problem.microbatch2pipeline[m % self.block] for m in range(B))
        arrays = OpArrays(kind[order], pipe[order], stage[order], mb[keep][order])
        d, t = devs[order], times[order]
        same = np.flatnonzero((d[1:] == d[:-1]) & (t[1:] == t[:-1])).tolist()  # a pair: one start (ops take >= 1 tick)
        pairs = [(arrays.op(i), arrays.op(i + 1)) for i in same]
        out = Schedule.from_arrays(name, self.placement, mb2p, arrays, offsets, self.problem.stage_work,
                                   self.problem.split_backward,
                                   {"source": "cpsat", "block": self.block, "period": self.period}, pairs)
        return out if labels is None or tuple(labels) == mb2p else relabelled(out, labels)


def cyclic_order_edges(kernel: Kernel) -> tuple[list[Op], list[tuple[int, int, int, int]]]:
    """The kernel's ops and the edges (u, v, w, h) of its repeated constraint graph, start(v) +
    h period >= start(u) + w: data edges (h = 0), and on each device each op to the next by
    phase, h the periods between the two copies."""
    ops, dev, st, du = kernel.arrays()
    P, pr, pl = kernel.period, kernel.problem, kernel.placement
    index, edges = {o: i for i, o in enumerate(ops)}, []
    for i, o in enumerate(ops):
        pred = predecessor(o, pr.num_stages[o.pipeline])
        if pred is not None:
            u = index[pred]
            edges.append((u, i, int(du[u]) + min_lag(pr, pl, pred, o), 0))
    phase = st % P
    shares = np.array([o.kind is Kind.B and o in kernel.pairs for o in ops], bool)  # its forward's time
    for b in np.flatnonzero(shares):  # a paired backward starts with its forward
        f = next(i for i in np.flatnonzero((dev == dev[b]) & (phase == phase[b])) if i != b)
        edges += [(int(f), int(b), 0, int(st[f] - st[b]) // P), (int(b), int(f), 0, int(st[b] - st[f]) // P)]
    for d in np.unique(dev):
        members = np.flatnonzero((dev == d) & ~shares)
        members = members[np.argsort(phase[members], kind="stable")]
        for a, b in zip(members, np.roll(members, -1)):
            w = int(du[a])
            h = -((int(st[b]) - int(st[a]) - w) // P)  # least h with st[b] + h P >= st[a] + w
            edges.append((int(a), int(b), w, h))
    return list(ops), edges


def least_period(kernel: Kernel, lower: int = 1) -> int:
    """The least integer period at which the kernel's cyclic orders can repeat: the least P with
    no positive cycle of weight w - h P (Bellman-Ford per probe, binary search from ``lower``).
    ``ValueError`` when even the kernel's own period fails (an invalid kernel)."""
    ops, edges = cyclic_order_edges(kernel)
    u, v, w, h = (np.array(x, np.int64) for x in zip(*edges))
    n = len(ops)

    def feasible(P: int) -> bool:
        dist = np.zeros(n, np.int64)
        weight = w - h * P
        for _ in range(n + 1):
            cand = dist[u] + weight
            new = dist.copy()
            np.maximum.at(new, v, cand)
            if np.array_equal(new, dist):
                return True
            dist = new
        return False

    lo, hi = max(1, lower, max((kernel.problem.duration(o) for o in ops), default=1)), kernel.period
    if not feasible(hi):
        raise ValueError(f"the kernel's orders cannot repeat every {hi}: an invalid kernel")
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def check_kernel(kernel: Kernel) -> str | None:
    """None for a valid kernel, else its first violation: a dependency (with its lag), two ops
    of a device overlapping modulo the period, or the cap broken at some phase."""
    ops, dev, st, du = kernel.arrays()
    P, pr, pl = kernel.period, kernel.problem, kernel.placement
    start, held = dict(zip(ops, st.tolist())), dict(zip(ops, du.tolist()))
    for o in ops:
        pred = predecessor(o, pr.num_stages[o.pipeline])
        if pred is not None and start[o] < start[pred] + held[pred] + min_lag(pr, pl, pred, o):
            return f"{o} starts at {start[o]} before its input from {pred} arrives"
    shares = np.array([o.kind is Kind.B and o in kernel.pairs for o in ops], bool)  # paired: its forward's time
    for d in np.unique(dev):
        members = np.flatnonzero((dev == d) & ~shares)
        if int(du[members].sum()) > P:
            return f"device {d} has more work than one period of {P}"
        busy = np.zeros(P, np.int64)
        for i in members:
            busy[(int(st[i]) + np.arange(int(du[i]))) % P] += 1
        if busy.max() > 1:
            return f"ops of device {d} overlap at phase {int(np.argmax(busy))} of the period {P}"
    return _memory_violation(kernel, start, held)


def _memory_violation(kernel: Kernel, start: dict[Op, int], held: dict[Op, int]) -> str | None:
    P, pr, pl = kernel.period, kernel.problem, kernel.placement
    live: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for f in (o for o in start if o.kind is Kind.F and pr.cap(pl.device(o.pipeline, o.stage)) is not None):
        for kind, part in pr.lifetimes(f.pipeline, f.stage):
            r = f._replace(kind=kind)
            live[pl.device(f.pipeline, f.stage)].append((start[f], start[r] + held[r], part))
    for d, parts in live.items():
        phases = sorted({a % P for a, _, _ in parts} | {b % P for _, b, _ in parts} | {0})
        cap = pr.cap(d) or 0.0  # only devices with a cap hold parts here
        for x in phases:
            # copies q of [a, b) live at phase x: a <= x + q P < b
            total = sum(part * max(0, math.ceil((b - x) / P) - math.ceil((a - x) / P)) for a, b, part in parts)
            if total > cap + 1e-9:
                return f"device {d} holds {total:g} of activations at phase {x} of the period, over its cap {cap:g}"
    return None


# ---- the steady state of a known schedule -------------------------------------------------
def steady_kernel(kernel: Kernel, factor: int = 16) -> Kernel | None:
    """The steady state the kernel's cyclic orders settle in when run as soon as possible (the
    simulator on an expansion long enough), as a kernel of a block up to ``factor`` times the
    kernel's (``kernel_of``): its period per microbatch is the least the orders allow (the
    maximum cycle mean), never above the kernel's. None when not found."""
    _, _, st, du = kernel.arrays()
    reach = int(st.max() + du.max() - st.min()) // kernel.period + 2
    count = 3 * (reach + 2 * factor) * kernel.block
    schedule = kernel.expand(count)  # its problem: the kernel's with ``count`` microbatches
    problem = replace(kernel.problem, microbatch2pipeline=schedule.microbatch2pipeline)
    return kernel_of(problem, kernel.placement, schedule, simulate(schedule, problem.costs).start_times,
                     factor * kernel.block, kernel.problem)


def kernel_of(problem: Problem, placement: Placement, schedule: Schedule, start_times: np.ndarray,
              largest: int, owner: Problem | None = None) -> Kernel | None:
    """The steady state of a timed schedule as a kernel: the least block k (a multiple of the
    pattern, at most ``largest``) such that in the middle third every op of m + k starts the
    same P after that of m, its template shifted to 0. None when no block repeats or the kernel
    fails ``check_kernel``. ``start_times``: per op in op order; ``owner``: the problem the
    kernel belongs to (default ``problem``)."""
    ops = schedule.ops
    B = schedule.num_microbatches
    kinds = (Kind.F, Kind.B, Kind.W)
    chain = {(kinds[c % 3], *schedule.stage_keys[c // 3]): c for c in range(3 * len(schedule.stage_keys))}
    grid = np.full((len(chain), B), np.nan)
    grid[schedule.codes, ops.microbatch] = start_times
    n = pattern_period(problem)
    lo, hi = B // 3 - B // 3 % n, 2 * B // 3
    for k in range(n, min(largest, (hi - lo) // 2) + 1, n):
        diff = grid[:, lo + k:hi] - grid[:, lo:hi - k]
        present = ~np.isnan(diff)
        if not present.any():
            continue
        P = np.nanmax(diff)
        if P <= 0 or not np.allclose(diff[present], P) or abs(P - round(P)) > 1e-9:
            continue
        template = template_ops(problem, k)
        base = grid[chain[(Kind.F, problem.microbatch2pipeline[0], 0)], lo]
        start = {}
        for op in template:
            t = grid[chain[(op.kind, op.pipeline, op.stage)], lo + op.microbatch]
            if np.isnan(t):
                break
            start[op] = round(t - base)
        else:
            kernel = Kernel(owner or problem, placement, k, round(P), start)
            if k <= kernel.problem.num_microbatches and check_kernel(kernel) is None:
                return kernel
    return None
