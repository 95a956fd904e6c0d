"""Constraint families of the CP-SAT model, one function each, so every family can be
switched by a config value (see ``CpSatConfig``)."""

from __future__ import annotations

import math
from collections import defaultdict

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op

from .problem import Problem
from .variables import Variables, lifetime_min, min_lag, predecessor, successors


# ---- precedence with transfer lag --------------------------------------------------------
def _free_lag(model: cp_model.CpModel, v: Variables, pred: Op, op: Op):
    """Transfer lag of edge pred -> op under free placement: a linear expression in
    placement literals (t * [device(pred) != device(op)] for uniform links)."""
    problem = v.problem
    key = (pred.kind, pred.pipeline, pred.stage)
    if key in v.lag_vars:
        return v.lag_vars[key][0]
    D = problem.num_devices
    xa = v.x[(pred.pipeline, pred.stage)]
    xb = v.x[(op.pipeline, op.stage)]
    if D == 1:
        v.lag_vars[key] = (0, [])
        return 0
    if problem.costs.links.uniform:
        t = problem.lag(pred, 0, 1)
        if t == 0:
            v.lag_vars[key] = (0, [])
            return 0
        diff = model.new_bool_var(f"diff_{key[0]}p{key[1]}s{key[2]}")
        same = []
        for d in range(D):
            b = model.new_bool_var(f"same_{key[0]}p{key[1]}s{key[2]}_d{d}")
            model.add_implication(b, xa[d])
            model.add_implication(b, xb[d])
            model.add_bool_or([xa[d].Not(), xb[d].Not(), b])
            same.append(b)
        model.add(diff + sum(same) == 1)
        expr = t * diff
        v.lag_vars[key] = (expr, [("diff", diff, None, None)] + [("same", b, d, d) for d, b in enumerate(same)])
        return expr
    terms = []
    aux = []
    for d in range(D):
        for e in range(D):
            if d == e:
                continue
            t = problem.lag(pred, d, e)
            if t == 0:
                continue
            y = model.new_bool_var(f"pair_{key[0]}p{key[1]}s{key[2]}_{d}_{e}")
            model.add_implication(y, xa[d])
            model.add_implication(y, xb[e])
            model.add_bool_or([xa[d].Not(), xb[e].Not(), y])
            terms.append(t * y)
            aux.append(("pair", y, d, e))
    expr = sum(terms) if terms else 0
    v.lag_vars[key] = (expr, aux)
    return expr


def add_precedences(model: cp_model.CpModel, v: Variables) -> None:
    """Each op starts after its data predecessor ends plus the transfer time when the two
    stages sit on different devices."""
    problem = v.problem
    for i, op in enumerate(v.ops):
        v.check()
        pred = predecessor(op, problem.num_stages[op.pipeline])
        if pred is None:
            continue
        j = v.index[pred]
        if v.placement is not None or pred.stage == op.stage:
            lag = min_lag(problem, v.placement, pred, op) if v.placement is not None else 0
            model.add(v.start[i] >= v.start[j] + v.dur[j] + lag)
            v.lag[(pred, op)] = lag
        else:
            lag = _free_lag(model, v, pred, op)
            model.add(v.start[i] >= v.start[j] + v.dur[j] + lag)
            v.lag[(pred, op)] = lag


# ---- resources ------------------------------------------------------------------------------
def add_no_overlap(model: cp_model.CpModel, v: Variables, makespan_intervals: bool = False,
                   skip: frozenset[int] = frozenset()) -> None:
    """One op at a time per device (except the devices in ``skip``, whose order literals
    already say it). With ``makespan_intervals`` (a redundant cut), each device's
    no-overlap also holds an interval from makespan - optimizer time to the horizon, so
    the disjunctive propagators see the makespan."""
    problem = v.problem
    D = problem.num_devices
    for d in range(D):
        if not v.has_resources(d) or d in skip:
            continue
        if v.placement is not None:
            ivs = [v.interval[i] for i in v.device_ops(d)]
        else:
            ivs = [alts[d] for alts in v.alt]
        if makespan_intervals:
            opt = problem.optimizer(d)
            ivs.append(model.new_interval_var(
                v.makespan - opt, v.horizon - v.makespan + opt, v.horizon, f"tail_d{d}"))
        if len(ivs) > 1:
            model.add_no_overlap(ivs)


