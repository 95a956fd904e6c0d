"""How far the proven lower bound of the issue-4 S=16 target reaches with more time.

Runs ``bound`` (its bound phase, horizon tightening with CP-SAT's shared tree search
for every probe, gets all of the time) on linear S=16, B=64, F=1, K=2, C=1, activation cap 16 and prints each probe:
its horizon, its outcome and its wall time. "infeasible" at horizon h proves that no
schedule ends by h, so the optimum is at least h + 1. The makespan of the best schedule
any search found is passed in (``--best``) only to print the gap it would have.

Run: python -m experiments.prove_bound [--time-limit SEC] [--workers N] [--seed N]
     [--best MAKESPAN]
"""

from __future__ import annotations

import argparse
import os
import time

from pipetab.solver.cpsat import CpSatConfig, bound, idealized_problem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds (default 240)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--best", type=int, default=None,
                    help="makespan of the best schedule found elsewhere, to print its gap")
    args = ap.parse_args(argv)
    problem = idealized_problem(16, 64, "linear", forward=1, backward=2, comm=1, activation_cap=16)
    t0 = time.perf_counter()
    res = bound(problem, CpSatConfig(time_limit_s=args.time_limit, workers=args.workers, random_seed=args.seed))
    wall = time.perf_counter() - t0
    print(f"linear S=16 B=64 F=1 K=2 C=1 cap 16; {args.workers} workers, limit {args.time_limit:g} s, "
          f"{os.cpu_count()} cores")
    print(f"{'horizon':>8} {'outcome':>11} {'wall_s':>8}")
    for row in (r for ph in res.log.phases if ph.name == "bound" for r in ph.solves):
        print(f"{row.horizon:>8} {row.status:>11} {row.wall_s:>8}")
    best = res.schedule.name if res.schedule is not None else "-"
    print(f"proven lower bound {res.lower_bound} slots after {wall:.1f} s "
          f"(best schedule of this run: {res.makespan} slots, {best})")
    if args.best is not None:
        within = (args.best - res.lower_bound) / args.best
        print(f"a schedule of {args.best} slots is within {within:.2%} of the optimum")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
