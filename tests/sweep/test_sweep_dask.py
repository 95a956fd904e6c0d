"""The same sweep gives the same rows on the local process pool and on a Dask cluster."""

from __future__ import annotations

import pytest

from pipetab.sweep import ResultStore, parse_config, plan, run_sweep, same_row
from pipetab.sweep.executors import DaskExecutor, make_executor

distributed = pytest.importorskip("distributed")

DOC = {
    "name": "dask",
    "grid": {"schedules": ["gpipe", "1f1b", "chimera", "hanayo"], "stages": [4], "microbatches": [4, 8],
             "systems": ["mid_nw_mid_cp", "slow_nw_fast_cp"]},
}


def rows_with(executor, tmp_path, name):
    config = parse_config(DOC)
    with ResultStore(tmp_path / f"{name}.sqlite") as store:
        s = run_sweep(config, store, executor, progress=False)
        assert not s.errors
        return store.rows(plan(config, store).keys)


def test_local_and_dask_give_the_same_rows(tmp_path):
    local = rows_with(make_executor("local", 2), tmp_path, "local")
    dask_ex = DaskExecutor(workers=2, processes=False)  # a real LocalCluster on loopback
    on_dask = rows_with(dask_ex, tmp_path, "dask")
    assert len(local) == len(on_dask) == 4 * 2 * 2
    assert [r["key"] for r in local] == [r["key"] for r in on_dask]
    assert all(same_row(a, b) for a, b in zip(local, on_dask))


def test_dask_scheduler_address_and_errors():
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    try:
        ex = make_executor("dask", scheduler=cluster.scheduler_address)
        with ex:
            assert sorted(ex.run(lambda x: x * x, [1, 2, 3])) == [(0, 1), (1, 4), (2, 9)]
    finally:
        cluster.close()
    with pytest.raises(ValueError, match="--scheduler needs --executor dask"):
        make_executor("local", scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match="executor must be one of"):
        make_executor("slurm")
