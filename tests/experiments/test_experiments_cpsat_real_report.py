"""The real-size CP-SAT summary is computed from its CSV rows: counts worked by hand on four
rows, two of which run the same problem (a whole backward of 1:1:1 is that of 1:2:0)."""

from __future__ import annotations

import csv

from experiments import cpsat_real_report as report
from experiments.cpsat_real_set import FIELDS


def _row(instance, S, B, placement, backward, fbw, cap, C, gap, **extra):
    row = dict.fromkeys(FIELDS, "")
    row.update(instance=instance, S=S, B=B, placement=placement, backward=backward, fbw=fbw, cap=cap, C=C,
               status="optimal" if gap == 0 else "feasible", makespan=100 + gap * 100, lower_bound=100,
               gap=gap, gap_le_1pct=gap <= 0.01, best_registry="1f1b", best_registry_makespan=110,
               not_worse_than_registry=True, best_start="1f1b", time_to_first_s=0.5, runtime_s=10.0,
               time_limit_s=60.0, workers=2, load_1min=1.5, ortools="9.15", cores=2)
    row.update(extra)
    return row


ROWS = [
    _row("linear-S8-B32-whole-fbw1:2:0-cap1S-C1", 8, 32, "linear", "whole", "1:2:0", 8, 1, 0.0),
    _row("linear-S8-B32-whole-fbw1:1:1-cap1S-C1", 8, 32, "linear", "whole", "1:1:1", 8, 1, 0.02, runtime_s=70.0),
    _row("v-S16-B256-split-fbw3:4:2-cap2S-C0", 16, 256, "v", "split", "3:4:2", 32, 0, 0.004, time_to_first_s=2.5),
    _row("v-S16-B64-whole-fbw3:4:2-cap1S-C0", 16, 64, "v", "whole", "3:4:2", 16, 0, 0.06,
         not_worse_than_registry=False),
]


def _lines(tmp_path, rows=ROWS):
    path = tmp_path / "part.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    return report.summary(report.load([str(path)]))


def test_problem_key_merges_whole_backwards():
    rows = report.load_rows(ROWS)
    assert rows.problem.nunique() == 3


def test_counts(tmp_path):
    text = "\n".join(_lines(tmp_path))
    assert "4 instances, 3 distinct problems" in text
    assert "2 of 4 (50.0 %) of the runs, 1 of 3 (33.3 %) of the problems" in text
    assert "**not met**" in text
    assert "Proven optimal: 1 of 4 (25.0 %)" in text
    assert "Never worse than the best registry schedule: 3 of 4 (75.0 %)" in text
    assert "median 0.500 s, largest 2.500 s" in text
    assert "longest 70.0 s; over 110% of the limit: 1" in text
    # V at S >= 16 and B >= 8S: only the B=256 row, within 5 %
    assert "(item 4): 1 of 1 (100.0 %) within 5 %" in text
    assert "| C (message slots) | 1 | 1 of 2 (50.0 %) |" in text
    assert "| cap (M_B) | 2S | 1 of 1 (100.0 %) |" in text
    misses = text.split("## Misses (2)")[1]
    assert misses.index("v-S16-B64-whole") < misses.index("linear-S8-B32-whole-fbw1:1:1")  # largest gap first


def test_target_met(tmp_path):
    rows = [ROWS[0]] + [dict(ROWS[0], instance=f"x{i}") for i in range(9)] + [ROWS[1]]
    assert "**met**" in "\n".join(_lines(tmp_path, rows))  # 10 of 11 runs within 1 %


def test_rerun_rows_compared(tmp_path):
    earlier = report.load_rows([dict(ROWS[1], gap=0.03, gap_le_1pct=False, makespan=105, lower_bound=99),
                                dict(ROWS[2], makespan=100.0, lower_bound=100)])
    lines = report.summary(report.load_rows(ROWS), earlier)
    assert ("- Rerun with later code: 2 rows (their earlier results in `cpsat_real_superseded.csv`); within 1 % "
            "before 1, now 1; better schedule in 1, worse in 1; higher bound in 1, lower in 0.") in lines


def test_a_row_rerun_twice_is_compared_with_its_last_earlier_result(tmp_path):
    earlier = report.load_rows([dict(ROWS[1], gap=0.03, gap_le_1pct=False, makespan=105, lower_bound=99),
                                dict(ROWS[1], gap=0.02, gap_le_1pct=False, makespan=101, lower_bound=100)])
    lines = report.summary(report.load_rows(ROWS), earlier)
    assert ("- Rerun with later code: 1 rows (their earlier results in `cpsat_real_superseded.csv`); within 1 % "
            "before 0, now 0; better schedule in 0, worse in 1; higher bound in 0, lower in 0.") in lines
