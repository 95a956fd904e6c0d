"""The three levels of one schedule in one value: ``evaluate_levels`` → ``Levels``.

Level 1 is the registry's closed form (when the schedule has one), level 2 the idealized
table (ASAP on integer slots) measured by counting cells, level 3 the communication-aware
simulation on given costs; optionally the CP-SAT model in fixed mode, which must reproduce
level 3 on the same integer costs. Every front end (CLI, sweeps, plan, viewer, demo) formats
this value; none builds the levels itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipetab.schedules import registry
from pipetab.schedules.metrics import TableMetrics, table_metrics
from pipetab.schedules.table import SlotDurations, Table, layout
from pipetab.schedules.validate import validate

from .costs import EVALUATE_TICKS_PER_OP, Costs
from .offload import simulated
from .pricing import slot_costs

if TYPE_CHECKING:
    from pipetab.schedules.formulas import Formula
    from pipetab.schedules.schedule import Schedule

    from .cpsat.result import Status
    from .simulate import Simulation


@dataclass(frozen=True)
class CpSatLevel:
    """CP-SAT in fixed mode: status and makespan in the costs' unit (slots, or seconds when
    the costs are in seconds; ``makespan_ticks`` then counts ticks of ``tick_s``). It times
    the schedule without memory caps: whether it fits is the simulation's to say."""

    status: Status
    makespan: float | None
    unit: str
    tick_s: float | None = None
    makespan_ticks: int | None = None

    def as_dict(self) -> dict:
        out = {"makespan": self.makespan, "unit": self.unit, "status": self.status}
        if self.tick_s is not None:
            out.update(tick_s=self.tick_s, makespan_ticks=self.makespan_ticks)
        return out


@dataclass(frozen=True)
class Levels:
    """One schedule judged at the levels: ``formula`` (None when no closed form is known),
    the ``table`` and its ``metrics``, the ``simulation`` (None without costs) and the
    CP-SAT evaluation (None unless asked for)."""

    schedule: Schedule
    formula: Formula | None
    table: Table
    metrics: TableMetrics
    slots: SlotDurations
    simulation: Simulation | None = None
    cpsat: CpSatLevel | None = None

    def simulated(self, costs: Costs) -> "Levels":
        """The same schedule with level 3 on ``costs`` (levels 1 and 2 reused, no CP-SAT):
        one table, many systems."""
        return replace(self, simulation=check_finite(simulated(self.schedule, costs)), cpsat=None)

    def as_dict(self, exposed_comm: bool = True) -> dict:
        """Plain data: ``schedule``, ``stages``, ``microbatches``, ``devices``, then one
        block per level present (``formula``, ``table``, ``simulation``, ``cpsat``).
        ``exposed_comm=False`` leaves out the exposed communication (None), which costs
        a second simulation."""
        s = self.schedule
        doc = {
            "schedule": s.name,
            "stages": s.params.get("stages", s.num_devices),
            "microbatches": s.num_microbatches,
            "devices": s.num_devices,
            "formula": None if self.formula is None else self.formula.as_dict(),
            "table": self.metrics.as_dict(),
        }
        if self.simulation is not None:
            doc["simulation"] = simulation_dict(self.simulation, exposed_comm)
        if self.cpsat is not None:
            doc["cpsat"] = self.cpsat.as_dict()
        return doc


def simulation_dict(sim: Simulation, exposed_comm: bool = True) -> dict:
    """The level-3 numbers of a simulation as plain data (seconds and bytes; lists are per
    device; ``transfers`` counts the messages between devices)."""
    return {
        "makespan_s": sim.makespan,
        "idle_ratio": sim.idle_ratio,
        "exposed_comm_s": sim.exposed_comm if exposed_comm else None,
        "transfers": len(sim.transfers),
        "busy_s": list(sim.busy),
        "peak_activation_bytes": [round(x) for x in sim.peak_activation],
        "persistent_bytes": [round(x) for x in sim.costs.persistent],
        "peak_memory_bytes": [round(x) for x in sim.peak_memory],
        "capacity_bytes": [None if c is None else int(c) for c in sim.costs.capacity],
        "fits_memory": list(sim.fits_memory),
    }


