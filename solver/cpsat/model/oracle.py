"""Solver-free side of the CP-SAT modes, the numbers every result is checked against: a fixed
schedule timed by the simulator on the integer costs, its activation memory (prefix sums,
naming the first cap violation), and ``checked``: re-timed, memory-checked, validated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipetab.schedules.evaluate import DeadlockError, Timing
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Schedule
from pipetab.schedules.table import Table, timed_table
from pipetab.schedules.validate import validate
from pipetab.solver.simulate import simulate

from .bounds import MemoryCheck, memory_check
from .objectives import SimTiming, objective

if TYPE_CHECKING:
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


def relabel_microbatches(schedule: Schedule, timing: Timing) -> tuple[Schedule, Timing]:
    """The timed schedule with op labels permuted to FIFO (the k-th op of a kind on (p, s) by
    start becomes microbatch k's): times, devices and memory unchanged, every dependency kept
    (``families.add_fifo``); stage-0 forwards ordered too."""
    by_pipe: dict[int, list[int]] = {}
    for m, p in enumerate(schedule.microbatch2pipeline):
        by_pipe.setdefault(p, []).append(m)
    groups: dict[tuple[Kind, int, int], list[Op]] = {}
    for op in timing.start:
        groups.setdefault((op.kind, op.pipeline, op.stage), []).append(op)
    mapping: dict[Op, Op] = {}
    for (k, p, s), ops in groups.items():
        ops.sort(key=lambda o: timing.start[o])
        for new_m, op in zip(by_pipe[p], ops):
            mapping[op] = Op(k, p, s, new_m)
    if all(a == b for a, b in mapping.items()):
        return schedule, timing
    orders = tuple(tuple(mapping[op] for op in order) for order in schedule.orders)
    blocks = tuple(tuple(mapping[op] for op in b) for b in schedule.blocks)  # a block's cost is its stages'
    new = Schedule(schedule.name, schedule.placement, schedule.microbatch2pipeline, orders, schedule.stage_work,
                   schedule.split_backward, schedule.params, blocks)
    return new, Timing({mapping[o]: t for o, t in timing.start.items()},
                       {mapping[o]: t for o, t in timing.end.items()})


def glue_last_stages(problem: Problem, schedule: Schedule) -> Schedule:
    """A FIFO schedule with last-stage-only devices running each B right after its F."""
    if problem.split_backward:
        return schedule
    pl = schedule.placement
    orders = list(schedule.orders)
    changed = False
    for p in range(schedule.num_pipelines):
        last = schedule.num_stages(p) - 1
        d = pl.device(p, last)
        if pl.stages_on(d) != [(p, last)]:
            continue
        fwd = [op for op in orders[d] if op.kind is Kind.F]
        glued = tuple(x for op in fwd for x in (op, op._replace(kind=Kind.B)))
        if glued != orders[d]:
            orders[d] = glued
            changed = True
    if not changed:
        return schedule
    return Schedule(schedule.name, pl, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)


def hint_form(problem: Problem, known: KnownEval, glue: bool) -> KnownEval:
    """A known schedule in the form the model's symmetry and dominance constraints accept:
    FIFO-relabelled and (with ``glue``) last stages glued, re-timed; never slower."""
    sched, timing = relabel_microbatches(known.schedule, known.timing)
    if glue:
        g = glue_last_stages(problem, sched)
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
