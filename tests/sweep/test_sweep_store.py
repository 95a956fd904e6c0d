"""The results store and resuming: every configuration exactly once, whatever happens."""

from __future__ import annotations

import importlib.util
import io
import sqlite3

import pandas as pd
import pytest

from pipetab.cli import main
from pipetab.sweep import Progress, ResultStore, parse_config, plan, run_sweep, same_row
from pipetab.sweep.executors import make_executor

DOC = {
    "name": "resume",
    "grid": {"schedules": ["gpipe", "1f1b", "chimera"], "stages": [4], "microbatches": [4, 8, 16],
             "systems": ["mid_nw_mid_cp", "slow_nw_fast_cp"], "caps": ["device", "none"]},
}


def keys_in(db) -> list[str]:
    with sqlite3.connect(db) as con:
        return [k for (k,) in con.execute("SELECT key FROM results")]


def test_store_insert_or_ignore_and_export(tmp_path):
    with ResultStore(tmp_path / "s.sqlite") as store:
        assert store.add("k1", {"a": 1, "b": 0.5})
        assert not store.add("k1", {"a": 2})  # never overwritten, never duplicated
        assert store.add_many([("k2", {"a": 3}, "", None), ("k1", {"a": 9}, "", None)]) == 1
        assert store.count() == 2 and store.done_keys(["k1", "k3"]) == {"k1"}
        assert [r["a"] for r in store.rows(["k2", "k1", "missing"])] == [3, 1]
        with pytest.raises(sqlite3.IntegrityError):  # the UNIQUE key is enforced by SQLite itself
            store._db.execute("INSERT INTO results VALUES ('k1', '', '', '{}', '{}', 0)")
        assert store.export(tmp_path / "out.csv") == 2
        assert list(pd.read_csv(tmp_path / "out.csv").key) == ["k1", "k2"]
        if importlib.util.find_spec("pyarrow") is None and importlib.util.find_spec("fastparquet") is None:
            with pytest.raises(ValueError, match="Parquet needs pyarrow"):
                store.export(tmp_path / "out.parquet")
        with pytest.raises(ValueError, match=r"\.csv or \.parquet"):
            store.export(tmp_path / "out.xlsx")


def test_interrupted_and_resumed_sweep_has_each_configuration_once(tmp_path):
    config = parse_config(DOC)
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as store:
        total = len(plan(config, store).configurations)
        assert total == 3 * 3 * 2 * 2
        # 1: stop on purpose after a few configurations
        s = run_sweep(config, store, limit=5, progress=False)
        assert s.new_rows == 5 and s.limited == total - 5 and len(keys_in(db)) == 5
        # 2: a crash in the middle (raised after the 3rd stored outcome)
        seen = []

        def boom(outcome):
            seen.append(outcome.key)
            if len(seen) == 3:
                raise KeyboardInterrupt("simulated kill")

        with pytest.raises(KeyboardInterrupt):
            run_sweep(config, store, on_outcome=boom, progress=False)
        partial = keys_in(db)
        assert 5 + 3 <= len(partial) < total and len(set(partial)) == len(partial)
        # 3: resume on another executor: the rest runs, nothing twice
        s = run_sweep(config, store, make_executor("local", 2), progress=False)
        assert s.already_done == len(partial) and s.new_rows == total - len(partial)
        # 4: a re-run does nothing
        s = run_sweep(config, store, progress=False)
        assert s.new_rows == 0 and s.already_done == total
        keys = keys_in(db)
        assert len(keys) == total == len(set(keys)) and set(keys) == set(plan(config, store).keys)
        resumed = store.rows(plan(config, store).keys)
    # the resumed rows equal those of one uninterrupted run
    with ResultStore(tmp_path / "fresh.sqlite") as fresh:
        run_sweep(config, fresh, progress=False)
        clean = fresh.rows(plan(config, fresh).keys)
    assert len(clean) == len(resumed) and all(same_row(a, b) for a, b in zip(clean, resumed))


def test_cli_sweep_resumes_and_exports(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('name="cli"\n[grid]\nschedules=["gpipe","chimera"]\nstages=[4,6]\nmicrobatches=[4,8,6]\n'
                   'systems=["mid_nw_mid_cp"]\n')
    db, csv = tmp_path / "c.sqlite", tmp_path / "c.csv"
    assert main(["sweep", str(cfg), "--db", str(db), "--workers", "1", "--limit", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    # chimera at (4, 6), (6, 4), (6, 8) is outside its regime; B=6 cannot split the global batch
    # of 512 (gpipe at S=4 and 6, chimera at (6, 6)): all skipped, not errors
    assert "6 configurations (1 run now" in out
    assert "skipped 6 combinations that cannot exist (not errors): 3 chimera (needs S even" in out
    assert "3 with B not dividing the global batch" in out
    assert main(["sweep", str(cfg), "--db", str(db), "--workers", "1", "--export", str(csv), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "5 run now, 1 already in the store" in out and "exported 6 rows" in out
    frame = pd.read_csv(csv)
    assert len(frame) == 6 and frame.key.is_unique
    assert {"pipetab_version", "ortools_version", "status", "bound_s", "time_limit_s", "cpsat_workers",
            "simulation_makespan_s", "simulation_idle_ratio", "table_bubble_ratio",
            "formula_bubble_ratio"} <= set(frame.columns)
    assert main(["sweep", str(cfg), "--db", str(db), "--dry-run"]) == 0
    assert "0 to run, 6 already" in capsys.readouterr().out


def test_progress_bar_without_terminal():
    buf = io.StringIO()
    bar = Progress(20, "x", stream=buf)
    for _ in range(20):
        bar.update()
    bar.close()
    lines = buf.getvalue().splitlines()
    assert 2 <= len(lines) <= 11 and lines[-1].startswith("x [") and "20/20" in lines[-1]


def test_missing_dask_is_one_clear_line(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if dask were not installed
    with pytest.raises(ValueError, match=r"pip install 'pipetab\[dask\]'"):
        make_executor("dask")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[grid]\nschedules=["gpipe"]\nstages=[4]\nmicrobatches=[4]\nsystems=["mid_nw_mid_cp"]\n')
    assert main(["sweep", str(cfg), "--db", str(tmp_path / "x.sqlite"), "--executor", "dask"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "dask" in err