def check_finite(sim: Simulation) -> Simulation:
    """``sim`` when its makespan is a finite number; ``ValueError`` otherwise (costs that
    overflow, e.g. a system with peak_flops or bandwidth of 1e-300, would give "inf s")."""
    if not math.isfinite(sim.makespan):
        raise ValueError(f"the simulated step takes {sim.makespan} s: the costs overflow (is a system's "
                         "peak_flops, mem_bandwidth or link bandwidth absurdly small?)")
    return sim


def registry_formula(schedule: Schedule) -> Formula | None:
    """The closed form of a schedule made by the registry (from its name and recorded
    parameters), None for any other schedule."""
    if schedule.name not in registry.REGISTRY:
        return None
    params = dict(schedule.params)
    stages, microbatches = params.pop("stages", None), params.pop("microbatches", None)
    if not isinstance(stages, int) or microbatches != schedule.num_microbatches:
        return None
    return registry.formula(schedule.name, stages, microbatches, **params)


def evaluate_levels(
    schedule: Schedule | str,
    stages: int | None = None,
    microbatches: int | None = None,
    *,
    options: dict | None = None,
    slots: SlotDurations | None = None,
    weight_memory: float = 1.0,
    costs: Costs | None = None,
    cpsat: bool = False,
    tick_s: float | None = None,
) -> Levels:
    """Judge a schedule at the levels.

    ``schedule``: a ``Schedule``, or a registry name with ``stages``, ``microbatches`` and
    ``options``. ``slots`` and ``weight_memory`` (M_W / M held until W when the backward is
    split) define the table; ``costs`` (e.g. ``hardware_costs``) adds the simulation;
    ``cpsat`` adds CP-SAT in fixed mode — on the table's slot costs without ``costs``, else
    on ``costs`` quantized to ticks of ``tick_s`` seconds (default 1/1000 of the shortest
    op). The table is validated against the schedule before anything is measured."""
    if isinstance(schedule, str):
        if stages is None or microbatches is None:
            raise ValueError("evaluate_levels needs stages and microbatches with a schedule name")
        schedule = registry.generate(schedule, stages, microbatches, **(options or {}))
    elif stages is not None or microbatches is not None or options:
        raise ValueError("stages, microbatches and options apply only to a schedule given by name")
    slots = slots or SlotDurations()
    table = layout(schedule, slots)
    validate(table, schedule)
    metrics = table_metrics(table, schedule, weight_memory=weight_memory)
    sim = simulated(schedule, costs) if costs is not None else None
    if sim is not None:
        check_finite(sim)
    cp = _cpsat(schedule, slots, weight_memory, costs, tick_s) if cpsat else None
    return Levels(schedule, registry_formula(schedule), table, metrics, slots, sim, cp)


def _cpsat(schedule: Schedule, slots: SlotDurations, weight_memory: float, costs: Costs | None,
           tick_s: float | None) -> CpSatLevel:
    from .cpsat import CpSatConfig
    from .cpsat import evaluate as cp_evaluate

    if costs is not None:
        costs = costs.with_activation_cap(None)
    if costs is None:
        result = cp_evaluate(schedule, slot_costs(schedule, slots, weight_memory=weight_memory), CpSatConfig())
        return CpSatLevel(result.status, result.makespan, "slots")
    if costs.unit != "s":
        result = cp_evaluate(schedule, costs, CpSatConfig())
        return CpSatLevel(result.status, result.makespan, costs.unit)
    tick = tick_s or costs.default_tick(EVALUATE_TICKS_PER_OP)
    result = cp_evaluate(schedule, costs.quantized(tick), CpSatConfig())
    seconds = None if result.makespan is None else result.makespan * tick
    return CpSatLevel(result.status, seconds, "s", tick, result.makespan)
