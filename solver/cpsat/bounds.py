"""Analytic lower bounds, memory needs and horizons: cheap facts computed without a solver.

Every bound here holds for every schedule of the problem (for a fixed placement: every
order) and is combined with CP-SAT's proven bound as ``max(analytic, cpsat)``.
"""

from __future__ import annotations

import math
from collections import defaultdict

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Placement

from .problem import Problem
from .variables import heads_tails, lifetime_min, successors


def analytic_lower_bound(problem: Problem, placement: Placement | None) -> tuple[int, str]:
    """The largest of: the chain of one microbatch with its stage-0 ops serialized; each
    device's load plus least head and tail (fixed placement); total work over devices
    (free placement); the memory chain on stage 0 (fixed placement, capacity given); and
    the all-reduce tails. For the period objective: the largest device load (fixed
    placement) or total work over devices (free). Returns (bound, which one)."""
    if problem.objective == "period":
        return _period_lower_bound(problem, placement)
    head, tail = heads_tails(problem, placement)
    D = problem.num_devices
    opts = [problem.optimizer(d) for d in range(D)]
    min_opt = min(opts) if opts else 0
    counts = problem.pipeline_counts
    rel = problem.release_kind
    best, why = max(opts, default=0), "optimizer time"

    def take(value: int, label: str) -> None:
        nonlocal best, why
        if value > best:
            best, why = value, label

    def dev_opt(p: int, s: int) -> int:
        return opts[placement.device(p, s)] if placement is not None else min_opt

    for p, n in counts.items():
        f0 = Op(Kind.F, p, 0, 0)
        chain = tail[f0] + problem.duration(f0)
        b0 = Op(Kind.B, p, 0, 0)
        # stage-0 forwards are serialized on one device; so are stage-0 backwards
        take((n - 1) * problem.duration(f0) + chain + dev_opt(p, 0), f"critical path of pipeline {p}")
        take(head[b0] + n * problem.duration(b0) + tail[b0] + dev_opt(p, 0),
             f"stage-0 backwards of pipeline {p}")
    if placement is not None:
        load: dict[int, int] = defaultdict(int)
        heads: dict[int, int] = {}
        tails: dict[int, int] = {}
        for p, n in counts.items():
            for s in range(problem.num_stages[p]):
                d = placement.device(p, s)
                for k in problem.kinds:
                    op = Op(k, p, s, 0)
                    load[d] += n * problem.duration(op)
                    heads[d] = min(heads.get(d, head[op]), head[op])
                    tails[d] = min(tails.get(d, tail[op]), tail[op])
        for d, ld in load.items():
            take(heads[d] + ld + tails[d] + opts[d], f"load of device {d}")
            take(_fill_drain_bound(problem, placement, d, ld, head, tail) + min_opt,
                 f"load of device {d} with its memory-bound fill and drain")
        for p, n in counts.items():
            fit = problem.activations_fit(problem.cap(placement.device(p, 0)), p, 0)
            if fit is None:
                continue
            k = fit + 1
            if k < 2 or k > n:
                continue
            L = lifetime_min(problem, placement, p, 0, problem.chain_release(p, 0))
            q, r = divmod(n - 1, k - 1)
            f0 = problem.duration(Op(Kind.F, p, 0, 0))
            take(q * max(L, (k - 1) * f0) + r * f0 + L + opts[placement.device(p, 0)],
                 f"memory chain on stage 0 of pipeline {p}")
    else:
        total = sum(problem.duration(op) for op in problem.ops) + sum(opts)
        take(math.ceil(total / D), "total work over devices")
    for g in problem.costs.replica_groups:
        t = int(round(g.allreduce_time))
        for p, s in g.stages:
            if counts.get(p):
                op = Op(rel, p, s, 0)
                take(head[op] + problem.duration(op) + t + dev_opt(p, s), "all-reduce tail")
    return best, why


def _fill_drain_bound(problem: Problem, placement: Placement, d: int, load: int,
                      head: dict[Op, int], tail: dict[Op, int]) -> int:
    """Device ``d``'s load with the idle its memory forces at both ends (0 when the
    argument gives nothing). Let e be the earliest start of a backward (B or W) on d and
    r the least tail of a forward on d; T = the makespan less the optimizer. Before e the
    device runs only forwards, and no activation is freed yet, so at most k of them start
    (k: the activations its cap holds, none if a stage keeps none): work in [0, e) is at
    most min(e - first head, k * longest F). After T - r no forward may run (it would end
    too late for its tail), so only backwards, each of an activation live at T - r: work
    there is at most min(r - least backward tail, k * longest B) (without the memory term
    for a split backward, whose W runs there too). If the load exceeds both together,
    the two windows are disjoint and the device works at most T - r - e between them:
    T >= e + r + load - fill - drain."""
    keys = placement.stages_on(d)
    if not keys:
        return 0
    fwd = [Op(Kind.F, p, s, 0) for p, s in keys]
    back = [Op(k, p, s, 0) for p, s in keys for k in problem.kinds if k is not Kind.F]
    e = min(head[op] for op in back)
    r = min(tail[op] for op in fwd)
    first = min(head[op] for op in fwd + back)
    fill = e - first
    drain = r - min(tail[op] for op in back)
    cap = problem.cap(d)
    acts = [problem.costs.activation[k] for k in keys]
    if cap is not None and min(acts) > 0:
        k = int(math.floor(cap / min(acts) + 1e-9))
        fill = min(fill, k * max(problem.duration(op) for op in fwd))
        if not problem.split_backward:
            drain = min(drain, k * max(problem.duration(op) for op in back))
    rest = load - max(0, fill) - max(0, drain)
    return e + r + rest if rest > 0 else 0


