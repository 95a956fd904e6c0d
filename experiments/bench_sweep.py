"""Benchmark: the paper's full grid -- GPipe, 1F1B, Chimera and Hanayo where valid x S in
{4, 8} x B in {8, ..., 256} x the nine systems -- simulated (levels 1-3 in every row) into a
fresh results store. Target: <= 60 s on 2 cores.

    python -m experiments.bench_sweep [--workers N] [--executor local|dask] [--target 60]

Prints one line per schedule (configurations, skipped, evaluation seconds summed over
workers) and the wall time; exits 1 when the wall time exceeds the target.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

from pipetab.sweep import ResultStore, load_config, make_executor, plan, run_sweep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_sweep", description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(HERE / "configs" / "paper_grid.toml"))
    ap.add_argument("--executor", choices=["local", "dask"], default="local")
    ap.add_argument("--scheduler", default=None)
    ap.add_argument("--workers", type=int, default=None, help="default: CPU count")
    ap.add_argument("--target", type=float, default=60.0, help="seconds (default 60)")
    args = ap.parse_args(argv)
    config = load_config(args.config)
    executor = make_executor(args.executor, args.workers, args.scheduler)
    with tempfile.TemporaryDirectory() as tmp, ResultStore(Path(tmp) / "bench.sqlite") as store:
        t0 = time.perf_counter()
        summary = run_sweep(config, store, executor, progress=False)
        wall = time.perf_counter() - t0
        frame = store.frame(plan(config, store).keys)
    print(f"pipetab sweep benchmark: {config.name} ({config.run.mode}), {summary.executor} x{summary.workers} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'schedule':<14}{'configs':>8}{'skipped':>8}{'eval s':>9}")
    skipped = {}
    for s in summary.skipped:
        skipped[s.configuration.schedule] = skipped.get(s.configuration.schedule, 0) + 1
    for name in config.grid["schedules"]:
        rows = frame[frame.schedule == name] if not frame.empty else frame
        print(f"{name:<14}{len(rows):>8}{skipped.get(name, 0):>8}{rows.runtime_s.sum() if len(rows) else 0:>9.2f}")
    print(f"{'total':<14}{len(frame):>8}{len(summary.skipped):>8}{frame.runtime_s.sum():>9.2f}")
    ok = wall <= args.target and not summary.errors
    print(f"wall time {wall:.1f} s for {summary.new_rows} configurations ({len(summary.errors)} errors); "
          f"target <= {args.target:g} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
