"""Shared test helpers."""

from __future__ import annotations

import pytest


def parse_reference_grid(text: str) -> list[list[str]]:
    """Rows of cells of a worked table from shared/reference/schedules.md (header dropped)."""
    rows = []
    for line in text.strip().splitlines():
        head, _, body = line.partition("|")
        if head.strip().startswith("dev"):
            rows.append(body.split())
    return rows


@pytest.fixture
def reference_grid():
    return parse_reference_grid


def compact(op) -> str:
    """An op as the reference tables write it for one-stage-per-device schedules."""
    return "." if op is None else f"{op.kind.value}{op.microbatch}"


def grid_cells(table, label=compact) -> list[list[str]]:
    return [[label(c) for c in row] for row in table.grid()]


@pytest.fixture
def cells():
    return grid_cells


def v_label(devices: int):
    """Cell label for V placements (device d holds stages d and 2D-1-d): upper case for
    stage d, lower case for stage 2D-1-d, as the reference tables write them."""

    def label(op) -> str:
        if op is None:
            return "."
        letter = op.kind.value if op.stage < devices else op.kind.value.lower()
        return f"{letter}{op.microbatch}"

    return label


def assert_every_op_once(table, schedule) -> None:
    """Independently of the validator: the table holds each op of the schedule exactly once."""
    from collections import Counter

    counts = Counter(e.op for e in table.entries)
    assert set(counts.values()) == {1}
    assert set(counts) == set(schedule.expected_ops())

