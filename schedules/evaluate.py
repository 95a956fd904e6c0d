"""The solver-free longest-path evaluator: the specification every other timing agrees with.

Each op starts as soon as (a) the previous op in its device's order has ended and (b) every
data predecessor has ended plus the lag of the edge (a transfer time when the two stages sit
on different devices). Because all constraints are difference constraints, this
as-soon-as-possible timing is simultaneously earliest for every op, hence makespan-optimal
for the given placement and order.

``run_orders`` is the one kernel: the table's layout and the level-3 simulator both call it
on per-op arrays (durations, lags) in the schedule's device order. Optionally each directed
link carries one message at a time, first come first served: a device's messages on a link
leave in its order, so each link is a running maximum along its sender's order. The kernel
advances every device by one op per round (numpy over the devices); with few devices a
plain loop that runs each device as far as its inputs allow is faster, and gives the same
times (the same additions and maxima).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

from .ops import Op

if TYPE_CHECKING:
    from .schedule import Schedule

Duration = Callable[[Op], float]
Lag = Callable[[Op, Op, bool], float]
"""``lag(pred, op, crosses_devices)``: extra delay between pred's end and op's start."""

ROUNDS_MIN_DEVICES = 24
"""Schedules with at least this many devices run the numpy rounds, fewer the plain loop
(where numpy's per-call cost outweighs a round's few ops; see experiments/bench_simulator)."""
ROUNDS_MIN_OPS, ROUNDS_STRETCH = 16, 256
"""Every ``ROUNDS_STRETCH`` rounds, the rounds hand over to the plain loop if they ran
fewer than ``ROUNDS_MIN_OPS`` ops a round so far."""


class DeadlockError(ValueError):
    """The per-device orders cannot all run: some devices wait on each other."""

    def __init__(self, message: str, cycle: list[tuple[int, Op, Op]]):
        super().__init__(message)
        self.cycle = cycle  # (device, op waiting at the head of its order, op it waits for)


def no_lag(pred: Op, op: Op, crosses: bool) -> float:
    return 0


@dataclass(frozen=True)
class Timing:
    """Start and end of every op of a schedule."""

    start: dict[Op, float]
    end: dict[Op, float]

    @property
    def makespan(self) -> float:
        return max(self.end.values())


def asap(schedule: Schedule, duration: Duration, lag: Lag = no_lag) -> Timing:
    """As-soon-as-possible timing of ``schedule`` with per-op ``duration`` and per-edge
    ``lag`` callables; raises ``DeadlockError`` naming the devices and ops that wait on
    each other when the orders cannot run. (The array form is ``run_orders``.)"""
    ops = schedule.ops.to_ops()
    dur = np.array([duration(op) for op in ops], float)
    pred, dev = schedule.pred, schedule.device
    lags = np.zeros(len(ops))
    for i in np.nonzero(pred >= 0)[0].tolist():
        q = int(pred[i])
        lags[i] = lag(ops[q], ops[i], bool(dev[q] != dev[i]))
    start, end, _ = run_orders(schedule, dur, lags)
    return Timing(dict(zip(ops, start.tolist())), dict(zip(ops, end.tolist())))


class Run(NamedTuple):
    """Per op (the schedule's op order): start, end and, with links, when the message
    into it left its sender (``sent``; None without links)."""

    start: np.ndarray
    end: np.ndarray
    sent: np.ndarray | None = None


def block_durations(schedule: Schedule, dur: np.ndarray, block_time: Callable[[tuple[Op, ...]], float]) -> np.ndarray:
    """``dur`` with every block's time (``block_time`` of its ops, asked once per
    ``Schedule.block_patterns``) on its first op and 0 on the others (the form
    ``run_orders`` runs blocks in)."""
    if not schedule.blocks:
        return dur
    out = np.array(dur, float)
    ids, patterns = schedule.block_patterns
    out[schedule.block_heads] = np.array([block_time(b) for b in patterns], float)[ids]
    out[schedule.block_members[1]] = 0.0
    return out


def _gates(schedule: Schedule, source: np.ndarray, wait: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op, a second input to wait for (index into the kernel's values; the sentinel
    when none) and its wait: a block's first op waits for the inputs of the block's other
    ops that come from outside the block."""
    n = len(source)
    gsrc = np.full(n, 2 * n, np.int64)
    gwait = np.zeros(n)
    firsts, members = schedule.block_members
    if not len(firsts):
        return gsrc, gwait
    pred = schedule.pred
    block_of = np.full(n, -1, np.int64)
    block_of[members] = firsts
    block_of[firsts] = firsts
    for f, m in zip(firsts.tolist(), members.tolist()):
        q = int(pred[m])
        if q >= 0 and block_of[q] == f:
            continue  # made inside the block
        gsrc[f], gwait[f] = source[m], wait[m]
    return gsrc, gwait


