"""Analytic lower bounds, memory needs and horizons, without a solver. Every bound holds for
every schedule of the problem (fixed placement: every order) and is combined with
CP-SAT's as ``max(analytic, cpsat)`` (docs/cpsat.md, "Bounds that are bounds").
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np
from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op, data_successors
from pipetab.solver.simulate import MemoryCheck, order_memory

from ..engine import SolverSetup, run_solver
from ..params import ModelParams
from .cyclic import per_microbatch_work
from .pairing import device_savings
from .sweep import sweep_lower_bound
from .variables import heads_tails, lifetime_min

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement, Schedule

    from ..problem import Problem


def makespan_lower_bound(problem: Problem, placement: Placement | None) -> tuple[int, str]:
    """(bound, which one): the largest of one microbatch's chain with its stage-0 ops
    serialized; each device's load with least head and tail, memory-bound fill and drain, and
    activation area over its cap (fixed placement); total work over devices (free placement);
    the stage-0 memory chain; the sweep (fixed placement, up to ``ModelParams.sweep_max_cells``);
    the all-reduce tails. With overlapped pairs a device's load is less what its pairs can save
    (``pairing.device_savings``) and the bounds counting ops one at a time are left out."""
    head, tail = heads_tails(problem, placement)
    opts = [problem.optimizer(d) for d in range(problem.num_devices)]
    min_opt = min(opts) if opts else 0
    counts = problem.pipeline_counts

    def dev_opt(p: int, s: int) -> int:
        return opts[placement.device(p, s)] if placement is not None else min_opt

    found = [(max(opts, default=0), "optimizer time")]
    for p, n in counts.items():
        f0, b0 = Op(Kind.F, p, 0, 0), Op(Kind.B, p, 0, 0)
        # stage-0 forwards are serialized on one device; so are stage-0 backwards
        found.append(((n - 1) * problem.duration(f0) + tail[f0] + problem.duration(f0) + dev_opt(p, 0),
                      f"critical path of pipeline {p}"))
        found.append((head[b0] + n * problem.duration(b0) + tail[b0] + dev_opt(p, 0),
                      f"stage-0 backwards of pipeline {p}"))
    if placement is not None:
        savings = None
        if problem.overlap_pairs:
            savings = device_savings(problem, placement)
        found += _device_bounds(problem, placement, head, tail, opts, savings)
        cells = sum(n * problem.num_stages[p] for p, n in counts.items())
        if savings is None and cells <= ModelParams().sweep_max_cells:
            found.append((sweep_lower_bound(problem, placement), "one sweep over the microbatches (FIFO chains, "
                                                                 "memory windows, device load)"))
    else:
        loads = stage_loads(problem)
        found.append((math.ceil((sum(loads.values()) + sum(opts)) / problem.num_devices), "total work over devices"))
        found += _stage_device_bounds(problem, loads, head, tail, min_opt)
    for g in problem.costs.replica_groups:
        t = round(g.allreduce_time)
        for p, s in g.stages:
            if counts.get(p):
                op = Op(problem.release_kind, p, s, 0)
                found.append((head[op] + problem.duration(op) + t + dev_opt(p, s), "all-reduce tail"))
    return max(found, key=lambda x: x[0])  # the first of the largest


def _stage_device_bounds(problem: Problem, loads: dict[tuple[int, int], int], head: dict[Op, int],
                         tail: dict[Op, int], least_opt: int) -> list[tuple[int, str]]:
    """Free placement: the device holding a stage holds it alone (its load between the least
    head and tail of its ops) or with another (both loads between the least head and tail of
    any op). S=64, B=512: 1F1B's 1725 where total work over devices gives 1536."""
    counts = problem.pipeline_counts
    stages = {}
    for p, s in problem.stages:
        if counts.get(p):
            ops = [Op(k, p, s, 0) for k in problem.kinds]
            stages[(p, s)] = (loads[(p, s)], min(head[o] for o in ops), min(tail[o] for o in ops))
    if not stages:
        return []
    ordered = sorted(load for load, _, _ in stages.values())
    least_head = min(h for _, h, _ in stages.values())
    least_tail = min(t for _, _, t in stages.values())
    best = 0
    for load, h, t in stages.values():
        other = ordered[1] if load == ordered[0] else ordered[0]  # the least load of another stage
        alone = load + h + t
        best = max(best, min(alone, load + other + least_head + least_tail) if len(ordered) > 1 else alone)
    return [(best + least_opt, "the device of each stage, alone or shared")]


