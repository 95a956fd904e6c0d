"""The one place a CP-SAT solver is set up and run (``run_solver``), from a ``SolverSetup``
(``SolverSetup.of``: a ``CpSatConfig``'s); fields left at their defaults leave CP-SAT's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from .result import Status

if TYPE_CHECKING:
    from .params import CpSatConfig

STATUS = {cp_model.OPTIMAL: Status.OPTIMAL, cp_model.FEASIBLE: Status.FEASIBLE,
          cp_model.INFEASIBLE: Status.INFEASIBLE, cp_model.UNKNOWN: Status.UNKNOWN}


@dataclass(frozen=True)
class SolverSetup:
    """CP-SAT's parameters for one solve: ``time_limit`` (wall s, at least 0.01),
    ``det_limit`` (at least 0.001, or None), ``seed`` (None: CP-SAT's), the portfolio,
    ``open_search`` (free orders: probing limited, no feasibility pump, which ignores the clock),
    ``first`` (stop at the first solution), ``extra`` raw ``SatParameters``, and
    ``difference_system`` (fixed orders: one worker, no presolve, no LP, the classic linear
    propagator — root propagation is the whole solve)."""

    time_limit: float
    det_limit: float | None = None
    workers: int = 1
    seed: int | None = None
    log: bool = False
    subsolvers: tuple[str, ...] = ()
    full_subsolvers: int | None = None
    open_search: bool = False
    probing_det_limit: float | None = None
    first: bool = False
    extra: tuple[tuple[str, object], ...] = ()
    difference_system: bool = False

    @classmethod
    def of(cls, config: CpSatConfig, time_limit: float, det_limit: float | None = None, *,
           workers: int | None = None, portfolio: bool = True, **more) -> SolverSetup:
        """The setup of ``config`` (its workers or ``workers``, seed, log, extra parameters); with
        ``portfolio`` its subsolvers, all full where CP-SAT would keep a thread for LNS."""
        w = workers or config.workers
        subsolvers = (config.portfolio() or ()) if portfolio else ()
        full = w if subsolvers and config.subsolvers is None and len(subsolvers) == w else None
        return cls(time_limit, det_limit, w, config.random_seed, config.log, tuple(subsolvers), full,
                   extra=config.extra_params, **more)


def solver_for(setup: SolverSetup) -> cp_model.CpSolver:
    """A CP-SAT solver with ``setup``'s parameters."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.01, float(setup.time_limit))
    if setup.det_limit is not None:
        prm.max_deterministic_time = max(1e-3, float(setup.det_limit))
    prm.num_workers = setup.workers
    if setup.seed is not None:
        prm.random_seed = setup.seed
    if setup.log:
        prm.log_search_progress = True
    if setup.subsolvers:
        prm.subsolvers.extend(setup.subsolvers)
    if setup.full_subsolvers is not None:
        prm.num_full_subsolvers = setup.full_subsolvers
    if setup.probing_det_limit is not None:
        prm.probing_deterministic_time_limit = setup.probing_det_limit
    if setup.open_search:
        prm.ignore_subsolvers.append("feasibility_pump")
    if setup.first:
        prm.stop_after_first_solution = True
    for key, value in setup.extra:
        setattr(prm, key, value)
    if setup.difference_system:
        prm.num_workers = 1
        prm.cp_model_presolve = False
        prm.linearization_level = 0
        prm.new_linear_propagation = False
    return solver


@dataclass(frozen=True)
class Solved:
    """A finished solve: the solver (to read values from), its status and wall seconds."""

    solver: cp_model.CpSolver
    code: cp_model.CpSolverStatus
    wall: float

    @property
    def status(self) -> Status:
        return STATUS.get(self.code, Status.UNKNOWN)

    @property
    def found(self) -> bool:
        return self.code in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def run_solver(model: cp_model.CpModel, setup: SolverSetup | cp_model.CpSolver, callback=None) -> Solved:
    """Solve ``model`` with ``setup``'s solver (or a stoppable one from ``solver_for``)."""
    solver = setup if isinstance(setup, cp_model.CpSolver) else solver_for(setup)
    t0 = time.perf_counter()
    code = solver.solve(model, callback) if callback is not None else solver.solve(model)
    return Solved(solver, code, time.perf_counter() - t0)
