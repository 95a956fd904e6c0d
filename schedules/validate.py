"""Validation of tables: every op exactly once, dependencies respected, one op per cell.

Errors are ``TableError`` (a ``ValueError``) whose message names the op, device and slot.
"""

from __future__ import annotations

from collections import defaultdict

from .ops import Kind, Op, data_predecessors
from .schedule import Placement, Schedule
from .table import Table


class TableError(ValueError):
    """A table breaks a rule of the abstraction."""


def infer_structure(table: Table) -> tuple[Placement, tuple[int, ...], bool]:
    """Placement, microbatch->pipeline map and whether backward is split, read off a table.

    Raises ``TableError`` when a stage sits on two devices, a microbatch uses two
    pipelines, or microbatch / stage numbers have holes.
    """
    where: dict[tuple[int, int], int] = {}
    mb2pipe: dict[int, int] = {}
    split = False
    for e in table.entries:
        op = e.op
        if not 0 <= e.device < table.num_devices:
            raise TableError(f"op {op} is on device {e.device}; devices are 0..{table.num_devices - 1}")
        if e.start < 0 or e.duration < 1:
            raise TableError(f"op {op} on device {e.device} has start {e.start} and duration {e.duration}")
        key = (op.pipeline, op.stage)
        if where.setdefault(key, e.device) != e.device:
            raise TableError(
                f"stage {op.stage} of pipeline {op.pipeline} runs on devices {where[key]} and "
                f"{e.device} (op {op} at slot {e.start})"
            )
        if mb2pipe.setdefault(op.microbatch, op.pipeline) != op.pipeline:
            raise TableError(
                f"microbatch {op.microbatch} appears in pipelines {mb2pipe[op.microbatch]} and "
                f"{op.pipeline} (op {op} on device {e.device}, slot {e.start})"
            )
        split |= op.kind is Kind.W
    if not table.entries:
        raise TableError("the table has no ops")
    num_mb = max(mb2pipe) + 1
    for m in range(num_mb):
        if m not in mb2pipe:
            raise TableError(f"microbatch {m} has no ops (microbatches must be numbered 0..{num_mb - 1})")
    num_pipes = max(p for p, _ in where) + 1
    stage2device = []
    for p in range(num_pipes):
        n = max((s for q, s in where if q == p), default=-1) + 1
        if n == 0:
            raise TableError(f"pipeline {p} has no ops (pipelines must be numbered 0..{num_pipes - 1})")
        for s in range(n):
            if (p, s) not in where:
                raise TableError(f"stage {s} of pipeline {p} has no ops")
        stage2device.append(tuple(where[(p, s)] for s in range(n)))
    placement = Placement(tuple(stage2device), table.num_devices)
    return placement, tuple(mb2pipe[m] for m in range(num_mb)), split


def validate(table: Table, schedule: Schedule | None = None) -> None:
    """Raise ``TableError`` naming the first broken rule; return None if the table is valid.

    Rules: each op of every microbatch's chain appears exactly once (F and B on every stage
    of its pipeline, and W on every stage when any W appears); no device runs two ops in one
    slot; every op starts no earlier than the end of each data predecessor. With
    ``schedule``, the table must also hold exactly that schedule's ops on its devices.
    """
    counts: dict[Op, int] = defaultdict(int)
    for e in table.entries:
        counts[e.op] += 1
        if counts[e.op] == 2:
            raise TableError(f"op {e.op} appears twice (again on device {e.device} at slot {e.start})")
    placement, mb2pipe, split = infer_structure(table)
    kinds = (Kind.F, Kind.B, Kind.W) if split else (Kind.F, Kind.B)
    for m, p in enumerate(mb2pipe):
        for s in range(placement.num_stages(p)):
            for k in kinds:
                op = Op(k, p, s, m)
                if op not in counts:
                    raise TableError(
                        f"op {op} is missing (expected on device {placement.device(p, s)})"
                    )
    for d in range(table.num_devices):
        prev = None
        for e in table.device_entries(d):
            if prev is not None and e.start < prev.end:
                raise TableError(
                    f"device {d} runs {prev.op} and {e.op} in slot {e.start}"
                )
            prev = e
    by_op = table.by_op
    for e in table.entries:
        for q in data_predecessors(e.op, placement.num_stages(e.op.pipeline)):
            if by_op[q].end > e.start:
                raise TableError(
                    f"op {e.op} on device {e.device} starts at slot {e.start} before its "
                    f"dependency {q} ends at slot {by_op[q].end}"
                )
    if schedule is not None:
        want = set(schedule.expected_ops())
        have = set(counts)
        if want != have:
            extra = sorted(map(str, have - want))
            lacking = sorted(map(str, want - have))
            raise TableError(
                f"table does not match schedule {schedule.name!r}: "
                f"extra ops {extra[:3]}, missing ops {lacking[:3]}"
            )
        for e in table.entries:
            if schedule.device_of(e.op) != e.device:
                raise TableError(
                    f"op {e.op} is on device {e.device} at slot {e.start} but schedule "
                    f"{schedule.name!r} places it on device {schedule.device_of(e.op)}"
                )


def schedule_from_table(table: Table, name: str | None = None) -> Schedule:
    """The schedule (placement + per-device order by start slot) a valid table encodes.

    Stage work is read off the forward durations (mean per stage)."""
    validate(table)
    placement, mb2pipe, split = infer_structure(table)
    fwd: dict[tuple[int, int], list[int]] = defaultdict(list)
    for e in table.entries:
        if e.op.kind is Kind.F:
            fwd[(e.op.pipeline, e.op.stage)].append(e.duration)
    work = tuple(
        tuple(sum(fwd[(p, s)]) / len(fwd[(p, s)]) for s in range(placement.num_stages(p)))
        for p in range(placement.num_pipelines)
    )
    orders = tuple(tuple(e.op for e in table.device_entries(d)) for d in range(table.num_devices))
    return Schedule(name or table.name or "table", placement, mb2pipe, orders, work, split)