def run_orders(schedule: Schedule, dur: np.ndarray, lag: np.ndarray, link: np.ndarray | None = None) -> Run:
    """The ASAP run of ``schedule``: op i lasts ``dur[i]`` and may start ``lag[i]`` after
    its data predecessor ended. With ``link`` (per op, the id of the directed link its
    output crosses, -1 if it stays on its device) a link carries one message at a time in
    the sender's order. Blocks (``Schedule.blocks``) run as one op: ``dur`` gives the
    block's time on its first op and 0 on the rest (``block_durations``); the first waits
    for every input of the block, and the rest report the block's start. Raises
    ``DeadlockError``."""
    n = schedule.num_ops
    pred = schedule.pred
    dur = np.asarray(dur, float)
    lag = np.asarray(lag, float)
    # ``value`` holds every op's end, then (with links) every op's input arrival, then a
    # sentinel 0 for ops without a data predecessor; ``source[i]`` is where op i's input is
    source = np.where(pred >= 0, pred, 2 * n)
    succ = None
    if link is not None:
        crosses = (pred >= 0) & (schedule.device[np.maximum(pred, 0)] != schedule.device)
        source = np.where(crosses, n + np.arange(n), source)
        succ = np.full(n, -1, np.int64)
        succ[pred[crosses]] = np.nonzero(crosses)[0]
        wait = np.where(crosses, 0.0, lag)  # arrival already includes the message
    else:
        wait = lag
    value = np.full(2 * n + 1, -1.0)
    value[2 * n] = 0.0
    start = np.zeros(n)
    sent = np.zeros(n) if link is not None else None
    gates = _gates(schedule, source, wait) if schedule.blocks else None
    if schedule.num_devices >= ROUNDS_MIN_DEVICES:
        _rounds(schedule.offsets, dur, wait, source, value, start, succ, lag, link, sent, gates)
    else:
        _sweep(schedule.offsets, dur, wait, source, value, start, succ, lag, link, sent, gates)
    end = value[:n]
    if (end < 0).any():
        raise deadlock_error(schedule, end >= 0)
    if gates is not None:
        firsts, members = schedule.block_members
        start[members] = start[firsts]
    return Run(start, end.copy(), sent)


def _rounds(offsets, dur, wait, source, value, start, succ, lag, link, sent, gates=None) -> None:
    """Every round, each device whose next op has its input runs that op. ``head``,
    ``stop`` and ``free`` hold the devices still running, in a compact order. Where few
    devices run an op a round (on average fewer than ``ROUNDS_MIN_OPS``, looked at every
    ``ROUNDS_STRETCH`` rounds), the plain loop goes on from there: a cyclic schedule's
    expansion on 64 devices ran 0.54 s in rounds, 0.16 s so; 1F1B stays in rounds (0.04 s)."""
    head = offsets[:-1].copy()
    stop = offsets[1:].copy()
    running = head < stop
    head, stop = head[running], stop[running]
    free = np.zeros(len(head))
    n = len(dur)
    link_free = np.zeros(0 if link is None else int(link.max(initial=-1)) + 1)  # empty without links
    check_in = 0  # rounds until a device can have finished (each runs at most one op a round)
    rounds, ran_ops = 0, 0
    while head.size:
        rounds += 1
        if rounds % ROUNDS_STRETCH == 0 and ran_ops < ROUNDS_MIN_OPS * rounds:
            _sweep(offsets, dur, wait, source, value, start, succ, lag, link, sent, gates,
                   resume=(head, stop, free, link_free))
            return
        ready = value[source[head]]
        if gates is not None:
            other = value[gates[0][head]]
            both = np.maximum(ready + wait[head], other + gates[1][head]) - wait[head]
            ready = np.where((other < 0) | (ready < 0), -1.0, both)
        ok = ready >= 0
        if ok.all():
            ran = head
        else:
            if not ok.any():
                return  # deadlock: the caller names it
            ran, ready = head[ok], ready[ok]
        ran_ops += len(ran)
        s = np.maximum(ready + wait[ran], free if ran is head else free[ok])
        start[ran] = s
        e = s + dur[ran]
        value[ran] = e
        if ran is head:
            free = e
            head = head + 1
        else:
            free[ok] = e
            head[ok] += 1
        if succ is not None:
            nxt = succ[ran]
            sends = nxt >= 0
            if sends.any():
                lk, nxt = link[ran[sends]], nxt[sends]
                t = np.maximum(e[sends], link_free[lk])
                sent[nxt] = t
                arrive = t + lag[nxt]
                link_free[lk] = arrive
                value[n + nxt] = arrive
        check_in -= 1
        if check_in <= 0:
            left = stop - head
            running = left > 0
            if not running.all():
                head, stop, free, left = head[running], stop[running], free[running], left[running]
            check_in = int(left.min(initial=0))


