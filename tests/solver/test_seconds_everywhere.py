"""One question in seconds, three front ends: ``pipetab search``, a search-mode sweep and
``plan``'s CP-SAT all call ``cpsat.api.solve_seconds`` and give the same schedule time,
bound and known schedules' times (a problem CP-SAT settles within its limit, so the
numbers do not depend on the machine's speed)."""

from __future__ import annotations

import json

import pytest

from pipetab.cli import main
from pipetab.hardware.calibrate import system_to_toml
from pipetab.plan import plan_question, shape
from pipetab.plan.cpsat import cpsat_search
from pipetab.sweep import ResultStore, parse_config, run_sweep
from pipetab.sweep import plan as sweep_plan

S, B, MB = 4, 8, 2


@pytest.fixture(scope="module")
def question(tmp_path_factory):
    space = plan_question("tiny_gpt", nodes=1, gpus_per_node=4, global_batch=B * MB, gpu="H100", cpsat_time_s=5.0)
    path = tmp_path_factory.mktemp("q") / "cluster.toml"
    path.write_text(system_to_toml(space.system))
    return space, str(path)


def _cli(capsys, system, *extra, mode="search"):
    assert main([mode, "-S", str(S), "-B", str(B), "--system", system, "--model", "tiny_gpt",
                 "--microbatch-size", str(MB), "--time-limit", "5", "--workers", "1", "--format", "json",
                 *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_sweep_and_plan_give_the_same_answer(question, tmp_path, capsys):
    """The same question, the same tick: ``plan`` and ``pipetab search`` choose the tick
    the same way (refined until rounding moves a schedule by at most 0.5 %); a sweep gives
    its tick, and ``search --tick`` with that tick answers as the sweep does."""
    space, system = question
    answer = cpsat_search(space, shape(space, S, 1, 1, MB, "none"))
    # both solves settled (the search on durations rounded up, the bound on durations rounded
    # down): the answer is the same however fast the machine; the real-valued time lies between
    assert answer.search.status == answer.bound.status == "optimal"
    assert answer.lower_bound_s <= answer.seconds <= answer.search.makespan * answer.tick_s * (1 + 1e-12)
    assert answer.rounding <= 0.005 + 1e-12

    cli = _cli(capsys, system)
    assert cli["tick_s"] == pytest.approx(answer.tick_s, rel=1e-12)
    assert cli["makespan"] == pytest.approx(answer.seconds, rel=1e-12)
    assert cli["lower_bound"] == pytest.approx(answer.lower_bound_s, rel=1e-12)
    assert cli["status"] == str(answer.status)
    assert cli["known"]["1f1b"]["makespan"] == pytest.approx(answer.known["1f1b"].seconds, rel=1e-12)

    config = parse_config({
        "name": "same", "grid": {"schedules": ["1f1b"], "stages": [S], "microbatches": [B], "systems": [system],
                                 "models": ["tiny_gpt"], "caps": ["none"], "cluster": {"microbatch_size": MB}},
        "run": {"mode": "search", "time_limit": 5.0, "workers": 1}})
    with ResultStore(tmp_path / "same.sqlite") as store:
        assert not run_sweep(config, store, progress=False).errors
        (row,) = store.rows(sweep_plan(config, store).keys)
    ticked = _cli(capsys, system, "--tick", repr(row["tick_s"]))
    assert ticked["makespan"] == pytest.approx(row["cpsat_real_s"], rel=1e-12)
    assert ticked["lower_bound"] == pytest.approx(row["bound_real_s"], rel=1e-12)
    assert ticked["status"] == row["status"]


def test_search_and_bound_report_the_same_bound(question, capsys):
    """Issue 28: ``search`` and ``bound`` on the same problem run the same solves, so they
    report the same bound (both settle here, so the time does not matter)."""
    _, system = question
    found, bounded = _cli(capsys, system), _cli(capsys, system, mode="bound")
    assert found["lower_bound"] == pytest.approx(bounded["lower_bound"], rel=1e-12)
    assert found["tick_s"] == bounded["tick_s"]
