"""The reproduction driver end to end on a small part: sweeps -> CSVs -> figures -> report."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import reproduce

pytest.importorskip("matplotlib")


@pytest.mark.slow
def test_quick_reproduction_of_two_parts(tmp_path, capsys):
    out = tmp_path / "res"
    code = reproduce.main(["--quick", "--results", str(out), "--only", "table1_hanayo", "fig3_bubble",
                           "--workers", "1", "--quiet"])
    assert code == 0
    text = capsys.readouterr().out
    assert f"report:  {out / 'REPORT.md'}" in text
    for name in ("table1_hanayo.csv", "fig3_bubble.csv", "reproduce_info.csv", "fig1_tables.png",
                 "fig2_timeline.png", "fig3_bubble.png", "table1_hanayo.md", "REPORT.md"):
        assert (out / name).exists(), name
    b = pd.read_csv(out / "fig3_bubble.csv")
    assert sorted(b.microbatches.unique()) == reproduce.QUICK_B  # the quick grid
    info = pd.read_csv(out / "reproduce_info.csv")
    assert list(info.name) == ["fig3_bubble", "table1_hanayo"] and set(info["mode"]) == {"quick"}
    report = (out / "REPORT.md").read_text()
    assert "| 3a |" in report and "| 2b-fd |" in report and "`quick` reproduction" in report
    # a second run resumes: nothing is evaluated again
    assert reproduce.main(["--quick", "--results", str(out), "--only", "table1_hanayo", "--workers", "1",
                           "--quiet"]) == 0
    assert "(0 run now, 27 already in the store" in capsys.readouterr().out


def test_every_experiment_config_is_valid():
    from pipetab.sweep import expand, load_config

    for path in sorted(reproduce.CONFIGS.glob("*.toml")):
        config = load_config(path)
        todo, _ = expand(config)
        assert todo, path
        assert config.export and config.export.endswith(".csv"), path
    for name in reproduce.ORDER:
        assert (reproduce.CONFIGS / f"{name}.toml").exists()


def test_reproduce_and_report_never_write_over_a_tracked_file(tmp_path, capsys):
    """The committed experiments/REPORT.md is refused as a target (exit 2, one line); a
    report under results/ (untracked) is where a regeneration goes."""
    from experiments import report

    committed = reproduce.HERE / "REPORT.md"
    before = committed.read_bytes()
    assert report.tracked(committed) and not report.tracked(tmp_path / "REPORT.md")
    assert reproduce.main(["--quick", "--results", str(tmp_path), "--report", str(committed), "--quiet"]) == 2
    assert report.main(["--results", str(tmp_path), "--out", str(committed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("is a file the repository tracks" in line for line in err)
    assert committed.read_bytes() == before
