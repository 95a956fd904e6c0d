"""The command line: JSON schemas, files written, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pytest

from pipetab.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_table_json_schema(capsys):
    code, out, err = run(capsys, "table", "1f1b", "--stages", "4", "--microbatches", "8", "--format", "json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert set(doc) == {"schedule", "stages", "microbatches", "devices", "makespan_slots", "tick_slots", "bubble_ratio",
                        "ops"}
    assert doc["makespan_slots"] == (8 + 4 - 1) * 3
    assert doc["bubble_ratio"] == pytest.approx(3 / 11)
    assert len(doc["ops"]) == 2 * 4 * 8
    assert set(doc["ops"][0]) == {"device", "start", "duration", "kind", "pipeline", "stage", "microbatch"}


def test_table_formats_and_check_round_trip(capsys, tmp_path):
    for fmt, ext in [("json", "json"), ("csv", "csv"), ("text", "txt"), ("torch-csv", "csv")]:
        code, out, _ = run(capsys, "table", "gpipe", "-S", "3", "-B", "4", "--format", fmt)
        assert code == 0
        path = tmp_path / f"t_{fmt}.{ext}"
        path.write_text(out.split("makespan ")[0] if fmt == "text" else out)
        code, out, err = run(capsys, "check", str(path), "--format", "json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["valid"] and doc["makespan_slots"] == 18 and doc["peak_activations"] == [4, 4, 4]


def test_evaluate_json_levels(capsys):
    code, out, err = run(capsys, "evaluate", "1f1b", "-S", "4", "-B", "8", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["formula"]["bubble_ratio"] == pytest.approx(3 / 11)
    assert doc["table"]["bubble_ratio"] == pytest.approx(3 / 11)
    assert doc["table"]["peak_activations"] == [4, 3, 2, 1]
    assert "simulation" not in doc


def test_evaluate_simulation_trace_and_plot(capsys, tmp_path):
    trace, png = tmp_path / "t.json", tmp_path / "t.png"
    code, out, err = run(capsys, "evaluate", "chimera", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp",
                         "--model", "tiny_gpt", "--trace", str(trace), "--plot", str(png), "--format", "json")
    assert code == 0, err
    sim = json.loads(out)["simulation"]
    for key in ("makespan_s", "idle_ratio", "peak_activation_bytes", "peak_memory_bytes", "fits_memory"):
        assert key in sim
    assert len(sim["peak_memory_bytes"]) == 4
    assert sim["fits_memory"] == [p <= c for p, c in zip(sim["peak_memory_bytes"], sim["capacity_bytes"])]
    assert [p - q for p, q in zip(sim["peak_memory_bytes"], sim["persistent_bytes"])] == sim["peak_activation_bytes"]
    events = json.loads(trace.read_text())["traceEvents"]
    # F and B per stage per microbatch
    assert sum(1 for e in events if e.get("ph") == "X" and e.get("pid") == 0 and e["name"] != "optimizer") == 2 * 4 * 8
    assert any(e.get("cat") == "send" for e in events)
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "argv, makespan",
    [
        (["interleaved", "-S", "4", "-B", "8", "--chunks", "2"], 38),
        (["interleaved", "-S", "4", "-B", "8", "--chunks", "3"], 54),
        (["zb-h1", "-S", "4", "-B", "8"], 27),
        (["zbv", "-S", "4", "-B", "8"], 51),
        (["dualpipev", "-S", "4", "-B", "8"], 54),  # DeepSeek's timing: 6B + 2(S-1) ticks
        (["dualpipev", "-S", "4", "-B", "8", "--overlap-pairs", "off"], 51),
        (["dualpipe", "-S", "4", "-B", "8"], 26),  # 3B + (PP/2-1)(F&B+B-3W) at F = B = W = 1
    ],
)
def test_table_new_schedules(capsys, argv, makespan):
    code, out, err = run(capsys, "table", *argv, "--backward-slots", "1", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["makespan_slots"] * 1 == makespan * doc["tick_slots"]  # ticks of 1/v slot
    assert max(o["start"] + o["duration"] for o in doc["ops"]) == makespan


def test_weight_slots_reach_the_table(capsys):
    # ZB-H1 with F=B=W=1 is the reference's 27-slot table; W=2 lengthens every weight op
    code, out, _ = run(capsys, "table", "zb-h1", "-S", "4", "-B", "8", "--backward-slots", "1", "--format", "json")
    assert code == 0 and json.loads(out)["makespan_slots"] == 27
    code, out, _ = run(capsys, "table", "zb-h1", "-S", "4", "-B", "8", "--backward-slots", "1",
                       "--weight-slots", "2", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and {o["duration"] for o in doc["ops"] if o["kind"] == "W"} == {2}
    # device 0 runs 8 F, 8 B and 8 W (now 2 slots each) and idles 3 slots first: 8 * 4 + 3
    assert doc["makespan_slots"] == 35


def test_presets_listed(capsys):
    _code, out, _ = run(capsys, "systems", "--format", "json")
    names = {r["name"] for r in json.loads(out)}
    assert {f"{n}_nw_{c}_cp" for n in ("slow", "mid", "fast") for c in ("slow", "mid", "fast")} <= names
    _code, out, _ = run(capsys, "models")
    assert "paper_gpt" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["table", "zb-h1", "-S", "1", "-B", "4"], "stages must be an integer >= 2, got 1"),
        (["table", "gpipe", "-S", "4", "-B", "0"], "microbatches must be an integer >= 1, got 0"),
        (["table", "chimera", "-S", "5", "-B", "10"], "stages must be even for chimera, got 5"),
        (["table", "chimera", "-S", "4", "-B", "6"],
         "microbatches must be a multiple of stages (4) for chimera, got 6"),
        (["table", "nosuch", "-S", "4", "-B", "4"], "unknown schedule 'nosuch'"),
        (["table", "gpipe", "-S", "4", "-B", "4", "--waves", "2"], "--waves does not apply to schedule 'gpipe'"),
        (["table", "hanayo", "-S", "4", "-B", "4", "--chunks", "2"], "--chunks does not apply to schedule 'hanayo'"),
        (["table", "interleaved", "-S", "4", "-B", "8", "--chunks", "1"], "chunks must be an integer from 2 to 16"),
        (["table", "interleaved", "-S", "4", "-B", "6"],
         "microbatches must be a multiple of stages (4) for interleaved"),
        (["table", "dualpipev", "-S", "4", "-B", "7"], "microbatches must be at least 2 x stages (8) for dualpipev"),
        (["table", "chimera-asym", "-S", "4", "-B", "4", "--split", "1-2"], "split must look like A:B"),
        (["table", "gpipe", "-S", "four", "-B", "4"], "stages must be an integer, got 'four'"),
        (["table", "gpipe", "-S", "4", "-B", "4", "--backward-slots", "0"],
         "backward slots must be an integer >= 1, got 0"),
        (["table", "zb-h1", "-S", "4", "-B", "4", "--weight-slots", "0"],
         "weight slots must be an integer >= 1, got 0"),
        (["evaluate", "gpipe", "-S", "4", "-B", "4", "--system", "nope"], "unknown system 'nope'"),
        (["evaluate", "gpipe", "-S", "4", "-B", "4", "--system", "mid_nw_mid_cp", "--model", "nope"],
         "unknown model 'nope'"),
        (["evaluate", "gpipe", "-S", "4", "-B", "3", "--system", "mid_nw_mid_cp", "--model", "tiny_gpt"],
         "global batch"),
        (["evaluate", "gpipe", "-S", "64", "-B", "4", "--system", "mid_nw_mid_cp", "--model", "tiny_gpt"], "16"),
        (["check", "/nonexistent/table.json"], "table file '/nonexistent/table.json' does not exist"),
        (["search", "-S", "4", "-B", "4", "--workers", "0"], "workers must be an integer >= 1, got 0"),
        (["search", "-S", "4", "-B", "4", "--comm-slots", "-1"], "comm slots must be an integer >= 0, got -1"),
        (["sweep", "experiments/configs/fig3_bubble.toml", "--limit", "0"], "limit must be an integer >= 1, got 0"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"ops": [', "JSON table is malformed"),
        ('{"devices": 2, "ops": [{"device": 0, "start": 0, "duration": 1, "kind": "F", '
         '"pipeline": 0, "stage": 0, "microbatch": 0}]}',
         "op B0s0 is missing"),
        ("dev0 | F0s0\ndev1 | . F0s1 B0s1 B0s0\n", "stage 0 of pipeline 0 runs on devices 0 and 1"),
    ],
)
def test_check_bad_table_files(capsys, tmp_path, content, needle):
    path = tmp_path / ("bad.json" if content.startswith("{") else "bad.txt")
    path.write_text(content)
    code, _out, err = run(capsys, "check", str(path))
    assert code == 2 and needle in err and err.count("\n") == 1


def test_console_script_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "pipetab.cli", "table", "chimera", "-S", "3", "-B", "3"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "pipetab table: error: stages must be even for chimera, got 3"


def test_interrupt_is_one_line_exit_130(capsys, monkeypatch):
    """Ctrl-C during a command (here a table whose generator is interrupted) ends with
    one line on stderr and the shell's interrupt code, no traceback."""
    from pipetab.schedules import registry

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(registry, "generate", interrupted)
    code, _out, err = run(capsys, "table", "1f1b", "--stages", "4", "--microbatches", "8")
    assert code == 130 and err.strip() == "pipetab table: interrupted" and "Traceback" not in err
