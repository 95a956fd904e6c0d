"""A lower bound on the makespan by one sweep over the microbatches, solver-free, under FIFO
(the rules and why they bound every schedule: docs/cpsat.md, "Bounds that are bounds").
Several pipelines are swept one at a time, the others' ops left out: still a bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipetab.schedules.ops import Kind, Op

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..problem import Problem


def _chain(extra: np.ndarray, step: np.ndarray) -> np.ndarray:
    """x[s] = max(extra[s], x[s - 1] + step[s - 1]) for s = 0, 1, ... (x[0] = extra[0])."""
    q = np.concatenate([[0.0], np.cumsum(step)])[:len(extra)]
    return np.maximum.accumulate(extra - q) + q


class PipelineArrays:
    """One pipeline's per-stage durations (``f``, ``b``, ``w``), messages (``step_f``: F(s)
    start to F(s + 1) start; ``lag_b``), memory windows and device groups."""

    def __init__(self, problem: Problem, placement: Placement, p: int):
        n = problem.num_stages[p]
        self.n = n
        dev = [placement.device(p, s) for s in range(n)]
        dur = problem.duration
        self.f = np.array([dur(Op(Kind.F, p, s, 0)) for s in range(n)], float)
        self.b = np.array([dur(Op(Kind.B, p, s, 0)) for s in range(n)], float)
        self.w = np.array([dur(Op(Kind.W, p, s, 0)) if problem.split_backward else 0 for s in range(n)], float)
        lag_f = [problem.lag(Op(Kind.F, p, s, 0), dev[s], dev[s + 1]) if dev[s] != dev[s + 1] else 0
                 for s in range(n - 1)]
        lag_b = [problem.lag(Op(Kind.B, p, s + 1, 0), dev[s + 1], dev[s]) if dev[s] != dev[s + 1] else 0
                 for s in range(n - 1)]
        self.step_f = self.f[:-1] + np.array(lag_f, float)  # F(s) start -> F(s + 1) start
        self.lag_b = np.array(lag_b, float)  # B(s + 1) -> B(s) message
        # memory windows: (stage, kind, shift)
        self.windows = []
        held: dict[int, list[int]] = {}
        for s in range(n):
            held.setdefault(dev[s], []).append(s)
        for s in range(n):
            for kind, c in problem.window_shifts(p, s, problem.cap(dev[s]))[0]:
                self.windows.append((s, kind, c))
        # per device: its first stage and its F + B work per microbatch of this pipeline
        self.first = np.array([min(st) for st in held.values()], int)
        self.work = np.array([sum(self.f[s] + self.b[s] for s in st) for st in held.values()], float)
        self.single = {s: len(held[dev[s]]) == 1 for s in range(n)}
        self.device_of = dev


def sweep_lower_bound(problem: Problem, placement: Placement) -> int:
    """The makespan bound of the module docstring (0 when it gives nothing)."""
    best = 0.0
    opt = max((problem.optimizer(d) for d in range(problem.num_devices)), default=0)
    for p, count in problem.pipeline_counts.items():
        pl = PipelineArrays(problem, placement, p)
        best = max(best, _sweep(pl, count) + min(problem.optimizer(d) for d in pl.device_of))
    return int(np.ceil(best - 1e-9)) if best > 0 else 0 if opt == 0 else int(opt)


def _sweep(pl: PipelineArrays, count: int) -> float:
    """The latest end any rule forces, microbatch by microbatch (module docstring)."""
    n = pl.n
    fs = np.zeros((count, n))
    be = np.zeros((count, n))
    we = np.zeros((count, n))
    agg_b = np.full(len(pl.first), -np.inf)  # per device: max over j of F(s0, j) - j * work
    ws = np.array([s for s, _, _ in pl.windows], int)
    wk = np.array([kind is Kind.W for _, kind, _ in pl.windows], bool)
    wc = np.array([c for _, _, c in pl.windows], int)
    # one-stage devices: per window the release work r and the running max of F(s, j) - j (f + r)
    single = np.array([pl.single[s] for s in ws], bool)
    r = pl.b[ws] + np.where(wk, pl.w[ws], 0.0) if len(ws) else np.zeros(0)
    run = np.full((count, len(ws)), -np.inf)
    runb = np.full((count, len(ws)), -np.inf)  # the same from the start of B(s, j)
    for i in range(count):
        extra = fs[i - 1] + pl.f if i else np.zeros(n)
        on = wc <= i
        if on.any():
            s_on, k = ws[on], i - wc[on]
            rel = np.where(wk[on], we[k, s_on], be[k, s_on])
            idx = np.flatnonzero(on)
            agg = np.maximum(run[k, idx] + i * pl.f[s_on] + (k + 1) * r[on],
                             runb[k, idx] + (k + 1) * (pl.f[s_on] + r[on]) - pl.f[s_on])
            agg = np.where(single[on], agg, -np.inf)
            np.maximum.at(extra, s_on, np.maximum(rel, agg))
        fs[i] = _chain(extra, pl.step_f)
        if len(ws):
            run[i] = np.maximum(run[i - 1] if i else -np.inf, fs[i, ws] - i * (pl.f[ws] + r))
        first = np.zeros(n)
        first[n - 1] = fs[i, n - 1] + pl.f[n - 1] + pl.b[n - 1]
        if i:
            first = np.maximum(first, be[i - 1] + pl.b)
        agg_b = np.maximum(agg_b, fs[i, pl.first] - i * pl.work)
        first[pl.first] = np.maximum(first[pl.first], agg_b + (i + 1) * pl.work)
        be[i] = _b_chain(first, pl)
        we[i] = np.maximum(be[i], we[i - 1] if i else 0.0) + pl.w
        if len(ws):
            runb[i] = np.maximum(runb[i - 1] if i else -np.inf, be[i, ws] - pl.b[ws] - i * (pl.f[ws] + r))
    return float(max(we.max(), be.max()))


def _b_chain(first: np.ndarray, pl: PipelineArrays) -> np.ndarray:
    """B ends: be[s] = max(first[s], be[s + 1] + lag_b[s] + b[s]) from the last stage up."""
    rev = first[::-1]
    step = (pl.lag_b + pl.b[:-1])[::-1]
    return _chain(rev, step)[::-1]