def _device_bounds(problem: Problem, placement: Placement, head: dict[Op, int], tail: dict[Op, int],
                   opts: list[int], savings: dict | None = None) -> list[tuple[int, str]]:
    """Fixed placement: each device's load with least head and tail, with its fill and drain,
    its activation area, and each pipeline's stage-0 memory chain; with ``savings``
    (``pairing.device_savings``) each load less what its pairs save, no fill and drain."""
    counts, out = problem.pipeline_counts, []
    load: dict[int, int] = defaultdict(int)
    heads: dict[int, int] = {}
    tails: dict[int, int] = {}
    b_heads: dict[int, int] = {}  # the earliest a backward can start on d
    f_tails: dict[int, int] = {}  # the least time after a forward of d ends
    for p, n in counts.items():
        for s in range(problem.num_stages[p]):
            d = placement.device(p, s)
            for k in problem.kinds:
                op = Op(k, p, s, 0)
                load[d] += n * problem.duration(op)
                heads[d] = min(heads.get(d, head[op]), head[op])
                tails[d] = min(tails.get(d, tail[op]), tail[op])
            b, f = Op(Kind.B, p, s, 0), Op(Kind.F, p, s, 0)
            b_heads[d] = min(b_heads.get(d, head[b]), head[b])
            f_tails[d] = min(f_tails.get(d, tail[f]), tail[f])
    least_opt = min(opts, default=0)
    capped = savings is None and any(problem.cap(d) is not None for d in load)
    held = per_microbatch_work(problem, placement)[1] if capped else {}  # size x least lifetime
    for d, ld in load.items():
        # after d's last op run both its own optimizer and that op's tail, which ends on
        # some device whose optimizer follows: side by side, not one after the other
        end = max(tails[d] + least_opt, opts[d])
        if savings is not None:
            out.append((_paired_load_bound(heads[d] + ld + end, savings.get(d), b_heads[d] - heads[d],
                                           f_tails[d] - (end - least_opt)),
                        f"load of device {d} less what overlapped pairs can save"))
            continue
        out.append((heads[d] + ld + end, f"load of device {d}"))
        out.append((_fill_drain_bound(problem, placement, d, ld, head, tail) + least_opt,
                    f"load of device {d} with its memory-bound fill and drain"))
        area = _memory_area_bound(problem, placement, d, head, tail, held) if capped else 0
        if area:
            out.append((area + least_opt, f"activation lifetimes of device {d} over its memory cap, "
                                          "memory ramping up and down"))
    for p, n in counts.items():
        fit = problem.activations_fit(problem.cap(placement.device(p, 0)), p, 0)
        if fit is None or not 2 <= fit + 1 <= n:
            continue
        L = lifetime_min(problem, placement, p, 0, problem.chain_release(p, 0))
        q, r = divmod(n - 1, fit)  # fit + 1 activations overflow the cap
        f0 = problem.duration(Op(Kind.F, p, 0, 0))
        out.append((q * max(L, fit * f0) + r * f0 + L + opts[placement.device(p, 0)],
                    f"memory chain on stage 0 of pipeline {p}"))
    return out


def _paired_load_bound(alone: int, saving, first: int, last: int) -> int:
    """A device's load bound ``alone`` less what its pairs can save (``saving``:
    ``pairing.DeviceSavings``; None: nothing). A pair holds a backward, so in the ``first``
    ticks after the device's least head (before its earliest backward head) it runs forwards
    alone, each tick forgoing at least ``forward_share`` of saving; likewise a pair holds a
    forward, so none ends in the ``last`` ticks before its last op must end (backwards alone)."""
    if saving is None:
        return alone
    by_forwards = alone - saving.forwards + saving.forward_share * max(0, first)
    by_backwards = alone - saving.backwards + saving.backward_share * max(0, last)
    return max(alone - saving.most, math.ceil(max(by_forwards, by_backwards) - 1e-9))


