"""Validation of tables: every op exactly once, dependencies respected, one op per cell.

Errors are ``TableError`` (a ``ValueError``) whose message names the op, device and slot of
the first broken rule, in the table's order (by device, then start). The checks run on the
table's arrays; the slower search for the first offending op runs only once a check fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import numpy as np

from .arrays import KINDS, W_CODE, data_predecessors_of
from .ops import Op
from .schedule import Placement, Schedule, legal_block

if TYPE_CHECKING:
    from .table import Table


class TableError(ValueError):
    """A table breaks a rule of the abstraction."""


@dataclass(frozen=True)
class _Structure:
    placement: Placement
    microbatch2pipeline: tuple[int, ...]
    split: bool
    stage_base: np.ndarray  # flat stage id of (p, s) is stage_base[p] + s


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def _radix_key(columns: list[np.ndarray]) -> np.ndarray | None:
    """One int64 key per row of the columns, equal exactly when the rows are (None when
    the values span too much for 62 bits)."""
    key = np.zeros(len(columns[0]), np.int64)
    span = 1
    for col in columns:
        lo = int(col.min())
        width = int(col.max()) - lo + 1
        span *= width
        if span >= 2**62:
            return None
        key = key * width + (col - lo)
    return key


def _row_ids(columns: list[np.ndarray]) -> np.ndarray:
    """One int64 id per row, equal exactly when the rows are (columns of any span)."""
    key = _radix_key(columns)
    if key is not None:
        return key
    ids = np.zeros(len(columns[0]), np.int64)
    for col in columns:  # fold the columns in one by one, renumbering densely each time
        _, col_ids = np.unique(col, return_inverse=True)
        _, ids = np.unique(ids * (int(col_ids.max()) + 1) + col_ids, return_inverse=True)
    return ids


def _first_of(ids: np.ndarray) -> np.ndarray:
    """Per row, the index of the first row with the same id."""
    _, index, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return index[inverse]


def _consistent(group: list[np.ndarray], value: np.ndarray) -> np.ndarray | None:
    """Mask of rows whose ``value`` differs from that of the first row of their ``group``
    (None when there is no such row)."""
    ids = _row_ids(group)
    if int(ids.max()) < 4 * len(ids) + 1024:  # the common case, without sorting
        seen = np.zeros(int(ids.max()) + 1, np.int64)
        seen[ids] = value
        if (seen[ids] == value).all():
            return None
    differs = value != value[_first_of(ids)]
    return differs if differs.any() else None


def _structure(table: Table) -> _Structure:
    ops, n = table.ops, len(table)
    if n == 0:
        raise TableError("the table has no ops")
    device, start, duration = table.device, table.start, table.duration
    pipe, stage, mb = ops.pipeline, ops.stage, ops.microbatch
    problems = [
        (device < 0) | (device >= table.num_devices),
        (start < 0) | (duration < 1),
        (pipe < 0) | (stage < 0) | (mb < 0),
        _consistent([pipe, stage], device),
        _consistent([mb], pipe),
    ]
    found = [(i, k) for k, p in enumerate(problems) if p is not None for i in [_first(p)] if i is not None]
    if found:
        i, k = min(found)
        _structure_error(table, i, k)
    num_mb = int(mb.max()) + 1
    if num_mb > n or not np.bincount(mb, minlength=num_mb).all():
        seen = np.unique(mb)
        holes = seen != np.arange(len(seen))
        m = int(np.argmax(holes)) if holes.any() else len(seen)
        raise TableError(f"microbatch {m} has no ops (microbatches must be numbered 0..{num_mb - 1})")
    mb2pipe = np.zeros(num_mb, np.int64)
    mb2pipe[mb] = pipe
    nstages = _stage_counts(pipe, stage)
    stage_base = np.cumsum([0, *nstages], dtype=np.int64)
    flat = np.zeros(int(stage_base[-1]), np.int64)
    flat[stage_base[pipe] + stage] = device
    stage2device = [tuple(flat[stage_base[p]:stage_base[p + 1]].tolist()) for p in range(len(nstages))]
    placement = Placement(tuple(stage2device), table.num_devices)
    split = bool((ops.kind == W_CODE).any())
    return _Structure(placement, tuple(mb2pipe.tolist()), split, stage_base)


def _stage_counts(pipe: np.ndarray, stage: np.ndarray) -> list[int]:
    """Stages of each pipeline 0..max; ``TableError`` naming the first pipeline or stage
    without ops."""
    num_pipes, width = int(pipe.max()) + 1, int(stage.max()) + 1
    stages_of: Iterable[np.ndarray]
    if num_pipes * width <= 8 * len(pipe) + 1024:
        present = np.zeros(num_pipes * width, bool)
        present[pipe * width + stage] = True
        rows = present.reshape(num_pipes, width)
        stages_of = [np.nonzero(row)[0] for row in rows]
    else:  # sparse numbers: the distinct (pipeline, stage) pairs, sorted, sliced per pipeline
        pairs = np.unique(np.stack([pipe, stage], axis=1), axis=0)
        bounds = np.searchsorted(pairs[:, 0], np.arange(num_pipes + 1)).tolist()
        stages_of = (pairs[bounds[p]:bounds[p + 1], 1] for p in range(num_pipes))
    counts = []
    for p, mine in enumerate(stages_of):
        if not len(mine):
            raise TableError(f"pipeline {p} has no ops (pipelines must be numbered 0..{num_pipes - 1})")
        holes = mine != np.arange(len(mine))
        if holes.any():
            raise TableError(f"stage {int(np.argmax(holes))} of pipeline {p} has no ops")
        counts.append(len(mine))
    return counts


def _structure_error(table: Table, i: int, check: int) -> None:
    op, d, t = table.ops.op(i), int(table.device[i]), int(table.start[i])
    if check == 0:
        raise TableError(f"op {op} is on device {d}; devices are 0..{table.num_devices - 1}")
    if check == 1:
        raise TableError(f"op {op} on device {d} has start {t} and duration {int(table.duration[i])}")
    if check == 2:
        raise TableError(f"op {op} on device {d} has a negative pipeline, stage or microbatch number")
    same = (table.ops.microbatch == op.microbatch) if check == 4 else \
        (table.ops.pipeline == op.pipeline) & (table.ops.stage == op.stage)
    j = int(np.argmax(same))
    if check == 3:
        raise TableError(
            f"stage {op.stage} of pipeline {op.pipeline} runs on devices {int(table.device[j])} and "
            f"{d} (op {op} at slot {t})"
        )
    raise TableError(
        f"microbatch {op.microbatch} appears in pipelines {int(table.ops.pipeline[j])} and "
        f"{op.pipeline} (op {op} on device {d}, slot {t})"
    )


def validate(table: Table, schedule: Schedule | None = None) -> None:
    """Raise ``TableError`` naming the first broken rule; return None if the table is valid.

    Rules: each op of every microbatch's chain appears exactly once (F and B on every stage
    of its pipeline, and W on every stage when any W appears); no device runs two ops in one
    slot; every op starts no earlier than the end of each data predecessor. With
    ``schedule``, the table must also hold exactly that schedule's ops on its devices.
    """
    ops, n = table.ops, len(table)
    if n:
        cols = [ops.kind.astype(np.int64), ops.pipeline, ops.stage, ops.microbatch]
        key = _radix_key(cols)
        if key is None or int(key.max()) >= 8 * n + 1024 or np.bincount(key).max() > 1:
            ids = _row_ids(cols)
            i = _first(_first_of(ids) != np.arange(n))
            if i is not None:
                raise TableError(
                    f"op {ops.op(i)} appears twice (again on device {int(table.device[i])} "
                    f"at slot {int(table.start[i])})"
                )
    st = _structure(table)
    placement, mb2pipe = st.placement, st.microbatch2pipeline
    kinds = 3 if st.split else 2
    nst = np.diff(st.stage_base)
    per_mb = nst[np.array(mb2pipe)] * kinds
    if n != int(per_mb.sum()):
        mb_base = np.concatenate([[0], np.cumsum(per_mb)])
        present = np.zeros(int(mb_base[-1]), bool)
        present[mb_base[ops.microbatch] + ops.stage * kinds + ops.kind] = True
        pos = int(np.argmax(~present))
        m = int(np.searchsorted(mb_base, pos, side="right")) - 1
        s, k = divmod(pos - int(mb_base[m]), kinds)
        p = mb2pipe[m]
        raise TableError(f"op {Op(KINDS[k], p, s, m)} is missing (expected on device {placement.device(p, s)})")
    device, start, end = table.device, table.start, table.end
    shared = _legal_blocks(table) if table.shared.any() else table.shared
    overlap = (device[1:] == device[:-1]) & (start[1:] < end[:-1]) & ~shared[1:]
    i = _first(overlap)
    if i is not None:
        raise TableError(
            f"device {int(device[i + 1])} runs {ops.op(i)} and {ops.op(i + 1)} in slot {int(start[i + 1])}"
        )
    pred = data_predecessors_of(ops, st.stage_base, len(mb2pipe))
    if shared.any():  # an op made inside its own block is no dependency to wait for
        same = (pred >= 0) & (device[np.maximum(pred, 0)] == device) & (start[np.maximum(pred, 0)] == start) \
            & (end[np.maximum(pred, 0)] == end)
        pred = np.where(same, -1, pred)
    has = pred >= 0
    late = np.zeros(n, bool)
    late[has] = end[pred[has]] > start[has]
    i = _first(late)
    if i is not None:
        q = int(pred[i])
        raise TableError(
            f"op {ops.op(i)} on device {int(device[i])} starts at slot {int(start[i])} before its "
            f"dependency {ops.op(q)} ends at slot {int(end[q])}"
        )
    if schedule is not None:
        _check_against(table, schedule, st)


def _legal_blocks(table: Table) -> np.ndarray:
    """``table.shared`` where the ops sharing slots form a block (a forward with another
    microbatch's or stage's backward, and that backward's W, or a backward with its W);
    sharing slots otherwise is an overlap."""
    legal = table.shared.copy()
    i = 0
    for block in table.blocks():
        while not legal[i]:  # the block's second entry
            i += 1
        legal[i:i + len(block) - 1] = legal_block(block)
        i += len(block) - 1
    return legal


def _check_against(table: Table, schedule: Schedule, st: _Structure) -> None:
    same_shape = (
        st.microbatch2pipeline == schedule.microbatch2pipeline and st.split == schedule.split_backward
        and np.array_equal(st.stage_base, schedule.stage_base)
    )
    if not same_shape:
        want = set(map(str, schedule.expected_ops()))
        have = set(map(str, table.ops.to_ops()))
        extra = sorted(have - want)
        lacking = sorted(want - have)
        raise TableError(
            f"table does not match schedule {schedule.name!r}: "
            f"extra ops {extra[:3]}, missing ops {lacking[:3]}"
        )
    placed = schedule.stage_device[st.stage_base[table.ops.pipeline] + table.ops.stage]
    i = _first(placed != table.device)
    if i is not None:
        op = table.ops.op(i)
        raise TableError(
            f"op {op} is on device {int(table.device[i])} at slot {int(table.start[i])} but schedule "
            f"{schedule.name!r} places it on device {int(placed[i])}"
        )


def schedule_from_table(table: Table, name: str | None = None) -> Schedule:
    """The schedule (placement + per-device order by start slot) a valid table encodes.

    Stage work is read off the forward durations (mean per stage)."""
    validate(table)
    st = _structure(table)
    ops = table.ops
    fwd = ops.kind == 0
    sid = st.stage_base[ops.pipeline] + ops.stage
    size = int(st.stage_base[-1])
    total = np.bincount(sid[fwd], weights=table.duration[fwd].astype(float), minlength=size)
    count = np.bincount(sid[fwd], minlength=size)
    mean = (total / count).tolist()
    work = tuple(tuple(mean[int(st.stage_base[p]) + s] for s in range(st.placement.num_stages(p)))
                 for p in range(st.placement.num_pipelines))
    return Schedule.from_arrays(name or table.name or "table", st.placement, st.microbatch2pipeline, ops,
                                table.offsets, work, st.split, blocks=table.blocks())
