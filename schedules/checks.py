"""The one check of a whole-number argument, shared by every package."""

from __future__ import annotations


def check_count(what: str, value: object, minimum: int = 1) -> int:
    """``value`` when it is an integer (not a bool) >= ``minimum``; ``ValueError`` naming
    ``what`` and what is allowed otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value
