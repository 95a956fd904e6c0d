"""The committed experiments/REPORT.md is the quick reproduction's report, and this test
regenerates it from nothing (about a minute on 2 cores; ``make test`` and CI run it): every
number in it comes from a fresh run. It compares exactly: CP-SAT runs on one worker under a
deterministic limit (``reproduce.QUICK_CPSAT``), and the report holds no wall-clock figure
(the sweeps' seconds stay in ``reproduce_info.csv``)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from experiments import report, reproduce

pytest.importorskip("matplotlib")


@pytest.mark.slow
def test_committed_report_equals_a_fresh_quick_reproduction(tmp_path):
    out = tmp_path / "quick"
    assert reproduce.main(["--quick", "--fresh", "--results", str(out), "--workers", "1", "--quiet"]) == 0
    fresh = report.render(report.load(out), out, shown_as=Path("results/quick"))
    assert fresh == (out / "REPORT.md").read_text().replace(str(out), "results/quick")
    committed = (reproduce.HERE / "REPORT.md").read_text()
    if fresh != committed:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True),
                                            "experiments/REPORT.md", "fresh quick reproduction", n=0))
        pytest.fail("experiments/REPORT.md differs from a fresh quick reproduction (regenerate it: "
                    "python -m experiments.reproduce --quick --fresh && cp results/quick/REPORT.md "
                    f"experiments/REPORT.md):\n{diff[:4000]}")
