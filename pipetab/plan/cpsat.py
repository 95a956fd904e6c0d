"""CP-SAT on the plan's best shapes: a search of the linear placement in worker processes."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from pipetab.schedules import registry

from .result import Configuration, activation_peaks, configuration
from .space import PlanSpace, costs_of

if TYPE_CHECKING:
    from pipetab.hardware.context import Context

# CP-SAT is skipped on shapes with more ops than this (stages x microbatches x 2): its model
# alone takes longer to build than a plan's seconds allow (docs/cpsat.md)
CPSAT_MAX_OPS = 10_000


def cpsat_shapes(space: PlanSpace, ranked: list[Configuration]) -> tuple[list[Context], list[str]]:
    """The best ``space.cpsat_shapes`` distinct shapes that fit, and notes on the shapes
    skipped for their size (``CPSAT_MAX_OPS``)."""
    seen: list[Context] = []
    out: list[Context] = []
    skipped: list[str] = []
    for conf in ranked:
        if len(seen) >= space.cpsat_shapes or not conf.fits:
            break
        s = conf.shape
        if s in seen:
            continue
        seen.append(s)
        ops = 2 * s.pp * s.microbatches  # type: ignore[operator]
        if ops > CPSAT_MAX_OPS:
            skipped.append(f"{s.label} recompute {s.recompute}: not searched, "
                           f"{ops} ops are more than CP-SAT handles in seconds (at most {CPSAT_MAX_OPS})")
        else:
            out.append(s)
    return out, skipped


def cpsat_search(space: PlanSpace, shape: Context):
    """CP-SAT on the linear placement (full backward, 1F1B and GPipe as hints) of
    ``shape`` on its hardware costs under the memory cap, in seconds
    (``solver.seconds.solve_seconds``: what ``pipetab search`` answers); the ``Answer``."""
    from pipetab.solver.cpsat import CpSatConfig, idealized_problem
    from pipetab.solver.seconds import solve_seconds

    known = []
    for name in ("1f1b", "gpipe"):
        try:
            known.append(registry.generate(name, shape.pp, shape.microbatches))  # type: ignore[arg-type]
        except ValueError:
            continue
    real = costs_of(space, known[0], shape)
    problem = replace(idealized_problem(shape.pp, shape.microbatches, "linear"), name=f"plan {shape.label}")  # type: ignore[arg-type]
    # the CP-SAT entry of plan: one worker per searched shape (they run side by side)
    return solve_seconds(problem, real, "search", CpSatConfig(time_limit_s=space.cpsat_time_s, workers=1), known)


def cpsat_outcome(space: PlanSpace, shape: Context, answer, ranked: list[Configuration]) -> tuple:
    """(configuration when it beats the shape's best registry schedule, else None; note)."""
    from pipetab.solver.simulate import simulate

    where = f"{shape.label} recompute {shape.recompute}"
    if answer.schedule is None:
        return None, f"{where}: no schedule within {space.cpsat_time_s:g} s ({answer.status})"
    sched = answer.schedule
    costs = costs_of(space, sched, shape)
    found = configuration(space, "cpsat", {}, shape, sched, costs, simulate(sched, costs).makespan,
                          activation_peaks(sched, costs), searched=sched)
    rivals = [c for c in ranked if c.shape == shape and c.fits]
    best = min(rivals, key=lambda c: c.step_time_s, default=None)
    better = found.fits and (best is None or found.step_time_s < best.step_time_s * (1 - 1e-9))
    bound = "" if answer.lower_bound_s is None else (
        f" (bound {answer.lower_bound_s:.6g} s, gap {100 * answer.gap:.2f}%)" if answer.gap is not None else "")
    head = (f"{where}: {answer.status} in {answer.runtime_s:.1f} s among linear schedules with whole "
            f"backward passes: {found.step_time_s:.6g} s{bound}")
    if best is None:
        return (found if better else None), head
    change = (found.step_time_s - best.step_time_s) / best.step_time_s
    side = "faster" if change < 0 else "slower"
    return (found if better else None,
            f"{head}, {100 * abs(change):.3f}% {side} than the shape's best registry schedule "
            f"({best.label}, {best.step_time_s:.6g} s){'' if better else '; not shown'}")


def worker_pool(workers: int):
    """Forked workers for CP-SAT (one solver thread each), so the searches overlap the
    validation on the other core (None where processes cannot be forked: CP-SAT then runs
    inline)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    except ValueError:
        return None
