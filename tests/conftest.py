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



# -- named instances ------------------------------------------------------------------------
# Small instances that many tests build again, each built once per session (PyVRP's
# tests/conftest.py is the model). Every value is immutable (frozen dataclasses), so tests
# share it safely. Imports are local: a run of tests/schedules loads neither OR-Tools nor the
# hardware presets.


@pytest.fixture(scope="session")
def dgx_h100_ib():
    """The ``dgx_h100_ib`` preset system: 8 H100 SXM a node on NVLink 4, 400 Gb/s InfiniBand between."""
    from pipetab.hardware import load_system

    return load_system("dgx_h100_ib")


@pytest.fixture(scope="session")
def a100_cluster():
    """The ``a100_cluster`` preset system: 8 A100 SXM a node on NVLink 3, 200 Gb/s InfiniBand between."""
    from pipetab.hardware import load_system

    return load_system("a100_cluster")


@pytest.fixture(scope="session")
def one_f_one_b_4_8():
    """The registry's 1F1B on S=4 stages with B=8 microbatches (whole backward)."""
    from pipetab.schedules import registry

    return registry.generate("1f1b", 4, 8)


@pytest.fixture(scope="session")
def zb_h1_4_8():
    """The registry's ZB-H1 on S=4 stages with B=8 microbatches (split backward)."""
    from pipetab.schedules import registry

    return registry.generate("zb-h1", 4, 8)


@pytest.fixture(scope="session")
def linear_4_8():
    """The idealized CP-SAT problem S=4, B=8 on the linear placement: F 1, B 2 ticks (whole
    backward), free messages, no memory cap."""
    from pipetab.solver.cpsat import idealized_problem

    return idealized_problem(4, 8, "linear")


@pytest.fixture(scope="session")
def capped_4_6():
    """The idealized CP-SAT problem S=4, B=6, linear: F 1, B 2 ticks, a message 1 tick, at
    most 3 activations live on a device."""
    from pipetab.solver.cpsat import idealized_problem

    return idealized_problem(4, 6, comm=1, activation_cap=3)


@pytest.fixture(scope="session")
def capped_4_8():
    """The idealized CP-SAT problem S=4, B=8, linear: F 1, B 2 ticks, a message 1 tick, at
    most S=4 activations live on a device (1F1B's memory)."""
    from pipetab.solver.cpsat import idealized_problem

    return idealized_problem(4, 8, comm=1, activation_cap=4)


@pytest.fixture(scope="session")
def capped_4_32():
    """The idealized CP-SAT problem S=4, B=32, linear: F 1, B 2 ticks, a message 1 tick, at
    most S=4 activations live on a device."""
    from pipetab.solver.cpsat import idealized_problem

    return idealized_problem(4, 32, comm=1, activation_cap=4)


@pytest.fixture(scope="session")
def capped_16_64():
    """The idealized CP-SAT problem S=16, B=64, linear: F 1, B 2 ticks, a message 1 tick, at
    most S=16 activations live on a device."""
    from pipetab.solver.cpsat import idealized_problem

    return idealized_problem(16, 64, comm=1, activation_cap=16)
