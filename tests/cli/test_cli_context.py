"""The cluster context and profiles on evaluate, view, search and bound (``--tp --dp --zero
--microbatch-size --global-batch --seq --profile``): the CLI gives what the API gives."""

from __future__ import annotations

import json

import pytest

from pipetab.cli import main
from pipetab.hardware.context import Context
from pipetab.hardware.profile import profile_to_toml
from pipetab.schedules import registry
from pipetab.solver.pricing import costs_profile, hardware_costs
from pipetab.solver.simulate import simulate


def run_json(capsys, *argv) -> dict:
    code = main([*argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name, S, B, par, mb", [
    ("1f1b", 4, 8, Context(tp=2, dp=2, sequence_parallel=True, zero=1), 1),
    ("zb-h1", 4, 8, Context(tp=4, dp=1, sequence_parallel=False), 2),
])
def test_a_profile_of_the_simulators_own_times_gives_its_step_through_the_cli(tmp_path, capsys, name, S, B, par, mb):
    sched = registry.generate(name, S, B)
    costs = hardware_costs(sched, "dgx_h100_ib", "llama3_8b", par.replace(microbatch_size=mb))
    path = tmp_path / "own.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs, microbatch_size=mb)))
    doc = run_json(capsys, "evaluate", name, "-S", str(S), "-B", str(B), "--profile", str(path))
    assert doc["simulation"]["makespan_s"] == pytest.approx(simulate(sched, costs).makespan, rel=1e-12)


def test_the_context_options_give_the_api_costs(capsys):
    sched = registry.generate("1f1b", 4, 8)
    par = Context(tp=2, dp=2, sequence_parallel=False, zero=2, overlap=False, microbatch_size=2)
    want = simulate(sched, hardware_costs(sched, "dgx_h100_ib", "llama3_8b", par))
    doc = run_json(capsys, "evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "dgx_h100_ib", "--model",
                   "llama3_8b", "--tp", "2", "--dp", "2", "--zero", "2", "--no-sequence-parallel", "--no-overlap",
                   "--microbatch-size", "2")
    assert doc["simulation"]["makespan_s"] == pytest.approx(want.makespan, rel=1e-12)
    assert doc["simulation"]["peak_memory_bytes"] == pytest.approx(list(want.peak_memory), rel=1e-12)


def test_global_batch_and_sequence_set_the_microbatch(capsys):
    # paper_gpt: global batch 512, so 512 / 8 = 64 sequences per microbatch by default;
    # --global-batch 64 makes it 8, the same as --microbatch-size 8
    base = ["evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--model", "paper_gpt",
            "--seq", "1024"]
    by_batch = run_json(capsys, *base, "--global-batch", "64")
    by_size = run_json(capsys, *base, "--microbatch-size", "8")
    default = run_json(capsys, *base)
    assert by_batch == by_size
    assert by_batch["simulation"]["makespan_s"] < default["simulation"]["makespan_s"] / 4


def test_search_and_bound_take_a_profile(tmp_path, capsys):
    sched = registry.generate("zb-h1", 4, 8)
    costs = hardware_costs(sched, "dgx_h100_ib", "llama3_8b", Context(tp=8, sequence_parallel=False, microbatch_size=1))
    path = tmp_path / "own.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs, microbatch_size=1)))
    common = ["-S", "4", "-B", "8", "--split-backward", "--profile", str(path), "--time-limit", "5"]
    found = run_json(capsys, "search", *common)
    bound = run_json(capsys, "bound", *common)
    assert found["unit"] == bound["unit"] == "s"
    assert bound["lower_bound"] <= found["makespan"] <= simulate(sched, costs).makespan * (1 + 1e-9)


def own_profile(tmp_path, name, S, B, system, model, parallel=None, microbatch_size=None):
    """A profile file of the simulator's own costs of ``name`` and their T_sim."""
    sched = registry.generate(name, S, B)
    ctx = (parallel or Context()).replace(microbatch_size=microbatch_size)
    costs = hardware_costs(sched, system, model, ctx)
    path = tmp_path / f"{name}_{S}_{B}.toml"
    path.write_text(profile_to_toml(costs_profile(sched, costs, microbatch_size=microbatch_size)))
    return path, simulate(sched, costs).makespan


