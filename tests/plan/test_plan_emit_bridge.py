"""``plan --emit megatron-bridge`` and ``--emit-version``: Bridge overrides whose names
Megatron-Bridge 0.3.1 over megatron-core 0.16.1 defines (the list made from their wheels by
``experiments/bridge_fields.py``), read back to the plan for every configuration of the
fixed set; each format's version named in its header, in the test data it is checked
against, and an unsupported one refused in one line."""

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from experiments.emit_clients import hand_made
from pipetab.cli import main
from pipetab.plan.emit import (
    BRIDGE,
    MEGATRON_COMMIT,
    MEGATRON_CORE,
    TORCHTITAN,
    TORCHTITAN_TOML,
    VERSIONS,
    Notes,
    bridge_overrides,
    bridge_text,
    megatron_args,
    megatron_text,
    megatron_view,
    planned,
    read_bridge,
    read_megatron,
    target,
)

DATA = Path(__file__).parents[1] / "data"
BRIDGE_TEXT = (DATA / "megatron_bridge_fields.txt").read_text()
FIELDS = {line for line in BRIDGE_TEXT.splitlines() if line and not line.startswith("#")}
CASES = range(7)
KEYS = ("pp", "tp", "cp", "dp", "ep", "etp", "layout", "schedule", "recompute", "microbatch_size", "global_batch",
        "seq_len", "zero", "dispatcher")


@pytest.mark.parametrize("case", CASES)
def test_bridge_fields_and_round_trip(case):
    """Every override names a field of Bridge's ConfigContainer; read back, the overrides
    say what the Megatron-LM arguments say, and that is the plan but for a recomputation a
    DIFFERS line names (Megatron's uniform count)."""
    _, model, gpus, conf = hand_made()[case]
    notes = Notes()
    text = bridge_text(conf, model, gpus, notes)
    keys = {o.split("=", 1)[0] for o in bridge_overrides(megatron_args(conf, model))}
    assert keys <= FIELDS, keys - FIELDS
    back = read_bridge(text, gpus)
    assert back == read_megatron(megatron_text(conf, model, gpus), gpus) == megatron_view(conf, gpus, model)
    want = planned(conf, gpus, model)
    for key in KEYS:
        if key == "recompute" and any("per-stage recomputation" in n for n in notes.differs):
            assert back[key] != want[key]
        elif key != "zero":
            assert back[key] == want[key], key
    assert back["zero"] == conf.shape.zero


def test_bridge_overrides_by_hand():
    """DeepSeek-V3 on PP 16: 3 dense then 58 MoE layers written out, the uneven layout
    quoted for Hydra, the run decisions Megatron leaves at its defaults written (the recipe
    sets its own), ZeRO-1 as Bridge's distributed optimizer in both its places."""
    _, model, gpus, conf = hand_made()[0]
    over = dict(o.split("=", 1) for o in bridge_overrides(megatron_args(conf, model)))
    assert over["model.moe_layer_freq"] == "[" + ",".join(["0"] * 3 + ["1"] * 58) + "]"
    assert over["model.pipeline_model_parallel_layout"] == '"Et*4|(t*4|)*12t*3|t*3|t*3mL"'
    assert over["model.num_moe_experts"] == "256" and over["model.moe_router_topk"] == "8"
    assert (over["model.expert_model_parallel_size"], over["model.tensor_model_parallel_size"]) == ("8", "2")
    assert over["ddp.use_distributed_optimizer"] == over["optimizer.use_distributed_optimizer"] == "true"
    assert over["ddp.use_megatron_fsdp"] == "false" and over["model.recompute_granularity"] == "null"
    assert over["model.add_bias_linear"] == "false" and over["model.multi_latent_attention"] == "true"
    assert over["dataset.sequence_length"] == over["model.seq_length"] == "4096"
    assert "model.group_query_attention" not in over and "model.bf16" not in over
    text = bridge_text(conf, model, gpus)
    assert "'model.pipeline_model_parallel_layout=\"Et*4|(t*4|)*12t*3|t*3|t*3mL\"'" in text
    assert "--recipe deepseek_v3_pretrain_config" in text and "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text


