"""The CP-SAT model of pipeline-parallel schedules: evaluate a known schedule with its
choices fixed, search better orders and placements under memory caps, and prove lower
bounds — every result solver-independent (``Result``) and re-checked by the evaluator.

Public API::

    Problem, idealized_problem, idealized_costs     what to solve
    profiled_problem                                  ... on measured op times in seconds
    CpSatConfig, MaxRuntime, NoImprovement, GapBelow  how to solve (limits, stop rules)
    evaluate(schedule, costs, config) -> Result       fixed placement and order
    search(problem, config, known) -> Result          free order (and placement)
    bound(problem, config, known) -> Result           lower bound + known schedules' gaps
    memory_front(problem, caps, config) -> [FrontPoint]
    partition.solve_partition(shape, layer_costs, partition, config, mode)
                                                      the stage partition as a decision
    min_feasible_cap(problem) -> float
"""

from .bounds import analytic_lower_bound, min_feasible_cap
from .config import CpSatConfig, GapBelow, MaxRuntime, NoImprovement
from .model import CpSatModel
from .modes import (
    FrontPoint,
    bound,
    canonical_placements,
    evaluate,
    memory_front,
    search,
)
from .problem import (
    FAMILIES,
    OBJECTIVES,
    Problem,
    family_placement,
    idealized_costs,
    idealized_problem,
    profiled_problem,
)
from .result import KnownGap, PhaseRecord, Result, SolveRecord, SolverInfo

__all__ = [
    "FAMILIES", "OBJECTIVES", "CpSatConfig", "CpSatModel", "FrontPoint", "GapBelow", "KnownGap", "MaxRuntime",
    "NoImprovement", "PhaseRecord", "Problem", "Result", "SolveRecord", "SolverInfo",
    "analytic_lower_bound", "bound", "canonical_placements", "evaluate",
    "family_placement", "idealized_costs", "idealized_problem", "memory_front",
    "min_feasible_cap", "profiled_problem", "search",
]
