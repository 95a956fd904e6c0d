"""Activation memory of ops: the one definition that table metrics, the simulator, the
validator and the CP-SAT model share.

An activation of (pipeline p, stage s, microbatch m) has size ``M`` (the stage's
activation). F allocates ``M`` at its start. Without a split backward, B releases ``M`` at
its end. With a split backward the memory is counted as the Zero Bubble paper does: B
releases ``M - M_W`` at its end and W releases ``M_W`` at its end, where ``M_W`` (the
*weight part*) is what the weight-gradient GEMMs still need; ``M_W = M`` holds the whole
activation until W. At equal times, releases come before allocations.
"""

from __future__ import annotations

import math

import numpy as np

from .arrays import B_CODE, F_CODE
from .ops import Kind


def check_weight_fraction(value: object, what: str = "weight memory") -> float:
    """``value`` as a fraction M_W / M in [0, 1]; ``ValueError`` naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise ValueError(f"{what} must be a fraction M_W/M between 0 and 1, got {value!r}")
    return float(value)


def memory_change(kind: Kind, size: float, weight_part: float, split_backward: bool) -> float:
    """Change of live activation memory an op of ``kind`` makes: ``+size`` at an F's start;
    at a B's end ``-(size - weight_part)`` when the backward is split, else ``-size``; at a
    W's end ``-weight_part``."""
    if kind is Kind.F:
        return size
    if kind is Kind.B:
        return -(size - weight_part) if split_backward else -size
    return -weight_part


def memory_deltas(kind: np.ndarray, size: np.ndarray, weight_part: np.ndarray, split_backward: bool) -> np.ndarray:
    """``memory_change`` of every op (kind codes 0 = F, 1 = B, 2 = W; per-op ``size`` and
    ``weight_part``)."""
    release_b = -(size - weight_part) if split_backward else -size
    return np.where(kind == F_CODE, size, np.where(kind == B_CODE, release_b, -weight_part))


def event_times(kind: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """When each op's memory change happens: an F's start, a B's or W's end."""
    return np.where(kind == F_CODE, start, end)


def live_levels(device: np.ndarray, time: np.ndarray, deltas: list[np.ndarray], num_devices: int,
                base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Live memory after every event, device by device: events sorted by (device, time,
    releases before allocations, then by the deltas), each device's running sum starting
    at ``base[d]`` (0 by default). Returns the sort order, device offsets into it and, per
    delta array, the running levels (with ``base`` prepended to every device's run, so
    device d's levels are ``levels[offsets[d] + d : offsets[d + 1] + d + 1]``)."""
    keys = (device, time, deltas[0] > 0, *deltas)
    # ops run one after another on a device, so in op order (devices contiguous) the event
    # times rise already: sort only when ties (zero-length ops) or devices say otherwise
    order = np.arange(len(time)) if lexsorted(keys) else np.lexsort(keys[::-1])
    offsets = np.searchsorted(device[order], np.arange(num_devices + 1)).astype(np.int64)
    base = np.zeros(num_devices) if base is None else np.asarray(base, float)
    out = []
    for delta in deltas:
        d_sorted = delta[order]
        levels = np.empty(len(order) + num_devices)
        bounds = offsets.tolist()
        for d in range(num_devices):
            a, b = bounds[d] + d, bounds[d + 1] + d + 1
            levels[a] = base[d]
            levels[a + 1:b] = d_sorted[bounds[d]:bounds[d + 1]]
            np.cumsum(levels[a:b], out=levels[a:b])
        out.append(levels)
    return order, offsets, out


def lexsorted(keys: tuple[np.ndarray, ...]) -> bool:
    """Whether the rows (``keys[0]`` most significant) are in lexicographic order."""
    if len(keys[0]) < 2:
        return True
    equal = np.ones(len(keys[0]) - 1, bool)
    for key in keys:
        a, b = key[:-1], key[1:]
        if (equal & (a > b)).any():
            return False
        equal &= a == b
    return True


def peaks(levels: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per device, the largest of its levels (see ``live_levels``)."""
    starts = offsets[:-1] + np.arange(len(offsets) - 1)
    return np.maximum.reduceat(levels, starts) if len(levels) else np.zeros(0)
