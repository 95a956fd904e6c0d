"""Checked inputs: a profile records what it measured and a run that contradicts it is
refused naming both values; no input makes a step faster than the FLOPs allow at peak (no
MFU above 100 % anywhere, a property of plan's configurations); the default model fits;
options that change nothing are refused; a problem whose persistent memory alone exceeds
the GPU is answered at once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipetab.cli import main
from pipetab.hardware import load_model
from pipetab.hardware.layer import model_flops_per_sequence
from pipetab.hardware.profile import check_possible, load_profile, profile_to_toml

ROOT = Path(__file__).resolve().parents[2]
ZB = ROOT / "experiments" / "profiles" / "zb_14p6b_p16_m48.toml"  # 14.6B on 16 A100s, microbatch 1, seq 1024
PLAN = ["plan", "--nodes", "2", "--gpus-per-node", "8", "--global-batch", "48", "--quiet", "--top", "3"]


def recorded(tmp_path, **changes) -> Path:
    """The Zero Bubble paper's 14.6B profile with what it measured recorded (and ``changes``)."""
    prof = replace(load_profile(ZB), model="zb_14p6b", seq_len=1024, gpu="A100", peak_flops=312e12)
    path = tmp_path / "zb.toml"
    path.write_text(profile_to_toml(replace(prof, **changes), time_unit="ms"))
    return path


def error_of(capsys, *argv) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_what_a_profile_measured_round_trips(tmp_path):
    back = load_profile(recorded(tmp_path, recompute="full", num_layers=46, hidden=5120))
    assert (back.model, back.seq_len, back.gpu, back.peak_flops, back.recompute) == (
        "zb_14p6b", 1024, "A100", 312e12, "full")
    assert (back.num_layers, back.hidden) == (46, 5120)


def test_plan_refuses_a_profile_of_another_model(tmp_path, capsys):
    err = error_of(capsys, *PLAN, "--model", "llama3_70b", "--profile", str(recorded(tmp_path)))
    assert "'zb_14p6b'" in err and "'llama3_70b'" in err


def test_plan_refuses_a_profile_of_another_shape(tmp_path, capsys):
    # a model file of another name is accepted when the profile records the shape and it agrees
    path = recorded(tmp_path, num_layers=46, hidden=5120)
    mine = tmp_path / "my14b.toml"
    mine.write_text((ROOT / "hardware/presets/models/zb_14p6b.toml").read_text())
    assert main([*PLAN, "--model", str(mine), "--profile", str(path)]) == 0
    capsys.readouterr()
    err = error_of(capsys, *PLAN, "--model", "zb_28p3b", "--profile", str(path))
    assert "num_layers 46" in err and "num_layers 62" in err


def test_plan_refuses_a_profile_of_another_sequence_length(tmp_path, capsys):
    err = error_of(capsys, *PLAN, "--model", "zb_14p6b", "--seq", "2048", "--profile", str(recorded(tmp_path)))
    assert "1024 tokens" in err and "--seq 2048" in err


def test_plan_refuses_a_profile_of_another_gpu(tmp_path, capsys):
    path = recorded(tmp_path)
    err = error_of(capsys, *PLAN, "--model", "zb_14p6b", "--gpu", "H100", "--profile", str(path))
    assert "A100 (312 TFLOP/s peak)" in err and "--gpu H100" in err and "989 TFLOP/s" in err
    err = error_of(capsys, *PLAN, "--model", "zb_14p6b", "--system", "dgx_h100_ib", "--profile", str(path))
    assert "--system dgx_h100_ib" in err


