"""Solver-free side of the CP-SAT modes: a fixed schedule timed by the level-3 simulator
(``solver.simulate``) on the problem's integer costs, its activation memory (a prefix sum
over each device's order, independent of timing, naming the first violation of a cap), and
a greedy memory-aware list scheduler that always yields a feasible schedule for hints.

These are the numbers every CP-SAT result is checked against.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, replace

from pipetab.schedules.evaluate import DeadlockError, Timing
from pipetab.schedules.memory import memory_change
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Placement, Schedule

from pipetab.solver import periodic
from pipetab.solver.simulate import simulate

from .problem import Problem
from .variables import heads_tails


@dataclass(frozen=True)
class MemoryCheck:
    """Peak live activation memory per device (prefix sums over each device's order) and
    the first violation of a cap, if any."""

    peaks: tuple[float, ...]
    violation: str | None

    @property
    def fits(self) -> bool:
        return self.violation is None


def memory_check(problem: Problem, schedule: Schedule) -> MemoryCheck:
    """Activation memory as ``schedules.memory`` defines it (F allocates at its start, B
    and W release at their end); on one device ops run one after another, so the live
    memory at every F start is a prefix sum over the device's order."""
    costs = problem.costs
    split = problem.split_backward
    peaks = []
    violation = None
    for d, order in enumerate(schedule.orders):
        cap = problem.cap(d)
        live = peak = 0.0
        for op in order:
            live += memory_change(op.kind, costs.activation[(op.pipeline, op.stage)],
                                  costs.weight_part(op.pipeline, op.stage), split)
            if op.kind is Kind.F:
                if live > peak:
                    peak = live
                if violation is None and cap is not None and live > cap + 1e-9:
                    violation = (
                        f"device {d} exceeds its activation capacity {cap:g} at op {op} "
                        f"({live:g} live)"
                    )
        peaks.append(peak)
    return MemoryCheck(tuple(peaks), violation)


@dataclass(frozen=True)
class KnownEval:
    """A known schedule judged under a problem: makespan (None on deadlock), memory."""

    schedule: Schedule
    makespan: int | None
    timing: Timing | None
    memory: MemoryCheck
    error: str | None = None

    @property
    def fits(self) -> bool:
        return self.makespan is not None and self.memory.fits

    @property
    def name(self) -> str:
        return self.schedule.name


def evaluate_known(problem: Problem, schedule: Schedule, time_unfit: bool = True) -> KnownEval:
    """``schedule`` timed by the simulator on the problem's costs (step makespan with
    all-reduce and optimizer tails) — for the period objective, its least period
    (``min_period``) — with its memory checked against the problem's caps;
    ``time_unfit=False``: a schedule that breaks a cap is not timed (makespan None)."""
    mem = memory_check(problem, schedule)
    if not mem.fits and not time_unfit:
        return KnownEval(schedule, None, None, mem, "not timed: it breaks the memory cap")
    try:
        sim = simulate(schedule, problem.costs)
    except DeadlockError as exc:
        return KnownEval(schedule, None, None, mem, str(exc))
    if problem.objective == "period":
        period, timing = min_period(problem, schedule)
        return KnownEval(schedule, period, timing, mem)
    return KnownEval(schedule, int(round(sim.makespan)), Timing(sim.start, sim.end), mem)


def min_period(problem: Problem, schedule: Schedule) -> tuple[int, Timing]:
    """The least integer period of ``schedule``'s per-device orders on the problem's
    integer costs and the earliest timing reaching it: ``solver.periodic.min_period`` (the
    exact least span over all timings, starts free) rounded up — with integer durations
    and lags an integer period P admits an integer timing iff P is at least that — timed
    by ``periodic_timing``. Gradient all-reduces are not part of the period (the period
    objective's assumption), so replica groups are left out."""
    costs = replace(problem.costs, replica_groups=())
    period = math.ceil(periodic.min_period(schedule, costs) - 1e-9)
    timing = periodic.periodic_timing(schedule, costs, period)
    start = {op: int(round(t)) for op, t in timing.start.items()}
    return period, Timing(start, {op: t + problem.duration(op) for op, t in start.items()})


def relabel_microbatches(schedule: Schedule, timing: Timing) -> tuple[Schedule, Timing]:
    """The same timed schedule with op labels permuted so that every stage runs each kind
    of op of a pipeline in microbatch order (FIFO): the k-th op of a kind on (p, s), by
    start time, becomes that of the pipeline's k-th microbatch. Times, devices and the
    memory profile are unchanged and every dependency still holds (the k-th op on a stage
    starts after k distinct predecessors ended, so after the k-th predecessor end), so this
    is a relabelling of identical microbatches; it also orders stage-0 forwards."""
    by_pipe: dict[int, list[int]] = {}
    for m, p in enumerate(schedule.microbatch2pipeline):
        by_pipe.setdefault(p, []).append(m)
    groups: dict[tuple[Kind, int, int], list[Op]] = {}
    for op in timing.start:
        groups.setdefault((op.kind, op.pipeline, op.stage), []).append(op)
    mapping: dict[Op, Op] = {}
    for (k, p, s), ops in groups.items():
        ops.sort(key=lambda o: timing.start[o])
        for new_m, op in zip(by_pipe[p], ops):
            mapping[op] = Op(k, p, s, new_m)
    if all(a == b for a, b in mapping.items()):
        return schedule, timing
    orders = tuple(tuple(mapping[op] for op in order) for order in schedule.orders)
    new = Schedule(
        schedule.name, schedule.placement, schedule.microbatch2pipeline, orders,
        schedule.stage_work, schedule.split_backward, schedule.params,
    )
    return new, Timing(
        {mapping[o]: t for o, t in timing.start.items()}, {mapping[o]: t for o, t in timing.end.items()}
    )


def glue_last_stages(problem: Problem, schedule: Schedule) -> Schedule:
    """A FIFO schedule with every device that holds only a pipeline's last stage running
    each B right after its F (the model's ``last-stage glue`` dominance; never slower, see
    ``constraints.add_last_stage_glue``)."""
    if problem.split_backward:
        return schedule
    pl = schedule.placement
    orders = list(schedule.orders)
    changed = False
    for p in range(schedule.num_pipelines):
        last = schedule.num_stages(p) - 1
        d = pl.device(p, last)
        if pl.stages_on(d) != [(p, last)]:
            continue
        fwd = [op for op in orders[d] if op.kind is Kind.F]
        glued = tuple(x for op in fwd for x in (op, op._replace(kind=Kind.B)))
        if glued != orders[d]:
            orders[d] = glued
            changed = True
    if not changed:
        return schedule
    return Schedule(schedule.name, pl, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)


def hint_form(problem: Problem, known: KnownEval, glue: bool) -> KnownEval:
    """A known schedule in the form the model's symmetry and dominance constraints accept:
    FIFO-relabelled and (with ``glue``) last stages glued, re-timed; never slower."""
    sched, timing = relabel_microbatches(known.schedule, known.timing)
    if glue:
        g = glue_last_stages(problem, sched)
        if g is not sched:
            ev = evaluate_known(problem, g)
            if ev.fits and ev.makespan <= known.makespan:
                return ev
    return KnownEval(sched, known.makespan, timing, known.memory)


# ---- greedy memory-aware list scheduling ---------------------------------------------------
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
) -> Schedule | None:
    """Dispatch ops as devices become idle: a ready backward (B, then W) of the smallest
    microbatch first (``backward_first``; else forwards first), else the ready forward of
    the smallest microbatch whose activation fits the device's capacity; at most ``window``
    microbatches in flight. ``priority`` (a permutation of "FBW") overrides the kinds'
    order: "BFW" runs a weight gradient only when no B or fitting F is ready, so W's fill
    idle time and run when memory is needed (Zero Bubble's idea). Returns None when it
    deadlocks (memory full everywhere). ``inflight[(p, s)]``: stage (p, s) starts its k-th
    forward only after its (k - inflight[(p, s)])-th backward started (a per-stage warm-up
    depth; stages missing from it are not limited).

    With ``reserve`` a microbatch enters only when every device on its pipeline can hold
    its activations, which it reserves until they are freed: never deadlocks.

    ``slack``: dispatch the ready op of least slack instead, whatever its kind — its
    least start (head) plus ``slack[p]`` per earlier microbatch of its pipeline p, less
    its least time to the end (tail): ops on long remaining paths go first, and a later
    microbatch waits its turn (``slack[p]``: about the spacing of p's microbatches,
    ``microbatch_spacing``)."""
    D = placement.num_devices
    nst = problem.num_stages
    act = problem.costs.activation
    dev_of = {(p, s): placement.device(p, s) for p, s in problem.stages}
    caps = [problem.cap(d) for d in range(D)]
    if priority is None:
        priority = "BWF" if backward_first else "FBW"
    if sorted(priority) != ["B", "F", "W"]:
        raise ValueError(f"priority must be a permutation of 'FBW', got {priority!r}")
    prio = {Kind[c]: i for i, c in enumerate(priority)}
    if slack is not None:
        head, tail = heads_tails(problem, placement)
        rank = {m: j for mbs in problem.pipeline_microbatches.values() for j, m in enumerate(mbs)}

        def key(op: Op) -> tuple:
            k = op._replace(microbatch=0)
            return head[k] + slack[op.pipeline] * rank[op.microbatch] - tail[k], prio[op.kind], op.microbatch, op.stage
    else:
        def key(op: Op) -> tuple:
            return prio[op.kind], op.microbatch, op.stage
    B = problem.num_microbatches
    window = window or B
    ops_per_mb = [nst[p] * len(problem.kinds) for p in problem.microbatch2pipeline]
    done = [0] * B
    live = [0.0] * D
    free_at = [0] * D
    started = defaultdict(int)  # forwards minus backwards started per stage (for ``inflight``)
    ready: list[list[tuple[int, int, int, Op]]] = [[] for _ in range(D)]
    pending: list[tuple[int, int, Op]] = []  # (ready time, seq, op)
    releases: list[tuple[int, int, float]] = []  # (time, device, amount)
    finishes: list[int] = []  # end times of finished microbatches
    orders: list[list[Op]] = [[] for _ in range(D)]
    admitted = in_flight = seq = 0
    remaining = len(problem.ops)
    need: dict[int, dict[int, float]] = {}
    for p in set(problem.microbatch2pipeline):
        need[p] = defaultdict(float)
        for s_ in range(nst[p]):
            need[p][dev_of[(p, s_)]] += act[(p, s_)]

    def admissible(m: int) -> bool:
        if not reserve:
            return True
        return all(caps[d] is None or live[d] + a <= caps[d] + 1e-9
                   for d, a in need[problem.microbatch2pipeline[m]].items())

    t = 0
    while remaining:
        while releases and releases[0][0] <= t:
            _, d, a = heapq.heappop(releases)
            live[d] -= a
        while finishes and finishes[0] <= t:
            heapq.heappop(finishes)
            in_flight -= 1
        while admitted < B and in_flight < window and admissible(admitted):
            m = admitted
            if reserve:
                for d, a in need[problem.microbatch2pipeline[m]].items():
                    live[d] += a
            heapq.heappush(pending, (t, seq, Op(Kind.F, problem.microbatch2pipeline[m], 0, m)))
            seq += 1
            admitted += 1
            in_flight += 1
        while pending and pending[0][0] <= t:
            rt, _, op = heapq.heappop(pending)
            heapq.heappush(ready[dev_of[(op.pipeline, op.stage)]], (key(op), op))
        for d in range(D):
            if free_at[d] > t or not ready[d]:
                continue
            skipped = []
            chosen = None
            while ready[d]:
                item = heapq.heappop(ready[d])
                op = item[1]
                if op.kind is Kind.F and caps[d] is not None and not reserve:
                    if live[d] + act[(op.pipeline, op.stage)] > caps[d] + 1e-9:
                        skipped.append(item)
                        continue
                if (op.kind is Kind.F and inflight is not None
                        and started[(op.pipeline, op.stage)] >= inflight.get((op.pipeline, op.stage), B)):
                    skipped.append(item)
                    continue
                chosen = op
                break
            for it in skipped:
                heapq.heappush(ready[d], it)
            if chosen is None:
                continue
            op = chosen
            end = t + problem.duration(op)
            free_at[d] = end
            orders[d].append(op)
            remaining -= 1
            if op.kind is Kind.F:
                if not reserve:
                    live[d] += act[(op.pipeline, op.stage)]
            else:
                freed = -memory_change(op.kind, act[(op.pipeline, op.stage)],
                                       problem.weight_part(op.pipeline, op.stage), problem.split_backward)
                if freed > 0:
                    heapq.heappush(releases, (end, d, freed))
            done[op.microbatch] += 1
            if op.kind is not Kind.W:
                started[(op.pipeline, op.stage)] += 1 if op.kind is Kind.F else -1
            if done[op.microbatch] == ops_per_mb[op.microbatch]:
                heapq.heappush(finishes, end)
            for nxt in _successors(op, nst[op.pipeline], problem.split_backward):
                nd = dev_of[(nxt.pipeline, nxt.stage)]
                rt = end + (problem.lag(op, d, nd) if nd != d else 0)
                heapq.heappush(pending, (rt, seq, nxt))
                seq += 1
        if not remaining:
            break
        future = [x for x in (
            releases[0][0] if releases else None,
            finishes[0] if finishes else None,
            pending[0][0] if pending else None,
        ) if x is not None and x > t]
        future += [f for f in free_at if f > t]
        if not future:
            return None  # deadlock: every waiting forward lacks memory and nothing runs
        t = min(future)
    return problem.schedule(name, placement, orders)


