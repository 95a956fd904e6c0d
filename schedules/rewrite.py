"""Rewrites of a schedule that keep what its ops do: a split backward's W fused into its B
(``fused_backward``), overlapped pairs run one op at a time (``ops_one_at_a_time``; a
rewritten schedule's name carries a note in parentheses, ``generator_of`` drops it), devices
renumbered in order of first use (``canonical_devices``), op labels relabelled to FIFO
(``relabel_microbatches``) and last stages' backwards glued to their forwards
(``glue_last_stages``) — what the CP-SAT starts, hints and symmetry breaking use.
"""

from __future__ import annotations

import numpy as np

from .arrays import KIND_CODES
from .evaluate import Timing
from .ops import Kind, Op
from .schedule import Placement, Schedule


def fused_backward(schedule: Schedule, keep_pairs: bool = False) -> Schedule:
    """A split-backward schedule with each W dropped, the whole backward where its B ran (an
    activation freed no later: peak memory no higher), named '<name> (W fused into B)';
    overlapped pairs kept only with ``keep_pairs`` (each block less its W, where two ops remain)."""
    if not schedule.split_backward:
        return schedule
    blocks: tuple[tuple[Op, ...], ...] = ()
    if keep_pairs:  # a forward opens its block: what is left of two ops is a forward-backward pair
        kept = (tuple(op for op in b if op.kind is not Kind.W) for b in schedule.blocks)
        blocks = tuple(b for b in kept if len(b) == 2)
    # on the op arrays: 1.5M ops of ZB-H1 at S=128, B=4,096 took 3 s as Op objects
    keep = schedule.ops.kind != KIND_CODES[Kind.W]
    offsets = np.concatenate(([0], np.cumsum(keep)))[schedule.offsets]
    return Schedule.from_arrays(f"{schedule.name} (W fused into B)", schedule.placement,
                                schedule.microbatch2pipeline, schedule.ops.take(keep), offsets,
                                schedule.stage_work, False, schedule.params, blocks)


def ops_one_at_a_time(schedule: Schedule) -> Schedule:
    """``schedule`` with every op alone (the search orders ops one at a time), named so."""
    if not schedule.blocks:
        return schedule
    return schedule.with_blocks((), f"{schedule.name} (pairs not overlapped)")


def generator_of(name: str) -> str:
    """The registry generator a start's schedule came from: its name less the notes in
    parentheses the rewrites above add (no registry name holds " (")."""
    return name.split(" (", 1)[0]


def canonical_devices(schedule: Schedule) -> Schedule:
    """The schedule with devices renumbered in order of first use by its stages."""
    pl = schedule.placement
    order: list[int] = []
    for stages in pl.stage2device:
        for d in stages:
            if d not in order:
                order.append(d)
    order += [d for d in range(pl.num_devices) if d not in order]
    new_of = {old: new for new, old in enumerate(order)}
    placement = Placement(tuple(tuple(new_of[d] for d in st) for st in pl.stage2device), pl.num_devices)
    orders: list = [()] * pl.num_devices
    for old, ops in enumerate(schedule.orders):
        orders[new_of[old]] = ops
    return Schedule(schedule.name, placement, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)


def relabel_microbatches(schedule: Schedule, timing: Timing) -> tuple[Schedule, Timing]:
    """The timed schedule with op labels permuted to FIFO (the k-th op of a kind on (p, s) by
    start becomes microbatch k's): times, devices and memory unchanged, every dependency kept
    (the CP-SAT model's FIFO family); stage-0 forwards ordered too."""
    by_pipe: dict[int, list[int]] = {}
    for m, p in enumerate(schedule.microbatch2pipeline):
        by_pipe.setdefault(p, []).append(m)
    groups: dict[tuple[Kind, int, int], list[Op]] = {}
    for op in timing.start:
        groups.setdefault((op.kind, op.pipeline, op.stage), []).append(op)
    mapping: dict[Op, Op] = {}
    for (k, p, s), ops in groups.items():
        ops.sort(key=lambda o: timing.start[o])
        for new_m, op in zip(by_pipe[p], ops):
            mapping[op] = Op(k, p, s, new_m)
    if all(a == b for a, b in mapping.items()):
        return schedule, timing
    orders = tuple(tuple(mapping[op] for op in order) for order in schedule.orders)
    blocks = tuple(tuple(mapping[op] for op in b) for b in schedule.blocks)  # a block's cost is its stages'
    new = Schedule(
        schedule.name, schedule.placement, schedule.microbatch2pipeline, orders,
        schedule.stage_work, schedule.split_backward, schedule.params, blocks,
    )
    return new, Timing(
        {mapping[o]: t for o, t in timing.start.items()}, {mapping[o]: t for o, t in timing.end.items()}
    )


def glue_last_stages(schedule: Schedule) -> Schedule:
    """A FIFO schedule with last-stage-only devices running each B right after its F (a whole
    backward only: the CP-SAT model's last-stage dominance)."""
    if schedule.split_backward:
        return schedule
    pl = schedule.placement
    orders = list(schedule.orders)
    changed = False
    for p in range(schedule.num_pipelines):
        last = schedule.num_stages(p) - 1
        d = pl.device(p, last)
        if pl.stages_on(d) != [(p, last)]:
            continue
        fwd = [op for op in orders[d] if op.kind is Kind.F]
        glued = tuple(x for op in fwd for x in (op, op._replace(kind=Kind.B)))
        if glued != orders[d]:
            orders[d] = glued
            changed = True
    if not changed:
        return schedule
    return Schedule(schedule.name, pl, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)
