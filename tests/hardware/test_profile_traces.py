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

TRACES = sorted((Path(__file__).resolve().parents[1] / "data" / "traces").glob("rank*.json.gz"))


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


# A real GPU trace: torch.distributed.pipelining's ZBV step of two stages of two Llama 3 8B
# layers on one H100 (experiments/device_ops.py, trimmed by experiments/trim_trace.py), and the
# same layer timed alone on the same GPU (experiments/measured/h100_2026-11-26/layers.csv).
GPU_TRACE = Path(__file__).resolve().parents[1] / "data" / "traces_h100" / "rank0.json.gz"
H100_LAYERS = Path(__file__).resolve().parents[2] / "experiments" / "measured" / "h100_2026-11-26" / "layers.csv"


def _kernels_by_hand(path: Path) -> dict[tuple[int, str], list[float]]:
    """Per (stage, F|I|W) the seconds from the first to the last GPU kernel launched while the
    action's CPU annotation was open: a linear scan, independent of hardware.trace."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    kernels = [(launch[e["args"]["correlation"]], e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"]["correlation"] in launch]
    out: dict[tuple[int, str], list[float]] = {}
    for e in events:
        m = re.fullmatch(r"PP:(\d+)([FIW])\d+", e["name"]) if e.get("cat") == "user_annotation" else None
        if m:
            ran = [(s, t) for at, s, t in kernels if e["ts"] <= at <= e["ts"] + e["dur"]]
            span = (max(t for _, t in ran) - min(s for s, _ in ran)) / 1e6 if ran else 0.0
            out.setdefault((int(m.group(1)), m.group(2)), []).append(span)
    return out


def test_a_gpu_trace_is_read_from_its_kernels():
    from pipetab.hardware.trace import read_trace

    hand, got = _kernels_by_hand(GPU_TRACE), read_trace(GPU_TRACE)
    assert sorted(hand) == [(s, k) for s in (0, 1) for k in "FIW"]
    for (stage, kind), spans in hand.items():
        assert len(spans) == 8
        assert got.ops[(stage, "B" if kind == "I" else kind)] == pytest.approx(spans, rel=1e-9)
    prof = profile_from_traces([GPU_TRACE], microbatch_size=1, layers=[4]).stage(0)
    assert prof.forward_s == pytest.approx(sum(fmean(hand[(s, "F")]) for s in (0, 1)), rel=1e-9)
    assert prof.weight_s == pytest.approx(sum(fmean(hand[(s, "W")]) for s in (0, 1)), rel=1e-9)


def test_a_gpu_trace_agrees_with_the_layer_timed_alone():
    """Two measurements on one H100: each stage holds two layers, so its ops are twice the
    layer's. torch's first stage has no input gradient: its whole backward runs as W."""
    import csv

    from pipetab.hardware.trace import read_trace

    with open(H100_LAYERS, newline="") as fh:
        layer = next(r for r in csv.DictReader(fh) if (r["model"], r["tp"], r["seq"]) == ("llama3_8b", "1", "4096"))
    f, full, inp = (2 * float(layer[k]) for k in ("forward_s", "backward_s", "input_grad_s"))
    ops = {k: fmean(v) for k, v in read_trace(GPU_TRACE).ops.items()}
    assert ops[(0, "B")] == 0.0 and ops[(0, "W")] == pytest.approx(full, rel=0.10)
    assert ops[(0, "F")] == pytest.approx(f, rel=0.10) and ops[(1, "F")] == pytest.approx(f, rel=0.10)
    assert ops[(1, "B")] == pytest.approx(inp, rel=0.10)
    assert ops[(1, "W")] == pytest.approx(full - inp, rel=0.15)
    act = read_trace(GPU_TRACE).activation
    # stage 0's (stage 1 also keeps the loss's fp32 copies of its output and target)
    assert act is not None and fmean(act[0]) == pytest.approx(2 * float(layer["activation_bytes"]), rel=0.10)


def test_the_gpu_copies_of_annotations_alone_miss_autograds_kernels(tmp_path):
    """Why kernels come first: the backward's kernels are launched from autograd's thread,
    outside the annotating thread, so the GPU copy of PP:1I spans almost nothing."""
    from pipetab.hardware.trace import read_trace

    doc = json.loads(gzip.decompress(GPU_TRACE.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    bare = tmp_path / "rank0.json"
    bare.write_text(json.dumps(doc))
    assert max(read_trace(bare).ops[(1, "B")]) < 1e-4 < 5e-3 < min(read_trace(GPU_TRACE).ops[(1, "B")])