def warmup_depths(problem: Problem) -> tuple[int, ...] | None:
    """Per device of a linear one-pipeline problem, how many forwards fit between its
    first forward's start and the earliest start of the first microbatch's backward there
    (the round trip through the later devices), at least 1 and at most what its memory
    holds: the warm-up depth of a Zero Bubble style schedule. None for other shapes."""
    if problem.num_pipelines != 1 or problem.num_stages[0] != problem.num_devices:
        return None
    S = problem.num_devices
    f = [problem.duration(Op(Kind.F, 0, s, 0)) for s in range(S)]
    b = [problem.duration(Op(Kind.B, 0, s, 0)) for s in range(S)]
    lag = [problem.lag(Op(Kind.F, 0, s, 0), s, s + 1) if s + 1 < S else 0 for s in range(S)]
    back = [problem.lag(Op(Kind.B, 0, s, 0), s, s - 1) if s else 0 for s in range(S)]
    f_start = [0] * S
    for s in range(1, S):
        f_start[s] = f_start[s - 1] + f[s - 1] + lag[s - 1]
    b_start = [0] * S
    b_start[S - 1] = f_start[S - 1] + f[S - 1]
    for s in range(S - 2, -1, -1):
        b_start[s] = b_start[s + 1] + b[s + 1] + back[s + 1]
    out = []
    for d in range(S):
        n = max(1, (b_start[d] - f_start[d]) // f[d])
        fit = problem.activations_fit(problem.cap(d), 0, d)
        out.append(int(min(n, fit)) if fit else int(n))
    return tuple(out)


def residency(problem: Problem, placement: Placement, p: int, s: int) -> int:
    """The least time an activation of stage (p, s) lives: from its forward's start through
    the later stages' forwards and backwards, with their messages, to its backward's end."""
    n = problem.num_stages[p]
    m = 0  # every microbatch of a pipeline has the same op times
    chain = [Op(Kind.F, p, k, m) for k in range(s, n)] + [Op(Kind.B, p, k, m) for k in range(n - 1, s - 1, -1)]
    t = sum(problem.duration(op) for op in chain)
    for a, b in zip(chain, chain[1:]):
        src, dst = placement.device(a.pipeline, a.stage), placement.device(b.pipeline, b.stage)
        t += problem.lag(a, src, dst) if src != dst else 0
    return t


def stage_limits(problem: Problem, placement: Placement, scale: float) -> dict[tuple[int, int], int]:
    """Per-stage warm-up depths for several stages per device (Little's law): ``scale``
    times a stage's activation lifetime (``residency``) over the time between two of its
    pipeline's microbatches on its device when that device is busy, at least 1; where a
    device's depths together need more than its memory cap, all of them shrink in
    proportion, so the list schedule cannot fill the memory and stall."""
    counts, work = problem.pipeline_counts, device_work(problem, placement)
    out = {}
    for p, s in problem.stages:
        gap = work[placement.device(p, s)] / counts[p]
        out[(p, s)] = max(1, math.ceil(scale * residency(problem, placement, p, s) / gap))
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
    """Per pipeline, the busiest device's work per microbatch of that pipeline: how far
    apart its microbatches pass when that device never idles (linear F=1, B=2: 3 slots;
    bidirectional: 6, its devices serve both directions)."""
    work = device_work(problem, placement)
    return {p: max(work[placement.device(p, s)] for s in range(problem.num_stages[p])) / n
            for p, n in problem.pipeline_counts.items()}


def _successors(op: Op, num_stages: int, split: bool) -> list[Op]:
    k, p, s, m = op
    out = []
    if k is Kind.F:
        out.append(Op(Kind.F, p, s + 1, m) if s + 1 < num_stages else Op(Kind.B, p, s, m))
    elif k is Kind.B:
        if s > 0:
            out.append(Op(Kind.B, p, s - 1, m))
        if split:
            out.append(Op(Kind.W, p, s, m))
    return out
