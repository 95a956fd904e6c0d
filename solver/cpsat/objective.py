"""Objective of the CP-SAT model: the step's makespan or the steady-state period."""

from __future__ import annotations

from ortools.sat.python import cp_model

from .variables import Variables


def set_objective(model: cp_model.CpModel, v: Variables, cap: int | None = None) -> None:
    """Minimize the problem's objective: the makespan (bounded below by every device's
    end, so minimizing makes it the step's end) or the period (bounded below by every
    device's span, ``constraints.add_period``). ``cap``: the objective at most this."""
    target = v.period if v.problem.objective == "period" else v.makespan
    if cap is not None:
        model.add(target <= cap)
    model.minimize(target)