def _chain_distances(v: Variables) -> dict:
    """Least microbatch shift along precedence paths between op chains (kind, pipeline,
    stage): ``dist[a][c] = delta`` means op (a, j) ends before op (c, i) starts whenever
    i - j >= delta. Data edges shift 0; ``v.chain_shift`` edges (a FIFO memory window,
    the last-stage glue) shift k; moving along one chain shifts >= 0."""
    problem = v.problem
    nodes = [(k, p, s) for p, s in problem.stages for k in problem.kinds]
    inf = math.inf
    dist = {a: {c: inf for c in nodes} for a in nodes}
    for k, p, s in nodes:
        for nx in successors(Op(k, p, s, 0), problem.num_stages[p], problem.split_backward):
            dist[(k, p, s)][(nx.kind, p, nx.stage)] = 0
    for (a, c), shift in v.chain_shift.items():
        dist[a][c] = min(dist[a][c], shift)
    for m in nodes:  # Floyd-Warshall; a few dozen chains
        dm = dist[m]
        for a in nodes:
            am = dist[a][m]
            if am == inf:
                continue
            da = dist[a]
            for c in nodes:
                if am + dm[c] < da[c]:
                    da[c] = am + dm[c]
    return dist


def add_order_literals(model: cp_model.CpModel, v: Variables, limit: int) -> frozenset[int]:
    """Fixed placement under FIFO: the ops of one chain (kind, pipeline, stage) run in
    microbatch order, so two chains on one device interleave like a staircase. For every
    pair of ops of two chains on a device whose order no precedence path implies (see
    ``_chain_distances``), one literal "a before c" — true: a ends before c starts; false:
    c ends before a starts — with the staircase implications lit(a_j, c_i) => lit(a_j-1,
    c_i) and => lit(a_j, c_i+1). With the FIFO chains this is exactly the device's
    no-overlap, which it replaces. Only on devices holding one stage (two or three
    chains): with several stages per device (bidirectional, wave) the cross-pipeline pairs
    are dense and the interval model does better (docs/cpsat.md). Applied only when
    at most ``limit`` literals are needed in all (else the no-overlap stays everywhere).
    Returns the devices it covers."""
    problem = v.problem
    by_pipe = problem.pipeline_microbatches
    chains_on = {}
    for d in range(problem.num_devices):
        held = v.placement.stages_on(d)
        if len(held) == 1 and v.has_resources(d):
            (p, s), = held
            chains_on[d] = [(k, p, s) for k in problem.kinds]
    if not chains_on:
        return frozenset()
    dist = _chain_distances(v)
    pairs = []  # (chain a, chain c, j, i) in need of a literal
    for d, chains in chains_on.items():
        for x, a in enumerate(chains):
            for c in chains[x + 1:]:
                na, nc = len(by_pipe[a[1]]), len(by_pipe[c[1]])
                for i in range(nc):
                    # open: i - j < dist[a][c] (a_j not surely first) and j - i < dist[c][a]
                    lo = 0 if dist[a][c] == math.inf else max(0, i - dist[a][c] + 1)
                    hi = na if dist[c][a] == math.inf else min(na, i + dist[c][a])
                    pairs += [(a, c, j, i) for j in range(lo, hi)]
                    if len(pairs) > limit:
                        return frozenset()
    lits: dict[tuple, cp_model.IntVar] = {}
    for a, c, j, i in pairs:
        v.check()
        ia = v.index[Op(a[0], a[1], a[2], by_pipe[a[1]][j])]
        ic = v.index[Op(c[0], c[1], c[2], by_pipe[c[1]][i])]
        lit = model.new_bool_var(f"ord_{v.ops[ia]}_{v.ops[ic]}")
        model.add(v.start[ic] >= v.start[ia] + v.dur[ia]).only_enforce_if(lit)
        model.add(v.start[ia] >= v.start[ic] + v.dur[ic]).only_enforce_if(~lit)
        lits[(a, c, j, i)] = lit
        v.order_lits.append((lit, ia, ic))
    for (a, c, j, i), lit in lits.items():
        v.check()
        earlier = lits.get((a, c, j - 1, i))
        if earlier is not None:
            model.add_implication(lit, earlier)
        later = lits.get((a, c, j, i + 1))
        if later is not None:
            model.add_implication(lit, later)
    return frozenset(chains_on)


