"""The CP-SAT model of pipeline-parallel schedules: evaluate a known schedule, search better
orders and placements under memory caps, prove lower bounds — every result
solver-independent (``Result``) and re-checked by the evaluator. A tower of floors, each
importing only those below (docs/cpsat.md, "The tower"; tests/solver/cpsat/test_floors.py):
``problem``, ``params``, ``result``, ``engine`` → ``model`` → ``heuristics`` → ``phases`` →
``decompose`` → ``api``. The public names are listed below.
"""

from __future__ import annotations

from importlib import import_module

# names -> their module, imported on first use (``import pipetab.solver.cpsat.problem``
# does not load OR-Tools)
_EXPORTS = {
    "FrontPoint": "api", "bound": "api", "evaluate": "api", "memory_front": "api", "search": "api",
    "solve_partition": "api", "solve_seconds": "api", "partition_seconds": "api",
    "min_feasible_cap": "model.bounds", "CpSatModel": "model.cpmodel",
    "OBJECTIVES": "model.objectives", "analytic_lower_bound": "model.objectives", "CpSatConfig": "params",
    "GapBelow": "params", "MaxRuntime": "params", "NoImprovement": "params",
    "Objective": "problem", "Problem": "problem",
    "idealized_problem": "problem", "KnownGap": "result", "Mode": "result", "PhaseRecord": "result",
    "Result": "result", "SolveLog": "result", "SolveRecord": "result", "SolverInfo": "result", "Status": "result",
}
_ELSEWHERE = {"Deadline": "pipetab.solver.deadline", "PlacementFamily": "pipetab.schedules.placements",
              "canonical_placements": "pipetab.schedules.placements"}

__all__ = sorted({*_EXPORTS, *_ELSEWHERE})


def __getattr__(name: str):
    module = _ELSEWHERE.get(name) or (f"{__name__}.{_EXPORTS[name]}" if name in _EXPORTS else None)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
