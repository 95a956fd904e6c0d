"""pipetab: pipeline-parallel training schedules as tables, judged at three levels
(formula, idealized table, communication-aware simulation) and by one CP-SAT model.

The library lives in three packages, ``pipetab.schedules`` (the table abstraction and known
schedules), ``pipetab.hardware`` (systems, models and what ops cost) and ``pipetab.solver``
(simulation, CP-SAT, the levels); the modules beside this file are front ends that only
compose their public API: ``cli`` (the ``pipetab`` command), ``sweep``, ``plot``, ``demo``.

The names below are imported on first use, so ``import pipetab`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "generate": "pipetab.schedules.registry",
    "formula": "pipetab.schedules.registry",
    "layout": "pipetab.schedules.table",
    "SlotDurations": "pipetab.schedules.table",
    "validate": "pipetab.schedules.validate",
    "table_metrics": "pipetab.schedules.metrics",
    "slot_costs": "pipetab.solver.pricing",
    "hardware_costs": "pipetab.solver.pricing",
    "simulate": "pipetab.solver.simulate",
    "evaluate_levels": "pipetab.solver.levels",
    "Levels": "pipetab.solver.levels",
    "Context": "pipetab.hardware.context",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipetab' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
