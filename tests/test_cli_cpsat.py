"""``pipetab search`` / ``bound`` / ``evaluate --solver cpsat`` from the command line."""

import json

import pytest

from pipetab.schedules import registry
from pipetab.schedules.table import SlotDurations
from pipetab.cli import main
from pipetab.solver.costs import slot_costs
from pipetab.solver.simulate import simulate


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


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
    assert len(doc["ops"]) == 2 * 4 * 8
    assert max(o["start"] + o["duration"] for o in doc["ops"]) == doc["makespan"]
    # every device holds at most 4 live activations in the returned schedule
    for d in range(4):
        live = peak = 0
        events = sorted((o["start"] if o["kind"] == "F" else o["start"] + o["duration"], o["kind"] == "F")
                        for o in doc["ops"] if o["device"] == d)
        for _, is_f in events:
            live += 1 if is_f else -1
            peak = max(peak, live)
        assert peak <= 4


def test_bound_reports_gaps_of_known_schedules(capsys):
    code, out, err = run(capsys, "bound", "-S", "4", "-B", "4", "--time-limit", "20", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert {"lower_bound", "status", "unit", "bound_assumptions", "schedules"} <= set(doc)
    # no latency, no cap, linear placement: the optimum is (B+S-1)(F+K) = 7 * 3
    assert doc["lower_bound"] == 21
    assert doc["schedules"]["1f1b"]["makespan"] == 21 and doc["schedules"]["1f1b"]["gap"] == 0
    assert any("linear" in a for a in doc["bound_assumptions"])


def test_slot_durations_reach_the_bound(capsys):
    code, out, err = run(capsys, "bound", "-S", "2", "-B", "1", "--forward-slots", "2", "--backward-slots", "3",
                         "--time-limit", "10", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["lower_bound"] == 2 * (2 + 3)  # one microbatch: F, F, B, B in a chain


def test_infeasible_cap_is_an_answer(capsys):
    # a wave placement sends every microbatch through device 0 twice (stages 0 and 2S-1), and
    # the stage-0 activation is still live when the last stage runs: 1 activation cannot do
    code, out, err = run(capsys, "search", "-S", "2", "-B", "2", "--placement", "wave", "--activation-cap", "1",
                         "--time-limit", "10", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "infeasible" and doc["ops"] == []
    assert doc["min_feasible_cap"] == 2


def test_evaluate_with_cpsat_equals_simulation(capsys):
    code, out, err = run(capsys, "evaluate", "chimera", "-S", "4", "-B", "8", "--system", "slow_nw_mid_cp",
                         "--model", "tiny_gpt", "--solver", "cpsat", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    cp = doc["cpsat"]
    assert cp["unit"] == "s" and cp["status"] == "optimal"
    # CP-SAT works on durations rounded up to ticks: within a few ticks of the simulation
    assert doc["simulation"]["makespan_s"] <= cp["makespan"] <= doc["simulation"]["makespan_s"] * 1.01 + 20 * cp["tick_s"]
    code, out, _ = run(capsys, "evaluate", "1f1b", "-S", "4", "-B", "8", "--solver", "cpsat", "--format", "json")
    assert json.loads(out)["cpsat"] == {"makespan": 33, "unit": "slots", "status": "optimal"}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["search", "-S", "4", "-B", "4", "--memory-cap", "80GB"], "--memory-cap needs --system"),
        (["search", "-S", "4", "-B", "4", "--system", "mid_nw_mid_cp", "--activation-cap", "3"], "--activation-cap goes with idealized costs"),
        (["search", "-S", "4", "-B", "4", "--memory-cap", "lots", "--system", "mid_nw_mid_cp"], "memory cap must be bytes"),
        (["search", "-S", "4", "-B", "4", "--placement", "diagonal"], "invalid choice"),
        (["bound", "-S", "4", "-B", "4", "--devices", "2"], "--devices and --pipelines apply to --placement free only"),
        (["search", "-S", "4", "-B", "4", "--time-limit", "0"], "time_limit_s must be > 0"),
        (["search", "-S", "4", "-B", "4", "--weight-slots", "2"], "unrecognized arguments: --weight-slots"),
    ],
)
def test_search_bad_input(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1
