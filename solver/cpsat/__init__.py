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

from __future__ import annotations

from importlib import import_module

# names -> their module, imported on first use (``import pipetab.solver.cpsat.problem``
# does not load OR-Tools)
_EXPORTS = {
    "FrontPoint": "api", "bound": "api", "evaluate": "api", "memory_front": "api", "search": "api",
    "min_feasible_cap": "bounds", "CpSatModel": "model", "OBJECTIVES": "objectives",
    "analytic_lower_bound": "objectives", "CpSatConfig": "params", "GapBelow": "params", "MaxRuntime": "params",
    "NoImprovement": "params", "canonical_placements": "placement", "Objective": "problem", "Problem": "problem",
    "idealized_problem": "problem", "KnownGap": "result", "Mode": "result", "PhaseRecord": "result",
    "Result": "result", "SolveLog": "result", "SolveRecord": "result", "SolverInfo": "result", "Status": "result",
}
_ELSEWHERE = {"Deadline": "pipetab.solver.deadline", "PlacementFamily": "pipetab.schedules.placements"}

__all__ = sorted({*_EXPORTS, *_ELSEWHERE})


def __getattr__(name: str):
    module = _ELSEWHERE.get(name) or (f"{__name__}.{_EXPORTS[name]}" if name in _EXPORTS else None)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
