"""Overlapped forward-backward pairs chosen on a given order (after a search).

CP-SAT orders ops one at a time; a schedule it returns runs every op alone. Where the
costs hold an op's communication (``Costs.chains``: expert parallelism's all-to-all), a
forward and a backward of different microbatches that follow one another on a device can
run as one block (``Schedule.blocks``, torch's ``OVERLAP_F_B``): one's communication hides
behind the other's compute, and the block takes ``Costs.block_time`` instead of the two
op times' sum. ``paired_on_order`` gives the candidates: the order with every such adjacent
forward-then-backward made a pair where the block is shorter, and the same also pairing a
backward-then-forward (the two swapped, as a block opens with its forward). Which one is
best is the simulator's and the memory check's to say: a pair delays its forward's output
to the block's end, and a swapped pair holds one more activation while it runs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Schedule

if TYPE_CHECKING:
    from collections.abc import Callable

    from .costs import Costs


def _pairable(f: Op, b: Op, costs: Costs) -> bool:
    """A forward and a backward that may share a block and gain by it: of different
    microbatches (a backward needs its own microbatch's forwards, on every stage) and
    with a block shorter than the two alone."""
    if (f.pipeline, f.microbatch) == (b.pipeline, b.microbatch):
        return False
    return costs.block_time((f, b)) < costs.duration(f) + costs.duration(b) - 1e-12


def _paired(schedule: Schedule, costs: Costs, swap: bool,
            allowed: set[tuple[Op, Op]] | None = None) -> tuple[list[list[Op]], list[tuple[Op, Op]]]:
    """Per device its order with the chosen pairs (a swapped pair put forward first), and
    the pairs: left to right, each adjacent forward and backward that ``_pairable`` takes
    (and ``allowed`` holds, when given)."""
    orders, blocks = [], []
    for order in schedule.orders:
        out: list[Op] = []
        i = 0
        while i < len(order):
            a, b = order[i], order[i + 1] if i + 1 < len(order) else None
            pair = None
            if b is not None and a.kind is Kind.F and b.kind is Kind.B:
                pair = (a, b)
            elif swap and b is not None and a.kind is Kind.B and b.kind is Kind.F:
                pair = (b, a)
            if pair is not None and (allowed is None or pair in allowed) and _pairable(*pair, costs):
                out += pair
                blocks.append(pair)
                i += 2
            else:
                out.append(a)
                i += 1
        orders.append(out)
    return orders, blocks


def paired_on_order(schedule: Schedule, costs: Costs, rounds: int = 32, until: float | None = None,
                    clock: Callable[[], float] = time.perf_counter) -> list[Schedule]:
    """``schedule`` (no blocks of its own) with overlapped pairs chosen on its order, as
    the module docstring says: at most two candidates, none when no adjacent pair gains.
    A pair's forward hands its output on only when the block ends, so pairs on two devices
    may wait for each other: each of up to ``rounds`` simulations unpairs the pair whose
    device is stuck (the other op's pair where that one is alone) until the orders run.
    With ``until`` (a ``clock`` time), a round begins only while the longest round so far
    (each builds a schedule and simulates it) is predicted to end before it."""
    from pipetab.schedules.evaluate import DeadlockError

    from .simulate import simulate

    if schedule.blocks or not costs.chains:
        return []
    out: list[Schedule] = []
    seen, longest = set(), 0.0
    for swap, how in ((False, "forward-backward"), (True, "forward-backward and backward-forward")):
        allowed = None
        for _ in range(rounds):
            if until is not None and clock() + longest >= until:
                return out
            t = clock()
            orders, blocks = _paired(schedule, costs, swap, allowed)
            if not blocks or tuple(blocks) in seen:
                break
            candidate = Schedule(f"{schedule.name} ({len(blocks)} {how} pairs overlapped on its order)",
                                 schedule.placement, schedule.microbatch2pipeline, orders, schedule.stage_work,
                                 schedule.split_backward, schedule.params, blocks)
            try:
                simulate(candidate, costs)
            except DeadlockError as exc:
                waiting = {a for _, a, _ in exc.cycle}
                missing = {q for _, _, q in exc.cycle}
                stuck = [b for b in blocks if waiting.intersection(b)] or [b for b in blocks if missing.intersection(b)]
                allowed = set(blocks) - set(stuck)
                longest = max(longest, clock() - t)
                continue
            seen.add(tuple(blocks))
            out.append(candidate)
            longest = max(longest, clock() - t)
            break
    return out
