"""``CpSatModel``: the CP-SAT model of one problem (variables, constraint families, the
objective), hinted from a known schedule and solved into a ``RawSolve``, in model terms.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Placement, Schedule

from ..engine import SolverSetup, run_solver, solver_for
from ..result import Status
from .families import FAMILIES, Build
from .objectives import objective
from .pairing import chosen_pairs, hint_pairs, pair_candidates
from .variables import Variables

if TYPE_CHECKING:
    from pipetab.schedules.evaluate import Timing

    from ..params import CpSatConfig
    from ..problem import Problem

@dataclass(frozen=True)
class RawSolve:
    """What one CP-SAT solve returned, without OR-Tools types."""

    status: Status
    makespan: int | None  # the objective's value (the step makespan or the period)
    bound: int | None
    starts: dict[Op, int] | None
    placement: Placement | None
    wall_time: float
    det_time: float
    first_solution_time: float | None
    num_solutions: int
    stalled: bool = False  # stopped early: no better solution for ``stall_s`` seconds
    pairs: tuple[tuple[Op, Op], ...] = ()  # overlapped pairs the solution chose


class _Progress(cp_model.CpSolverSolutionCallback):
    """Time and objective of each improving solution, passed to ``on_solution`` when given."""

    def __init__(self, t0: float, on_solution=None):
        super().__init__()
        self.t0 = t0
        self.trace: list[tuple[float, float]] = []
        self.on_solution = on_solution

    def on_solution_callback(self) -> None:
        self.trace.append((time.perf_counter() - self.t0, self.objective_value))
        if self.on_solution is not None:
            self.on_solution(round(self.objective_value))

    def since_progress(self) -> float:
        """Seconds since the last solution (or since the solve began)."""
        now = time.perf_counter() - self.t0
        return now - (self.trace[-1][0] if self.trace else 0.0)


class Stop(Protocol):
    """What ends a solve early once set: an event, or a ``strategy.StopSignal``."""

    def is_set(self) -> bool: ...


class _Watch:
    """Stops ``solver`` after ``stall_s`` without a solution or once ``stop`` is set (polls at 10 Hz)."""

    def __init__(self, solver: cp_model.CpSolver, progress: _Progress, stall_s: float | None,
                 stop: Stop | None):
        self.stalled = False
        self._done = threading.Event()

        def watch() -> None:
            while not self._done.wait(0.1):
                if stop is not None and stop.is_set():
                    solver.stop_search()
                    return
                if stall_s is not None and progress.since_progress() > stall_s:
                    self.stalled = True
                    solver.stop_search()
                    return

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


class CpSatModel:
    """The model of ``problem`` with ``placement`` fixed (None: free) and optionally fixed
    per-device ``orders`` (evaluate mode): the ``families.FAMILIES`` that apply and are not
    ablated, then the objective minimized. ``horizon`` bounds every time (an upper bound of some
    optimal schedule); ``makespan_lb``: a known lower bound; ``objective_cap``: only schedules of
    objective at most this (a period probe); building past ``deadline`` (perf_counter) raises
    ``BuildTimeout``. ``mirror`` pairs and a pair set cut ``around`` a schedule are
    restrictions: such a model's bounds and proofs are not the problem's."""

    def __init__(
        self,
        problem: Problem,
        config: CpSatConfig,
        placement: Placement | None,
        horizon: int,
        orders=None,
        makespan_lb: int = 0,
        objective_cap: int | None = None,
        deadline: float | None = None,
        mirror=None,
        around: Schedule | None = None,
    ):
        self.problem = problem
        self.config = config
        self.placement = placement
        self.horizon = int(horizon)
        self.model = cp_model.CpModel()
        self.fixed_order = orders is not None
        if orders is not None and placement is None:
            raise ValueError("fixed orders need a fixed placement")
        t0 = time.perf_counter()
        spec = objective(problem)
        self.pairs = None
        if problem.overlap_pairs and placement is not None and orders is None:
            self.pairs = pair_candidates(problem, placement, config.model.pair_limit, around)
        v = self.vars = Variables.build(self.model, problem, placement, self.horizon, makespan_lb,
                                        intervals=not self.fixed_order, deadline=deadline,
                                        objective_variables=spec.variables, pairs=self.pairs)
        build = Build(self.model, v, config, orders, orders is None and config.uses("fifo"), mirror)
        self.fifo = build.fifo
        self.applied: list[str] = []
        for family in FAMILIES:
            if (family.switch is None or config.uses(family.switch)) and family.applies(build):
                self.applied += family.add(build)
        if self.pairs is not None:
            self.applied.append(self.pairs.label())
        target = spec.expression(v)
        if objective_cap is not None:
            self.model.add(target <= objective_cap)
        self.model.minimize(target)
        self.build_s = time.perf_counter() - t0

    # ---- hints -------------------------------------------------------------------------
    def hint(self, schedule: Schedule, timing: Timing) -> None:
        """A complete hint of every variable from a schedule of this problem and its timing."""
        m, v, problem = self.model, self.vars, self.problem
        m.clear_hints()
        pl = schedule.placement
        starts = {op: int(t) for op, t in timing.start.items()}
        for i, op in enumerate(v.ops):
            m.add_hint(v.start[i], starts[op])
        if v.placement is None:
            for (p, s), lits in v.x.items():
                for d, lit in enumerate(lits):
                    m.add_hint(lit, int(pl.device(p, s) == d))
            for (kind, p, s), (_, aux) in v.lag_vars.items():
                s2 = s + 1 if kind.value == "F" else s - 1
                da, db = pl.device(p, s), pl.device(p, s2)
                for tag, var, d, e in aux:
                    if tag == "diff":
                        m.add_hint(var, int(da != db))
                    elif tag == "same":
                        m.add_hint(var, int(da == d and db == d))
                    else:
                        m.add_hint(var, int(da == d and db == e))
        rel = problem.release_kind
        for lit, a, c in v.order_lits:
            m.add_hint(lit, int(starts[v.ops[a]] < starts[v.ops[c]]))
        ends = {op: round(t) for op, t in timing.end.items()}  # a block's ops end together
        if v.pair_lits:
            hint_pairs(m, v, schedule, ends)
        for (p, s, mb, kind), size in v.lifetime_size.items():
            r = Op(kind, p, s, mb)
            m.add_hint(size, ends[r] - starts[Op(Kind.F, p, s, mb)])
        step = max((ends[op] + problem.optimizer(pl.device(op.pipeline, op.stage)) for op in v.ops), default=0)
        for g_i, g in enumerate(problem.costs.replica_groups):
            members = set(g.stages)
            ar = max((ends[op] for op in v.ops if op.kind is rel and (op.pipeline, op.stage) in members), default=0)
            m.add_hint(v.ar[g_i], ar)
            t = round(g.allreduce_time)
            step = max([step] + [ar + t + problem.optimizer(pl.device(p, s)) for p, s in members])
        m.add_hint(v.makespan, step)
        objective(problem).hint(m, v, schedule, starts, ends)

    # ---- solve ---------------------------------------------------------------------------
    def parameters(self, time_limit: float, det_limit: float | None = None,
                   workers: int | None = None) -> cp_model.CpSolver:
        """A solver set up for this model: the config's portfolio (given ``workers``: that
        many, no portfolio) on free orders, a difference-constraint system on fixed ones."""
        cfg = self.config
        if self.fixed_order:
            setup = SolverSetup.of(cfg, time_limit, det_limit, workers=workers, portfolio=False,
                                   difference_system=True)
        else:
            setup = SolverSetup.of(cfg, time_limit, det_limit, workers=workers, portfolio=workers is None,
                                   open_search=True, probing_det_limit=cfg.model.probing_det_limit)
        return solver_for(setup)

    def solve(self, time_limit: float, det_limit: float | None = None, workers: int | None = None,
              stall_s: float | None = None, stop: Stop | None = None, on_solution=None) -> RawSolve:
        """Solve within ``time_limit`` wall-clock s (and ``det_limit`` deterministic s); ``stall_s``:
        stop once no better solution came for that long (``RawSolve.stalled``; not under a
        deterministic limit: irreproducible); ``stop``: an event ending the solve when set;
        ``on_solution``: called with each improving objective."""
        solver = self.solver = self.parameters(time_limit, det_limit, workers)  # its values stay readable
        cb = _Progress(time.perf_counter(), on_solution)
        if det_limit is not None:
            stall_s = None
        watch = None
        if stall_s is not None or stop is not None:
            watch = _Watch(solver, cb, stall_s, stop)
        try:
            done = run_solver(self.model, solver, cb)
        finally:
            if watch is not None:
                watch.stop()
        wall, code = done.wall, done.code
        if code == cp_model.MODEL_INVALID:  # pragma: no cover - a bug in the model builder
            raise RuntimeError(f"CP-SAT rejected the model: {self.model.validate()}")
        status = done.status
        v = self.vars
        value = starts = placement = None
        bound = None
        if status in (Status.OPTIMAL, Status.FEASIBLE):
            value = round(solver.objective_value)
            starts = {op: int(solver.value(v.start[i])) for i, op in enumerate(v.ops)}
            if v.placement is None:
                placement = Placement(tuple(tuple(next(d for d, lit in enumerate(v.x[(p, s)])
                                                       if solver.boolean_value(lit)) for s in range(n))
                                            for p, n in enumerate(self.problem.num_stages)), self.problem.num_devices)
            else:
                placement = v.placement
        if self.pairs is not None and self.pairs.restricted:
            # a restriction of the problem: its schedules count, its proofs and bounds do not
            status = {Status.OPTIMAL: Status.FEASIBLE, Status.INFEASIBLE: Status.UNKNOWN}.get(status, status)
        elif status is Status.OPTIMAL:
            bound = value
        elif status is not Status.INFEASIBLE:
            b = solver.best_objective_bound
            if math.isfinite(b):
                bound = math.ceil(b - 1e-9)
        first = cb.trace[0][0] if cb.trace else None
        pairs: tuple = ()
        if starts is not None and v.pair_lits:
            pairs = chosen_pairs(solver, v)
        return RawSolve(status, value, bound, starts, placement, wall, solver.response_proto.deterministic_time,
                        first, len(cb.trace), stalled=watch is not None and watch.stalled, pairs=pairs)

    def schedule_from(self, raw: RawSolve, name: str = "cpsat") -> Schedule:
        """A solution's schedule: its placement, each device's ops by start, its pairs as blocks."""
        if raw.placement is None or raw.starts is None:
            raise ValueError(f"the solve found no schedule ({raw.status})")
        return self.problem.schedule_by_starts(name, raw.placement, raw.starts, raw.pairs)
