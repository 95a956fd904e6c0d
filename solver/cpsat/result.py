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
class SolveRecord:
    """One CP-SAT solve of a phase: its search (subsolvers), seed, the horizon it probed
    (bound phase), status, objective found and bound proven (model units), times, and
    whether it was stopped for lack of progress."""

    phase: str
    search: str
    seed: int
    horizon: int | None
    status: str
    value: int | None
    bound: int | None
    wall_s: float
    det_s: float
    stalled: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PhaseRecord:
    """One phase of a search (``start``, ``bound``, ``search``, ``solve``, or one placement
    of a free-placement search): its wall time, its solves, and what it found."""

    name: str
    wall_s: float
    solves: tuple[SolveRecord, ...] = ()
    note: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "wall_s": self.wall_s, "note": self.note,
                "solves": [r.as_dict() for r in self.solves]}


@dataclass(frozen=True)
class SolverInfo:
    """How a result was computed: workers, seed, CP-SAT portfolio, limits, the model
    families applied, and the stop rule that ended the search (None: the time limit or a
    proof)."""

    workers: int = 1
    random_seed: int = 0
    subsolvers: tuple[str, ...] = ()
    time_limit_s: float | None = None
    deterministic_time: float | None = None
    families: tuple[str, ...] = ()
    stopped_by: str | None = None

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["subsolvers"] = list(self.subsolvers)
        d["families"] = list(self.families)
        return d


@dataclass(frozen=True)
class Result:
    """Outcome of ``evaluate``, ``search`` or ``bound``.

    ``makespan`` and ``lower_bound`` are in the model's integer unit: idealized ticks of
    ``tick_slots`` slots (``unit`` ``slots``; ``in_slots`` converts), or ``ticks`` of
    ``tick_s`` seconds (``seconds`` converts); ``gap`` = (makespan - lower_bound) / makespan.
    ``bound_assumptions`` lists every restriction and convention under which the lower
    bound holds. ``min_feasible_cap`` is the least activation capacity (same on every
    device, in the costs' memory unit) for which a schedule exists, when the given cap is
    infeasible (or when asked). ``known`` maps known schedules to their makespan and gap to
    the bound. ``objective``: ``makespan`` or ``period`` — ``makespan`` and ``lower_bound``
    then hold the period. ``tick_slots``: slots per unit of idealized costs (1/v when a
    device holds v stages), so ``in_slots`` compares placements. ``phases``: one record
    per phase; ``solver``: how it was computed; ``analytic_bound``: the solver-free part of
    the bound; ``peak_activations``: evaluate mode, per device.
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
    tick_s: float | None = None
    objective: str = "makespan"
    tick_slots: float = 1.0
    phases: tuple[PhaseRecord, ...] = ()
    solver: SolverInfo = field(default_factory=SolverInfo)
    analytic_bound: float | None = None
    peak_activations: tuple[float, ...] | None = None

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

    def in_slots(self, value: float | None) -> float | None:
        """A time of this idealized result in slots (``value * tick_slots``)."""
        if value is None or self.unit != "slots":
            return None
        return value * self.tick_slots

    def as_dict(self) -> dict:
        """Plain-data form (JSON-ready; the schedule is named, not serialized)."""
        return {
            "mode": self.mode,
            "status": self.status,
            "objective": self.objective,
            "makespan": self.makespan,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "unit": self.unit,
            "tick_s": self.tick_s,
            "tick_slots": self.tick_slots,
            "runtime_s": round(self.runtime_s, 4),
            "time_to_first_s": None if self.time_to_first_s is None else round(self.time_to_first_s, 4),
            "bound_assumptions": list(self.bound_assumptions),
            "message": self.message,
            "min_feasible_cap": self.min_feasible_cap,
            "schedule": None if self.schedule is None else self.schedule.name,
            "known": {k: v.as_dict() for k, v in self.known.items()},
            "analytic_bound": self.analytic_bound,
            "peak_activations": None if self.peak_activations is None else list(self.peak_activations),
            "solver": self.solver.as_dict(),
            "phases": [ph.as_dict() for ph in self.phases],
        }

    def summary(self) -> str:
        """One line for humans."""
        parts = [f"{self.mode}: {self.status}"]
        ticks = self.unit == "slots" and self.tick_slots != 1
        if self.makespan is not None:
            parts.append(f"{self.objective} {self.in_slots(self.makespan):g} slots ({self.makespan:g} ticks of "
                         f"{self.tick_slots:g} slot)" if ticks else f"{self.objective} {self.makespan:g} {self.unit}")
        if self.lower_bound is not None:
            parts.append(f"lower bound {self.in_slots(self.lower_bound) if ticks else self.lower_bound:g}")
        if self.gap is not None:
            parts.append(f"gap {100 * self.gap:.2f}%")
        parts.append(f"{self.runtime_s:.2f} s")
        if self.min_feasible_cap is not None:
            parts.append(f"min feasible cap {self.min_feasible_cap:g}")
        if self.message:
            parts.append(self.message)
        return ", ".join(parts)
