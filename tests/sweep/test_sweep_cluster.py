"""Sweeps on a real cluster: ``[grid.cluster]`` (S from the GPUs, TP and DP crossed) and
``grid.profiles`` (measured op times); each row equals ``pipetab evaluate`` with the same
options."""

from __future__ import annotations

import json

import pytest

from pipetab.cli import main
from pipetab.hardware.profile import profile_to_toml
from pipetab.schedules import registry
from pipetab.solver.pricing import costs_profile, hardware_costs
from pipetab.sweep import ConfigError, expand, parse_config
from pipetab.sweep.run import evaluate

CLUSTER = {"gpus": 16, "tp": [2, 4, 3], "dp": [1, 2], "global_batch": 64, "seq": 2048}


def cluster_config(**grid):
    doc = {"grid": {"schedules": ["1f1b", "zb-h1"], "microbatches": [8], "systems": ["dgx_h100_ib"],
                    "models": ["llama3_8b"], "cluster": dict(CLUSTER), **grid}}
    return parse_config(doc)


def evaluate_cli(capsys, *argv) -> dict:
    assert main(["evaluate", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_stages_follow_the_cluster_and_splits_that_do_not_divide_are_skipped():
    todo, skipped = expand(cluster_config())
    shapes = sorted({(c.cluster_dict()["tp"], c.cluster_dict()["dp"], c.stages) for c in todo})
    # 16 GPUs: TP2 DP1 -> S=8, TP2 DP2 -> 4, TP4 DP1 -> 4, TP4 DP2 -> 2; TP3 divides nothing
    assert shapes == [(2, 1, 8), (2, 2, 4), (4, 1, 4), (4, 2, 2)]
    assert {s.kind for s in skipped} == {"cluster"} and len(skipped) == 2 * 2  # 2 schedules x TP3 x 2 DP
    assert all("tp 3" in s.reason for s in skipped)


def test_a_cluster_row_is_what_evaluate_gives_with_the_same_options(capsys):
    todo, _ = expand(cluster_config())
    for c in todo:
        d = c.cluster_dict()
        row = evaluate(c)
        doc = evaluate_cli(capsys, c.schedule, "-S", str(c.stages), "-B", "8", "--system", "dgx_h100_ib", "--model",
                           "llama3_8b", "--tp", str(d["tp"]), "--dp", str(d["dp"]), "--global-batch", "64",
                           "--seq", "2048")
        assert row["simulation_makespan_s"] == pytest.approx(doc["simulation"]["makespan_s"], rel=1e-12), c.label()
        assert row["simulation_peak_memory_bytes"] == max(doc["simulation"]["peak_memory_bytes"])
        assert (row["tp"], row["dp"], row["global_batch"]) == (d["tp"], d["dp"], 64)
        assert row["microbatch_size"] == doc["context"]["microbatch_size"] == 64 // (d["dp"] * 8)


def test_the_keys_of_sweeps_without_the_new_tables_are_unchanged():
    plain = parse_config({"grid": {"schedules": ["1f1b"], "stages": [4], "microbatches": [8],
                                   "systems": ["mid_nw_mid_cp"]}})
    c = expand(plain)[0][0]
    assert "cluster" not in c.canonical() and "profile" not in c.canonical()
    with_cluster = parse_config({"grid": {"schedules": ["1f1b"], "stages": [4], "microbatches": [8],
                                          "systems": ["mid_nw_mid_cp"], "cluster": {"tp": [1]}}})
    assert expand(with_cluster)[0][0].key != c.key


def test_profiles_instead_of_systems_and_models(tmp_path):
    sched = registry.generate("1f1b", 4, 8)
    costs = hardware_costs(sched, "mid_nw_mid_cp", "tiny_gpt")
    path = tmp_path / "p.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs)))
    config = parse_config({"grid": {"schedules": ["1f1b", "gpipe"], "stages": [4], "microbatches": [8],
                                    "profiles": [str(path)], "caps": ["device", "none"]}})
    todo, skipped = expand(config)
    assert len(todo) == 4 and not skipped
    rows = {(c.schedule, c.cap): evaluate(c) for c in todo}
    from pipetab.solver.simulate import simulate

    assert rows[("1f1b", "device")]["simulation_makespan_s"] == pytest.approx(simulate(sched, costs).makespan,
                                                                              rel=1e-12)
    assert rows[("1f1b", "device")]["profile"] == str(path)
    assert rows[("1f1b", "none")]["simulation_capacity_bytes"] is None


@pytest.mark.parametrize("grid, fragment", [
    ({"profiles": ["x.toml"], "systems": ["mid_nw_mid_cp"]}, "exclude each other"),
    ({"cluster": {"tp": [0]}}, "grid.cluster.tp"),
    ({"cluster": {"zero": 4}}, "grid.cluster.zero"),
    ({"cluster": {"gpus": 8}}, "grid.stages follows"),
    ({"cluster": {"global_batch": 8, "microbatch_size": 1}}, "exclude each other"),
    ({"cluster": {"colour": 1}}, "colour"),
    ({"cluster": {"overlap": "yes"}}, "grid.cluster.overlap"),
    ({"profiles": ["x.toml"], "run": {"recompute": "full"}}, "run.recompute"),
])
def test_bad_cluster_and_profile_grids(grid, fragment):
    grid = dict(grid)
    run = grid.pop("run", {})
    doc = {"grid": {"schedules": ["1f1b"], "stages": [4], "microbatches": [8], "systems": ["mid_nw_mid_cp"], **grid},
           "run": run}
    if "profiles" in grid and "systems" not in grid:
        del doc["grid"]["systems"]
    with pytest.raises(ConfigError, match=fragment):
        parse_config(doc)
