"""Objective of the CP-SAT model: the makespan of the training step."""

from __future__ import annotations

from ortools.sat.python import cp_model

from .variables import Variables


def minimize_makespan(model: cp_model.CpModel, v: Variables) -> None:
    """Minimize the step's makespan (the makespan variable is bounded below by every
    device's end, so minimizing makes it equal to the step end)."""
    model.minimize(v.makespan)
