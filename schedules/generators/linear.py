"""Single-pipeline schedules with stage d on device d: GPipe and 1F1B."""

from __future__ import annotations

from ..ops import B, F, Op
from . import check_shape
from ..schedule import Placement, Schedule


def linear_placement(stages: int) -> Placement:
    """Stage d on device d, one pipeline."""
    return Placement((tuple(range(stages)),), stages)


def gpipe(stages: int, microbatches: int) -> Schedule:
    """GPipe (fill-drain): every device runs all forwards, then all backwards, both in
    ascending microbatch order (as torch's ``ScheduleGPipe``)."""
    check_shape(stages, microbatches)
    orders = tuple(
        tuple(F(m, d) for m in range(microbatches)) + tuple(B(m, d) for m in range(microbatches))
        for d in range(stages)
    )
    return Schedule(
        "gpipe", linear_placement(stages), (0,) * microbatches, orders,
        params={"stages": stages, "microbatches": microbatches},
    )


def one_f_one_b(stages: int, microbatches: int) -> Schedule:
    """1F1B (PipeDream-Flush / Megatron non-interleaved): device d runs
    ``min(S-1-d, B)`` warm-up forwards, then alternates one forward and one backward,
    then drains the remaining backwards."""
    check_shape(stages, microbatches)
    return Schedule(
        "1f1b", linear_placement(stages), (0,) * microbatches, one_f_one_b_orders(stages, microbatches),
        params={"stages": stages, "microbatches": microbatches},
    )


def one_f_one_b_orders(stages: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """1F1B's per-device orders (stage d on device d): warm-up forwards, F/B pairs, drain."""
    orders = []
    for d in range(stages):
        warmup = min(stages - 1 - d, microbatches)
        order: list[Op] = [F(m, d) for m in range(warmup)]
        for k in range(microbatches - warmup):
            order += [F(warmup + k, d), B(k, d)]
        order += [B(m, d) for m in range(microbatches - warmup, microbatches)]
        orders.append(tuple(order))
    return tuple(orders)
