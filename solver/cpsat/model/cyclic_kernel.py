"""The CP-SAT model of one period of a periodic schedule (docs/cpsat.md, "The cyclic model"):
a block of k template microbatches at a fixed period P, each op at phase + P * q; one op (or
overlapped pair: ``pairing``'s literals over the phases) at a time per device modulo P, the
lags, FIFO with the wrap, the memory cap over the cyclic window. The objective is the makespan
of the first B microbatches.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op

from ..engine import SolverSetup, run_solver
from .bounds import memory_scale
from .cyclic import copies_bound, longest, op_windows, template_ops, template_pipelines
from .pairing import template_pairs
from .variables import Variables, add_pair_variables, min_lag, predecessor

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..params import CpSatConfig
    from ..problem import Problem
    from ..result import Status


@dataclass(frozen=True)
class CyclicSolve:
    """One solve at a fixed period: ``status``, the template's starts when found, the objective
    (the expansion's makespan) and the times."""

    status: Status
    starts: dict[Op, int] | None
    value: int | None
    wall_time: float
    det_time: float


class CyclicModel:
    """The periodic schedules of ``block`` microbatches on ``placement`` every ``period``;
    ``fifo``: the FIFO family (``CpSatConfig.uses("fifo")``); with ``Problem.overlap_pairs``
    ``v`` holds the pairs' literals and each op's end (``pairing``) in phase terms."""

    def __init__(self, problem: Problem, placement: Placement, block: int, period: int, config: CpSatConfig):
        t0 = time.perf_counter()
        self.problem, self.placement, self.block, self.period, self.config = problem, placement, block, period, config
        self.fifo = config.uses("fifo")
        self.model = m = cp_model.CpModel()
        self.ops = template_ops(problem, block)
        self.index = {op: i for i, op in enumerate(self.ops)}
        self.windows = op_windows(problem, placement, period)
        self.pipes = template_pipelines(problem, block)
        P = period
        self.start, self.phase = [], []
        for op in self.ops:
            lo, hi = self.windows[(op.kind, op.pipeline, op.stage)]
            t = m.new_int_var(lo, P - 1 + hi, f"t_{op}")
            ph = m.new_int_var(0, P - 1, f"ph_{op}")
            q = m.new_int_var(lo // P, (P - 1 + hi) // P, f"q_{op}")
            m.add(t == ph + P * q)
            self.start.append(t)
            self.phase.append(ph)
        self.v = Variables(problem, placement, 2 * P, ops=self.ops, index=self.index, start=self.phase,
                           dur=[self.dur(o) for o in self.ops], interval=[None] * len(self.ops),  # type: ignore[list-item]
                           device=[placement.device(o.pipeline, o.stage) for o in self.ops])
        self._devices()
        self._anchor()
        self._dependencies()
        if self.fifo:
            self._fifo()
        self._memory()
        self.makespan = self._objective()
        self.build_s = time.perf_counter() - t0

    def dur(self, op: Op) -> int:
        return self.problem.duration(op)

    def t(self, op: Op):
        return self.start[self.index[op]]

    def end(self, op: Op):
        """Op's end: its start plus its own time, or its pair's block's end (``v.ends``)."""
        i = self.index[op]
        e = self.v.ends[i] if self.v.ends else None
        return self.start[i] + self.dur(op) if e is None else self.start[i] + e - self.phase[i]

    def _anchor(self) -> None:
        """Time 0 is pipeline 0's first template start; every other pipeline's first starts
        within a period of it (moving a microbatch by a period relabels it as its next copy)."""
        p = min(self.pipes)
        self.model.add(self.t(Op(Kind.F, p, 0, self.pipes[p][0])) == 0)

    def _dependencies(self) -> None:
        pr, pl = self.problem, self.placement
        for op in self.ops:
            pred = predecessor(op, pr.num_stages[op.pipeline])
            if pred is not None:
                self.model.add(self.t(op) >= self.end(pred) + min_lag(pr, pl, pred, op))

    def _devices(self) -> None:
        """One op or pair at a time per device modulo the period: each interval (``pairing``'s,
        over the phases) and its next copy in one no-overlap; a pair's ops share a phase."""
        m, P, v = self.model, self.period, self.v
        pairs = template_pairs(self.problem, self.placement, self.ops) if self.problem.overlap_pairs else None
        if pairs is not None:
            add_pair_variables(m, v, pairs)
        by_device: dict = {}
        for i, (op, ph) in enumerate(zip(self.ops, self.phase)):
            alone = v.alone.get(i, True)
            by_device.setdefault(v.device[i], []).extend([
                m.new_fixed_size_interval_var(ph, v.dur[i], f"i_{op}") if alone is True else v.interval[i],
                m.new_optional_fixed_size_interval_var(ph + P, v.dur[i], alone, f"j_{op}")])
        for (i, _), (y, t) in v.pair_lits.items():
            by_device[v.device[i]] += [m.new_optional_fixed_size_interval_var(self.phase[i] + P, t, y, f"c{i}")]
        for d, ivs in by_device.items():
            m.add_no_overlap(ivs + v.block_intervals.get(d, []))

    def _fifo(self) -> None:
        """FIFO per stage and kind, the block's last before the next block's first (a period later)."""
        P = self.period
        for p, mbs in self.pipes.items():
            for s in range(self.problem.num_stages[p]):
                for k in self.problem.kinds:
                    chain = [Op(k, p, s, j) for j in mbs]
                    for a, b in itertools.pairwise(chain):
                        self.model.add(self.t(b) >= self.end(a))
                    self.model.add(self.t(chain[0]) + P >= self.end(chain[-1]))

    def _memory(self) -> None:
        """The cap over the cyclic window, per device with a cap (module docstring)."""
        pr, pl = self.problem, self.placement
        exact = self._memory_windows() if self.fifo else set()
        n_max = copies_bound(pr, pl, self.period, self.windows)
        sizes = [x for k in pr.stages for _, x in pr.lifetimes(*k)]
        caps = [pr.cap(d) for d in range(pr.num_devices)]
        scale = memory_scale(sizes + [c for c in caps if c is not None])
        per_device: dict[int, tuple[list, list, list]] = {}
        P = self.period
        for op in (o for o in self.ops if o.kind is Kind.F):
            p, s, j = op.pipeline, op.stage, op.microbatch
            if caps[d := pl.device(p, s)] is None or d in exact:
                continue
            ivs, dem, base = per_device.setdefault(d, ([], [], []))
            for kind, part in pr.lifetimes(p, s):
                r_op = Op(kind, p, s, j)
                n = self.model.new_int_var(0, n_max[(p, s)], f"n_{r_op}")
                r = self.model.new_int_var(0, P - 1, f"r_{r_op}")
                self.model.add(self.end(r_op) - self.t(op) == P * n + r)
                ph = self.phase[self.index[op]]
                end = self.model.new_int_var(0, 2 * P - 2, f"e_{r_op}")
                self.model.add(end == ph + r)
                demand = round(part * scale)
                ivs += [self.model.new_interval_var(ph, r, end, f"a_{r_op}"),
                        self.model.new_interval_var(ph + P, r, end + P, f"b_{r_op}")]
                dem += [demand, demand]
                base.append(demand * n)
        for d, (ivs, dem, base) in per_device.items():
            cap = math.floor(caps[d] * scale + 1e-9)  # type: ignore[operator]
            whole = self.model.new_int_var(0, cap, f"whole_d{d}")
            self.model.add(whole == sum(base))
            ivs.append(self.model.new_fixed_size_interval_var(0, 3 * P, f"whole_{d}"))
            dem.append(whole)
            self.model.add_cumulative(ivs, dem, cap)

    def _memory_windows(self) -> set[int]:
        """Under FIFO, ``Problem.window_shifts`` across blocks: release of the pipeline's i-th
        microbatch before F of its (i + c)-th (template (i + c) mod k_p, (i + c) div k_p periods
        later). Returns the one-stage devices where these are the whole memory constraint."""
        pr, pl, P = self.problem, self.placement, self.period
        exact = set()
        for d, cap in ((d, pr.cap(d)) for d in range(pr.num_devices) if pr.cap(d) is not None):
            held = pl.stages_on(d)
            for p, s in held:
                mbs = self.pipes.get(p, [])
                shifts, is_exact = pr.window_shifts(p, s, cap)
                for kind, c in shifts:
                    for i, j in enumerate(mbs):
                        nxt = mbs[(i + c) % len(mbs)]
                        rel = Op(kind, p, s, j)
                        self.model.add(self.t(Op(Kind.F, p, s, nxt)) + P * ((i + c) // len(mbs)) >= self.end(rel))
                if len(held) == 1 and is_exact:
                    exact.add(d)
        return exact

    def _objective(self):
        """The expansion's makespan: template j's last end (and optimizer) + (B - 1 - j) // k periods."""
        pr, P, k, most = self.problem, self.period, self.block, longest(self.problem, self.placement)
        B = pr.num_microbatches
        ends = [(op, (B - 1 - op.microbatch) // k * P + pr.optimizer(self.placement.device(op.pipeline, op.stage)))
                for op in self.ops if op.kind is pr.release_kind]
        hi = max(self.windows[(o.kind, o.pipeline, o.stage)][1] + most(o) + x for o, x in ends) + P
        makespan = self.model.new_int_var(0, hi, "makespan")
        for op, extra in ends:
            self.model.add(makespan >= self.end(op) + extra)
        self.model.minimize(makespan)
        return makespan

    # ---- hints and solves ------------------------------------------------------------------
    def hint(self, starts: dict[Op, int]) -> None:
        """Hint the starts (and phases) of a kernel of this block and period."""
        self.model.clear_hints()
        for op, t, ph in zip(self.ops, self.start, self.phase):
            self.model.add_hint(t, starts[op])
            self.model.add_hint(ph, starts[op] % self.period)
        for (i, j), (y, _) in self.v.pair_lits.items():
            self.model.add_hint(y, (starts[self.ops[i]] - starts[self.ops[j]]) % self.period == 0)

    def solve(self, wall: float, det: float | None = None, first: bool = False) -> CyclicSolve:
        """Solve within ``wall`` s (``det`` deterministic); ``first``: stop at the first schedule."""
        setup = SolverSetup.of(self.config, wall, det, open_search=True, first=first)
        done = run_solver(self.model, setup)
        starts = value = None
        if done.found:
            starts = {op: int(done.solver.value(t)) for op, t in zip(self.ops, self.start)}
            value = int(done.solver.value(self.makespan))
        return CyclicSolve(done.status, starts, value, done.wall, done.solver.response_proto.deterministic_time)
