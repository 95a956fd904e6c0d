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


def at_start(kind: Kind) -> bool:
    """Whether the op's memory change happens at its start (F) or its end (B, W)."""
    return kind is Kind.F
