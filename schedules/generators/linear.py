"""Single-pipeline schedules with stage d on device d: GPipe and 1F1B.

Both are built as arrays, one row per device (``warmup_pairs``): the 1F1B pattern of
warm-up forwards, forward/backward pairs and draining backwards, of which GPipe is the case
where every forward is a warm-up forward.
"""

from __future__ import annotations

import numpy as np

from ..arrays import B_CODE, F_CODE, OpArrays
from ..placements import PlacementFamily, family_placement
from ..schedule import Schedule
from . import check_shape


def warmup_pairs(warmup: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """The 1F1B pattern over ``total`` forwards and backwards, one row per device with
    ``warmup[d]`` warm-up forwards: forwards 0..w-1, then the pairs [forward w+k,
    backward k], then the remaining backwards. Returns (is forward, index) arrays of shape
    (devices, 2 * total)."""
    j = np.arange(2 * total, dtype=np.int32)[None, :]
    w = np.asarray(warmup, np.int32)[:, None]
    rel = j - w  # position after the warm-up
    drain = j >= 2 * total - w
    forward = (rel < 0) | (((rel & 1) == 0) & ~drain)
    index = np.where(rel < 0, j, np.where(drain, j - total, (rel >> 1) + np.where(forward, w, 0)))
    return forward, index.astype(np.int64)


def linear_arrays(kind: np.ndarray, microbatch: np.ndarray) -> tuple[OpArrays, np.ndarray]:
    """Op arrays and offsets of rows of equal length, row d on stage d of pipeline 0."""
    rows, width = kind.shape
    stage = np.broadcast_to(np.arange(rows)[:, None], kind.shape)
    ops = OpArrays(kind.ravel(), np.zeros(kind.size, np.int64), stage.ravel(), microbatch.ravel())
    return ops, np.arange(rows + 1, dtype=np.int64) * width


def _linear(name: str, stages: int, microbatches: int, warmup: np.ndarray) -> Schedule:
    forward, index = warmup_pairs(warmup, microbatches)
    ops, offsets = linear_arrays(np.where(forward, F_CODE, B_CODE), index)
    placement = family_placement(PlacementFamily.LINEAR, stages, (stages,))
    return Schedule.from_arrays(name, placement, (0,) * microbatches, ops, offsets,
                                params={"stages": stages, "microbatches": microbatches})


def one_f_one_b_warmup(stages: int, microbatches: int) -> np.ndarray:
    """Warm-up forwards of each device in 1F1B: ``min(S-1-d, B)``."""
    return np.minimum(stages - 1 - np.arange(stages), microbatches)


def gpipe(stages: int, microbatches: int) -> Schedule:
    """GPipe (fill-drain): every device runs all forwards, then all backwards, both in
    ascending microbatch order (as torch's ``ScheduleGPipe``). One stage (no pipeline)
    is allowed."""
    check_shape(stages, microbatches, min_stages=1)
    return _linear("gpipe", stages, microbatches, np.full(stages, microbatches))


def one_f_one_b(stages: int, microbatches: int) -> Schedule:
    """1F1B (PipeDream-Flush / Megatron non-interleaved): device d runs
    ``min(S-1-d, B)`` warm-up forwards, then alternates one forward and one backward,
    then drains the remaining backwards. One stage (no pipeline) is gradient
    accumulation: F and B of each microbatch in turn."""
    check_shape(stages, microbatches, min_stages=1)
    return _linear("1f1b", stages, microbatches, one_f_one_b_warmup(stages, microbatches))