def test_the_console_command_with_a_profile_gives_t_sim(tmp_path):
    """The same round trip through the installed command, as a user runs it."""
    import subprocess
    import sys

    path, t_sim = own_profile(tmp_path, "1f1b", 4, 8, "dgx_h100_ib", "llama3_8b", None, 1)
    proc = subprocess.run([sys.executable, "-m", "pipetab.cli", "evaluate", "1f1b", "-S", "4", "-B", "8", "--profile",
                           str(path), "--format", "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["simulation"]["makespan_s"] == pytest.approx(t_sim, rel=1e-12)


def _levels(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "context"}


@pytest.mark.parametrize("extra", [
    ["--tp", "1"], ["--dp", "1"], ["--tp", "1", "--dp", "1"], ["--global-batch", "512"],
    ["--microbatch-size", "64"], ["--seq", "4096"], ["--global-batch", "512", "--microbatch-size", "64"],
])
def test_tp_dp_one_and_the_models_own_batch_give_todays_numbers(capsys, extra):
    for name in ("1f1b", "chimera"):
        base = ["evaluate", name, "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--model", "paper_gpt"]
        assert _levels(run_json(capsys, *base, *extra)) == _levels(run_json(capsys, *base))


def test_plan_and_evaluate_agree_on_the_same_configuration(capsys):
    """The best configuration ``plan`` ranks, given to ``evaluate`` by its options, has the
    step time plan ranked it by (same names, same defaults)."""
    doc = run_json(capsys, "plan", "--model", "llama3_8b", "--nodes", "1", "--gpus-per-node", "8",
                   "--global-batch", "32", "--seq", "2048", "--schedules", "1f1b,gpipe", "--recompute", "none",
                   "--cpsat-shapes", "0", "--quiet")
    best = doc["configurations"][0]
    got = run_json(capsys, "evaluate", best["schedule"], "-S", str(best["pp"]), "-B", str(best["microbatches"]),
                   "--system", "dgx_h100_ib", "--model", "llama3_8b", "--seq", "2048", "--global-batch", "32",
                   "--tp", str(best["tp"]), "--dp", str(best["dp"]),
                   *(["--zero", str(best["zero"])] if best["dp"] > 1 else []))  # plan tries ZeRO 1 and 3
    assert got["context"]["microbatch_size"] == best["microbatch_size"]
    assert got["simulation"]["makespan_s"] == pytest.approx(best["step_time_s"], rel=1e-9)


def test_view_takes_a_profile(capsys, tmp_path):
    path, _ = own_profile(tmp_path, "1f1b", 4, 8, "mid_nw_mid_cp", "paper_gpt")
    page = tmp_path / "v.html"
    assert main(["view", "1f1b", "gpipe", "-S", "4", "-B", "8", "--profile", str(path), "-o", str(page)]) == 0
    assert "profile 1f1b_4_8" in page.read_text()


def test_bound_with_a_profile_is_the_bound_on_the_system(capsys, tmp_path):
    """The profile of the shape's own hardware costs gives the same lower bound as --system."""
    path, _ = own_profile(tmp_path, "1f1b", 4, 8, "mid_nw_mid_cp", "tiny_gpt")
    by_system = run_json(capsys, "bound", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--model", "tiny_gpt",
                         "--time-limit", "10")
    by_profile = run_json(capsys, "bound", "-S", "4", "-B", "8", "--profile", str(path), "--time-limit", "10")
    assert by_profile["unit"] == "s" and by_profile["lower_bound"] is not None
    assert by_profile["lower_bound"] == pytest.approx(by_system["lower_bound"], rel=1e-9)


def test_search_with_cluster_options(capsys):
    doc = run_json(capsys, "search", "-S", "4", "-B", "8", "--system", "dgx_h100_ib", "--model", "llama3_8b",
                   "--tp", "2", "--dp", "2", "--microbatch-size", "1", "--time-limit", "5")
    sched = registry.generate("1f1b", 4, 8)
    par = Context(tp=2, dp=2, sequence_parallel=True, zero=1, microbatch_size=1)
    t_1f1b = simulate(sched, hardware_costs(sched, "dgx_h100_ib", "llama3_8b", par)).makespan
    assert doc["known"]["1f1b"]["makespan"] == pytest.approx(t_1f1b, rel=1e-9)
    assert doc["makespan"] <= t_1f1b * (1 + 1e-9)


def test_systems_list_gpus_per_node_memory_and_links(capsys):
    rows = {r["name"]: r for r in run_json(capsys, "systems")}
    h100 = rows["dgx_h100_ib"]  # the preset's datasheet values
    assert (h100["gpus_per_node"], h100["memory_bytes"], h100["peak_flops"]) == (8, 81559 * 2**20, 989e12)
    assert h100["intra_node_link"] == {"bandwidth": 450e9, "latency_s": 1e-6}
    assert h100["link"] == {"bandwidth": 50e9, "latency_s": 3e-6}
    assert rows["mid_nw_mid_cp"]["gpus_per_node"] is None and rows["mid_nw_mid_cp"]["intra_node_link"] is None
    assert main(["systems"]) == 0
    text = capsys.readouterr().out
    assert "450 GB/s, 1 us" in text and "GPUs/node" in text


def test_models_and_systems_describe_your_own_files(capsys):
    presets = {r["name"]: r for r in run_json(capsys, "models")}
    mine = run_json(capsys, "models", presets["llama3_8b"]["path"])
    assert len(mine) == 1 and mine[0]["parameters"] == presets["llama3_8b"]["parameters"]
    assert mine[0]["parameters"] == pytest.approx(8.03e9, rel=0.01)  # Llama 3 8B, published
    systems = {r["name"]: r for r in run_json(capsys, "systems")}
    assert run_json(capsys, "systems", systems["a100_cluster"]["path"])[0]["gpus_per_node"] == 8


def test_a_layer_split_is_costed_in_the_cluster_context(capsys):
    """--partition LIST with --tp/--dp/--microbatch-size: each op's time is the API's
    hardware_costs of that split in that context, and the even LIST is the default."""
    from dataclasses import replace

    from pipetab.schedules.ops import Kind

    ctx = ["--system", "dgx_h100_ib", "--model", "llama3_8b", "--tp", "2", "--dp", "2", "--microbatch-size", "1",
           "--time-limit", "20"]
    doc = run_json(capsys, "search", "-S", "4", "-B", "4", "--partition", "10,9,8,5", *ctx)
    assert doc["partition"] == [[10, 9, 8, 5]]
    sched = replace(registry.generate("1f1b", 4, 4), stage_work=((10.0, 9.0, 8.0, 5.0),))
    costs = hardware_costs(sched, "dgx_h100_ib", "llama3_8b", Context(tp=2, dp=2, sequence_parallel=True, zero=1,
                                                                      microbatch_size=1))
    cols, times = doc["ops"], doc["times_s"]  # ops as columns; their times in seconds beside them
    for i, kind in enumerate(cols["kind"]):
        if kind == "F":
            assert times["end"][i] - times["start"][i] == pytest.approx(
                costs.op_time[(Kind.F, 0, cols["stage"][i])], rel=1e-9)
    even = run_json(capsys, "search", "-S", "4", "-B", "4", "--partition", "8,8,8,8", *ctx)
    default = run_json(capsys, "search", "-S", "4", "-B", "4", *ctx)
    assert even["makespan"] == pytest.approx(default["makespan"], rel=1e-9)
    assert doc["makespan"] < default["makespan"]


def test_layouts_with_empty_transformer_stages_evaluate_view_and_search(capsys, tmp_path):
    """Layouts with stages empty of transformer layers (the embedding or the head alone) run
    through evaluate (validated table, simulation), view and CP-SAT search."""
    from pipetab.cli import main as cli

    base = ["1f1b", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--model", "tiny_gpt",
            "--layout", "E|t*8|t*8|L"]
    assert cli(["evaluate", *base, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["context"]["layout"] == "E|t*8|t*8|L" and doc["simulation"]["makespan_s"] > 0
    assert cli(["view", *base, "-o", str(tmp_path / "v.html")]) == 0
    capsys.readouterr()
    # the head's stage empty of layers (a stage holding the embedding alone makes CP-SAT's bound
    # exceed the simulated schedule: a solver/cpsat issue reported, not worked around here)
    assert cli(["search", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--model", "tiny_gpt",
                "--layout", "Et*8|t*7|t|L", "--time-limit", "2", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] in ("optimal", "feasible") and doc["makespan"] > 0


def test_search_header_names_the_sizes_given_and_no_other_option(capsys):
    """The title names --tp, --dp and --microbatch-size where given, by name (not by their
    place among the options, which moves when a decision is declared)."""
    assert main(["search", "-S", "2", "-B", "4", "--system", "dgx_h100_ib", "--model", "tiny_gpt", "--tp", "2",
                 "--microbatch-size", "2", "--time-limit", "2"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "system dgx_h100_ib --tp 2 --microbatch-size 2, model tiny_gpt" in first
    assert "--no-" not in first
