"""Plain per-op reference implementations, written for the tests only: the array core
(``schedules.evaluate.run_orders``, table metrics, the simulator, the validator) must give
exactly what these give. They work op by op on ``Op`` values and dicts, in the simplest
way that is obviously right, and share no code with the library beyond ``Op`` and the
``Schedule`` / ``Costs`` values they read."""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import defaultdict
from unittest.mock import patch

from hypothesis import strategies as st

from pipetab.schedules import evaluate, registry
from pipetab.schedules.ops import Kind, Op, data_predecessors


@st.composite
def cases(draw, max_stages=14, max_microbatches=48):
    """Any registered schedule with valid parameters (both kernels' device counts)."""
    name = draw(st.sampled_from(sorted(registry.REGISTRY)))
    even = name.startswith("chimera")
    S = draw(st.sampled_from(range(2, max_stages + 1, 2)) if even else st.integers(2, max_stages))
    per = 2 * S if name == "chimera-fd" else S
    if name in ("chimera", "chimera-asym", "chimera-fd", "hanayo", "interleaved", "interleaved-zb"):
        B_ = per * draw(st.integers(1, max(1, max_microbatches // per)))
    elif name == "dualpipev":
        B_ = draw(st.integers(2 * S, 2 * S + max_microbatches // 2))
    elif name == "dualpipe":
        S += S % 2
        B_ = 2 * draw(st.integers(S, S + max_microbatches // 4))
    else:
        B_ = draw(st.integers(1, max_microbatches))
    opts = {}
    if name == "hanayo":
        opts["waves"] = draw(st.integers(1, 2))
    if name in ("interleaved", "interleaved-zb", "looped-bfs"):
        opts["chunks"] = draw(st.integers(2, 3))
    if name == "chimera-asym":
        opts["split"] = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    if name.startswith("dualpipe"):
        opts["overlap"] = draw(st.booleans())
    return registry.generate(name, S, B_, **opts)


def ref_run(schedule, duration, lag, contention=False, block_time=None):
    """ASAP run: (start, end, transfers) with transfers {(producer, consumer): (start, end)}.

    Event-driven: an op is released when the previous op of its device ended and its input
    arrived; with ``contention`` each directed link sends one message at a time, in the
    order the messages became ready (ties by the producer's position in the orders). A
    block (``schedule.blocks``) is released when the op before it ended and every input
    its ops take from outside it arrived; all its ops then run from that time for
    ``block_time(block)`` (default: the sum of their durations)."""
    block_time = block_time or (lambda ops: sum(duration(op) for op in ops))
    block_of = {op: b for b in schedule.blocks for op in b}
    nstages = [schedule.num_stages(p) for p in range(schedule.num_pipelines)]
    dev = {op: d for d, order in enumerate(schedule.orders) for op in order}
    pos = {op: i for i, op in enumerate(op for order in schedule.orders for op in order)}
    prev = {}
    for order in schedule.orders:
        for a, b in itertools.pairwise(order):
            prev[b] = a
    pred = {op: (data_predecessors(op, nstages[op.pipeline]) or (None,))[0] for op in dev}
    consumers = defaultdict(list)
    for op, q in pred.items():
        if q is not None:
            consumers[q].append(op)
    start, end, transfers, arrive = {}, {}, {}, {}
    link_free = defaultdict(float)
    waiting = []  # (ready time, producer position, producer, consumer)

    next_on_device = {a: b for b, a in prev.items()}

    def inputs_ready(op):
        block = block_of.get(op, (op,))
        return all(pred[x] is None or x in arrive or pred[x] in block for x in block)

    def runnable(op):
        if op in block_of and block_of[op][0] != op:
            return False  # runs with its block's first op
        return op not in end and (op not in prev or prev[op] in end) and inputs_ready(op)

    def run_from(todo):
        while todo:
            op = todo.pop()
            if not runnable(op):
                continue
            block = block_of.get(op, (op,))
            t = max([end[prev[op]] if op in prev else 0.0]
                    + [arrive[x] for x in block if x in arrive and pred[x] not in block])
            span = block_time(block) if len(block) > 1 else duration(op)
            for x in block:
                start[x], end[x] = t, t + span
            for x in block:
                run_outputs(x, todo)
            if block[-1] in next_on_device:
                todo.append(next_on_device[block[-1]])

    def run_outputs(op, todo):
        if True:
            for c in consumers[op]:
                crosses = dev[c] != dev[op]
                if contention and crosses:
                    heapq.heappush(waiting, (end[op], pos[op], op, c))
                else:
                    arrive[c] = end[op] + lag(op, c, crosses)
                    if crosses:
                        transfers[(op, c)] = (end[op], arrive[c])
                    todo.append(c)
                    if c in block_of:
                        todo.append(block_of[c][0])

    run_from([order[0] for order in schedule.orders if order])
    while waiting:
        ready, _, op, c = heapq.heappop(waiting)
        key = (dev[op], dev[c])
        s = max(ready, link_free[key])
        arrive[c] = link_free[key] = s + lag(op, c, True)
        transfers[(op, c)] = (s, arrive[c])
        run_from([c] + ([block_of[c][0]] if c in block_of else []))
    return start, end, transfers


def ref_live_peaks(events_by_device, base):
    """Per device: sorted (time, allocation?, delta...) events summed from ``base``;
    returns (steps, peak) per device."""
    out = []
    for d, events in enumerate(events_by_device):
        level = base[d]
        steps = [(0.0, level)]
        for t, _, delta in sorted(events):
            level += delta
            steps.append((t, level))
        out.append((steps, max(level for _, level in steps)))
    return out


def _change(kind, size, part, split):
    if kind is Kind.F:
        return size
    if kind is Kind.B:
        return -(size - part) if split else -size
    return -part


def ref_table_metrics(table, schedule, fraction):
    """(busy, peak counts, peak shares) per device, counting cells and memory events."""
    busy = [0] * table.num_devices
    count_events = [[] for _ in range(table.num_devices)]
    spans = set()
    for e in table.entries:
        if (e.device, e.start, e.end) not in spans:  # the ops of a block share their slots
            busy[e.device] += e.duration
        spans.add((e.device, e.start, e.end))
        size = schedule.activation_share(e.op.pipeline, e.op.stage)
        dc = _change(e.op.kind, 1.0, fraction, schedule.split_backward)
        ds = _change(e.op.kind, size, fraction * size, schedule.split_backward)
        t = e.start if e.op.kind is Kind.F else e.end
        count_events[e.device].append((t, dc > 0, dc, ds))
    peaks_c, peaks_s = [], []
    for events in count_events:
        c = s = pc = ps = 0.0
        for _, _, dc, ds in sorted(events):
            c += dc
            s += ds
            pc, ps = max(pc, c), max(ps, s)
        peaks_c.append(pc)
        peaks_s.append(ps)
    return busy, peaks_c, peaks_s


def ref_simulation(schedule, costs):
    """Everything the simulator reports, op by op: start, end, transfers, all-reduces,
    optimizer steps, busy time and each device's memory steps and peak activation."""
    def lag(op, consumer, crosses):
        return costs.transfer(op, schedule.device_of(op), schedule.device_of(consumer)) if crosses else 0

    start, end, transfers = ref_run(schedule, costs.duration, lag, costs.contention, costs.block_time)
    last = Kind.W if schedule.split_backward else Kind.B
    ready = [0.0] * schedule.num_devices
    for op, e in end.items():
        ready[schedule.device_of(op)] = max(ready[schedule.device_of(op)], e)
    allreduces = []
    for g in costs.replica_groups:
        s = max([0.0] + [e for op, e in end.items() if op.kind is last and (op.pipeline, op.stage) in g.stages])
        allreduces.append((g.stages, s, s + g.allreduce_time))
        for p, stage in g.stages:
            d = schedule.placement.device(p, stage)
            ready[d] = max(ready[d], s + g.allreduce_time)
    opt = costs.optimizer_time or (0,) * schedule.num_devices
    optimizer = tuple((r, r + opt[d]) for d, r in enumerate(ready))
    busy = [0.0] * schedule.num_devices
    later = {op for b in schedule.blocks for op in b[1:]}  # they run within their block's first op
    for order in schedule.orders:
        for op in order:
            if op not in later:
                busy[schedule.device_of(op)] += end[op] - start[op]
    busy = tuple(b + (e - s) for b, (s, e) in zip(busy, optimizer))
    events = [[] for _ in range(schedule.num_devices)]
    for op in start:
        delta = _change(op.kind, costs.activation[(op.pipeline, op.stage)],
                        costs.weight_part(op.pipeline, op.stage), schedule.split_backward)
        if delta:
            t = start[op] if op.kind is Kind.F else end[op]
            events[schedule.device_of(op)].append((t, delta > 0, delta))
    memory = ref_live_peaks(events, costs.persistent)
    return {
        "start": start, "end": end, "transfers": transfers, "allreduces": tuple(allreduces),
        "optimizer": optimizer, "busy": busy, "timelines": [m[0] for m in memory],
        "peak_activation": tuple(p - b for (_, p), b in zip(memory, costs.persistent)),
    }


# ---- the object generators the array ones replaced --------------------------------------
def ref_one_f_one_b_orders(stages, microbatches, warmup=None):
    orders = []
    for d in range(stages):
        w = min(stages - 1 - d, microbatches) if warmup is None else warmup
        order = [Op(Kind.F, 0, d, m) for m in range(w)]
        for k in range(microbatches - w):
            order += [Op(Kind.F, 0, d, w + k), Op(Kind.B, 0, d, k)]
        order += [Op(Kind.B, 0, d, m) for m in range(microbatches - w, microbatches)]
        orders.append(tuple(order))
    return tuple(orders)


def ref_zb_h1_orders(stages, microbatches):
    orders = []
    for d, base in enumerate(ref_one_f_one_b_orders(stages, microbatches)):
        order, next_w = [], 0
        for op in base:
            order.append(op)
            if op.kind is Kind.B and op.microbatch >= d:
                order.append(Op(Kind.W, 0, d, op.microbatch - d))
                next_w = op.microbatch - d + 1
        order += [Op(Kind.W, 0, d, m) for m in range(next_w, microbatches)]
        orders.append(tuple(order))
    return tuple(orders)


def ref_interleaved_orders(devices, microbatches, chunks):
    group, total = devices * chunks, chunks * microbatches
    orders = []
    for d in range(devices):
        def op(kind, k):
            m, c = (k // group) * devices + k % devices, (k % group) // devices
            c = c if kind is Kind.F else chunks - 1 - c
            return Op(kind, 0, c * devices + d, m)

        w = min((chunks - 1) * devices + 2 * (devices - 1 - d), total)
        order = [op(Kind.F, k) for k in range(w)]
        for k in range(total - w):
            order += [op(Kind.F, k + w), op(Kind.B, k)]
        order += [op(Kind.B, k) for k in range(total - w, total)]
        orders.append(tuple(order))
    return tuple(orders)


# ---- the object validator the array one replaced -----------------------------------------
def ref_validate_message(table):
    """The message of the first broken rule (None if valid), checked entry by entry."""
    counts = defaultdict(int)
    for e in table.entries:
        counts[e.op] += 1
        if counts[e.op] == 2:
            return f"op {e.op} appears twice (again on device {e.device} at slot {e.start})"
    where, mb2pipe, split = {}, {}, False
    for e in table.entries:
        op = e.op
        if not 0 <= e.device < table.num_devices:
            return f"op {op} is on device {e.device}; devices are 0..{table.num_devices - 1}"
        if e.start < 0 or e.duration < 1:
            return f"op {op} on device {e.device} has start {e.start} and duration {e.duration}"
        if where.setdefault((op.pipeline, op.stage), e.device) != e.device:
            return (f"stage {op.stage} of pipeline {op.pipeline} runs on devices "
                    f"{where[(op.pipeline, op.stage)]} and {e.device} (op {op} at slot {e.start})")
        if mb2pipe.setdefault(op.microbatch, op.pipeline) != op.pipeline:
            return (f"microbatch {op.microbatch} appears in pipelines {mb2pipe[op.microbatch]} and "
                    f"{op.pipeline} (op {op} on device {e.device}, slot {e.start})")
        split |= op.kind is Kind.W
    num_mb = max(mb2pipe) + 1
    for m in range(num_mb):
        if m not in mb2pipe:
            return f"microbatch {m} has no ops (microbatches must be numbered 0..{num_mb - 1})"
    num_pipes = max(p for p, _ in where) + 1
    nstages = []
    for p in range(num_pipes):
        n = max((s for q, s in where if q == p), default=-1) + 1
        if n == 0:
            return f"pipeline {p} has no ops (pipelines must be numbered 0..{num_pipes - 1})"
        for s in range(n):
            if (p, s) not in where:
                return f"stage {s} of pipeline {p} has no ops"
        nstages.append(n)
    kinds = (Kind.F, Kind.B, Kind.W) if split else (Kind.F, Kind.B)
    for m in range(num_mb):
        p = mb2pipe[m]
        for s in range(nstages[p]):
            for k in kinds:
                if Op(k, p, s, m) not in counts:
                    return f"op {Op(k, p, s, m)} is missing (expected on device {where[(p, s)]})"
    by_device = defaultdict(list)
    spans = defaultdict(list)  # ops sharing a device's slots: a block when legal
    for e in table.entries:
        by_device[e.device].append(e)
        spans[(e.device, e.start, e.end)].append(e.op)

    def legal(ops):
        fs = [o for o in ops if o.kind is Kind.F]
        bs = [o for o in ops if o.kind is Kind.B]
        ws = [o for o in ops if o.kind is Kind.W]
        return (2 <= len(ops) <= 3 and len(fs) <= 1 and len(bs) == 1 and len(ws) <= 1
                and all(w[1:] == bs[0][1:] for w in ws) and all(f[1:] != bs[0][1:] for f in fs))

    def together(a, b):
        return (a.device, a.start, a.end) == (b.device, b.start, b.end) and a.end > a.start \
            and legal(spans[(a.device, a.start, a.end)])

    for d in range(table.num_devices):
        for a, b in zip(by_device[d], by_device[d][1:]):
            if b.start < a.end and not together(a, b):
                return f"device {d} runs {a.op} and {b.op} in slot {b.start}"
    by_op = {e.op: e for e in table.entries}
    for e in table.entries:
        for q in data_predecessors(e.op, nstages[e.op.pipeline]):
            if together(by_op[q], e):
                continue
            if by_op[q].end > e.start:
                return (f"op {e.op} on device {e.device} starts at slot {e.start} before its "
                        f"dependency {q} ends at slot {by_op[q].end}")
    return None


def ref_schedule_message(schedule_name, placement, microbatch2pipeline, orders, split):
    """The message of the first op (in device order) that breaks a schedule's rules, or of
    the first missing op (None if the orders are a schedule), checked op by op."""
    kinds = (Kind.F, Kind.B, Kind.W) if split else (Kind.F, Kind.B)
    expected = {Op(k, p, s, m) for m, p in enumerate(microbatch2pipeline)
                for s in range(placement.num_stages(p)) for k in kinds}
    seen = set()
    for d, order in enumerate(orders):
        for op in order:
            if op in seen:
                return f"op {op} appears twice in schedule {schedule_name!r}"
            if op not in expected:
                return f"op {op} on device {d} is not part of schedule {schedule_name!r}"
            if placement.device(op.pipeline, op.stage) != d:
                return (f"op {op} is ordered on device {d} but placed on device "
                        f"{placement.device(op.pipeline, op.stage)}")
            seen.add(op)
    missing = expected - seen
    if missing:
        first = min(missing, key=lambda o: (o.microbatch, o.pipeline, o.stage, o.kind.value))
        return f"op {first} is missing from schedule {schedule_name!r} ({len(missing)} missing)"
    return None


KERNELS = ("rounds", "loop", "handoff")


def kernel(mode: str, stretch: int = 1):
    """The simulator's kernel, whatever the size: the numpy rounds, the plain loop, or the
    rounds handing over to the loop after ``stretch`` rounds."""
    stack = contextlib.ExitStack()
    stack.enter_context(patch.object(evaluate, "ROUNDS_MIN_DEVICES", 10**9 if mode == "loop" else 1))
    if mode == "handoff":
        stack.enter_context(patch.object(evaluate, "ROUNDS_MIN_OPS", 10**9))
        stack.enter_context(patch.object(evaluate, "ROUNDS_STRETCH", stretch))
    elif mode == "rounds":
        stack.enter_context(patch.object(evaluate, "ROUNDS_MIN_OPS", 0))
    return stack
