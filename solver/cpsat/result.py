"""``Result``: what a CP-SAT mode returns, solver-independent (``Status``: ``optimal`` —
proven minimal under ``bound_assumptions``; ``feasible``; ``infeasible`` — proven, e.g. a cap
too small; ``unknown`` — no schedule and no proof within the limits), and ``SolveLog``, the
record of its phases and their solves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Mapping

from .problem import Objective

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule


class Status(StrEnum):
    """How far a result got (module docstring)."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"


class Mode(StrEnum):
    """What was asked: evaluate a fixed schedule, search a better one, or bound the optimum."""

    EVALUATE = "evaluate"
    SEARCH = "search"
    BOUND = "bound"


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
    """One CP-SAT solve: search, seed, horizon, status, value and bound (model units), times."""

    phase: str
    search: str
    seed: int
    horizon: int | None
    status: Status
    value: int | None
    bound: int | None
    wall_s: float
    det_s: float
    stalled: bool = False

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PhaseRecord:
    """One phase of a search or decomposition: its wall time, its solves, what it found."""

    name: str
    wall_s: float
    solves: tuple[SolveRecord, ...] = ()
    note: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "wall_s": self.wall_s, "note": self.note,
                "solves": [r.as_dict() for r in self.solves]}


@dataclass(frozen=True)
class SolverInfo:
    """How a result was computed, and the stop rule that ended it (None: time limit or proof)."""

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
class SolveLog:
    """How a result was found: one ``PhaseRecord`` per phase."""

    phases: tuple[PhaseRecord, ...] = ()

    def as_list(self) -> list[dict]:
        return [ph.as_dict() for ph in self.phases]

    def solves(self, phase: str | None = None) -> list[SolveRecord]:
        """The solves of every phase (of phases named ``phase``)."""
        return [r for ph in self.phases if phase is None or ph.name == phase for r in ph.solves]


@dataclass(frozen=True, kw_only=True)
class CyclicInfo:
    """What the cyclic phase proved: the block of ``block`` microbatches of least period per
    microbatch found, its ``period`` and ``period_bound`` (the least among periodic schedules of
    that block; equal: proven), in the result's unit; ``blocks``: (block, period or None, bound)
    of every block tried; ``why``: what proved the bound."""

    block: int
    period: int
    period_bound: int
    wall_s: float = 0.0
    why: str = ""
    blocks: tuple[tuple[int, int | None, int], ...] = ()
    mix: tuple[int, ...] = ()  # the block's pipelines, where not the problem's first microbatches'
    pairs: bool = False  # whether a forward and a backward may run as one overlapped block

    @property
    def proven(self) -> bool:
        return self.period_bound >= self.period

    def assumption(self) -> str:
        mixed = (f" taking pipelines {', '.join(map(str, self.mix))} in turn (each pipeline's microbatches in "
                 "their order)" if self.mix else "")
        return (f"periodic schedules of block {self.block}{mixed}: microbatch j + {self.block} runs every op one "
                f"period after microbatch j" + ("; forward-backward pairs may run overlapped" if self.pairs else ""))

    def as_dict(self) -> dict:
        return {"block": self.block, "period": self.period, "period_bound": self.period_bound,
                "proven": self.proven, "wall_s": self.wall_s, "why": self.why, "pairs": self.pairs,
                "blocks": [list(b) for b in self.blocks], "mix": list(self.mix), "bound_holds_for": self.assumption()}


@dataclass(frozen=True, kw_only=True)
class Result:
    """Outcome of ``evaluate``, ``search``, ``bound`` or ``least_peak_memory``.
    
    ``makespan`` and ``lower_bound`` are in the model's integer unit: idealized ticks of
    ``tick_slots`` slots (``unit`` ``slots``; 1/v when a device holds v stages, so ``in_slots``
    compares placements), or ``ticks`` of ``tick_s`` seconds. ``bound_assumptions``: every
    restriction under which the bound holds. ``min_feasible_cap``: when the cap is infeasible,
    the least one (same on every device, the costs' memory unit) with a schedule. ``known``:
    known schedules' makespans and gaps. With the ``period`` objective ``makespan`` and
    ``lower_bound`` hold the period; with ``memory`` ``makespan`` is the step and
    ``peak_memory`` the objective (``objective_value``/``objective_unit`` say which).
    ``analytic_bound``: the solver-free part of the bound; ``peak_activations``: evaluate mode,
    per device; ``cyclic``: its bound is on the period among periodic schedules of its block,
    not on the whole step."""

    mode: Mode
    status: Status
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
    objective: Objective = Objective.MAKESPAN
    tick_slots: float = 1.0
    log: SolveLog = SolveLog()
    solver: SolverInfo = field(default_factory=SolverInfo)
    analytic_bound: float | None = None
    peak_activations: tuple[float, ...] | None = None
    cyclic: CyclicInfo | None = None
    peak_memory: float | None = None

    @property
    def objective_value(self) -> float | None:
        """The objective's value, in ``objective_unit``."""
        return self.peak_memory if self.objective is Objective.MEMORY else self.makespan

    @property
    def objective_unit(self) -> str:
        return "bytes" if self.objective is Objective.MEMORY else self.unit

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", Status(self.status))
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise ValueError(f"status must be one of {', '.join(Status)} and mode one of {', '.join(Mode)}, "
                             f"got {self.status!r}, {self.mode!r}") from None

    @property
    def gap(self) -> float | None:
        return gap_of(self.makespan, self.lower_bound)

    def in_slots(self, value: float | None) -> float | None:
        """A time of this idealized result in slots (``value * tick_slots``)."""
        if value is None or self.unit != "slots":
            return None
        return value * self.tick_slots

    def as_dict(self) -> dict:
        """Plain-data form (JSON-ready; the schedule is named, not serialized)."""
        plain = ("makespan", "lower_bound", "gap", "unit", "tick_s", "tick_slots", "message", "min_feasible_cap",
                 "analytic_bound")
        out: dict = {"mode": str(self.mode), "status": str(self.status), "objective": str(self.objective),
                     **{k: getattr(self, k) for k in plain}}
        out.update(runtime_s=round(self.runtime_s, 4), bound_assumptions=list(self.bound_assumptions),
                   time_to_first_s=None if self.time_to_first_s is None else round(self.time_to_first_s, 4),
                   schedule=None if self.schedule is None else self.schedule.name,
                   known={k: v.as_dict() for k, v in self.known.items()}, solver=self.solver.as_dict(),
                   peak_activations=None if self.peak_activations is None else list(self.peak_activations),
                   phases=self.log.as_list(), cyclic=None if self.cyclic is None else self.cyclic.as_dict())
        return out

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