def _fill_drain_bound(problem: Problem, placement: Placement, d: int, load: int,
                      head: dict[Op, int], tail: dict[Op, int]) -> int:
    """Device ``d``'s load with the idle its memory forces at both ends (0 when nothing).
    With e the earliest backward start on d, r the least forward tail, T the makespan less the
    optimizer: before e only forwards run and nothing is freed, so fill <= min(e - first head,
    k x longest F), k the activations the cap holds; after T - r only backwards of activations
    live at T - r run, so drain <= min(r - least backward tail, ``_drain_work`` within each
    kind's window). If the load exceeds both, the device works at most T - r - e between
    them: T >= e + r + load - fill - drain."""
    keys = placement.stages_on(d)
    if not keys:
        return 0
    fwd = [Op(Kind.F, p, s, 0) for p, s in keys]
    back = [Op(k, p, s, 0) for p, s in keys for k in problem.kinds if k is not Kind.F]
    e = min(head[op] for op in back)
    r = min(tail[op] for op in fwd)
    first = min(head[op] for op in fwd + back)
    fill = e - first
    drain: float = r - min(tail[op] for op in back)
    cap = problem.cap(d)
    acts = [problem.costs.activation[k] for k in keys]
    if cap is not None and min(acts) > 0:
        k = math.floor(cap / min(acts) + 1e-9)
        fill = min(fill, k * max(problem.duration(op) for op in fwd))
        windows: dict[Kind, float] = {kind: r - min(tail[op] for op in back if op.kind is kind)
                                      for kind in problem.kinds if kind is not Kind.F}
        drain = min(drain, _drain_work(problem, keys, cap, windows))
    rest = load - max(0, fill) - max(0.0, drain)
    return e + r + math.ceil(rest - 1e-9) if rest > 0 else 0  # ticks are whole: T >= the next one


def _memory_area_bound(problem: Problem, placement: Placement, d: int, head: dict[Op, int],
                       tail: dict[Op, int], held: dict[int, list[float]]) -> int:
    """The least time by which device ``d``'s ops can all end under its cap (Little's law; 0
    without a cap). Each activation part lives at least its least lifetime, so the memory-time
    area is at least the microbatches times ``held`` (``cyclic.per_microbatch_work``). In tick
    t the memory is at most the cap, the largest activation times the forwards begun by t
    (one at a time from the least forward head, each at least the shortest forward), and that
    activation times the releases ending after t (each at least the shortest release, ending by
    T - their least tail): ``_least_time_holding``."""
    cap = problem.cap(d)
    counts = problem.pipeline_counts
    keys = [(p, s) for p, s in placement.stages_on(d) if counts.get(p) and problem.costs.activation[(p, s)] > 0]
    if cap is None or cap <= 0 or not keys:
        return 0
    area = sum(n * held[p][d] for p, n in counts.items())
    releases = [Op(problem.lifetimes(p, s)[-1][0], p, s, 0) for p, s in keys]
    forwards = [Op(Kind.F, p, s, 0) for p, s in keys]
    return _least_time_holding(area, cap, max(problem.costs.activation[k] for k in keys),
                               min(head[op] for op in forwards), min(problem.duration(op) for op in forwards),
                               min(problem.duration(op) for op in releases), min(tail[op] for op in releases))


