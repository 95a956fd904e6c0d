"""``Deadline``: the time of one call, made once at its public entry (``Deadline.start``,
or ``CpSatConfig.deadline()``) and sliced for the phases and sub-problems below it.

Always a wall-clock end (``safety_share`` of the limit before it, at most
``safety_max_s``: solvers overrun short limits by tenths of a second, and what they find
is re-checked after); with a deterministic budget also CP-SAT's deterministic seconds,
which the phases share instead of wall-clock shares (reproducible), the wall clock still
capping every solve. A slice is a child deadline: it ends no later than its parent, and
what it spends of the deterministic budget is spent by every ancestor too.
"""

from __future__ import annotations

import time
from typing import Protocol


class _Spent(Protocol):
    @property
    def det_time(self) -> float: ...

    @property
    def wall_time(self) -> float: ...


class Deadline:
    """A wall-clock ``end`` (``time.perf_counter``) and, when ``det`` is given, a budget of
    deterministic seconds; ``t0`` is when the call began. Make the first with ``of``."""

    def __init__(self, t0: float, end: float, det: float | None = None, *, build_det_per_op: float = 2e-6,
                 parent: "Deadline | None" = None):
        self.t0 = t0
        self.end = end
        self.det = det
        self.build_det_per_op = build_det_per_op
        self.parent = parent

    @classmethod
    def start(cls, limit_s: float, det: float | None = None, *, safety_share: float = 0.05,
              safety_max_s: float = 1.0, build_det_per_op: float = 2e-6, t0: float | None = None) -> "Deadline":
        """The deadline of a call of ``limit_s`` seconds (and ``det`` deterministic ones),
        beginning now (or at ``t0``)."""
        t0 = time.perf_counter() if t0 is None else t0
        return cls(t0, t0 + limit_s - min(safety_share * limit_s, safety_max_s), det,
                   build_det_per_op=build_det_per_op)

    @property
    def deterministic(self) -> bool:
        return self.det is not None

    def wall_left(self) -> float:
        return self.end - time.perf_counter()

    def det_left(self) -> float:
        """Deterministic seconds left here and in every ancestor (the least)."""
        left = self.det if self.det is not None else float("inf")
        return min(left, self.parent.det_left()) if self.parent is not None else left

    def left(self) -> float:
        """Time left in the deadline's unit (deterministic or wall-clock seconds)."""
        if self.deterministic:
            return self.det_left() if self.wall_left() > 0 else 0.0
        return self.wall_left()

    # ---- children ------------------------------------------------------------------------
    def slice(self, share: float) -> "Deadline":
        """A phase's deadline: ``share`` of what is left (deterministically: of the
        budget, the wall clock ending with this one)."""
        if self.deterministic:
            return self._child(self.end, share * max(0.0, self.left()))
        return self._child(min(self.end, time.perf_counter() + share * max(0.0, self.left())), None)

    def within(self, seconds: float, det: float | None = None) -> "Deadline":
        """A sub-problem's deadline, beginning now (its own ``t0``): at most ``seconds``
        of wall clock and, when deterministic, ``det`` deterministic seconds (default:
        what is left)."""
        now = time.perf_counter()
        end = min(self.end, now + max(0.0, seconds))
        if not self.deterministic:
            return self._child(end, None, now)
        return self._child(end, self.det_left() if det is None else det, now)

    def _child(self, end: float, det: float | None, t0: float | None = None) -> "Deadline":
        return Deadline(self.t0 if t0 is None else t0, end, det, build_det_per_op=self.build_det_per_op,
                        parent=self)

    # ---- solves --------------------------------------------------------------------------
    def room(self, build_s: float) -> bool:
        """Whether another model build (``build_s`` seconds, as the last one took) and a
        solve still fit: CP-SAT's presolve may overrun a short limit by tenths of a second."""
        if self.deterministic:
            return self.left() >= 0.01 and self.wall_left() > 0
        return self.left() >= max(0.5, 1.5 * build_s)

    def limits(self) -> tuple[float, float | None]:
        """(wall-clock, deterministic) limits of a solve that may use all of what is left."""
        wall = max(0.01, self.wall_left())
        return wall, (max(1e-3, self.left()) if self.deterministic else None)

    def cost(self, raw: _Spent, num_ops: int) -> float:
        """What a solve cost in the deadline's unit; deterministically, building the model
        and a solve that presolve settles count ``build_det_per_op`` per op at least."""
        return max(raw.det_time, self.build_det_per_op * num_ops) if self.deterministic else raw.wall_time

    def charge(self, raw: _Spent, num_ops: int) -> None:
        """Spend a solve's deterministic time here and in every ancestor."""
        if not self.deterministic:
            return
        cost = self.cost(raw, num_ops)
        node: Deadline | None = self
        while node is not None:
            if node.det is not None:
                node.det -= cost
            node = node.parent
