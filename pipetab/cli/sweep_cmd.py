"""``pipetab sweep CONFIG.toml``: run a sweep (see ``solver.sweep``) into a results store."""

from __future__ import annotations

import sys
from pathlib import Path

from . import common
from .common import UsageError, positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a sweep config (schedules x S x B x systems x models x caps) into a results store",
        description="Evaluate every configuration of a sweep config file. Results go to a SQLite "
        "store, one row per configuration; re-running skips what is stored, so an interrupted "
        "sweep resumes. Combinations outside a schedule's regime are skipped (not errors).",
    )
    p.add_argument("config", metavar="CONFIG.toml", help="sweep config file (format: solver/sweep/config.py)")
    p.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="local process pool (default) or a Dask cluster")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address (default with --executor dask: a LocalCluster)")
    p.add_argument("--workers", type=positive_int("workers"), default=None,
                   help="worker processes (default: CPU count; 1 runs in this process)")
    p.add_argument("--db", metavar="PATH", help="results store (default: [output] db, else results/<name>.sqlite)")
    p.add_argument("--export", metavar="FILE", help="also write this sweep's rows to FILE.csv or FILE.parquet")
    p.add_argument("--limit", type=positive_int("limit"), default=None,
                   help="run at most N new configurations now (the rest on a later run)")
    p.add_argument("--dry-run", action="store_true", help="only count what would run, skip and is done")
    p.add_argument("--quiet", action="store_true", help="no progress bar on a terminal (piped: none either way)")
    p.set_defaults(func=run)


def run(args) -> None:
    from pipetab.sweep import ResultStore, load_config, make_executor, plan, run_sweep

    config = load_config(args.config)
    if args.export and Path(args.export).suffix.lower() not in (".csv", ".parquet"):
        raise UsageError(f"--export must end in .csv or .parquet, got {args.export!r}")
    if args.scheduler and args.executor != "dask":
        raise UsageError("--scheduler needs --executor dask")
    if args.export and args.export.lower().endswith(".parquet"):
        import importlib.util

        if not (importlib.util.find_spec("pyarrow") or importlib.util.find_spec("fastparquet")):
            raise UsageError("exporting to Parquet needs pyarrow: pip install pyarrow (or use .csv)")
    db = args.db or config.db or f"results/{config.name}.sqlite"
    for flag, path in (("--db", db), ("--export", args.export or config.export)):
        if path:
            from pipetab.files import check_target

            try:
                if Path(path).parent.is_dir():
                    check_target(path, flag)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    executor = make_executor(args.executor, args.workers, args.scheduler)
    with ResultStore(db) as store:
        if args.dry_run:
            p = plan(config, store)
            print(f"sweep {config.name}: {len(p.configurations)} configurations, {len(p.todo)} to run, "
                  f"{p.already_done} already in {db}, {len(p.skipped)} skipped "
                  "(cannot exist: outside a schedule's regime or B not dividing the global batch)")
            return
        try:
            summary = run_sweep(config, store, executor, limit=args.limit,
                                progress=not args.quiet and sys.stderr.isatty(), export=args.export)
        except KeyboardInterrupt:
            print(("" if args.quiet else "\n") + f"pipetab sweep: interrupted; finished configurations are kept in "
                  f"{db} — run the same command to resume", file=sys.stderr)
            raise SystemExit(130) from None
    print(summary.text())
    if summary.errors:  # the lines above name them; stderr gets the one line of the contract
        label, message = summary.errors[0]
        more = f" and {len(summary.errors) - 1} more" if len(summary.errors) > 1 else ""
        line = (f"{len(summary.errors)} of {summary.total} configurations failed (first: {label}: {message}{more}); "
                "they are retried on the next run")
        if summary.new_rows == 0:  # nothing ran: the configuration is what is wrong
            raise UsageError(line)
        print(common.error_line("sweep", line), file=sys.stderr)
        raise SystemExit(1)
