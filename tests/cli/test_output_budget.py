"""What ``pipetab search`` keeps back from ``--time-limit`` for its output: CPU seconds of
an idle machine per op, times the process's measured contention, at most half the limit."""

from types import SimpleNamespace

import pytest

from pipetab.cli import solve_cmd
from pipetab.cli.solve_cmd import OutputBudget, contention


def _args(fmt="json", no_ops=False, limit=5.0):
    return SimpleNamespace(format=fmt, no_ops=no_ops, time_limit=limit)


def test_budget_by_hand():
    """131,072 ops of JSON with times in seconds: 0.15 + 131,072 x (1 + 1.5 + 0.15) us =
    0.497 s; at contention 2, 0.995 s; torch CSV of 1,048,576 ops at contention 3 would be
    3 x (0.15 + 1.15 x 1.048576) = 4.07 s, held to half of 5 s; text 0.15 + 0.05 + exit."""
    budget = OutputBudget()
    assert budget.seconds(_args(), 131_072, 1.0, True) == pytest.approx(0.15 + 131_072 * 2.65e-6)
    assert budget.seconds(_args(), 131_072, 2.0, True) == pytest.approx(0.99468, abs=1e-5)
    assert budget.seconds(_args(), 131_072, 1.0, False) == pytest.approx(0.15 + 131_072 * 1.15e-6)
    assert budget.seconds(_args("torch-csv"), 1_048_576, 3.0) == 2.5
    assert budget.seconds(_args("text"), 1000, 1.0) == pytest.approx(0.2 + 1000 * 1.5e-7)
    assert budget.seconds(_args(no_ops=True), 1000, 1.0, True) == pytest.approx(0.2 + 1000 * 1.5e-7)


def test_contention_is_wall_over_cpu(monkeypatch):
    """3 s since the start on 1 s of CPU: 3; faster than its CPU (threads): 1; 20 times: 8;
    started just now (in-process): 1."""
    clock = SimpleNamespace(perf_counter=lambda: 100.0, process_time=lambda: 1.0)
    monkeypatch.setattr(solve_cmd, "time", clock)
    assert contention(97.0) == 3.0
    assert contention(99.5) == 1.0
    assert contention(80.0) == 8.0
    assert contention(100.0) == 1.0
