"""The step-time band plan prints (experiments/fidelity_band.py): the stored band is computed
from the stored leave-one-source-out folds (test_experiments_fidelity.py checks the folds are
the script's refits), and the band is worked by hand on a tiny CSV."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.fidelity_band import OUT, band, nearest_rank, to_toml
from pipetab.plan.result import fidelity_band, indistinguishable

HEAD = "study,table,config,quantity,unit,measured,predicted,error_pct,target_pct,status,note\n"


def test_stored_band_is_the_scripts_output():
    assert OUT.read_text(encoding="utf-8") == to_toml(band())
    assert fidelity_band() == pytest.approx(band()["band_pct"] / 100)


def test_nearest_rank_by_hand():
    values = [float(v) for v in range(1, 11)]  # 1..10: 90 % of them are <= 9
    assert nearest_rank(values, 0.9) == 9.0
    assert nearest_rank([5.0], 0.9) == 5.0


def test_band_and_folds_by_hand(tmp_path):
    """A: |errors| 1, 2, 3, 50 (s, ms); B: 4, 20 (TFLOP/s); a ratio and a memory cell are not
    time cells. All six: 90 % -> rank ceil(5.4) = 6: 50. A alone: rank ceil(3.6) = 4: 50,
    three within 10 %; B alone: rank 2: 20, one within 10 %."""
    rows = [("A", "s", -1, "ok"), ("A", "ms", 2, "ok"), ("A", "s", 3, "ok"), ("A", "s", 50, "miss"),
            ("A", "x", 40, "miss"), ("A", "GiB", 30, "miss"), ("B", "TFLOP/s", -4, "ok"), ("B", "TFLOP/s", 20, "miss")]
    path, constants = tmp_path / "f.csv", tmp_path / "c.csv"
    path.write_text(HEAD + "".join(f"{s},t,c,q,{u},1,1,{e},10,{st},\n" for s, u, e, st in rows))
    constants.write_text("left_out,preset,key,value\nB,p,k,0.5\n")
    got = band(path, constants)
    assert (got["band_pct"], got["time_cells"], got["time_within_10_pct"]) == (50.0, 6, 4)
    assert (got["cells"], got["within_target"]) == (8, 4)
    assert got["folds"] == {
        "A": {"cells": 6, "within_target": 3, "time_cells": 4, "time_within_10_pct": 3, "band_pct": 50.0,
              "refit": ""},
        "B": {"cells": 2, "within_target": 1, "time_cells": 2, "time_within_10_pct": 1, "band_pct": 20.0,
              "refit": "p.k=0.5"}}


def _conf(step: float, fits: bool = True):
    return SimpleNamespace(step_time_s=step, fits=fits)


def test_indistinguishable_by_hand():
    """Band 10 %: 105 and 110 lie within 10 % of 100, 110.1 does not; a row that does not
    fit is never tied with one that does."""
    confs = [_conf(100.0), _conf(105.0), _conf(110.0), _conf(110.1), _conf(101.0, fits=False)]
    assert indistinguishable(confs, 0.1) == [False, True, True, False, False]
    assert indistinguishable([], 0.1) == []
