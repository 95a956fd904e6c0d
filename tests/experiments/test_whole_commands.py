"""The whole-command time-limit benchmark (``experiments.whole_commands``): the busy
processes it adds for a chosen load, its rows, its refusals."""

import csv
from types import SimpleNamespace

import pytest

from experiments import whole_commands
from experiments.whole_commands import BusyLoad, run_whole_commands


def test_busy_load_runs_while_entered_and_ends_each_process():
    with BusyLoad(2, rise_s=0.0) as busy:
        assert len(busy.procs) == 2 and all(p.poll() is None for p in busy.procs)
    assert all(p.returncode is not None for p in busy.procs)


def test_rows_name_the_command_its_status_and_the_load(monkeypatch, tmp_path):
    """Two commands matching ``--only`` (of the 27), each run twice, appended to an existing
    CSV: four rows with the command line, the status read from JSON or text output, and
    the load at both ends."""
    outputs = iter(['{"status": "optimal"}', "status feasible, makespan 1 s", "", '{"status": "unknown"}'])

    def fake_run(argv, **kw):
        assert argv[-2:] == ["--time-limit", "3"] and kw["capture_output"]
        return SimpleNamespace(stdout=next(outputs), stderr="pipetab search: error: no schedule fits", returncode=0)

    monkeypatch.setattr(whole_commands.subprocess, "run", fake_run)
    out = tmp_path / "rows.csv"
    out.write_text(",".join(whole_commands.FIELDS) + "\n")
    rows = run_whole_commands(out, 3.0, "bound .*deepseek_v3", repeat=2, append=True)
    assert len(rows) == 4 and [r["status"] for r in rows] == ["optimal", "feasible",
                                                              "pipetab search: error: no schedule fits", "unknown"]
    assert {r["command"].split(" --system")[0] for r in rows} == {"bound -S 16 -B 1024",
                                                                  "bound -S 16 -B 1024 --placement v"}
    with out.open() as fh:
        saved = list(csv.DictReader(fh))
    assert len(saved) == 4 and all(float(r["load_1min"]) >= 0 and r["added_load"] == "0" for r in saved)


@pytest.mark.parametrize("argv", [["--load", "-1"], ["--repeat", "0"], ["--time-limit", "0"], ["--only", "("]])
def test_bad_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        whole_commands.main(argv)
    assert exc.value.code == 2 and argv[0] in capsys.readouterr().err