def add_order_chains(model: cp_model.CpModel, v: Variables, orders) -> None:
    """Fixed per-device orders as precedence chains (evaluate mode; no no-overlap needed)."""
    for order in orders:
        for a, b in zip(order, order[1:]):
            ia, ib = v.index[a], v.index[b]
            model.add(v.start[ib] >= v.start[ia] + v.dur[ia])


def add_memory(model: cp_model.CpModel, v: Variables, fifo: bool = False) -> list[str]:
    """An activation of (p, s, m) is live from its F's start to its B's end; with a split
    backward its part M - M_W until B's end and its part M_W until W's end
    (``Problem.lifetimes``, the accounting of ``schedules.memory``). One cumulative per
    device against its activation capacity (devices without a capacity are unconstrained).

    With ``fifo`` (every stage runs a pipeline's microbatches in one order) a device's
    live activations of one stage are a window of consecutive microbatches, so the memory
    windows of ``Problem.window_shifts`` are precedences; on a device that holds a single
    stage whose windows are exact they are the whole memory constraint and replace the
    cumulative. Returns the forms used."""
    problem = v.problem
    D = problem.num_devices
    caps = [problem.cap(d) for d in range(D)]
    if all(c is None for c in caps):
        return []
    forms: list[str] = []
    exact_devices: set[int] = set()
    if fifo and v.placement is not None:
        exact_devices = _add_fifo_memory_precedences(model, v)
        if exact_devices:
            forms.append("memory as FIFO precedences")
    act = problem.costs.activation
    sizes = [x for k in problem.stages for _, x in problem.lifetimes(*k)]
    scale = _memory_scale(sizes + [c for c in caps if c is not None])
    per_device: dict[int, list[tuple[object, int]]] = defaultdict(list)
    lmin = {(p, s, kind): lifetime_min(problem, v.placement, p, s, kind)
            for p, s in problem.stages for kind, _ in problem.lifetimes(p, s)}
    for m, p in enumerate(problem.microbatch2pipeline):
        for s in range(problem.num_stages[p]):
            v.check()
            if act[(p, s)] <= 0:
                continue
            if v.placement is not None:
                d = v.placement.device(p, s)
                if caps[d] is None or d in exact_devices or not v.has_resources(d):
                    continue  # no cumulative on this device: no lifetime needed
            f = v.index[Op(Kind.F, p, s, m)]
            for kind, part in problem.lifetimes(p, s):
                r = v.index[Op(kind, p, s, m)]
                name = f"life_{kind.value}p{p}s{s}m{m}"
                size = model.new_int_var(lmin[(p, s, kind)], v.horizon, name)
                v.lifetime_size[(p, s, m, kind)] = size
                demand = int(round(part * scale))
                if v.placement is not None:
                    iv = model.new_interval_var(v.start[f], size, v.end(r), name)
                    per_device[d].append((iv, demand))
                else:
                    for d2 in range(D):
                        iv = model.new_optional_interval_var(
                            v.start[f], size, v.end(r), v.x[(p, s)][d2], f"{name}_d{d2}")
                        per_device[d2].append((iv, demand))
    for d in range(D):
        if caps[d] is None or not per_device[d] or d in exact_devices or not v.has_resources(d):
            continue
        cap = int(math.floor(caps[d] * scale + 1e-9))
        if cap < 0:
            model.add_bool_or([])  # negative capacity: nothing fits
            continue
        ivs, dem = zip(*per_device[d])
        model.add_cumulative(list(ivs), list(dem), cap)
        if "cumulative" not in forms:
            forms.append("cumulative")
    return forms