def test_plan_takes_the_profiles_gpu_and_sequence_by_default(tmp_path, capsys):
    """Without --gpu the A100 profile is planned on A100s (not the H100 default), and its
    MFU is the profile's FLOPs over the A100 peak."""
    import json

    assert main([*PLAN, "--model", "zb_14p6b", "--profile", str(recorded(tmp_path)), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["system"].endswith("a100_cluster") and doc["seq_len"] == 1024
    best = doc["configurations"][0]
    flops = model_flops_per_sequence(load_model("zb_14p6b")) * 48
    assert best["mfu"] == pytest.approx(flops / (best["step_time_s"] * 16 * 312e12), rel=1e-9)
    assert 0.3 < best["mfu"] < 0.6


def test_a_profile_faster_than_the_gpus_peak_is_refused(tmp_path, capsys):
    """Times of a 14.6B model taken as those of Llama 3 70B at 8192 tokens: the step would
    need 8x the A100's peak; the input that causes it (the profile) is refused."""
    model = replace(load_model("llama3_70b"), seq_len=8192)
    with pytest.raises(ValueError, match="faster than any GPU of 312 TFLOP/s peak"):
        check_possible(load_profile(ZB), model, 312e12, 16)
    path = recorded(tmp_path, model=None, seq_len=None)  # nothing recorded to contradict
    err = error_of(capsys, *PLAN, "--model", "llama3_70b", "--gpu", "A100", "--profile", str(path))
    assert "faster than any GPU" in err and "MFU" in err
    # evaluate, search and bound check the profile against the model and GPU it records
    fast = tmp_path / "fast.toml"
    fast.write_text(recorded(tmp_path, peak_flops=312e10).read_text())  # a GPU 100x slower
    for argv in (["evaluate", "1f1b"], ["search", "--time-limit", "1"], ["bound", "--time-limit", "1"]):
        err = error_of(capsys, *argv, "-S", "16", "-B", "48", "--profile", str(fast))
        assert "faster than any GPU of 3.12 TFLOP/s peak" in err


def test_calibrate_refuses_a_profile_no_gpu_could_produce(tmp_path, capsys):
    fast = tmp_path / "fast.toml"
    fast.write_text(ZB.read_text().replace('time_unit = "ms"', 'time_unit = "us"'))  # 1000x too fast
    err = error_of(capsys, "calibrate", str(fast), "--model", "zb_14p6b", "--system", "a100_cluster",
                   "--out", str(tmp_path / "s.toml"))
    assert "efficiency would be" in err and not (tmp_path / "s.toml").exists()
    many = tmp_path / "many.toml"
    many.write_text(ZB.read_text().replace("layers = 3 ", "layers = 30 "))
    err = error_of(capsys, "calibrate", str(many), "--model", "zb_14p6b", "--system", "a100_cluster")
    assert "480 layers" in err and "46" in err


def test_calibrate_writes_a_file_systems_reads_back(tmp_path, capsys):
    odd = tmp_path / 'odd "\x1b[31m" name.toml'
    odd.write_text(ZB.read_text())
    out = tmp_path / "fit.toml"
    assert main(["calibrate", str(odd), "--model", "zb_14p6b", "--system", "a100_cluster", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed
    assert main(["systems", str(out)]) == 0
    listing = capsys.readouterr().out
    assert "\x1b" not in listing and "\\x1b[31m" in listing


def test_profile_times_spanning_too_many_orders_are_refused(tmp_path, capsys):
    wide = tmp_path / "wide.toml"
    import re

    wide.write_text(re.sub(r"\nforward = [0-9.]+", "\nforward = 1e-12", ZB.read_text()))
    err = error_of(capsys, "search", "-S", "16", "-B", "48", "--profile", str(wide))
    assert "span" in err and "1e-15 s" in err


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.sampled_from([4, 8, 12]), hidden=st.sampled_from([256, 512, 1024]),
       heads=st.sampled_from([4, 8]), seq=st.sampled_from([128, 512, 2048]),
       nodes=st.integers(1, 2), gpus=st.sampled_from([2, 4, 8]), batch=st.sampled_from([8, 16, 32]),
       gpu=st.sampled_from(["H100", "A100"]), attention=st.sampled_from(["flash", "classic"]))
def test_no_plan_configuration_has_mfu_above_100_percent(layers, hidden, heads, seq, nodes, gpus, batch, gpu,
                                                         attention):
    from pipetab.plan import PlanSpace, cluster, plan

    model = replace(load_model("tiny_gpt"), name="m", num_layers=layers, hidden=hidden, heads=heads, seq_len=seq,
                    ffn_hidden=4 * hidden, attention=attention)
    space = PlanSpace(model, cluster(gpu, nodes, gpus), batch, cpsat_shapes=0, top=3)
    result = plan(space)
    confs = result.evaluated or result.configurations
    assert confs
    for c in confs:
        assert 0 < c.mfu <= 1, (c.label, c.shape.label, c.mfu)
        assert c.step_time_s * c.mfu * space.num_gpus * space.system.device.peak_flops == pytest.approx(
            model_flops_per_sequence(model) * batch, rel=1e-9)


@pytest.mark.parametrize("system", ["mid_nw_mid_cp", "dgx_h100_ib", "a100_cluster", "slow_nw_slow_cp"])
@pytest.mark.parametrize("name, S, B", [("1f1b", 2, 4), ("1f1b", 4, 8), ("zb-h1", 4, 16), ("interleaved", 4, 8),
                                        ("zbv", 4, 8), ("chimera", 4, 8)])
def test_the_default_model_fits_the_default_run(capsys, system, name, S, B):
    import json

    assert main(["evaluate", name, "-S", str(S), "-B", str(B), "--system", system, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["context"]["model"] == "gpt3_2p7b" and doc["context"]["microbatch_size"] == 1
    assert all(doc["simulation"]["fits_memory"])


@pytest.mark.parametrize("argv", [
    ["evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "dgx_h100_ib", "--model", "llama3_8b"],
    ["search", "-S", "4", "-B", "8", "--system", "dgx_h100_ib", "--model", "llama3_8b"],
    ["plan", "--model", "llama3_8b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8"],
])
def test_selective_recompute_on_fused_attention_is_refused(capsys, argv):
    err = error_of(capsys, *argv, "--recompute", "selective")
    assert "--recompute selective changes nothing" in err and "flash" in err


def test_persistent_memory_alone_beyond_the_gpu_is_answered_at_once(capsys):
    err = error_of(capsys, "search", "-S", "4", "-B", "8", "--placement", "bidirectional", "--partition", "free",
                   "--system", "fast_nw_mid_cp", "--model", "paper_gpt")
    assert "no schedule fits" in err and "195.2 GiB on average" in err  # 2 x 128 layers x 18 B/param / 4 devices
