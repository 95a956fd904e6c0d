"""The search and bound with the cyclic phase on problems whose pairs may overlap (issue 45,
item 2): MoE shapes at size, `pipetab search`'s own path (``solve_seconds``: a search on
durations rounded up, then the bound on durations rounded down), status, makespan, bound and
gap; the cyclic phase's block, period and proven period bound (in ticks of the search) and
which phases ran. Run it once per version of the code, each with its ``--version`` label;
rows are appended to ``--out``.

DeepSeek-V3 as in experiments/bench_pairs.py (EP 256 across nodes, FP8 dispatch and GEMMs,
TP 2, full recompute) on V placements, S in {8, 16}, B in {256, 1024}; Qwen3-235B-A22B (EP 8)
V S=8 B=256. Wall limits are wall clock on a shared machine: the load is in each row.

    python -m experiments.bench_cyclic_pairs_search --version after [--time-limit 20] [--only LABEL,...]
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

from pipetab.cli.main import build_parser
from pipetab.cli.solve_cmd import build_problem
from pipetab.solver.cpsat import CpSatConfig
from pipetab.solver.cpsat.api import solve_seconds

OUT = Path("docs/bench/cyclic_pairs_search.csv")
DSV3 = ("--system h800_ib --model deepseek_v3 --ep 256 --dp 256 --zero 1 --node-limit 4 --dispatch fp8 "
        "--gemm-precision fp8 --tp 2 --recompute full")
QWEN = "--system dgx_h100_ib --model qwen3_235b_a22b --tp 2 --ep 8 --dp 8 --zero 1 --recompute full"
SHAPES = [
    ("deepseek-v3 v S8 B256", f"-S 8 -B 256 --placement v --global-batch 65536 {DSV3}"),
    ("deepseek-v3 v S8 B1024", f"-S 8 -B 1024 --placement v --global-batch 262144 {DSV3}"),
    ("deepseek-v3 v S16 B256", f"-S 16 -B 256 --placement v --global-batch 65536 {DSV3}"),
    ("deepseek-v3 v S16 B1024", f"-S 16 -B 1024 --placement v --global-batch 262144 {DSV3}"),
    ("qwen3 v S8 B256", f"-S 8 -B 256 --placement v --global-batch 16384 {QWEN}"),
]
FIELDS = ["version", "shape", "mode", "ops", "status", "seconds", "lower_bound_s", "gap", "pairs", "schedule",
          "cyclic_block", "cyclic_period", "cyclic_period_bound", "cyclic_proven", "phases", "time_limit", "wall_s",
          "load"]


def run_shape(version: str, label: str, argv: str, limit: float, mode: str) -> dict:
    args = build_parser().parse_args([mode, *argv.split()])
    shape, real = build_problem(args)
    t = time.perf_counter()
    ans = solve_seconds(shape, real, mode, CpSatConfig(time_limit_s=limit, workers=2))
    wall = time.perf_counter() - t
    cyc = ans.bound.cyclic or (ans.search.cyclic if ans.search is not None else None)
    phases = [p.name for r in (ans.search, ans.bound) if r is not None for p in r.log.phases]
    return {"version": version, "shape": label, "mode": mode, "ops": shape.num_ops, "status": str(ans.status),
            "seconds": None if ans.seconds is None else round(ans.seconds, 4),
            "lower_bound_s": None if ans.lower_bound_s is None else round(ans.lower_bound_s, 4),
            "gap": None if ans.gap is None else round(ans.gap, 4),
            "pairs": 0 if ans.schedule is None else len(ans.schedule.blocks),
            "schedule": None if ans.schedule is None else ans.schedule.name,
            "cyclic_block": cyc and cyc.block, "cyclic_period": cyc and cyc.period,
            "cyclic_period_bound": cyc and cyc.period_bound, "cyclic_proven": cyc and cyc.proven,
            "phases": " ".join(phases), "time_limit": limit, "wall_s": round(wall, 1),
            "load": round(os.getloadavg()[0], 1)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", required=True, help="a label for the code measured (before, after)")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--modes", default="search,bound")
    ap.add_argument("--only", default=None, help="comma-separated shape labels")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    only = None if a.only is None else set(a.only.split(","))
    new = not a.out.exists()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        if new:
            w.writeheader()
        for label, shape_argv in SHAPES:
            if only is not None and label not in only:
                continue
            for mode in a.modes.split(","):
                row = run_shape(a.version, label, shape_argv, a.time_limit, mode)
                print(row, flush=True)
                w.writerow(row)
                fh.flush()


if __name__ == "__main__":
    main()