def _add_fifo_memory_precedences(model: cp_model.CpModel, v: Variables) -> set[int]:
    """Under FIFO, the memory windows of ``Problem.memory_windows`` for each stage with the
    capacity of its device. Returns the devices holding one stage whose windows are exact."""
    problem = v.problem
    exact: set[int] = set()
    for d in range(problem.num_devices):
        keys = v.placement.stages_on(d)
        cap = problem.cap(d)
        if cap is None or not v.has_resources(d):
            continue
        for p, s in keys:
            shifts, is_exact = problem.window_shifts(p, s, cap)
            pairs, _ = problem.memory_windows(p, s, cap)
            for release, forward in pairs:
                v.check()
                model.add(v.start[v.index[forward]] >= v.end(v.index[release]))
            for kind, k in shifts:
                v.chain_shift[((kind, p, s), (Kind.F, p, s))] = k
            if len(keys) == 1 and is_exact:
                exact.add(d)
    return exact


def _memory_scale(values: list[float]) -> float:
    """Factor making activation sizes and capacities integral (exact for integers; bytes
    are integers; fractional sizes are scaled by up to 1e6)."""
    for scale in (1, 10, 100, 1000, 10**6):
        if all(abs(x * scale - round(x * scale)) < 1e-9 for x in values):
            return scale
    return 10**6


# ---- tails: all-reduce and optimizer ---------------------------------------------------------
def add_makespan(model: cp_model.CpModel, v: Variables, orders=None, fifo: bool = False) -> None:
    """makespan >= end of each device's ops + its optimizer time, and >= the end of every
    replica group's all-reduce (which starts after the last backward / W of all its member
    stages) + the optimizer time of each member's device. Only release ops (B, or W) can be
    last on a device: every F of a stage precedes that stage's B on the same device. With
    fixed ``orders`` only each device's last op (and each stage's last release op) count;
    under ``fifo`` only each stage's last release op."""
    problem = v.problem
    D = problem.num_devices
    rel = problem.release_kind
    opts = [problem.optimizer(d) for d in range(D)]
    uniform_opt = len(set(opts)) <= 1

    def opt_of(p: int, s: int):
        if v.placement is not None:
            return opts[v.placement.device(p, s)]
        if uniform_opt:
            return opts[0] if opts else 0
        return sum(opts[d] * v.x[(p, s)][d] for d in range(D))

    if orders is not None:
        last_ops = {order[-1] for order in orders if order}
        stage_last: dict[tuple[int, int], Op] = {}
        for order in orders:
            for op in order:
                if op.kind is rel:
                    stage_last[(op.pipeline, op.stage)] = op
        candidates = [v.index[op] for op in last_ops]
    elif fifo:
        # each stage's release ops run in microbatch order: its last one ends last
        last_mb = {p: mbs[-1] for p, mbs in problem.pipeline_microbatches.items()}
        stage_last = {(p, s): Op(rel, p, s, last_mb[p]) for p, s in problem.stages if p in last_mb}
        candidates = [v.index[op] for op in stage_last.values()]
    else:
        candidates = [i for i, op in enumerate(v.ops) if op.kind is rel]
    for i in candidates:
        op = v.ops[i]
        model.add(v.makespan >= v.end(i) + opt_of(op.pipeline, op.stage))
    for g_i, g in enumerate(problem.costs.replica_groups):
        members = set(g.stages)
        ar = v.ar[g_i]
        if orders is not None or fifo:
            ends = [v.index[stage_last[k]] for k in members if k in stage_last]
        else:
            ends = [i for i, op in enumerate(v.ops) if op.kind is rel and (op.pipeline, op.stage) in members]
        for i in ends:
            model.add(ar >= v.end(i))
        t = int(round(g.allreduce_time))
        for p, s in members:
            model.add(v.makespan >= ar + t + opt_of(p, s))