def _period_lower_bound(problem: Problem, placement: Placement | None) -> tuple[int, str]:
    """A device's span holds all of its ops, one at a time; on a device holding one stage
    s it also holds the warm-up idle: from F(0, s)'s start (FIFO: the device's first op)
    to B(0, s)'s start at least L = the round trip of microbatch 0 passes, in which only
    forwards of s can run — at most k of them, k the activations that fit the cap (the
    (k+1)-th waits for B(0)'s end, ``Problem.window_shifts``) — so span >= load +
    L - k * F. With more microbatches than k, the drain idle adds to it: from the last
    forward's start to its backward's start L passes again, and only that forward and the
    B and W of activations live at its start can run — a with B pending (a >= 1 counts
    it) and w holding only M_W, a M + w M_W within the cap (``_drain_idle``)."""
    if placement is None:
        total = sum(problem.duration(op) for op in problem.ops)
        return math.ceil(total / problem.num_devices), "total work over devices"
    load: dict[int, int] = defaultdict(int)
    for op in problem.ops:
        load[placement.device(op.pipeline, op.stage)] += problem.duration(op)
    best, why = 0, ""
    head, _ = heads_tails(problem, placement)
    counts = problem.pipeline_counts
    for d, ld in load.items():
        idle = 0
        held = placement.stages_on(d)
        if len(held) == 1:
            (p, s), = held
            f = Op(Kind.F, p, s, 0)
            k = problem.activations_fit(problem.cap(d), p, s)
            k = counts[p] if k is None else min(k, counts[p])
            trip = head[Op(Kind.B, p, s, 0)] - head[f]
            idle = max(0, trip - k * problem.duration(f))
            if counts[p] > k:
                idle += _drain_idle(problem, p, s, trip, k, counts[p], problem.cap(d))
        if ld + idle > best:
            best, why = ld + idle, f"load of device {d}" + (" and its warm-up and drain idle" if idle else "")
    for value, label in _through_paths(problem, placement, counts):
        if value > best:
            best, why = value, label
    return best, why


def _through_paths(problem: Problem, placement: Placement, counts: dict[int, int]):
    """One pipeline, one stage per device: device d's span runs from its first forward to
    its last op, and holds the path down to a later device e (forwards and messages), all
    of e's forwards and backwards one after another (e's first forward to its last
    backward), the path back up to d (messages and backwards) and the W of that last
    microbatch on d — whichever microbatches are first and last. Yields (value, label)."""
    if problem.num_pipelines != 1 or any(len(placement.stages_on(d)) != 1 for d in range(problem.num_devices)):
        return
    n, count = problem.num_stages[0], counts[0]
    dev = [placement.device(0, s) for s in range(n)]
    f = [problem.duration(Op(Kind.F, 0, s, 0)) for s in range(n)]
    b = [problem.duration(Op(Kind.B, 0, s, 0)) for s in range(n)]
    w = [problem.duration(Op(Kind.W, 0, s, 0)) if problem.split_backward else 0 for s in range(n)]
    lag_f = [problem.lag(Op(Kind.F, 0, s, 0), dev[s], dev[s + 1]) for s in range(n - 1)]
    lag_b = [problem.lag(Op(Kind.B, 0, s + 1, 0), dev[s + 1], dev[s]) for s in range(n - 1)]
    for d in range(n - 1):
        down = up = 0
        for e in range(d + 1, n):
            down += f[e - 1] + lag_f[e - 1]
            up += b[e - 1] + lag_b[e - 1]
            yield (down + count * (f[e] + b[e]) + up + w[d],
                   f"device {dev[d]}'s span through all forwards and backwards of device {dev[e]}")


def _drain_idle(problem: Problem, p: int, s: int, trip: int, k: int, count: int, cap: float | None) -> int:
    """Least idle of a one-stage device between its last forward's start and that
    microbatch's backward start (``trip`` apart): ``trip`` minus the most work that fits,
    the forward plus the B and W of a - 1 other activations and the W of w held ones."""
    f, b = problem.duration(Op(Kind.F, p, s, 0)), problem.duration(Op(Kind.B, p, s, 0))
    w_time = problem.duration(Op(Kind.W, p, s, 0)) if problem.split_backward else 0
    m, m_w = problem.costs.activation[(p, s)], problem.weight_part(p, s)
    most = 0
    for a in range(1, k + 1):
        held = count - a
        if w_time and m_w > 1e-12 and cap is not None:
            held = min(held, int(math.floor((cap - a * m) / m_w + 1e-9)))
        held = max(0, held) if w_time else 0
        most = max(most, f + (a - 1) * (b + w_time) + held * w_time)
    return max(0, trip - most)


