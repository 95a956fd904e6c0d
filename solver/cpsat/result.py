"""``Result``: what a CP-SAT mode returns, solver-independent and total.

Users never see OR-Tools types: status is one of ``optimal`` (the makespan is proven
minimal under ``bound_assumptions``), ``feasible`` (a schedule, not proven optimal),
``infeasible`` (proven: no schedule exists, e.g. a memory cap too small), ``unknown`` (no
schedule and no proof within the limits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from pipetab.schedules.schedule import Schedule

STATUSES = ("optimal", "feasible", "infeasible", "unknown")


def gap_of(makespan: float | None, lower_bound: float | None) -> float | None:
    """(makespan - lower bound) / makespan, or None when either is missing."""
    if makespan is None or lower_bound is None or makespan <= 0:
        return None
    return max(0.0, (makespan - lower_bound) / makespan)


@dataclass(frozen=True)
class KnownGap:
    """A known schedule judged against a result's bound."""

    makespan: float | None
    fits: bool
    gap: float | None
    note: str = ""

    def as_dict(self) -> dict:
        return {"makespan": self.makespan, "fits": self.fits, "gap": self.gap, "note": self.note}


@dataclass(frozen=True)
class Result:
    """Outcome of ``evaluate``, ``search`` or ``bound``.

    ``makespan`` and ``lower_bound`` are in ``unit`` (the costs' unit: ``slots``, or
    ``ticks`` of ``tick_s`` seconds); ``gap`` = (makespan - lower_bound) / makespan.
    ``bound_assumptions`` lists every restriction and convention under which the lower
    bound holds. ``min_feasible_cap`` is the least activation capacity (same on every
    device, in the costs' memory unit) for which a schedule exists, when the given cap is
    infeasible (or when asked). ``known`` maps known schedules to their makespan and gap to
    the bound. ``details`` holds solver facts (workers, seed, limits, families, runs).
    """

    mode: str
    status: str
    schedule: Schedule | None
    makespan: float | None
    lower_bound: float | None
    unit: str
    runtime_s: float
    time_to_first_s: float | None = None
    bound_assumptions: tuple[str, ...] = ()
    message: str = ""
    min_feasible_cap: float | None = None
    known: Mapping[str, KnownGap] = field(default_factory=dict)
    details: Mapping[str, object] = field(default_factory=dict)
    tick_s: float | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    @property
    def gap(self) -> float | None:
        return gap_of(self.makespan, self.lower_bound)

    def seconds(self, value: float | None) -> float | None:
        """A time of this result in seconds (None for idealized slot units)."""
        if value is None or self.tick_s is None:
            return None
        return value * self.tick_s

    def as_dict(self) -> dict:
        """Plain-data form (JSON-ready; the schedule is named, not serialized)."""
        return {
            "mode": self.mode,
            "status": self.status,
            "makespan": self.makespan,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "unit": self.unit,
            "tick_s": self.tick_s,
            "runtime_s": round(self.runtime_s, 4),
            "time_to_first_s": None if self.time_to_first_s is None else round(self.time_to_first_s, 4),
            "bound_assumptions": list(self.bound_assumptions),
            "message": self.message,
            "min_feasible_cap": self.min_feasible_cap,
            "schedule": None if self.schedule is None else self.schedule.name,
            "known": {k: v.as_dict() for k, v in self.known.items()},
            "details": dict(self.details),
        }

    def summary(self) -> str:
        """One line for humans."""
        parts = [f"{self.mode}: {self.status}"]
        if self.makespan is not None:
            parts.append(f"makespan {self.makespan:g} {self.unit}")
        if self.lower_bound is not None:
            parts.append(f"lower bound {self.lower_bound:g}")
        if self.gap is not None:
            parts.append(f"gap {100 * self.gap:.2f}%")
        parts.append(f"{self.runtime_s:.2f} s")
        if self.min_feasible_cap is not None:
            parts.append(f"min feasible cap {self.min_feasible_cap:g}")
        if self.message:
            parts.append(self.message)
        return ", ".join(parts)
