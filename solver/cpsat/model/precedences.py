"""Precedence families of the CP-SAT model: dependencies with their lags (free placement:
lags in placement literals), one op at a time per device (no-overlap, or exact order
literals under FIFO), fixed orders as chains, and the step's tails under the makespan.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from pipetab.schedules.ops import Op, data_successors

from .variables import Variables, min_lag, predecessor

if TYPE_CHECKING:
    from ortools.sat.python import cp_model


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
    total: cp_model.LinearExprT = sum(terms) if terms else 0
    v.lag_vars[key] = (total, aux)
    return total


def add_precedences(model: cp_model.CpModel, v: Variables) -> None:
    """Each op after its data predecessor ends, plus the transfer time across devices."""
    problem = v.problem
    for i, op in enumerate(v.ops):
        v.check()
        pred = predecessor(op, problem.num_stages[op.pipeline])
        if pred is None:
            continue
        if v.placement is None and pred.stage != op.stage:
            lag = _free_lag(model, v, pred, op)
        else:
            lag = min_lag(problem, v.placement, pred, op)  # 0 under free placement: one stage, one device
        model.add(v.start[i] >= v.end(v.index[pred]) + lag)
        v.lag[(pred, op)] = lag
    for block in problem.blocks:  # fixed orders: a block starts once every input of its ops is there
        first = v.index[block[0]]
        for op in block[1:]:
            pred = predecessor(op, problem.num_stages[op.pipeline])
            if pred is None or pred in block:
                continue
            j = v.index[pred]
            lag = min_lag(problem, v.placement, pred, op)
            model.add(v.start[first] >= v.start[j] + v.dur[j] + lag)


# ---- resources ------------------------------------------------------------------------------
def add_no_overlap(model: cp_model.CpModel, v: Variables, makespan_intervals: bool = False,
                   skip: frozenset[int] = frozenset()) -> None:
    """One op at a time per device (but ``skip``'s, whose order literals say it); with
    ``makespan_intervals`` (a redundant cut) also an interval from makespan - optimizer to the
    horizon, so the disjunctive propagators see the makespan."""
    problem = v.problem
    D = problem.num_devices
    for d in range(D):
        if d in skip:
            continue
        ivs = [v.interval[i] for i in v.device_ops(d)] if v.placement is not None else [alts[d] for alts in v.alt]
        ivs += v.block_intervals.get(d, [])
        if makespan_intervals and v.makespan is not None:
            opt = problem.optimizer(d)
            ivs.append(model.new_interval_var(
                v.makespan - opt, v.horizon - v.makespan + opt, v.horizon, f"tail_d{d}"))
        if len(ivs) > 1:
            model.add_no_overlap(ivs)


def _chain_distances(v: Variables) -> dict:
    """Least microbatch shift along precedence paths between op chains (kind, pipeline, stage):
    ``dist[a][c] = delta``: (a, j) ends before (c, i) starts whenever i - j >= delta (data edges
    shift 0, ``v.chain_shift`` edges k, one chain >= 0)."""
    problem = v.problem
    nodes = [(k, p, s) for p, s in problem.stages for k in problem.kinds]
    inf = math.inf
    dist = {a: {c: inf for c in nodes} for a in nodes}
    for k, p, s in nodes:
        for nx in data_successors(Op(k, p, s, 0), problem.num_stages[p], problem.split_backward):
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
    """Fixed placement under FIFO: two chains on a device interleave like a staircase, so one
    literal "a before c" per pair of their ops no precedence path orders (``_chain_distances``),
    with lit(a_j, c_i) => lit(a_j-1, c_i) and => lit(a_j, c_i+1): with the FIFO chains exactly
    the no-overlap, which it replaces. Only on one-stage devices (with several stages the
    interval model does better, docs/cpsat.md) and only up to ``limit`` literals in all.
    Returns the devices it covers."""
    problem = v.problem
    by_pipe = problem.pipeline_microbatches
    chains_on = {}
    assert v.placement is not None  # FAMILIES: fixed placement only
    for d in range(problem.num_devices):
        held = v.placement.stages_on(d)
        if len(held) == 1:
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
        for a, b in itertools.pairwise(order):
            ia, ib = v.index[a], v.index[b]
            model.add(v.start[ib] >= v.start[ia] + v.dur[ia])


# ---- tails: all-reduce and optimizer ---------------------------------------------------------
def add_makespan(model: cp_model.CpModel, v: Variables, orders=None, fifo: bool = False) -> None:
    """makespan >= each device's ops' end + its optimizer, and >= each replica group's
    all-reduce end (after its stages' last backward or W) + each member device's optimizer.
    Only release ops can be last (every F precedes its stage's B on the device): with fixed
    ``orders`` each device's last op and each stage's last release; under ``fifo`` the latter."""
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
        t = round(g.allreduce_time)
        for p, s in members:
            model.add(v.makespan >= ar + t + opt_of(p, s))
