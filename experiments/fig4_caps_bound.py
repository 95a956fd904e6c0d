"""Which side is short on the REPORT's CP-SAT runs under the 4-activation cap (issue 45
item 3): for Chimera's bidirectional placement at B = 16 (``experiments/configs/cpsat_fig4.toml``:
S = 8, the REPORT's; ``--stages 16`` the larger analogue; ``pipetab.sweep``'s cap: persistent
memory plus 4 of the largest activation per device), on the quantized problem
(``default_tick(20)``), the analytic bound, the device relaxation's (``model.device_relaxation``)
on a few devices one at a time and on the middle pair (devices S/2 - 1 and S/2) together, and
the full search's schedule and bound at the time limit and at six times it (which side moves
with more time).

Run: python -m experiments.fig4_caps_bound [--time-limit 20] [--stages 8] [--out docs/bench/fig4_caps_bound_s8.csv]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from experiments.interleaved_pace import write_rows
from pipetab.schedules import registry
from pipetab.solver.cpsat import CpSatConfig, Problem, search
from pipetab.solver.cpsat.model.bounds import makespan_lower_bound
from pipetab.solver.cpsat.model.device_relaxation import relaxation_bound
from pipetab.solver.pricing import hardware_costs


def problem(system: str, S: int, B: int) -> Problem:
    sched = registry.generate("chimera", S, B)
    real = hardware_costs(sched, system, "paper_gpt")
    biggest = max(real.activation.values())
    real = replace(real, capacity=tuple(p + 4 * biggest for p in real.persistent))
    return Problem.from_schedule(sched, real.quantized(real.default_tick(20)))


def rows(limit: float, quick: bool, S: int = 8):
    systems = ("mid_nw_mid_cp",) if quick else ("mid_nw_mid_cp", "fast_nw_slow_cp")
    mid = (S // 2 - 1, S // 2)
    for system in systems:
        p = problem(system, S, 16)
        pl = p.fixed_placement
        analytic = makespan_lower_bound(p, pl)
        t = time.perf_counter()
        res = search(p, CpSatConfig(time_limit_s=limit, workers=2))
        row = {"system": system, "S": S, "B": 16, "analytic": analytic[0], "analytic_why": analytic[1],
               "search_makespan": res.makespan, "search_bound": res.lower_bound, "status": str(res.status),
               "search_s": round(time.perf_counter() - t, 1)}
        devices = (0, mid[0]) if quick else tuple(sorted({0, S // 4 - 1, *mid, S - S // 4, S - 1}))
        t = time.perf_counter()
        relax = {d: relaxation_bound(p, pl, (d,), CpSatConfig(time_limit_s=limit, workers=2), limit,
                                     lower=analytic[0]) for d in devices}
        row.update({"relaxation": max(relax.values()), "relaxation_by_device": " ".join(
            f"{d}:{b}" for d, b in relax.items()), "relaxation_s": round(time.perf_counter() - t, 1)})
        t = time.perf_counter()
        row["relaxation_middle_pair"] = relaxation_bound(p, pl, mid, CpSatConfig(time_limit_s=3 * limit, workers=2),
                                                      3 * limit, lower=analytic[0])
        row["relaxation_pair_s"] = round(time.perf_counter() - t, 1)
        if not quick:
            t = time.perf_counter()
            long = search(p, CpSatConfig(time_limit_s=6 * limit, workers=2))
            row.update({"long_search_makespan": long.makespan, "long_search_bound": long.lower_bound,
                        "long_search_s": round(time.perf_counter() - t, 1)})
        yield row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per solve (default 20, the REPORT's)")
    ap.add_argument("--quick", action="store_true", help="one system, two devices")
    ap.add_argument("--stages", type=int, choices=(8, 16), default=8, help="S: 8 (the REPORT's) or 16")
    ap.add_argument("--out", default="results/fig4_caps_bound.csv")
    args = ap.parse_args(argv)
    write_rows(Path(args.out), rows(args.time_limit, args.quick, args.stages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
