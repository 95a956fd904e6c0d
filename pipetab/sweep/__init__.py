"""Sweeps: a TOML config -> the cross product of schedules x S x B x systems x models x caps
-> one row per configuration in a resumable SQLite store -> CSV / Parquet.

    from pipetab.sweep import load_config, plan, ResultStore, make_executor, run_sweep
    config = load_config("experiments/configs/fig4_runtime.toml")
    with ResultStore("results/pipetab.sqlite") as store:
        summary = run_sweep(config, store, make_executor("local", workers=2))
        frame = store.frame(plan(config, store).keys)   # this sweep's rows, grid order

Modules: ``config`` (parsing, validation, expansion, configuration keys), ``store``
(SQLite results), ``executors`` (local process pool, Dask), ``run`` (one configuration ->
one row; progress bar), ``driver`` (plan, run, resume, export).
"""

from .config import (
    ConfigError,
    Configuration,
    RunSettings,
    Skipped,
    SweepConfig,
    expand,
    load_config,
    parse_cap,
    parse_config,
)
from .driver import Plan, Summary, plan, run_sweep, tasks_of
from .executors import DaskExecutor, LocalExecutor, SerialExecutor, make_executor
from .run import Outcome, Progress, evaluate, evaluate_task, flat_levels, same_row, versions
from .store import ResultStore, export_rows

__all__ = [
    "ConfigError",
    "Configuration",
    "DaskExecutor",
    "LocalExecutor",
    "Outcome",
    "Plan",
    "Progress",
    "ResultStore",
    "RunSettings",
    "SerialExecutor",
    "Skipped",
    "Summary",
    "SweepConfig",
    "evaluate",
    "evaluate_task",
    "expand",
    "export_rows",
    "flat_levels",
    "load_config",
    "make_executor",
    "parse_cap",
    "parse_config",
    "plan",
    "run_sweep",
    "same_row",
    "tasks_of",
    "versions",
]
