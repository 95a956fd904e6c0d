"""Run a sweep: plan against the store, evaluate what is missing on an executor, store each
task's rows as it finishes, summarize.

Resuming is the normal case: configurations whose key is in the store are not run again,
and the store ignores a second row for a key, so a sweep run twice (or killed and re-run)
holds each configuration exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipetab.schedules import registry

from .config import Configuration, Skipped, SweepConfig, expand
from .executors import SerialExecutor
from .run import Progress, evaluate_task

if TYPE_CHECKING:
    from pathlib import Path

    from .store import ResultStore


@dataclass
class Plan:
    """What a sweep has to do: every configuration (grid order), those still missing, and
    the combinations skipped as outside their schedule's regime."""

    configurations: list[Configuration]
    todo: list[Configuration]
    skipped: list[Skipped]

    @property
    def already_done(self) -> int:
        return len(self.configurations) - len(self.todo)

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.configurations]


@dataclass
class Summary:
    """What a run did."""

    name: str
    db: str
    total: int
    already_done: int
    skipped: list[Skipped]
    new_rows: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    executor: str = ""
    workers: int = 0
    limited: int = 0
    exported: tuple[str, int] | None = None

    def text(self) -> str:
        lines = [
            f"sweep {self.name}: {self.total} configurations ({self.new_rows} run now, "
            f"{self.already_done} already in the store"
            + (f", {self.limited} left for a later run (--limit)" if self.limited else "")
            + f", {len(self.errors)} errors) in {self.seconds:.1f} s on {self.executor} x{self.workers}",
        ]
        if self.skipped:
            by = Counter(s.configuration.schedule for s in self.skipped if s.kind == "regime")
            parts = [f"{n} {name} (needs {registry.spec(name).regime})" for name, n in by.items()]
            batch = sum(1 for s in self.skipped if s.kind == "batch")
            if batch:
                parts.append(f"{batch} with B not dividing the global batch")
            cluster = sum(1 for s in self.skipped if s.kind == "cluster")
            if cluster:
                parts.append(f"{cluster} whose tp x dp leaves no pipeline on the cluster's GPUs")
            lines.append(f"skipped {len(self.skipped)} combinations that cannot exist (not errors): "
                         + "; ".join(parts))
        for label, msg in self.errors[:5]:
            lines.append(f"error: {label}: {msg}")
        if len(self.errors) > 5:
            lines.append(f"... and {len(self.errors) - 5} more errors (they are retried on the next run)")
        lines.append(f"results: {self.db}")
        if self.exported:
            lines.append(f"exported {self.exported[1]} rows to {self.exported[0]}")
        from pipetab.console import wrap

        return "\n".join(wrap(line) for line in lines)


def plan(config: SweepConfig, store: ResultStore, check_regime: bool = True) -> Plan:
    """What ``config`` still has to run against ``store``; ``check_regime=False`` does not
    generate schedules to find those outside their regime (the run's workers find them)."""
    configurations, skipped = expand(config, check_regime)
    done = store.done_keys(c.key for c in configurations)
    return Plan(configurations, [c for c in configurations if c.key not in done], skipped)


def tasks_of(configs: list[Configuration]) -> list[list[Configuration]]:
    """Group configurations into tasks: those sharing a schedule instance go together
    (one generator call, one table), except CP-SAT runs, one per task. Biggest first."""
    groups: dict = {}
    for c in configs:
        key = (c.key,) if c.run.uses_cpsat else c.instance
        groups.setdefault(key, []).append(c)
    tasks = list(groups.values())
    tasks.sort(key=lambda t: -(t[0].stages * t[0].microbatches * len(t)))
    return tasks


def run_sweep(
    config: SweepConfig,
    store: ResultStore,
    executor=None,
    *,
    limit: int | None = None,
    progress: bool | object = True,
    on_outcome=None,
    export: str | Path | None = None,
) -> Summary:
    """Evaluate every configuration of ``config`` missing from ``store``.

    ``executor``: from ``make_executor`` (default: in this process). ``limit``: run at most
    this many new configurations (the rest stay for a later run). ``progress``: True for a
    bar on stderr, a stream for a bar there, False for none. ``on_outcome(outcome)`` is
    called after each configuration's row is stored (an exception there stops the run;
    everything stored so far stays). ``export``: write the sweep's rows (.csv / .parquet).
    """
    t0 = time.perf_counter()
    # without a limit the workers find the configurations outside their regime (generating
    # each schedule once, in parallel); a limit counts configurations that exist
    p = plan(config, store, check_regime=limit is not None)
    todo = p.todo
    limited = 0
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        limited = max(0, len(todo) - limit)
        todo = todo[:limit]
    executor = executor or SerialExecutor()
    summary = Summary(config.name, str(store.path), len(p.configurations), p.already_done, list(p.skipped),
                      executor=executor.name, workers=executor.workers, limited=limited)
    by_key = {c.key: c for c in todo}
    labels = {c.key: c.label() for c in todo}
    canon = {c.key: c.canonical() for c in todo}
    bar = None
    if progress and todo:
        bar = Progress(len(todo), f"sweep {config.name}", stream=None if progress is True else progress)
    try:
        if todo:
            tasks = tasks_of(todo)
            with executor:
                for _, outcomes in executor.run(evaluate_task, tasks):
                    ok = [(o.key, o.row, labels[o.key], canon[o.key]) for o in outcomes if o.row is not None]
                    summary.new_rows += store.add_many(ok, sweep=config.name)
                    outside = [Skipped(by_key[o.key], o.skipped) for o in outcomes if o.skipped]
                    summary.skipped.extend(outside)
                    summary.total -= len(outside)
                    bad = [o for o in outcomes if o.error is not None]
                    for o in bad:
                        store.add_error(o.key, o.error, sweep=config.name, label=labels[o.key])
                        summary.errors.append((labels[o.key], o.error))
                    if bar:
                        bar.update(len(outcomes), errors=len(bad))
                    if on_outcome:
                        for o in outcomes:
                            on_outcome(o)
    finally:
        if bar:
            bar.close()
        summary.seconds = time.perf_counter() - t0
    export = export or config.export
    if export:
        summary.exported = (str(export), store.export(export, p.keys))
    return summary
