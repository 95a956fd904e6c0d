"""The CP-SAT part of ``make demo``: search and bound on a small idealized instance, the
schedule found judged by ``evaluate_levels`` like any other."""

from __future__ import annotations

from pipetab.console import grid_blocks, say
from pipetab.schedules import formats, registry
from pipetab.schedules.table import SlotDurations
from pipetab.solver.levels import evaluate_levels
from pipetab.view import timeline


def run(stages: int = 4, microbatches: int = 8, comm: int = 1, cap: int = 4, time_limit: float = 20.0) -> None:
    from pipetab.solver.cpsat import CpSatConfig, bound, idealized_problem, search
    from pipetab.solver.cpsat.problem import TIME_OBJECTIVES

    say(f"\n== 3. CP-SAT: S={stages}, B={microbatches}, forward 1, backward 2, message {comm} slot(s), "
          f"at most {cap} live activations per device, linear placement\n")
    problem = idealized_problem(stages, microbatches, "linear", forward=1, backward=2, comm=comm, activation_cap=cap)
    known = [registry.generate("gpipe", stages, microbatches), registry.generate("1f1b", stages, microbatches)]
    config = CpSatConfig(time_limit_s=time_limit, workers=2)
    found = search(problem, config, known)
    say(found.summary())
    for name, k in found.known.items():
        fits = "" if k.fits else "  (needs more memory than the cap)"
        gap = "-" if k.gap is None else f"{100 * k.gap:.1f}% above the bound"
        print(f"  {name:<6} makespan {k.makespan:g} slots, {gap}{fits}")
    if found.schedule is not None:
        levels = evaluate_levels(found.schedule, slots=SlotDurations(forward=1, backward=2), costs=problem.costs)
        sim = timeline(levels)  # the levels' own simulation, on the problem's costs
        say(f"\nthe schedule found as a table without message time ({levels.metrics.makespan_slots:g} slots); "
              f"with {comm}-slot messages it takes {sim.makespan:g} slots, "
              f"at most {max(sim.peak_activation):g} live activations per device:")
        print(grid_blocks(formats.to_text(levels.table)))
    lb = bound(problem, config, known)
    say(lb.summary())
    say("holds under: " + "; ".join(lb.bound_assumptions))
    say(f"\n== split backward (B, W = 1 slot each), half of each activation freed at B, at most {cap} "
          "activations per device: the step and the steady-state period\n")
    for objective in TIME_OBJECTIVES:
        split = idealized_problem(stages, microbatches, forward=1, backward=1, weight=1, comm=comm,
                                  activation_cap=cap, split_backward=True, weight_memory=0.5, objective=objective)
        res = search(split, config)
        say(res.summary())
        for name, k in res.known.items():
            print(f"  {name:<6} {objective} {k.makespan:g} slots" + ("" if k.fits else "  (needs more memory)"))
