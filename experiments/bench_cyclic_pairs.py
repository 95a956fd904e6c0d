"""Overlapped pairs inside the cyclic model (issue 45, item 2): on MoE-like op times, the least
period of periodic schedules found and proven by the cyclic phase with pairs in its model
(``Problem.overlap_pairs``: which forward runs with which backward is the model's choice)
beside the same phase with every op alone.

Idealized slots: a forward computes 1, dispatches (all-to-all 1), computes 1, combines
(all-to-all 1): 4 slots; a backward receives 1, computes 2, sends 1, computes 2: 6 slots; a
pair of the two takes 6 (``Costs.block_time``: each op's all-to-alls under the other's
compute); a message of 1 between devices; a cap of S or 2S activations (M_B) per device.
Linear and V placements, S in {4, 8}, B in {2S, 4S}. Each row: the best block, its period and
the period per microbatch, the proven bound of periodic schedules of that block, whether
proven, the expansion's makespan (re-timed by the simulator, memory-checked and validated) and
its pairs, the wall time under a deterministic limit (the wall limit 100 times it).

    python -m experiments.bench_cyclic_pairs [--det 20] [--out docs/bench/cyclic_pairs.csv]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import time
from dataclasses import replace
from pathlib import Path

from pipetab.schedules.ops import Kind
from pipetab.solver.cpsat import CpSatConfig, Problem
from pipetab.solver.cpsat.heuristics.starts import Pace
from pipetab.solver.cpsat.params import DecomposeParams
from pipetab.solver.cpsat.phases.cyclic import cyclic_phase
from pipetab.solver.pricing import idealized_costs

OUT = Path("docs/bench/cyclic_pairs.csv")
FORWARD = ((False, 1), (True, 1), (False, 1), (True, 1))
BACKWARD = ((True, 1), (False, 2), (True, 1), (False, 2))
FIELDS = ["placement", "S", "B", "cap", "pairs", "block", "period", "per_microbatch", "period_bound", "proven",
          "makespan", "blocks", "wall_s", "det_limit", "load"]


def problem(placement: str, S: int, B: int, cap: int, pairs: bool) -> Problem:
    stages = 2 * S if placement == "v" else S
    base = idealized_costs(S, (stages,), forward=4, backward=6, comm=1, activation_cap=cap)
    chains = {(k, 0, s): c for s in range(stages) for k, c in ((Kind.F, FORWARD), (Kind.B, BACKWARD))}
    return Problem(S, (0,) * B, (stages,), replace(base, chains=chains), placement, overlap_pairs=pairs)


def run(placement: str, S: int, B: int, cap: int, pairs: bool, det: float) -> dict:
    p = problem(placement, S, B, cap, pairs)
    cfg = CpSatConfig(time_limit_s=100 * det, deterministic_time=det, workers=1,
                      decompose=DecomposeParams(cyclic_min_ops=0))
    deadline = cfg.deadline()
    t = time.perf_counter()
    evals, _, info = cyclic_phase(p, p.fixed_placement, cfg, deadline, 1.0, Pace(deadline, cfg.start))
    wall = time.perf_counter() - t
    best = min(evals, key=lambda e: e.makespan) if evals else None  # type: ignore[arg-type,return-value]
    return {"placement": placement, "S": S, "B": B, "cap": cap, "pairs": pairs,
            "block": info and info.block, "period": info and info.period,
            "per_microbatch": info and round(info.period / info.block, 4),
            "period_bound": info and info.period_bound, "proven": bool(info and info.proven),
            "makespan": best and best.makespan, "blocks": best and len(best.schedule.blocks),
            "wall_s": round(wall, 2), "det_limit": det, "load": round(os.getloadavg()[0], 1)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--det", type=float, default=4.0, help="deterministic seconds per cyclic phase")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", newline="") as fh:  # each row written as it is measured
        out = csv.DictWriter(fh, FIELDS)
        out.writeheader()
        # B in {2S, 4S}, a cap of S or 2S, without and with pairs
        for placement, S, b, c, pairs in itertools.product(("linear", "v"), (4, 8), (2, 4), (1, 2), (False, True)):
            row = run(placement, S, b * S, c * S, pairs, a.det)
            out.writerow(row)
            fh.flush()
            print(row, flush=True)


if __name__ == "__main__":
    main()
