"""Benchmark of overlapped forward-backward pairs chosen by CP-SAT (issue 28, item 2): on
mixture-of-experts shapes whose all-to-all crosses nodes, the search that chooses pairs in
its model (``Problem.overlap_pairs``) beside the search that orders ops one at a time and
pairs its order afterwards (``solver.pairs.paired_on_order``, what plan did before), and
the best registry schedule with pairs (DualPipeV, DualPipe, interleaved 1F1B with overlap)
that fits the memory.
Writes ``docs/bench/cpsat_pairs.csv``: per shape and strategy the step time in seconds (the
simulator on real costs), the proven lower bound of schedules with pairs, the gap, the wall
time and the number of overlapped pairs.

    python -m experiments.bench_pairs [--time-limit 30] [--only LABEL,...]
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import replace
from pathlib import Path

from pipetab.cli.main import build_parser
from pipetab.cli.solve_cmd import build_problem
from pipetab.solver.cpsat import CpSatConfig
from pipetab.solver.cpsat.api import solve_seconds
from pipetab.solver.cpsat.heuristics.starts import registry_schedules
from pipetab.solver.cpsat.model.oracle import memory_check
from pipetab.solver.pairs import paired_on_order
from pipetab.solver.simulate import simulate

OUT = Path("docs/bench/cpsat_pairs.csv")
QWEN = "--system dgx_h100_ib --model qwen3_235b_a22b --tp 2 --ep 8 --dp 8 --zero 1 --recompute full"
# DeepSeek-V3 as plan's winner on 2,048 H800 (docs/moe.md): EP 256 over nodes, FP8 dispatch and GEMMs
DSV3 = ("--system h800_ib --model deepseek_v3 --ep 256 --dp 256 --zero 1 --node-limit 4 --dispatch fp8 "
        "--gemm-precision fp8")
MIXTRAL = "--system dgx_h100_ib --model mixtral_8x22b --tp 2 --ep 8 --dp 8 --zero 1 --recompute full"
# label, the search's shape options (S, B, placement) and costs
SHAPES = [
    (f"qwen3 {p} S8 B{B}", f"-S 8 -B {B} --placement {p} {QWEN}") for p in ("v", "linear") for B in (32, 64)
] + [
    ("deepseek-v3 v S2 B60 tp4", f"-S 2 -B 60 --placement v --tp 4 {DSV3}"),
    ("deepseek-v3 v S4 B60 tp2", f"-S 4 -B 60 --placement v --tp 2 --recompute full {DSV3}"),
    ("deepseek-v3 linear S4 B60 tp2", f"-S 4 -B 60 --placement linear --tp 2 --recompute full {DSV3}"),
    ("deepseek-v3 v S4 B120 tp2", f"-S 4 -B 120 --placement v --tp 2 --recompute full --global-batch 30720 {DSV3}"),
] + [
    (f"mixtral-8x22b {p} S{S} B{B}", f"-S {S} -B {B} --placement {p} {MIXTRAL}")
    for p in ("v", "linear") for S, B in ((4, 16), (8, 32))
] + [("qwen3 v S8 B256", f"-S 8 -B 256 --placement v --global-batch 16384 {QWEN}")]
FIELDS = ["shape", "strategy", "ops", "seconds", "lower_bound_s", "gap", "wall_s", "pairs", "schedule", "status"]


def _row(label, strategy, ops, seconds, lb, wall, schedule, status) -> dict:
    gap = None if seconds is None or lb is None else (seconds - lb) / seconds
    return {"shape": label, "strategy": strategy, "ops": ops, "seconds": seconds, "lower_bound_s": lb,
            "gap": None if gap is None else round(gap, 5), "wall_s": round(wall, 2),
            "pairs": 0 if schedule is None else len(schedule.blocks),
            "schedule": None if schedule is None else schedule.name, "status": status}


def run_shape(label: str, argv: str, limit: float) -> list[dict]:
    """The three strategies on one shape."""
    args = build_parser().parse_args(["search", *argv.split()])
    shape, real = build_problem(args)
    config = CpSatConfig(time_limit_s=limit, workers=2)
    rows = []
    t = time.perf_counter()
    paired = solve_seconds(shape, real, "search", config)
    rows.append(_row(label, "pairs in the model", shape.num_ops, paired.seconds, paired.lower_bound_s,
                     time.perf_counter() - t, paired.schedule, str(paired.status)))
    t = time.perf_counter()
    alone = solve_seconds(replace(shape, overlap_pairs=False), real, "search", config)
    best, name = alone.seconds, alone.schedule
    judged_on = shape.with_costs(real.quantized(alone.tick_s))
    for sched in paired_on_order(alone.schedule, judged_on.costs) if alone.schedule else ():
        s = simulate(sched, real).makespan
        if s < best and memory_check(judged_on, sched).fits:  # a swapped pair holds one more activation
            best, name = s, sched
    rows.append(_row(label, "ops alone, then its order paired", shape.num_ops, best, paired.lower_bound_s,
                     time.perf_counter() - t, name, str(alone.status)))
    quantized = shape.with_costs(real.quantized(paired.tick_s))
    starts = [s for s in registry_schedules(quantized, quantized.fixed_placement)
              if s.blocks and memory_check(quantized, s).fits]
    timed = [(simulate(s, real).makespan, s) for s in starts]
    if timed:
        s, sched = min(timed, key=lambda x: x[0])
        rows.append(_row(label, "best registry schedule with pairs", shape.num_ops, s, paired.lower_bound_s, 0.0,
                         sched, "-"))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--only", default=None, help="comma-separated shape labels")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    only = None if a.only is None else set(a.only.split(","))
    rows = []
    for label, shape_argv in SHAPES:
        if only is not None and label not in only:
            continue
        new = run_shape(label, shape_argv, a.time_limit)
        for r in new:
            print({k: r[k] for k in ("shape", "strategy", "seconds", "gap", "wall_s", "pairs")}, flush=True)
        rows += new
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
