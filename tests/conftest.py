"""Shared test helpers."""

from __future__ import annotations

import re

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


_ = re  # keep import for helpers that extend this module
