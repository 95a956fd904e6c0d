"""The CP-SAT model of pipeline-parallel schedules: evaluate a known schedule with its
choices fixed, search better orders and placements under memory caps, and prove lower
bounds — every result solver-independent (``Result``) and re-checked by the evaluator.

The tower, bottom up: ``problem`` (what to solve) → ``variables``, ``precedences`` and
``families`` (the constraint families, one listed table), ``objectives`` (registered
objective objects) → ``model`` (one CP-SAT model) → ``starts`` and ``greedy`` (schedules
before any model) → ``strategy`` and ``fixed`` (start → bound → search on a fixed
placement) → ``placement`` and ``partition`` (free placement, free stage partition) →
``api``. ``params`` holds every tuned number; one ``Deadline`` per call.

Public API::

    Problem, idealized_problem                         what to solve (Objective, PlacementFamily)
    CpSatConfig, MaxRuntime, NoImprovement, GapBelow   how to solve (limits, stop rules, params)
    evaluate(schedule, costs, config) -> Result        fixed placement and order
    search(problem, config, known) -> Result           free order (and placement)
    bound(problem, config, known) -> Result            lower bound + known schedules' gaps
    solver.seconds.solve_seconds(shape, real_costs, mode, config) -> Answer   in seconds
    memory_front(problem, caps, config) -> [FrontPoint]
    partition.solve_partition(shape, layer_costs, partition, config, mode)
                                                       the stage partition as a decision
    min_feasible_cap(problem) -> float
"""

from pipetab.schedules.placements import PlacementFamily
from pipetab.solver.deadline import Deadline

from .api import FrontPoint, bound, evaluate, memory_front, search
from .bounds import min_feasible_cap
from .model import CpSatModel
from .objectives import OBJECTIVES, analytic_lower_bound
from .params import CpSatConfig, GapBelow, MaxRuntime, NoImprovement
from .placement import canonical_placements
from .problem import Objective, Problem, idealized_problem
from .result import KnownGap, Mode, PhaseRecord, Result, SolveLog, SolveRecord, SolverInfo, Status

__all__ = [
    "OBJECTIVES", "CpSatConfig", "CpSatModel", "Deadline", "FrontPoint", "GapBelow", "KnownGap",
    "MaxRuntime", "Mode", "NoImprovement", "Objective", "PhaseRecord", "PlacementFamily", "Problem",
    "Result", "SolveLog", "SolveRecord", "SolverInfo", "Status", "analytic_lower_bound", "bound",
    "canonical_placements", "evaluate", "idealized_problem", "memory_front", "min_feasible_cap",
    "search",
]