def _least_time_holding(area: float, cap: float, act: float, h: int, f: int, r: int, last: int) -> int:
    """The least T whose ticks [0, T) hold ``area`` (``_memory_area_bound``), forwards from
    ``h`` at least ``f`` apart, releases at least ``r`` long ending by T - ``last`` (0 of
    either: unbounded count); 0 where the windows span over ``ModelParams.area_max_ticks``."""
    k = math.ceil(cap / act - 1e-9)  # past k forwards begun (k releases owed) the cap binds
    if h + k * f + last + k * r > ModelParams().area_max_ticks:
        return 0
    steps = np.arange(1, k + 1 if f or r else 1, dtype=np.int64)  # k unbounded by the window when f = r = 0

    def held(T: int) -> float:
        """The most area ticks [0, T) hold, by stretches between the first k forward starts and release ends."""
        cuts = [np.array([0, T, h, T - last], dtype=np.int64)] + [h + f * steps] * bool(f)
        t = np.unique(np.clip(np.concatenate(cuts + [T - last - r * steps] * bool(r)), 0, T))
        t, length = t[:-1], np.diff(t)
        begun = np.where(t >= h, np.minimum((t - h) // max(f, 1) + 1, k) if f else k, 0)
        owing = np.where(t < T - last, np.minimum((T - last - t - 1) // max(r, 1) + 1, k) if r else k, 0)
        return float((length * np.minimum(cap, act * np.minimum(begun, owing))).sum())

    need = area - 1e-9 * max(1.0, area)
    lo = hi = max(1, math.ceil(area / cap - 1e-9))
    while held(hi) < need:
        lo, hi = hi + 1, 2 * hi
    while lo < hi:  # held grows with T
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if held(mid) >= need else (mid + 1, hi)
    return lo


def _drain_work(problem: Problem, keys: list[tuple[int, int]], cap: float,
                windows: dict[Kind, float] | None = None) -> float:
    """The most backward work (B and W) a device of stages ``keys`` can have left once no
    forward of it remains, under ``cap``: a microbatch whose B is owed holds its activation M
    and owes B + W, one owing only W holds its weight part M_W. With a, a_w the least M, M_W:
    max over n (n a <= cap) of n B + (n + floor((cap - n a) / a_w)) W (no W-only term when
    a_w = 0; above 10,000 activations its linear relaxation). ``windows[kind]``: at most that
    much work of the kind fits (``_fill_drain_bound``)."""
    durs = {kind: max(problem.duration(Op(kind, p, s, 0)) for p, s in keys) for kind in problem.kinds}
    room = {kind: max(0.0, (windows or {}).get(kind, math.inf)) for kind in (Kind.B, Kind.W)}
    a = min(problem.costs.activation[k] for k in keys)
    n_max = math.floor(cap / a + 1e-9)
    if not problem.split_backward:
        return min(n_max * durs[Kind.B], room[Kind.B])
    a_w = min(dict(problem.lifetimes(p, s)).get(Kind.W, 0.0) for p, s in keys)
    if a_w <= 1e-12:
        return room[Kind.B] + room[Kind.W]  # W's owed unbounded by memory: the windows alone
    if n_max > 10_000:
        return min(cap * max((durs[Kind.B] + durs[Kind.W]) / a, durs[Kind.W] / a_w), room[Kind.B] + room[Kind.W])
    return max(min(n * durs[Kind.B], room[Kind.B])
               + min((n + math.floor((cap - n * a) / a_w + 1e-9)) * durs[Kind.W], room[Kind.W])
               for n in range(n_max + 1))


def period_horizon(problem: Problem, placement: Placement, period: int | None = None) -> int:
    """An upper bound on every time of some schedule of least period (at most ``period``). A
    stretch where no device is between its first and last op can shrink to the longest
    transfer, so all ops end by D x period plus D - 1 transfers, and by total work plus one
    transfer per op; all-reduce and optimizer tails added."""
    D = problem.num_devices
    lag = 0
    for p, mbs in problem.pipeline_microbatches.items():
        for s in range(problem.num_stages[p]):
            for k in problem.kinds:
                op = Op(k, p, s, mbs[0])
                for nx in data_successors(op, problem.num_stages[p], problem.split_backward):
                    a, b = placement.device(p, s), placement.device(p, nx.stage)
                    if a != b:
                        lag = max(lag, problem.lag(op, a, b))
    total = sum(problem.duration(op) for op in problem.ops) + len(problem.ops) * lag
    if period is not None:
        total = min(total, D * period + (D - 1) * lag)
    total += sum(round(g.allreduce_time) for g in problem.costs.replica_groups)
    total += max((problem.optimizer(d) for d in range(D)), default=0)
    return max(1, total)


def safe_horizon(problem: Problem, placement: Placement | None) -> int:
    """An upper bound on the makespan of any schedule that never idles without reason: every
    op, transfer, all-reduce and optimizer step in turn (transfers per stage and kind; with the
    placement free the largest over device pairs)."""
    D = problem.num_devices
    counts = problem.pipeline_counts
    widest: dict[float, int] = {}
    total = sum(stage_loads(problem).values())
    for p, n in counts.items():
        for s in range(problem.num_stages[p]):
            for k in problem.kinds:
                op = Op(k, p, s, 0)
                for nx in data_successors(op, problem.num_stages[p], problem.split_backward):
                    if placement is None:
                        size = problem.costs.message_bytes.get((k, p, s), 0.0)
                        if size not in widest:
                            widest[size] = max((problem.lag(op, a, b) for a in range(D) for b in range(D) if a != b),
                                               default=0)
                        total += n * widest[size]
                    else:
                        src, dst = placement.device(p, s), placement.device(nx.pipeline, nx.stage)
                        total += n * problem.lag(op, src, dst) if src != dst else 0
    total += sum(round(g.allreduce_time) for g in problem.costs.replica_groups)
    total += max((problem.optimizer(d) for d in range(D)), default=0)
    return max(1, total)


def stage_loads(problem: Problem) -> dict[tuple[int, int], int]:
    """Each stage's (pipeline, stage) work: its ops' durations over every microbatch."""
    out = {key: 0 for key in problem.stages}
    for op in problem.ops:
        out[(op.pipeline, op.stage)] += problem.duration(op)
    return out


def memory_need(problem: Problem, placement: Placement) -> list[float]:
    """Per device, the least activation memory any schedule needs: one microbatch's stages on
    it are all live when its last forward there starts; the maximum over pipelines in use."""
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


def activation_scale(problem: Problem) -> float:
    """``memory_scale`` of the activation parts and caps: the model's memory in units of 1/scale."""
    caps = [problem.cap(d) for d in range(problem.num_devices)]
    sizes = [x for k in problem.stages for _, x in problem.lifetimes(*k)]
    return memory_scale(sizes + [c for c in caps if c is not None])


def memory_scale(values: list[float]) -> float:
    """Factor making sizes and caps integral (1 for integers such as bytes; up to 1e6)."""
    for scale in (1, 10, 100, 1000, 10**6):
        if all(abs(x * scale - round(x * scale)) < 1e-9 for x in values):
            return scale
    return 10**6


def min_feasible_cap(problem: Problem, seconds: float = 10.0) -> float:
    """The least activation cap, the same on every device, under which a schedule exists. Fixed
    placement: the largest memory need, exact; free: a tiny CP-SAT model over placements for at
    most ``seconds`` — exact when proven, else its best cap or that of stages dealt
    round-robin (a schedule exists under it; a smaller cap may work too)."""
    placement = problem.fixed_placement
    if placement is not None:
        return max(memory_need(problem, placement))
    act = problem.costs.activation
    keys = list(problem.stages)
    scale = memory_scale([act[k] for k in keys])
    D = problem.num_devices
    m = cp_model.CpModel()
    x = {(k, d): m.new_bool_var(f"x{k}{d}") for k in keys for d in range(D)}
    for k in keys:
        m.add_exactly_one(x[(k, d)] for d in range(D))
    top = sum(round(act[k] * scale) for k in keys)
    z = m.new_int_var(0, top, "z")
    for p in set(problem.microbatch2pipeline):
        for d in range(D):
            m.add(z >= sum(round(act[k] * scale) * x[(k, d)] for k in keys if k[0] == p))
    m.minimize(z)
    done = run_solver(m, SolverSetup(max(0.05, seconds)))
    if done.found:  # FEASIBLE: not proven least
        return done.solver.objective_value / scale
    return max(memory_need(problem, problem.dealt))


def memory_check(problem: Problem, schedule: Schedule) -> MemoryCheck:
    """``schedule``'s activation memory under the problem's costs and caps (``simulate.order_memory``)."""
    return order_memory(schedule, problem.costs, problem.split_backward)
