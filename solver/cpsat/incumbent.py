"""The incumbent's checks: every schedule a solve returns is re-timed by the solver-free
evaluator, memory-checked and its table validated before it is believed; and a judged
schedule hints a model in the form its symmetry and dominance families accept."""

from __future__ import annotations

from pipetab.schedules.schedule import Schedule
from pipetab.schedules.table import Table, timed_table
from pipetab.schedules.validate import validate

from .model import CpSatModel, RawSolve
from .oracle import KnownEval, evaluate_known, hint_form
from .problem import Problem


def table_of(problem: Problem, schedule: Schedule, timing) -> Table:
    """The table of ``schedule`` under ``timing``."""
    return timed_table(schedule, timing.start, timing.end)


def checked(problem: Problem, schedule: Schedule, claimed: int | None) -> KnownEval:
    """Re-time ``schedule`` with the evaluator, check memory, validate its table, and
    assert the evaluator's makespan is no worse than the solver's ``claimed``."""
    ev = evaluate_known(problem, schedule)
    if ev.makespan is None:
        raise RuntimeError(f"solver returned a schedule that deadlocks: {ev.error}")
    if not ev.memory.fits:
        raise RuntimeError(f"solver returned a schedule that breaks memory: {ev.memory.violation}")
    if claimed is not None and ev.makespan > claimed:
        raise RuntimeError(
            f"evaluator gives makespan {ev.makespan} for the solver's schedule, solver claimed {claimed}"
        )
    validate(table_of(problem, schedule, ev.timing), schedule)
    return ev


def hint_incumbent(model: CpSatModel, problem: Problem, known: KnownEval) -> None:
    """Hint ``model`` (unless ``hints`` is ablated) with a judged schedule, in the form its
    symmetry and dominance families accept."""
    if model.config.uses("hints"):
        h = hint_form(problem, known, "last-stage glue" in model.applied)
        model.hint(h.schedule, h.timing)


def solution_of(problem: Problem, model: CpSatModel, raw: RawSolve) -> KnownEval | None:
    """The schedule of a solve, re-checked by the evaluator (None when none was found)."""
    if raw.starts is None:
        return None
    return checked(problem, model.schedule_from(raw, name="cpsat"), raw.makespan)
