"""Run every reproduction: the sweeps of ``experiments/configs/*.toml`` into one results
store, their CSVs, the figures, and REPORT.md.

    python -m experiments.reproduce            # full: results/, results/REPORT.md
    python -m experiments.reproduce --quick    # small: results/quick/, results/quick/REPORT.md
    python -m experiments.reproduce --executor dask [--scheduler tcp://host:8786]

Re-running resumes: configurations already in the store are not evaluated again (rows are
keyed by configuration, not by code version: after changing pipetab, add ``--fresh``).
``--quick`` keeps B in {8, 16, 64, 256} and runs the CP-SAT part on fewer, shorter
instances. The report goes beside the results, never over a tracked file: the committed
experiments/REPORT.md is the quick one (``--quick --fresh``, then copy results/quick/REPORT.md
over it), and ``tests/experiments/test_report_fresh.py`` requires it equal to a fresh quick run
(its CP-SAT runs under a deterministic limit, ``QUICK_CPSAT``; the report holds no wall time).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from experiments import figures, report
from pipetab.sweep import ConfigError, ResultStore, load_config, make_executor, run_sweep
from pipetab.sweep.store import export_rows

HERE = Path(__file__).resolve().parent

CONFIGS = HERE / "configs"
ORDER = ["paper_grid", "fig3_bubble", "fig4_runtime", "fig5_memory", "fig6_asym", "table1_hanayo", "cpsat_fig4"]
QUICK_B = [8, 16, 64, 256]
# the quick CP-SAT run: (grid changes, run changes). Deterministic: one CP-SAT worker and a
# deterministic limit, the wall-clock limit far beyond it (a loaded machine must not reach it
# first), so the quick report is the same on every machine and CI compares it with the
# committed experiments/REPORT.md (tests/experiments/test_report_fresh.py)
QUICK_CPSAT = ({"microbatches": [8]}, {"time_limit": 300.0, "deterministic_time": 10.0, "workers": 1})


def quick_version(config):
    """The quick version of a reproduction config."""
    grid = {"microbatches": [b for b in config.grid["microbatches"] if b in QUICK_B] or config.grid["microbatches"][:1]}
    if config.run.uses_cpsat:
        grid.update(QUICK_CPSAT[0])
        config = config.with_run(**QUICK_CPSAT[1])
    return config.with_grid(**grid)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small, fast version (for make demo)")
    ap.add_argument("--results", type=Path, default=None,
                    help="results folder (default results/, quick: results/quick/)")
    ap.add_argument("--report", type=Path, default=None,
                    help="report file (default <results>/REPORT.md; never a tracked file)")
    ap.add_argument("--only", nargs="+", choices=ORDER, metavar="NAME", help=f"run only these of: {' '.join(ORDER)}")
    ap.add_argument("--skip-cpsat", action="store_true", help="leave out the CP-SAT sweep")
    ap.add_argument("--executor", choices=["local", "dask"], default="local")
    ap.add_argument("--scheduler", default=None, help="Dask scheduler address (default: a LocalCluster)")
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    ap.add_argument("--fresh", action="store_true",
                    help="start from an empty results store (after changing pipetab's code: stored rows are "
                         "keyed by configuration, not by code version)")
    args = ap.parse_args(argv)
    results = args.results or Path("results/quick" if args.quick else "results")
    out = args.report or results / "REPORT.md"
    try:
        report.check_untracked(out, "--report")
    except ValueError as exc:
        print(f"reproduce: {exc}", file=sys.stderr)
        return 2
    names = [n for n in ORDER if n in (args.only or ORDER) and not (args.skip_cpsat and n == "cpsat_fig4")]
    results.mkdir(parents=True, exist_ok=True)
    try:
        configs = [load_config(CONFIGS / f"{n}.toml") for n in names]
        if args.quick:
            configs = [quick_version(c) for c in configs]
        executor = make_executor(args.executor, args.workers, args.scheduler)
    except (ConfigError, ValueError) as exc:
        print(f"reproduce: {exc}", file=sys.stderr)
        return 2
    if args.fresh:
        for suffix in ("", "-wal", "-shm"):
            (results / f"pipetab.sqlite{suffix}").unlink(missing_ok=True)
    t0 = time.perf_counter()
    info = []
    errors = 0
    with ResultStore(results / "pipetab.sqlite") as store, executor:
        for config in configs:
            # CP-SAT runs use their own CP-SAT workers: one configuration at a time
            ex = make_executor("local", 1) if config.run.uses_cpsat and args.executor == "local" else executor
            summary = run_sweep(config, store, ex, progress=not args.quiet, export=results / f"{config.name}.csv")
            print(summary.text())
            errors += len(summary.errors)
            info.append({"name": config.name, "mode": "quick" if args.quick else "full",
                         "configurations": summary.total, "new_rows": summary.new_rows,
                         "skipped": len(summary.skipped), "errors": len(summary.errors),
                         "seconds": round(summary.seconds, 2), "executor": summary.executor,
                         "workers": summary.workers})
    export_rows(info, results / "reproduce_info.csv")
    drawn = figures.draw(results)
    path = report.write_report(results, out)
    total = time.perf_counter() - t0
    print(f"\nreproduction ({'quick' if args.quick else 'full'}) done in {total:.1f} s")
    from pipetab.console import say

    say(f"figures: {', '.join(str(p) for p in drawn)}", " " * 9)
    print(f"report:  {path}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