def period_horizon(problem: Problem, placement: Placement, period: int | None = None) -> int:
    """An upper bound on every time of some schedule of least period (at most ``period``
    when given). In any schedule, a stretch where no device is between its first and its
    last op can be shortened to the longest transfer (everything after it moved earlier)
    without changing any span or order; the devices' windows are at most ``period`` long
    each, so all ops end by D * period plus D - 1 transfers, and in any case by the total
    work plus one transfer per op. All-reduce and optimizer tails added."""
    D = problem.num_devices
    lag = 0
    for p, mbs in problem.pipeline_microbatches.items():
        for s in range(problem.num_stages[p]):
            for k in problem.kinds:
                op = Op(k, p, s, mbs[0])
                for nx in successors(op, problem.num_stages[p], problem.split_backward):
                    a, b = placement.device(p, s), placement.device(p, nx.stage)
                    if a != b:
                        lag = max(lag, problem.lag(op, a, b))
    total = sum(problem.duration(op) for op in problem.ops) + len(problem.ops) * lag
    if period is not None:
        total = min(total, D * period + (D - 1) * lag)
    total += sum(int(round(g.allreduce_time)) for g in problem.costs.replica_groups)
    total += max((problem.optimizer(d) for d in range(D)), default=0)
    return max(1, total)


def safe_horizon(problem: Problem, placement: Placement | None) -> int:
    """An upper bound on the makespan of any schedule that never idles without reason:
    every op, transfer, all-reduce and optimizer step one after another."""
    total = 0
    D = problem.num_devices
    for op in problem.ops:
        total += problem.duration(op)
        for nx in successors(op, problem.num_stages[op.pipeline], problem.split_backward):
            total += max(
                (problem.lag(op, a, b) for a in range(D) for b in range(D) if a != b), default=0
            ) if placement is None else (
                problem.lag(op, placement.device(op.pipeline, op.stage), placement.device(nx.pipeline, nx.stage))
                if placement.device(op.pipeline, op.stage) != placement.device(nx.pipeline, nx.stage) else 0
            )
    total += sum(int(round(g.allreduce_time)) for g in problem.costs.replica_groups)
    total += max((problem.optimizer(d) for d in range(D)), default=0)
    return max(1, total)


def memory_need(problem: Problem, placement: Placement) -> list[float]:
    """Per device, the least activation memory any schedule needs: the activations of one
    microbatch's stages on that device are all live when its last forward there starts
    (they nest), and running microbatches one at a time needs no more. Maximum over
    pipelines that carry microbatches."""
    act = problem.costs.activation
    need = [0.0] * problem.num_devices
    used = set(problem.microbatch2pipeline)
    for p in used:
        per: dict[int, float] = defaultdict(float)
        for s in range(problem.num_stages[p]):
            per[placement.device(p, s)] += act[(p, s)]
        for d, a in per.items():
            need[d] = max(need[d], a)
    return need


def cap_violations(problem: Problem, placement: Placement) -> list[str]:
    """Devices whose activation capacity is below their memory need."""
    out = []
    for d, n in enumerate(memory_need(problem, placement)):
        cap = problem.cap(d)
        if cap is not None and n > cap + 1e-9:
            out.append(f"device {d} needs {n:g} for one microbatch's activations but has {cap:g}")
    return out


def min_feasible_cap(problem: Problem) -> float:
    """The least activation capacity, the same on every device, under which a schedule
    exists (one microbatch at a time is always schedulable). Fixed placement: the largest
    memory need, exact; free placement: minimised over placements by a tiny CP-SAT model —
    exact when that model is proven optimal within its 10 s, otherwise the best cap found
    (a schedule exists under it, but a smaller one might too)."""
    placement = problem.fixed_placement
    if placement is not None:
        return max(memory_need(problem, placement))
    act = problem.costs.activation
    keys = list(problem.stages)
    scale = 1
    for sc in (1, 10, 100, 1000, 10**6):
        if all(abs(act[k] * sc - round(act[k] * sc)) < 1e-9 for k in keys):
            scale = sc
            break
    D = problem.num_devices
    m = cp_model.CpModel()
    x = {(k, d): m.new_bool_var(f"x{k}{d}") for k in keys for d in range(D)}
    for k in keys:
        m.add_exactly_one(x[(k, d)] for d in range(D))
    top = sum(int(round(act[k] * scale)) for k in keys)
    z = m.new_int_var(0, top, "z")
    for p in set(problem.microbatch2pipeline):
        for d in range(D):
            m.add(z >= sum(int(round(act[k] * scale)) * x[(k, d)] for k in keys if k[0] == p))
    m.minimize(z)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 10
    status = solver.solve(m)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # FEASIBLE: not proven least
        return solver.objective_value / scale
    raise RuntimeError(f"min_feasible_cap: the placement model was not solved ({solver.status_name(status)})")
