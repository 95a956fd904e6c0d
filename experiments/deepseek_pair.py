"""DeepSeek's profiled DualPipe pair beside pipetab's price of it (issue 41, development data).

The profile: ``train.json`` of deepseek-ai/profile-data (commit 4496024; PyTorch profiler
trace): one forward chunk and one backward chunk of 4 MoE layers of DeepSeek-V3 run as an
overlapped pair, EP64, TP1, 4,096 tokens, FP8, H800, pipeline messages left out. Measured:
the span of its GPU kernels, the kernel seconds of each stream (the compute stream, a second
compute stream the expert GEMMs use, the communication stream of DeepEP's kernels) and how
much of the compute stream's kernel time ran beside a communication kernel.

Priced: a 4-MoE-layer stage of the published DeepSeek-V3 run (``bench_moe.PUBLISHED[0]``:
PP16, EP64, DualPipe, FP8 GEMMs, h800_ib) — its F, B and W chains in the two-stream model
(``hardware.overlap``), with and without DeepEP's SM share.

Run: python -m experiments.deepseek_pair [--trace train.json] (without a trace, the price only).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

STAGE = 5  # an interior stage of the published run's PP16: 4 MoE layers


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` (start, end) merged where they overlap, in order."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def beside(intervals: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """How much of ``intervals``' total length lies inside the union of ``others``."""
    union = merged(others)
    return sum(max(0.0, min(b, y) - max(a, x)) for a, b in intervals for x, y in union)


def measured(trace: Path) -> dict[str, float]:
    """Milliseconds of the profiled pair (module docstring): its span, each stream's kernel
    time (the busiest stream is the compute stream, the one whose kernels are all DeepEP's
    ``dpsk::ep`` the communication stream), and the compute kernels' time beside communication."""
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    streams: dict[int, list[dict]] = {}
    for e in events:
        streams.setdefault(e["tid"], []).append(e)
    comm = next(t for t, es in streams.items() if any("dpsk::ep" in e["name"] for e in es))
    compute = max((t for t in streams if t != comm), key=lambda t: len(streams[t]))
    iv = {t: [(e["ts"], e["ts"] + e["dur"]) for e in es] for t, es in streams.items()}
    out = {"span_ms": (max(b for v in iv.values() for _, b in v) - min(a for v in iv.values() for a, _ in v)) / 1e3,
           "compute_ms": sum(b - a for a, b in iv[compute]) / 1e3,
           "second_stream_ms": sum(sum(b - a for a, b in v) for t, v in iv.items() if t not in (comm, compute)) / 1e3,
           "comm_ms": sum(b - a for a, b in iv[comm]) / 1e3,
           "compute_beside_comm_ms": beside(iv[compute], iv[comm]) / 1e3}
    for e in streams[comm]:
        kind = re.sub(r"^void |<.*$|\(.*$", "", e["name"]).split("::")[-1]
        out[f"comm_{kind}_ms"] = out.get(f"comm_{kind}_ms", 0.0) + e["dur"] / 1e3
    return out


def priced() -> dict[str, float]:
    """Milliseconds of the pair as pipetab prices it (module docstring)."""
    from pipetab.hardware import Context, load_model
    from pipetab.hardware.overlap import two_stream
    from pipetab.plan.space import cluster
    from pipetab.schedules import registry
    from pipetab.schedules.ops import Kind
    from pipetab.solver.pricing import hardware_costs

    from .bench_moe import PUBLISHED

    _, name, nodes, gpn, system, batch, ctx_args, schedule, opts, precision = PUBLISHED[0][:10]
    model = load_model(name)
    ctx = Context(global_batch=batch, seq_len=model.seq_len, gemm_precision=precision, **ctx_args)
    sched = registry.generate(schedule, ctx.pp, batch // ctx.dp, **{**opts, "overlap": True})
    costs = hardware_costs(sched, cluster(system, nodes, gpn), model, ctx)
    f, b, w = (list(costs.chains[(k, 0, STAGE)]) for k in (Kind.F, Kind.B, Kind.W))
    return {"pair_ms": 1e3 * two_stream([f, b + w], costs.comm_share),
            "pair_without_sm_share_ms": 1e3 * two_stream([f, b + w], 0.0),
            "compute_ms": 1e3 * sum(t for c, t in f + b + w if not c),
            "comm_ms": 1e3 * sum(t for c, t in f + b + w if c), "comm_share": costs.comm_share}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.deepseek_pair")
    ap.add_argument("--trace", help="deepseek-ai/profile-data's train.json (omit: the price only)")
    args = ap.parse_args(argv)
    rows = {**priced(), **({f"measured_{k}": v for k, v in measured(Path(args.trace)).items()} if args.trace else {})}
    for key, value in rows.items():
        print(f"{key} = {value:.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
