"""``pipetab profile``: real PyTorch profiler traces (tests/data/traces, made on CPU by
experiments/make_cpu_trace.py with torch.distributed.pipelining's ZBV schedule on 2 ranks)
into a profile whose per-stage times are the traces' own events (issue 27)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from statistics import fmean

import pytest

from pipetab.cli import main
from pipetab.hardware.profile import load_profile
from pipetab.hardware.trace import profile_from_traces

TRACES = sorted((Path(__file__).resolve().parent / "data" / "traces").glob("rank*.json.gz"))


def _by_hand(path: Path) -> dict[str, float]:
    """An independent reading of one trace: per kind, the sum over the rank's stages of the
    mean duration (s) of its CPU annotations PP:<stage><F|I|W><mb>; the mean SEND_ duration."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    durations: dict[tuple[str, str], list[float]] = {}
    sends = []
    for e in events:
        if e.get("cat") != "user_annotation":
            continue
        m = re.fullmatch(r"PP:(\d+)([FIW])(\d+)", e["name"])
        if m:
            durations.setdefault((m.group(1), m.group(2)), []).append(e["dur"] / 1e6)
        elif re.fullmatch(r"PP:\d+SEND_[FB]\d+", e["name"]):
            sends.append(e["dur"] / 1e6)
    out = {k: sum(fmean(v) for (_, kind), v in durations.items() if kind == k) for k in "FIW"}
    out["send"] = fmean(sends)
    out["ops"] = sum(len(v) for v in durations.values())
    return out


def test_the_traces_are_real_and_small():
    assert len(TRACES) == 2 and sum(p.stat().st_size for p in TRACES) < 300_000
    doc = json.loads(gzip.decompress(TRACES[0].read_bytes()))
    assert doc["distributedInfo"]["rank"] == 0 and doc["distributedInfo"]["world_size"] == 2
    assert {e.get("cat") for e in doc["traceEvents"]} >= {"cpu_op", "user_annotation"}


def test_per_stage_times_equal_the_traces_events():
    prof = profile_from_traces(TRACES, 2, microbatch_size=4)
    assert prof.num_stages == 2 and prof.split_backward
    for rank, path in enumerate(TRACES):
        hand, stage = _by_hand(path), prof.stage(rank)
        assert hand["ops"] == 2 * 3 * 4  # two stages (the V), F, I and W of 4 microbatches each
        assert stage.forward_s == pytest.approx(hand["F"], rel=1e-12)
        assert stage.backward_s == pytest.approx(hand["I"], rel=1e-12)
        assert stage.weight_s == pytest.approx(hand["W"], rel=1e-12)
        assert stage.message_s == pytest.approx(hand["send"], rel=1e-12)
        assert stage.activation_bytes > 0  # the traces recorded memory


def test_profile_command_writes_what_evaluate_and_calibrate_take(tmp_path, capsys):
    out = tmp_path / "prof.toml"
    argv = ["profile", *map(str, TRACES), "-o", str(out), "--microbatch-size", "4", "--layers", "4,4"]
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out
    prof = load_profile(out)
    direct = profile_from_traces(TRACES, microbatch_size=4, layers=[4, 4])
    for a, b in zip(prof.stages, direct.stages):
        assert (a.forward_s, a.backward_s, a.weight_s) == pytest.approx((b.forward_s, b.backward_s, b.weight_s))
    assert (prof.microbatch_size, prof.stage(1).layers) == (4, 4)
    assert main(["evaluate", "zbv", "-S", "2", "-B", "4", "--profile", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["simulation"]["makespan_s"] > 4 * prof.stage(0).forward_s
