"""``pipetab search`` / ``bound`` / ``evaluate --solver cpsat`` from the command line."""

import json

import pytest

from pipetab.cli import main
from pipetab.schedules import registry
from pipetab.schedules.table import SlotDurations
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def records(doc) -> list[dict]:
    """The JSON's op columns (integer ticks) as records with times in slots."""
    cols, tick = dict(doc["ops"]), doc.get("tick_slots") or 1.0
    for k, v in cols.items():  # run-length columns as lists
        if isinstance(v, dict):
            cols[k] = [x for x, n in v["runs"] for _ in range(n)]
    kinds = list(cols["kind"])
    out = []
    for i, kind in enumerate(kinds):
        rec = {k: cols[k][i] for k in ("device", "start", "duration", "pipeline", "stage", "microbatch")}
        out.append({**rec, "kind": kind, "start": rec["start"] * tick, "duration": rec["duration"] * tick})
    return out


def test_search_beats_1f1b_under_cap(capsys):
    code, out, err = run(capsys, "search", "-S", "4", "-B", "8", "--comm-slots", "1", "--activation-cap", "4",
                         "--time-limit", "20", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert {"status", "makespan", "lower_bound", "gap", "unit", "bound_assumptions", "ops"} <= set(doc)
    assert doc["unit"] == "slots" and doc["status"] == "optimal"
    one_f_one_b = registry.generate("1f1b", 4, 8)
    assert simulate(one_f_one_b, slot_costs(one_f_one_b, SlotDurations(1, 2), comm_slots=1)).makespan == 49
    assert doc["makespan"] < 49 and doc["lower_bound"] == doc["makespan"]
    ops = records(doc)
    assert len(ops) == 2 * 4 * 8
    assert max(o["start"] + o["duration"] for o in ops) == doc["makespan"]
    # every device holds at most 4 live activations in the returned schedule
    for d in range(4):
        live = peak = 0
        events = sorted((o["start"] if o["kind"] == "F" else o["start"] + o["duration"], o["kind"] == "F")
                        for o in ops if o["device"] == d)
        for _, is_f in events:
            live += 1 if is_f else -1
            peak = max(peak, live)
        assert peak <= 4


def test_bound_reports_gaps_of_known_schedules(capsys):
    code, out, err = run(capsys, "bound", "-S", "4", "-B", "4", "--time-limit", "20", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert {"lower_bound", "status", "unit", "bound_assumptions", "known"} <= set(doc)
    # no latency, no cap, linear placement: the optimum is (B+S-1)(F+K) = 7 * 3
    assert doc["lower_bound"] == 21
    assert doc["known"]["1f1b"]["makespan"] == 21 and doc["known"]["1f1b"]["gap"] == 0
    assert any("linear" in a for a in doc["bound_assumptions"])


def test_slot_durations_reach_the_bound(capsys):
    code, out, err = run(capsys, "bound", "-S", "2", "-B", "1", "--forward-slots", "2", "--backward-slots", "3",
                         "--time-limit", "10", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["lower_bound"] == 2 * (2 + 3)  # one microbatch: F, F, B, B in a chain


def test_infeasible_cap_is_an_answer(capsys):
    # a wave placement sends every microbatch through device 0 twice (stages 0 and 2S-1,
    # each half a device's share of the model: M_B / 2), and the stage-0 activation is
    # still live when the last stage runs: half an M_B cannot do
    code, out, err = run(capsys, "search", "-S", "2", "-B", "2", "--placement", "wave", "--activation-cap", "0.5",
                         "--time-limit", "10", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "infeasible" and doc["ops"] == []
    assert doc["min_feasible_cap"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--partition", "free"]])
def test_infeasible_on_hardware_has_no_bound_and_speaks_seconds(capsys, extra):
    # one microbatch of Llama 3 8B (64 sequences of 8192 tokens per microbatch at its global
    # batch) cannot fit an 80 GB card with any split: nothing to bound
    argv = ["search", "-S", "4", "-B", "16", "--system", "dgx_h100_ib", "--model", "llama3_8b", "--time-limit", "10",
            *extra]
    code, out, err = run(capsys, *argv, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "infeasible" and doc["lower_bound"] is None and doc["unit"] == "s"
    code, out, err = run(capsys, *argv)
    assert "makespan -, lower bound -, gap -," in out


def test_evaluate_with_cpsat_equals_simulation(capsys):
    code, out, err = run(capsys, "evaluate", "chimera", "-S", "4", "-B", "8", "--system", "slow_nw_mid_cp",
                         "--model", "tiny_gpt", "--solver", "cpsat", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    cp = doc["cpsat"]
    assert cp["unit"] == "s" and cp["status"] == "optimal"
    # CP-SAT works on durations rounded up to ticks: within a few ticks of the simulation
    sim_s = doc["simulation"]["makespan_s"]
    assert sim_s <= cp["makespan"] <= sim_s * 1.01 + 20 * cp["tick_s"]
    code, out, _ = run(capsys, "evaluate", "1f1b", "-S", "4", "-B", "8", "--solver", "cpsat", "--format", "json")
    assert json.loads(out)["cpsat"] == {"makespan": 33, "unit": "slots", "status": "optimal"}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["search", "-S", "4", "-B", "4", "--memory-cap", "80GB"], "--memory-cap needs --system"),
        (["search", "-S", "4", "-B", "4", "--system", "mid_nw_mid_cp", "--activation-cap", "3"],
         "--activation-cap goes with idealized costs"),
        (["search", "-S", "4", "-B", "4", "--memory-cap", "lots", "--system", "mid_nw_mid_cp"],
         "memory cap must be bytes"),
        (["search", "-S", "4", "-B", "4", "--placement", "diagonal"], "invalid choice"),
        (["bound", "-S", "4", "-B", "4", "--devices", "2"], "--devices and --pipelines apply to --placement free only"),
        (["search", "-S", "4", "-B", "4", "--time-limit", "0"], "--time-limit must be a number > 0"),
        (["search", "-S", "4", "-B", "4", "--time-limit", "inf"], "--time-limit must be a number > 0 (finite)"),
        (["search", "-S", "4", "-B", "8", "--placement", "free", "--devices", "5"],
         "--devices must be at most the stages of the pipelines, 4"),
        (["search", "-S", "4", "-B", "4", "--weight-slots", "2"], "--weight-slots needs --split-backward"),
        (["search", "-S", "4", "-B", "4", "--weight-memory", "0.5"], "--weight-memory needs --split-backward"),
        (["search", "-S", "4", "-B", "4", "--split-backward", "--weight-memory", "1.5"], "between 0 and 1"),
        (["search", "-S", "4", "-B", "4", "--system", "mid_nw_mid_cp", "--comm-slots", "1"], "--comm-slots goes with"),
        (["search", "-S", "4", "-B", "4", "--chunks", "3"], "--chunks applies to --placement interleaved only"),
        (["search", "-S", "4", "-B", "4", "--waves", "2"], "--waves applies to --placement wave only"),
        (["bound", "-S", "4", "-B", "4", "--recompute", "full"], "--recompute needs --system"),
        (["bound", "-S", "4", "-B", "4", "--activation-cap", "-1"], "--activation-cap must be a number > 0"),
    ],
)
def test_search_bad_input(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1


def test_split_backward_with_partial_weight_memory(capsys):
    """ZB-H1's shape: split backward, M_W = M/2; the search is no worse than ZB-H1 and
    names it among the known schedules."""
    code, out, err = run(capsys, "search", "-S", "4", "-B", "8", "--split-backward", "--weight-memory", "0.5",
                         "--activation-cap", "4", "--time-limit", "10", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] in ("optimal", "feasible") and doc["known"]["zb-h1"]["fits"]
    assert doc["makespan"] <= doc["known"]["zb-h1"]["makespan"]
    assert set(doc["ops"]["kind"]) == {"F", "B", "W"}
    assert any("M_W to its W's end" in a for a in doc["bound_assumptions"])


def test_v_placement_reports_slots(capsys):
    """V placement on ticks of half a slot: makespan and ops in slots, the tick stated."""
    code, out, err = run(capsys, "search", "-S", "2", "-B", "4", "--placement", "v", "--time-limit", "10",
                         "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tick_slots"] == 0.5 and doc["status"] == "optimal"
    assert max(o["start"] + o["duration"] for o in records(doc)) == doc["makespan"]
    # a device's work per microbatch is F + B = 3 slots as on a linear pipeline: 4 microbatches
    # on 2 devices take at least 4 * 3 slots
    assert doc["makespan"] >= 12


def test_hardware_bound_is_a_bound_of_the_real_problem(capsys):
    """Durations rounded down for bounds: the bound never exceeds the simulator's
    real-valued time of 1F1B on that system (paper_gpt does not fit its devices' memory,
    which bound uses by default: a memory cap lifts that)."""
    code, out, err = run(capsys, "bound", "-S", "4", "-B", "8", "--system", "mid_nw_mid_cp", "--time-limit", "10",
                         "--memory-cap", "100TB", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    one_f_one_b = registry.generate("1f1b", 4, 8)
    from pipetab.solver.pricing import hardware_costs

    real = simulate(one_f_one_b, hardware_costs(one_f_one_b, "mid_nw_mid_cp", "paper_gpt")).makespan
    assert doc["lower_bound"] <= real
    assert doc["makespan"] is None or doc["lower_bound"] <= doc["makespan"]
    assert any("rounded down" in a for a in doc["bound_assumptions"])


def test_period_objective_from_the_command_line(capsys):
    """The period of a schedule is at most its makespan, so the least period is at most the
    least makespan; both proven on a small split-backward instance."""
    base = ["-S", "3", "-B", "4", "--split-backward", "--weight-memory", "0.5", "--activation-cap", "2",
            "--comm-slots", "1", "--time-limit", "20", "--format", "json"]
    docs = {}
    for objective in ("makespan", "period"):
        code, out, err = run(capsys, "bound", *base, "--objective", objective)
        assert code == 0, err
        docs[objective] = json.loads(out)
        assert docs[objective]["objective"] == objective and docs[objective]["status"] == "optimal"
    assert docs["period"]["lower_bound"] <= docs["makespan"]["lower_bound"]
    assert any("longest device span" in a for a in docs["period"]["bound_assumptions"])
    assert next(p["name"] for p in docs["period"]["phases"]) == "start"


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["--placement", "v"],
    ["--placement", "interleaved", "--chunks", "2"],
    ["--placement", "wave", "--waves", "1"],
    ["--placement", "v", "--split-backward"],
    ["--system", "mid_nw_mid_cp", "--model", "tiny_gpt", "--memory-cap", "100TB"],
    ["--system", "mid_nw_mid_cp", "--model", "tiny_gpt", "--memory-cap", "100TB", "--placement", "v"],
])
def test_search_json_reads_back_with_check(capsys, tmp_path, argv):
    """Issue 29: the JSON of V, interleaved, wave and hardware-cost searches is a table
    ``pipetab check`` reads (ops as columns in integer ticks), with the same ops."""
    code, out, err = run(capsys, "search", "-S", "4", "-B", "8", *argv, "--time-limit", "5", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    path = tmp_path / "found.json"
    path.write_text(out)
    code, checked, err = run(capsys, "check", str(path), "--format", "json")
    assert code == 0, err
    report = json.loads(checked)
    assert report["valid"] and report["devices"] == 4 and report["microbatches"] == 8
    stages = 4 * (2 if any(a in argv for a in ("v", "interleaved", "wave")) else 1)
    kinds = 3 if "--split-backward" in argv else 2
    assert len(doc["ops"]["kind"]) == len(doc["ops"]["start"]) == 8 * stages * kinds


def test_search_torch_csv_reads_back(capsys, tmp_path):
    """``--format torch-csv``: the found schedule's per-rank actions, which ``check``
    reads as a torch CSV, in the same per-device order as the JSON's schedule."""
    base = ["search", "-S", "4", "-B", "8", "--split-backward", "--activation-cap", "4", "--time-limit", "5"]
    code, out, err = run(capsys, *base, "--format", "torch-csv")
    assert code == 0, err
    rows = [r.split(",") for r in out.strip().splitlines()]
    assert len(rows) == 4 and all(c == "" or c[-1].isdigit() for r in rows for c in r)
    path = tmp_path / "found.csv"
    path.write_text(out)
    code, _, err = run(capsys, "check", str(path))
    assert code == 0, err
    from pipetab.schedules import formats

    table = formats.from_torch_csv(out)
    assert table.microbatches == 8 and len(table) == 4 * 8 * 3


def test_torch_csv_refuses_two_pipelines_and_no_ops_drops_the_ops(capsys):
    code, _, err = run(capsys, "search", "-S", "4", "-B", "8", "--placement", "bidirectional", "--format", "torch-csv")
    assert code == 2 and "one pipeline" in err and err.count("\n") == 1
    code, out, err = run(capsys, "search", "-S", "4", "-B", "8", "--time-limit", "5", "--format", "json", "--no-ops")
    assert code == 0, err
    assert json.loads(out)["ops"] == []
    code, out, err = run(capsys, "search", "-S", "4", "-B", "8", "--time-limit", "5", "--no-ops")
    assert code == 0 and "dev0" not in out


def test_the_status_line_explains_a_gap_beside_optimal_durations(capsys):
    """On hardware costs a schedule optimal for durations rounded up is not called optimal
    unless the bound meets its real time, and the line says what rounding moves."""
    code, out, err = run(capsys, "search", "-S", "2", "-B", "4", "--system", "mid_nw_mid_cp", "--model", "tiny_gpt",
                         "--memory-cap", "100TB", "--time-limit", "5")
    assert code == 0, err
    status = next(line for line in out.splitlines() if line.startswith("status"))
    if "status optimal" in status:
        assert "gap 0.00%" in status
    else:
        assert "rounding to ticks" in status or "gap -" in status


def test_json_columns_with_runs_read_back_and_bad_runs_are_named():
    """A column of long runs (device, pipeline) may be written as runs; the reader expands
    them, and names a malformed one in one line."""
    from pipetab.schedules import formats

    doc = {"devices": 2, "tick_slots": None, "ops": {
        "device": {"runs": [[0, 2], [1, 2]]}, "start": [0, 2, 1, 3], "duration": [1, 1, 1, 1], "kind": "FBFB",
        "pipeline": {"runs": [[0, 4]]}, "stage": [0, 0, 1, 1], "microbatch": [0, 0, 0, 0]}}
    table = formats.from_json(json.dumps(doc))
    assert len(table) == 4 and table.tick_slots == 1.0 and list(table.device) == [0, 0, 1, 1]
    doc["ops"]["device"] = {"runs": [[0, 0], [1, 4]]}
    with pytest.raises(formats.FormatError, match="device must be a list of integers or"):
        formats.from_json(json.dumps(doc))
