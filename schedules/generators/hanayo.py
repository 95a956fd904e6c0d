"""Hanayo (Liu, Cheng, Zhou, You — SC'23): one pipeline of 2*W*S stages laid out as waves.

Placement (reference ``schedules.md`` §0/§5): stage s lies in sweep ``k = s div S`` at
position ``j = s mod S`` and runs on device j when k is even, on device S-1-j when k is odd.
Each device thus holds 2W chunks (chunk c of device d is stage c*S + (d if c even else
S-1-d)); their sizes add up to one ordinary stage, so no weights are duplicated.

Order: no public generator exists; the reference [R] gives a dynamic list-scheduling rule
that reproduces the bubble formula (S-1)/(2WB+S-1). We simulate it with unit time per chunk
op (T_F = T_B = 1, no communication): at every step each device runs a ready backward if it
has any (smallest microbatch first), else the ready forward with the smallest (microbatch,
stage), else idles. The per-device sequence of executed ops is the schedule's order, so the
ASAP table of the schedule at forward = backward = 1 slot is exactly the simulated run.

Regime (measured with this generator at F = B = 1 slot over S in 2..16, W in 1..4, B in
1..64, 3840 instances): the table's bubble equals (S-1)/(2WB+S-1) — makespan 4WB + 2(S-1)
— exactly when B is a multiple of S (588 instances), and only then. Otherwise the makespan
exceeds it by exactly 2(2W-1)(S - B mod S) slots, however large B is. (B % S == 0 is also
Megatron's condition for interleaved 1F1B, whose bubble Hanayo's formula equals with
v = 2W.) We therefore enforce B a multiple of S, and 1 <= W <= 8.

Memory (same sweep, every B >= S): device d's peak is 2WS - max(0, 2S-1-d-B) live chunk
activations, i.e. S - max(0, 2S-1-d-B)/(2W) stage activations: S on every device only once
B >= 2S-1; at B = S it ramps from S - (S-1)/(2W) on device 0 up to S on device S-1
(S=4, W=1: [2.5, 3, 3.5, 4], as in the reference's simulation).
"""

from __future__ import annotations

import heapq

from ..ops import B, F, Op
from ..placements import PlacementFamily, family_placement, wave_device
from ..schedule import Schedule
from . import check_shape

MAX_WAVES = 8
HANAYO_REGIME = "1 <= W <= 8, B a multiple of S"


def chunk_stage(chunk: int, device: int, devices: int) -> int:
    """Stage of chunk ``chunk`` of ``device``: c*S + (d if c even else S-1-d)."""
    return chunk * devices + (device if chunk % 2 == 0 else devices - 1 - device)


def _check(stages: object, microbatches: object, waves: object) -> None:
    stages, microbatches = check_shape(stages, microbatches)
    if not isinstance(waves, int) or isinstance(waves, bool) or not 1 <= waves <= MAX_WAVES:
        raise ValueError(
            f"waves must be an integer from 1 to {MAX_WAVES} for hanayo, got {waves!r}"
        )
    if microbatches % stages:
        raise ValueError(
            f"microbatches must be a multiple of stages ({stages}) for hanayo, got {microbatches}"
        )


def list_schedule_orders(devices: int, microbatches: int, waves: int) -> tuple[tuple[Op, ...], ...]:
    """Per-device orders produced by the greedy rule (backward first, smallest microbatch;
    else forward with the smallest (microbatch, stage)) simulated with unit-time ops.

    Works for any ``devices >= 1``, ``microbatches >= 1``, ``waves >= 1`` (no regime check)."""
    num_stages = 2 * waves * devices
    last = num_stages - 1
    dev = [wave_device(s, devices) for s in range(num_stages)]
    # ready queues per device: heaps of (microbatch, stage)
    ready_f: list[list[tuple[int, int]]] = [[] for _ in range(devices)]
    ready_b: list[list[tuple[int, int]]] = [[] for _ in range(devices)]
    ready_f[dev[0]] = [(m, 0) for m in range(microbatches)]  # already a heap
    orders: list[list[Op]] = [[] for _ in range(devices)]
    remaining = 2 * num_stages * microbatches
    while remaining:
        released: list[tuple[bool, int, int]] = []  # (is_backward, microbatch, stage)
        for d in range(devices):
            if ready_b[d]:
                m, s = heapq.heappop(ready_b[d])
                orders[d].append(B(m, s))
                if s > 0:
                    released.append((True, m, s - 1))
            elif ready_f[d]:
                m, s = heapq.heappop(ready_f[d])
                orders[d].append(F(m, s))
                released.append((s == last, m, s if s == last else s + 1))
            else:
                continue
            remaining -= 1
        # ops end after one step: their successors become ready at the next step
        for is_b, m, s in released:
            heapq.heappush((ready_b if is_b else ready_f)[dev[s]], (m, s))
    return tuple(tuple(o) for o in orders)


def hanayo(stages: int, microbatches: int, waves: int = 1) -> Schedule:
    """Hanayo with ``waves`` waves over ``stages`` devices (2*W*S pipeline stages), order
    from the greedy list-scheduling rule (see module doc). Requires 1 <= W <= 8 and
    ``microbatches`` a multiple of ``stages``."""
    _check(stages, microbatches, waves)
    return Schedule(
        "hanayo",
        family_placement(PlacementFamily.WAVE, stages, (2 * waves * stages,)),
        (0,) * microbatches,
        list_schedule_orders(stages, microbatches, waves),
        params={"stages": stages, "microbatches": microbatches, "waves": waves},
    )
