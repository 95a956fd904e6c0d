"""The cluster context and profiles on evaluate, view, search and bound (``--tp --dp --zero
--microbatch-size --global-batch --seq --profile``): the CLI gives what the API gives."""

from __future__ import annotations

import json

import pytest

from pipetab.cli import main
from pipetab.hardware.parallel import Parallel
from pipetab.hardware.profile import profile_to_toml
from pipetab.schedules import registry
from pipetab.solver.costs import costs_profile, hardware_costs
from pipetab.solver.simulate import simulate


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name, S, B, par, mb", [
    ("1f1b", 4, 8, Parallel(tp=2, dp=2, sequence_parallel=True, zero=1), 1),
    ("zb-h1", 4, 8, Parallel(tp=4, dp=1), 2),
])
def test_a_profile_of_the_simulators_own_times_gives_its_step_through_the_cli(tmp_path, capsys, name, S, B, par, mb):
    sched = registry.generate(name, S, B)
    costs = hardware_costs(sched, "dgx_h100_ib", "llama3_8b", parallel=par, microbatch_size=mb)
    path = tmp_path / "own.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs, microbatch_size=mb)))
    doc = run_json(capsys, "evaluate", name, "-S", str(S), "-B", str(B), "--profile", str(path))
    assert doc["simulation"]["makespan_s"] == pytest.approx(simulate(sched, costs).makespan, rel=1e-12)


def test_the_context_options_give_the_api_costs(capsys):
    sched = registry.generate("1f1b", 4, 8)
    par = Parallel(tp=2, dp=2, sequence_parallel=False, zero=2, overlap=False)
    want = simulate(sched, hardware_costs(sched, "dgx_h100_ib", "llama3_8b", parallel=par, microbatch_size=2))
    doc = run_json(capsys, "evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "dgx_h100_ib", "--model",
                   "llama3_8b", "--tp", "2", "--dp", "2", "--zero", "2", "--no-sequence-parallel", "--no-overlap",
                   "--microbatch-size", "2")
    assert doc["simulation"]["makespan_s"] == pytest.approx(want.makespan, rel=1e-12)
    assert doc["simulation"]["peak_memory_bytes"] == pytest.approx(list(want.peak_memory), rel=1e-12)


def test_one_gpu_one_replica_is_todays_pure_pipeline(capsys):
    base = ["evaluate", "chimera", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp"]
    assert run_json(capsys, *base, "--tp", "1", "--dp", "1") == run_json(capsys, *base)


def test_global_batch_and_sequence_set_the_microbatch(capsys):
    # paper_gpt: global batch 512, so 512 / 8 = 64 sequences per microbatch by default;
    # --global-batch 64 makes it 8, the same as --microbatch-size 8
    base = ["evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--seq", "1024"]
    by_batch = run_json(capsys, *base, "--global-batch", "64")
    by_size = run_json(capsys, *base, "--microbatch-size", "8")
    default = run_json(capsys, *base)
    assert by_batch == by_size
    assert by_batch["simulation"]["makespan_s"] < default["simulation"]["makespan_s"] / 4


def test_search_and_bound_take_a_profile(tmp_path, capsys):
    sched = registry.generate("zb-h1", 4, 8)
    costs = hardware_costs(sched, "dgx_h100_ib", "llama3_8b", parallel=Parallel(tp=8), microbatch_size=1)
    path = tmp_path / "own.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs, microbatch_size=1)))
    common = ["-S", "4", "-B", "8", "--split-backward", "--profile", str(path), "--time-limit", "5"]
    found = run_json(capsys, "search", *common)
    bound = run_json(capsys, "bound", *common)
    assert found["unit"] == bound["unit"] == "s"
    assert bound["lower_bound"] <= found["makespan"] <= simulate(sched, costs).makespan * (1 + 1e-9)