def test_bridge_says_what_it_does_not_write():
    """FP8 GEMMs: the recipe's precision kept, said; a model Bridge has no recipe of: refused."""
    _, model, gpus, conf = hand_made()[3]
    notes = Notes()
    bridge_text(conf, model, gpus, notes)
    said = "FP8 GEMMs planned: the overrides keep the recipe's mixed precision"
    assert any(n.startswith(said) for n in notes.differs)
    with pytest.raises(ValueError, match=r"--model gpt3_2p7b: Megatron-Bridge 0\.3\.1 has no recipe of it"):
        bridge_text(conf, dataclasses.replace(model, name="gpt3_2p7b"), gpus)


def test_versions_are_the_test_data_s():
    """The version each format writes for is the one its field list was made from."""
    assert f"Megatron-LM {MEGATRON_COMMIT}:" in (DATA / "megatron_arguments.txt").read_text().splitlines()[0]
    assert BRIDGE_TEXT.startswith(f"# Megatron-Bridge {BRIDGE} (megatron-core {MEGATRON_CORE}):")
    titan = {line.split(":", 1)[0] for line in (DATA / "torchtitan_fields.txt").read_text().splitlines()
             if line and not line.startswith("#")}
    assert titan == {TORCHTITAN, TORCHTITAN_TOML}
    want = {"megatron": (MEGATRON_COMMIT[:12],), "megatron-bridge": ("0.3.1",), "torchtitan": ("0.3.0", "0.2.2"),
            "torchtitan-toml": ("0.2.2",)}
    assert want == VERSIONS


def test_target_versions():
    assert target("torchtitan") == ("torchtitan", "0.3.0")
    assert target("torchtitan", "0.2.2") == ("torchtitan-toml", "0.2.2")
    assert target("megatron", "D98E8A6") == ("megatron", "d98e8a64ddf3")
    with pytest.raises(ValueError, match=re.escape("--emit-version 'd98e8a': --emit megatron writes for d98e8a64ddf3")):
        target("megatron", "d98e8a")
    with pytest.raises(ValueError, match=re.escape("--emit-version '0.6.2': --emit megatron-bridge writes for 0.3.1")):
        target("megatron-bridge", "0.6.2")


BASE = ["plan", "--model", "llama3_8b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "32",
        "--cpsat-shapes", "0", "--quiet"]


def test_cli_emit_version(capsys):
    """The header names the version; torchtitan's 0.2.2 is its TOML job file; an unsupported
    version is one line naming the option and the versions, exit 2, before any planning."""
    assert main([*BASE, "--emit", "torchtitan", "--emit-version", "0.2.2"]) == 0
    out = capsys.readouterr().out
    assert "# for torchtitan 0.2.2 (run with --job.config_file FILE.toml)" in out and "[parallelism]" in out
    assert main([*BASE, "--emit", "megatron-bridge", "--schedules", "1f1b,interleaved"]) == 0
    out = capsys.readouterr().out
    assert "# for Megatron-Bridge 0.3.1 (megatron-core 0.16.1)" in out
    argv = shlex.split(out.replace("\\\n", " ").split("pretrain.py")[1])
    assert argv[:2] == ["--recipe", "llama3_8b_pretrain_config"] and all("=" in a for a in argv[2:])
    assert main([*BASE, "--emit", "megatron", "--emit-version", "d98e8a64"]) == 0
    assert "# for Megatron-LM d98e8a64ddf3 (megatron-core 0.16.1)" in capsys.readouterr().out
    assert main([*BASE, "--emit", "torchtitan-toml", "--emit-version", "0.3.0"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("--emit-version '0.3.0': --emit torchtitan-toml writes for 0.2.2")
    assert len(err.splitlines()) == 1


def test_bridge_writes_activation_offload():
    """A plan offloading activations: Megatron's module list as a Hydra list under Bridge's
    field names, and Megatron-LM's fraction, which megatron-core's config lacks, left out."""
    _, model, _gpus, conf = hand_made()[1]
    conf = dataclasses.replace(conf, shape=conf.shape.replace(offload_activations=1.0))
    over = dict(o.split("=", 1) for o in bridge_overrides(megatron_args(conf, model)))
    assert set(over) <= FIELDS, set(over) - FIELDS
    assert over["model.fine_grained_activation_offloading"] == "true"
    # Llama 3 8B, dense: every module Megatron's TransformerConfig lets it offload but the experts'
    assert over["model.offload_modules"] == "[attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm]"