def add_period(model: cp_model.CpModel, v: Variables, orders=None, fifo: bool = False) -> None:
    """period >= last_d - first_d on every device d holding ops, with first_d at most the
    start of each op on d and last_d at least the end of each (minimizing the period
    makes them the device's first start and last end). Only ops that can be first (F) or
    last (the release op) count; with fixed ``orders`` each device's first and last op,
    under ``fifo`` each stage's first F and last release op. Fixed placement only."""
    problem = v.problem
    if v.placement is None:
        raise ValueError("the period objective needs a fixed placement (free placement is decomposed)")
    rel = problem.release_kind
    firsts: dict[int, list[int]] = defaultdict(list)
    lasts: dict[int, list[int]] = defaultdict(list)
    if orders is not None:
        for d, order in enumerate(orders):
            if order:
                firsts[d].append(v.index[order[0]])
                lasts[d].append(v.index[order[-1]])
    elif fifo:
        for p, mbs in problem.pipeline_microbatches.items():
            for s in range(problem.num_stages[p]):
                d = v.placement.device(p, s)
                firsts[d].append(v.index[Op(Kind.F, p, s, mbs[0])])
                lasts[d].append(v.index[Op(rel, p, s, mbs[-1])])
    else:
        for i, op in enumerate(v.ops):
            if op.kind is Kind.F:
                firsts[v.device[i]].append(i)
            if op.kind is rel:
                lasts[v.device[i]].append(i)
    for d in firsts:
        for i in firsts[d]:
            model.add(v.first[d] <= v.start[i])
        for i in lasts[d]:
            model.add(v.last[d] >= v.end(i))
        model.add(v.period >= v.last[d] - v.first[d])


# ---- symmetry and restrictions -------------------------------------------------------------
def add_symmetry_break(model: cp_model.CpModel, v: Variables) -> None:
    """Microbatches of one pipeline are identical, so relabelling them is a symmetry: fix
    their stage-0 forwards (all on one device) to start in microbatch order. Safe."""
    problem = v.problem
    for p, mbs in problem.pipeline_microbatches.items():
        for a, b in zip(mbs, mbs[1:]):
            ia = v.index[Op(Kind.F, p, 0, a)]
            ib = v.index[Op(Kind.F, p, 0, b)]
            model.add(v.start[ib] >= v.start[ia] + v.dur[ia])


def add_fifo(model: cp_model.CpModel, v: Variables) -> None:
    """Every stage runs each kind of op (F, B, W) of a pipeline's microbatches in
    microbatch order.

    This is WITHOUT LOSS OF GENERALITY (unlike a permutation flow shop, the jobs here are
    identical): take any feasible schedule and, on every stage (p, s) and for every kind,
    relabel the k-th op by start time as microbatch k of pipeline p. Times and devices do
    not change. Every dependency still holds: the first k ops of a kind on stage s+1 (say)
    have k distinct predecessors on stage s, each ended at least ``lag`` before, so the
    k-th starts at least ``lag`` after the k-th predecessor end on stage s — and the lag
    depends only on (kind, pipeline, stage) and the two stages' devices. Memory does not
    change either: a device's live activations at any time depend only on the multisets
    of F starts and release ends of each stage, which the relabelling keeps (and the k-th
    release ends after the k-th F starts, by the same argument along the chain). So some
    optimal schedule is FIFO, and bounds proven with FIFO are bounds of the unrestricted
    problem. ``tests/solver/test_cpsat_fifo.py`` checks equal optima on random instances
    (linear, bidirectional, wave, split backward, caps, latencies)."""
    problem = v.problem
    for p, mbs in problem.pipeline_microbatches.items():
        for s in range(problem.num_stages[p]):
            for k in problem.kinds:
                for a, b in zip(mbs, mbs[1:]):
                    v.check()
                    ia = v.index[Op(k, p, s, a)]
                    ib = v.index[Op(k, p, s, b)]
                    model.add(v.start[ib] >= v.start[ia] + v.dur[ia])


def add_device_symmetry(model: cp_model.CpModel, v: Variables) -> bool:
    """Free placement on identical devices with uniform links: device labels are
    interchangeable, so stage 0 of pipeline 0 goes on device 0 and a stage may use device
    d > 0 only if an earlier stage uses device d-1 (value precedence). Returns whether it
    applied."""
    problem = v.problem
    if v.placement is not None or not devices_identical(problem):
        return False
    D = problem.num_devices
    keys = list(problem.stages)
    model.add(v.x[keys[0]][0] == 1)
    for k in range(1, len(keys)):
        for d in range(1, D):
            earlier = [v.x[keys[j]][d - 1] for j in range(k)]
            model.add_bool_or(earlier).only_enforce_if(v.x[keys[k]][d])
    return True


