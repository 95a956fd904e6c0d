"""Every context decision is a sweep key (``hardware.decisions``), expert parallelism
included: a sweep crossing ``ep`` on a mixture-of-experts model gives, per EP degree, the row
``pipetab evaluate --ep`` gives."""

from __future__ import annotations

import json

import pytest

from pipetab.cli import main
from pipetab.hardware.decisions import DECISIONS
from pipetab.sweep import expand, parse_config
from pipetab.sweep.run import evaluate

# one value per decision's key, as a sweep file writes it: each declaration's example
SAMPLES = {d.sweep_key: d.example for d in DECISIONS}


def moe_config(cluster: dict, **grid):
    doc = {"grid": {"schedules": ["1f1b"], "microbatches": [8], "systems": ["dgx_h100_ib"],
                    "models": ["mixtral_8x7b"], "cluster": cluster, **grid}}
    return parse_config(doc)


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda d: d.name)
def test_every_declared_decision_is_a_sweep_key(decision):
    """Each decision's sweep key is accepted and reaches the configurations."""
    section, key = decision.sweep.rsplit(".", 1)
    if section == "grid.cluster":
        cluster = {"tp": [2], "dp": [2], key: SAMPLES[key]}
        if key == "reshard_after_forward":
            cluster["zero"] = 3
        if key == "cp_comm":  # only with context parallelism
            cluster["cp"] = [2]
        config = moe_config(cluster, stages=[4])
        todo, skipped = expand(config)
        confs = todo + [s.configuration for s in skipped]
        assert confs and all(key in c.cluster_dict() for c in confs)
    elif section == "grid":
        assert key == "stages"
        assert {c.stages for c in expand(moe_config({"tp": [2]}, stages=[4]))[0]} == {4}
    else:
        assert (section, key) == ("run", "recompute")
        config = parse_config({"grid": {"schedules": ["1f1b"], "stages": [4], "microbatches": [8],
                                        "systems": ["dgx_h100_ib"]}, "run": {"recompute": "full"}})
        assert expand(config)[0][0].run.recompute == "full"


def test_a_sweep_crosses_expert_parallelism_as_evaluate_takes_it(capsys):
    """ep = [1, 2, 4] on Mixtral 8x7B (8 experts, 16 GPUs, TP 2 x DP 2, so S = 4): three
    configurations with their own keys, each row the simulation ``evaluate --ep`` gives."""
    todo, skipped = expand(moe_config({"gpus": 16, "tp": [2], "dp": [2], "ep": [1, 2, 4], "global_batch": 32}))
    assert not skipped and [c.cluster_dict()["ep"] for c in todo] == [1, 2, 4]
    assert len({c.key for c in todo}) == 3 and all(c.stages == 4 for c in todo)
    assert "EP2" in todo[1].label() and "EP" not in todo[0].label()
    makespans = []
    for c in todo:
        row = evaluate(c)
        assert main(["evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "dgx_h100_ib", "--model", "mixtral_8x7b",
                     "--tp", "2", "--dp", "2", "--ep", str(c.cluster_dict()["ep"]), "--global-batch", "32",
                     "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["context"]["ep"] == c.cluster_dict()["ep"]
        assert row["simulation_makespan_s"] == pytest.approx(doc["simulation"]["makespan_s"], rel=1e-12)
        makespans.append(row["simulation_makespan_s"])
    assert len(set(makespans)) == 3  # the degree reaches the pricing: each prices its own all-to-all


@pytest.mark.parametrize("cluster, message", [
    ({"routing_imbalance": 5000.0}, "routing_imbalance must be a number >= 1 and <= 1024, got 5000.0"),
    ({"tp": [2048]}, "must be at most 1,024"),
])
def test_a_value_beyond_its_declared_range_is_refused_when_the_file_is_read(cluster, message):
    """The declaration's range holds in a sweep file as on the command line (it had parsed and
    then failed row by row at run time)."""
    from pipetab.sweep import ConfigError

    with pytest.raises(ConfigError, match=message):
        moe_config(cluster, stages=[4])


def test_a_sweep_offloads_activations_as_evaluate_does(capsys):
    """``offload_activations = 0.5`` on a system with a host link: the row's simulation is
    ``evaluate --offload-activations 0.5``'s, its copies on the copy streams (later than without)."""
    doc = {"grid": {"schedules": ["1f1b"], "stages": [2], "microbatches": [4], "systems": ["dgx_h100_ib"],
                    "models": ["gpt3_2p7b"], "cluster": {"microbatch_size": 1, "offload_activations": 0.5}}}
    (c,), _ = expand(parse_config(doc))
    assert c.cluster_dict()["offload_activations"] == 0.5
    row = evaluate(c)
    assert main(["evaluate", "1f1b", "-S", "2", "-B", "4", "--system", "dgx_h100_ib", "--model", "gpt3_2p7b",
                 "--microbatch-size", "1", "--offload-activations", "0.5", "--format", "json"]) == 0
    offloaded = json.loads(capsys.readouterr().out)["simulation"]["makespan_s"]
    assert row["simulation_makespan_s"] == pytest.approx(offloaded, rel=1e-12)
    doc["grid"]["cluster"]["offload_activations"] = 0.0
    (plain,), _ = expand(parse_config(doc))
    assert evaluate(plain)["simulation_makespan_s"] < offloaded
