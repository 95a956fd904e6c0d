"""The error classes of docs/fidelity.md (experiments/fidelity_classes.py), by hand."""

from __future__ import annotations

from experiments.fidelity_classes import class_table, error_class, sign


def _row(study, table, config, quantity, unit, error, status="miss"):
    return {"study": study, "table": table, "config": config, "quantity": quantity, "unit": unit,
            "error_pct": error, "status": status}


def test_signs_by_unit():
    """A step 5 % short is fast, 5 % more TFLOP/s too; a ratio or memory above is high."""
    assert sign(_row("A", "t", "c", "step time", "s", "-5")) == "fast"
    assert sign(_row("A", "t", "c", "TFLOP/s per GPU", "TFLOP/s", "5")) == "fast"
    assert sign(_row("A", "t", "c", "forward", "ms", "5")) == "slow"
    assert sign(_row("A", "t", "c", "ratio", "x", "-7")) == "low"
    assert sign(_row("A", "t", "c", "peak memory per GPU", "GiB", "12")) == "high"
    assert sign(_row("A", "t", "c", "fits (published run)", "-", "")) == "no"


def test_classes_and_table_by_hand():
    """Two Table 6 cells, a fitted one and a Megatron one out of target, an ok one ignored;
    left out: the fitted cell is a miss of its class (Table 6) and the Megatron one is ok."""
    rows = [_row("Zero Bubble", "Table 6 (arXiv 9)", "1.5B", "T_F", "ms", "-14"),
            _row("Zero Bubble", "Table 6 (arXiv 9)", "1.5B", "T_B / T_F", "x", "21"),
            _row("Zero Bubble", "Table 6 (arXiv 9)", "6.2B", "T_F", "ms", "-9", "fitted"),
            _row("Megatron SC'21", "Table 1", "76.1B", "TFLOP/s per GPU", "TFLOP/s", "14"),
            _row("Megatron SC'21", "Table 1", "39.1B", "TFLOP/s per GPU", "TFLOP/s", "3", "ok")]
    assert [error_class(r) for r in rows[:4]] == [error_class(rows[0])] * 2 + [
        "fitted to (in-sample only)", error_class(rows[3])]
    assert error_class(rows[0]).startswith("Zero Bubble op times")
    loso = [rows[0], rows[1], {**rows[2], "status": "miss"}, {**rows[3], "status": "ok"}, rows[4]]
    table = class_table(rows, loso)
    assert "| fitted to (in-sample only) | 1 | 0 | 1 fast |" in table
    assert any(line.startswith("| Zero Bubble op times") and line.endswith("| 2 | 3 | 1 fast, 1 high |")
               for line in table)
    assert any(line.startswith("| Megatron SC'21") and line.endswith("| 1 | 0 | 1 fast |") for line in table)
    assert table[-1] == "| all | 4 | 3 | |"