def devices_identical(problem: Problem) -> bool:
    """Whether every device has the same capacity, persistent memory and optimizer time and
    every link the same cost (device labels are then interchangeable)."""
    c = problem.costs
    D = problem.num_devices
    return (
        c.links.uniform
        and len(set(c.capacity)) <= 1
        and len(set(c.persistent)) <= 1
        and len({problem.optimizer(d) for d in range(D)}) <= 1
    )


def add_last_stage_glue(model: cp_model.CpModel, v: Variables) -> bool:
    """Dominance (without loss of generality, needs FIFO): on a device that holds only the
    last stage of a pipeline (backward not split), B(k) starts right when F(k) ends.

    Take a FIFO schedule and the first k whose B does not follow its F: only forwards
    F(k+1..k+j) sit between them. Running B(k) first keeps the block's end (B(k) has the
    earliest effective release, so this is the earliest-release order of one machine),
    ends B(k) — the only op with a successor off the device — earlier, and starts the
    forwards later (less memory). Repeating this glues every pair. Returns whether it
    applied."""
    problem = v.problem
    if problem.split_backward or v.placement is None:
        return False
    applied = False
    for p, mbs in problem.pipeline_microbatches.items():
        last = problem.num_stages[p] - 1
        d = v.placement.device(p, last)
        if v.placement.stages_on(d) != [(p, last)]:
            continue
        for j, m in enumerate(mbs):
            f = v.index[Op(Kind.F, p, last, m)]
            b = v.index[Op(Kind.B, p, last, m)]
            model.add(v.start[b] == v.start[f] + v.dur[f])
            if j + 1 < len(mbs):
                # F(k+1) starts after F(k) ends (FIFO), when B(k) starts, so after B(k) ends
                nxt = v.index[Op(Kind.F, p, last, mbs[j + 1])]
                model.add(v.start[nxt] >= v.end(b))
        v.chain_shift[((Kind.B, p, last), (Kind.F, p, last))] = 1
        applied = True
    return applied


# ---- redundant cuts ---------------------------------------------------------------------------
def add_memory_chain(model: cp_model.CpModel, v: Variables) -> bool:
    """Pigeonhole cut (needs the stage-0 symmetry break): if k stage-0 activations of a
    pipeline exceed the device's capacity, then among microbatches j..j+k-1 (in stage-0
    order) one of the first k-1 has ended its ``Problem.chain_release`` op when the last
    starts (else k whole activations would be live), so start F(j+k-1) >= start F(j) +
    least time from a stage-0 F's start to that op's end."""
    problem = v.problem
    D = problem.num_devices
    applied = False
    for p, mbs in problem.pipeline_microbatches.items():
        if v.placement is not None:
            cap = problem.cap(v.placement.device(p, 0))
        else:
            caps = [problem.cap(d) for d in range(D)]
            cap = None if any(c is None for c in caps) else max(caps)
        fit = problem.activations_fit(cap, p, 0)
        if fit is None:
            continue
        k = fit + 1
        if k < 2 or k > len(mbs):
            continue
        L = lifetime_min(problem, v.placement, p, 0, problem.chain_release(p, 0))
        for j in range(len(mbs) - k + 1):
            ia = v.index[Op(Kind.F, p, 0, mbs[j])]
            ib = v.index[Op(Kind.F, p, 0, mbs[j + k - 1])]
            model.add(v.start[ib] >= v.start[ia] + L)
        applied = True
    return applied


def add_total_work(model: cp_model.CpModel, v: Variables) -> None:
    """Free placement: D * makespan >= all op durations + all optimizer times."""
    problem = v.problem
    D = problem.num_devices
    total = sum(v.dur) + sum(problem.optimizer(d) for d in range(D))
    model.add(D * v.makespan >= total)
