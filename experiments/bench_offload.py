"""Benchmark of CP-SAT choosing activation offload and recompute under memory caps (issue 40,
item 6; the CP-SAT half of its benchmark).

Idealized costs (F 1 slot, B 2, an activation 1 unit, no messages), the linear placement,
S stages x B microbatches, a cap of ``frac`` x S activations per device (1F1B holds S on its
first stage; below 1 no registry schedule of the shape fits, the ``registry_fits`` column
checks it). Per instance and host link: CP-SAT (``cpsat.decompose.offload.search_offload``)
chooses orders, which activations to offload over the link and which to recompute; the row
gives its step, its proven bound and gap, and the step's cost against 1F1B without a cap
((B + S - 1) x 3 slots), each answer re-simulated (``solver.offload``) and validated.
Host links: ``none`` (recompute and orders only) and ``copy=1`` (an activation's copy each
way takes one forward's time — PipeOffload's regime where offload is cheap; its claim: at
least half of the activations offload with negligible overhead).
Writes ``docs/bench/offload_quick.csv`` (``--quick``: S 4, B 8 and 16, caps 0.5 and 0.75,
10 s each) or ``docs/bench/offload.csv`` (S 4, 8, 16; B 2S, 4S, 8S; caps 0.5 to 1 in
steps of 0.125; 60 s each).

    python -m experiments.bench_offload --quick
    python -m experiments.bench_offload [--time-limit 60]
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

from pipetab.schedules.schedule import Placement
from pipetab.solver.cpsat import CpSatConfig
from pipetab.solver.cpsat.decompose.offload import search_offload
from pipetab.solver.cpsat.heuristics.starts import judge, registry_schedules
from pipetab.solver.cpsat.problem import idealized_problem
from pipetab.solver.offload import CopyRates

FIELDS = ["S", "B", "cap_frac", "cap", "link", "registry_fits", "status", "step", "bound", "gap",
          "onef1b_uncapped", "step_cost", "offloaded", "recomputed", "sim_step", "sim_peak", "wall_s",
          "time_limit_s"]
LINKS = {"none": None, "copy=1": CopyRates(1.0, 1.0)}


def instances(quick: bool) -> list[tuple[int, int, float]]:
    if quick:
        return [(4, B, f) for B in (8, 16) for f in (0.5, 0.75)]
    return [(S, k * S, f) for S in (4, 8, 16) for k in (2, 4, 8) for f in (0.5, 0.625, 0.75, 0.875, 1.0)]


def registry_fits(problem) -> bool:
    """Whether any registry schedule of the shape fits the problem's cap."""
    placement = Placement((tuple(range(problem.num_devices)),), problem.num_devices)
    evals, _ = judge(problem, registry_schedules(problem, placement))
    return any(e.fits for e in evals)


def run(S: int, B: int, frac: float, link: str, limit: float) -> dict:
    cap = max(1, math.floor(frac * S))
    problem = idealized_problem(S, B, activation_cap=cap)
    rates = LINKS[link]
    config = CpSatConfig(time_limit_s=limit, workers=2)
    t0 = time.perf_counter()
    ans = search_offload(problem, rates or CopyRates(1.0, 1.0), config, offload=rates is not None)
    wall = time.perf_counter() - t0
    base = 3 * (B + S - 1)
    step = ans.makespan
    gap = None if step is None or ans.bound is None else round((step - ans.bound) / step, 4)
    return {"S": S, "B": B, "cap_frac": frac, "cap": cap, "link": link, "registry_fits": registry_fits(problem),
            "status": str(ans.status), "step": step, "bound": ans.bound, "gap": gap, "onef1b_uncapped": base,
            "step_cost": None if step is None else round(step / base - 1, 4),
            "offloaded": 0 if ans.offload is None else len(ans.offload.fraction),
            "recomputed": 0 if ans.offload is None else len(ans.offload.recompute),
            "sim_step": None if ans.sim is None else ans.sim.makespan,
            "sim_peak": None if ans.sim is None else max(ans.sim.peak_activation),
            "wall_s": round(wall, 2), "time_limit_s": limit}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="S 4, B 8 and 16, caps 0.5 and 0.75, 10 s each")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per solve (60; quick: 10)")
    args = ap.parse_args(argv)
    limit = args.time_limit or (10.0 if args.quick else 60.0)
    out = Path("docs/bench/offload_quick.csv" if args.quick else "docs/bench/offload.csv")
    rows = []
    for S, B, frac in instances(args.quick):
        for link in LINKS:
            rows.append(run(S, B, frac, link, limit))
            print(rows[-1], flush=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
