"""The CP-SAT model of pipeline-parallel schedules: evaluate a known schedule with its
choices fixed, search better orders and placements under memory caps, and prove lower
bounds — every result solver-independent (``Result``) and re-checked by the evaluator.
A tower of small modules (docs/cpsat.md): ``problem`` → ``variables``, ``precedences``,
``families``, ``objectives`` → ``model`` → ``starts``, ``greedy`` → ``strategy``, ``fixed``
→ ``placement``, ``partition`` → ``api``; ``params`` holds every tuned number. Public:
``Problem``, ``idealized_problem``, ``CpSatConfig`` and the stop rules, ``evaluate``,
``search``, ``bound``, ``memory_front``, ``min_feasible_cap``, the result types; problems in
seconds: ``solver.seconds.solve_seconds``.
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
