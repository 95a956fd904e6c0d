"""``pipetab plan``, ``pipetab calibrate`` and ``pipetab models`` from the command line."""

import json

import pytest

from pipetab.cli import main
from pipetab.plan.result import fidelity_band

QUICK = ["plan", "--model", "llama3_8b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "32",
         "--cpsat-shapes", "0", "--top", "4", "--quiet"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_schema_and_ranking(capsys, tmp_path):
    code, out, err = run(capsys, *QUICK, "--format", "json", "--plot", str(tmp_path / "p.png"))
    assert code == 0, err
    doc = json.loads(out)
    confs = doc["configurations"]
    assert 1 <= len(confs) <= 4
    need = {"schedule", "pp", "tp", "dp", "microbatch_size", "microbatches", "recompute", "step_time_s",
            "tokens_per_s", "mfu", "peak_memory_bytes", "fits"}
    assert all(need <= set(c) for c in confs)
    for c in confs:
        assert c["pp"] * c["tp"] * c["dp"] == 8
        assert c["microbatch_size"] * c["microbatches"] * c["dp"] == 32
        assert 0 < c["mfu"] < 1 and c["fits"]
        assert c["tokens_per_s"] == pytest.approx(32 * 8192 / c["step_time_s"])
    assert [c["step_time_s"] for c in confs] == sorted(c["step_time_s"] for c in confs)
    assert (tmp_path / "p.png").stat().st_size > 10_000
    band = doc["band"]["relative"]
    assert band == fidelity_band()
    for c in confs:  # the band the terminal prints as +-, and its ~ marks
        assert c["step_time_low_s"] == pytest.approx(c["step_time_s"] * (1 - band))
        assert c["step_time_high_s"] == pytest.approx(c["step_time_s"] * (1 + band))
    first = confs[0]["step_time_s"]
    assert [c["indistinguishable_from_first"] for c in confs] == \
        [i > 0 and c["fits"] and c["step_time_s"] <= first * (1 + band) for i, c in enumerate(confs)]


def test_plan_text_and_no_progress_when_piped(capsys):
    """Progress is a live line on a terminal only: piped (capsys), stderr stays empty."""
    code, out, err = run(capsys, *[a for a in QUICK if a != "--quiet"])
    assert code == 0
    assert "schedule" in out and "MFU" in out and "searched" in out
    assert err == ""


@pytest.mark.parametrize("args, message", [
    (["--nodes", "0"], "nodes must be an integer >= 1, got 0"),
    (["--gpu", "B300"], "--gpu must be one of H100, A100, got 'B300'"),
    (["--microbatch-sizes", "1,x"], "microbatch sizes must be integers separated by commas"),
    (["--recompute", "some"], "recompute must be a comma-separated list of none, selective, full"),
    (["--schedules", "1f1b,nope"], "unknown schedule 'nope'"),
    (["--cpsat-time", "nan"], "cpsat time must be more than 0 and less than 1e6 seconds"),
    (["--cpsat-time", "0"], "cpsat time must be more than 0 and less than 1e6 seconds"),
    (["--plot", "/no/such/dir/p.png"], "--plot '/no/such/dir/p.png': folder '/no/such/dir' does not exist"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--gpu", "H100", "--system", "dgx_h100_ib"], "not allowed with argument"),
    (["--profile", "experiments/profiles/zb_1p5b_p8_m24.toml"], "--cpsat-shapes does not apply with --profile"),
    (["--cpsat-time", "2"], "--cpsat-time does not apply with --cpsat-shapes 0"),
    (["--zero", "3", "--dp", "1"], "--zero applies with --dp > 1 or --cp > 1 only: --dp 1 leaves no replicas, "
                                   "and CP is not tried on sequences of 8192 tokens (from 16384)"),
    (["--pp", "4", "--tp", "4"], "--pp 4 x --tp 4 = 16 GPUs must divide the cluster's 8"),
    (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler needs --executor dask"),
    (["--workers", "0"], "workers must be an integer >= 1"),
])
def test_plan_bad_input_is_one_line(capsys, args, message):
    argv = list(QUICK)
    for i in range(0, len(args), 2):
        if args[i] in argv and args[i] != "--gpu":
            argv[argv.index(args[i]) + 1] = args[i + 1]
        else:
            argv += args[i:i + 2]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_plan_missing_profile(capsys):
    code, _out, err = run(capsys, "plan", "--model", "zb_1p5b", "--nodes", "1", "--gpus-per-node", "8",
                         "--global-batch", "144", "--profile", "/no/such.toml")
    assert code == 2 and err.count("\n") == 1 and "profile file /no/such.toml does not exist" in err


def test_plan_with_a_profile(capsys):
    profile = "experiments/profiles/zb_1p5b_p8_m24.toml"
    base = ["plan", "--model", "zb_1p5b", "--nodes", "1", "--gpus-per-node", "8", "--gpu", "A100",
            "--global-batch", "144", "--quiet", "--profile", profile, "--top", "20"]  # 14 schedules and their variants
    code, _, err = run(capsys, *base, "--recompute", "full")
    assert code == 2 and "--recompute does not apply with --profile" in err
    code, out, err = run(capsys, *base, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["profile"] == "zb_1p5b_p8_m24"
    names = [c["schedule"] for c in doc["configurations"]]
    assert "1f1b" in names and "zb-h1" in names
    assert all(c["pp"] == 8 and c["microbatches"] == 24 and c["recompute"] == "profiled" for c in doc["configurations"])
    one = {c["schedule"]: c["step_time_s"] for c in doc["configurations"]}
    # the Zero Bubble paper's Table 5 bubble rate of 1F1B from these times: 0.2431
    assert 1 - 24 * (18.522 + 18.086 + 9.337) * 1e-3 / one["1f1b"] == pytest.approx(0.2431, abs=5e-5)


def test_calibrate_writes_a_system(capsys, tmp_path):
    out_file = tmp_path / "a100_fit.toml"
    code, out, err = run(capsys, "calibrate", "experiments/profiles/zb_6p2b_p8_m32.toml", "--model", "zb_6p2b",
                         "--system", "a100_cluster", "--out", str(out_file), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    # the kernel model's GEMM main-loop efficiency (the op roofline's was 0.5-0.7 of peak)
    assert 0.8 < doc["compute_efficiency"] < 0.92 and [o["kind"] for o in doc["ops"]] == ["F", "B", "W"]
    from pipetab.hardware.loaders import load_system

    fitted = load_system(out_file)
    assert fitted.device.compute_efficiency == pytest.approx(doc["compute_efficiency"])
    assert fitted.device.mem_efficiency == pytest.approx(doc["mem_efficiency"])
    assert (fitted.device.sm_count, fitted.device.tile_m, fitted.device.tile_n) == (108, 256, 128)
    code, out, err = run(capsys, "calibrate", "experiments/profiles/zb_6p2b_p8_m32.toml", "--model", "zb_6p2b",
                         "--system", "a100_cluster", "--out", "/no/such/dir/x.toml")
    assert code == 2 and err.count("\n") == 1
    assert "--out '/no/such/dir/x.toml': folder '/no/such/dir' does not exist" in err


def test_models_lists_parameter_counts(capsys):
    code, out, _ = run(capsys, "models", "--format", "json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["llama3_70b"]["parameters"] == pytest.approx(70.6e9, rel=0.01)
    assert "GQA 64/8" in rows["llama3_70b"]["family"]
    code, out, _ = run(capsys, "models")
    assert "70.55 B" in out


def test_torch_csv_writes_the_whole_step_not_the_run_it_was_extrapolated_from(capsys):
    """A step of 256 microbatches is ranked from a periodic run of a few; the CSV holds
    every microbatch of the step (it held the short run's 16)."""
    from pipetab.schedules.formats import from_torch_csv

    argv = ["plan", "--model", "gpt3_2p7b", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "256",
            "--pp", "4", "--tp", "2", "--schedules", "1f1b", "--cpsat-shapes", "0"]
    code, out, _ = run(capsys, *argv, "--format", "json")
    assert code == 0
    best = json.loads(out)["configurations"][0]
    code, out, err = run(capsys, *argv, "--format", "torch-csv")
    assert code == 0
    table = from_torch_csv(out)
    microbatches = set(table.ops.microbatch.tolist())
    assert len(microbatches) == best["microbatches"] == 256 // (best["dp"] * best["microbatch_size"]) == 64
    assert "64 microbatches" in err
