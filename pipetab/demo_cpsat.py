"""The CP-SAT part of ``make demo``: search and bound on a small idealized instance."""

from __future__ import annotations

from pipetab.schedules import formats, registry


def run(stages: int = 4, microbatches: int = 8, comm: int = 1, cap: int = 4, time_limit: float = 20.0) -> None:
    from pipetab.solver.cpsat import CpSatConfig, bound, idealized_problem, search
    from pipetab.solver.simulate import simulate

    print(f"\n== 3. CP-SAT: S={stages}, B={microbatches}, forward 1, backward 2, message {comm} slot(s), "
          f"at most {cap} live activations per device, linear placement\n")
    problem = idealized_problem(stages, microbatches, "linear", forward=1, backward=2, comm=comm, activation_cap=cap)
    known = [registry.generate("gpipe", stages, microbatches), registry.generate("1f1b", stages, microbatches)]
    config = CpSatConfig(time_limit_s=time_limit, workers=2)
    found = search(problem, config, known)
    print(found.summary())
    for name, k in found.known.items():
        fits = "" if k.fits else "  (needs more memory than the cap)"
        gap = "-" if k.gap is None else f"{100 * k.gap:.1f}% above the bound"
        print(f"  {name:<6} makespan {k.makespan:g} slots, {gap}{fits}")
    if found.schedule is not None:
        sim = simulate(found.schedule, problem.costs)
        print("\nthe schedule found (message time shows as gaps):")
        print(formats.to_text(sim.table("found")))
    lb = bound(problem, config, known)
    print(lb.summary())
    print("holds under: " + "; ".join(lb.bound_assumptions))
