"""The public instance set (``experiments/instances``, issue 45 item 4): the standalone
checker names the violated constraint of hand-made invalid schedules, accepts a hand-worked
valid one, agrees with pipetab's simulator on registry schedules of exported instances
(optimizer steps and all-reduces included), and imports nothing of pipetab."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.instances.check import Invalid, check
from experiments.instances.generate import SET, instance_of, specs
from pipetab.schedules import registry
from pipetab.solver.cpsat.model.oracle import evaluate_known

CHECKER = Path(__file__).resolve().parents[2] / "experiments" / "instances" / "check.py"

# one pipeline of 2 stages on 2 devices, 2 microbatches, F = 1, B = 2, no message, device 0
# holds one activation
TINY = {"format": "pipetab-instance/1", "devices": 2, "split_backward": False, "objective": "makespan",
        "pipelines": [{"stages": 2, "devices": [0, 1], "microbatches": [0, 1], "F": [1, 1], "B": [2, 2],
                       "lag_F": [0, 0], "lag_B": [0, 0], "activation": [1.0, 1.0], "weight_part": [0.0, 0.0]}],
        "cap": [1.0, None], "optimizer": [0, 0], "allreduce": []}


def _ops(**starts):
    """[kind, 0, stage, microbatch, start] from keywords like F01=6 (stage 0, microbatch 1)."""
    return [[k[0], 0, int(k[1]), int(k[2]), t] for k, t in starts.items()]


VALID = dict(F00=0, F10=1, B10=2, B00=4, F01=6, F11=7, B11=8, B01=10)


def test_accepts_a_hand_worked_schedule():
    """Microbatch 1 starts when microbatch 0's activation on device 0 is freed (6): it ends
    at 12."""
    assert check(TINY, _ops(**VALID), 12) == 12


@pytest.mark.parametrize("change, constraint", [
    ({"F01": None}, "op-set"),                      # an op missing
    ({"F10": 0}, "precedence"),                     # stage 1 before stage 0's forward ends
    ({"F01": 4, "F11": 5, "B11": 6, "B01": 8}, "no-overlap"),    # F01 inside B00 [4, 6)
    ({"F01": 1, "F11": 4, "B11": 5, "B00": 4, "B01": 7}, "memory-cap"),  # two activations at 1
    ({"F00": -1}, "op-set"),                        # a negative start
])
def test_rejects_naming_the_violated_constraint(change, constraint):
    starts = {k: v for k, v in {**VALID, **change}.items() if v is not None}
    with pytest.raises(Invalid) as err:
        check(TINY, _ops(**starts))
    assert err.value.constraint == constraint


def test_rejects_a_wrong_makespan_claim():
    with pytest.raises(Invalid) as err:
        check(TINY, _ops(**VALID), 11)
    assert err.value.constraint == "makespan"


def test_command_line_names_the_constraint(tmp_path):
    inst = tmp_path / "tiny.json"
    inst.write_text(json.dumps({**TINY, "schedule": {"ops": _ops(**VALID), "makespan": 12}}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_ops(**{**VALID, "F10": 0})))
    ok = subprocess.run([sys.executable, str(CHECKER), str(inst)], capture_output=True, text=True)
    assert (ok.returncode, ok.stdout.strip()) == (0, "valid: makespan 12 ticks")
    no = subprocess.run([sys.executable, str(CHECKER), str(inst), str(bad)], capture_output=True, text=True)
    assert no.returncode == 1 and no.stdout.startswith("invalid: precedence:")


@pytest.mark.parametrize("name, schedule", [
    ("paper-mid_nw_mid_cp-bidirectional-S4-B8", "chimera"),
    ("paper-slow_nw_fast_cp-linear-S4-B8", "1f1b"),
    ("dualpipe-v-S4-B8-fbw2:2:1-capS+1", "zbv"),
])
def test_checker_agrees_with_the_simulator(name, schedule):
    """Two implementations: the checker's makespan of a registry schedule's simulated starts
    equals pipetab's, optimizer steps and Chimera's all-reduces included."""
    spec = next(s for s in specs() if s.name == name)
    problem = spec.build()
    inst = instance_of(spec, problem)
    sched = registry.generate(schedule, problem.num_devices, problem.num_microbatches)
    ev = evaluate_known(problem, sched)
    ops = [[op.kind.name, op.pipeline, op.stage, op.microbatch, round(t)] for op, t in ev.timing.start.items()]
    if ev.memory.fits:
        assert check(inst, ops) == ev.makespan
    else:
        with pytest.raises(Invalid, match="memory-cap"):
            check(inst, ops)


def test_every_stored_instance_passes_its_own_check():
    files = sorted(SET.glob("*.json"))
    assert files
    for path in files:
        inst = json.loads(path.read_text())
        if "schedule" in inst:
            assert check(inst, inst["schedule"]["ops"], inst["schedule"]["makespan"]) == inst["result"]["makespan"]


def test_checker_imports_only_the_standard_library():
    tree = ast.parse(CHECKER.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"json", "sys", "collections"}


def test_redo_keeps_the_file_of_the_smaller_gap(tmp_path, monkeypatch):
    """``--redo`` solves a stored instance again and replaces its file only where the new gap
    is no larger; ``--deterministic-time`` reaches the solve (a stand-in here: no CP-SAT)."""
    from experiments.instances import generate

    name = specs()[0].name
    path = tmp_path / "set" / f"{name.replace(':', '-')}.json"
    path.parent.mkdir()
    monkeypatch.setattr(generate, "SET", path.parent)
    monkeypatch.setattr(generate, "HERE", tmp_path)
    seen = []

    def fake(gap):
        def solve(spec, limit, workers, det=None):
            seen.append(det)
            return {"name": spec.name, "source": "s", "result": {
                "status": "feasible", "makespan": 10, "lower_bound": 10 - 10 * gap, "gap": gap,
                "time_to_first_s": 0.0, "solve_seconds": 1.0, "time_limit_s": limit, "load_1min": 0.0}}
        return solve

    path.write_text(json.dumps(fake(0.1)(specs()[0], 60.0, 2)))
    seen.clear()
    monkeypatch.setattr(generate, "solve", fake(0.2))
    assert generate.main(["--only", name, "--redo", "--deterministic-time", "5"]) == 0
    assert json.loads(path.read_text())["result"]["gap"] == 0.1 and seen == [5.0]
    monkeypatch.setattr(generate, "solve", fake(0.1))
    generate.main(["--only", name, "--redo"])
    assert json.loads(path.read_text())["result"]["gap"] == 0.1 and seen == [5.0, None]
    monkeypatch.setattr(generate, "solve", fake(0.0))
    generate.main(["--only", name])  # without --redo a stored instance is skipped
    assert json.loads(path.read_text())["result"]["gap"] == 0.1 and len(seen) == 2


def test_deterministic_time_must_be_positive():
    proc = subprocess.run([sys.executable, "-m", "experiments.instances.generate", "--deterministic-time", "0"],
                          capture_output=True, text=True, cwd=CHECKER.parents[2])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("--deterministic-time must be > 0 seconds, got 0")