def _sweep(offsets, dur, wait, source, value, start, succ, lag, link, sent, gates=None, resume=None) -> None:
    """Sweep the devices, running each one's order as far as its inputs allow, until no
    device can advance (plain Python on lists). ``resume``: ``_rounds``' state (the running
    devices' next op, end of order and free time, and the links' free times) to go on from."""
    n = len(dur)
    dur_l, wait_l, source_l = dur.tolist(), wait.tolist(), source.tolist()
    val = value.tolist()
    st = start.tolist()
    succ_l = succ.tolist() if succ is not None else None
    lag_l = lag.tolist()
    link_l = link.tolist() if link is not None else []
    if resume is None:
        link_free = [0.0] * (max(link_l, default=-1) + 1)  # empty without links
        sent_l = [0.0] * n
        bounds = [[a, b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        free = [0.0] * len(bounds)
    else:
        heads, stops, frees, links_free = resume
        link_free = links_free.tolist()
        sent_l = sent.tolist() if sent is not None else [0.0] * n
        bounds = [[a, b] for a, b in zip(heads.tolist(), stops.tolist())]
        free = frees.tolist()
    gsrc_l: list[int] | None = gates[0].tolist() if gates is not None else None
    gwait_l: list[float] = gates[1].tolist() if gates is not None else []
    progressed = True
    while progressed:
        progressed = False
        for d, (i, stop) in enumerate(bounds):
            i0, f = i, free[d]
            while i < stop:
                r = val[source_l[i]]
                if r < 0:
                    break
                r += wait_l[i]
                if gsrc_l is not None:
                    g = val[gsrc_l[i]]
                    if g < 0:
                        break
                    g += gwait_l[i]
                    if g > r:
                        r = g
                t = r if r > f else f
                st[i] = t
                f = t + dur_l[i]
                val[i] = f
                if succ_l is not None and succ_l[i] >= 0:
                    k, lk = succ_l[i], link_l[i]
                    lf = link_free[lk]
                    lf = f if f > lf else lf
                    sent_l[k] = lf
                    a = lf + lag_l[k]
                    link_free[lk] = a
                    val[n + k] = a
                i += 1
            if i != i0:
                bounds[d][0] = i
                free[d] = f
                progressed = True
    value[:] = val
    start[:] = st
    if sent is not None:
        sent[:] = sent_l


def deadlock_error(schedule: Schedule, done: np.ndarray) -> DeadlockError:
    """Describe the cycle of devices waiting on each other, given which ops ran (a mask in
    the schedule's op order)."""
    offsets, pred, device = schedule.offsets, schedule.pred, schedule.device
    waits: dict[int, tuple[int, int]] = {}  # device -> (index of its head, missing input)
    for d in range(schedule.num_devices):
        a, b = int(offsets[d]), int(offsets[d + 1])
        pending = np.nonzero(~done[a:b])[0]
        if pending.size:
            i = a + int(pending[0])
            q = int(pred[i])
            if q >= 0 and not done[q]:
                waits[d] = (i, q)
    # follow the wait-for chain from any blocked device until it repeats
    d = next(iter(waits))
    seen: list[int] = []
    while d not in seen:
        seen.append(d)
        d = int(device[waits[d][1]])
        if d not in waits:  # pragma: no cover - a blocked chain always ends in a cycle
            break
    cycle_devices = seen[seen.index(d):] if d in seen else seen
    op = schedule.ops.op
    cycle = [(dev, op(waits[dev][0]), op(waits[dev][1])) for dev in cycle_devices]
    parts = "; ".join(
        f"device {dev} waits at {a} for {q} (device {schedule.device_of(q)})" for dev, a, q in cycle
    )
    return DeadlockError(f"deadlock in schedule {schedule.name!r}: {parts}", cycle)
