"""Solver-free side of the CP-SAT modes, the numbers every result is checked against: a fixed
schedule timed by the simulator on the integer costs, its activation memory (prefix sums,
naming the first cap violation), and ``checked``: re-timed, memory-checked, validated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipetab.schedules.evaluate import DeadlockError, Timing
from pipetab.schedules.rewrite import glue_last_stages, relabel_microbatches
from pipetab.schedules.table import Table, timed_table
from pipetab.schedules.validate import validate
from pipetab.solver.simulate import MemoryCheck, SimTiming, simulate

from .bounds import memory_check
from .objectives import objective

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule

    from ..problem import Problem


@dataclass(frozen=True)
class KnownEval:
    """A known schedule judged under a problem: makespan (None on deadlock), memory."""

    schedule: Schedule
    makespan: int | None
    timing: Timing | None
    memory: MemoryCheck
    error: str | None = None
    sim_s: float = 0.0  # what simulating it took (the pace's unit; the objective's judge aside)

    @property
    def fits(self) -> bool:
        return self.makespan is not None and self.memory.fits

    @property
    def name(self) -> str:
        return self.schedule.name


def evaluate_known(problem: Problem, schedule: Schedule, time_unfit: bool = True) -> KnownEval:
    """``schedule`` timed by the simulator, judged by the problem's objective and its memory
    checked against the caps; ``time_unfit=False``: one over a cap is not timed (makespan None)."""
    t = time.perf_counter()
    mem = memory_check(problem, schedule)
    if not mem.fits and not time_unfit:
        return KnownEval(schedule, None, None, mem, "not timed: it breaks the memory cap")
    try:
        sim = simulate(schedule, problem.costs)
    except DeadlockError as exc:
        return KnownEval(schedule, None, None, mem, str(exc))
    spent = time.perf_counter() - t
    value, timing = objective(problem).judge(problem, schedule, sim)
    return KnownEval(schedule, value, timing, mem, sim_s=spent)


def hint_form(problem: Problem, known: KnownEval, glue: bool) -> KnownEval:
    """A known schedule in the form the model's symmetry and dominance constraints accept:
    FIFO-relabelled and (with ``glue``) last stages glued, re-timed; never slower."""
    sched, timing = relabel_microbatches(known.schedule, known.timing)
    if glue:
        g = glue_last_stages(sched)
        if g is not sched:
            ev = evaluate_known(problem, g)
            if ev.fits and ev.makespan <= known.makespan:
                return ev
    return KnownEval(sched, known.makespan, timing, known.memory)


# ---- the incumbent's checks ----------------------------------------------------------------
def table_of(problem: Problem, schedule: Schedule, timing) -> Table:
    """The table of ``schedule`` under ``timing``."""
    if isinstance(timing, SimTiming) and timing.sim.schedule is schedule:
        return timed_table(schedule, *timing.arrays())
    return timed_table(schedule, timing.start, timing.end)


def checked(problem: Problem, schedule: Schedule, claimed: int | None) -> KnownEval:
    """``schedule`` re-timed, memory-checked and validated; its objective no worse than ``claimed``."""
    ev = evaluate_known(problem, schedule)
    if ev.makespan is None:
        raise RuntimeError(f"solver returned a schedule that deadlocks: {ev.error}")
    if not ev.memory.fits:
        raise RuntimeError(f"solver returned a schedule that breaks memory: {ev.memory.violation}")
    if claimed is not None and ev.makespan > claimed:
        raise RuntimeError(f"evaluator gives makespan {ev.makespan} for the solver's schedule, solver claimed "
                           f"{claimed}")
    validate(table_of(problem, schedule, ev.timing), schedule)
    return ev
