"""Evaluate configurations into rows, and a small progress bar.

``evaluate(configuration)`` returns one row (a flat dict of plain values) by mode:

* ``table``: level 1 (formula) and level 2 (the ASAP table at the configured slots);
* ``simulate``: the above plus level 3 on the configuration's system, model and memory cap;
* ``search`` / ``bound``: the above plus the CP-SAT model on the known schedule's problem
  (its placement fixed, hinted by it) with costs quantized to integer ticks: the best
  schedule found (re-evaluated by the simulator) and the proven lower bound (``search``), or
  the bound alone.

The levels come from ``evaluate_levels`` and keep its vocabulary: a row holds
``Levels.as_dict()`` flattened (``flat_levels``), block name first (``table_bubble_ratio``,
``simulation_makespan_s``); per-device lists become their maximum, or ``all`` for yes/no.
Every row records the pipetab and OR-Tools versions, status, bound, time limit and CP-SAT
workers (None where they do not apply) and the evaluation's wall time (``runtime_s``, the one
field that differs between two runs of the same configuration).

``evaluate_task(configurations)`` evaluates several configurations that share a schedule
(one generator call, one table) and never raises: a failing configuration comes back as an
error outcome. Each process caches the last schedules' levels, systems and models.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

from pipetab.schedules import registry
from pipetab.schedules.table import SlotDurations
from pipetab.solver.levels import Levels, evaluate_levels
from pipetab.solver.pricing import hardware_costs, profile_costs

from .config import Configuration, cap_bytes

CLUSTER_COLUMNS = ("tp", "dp", "global_batch")  # None without [grid.cluster]
# fields that legitimately differ between two evaluations of the same configuration
VOLATILE = ("runtime_s", "cpsat_wall_s")
LEVEL_BLOCKS = ("formula", "table", "simulation", "cpsat")


class Outcome(NamedTuple):
    """What evaluating one configuration gave: its row, the error that stopped it, or why
    it cannot exist (``skipped``: outside its schedule's regime)."""

    key: str
    row: dict | None
    error: str | None
    skipped: str | None = None


class OutsideRegime(ValueError):
    """The configuration's schedule cannot be generated at its S, B and options."""


@lru_cache(maxsize=1)
def versions() -> dict:
    """pipetab and OR-Tools versions (without importing OR-Tools)."""
    from importlib import metadata

    out = {}
    for dist in ("pipetab", "ortools"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def flat_levels(doc: dict) -> dict:
    """``Levels.as_dict()`` as one flat row: ``devices`` and ``<block>_<key>`` for every
    level present; a per-device list becomes its maximum (``all`` of yes/no values)."""
    row = {"devices": doc["devices"]}
    for block in LEVEL_BLOCKS:
        for key, value in (doc.get(block) or {}).items():
            row[f"{block}_{key}"] = _reduce(value)
    return row


def _reduce(value):
    if not isinstance(value, list):
        return value
    known = [v for v in value if v is not None]
    if not known:
        return None
    return all(known) if isinstance(known[0], bool) else max(known)


# ---- shared pieces, cached per process -------------------------------------------------------


@lru_cache(maxsize=4)
def _levels(schedule: str, stages: int, microbatches: int, options: tuple, fwd: int, bwd: int) -> Levels:
    """Levels 1 and 2 of one instance (tasks group configurations by instance, so a
    process generates and lays out each schedule once); ``OutsideRegime`` when the
    generator refuses the instance."""
    try:
        sched = registry.generate(schedule, stages, microbatches, **dict(options))
    except ValueError as exc:
        raise OutsideRegime(exc.args[0] if exc.args else str(exc)) from None
    return evaluate_levels(sched, slots=SlotDurations(forward=fwd, backward=bwd))


@lru_cache(maxsize=32)
def _system(name: str):
    from pipetab.hardware import load_system

    return load_system(name)


@lru_cache(maxsize=8)
def _model(name: str):
    from pipetab.hardware import load_model

    return load_model(name)


@lru_cache(maxsize=8)
def _profile(path: str):
    from pipetab.hardware.profile import load_profile

    return load_profile(path)


def _context(c: Configuration):
    """The configuration's ``hardware.Context`` ([grid.cluster] and [run]'s recompute)."""
    from pipetab.hardware.context import Context, recompute_of
    from pipetab.hardware.decisions import DECISIONS

    d = c.cluster_dict()  # every [grid.cluster] key but gpus is a decision's
    return Context(**{x.name: d[x.sweep_key] for x in DECISIONS if x.sweep.startswith("grid.cluster.")
                      and x.sweep_key in d}, recompute=recompute_of(c.run.recompute))


def _base(c: Configuration) -> dict:
    return {
        "schedule": c.schedule,
        "stages": c.stages,
        "microbatches": c.microbatches,
        "options": c.options_text,
        "mode": c.run.mode,
        "system": c.system,
        "model": c.model,
        "profile": c.profile,
        **{k: c.cluster_dict().get(k) for k in CLUSTER_COLUMNS},
        "microbatch_size": _microbatch_size(c),
        "cap": c.cap if c.run.uses_hardware else None,
        "recompute": c.run.recompute if c.run.uses_hardware else None,
        "contention": c.run.contention if c.run.uses_hardware else None,
        "forward_slots": c.run.forward_slots,
        "backward_slots": c.run.backward_slots,
    }


def _tail(c: Configuration, status: str, seconds: float, **cp) -> dict:
    v = versions()
    return {
        "status": status,
        "bound_s": cp.get("bound_s"),
        "time_limit_s": c.run.time_limit if c.run.uses_cpsat else None,
        "cpsat_workers": c.run.workers if c.run.uses_cpsat else None,
        "deterministic_time_s": c.run.deterministic_time if c.run.uses_cpsat else None,
        "pipetab_version": v["pipetab"],
        "ortools_version": v["ortools"],
        "runtime_s": seconds,
    }


def _microbatch_size(c: Configuration) -> int | None:
    """Sequences per microbatch of a hardware configuration (its context resolved:
    [grid.cluster]'s ``microbatch_size``, else its or the model's global batch / (dp x B));
    a profile's own."""
    if not c.run.uses_hardware:
        return None
    if c.profile:
        return _profile(c.profile).microbatch_size
    return _context(c).resolved(_model(c.model), c.microbatches).microbatch_size


def _costs(c: Configuration, sched):
    """Costs of ``sched`` on the configuration's system and model in its context, or from
    its profile (no memory cap)."""
    if c.profile:
        return profile_costs(sched, _profile(c.profile), contention=c.run.contention)
    return hardware_costs(sched, _system(c.system), _model(c.model), _context(c), contention=c.run.contention)


def _capacity(c: Configuration, costs) -> tuple[float | None, ...]:
    """The configuration's memory cap in bytes, per device ("device" with a profile: its
    ``memory_bytes``, unlimited when it has none)."""
    if c.profile:
        device_memory = _profile(c.profile).memory_bytes
        if device_memory is None and c.cap == "device":
            return (None,) * len(costs.persistent)
    else:
        device_memory = _system(c.system).device.memory_bytes
    biggest = max(costs.activation.values())
    return tuple(cap_bytes(c.cap, device_memory, p, biggest) for p in costs.persistent)


def _with_capacity(doc: dict, capacity: tuple) -> dict:
    """``Levels.as_dict()`` of a simulation re-judged under another memory capacity: the
    simulation does not depend on it, only ``capacity_bytes`` and ``fits_memory`` do (the
    simulator's rule: peak memory within the capacity, 1e-9 bytes of slack)."""
    sim = doc["simulation"]
    fits = [cap is None or peak <= cap + 1e-9 for peak, cap in zip(sim["peak_memory_bytes"], capacity)]
    sim = {**sim, "capacity_bytes": [None if cap is None else int(cap) for cap in capacity], "fits_memory": fits}
    return {**doc, "simulation": sim}


def evaluate(c: Configuration) -> dict:
    """The row of one configuration (raises on failure; see ``evaluate_task``)."""
    return evaluate_group([c])[0]


def evaluate_group(configs: list[Configuration]) -> list[dict]:
    """The rows of configurations that differ at most in their memory cap (raises on
    failure). They share one table and, on hardware, one simulation, which the cap does not
    change; each row's ``runtime_s`` is its share of the group's wall time."""
    t0 = time.perf_counter()
    c0 = configs[0]
    if any(c.simulation_key != c0.simulation_key for c in configs):
        raise ValueError("evaluate_group takes configurations that differ only in their cap")
    levels = _levels(*c0.instance)
    rows = []
    if c0.run.mode == "table":
        doc = levels.as_dict()
        rows = [{**_base(c), **flat_levels(doc)} for c in configs]
    else:
        costs = _costs(c0, levels.schedule)
        levels = levels.simulated(costs)
        doc = levels.as_dict(exposed_comm=c0.run.exposed_comm and c0.run.mode == "simulate")
        for c in configs:
            capacity = _capacity(c, costs)
            row = {**_base(c), **flat_levels(_with_capacity(doc, capacity))}
            if c.run.uses_cpsat:
                row.update(_cpsat(c, levels.schedule, replace(costs, capacity=capacity)))
            rows.append(row)
    share = (time.perf_counter() - t0) / len(configs)
    return [{**row, **_tail(c, row.get("status", "ok"), share, bound_s=row.get("bound_s"))}
            for c, row in zip(configs, rows)]


def tick_of(c: Configuration, costs) -> float:
    """The tick (seconds) of a CP-SAT configuration: ``run.tick_s``, else the shortest op
    time divided by ``run.ticks_per_op``."""
    if c.run.tick_s:
        return c.run.tick_s
    return costs.default_tick(c.run.ticks_per_op)


def _cpsat(c: Configuration, sched, costs) -> dict:
    """CP-SAT on the known schedule's problem (its placement and microbatch-to-pipeline map
    fixed, orders free) in seconds (``cpsat.api.solve_seconds``, what ``pipetab
    search``/``bound`` and ``plan`` answer): a search on durations rounded up to ticks,
    hinted by the known schedule, and a bound on durations rounded down. ``cpsat_*_ticks``
    are in ticks of ``tick_s`` (the schedule's rounded up, the bound's rounded down);
    ``cpsat_real_s`` is the schedule's real T_sim and ``bound_real_s`` = ``bound_s`` the
    bound of the real-valued problem (same placement)."""
    from pipetab.solver import cpsat
    from pipetab.solver.costs import Rounding
    from pipetab.solver.cpsat.api import solve_seconds
    from pipetab.solver.simulate import simulate

    if c.run.contention:
        raise ValueError("the CP-SAT model has no link contention; set run.contention = false")
    if costs.offload_fraction:
        raise ValueError("grid.cluster.offload_activations applies with run.mode = simulate: the sweep's CP-SAT runs "
                         "have no offload decisions ('pipetab search --offload-activations' has them)")
    tick = tick_of(c, costs)
    q = costs.quantized(tick)
    config = cpsat.CpSatConfig(time_limit_s=c.run.time_limit, workers=c.run.workers,
                               deterministic_time=c.run.deterministic_time)
    answer = solve_seconds(cpsat.Problem.from_schedule(sched, q), costs, c.run.mode, config, [sched], tick_s=tick)
    res = answer.result
    known = simulate(sched, q).makespan
    rounding = Rounding.UP if answer.search is not None else Rounding.DOWN
    out: dict[str, object] = {"tick_s": tick, "rounding": str(rounding), "known_makespan_ticks": known,
                              "known_makespan_q_s": known * tick}
    for name in registry.REGISTRY:  # every registry schedule of the same problem, as CP-SAT judged it
        k = res.known.get(name)
        if k is not None:
            out[f"known_{name}_ticks"] = k.makespan
            out[f"known_{name}_fits"] = k.fits
    ticks = None if answer.schedule is None else simulate(answer.schedule, q).makespan
    out.update({
        "status": str(answer.status),
        "cpsat_makespan_ticks": ticks,
        "cpsat_bound_ticks": answer.bound.lower_bound,
        "cpsat_makespan_s": None if ticks is None else ticks * tick,
        "bound_s": answer.lower_bound_s,
        "gap": answer.gap,
        "bound_assumptions": "; ".join(answer.assumptions),
        "cpsat_message": answer.message,
        "min_feasible_cap_bytes": answer.bound.min_feasible_cap,
        "cpsat_wall_s": answer.runtime_s,
        "cpsat_real_s": answer.seconds,
        "bound_real_s": answer.lower_bound_s,
        "bound_real_status": str(answer.bound.status),
    })
    return out


def evaluate_task(configs: list[Configuration]) -> list[Outcome]:
    """Evaluate configurations (ideally sharing a schedule, see ``driver.tasks_of``); never
    raises: a failure becomes the error outcome of the configurations it stopped."""
    groups: dict = {}
    for c in configs:
        groups.setdefault(c.simulation_key, []).append(c)
    out: list[Outcome] = []
    for group in groups.values():
        try:
            out.extend(Outcome(c.key, row, None) for c, row in zip(group, evaluate_group(group)))
        except OutsideRegime as exc:
            out.extend(Outcome(c.key, None, None, exc.args[0]) for c in group)
        except Exception as exc:
            msg = exc.args[0] if getattr(exc, "args", None) else repr(exc)
            out.extend(Outcome(c.key, None, f"{type(exc).__name__}: {msg}") for c in group)
    return out


def same_row(a: dict, b: dict) -> bool:
    """Whether two rows agree on every field except the volatile ones (wall times)."""
    strip = lambda r: {k: v for k, v in r.items() if k not in VOLATILE}  # noqa: E731
    ra, rb = strip(a), strip(b)
    if ra.keys() != rb.keys():
        return False
    for k in ra:
        x, y = ra[k], rb[k]
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif x != y:
            return False
    return True


# ---- progress ----------------------------------------------------------------------------------


class Progress:
    """Progress on ``stream`` (stderr): rich's progress bar on a terminal, a plain line
    every 10 % otherwise (piped, a log file)."""

    def __init__(self, total: int, label: str = "", stream=None, width: int = 28, min_interval: float = 0.1):
        self.total = max(0, int(total))
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.min_interval = min_interval
        self.done = 0
        self.errors = 0
        self.t0 = time.perf_counter()
        self._last = 0.0
        self._decile = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._rich = None
        if self._tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._rich = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[errors]}"),
                             console=Console(file=self.stream, width=100))
            self._task = self._rich.add_task(label, total=self.total, errors="")
            self._rich.start()

    def update(self, n: int = 1, errors: int = 0) -> None:
        self.done += n
        self.errors += errors
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done,
                              errors=f"{self.errors} errors" if self.errors else "")
        else:
            decile = (10 * self.done // self.total) if self.total else 10
            if decile != self._decile:
                self._decile = decile
                self.stream.write(self.line() + "\n")
                self.stream.flush()

    def line(self) -> str:
        total = self.total or 1
        frac = min(1.0, self.done / total)
        filled = round(frac * self.width)
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / frac - elapsed if 0 < frac < 1 else 0.0
        err = f"  {self.errors} errors" if self.errors else ""
        head = f"{self.label} " if self.label else ""
        return (f"{head}[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{elapsed:6.1f} s  eta {eta:5.1f} s{err}")

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
