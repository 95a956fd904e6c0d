"""Benchmark of the array core: schedules, tables and the level-3 simulator at scale.

Writes ``results/bench_simulator.csv`` (one row per measurement: section, what, schedule,
S, B, ops, median seconds over the repeats, peak RSS, target, verdict, note) and prints it.

Sections:

* ``stages``: generate, layout, validate, metrics, simulate (with and without link
  contention), Chrome trace and JSON export of one schedule per generator at ~131k ops;
* ``kernel``: the numpy rounds against the plain loop over device counts (the set behind
  ``schedules.evaluate.ROUNDS_MIN_DEVICES``);
* ``cli``: whole ``pipetab`` processes (start-up and imports included, bytecode cached
  after a warm-up run), including refusals beyond the size limits;
* ``scale``: 1F1B at S=128, B=8192 (2.1M ops), generate + simulate in a fresh process;
* ``torch``: torch.distributed.pipelining's generator (with its send/recv lowering) and
  unit-step simulator against pipetab's generate + simulate on the same 131,072-op
  interleaved schedule -- skipped, saying so, when torch is not installed.

Run: python -m experiments.bench_simulator [--repeats N] [--quick] [--no-torch]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

from pipetab.schedules import evaluate, formats
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.registry import generate
from pipetab.schedules.table import SlotDurations, layout
from pipetab.schedules.validate import validate
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate
from pipetab.solver.trace import write_chrome_trace

ROOT = Path(__file__).resolve().parent.parent
GB1024 = str(ROOT / "experiments" / "configs" / "models" / "paper_gpt_gb1024.toml")
FIELDS = ("section", "what", "schedule", "stages", "microbatches", "ops", "seconds", "repeats",
          "peak_rss_mb", "target", "verdict", "note")

# one instance per generator at about 131k ops (the 1F1B S=64, B=1024 size)
INSTANCES = [
    ("1f1b", 64, 1024, {}), ("gpipe", 64, 1024, {}), ("zb-h1", 64, 683, {}), ("chimera", 64, 1024, {}),
    ("chimera-fd", 64, 1024, {}), ("chimera-asym", 64, 1024, {"split": (1, 2)}),
    ("interleaved", 64, 512, {"chunks": 2}), ("hanayo", 64, 512, {"waves": 1}), ("zbv", 64, 341, {}),
    ("dualpipev", 64, 341, {}),
]


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def row(section, what, schedule="", S="", B="", ops="", seconds=None, repeats=1, rss=None, target=None,
        note="") -> dict:
    verdict = "" if target is None or seconds is None else ("meets" if seconds <= target else "MISSES")
    return {"section": section, "what": what, "schedule": schedule, "stages": S, "microbatches": B, "ops": ops,
            "seconds": None if seconds is None else round(seconds, 4), "repeats": repeats,
            "peak_rss_mb": None if rss is None else round(rss), "target": target, "verdict": verdict, "note": note}


def stages_section(repeats: int, quick: bool) -> list[dict]:
    rows = []
    for name, S, B, opts in INSTANCES[:2] if quick else INSTANCES:
        t_gen, sched = median_time(lambda: generate(name, S, B, **opts), repeats)
        n = sched.num_ops
        base = dict(schedule=name, S=S, B=B, ops=n, repeats=repeats)
        rows.append(row("stages", "generate", seconds=t_gen, **base))
        t, table = median_time(lambda: layout(sched), repeats)
        rows.append(row("stages", "layout (ASAP table)", seconds=t, note=f"makespan {table.makespan} ticks", **base))
        t, _ = median_time(lambda: validate(table, sched), repeats)
        rows.append(row("stages", "validate", seconds=t, **base))
        t, _ = median_time(lambda: table_metrics(table, sched), repeats)
        rows.append(row("stages", "table metrics", seconds=t, **base))
        costs = slot_costs(sched, SlotDurations(1, 2), comm_slots=1)
        t, sim = median_time(lambda: simulate(sched, costs).peak_activation and None, repeats)
        rows.append(row("stages", "simulate + memory (1-slot messages)", seconds=t, **base))
        t, _ = median_time(lambda: simulate(sched, replace(costs, contention=True)).makespan, repeats)
        rows.append(row("stages", "simulate with link contention", seconds=t, **base))
        sim = simulate(sched, costs)
        with tempfile.TemporaryDirectory() as tmp:
            t, _ = median_time(lambda: write_chrome_trace(sim, str(Path(tmp) / "trace.json")), 1)
        rows.append(row("stages", "Chrome trace file", seconds=t, **{**base, "repeats": 1}))
        t, _ = median_time(lambda: formats.to_json(table), 1)
        rows.append(row("stages", "table JSON text", seconds=t, **{**base, "repeats": 1}))
    return rows


def kernel_section(repeats: int, quick: bool) -> list[dict]:
    """Layout with each kernel forced, over device counts at ~131k ops (fewer with --quick)."""
    rows = []
    total = 2 * 64 * (256 if quick else 1024)
    for S in (2, 4, 8, 16, 24, 32, 64, 128):
        B = total // (2 * S)
        sched = generate("1f1b", S, B)
        for kernel, threshold in (("numpy rounds", 1), ("plain loop", 10**9)):
            # the rounds alone: no hand-over to the loop where few devices run an op a round
            with patch.object(evaluate, "ROUNDS_MIN_DEVICES", threshold), patch.object(evaluate, "ROUNDS_MIN_OPS", 0):
                t, _ = median_time(lambda: layout(sched), repeats)
            rows.append(row("kernel", f"layout, {kernel}", "1f1b", S, B, sched.num_ops, t, repeats))
    return rows


def _wall(argv: list[str], repeats: int) -> float:
    """Median wall time of a whole process (its output discarded)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(argv, env=env, capture_output=True)  # warm-up: bytecode written, files cached
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cli_section(repeats: int) -> list[dict]:
    pipetab = [sys.executable, "-m", "pipetab.cli.main"]
    cases = [
        ("evaluate --format json", ["evaluate", "1f1b", "-S", "64", "-B", "1024", "--format", "json"],
         64, 1024, 0.5, ""),
        ("evaluate --system --format json",
         ["evaluate", "1f1b", "-S", "64", "-B", "1024", "--system", "mid_nw_mid_cp", "--model", GB1024,
          "--format", "json"], 64, 1024, 0.8, "paper_gpt with global batch 1024"),
        ("evaluate --system --format json",
         ["evaluate", "1f1b", "-S", "64", "-B", "512", "--system", "mid_nw_mid_cp", "--format", "json"],
         64, 512, 0.8, "paper_gpt (global batch 512)"),
        ("refused: global batch does not split",
         ["evaluate", "1f1b", "-S", "64", "-B", "1024", "--system", "mid_nw_mid_cp", "--format", "json"],
         64, 1024, 1.0, "paper_gpt: 512 into 1024"),
        ("refused: too many ops", ["table", "1f1b", "-S", "4", "-B", "1000000000"], 4, 10**9, 1.0, ""),
        ("refused: too many devices", ["table", "1f1b", "-S", "100000", "-B", "8"], 100000, 8, 1.0, ""),
    ]
    rows = [row("cli", "python -c pass", seconds=_wall([sys.executable, "-c", "pass"], repeats), repeats=repeats),
            row("cli", "python -c 'import numpy'", seconds=_wall([sys.executable, "-c", "import numpy"], repeats),
                repeats=repeats)]
    for what, args, S, B, target, note in cases:
        t = _wall(pipetab + args, repeats)
        rows.append(row("cli", f"pipetab {what}", "1f1b", S, B, "", t, repeats, target=target, note=note))
    return rows


SCALE_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from pipetab.schedules.registry import generate
from pipetab.schedules.table import SlotDurations
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate
t1 = time.perf_counter()
s = generate("1f1b", 128, 8192)
t2 = time.perf_counter()
sim = simulate(s, slot_costs(s, SlotDurations(1, 2), comm_slots=1))
sim.peak_activation
t3 = time.perf_counter()
print(json.dumps({"ops": s.num_ops, "import": t1 - t0, "generate": t2 - t1, "simulate": t3 - t2,
                  "makespan": sim.makespan, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def scale_section(repeats: int) -> list[dict]:
    runs = [json.loads(subprocess.run([sys.executable, "-c", SCALE_CHILD], capture_output=True, text=True,
                                      check=True).stdout) for _ in range(repeats)]
    total = statistics.median(r["generate"] + r["simulate"] for r in runs)
    rss = max(r["rss_mb"] for r in runs)
    r = runs[0]
    note = (f"generate {statistics.median(x['generate'] for x in runs):.2f} s, simulate + memory peaks "
            f"{statistics.median(x['simulate'] for x in runs):.2f} s, T={r['makespan']:g} slots")
    rss_note = f"; peak RSS target 2048 MB: {'meets' if rss <= 2048 else 'MISSES'}"
    return [row("scale", "generate + simulate (slot costs, 1-slot messages)", "1f1b", 128, 8192, r["ops"], total,
                repeats, rss, target=5.0, note=note + rss_note)]


TORCH_CHILD = """
import json, sys, time
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
from torch.distributed.pipelining.schedules import _ComputationType as C, _simulate_comms_compute
S, B = int(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter()
ops = get_schedule_ops("Interleaved1F1B", S, B, num_stages_per_rank=2, with_comms=True)
t_gen = time.perf_counter() - t
keep = {C.FORWARD, C.FULL_BACKWARD, C.BACKWARD_INPUT, C.BACKWARD_WEIGHT, C.SEND_F, C.RECV_F, C.SEND_B, C.RECV_B}
order = {r: [a for a in acts if a is not None and a.computation_type in keep] for r, acts in enumerate(ops)}
compute = sum(a.computation_type in (C.FORWARD, C.FULL_BACKWARD) for acts in order.values() for a in acts)
t = time.perf_counter()
steps = _simulate_comms_compute(order, lambda s: s % S, 2 * S)
t_sim = time.perf_counter() - t
print(json.dumps({"generate": t_gen, "simulate": t_sim, "ops": compute, "steps": max(map(len, steps.values()))}))
"""


def torch_section(repeats: int) -> list[dict]:
    S, B = 64, 512
    sched = generate("interleaved", S, B, chunks=2)
    costs = slot_costs(sched, SlotDurations(1, 1), comm_slots=1)
    t_ours, _ = median_time(lambda: simulate(generate("interleaved", S, B, chunks=2), costs).makespan, repeats)
    rows = [row("torch", "pipetab generate + simulate", "interleaved", S, B, sched.num_ops, t_ours, repeats,
                note="v=2, forward = backward = 1 slot, 1-slot messages")]
    try:
        import torch
    except ImportError:
        rows.append(row("torch", "torch.distributed.pipelining: SKIPPED, torch is not installed",
                        "Interleaved1F1B", S, B, note="pip install torch to run this row"))
        return rows
    out = subprocess.run([sys.executable, "-c", TORCH_CHILD, str(S), str(B)], capture_output=True, text=True)
    if out.returncode:
        rows.append(row("torch", "torch.distributed.pipelining: FAILED", "Interleaved1F1B", S, B,
                        note=out.stderr.strip().splitlines()[-1] if out.stderr else ""))
        return rows
    r = json.loads(out.stdout)
    total = r["generate"] + r["simulate"]
    rows.append(row("torch", "torch generator + send/recv lowering", "Interleaved1F1B", S, B, r["ops"],
                    r["generate"], 1, note=f"torch {torch.__version__}"))
    rows.append(row("torch", "torch unit-step simulator", "Interleaved1F1B", S, B, r["ops"], r["simulate"], 1,
                    note=f"{r['steps']} steps"))
    rows.append(row("torch", "speed-up, end to end (torch / pipetab)", "interleaved", S, B, r["ops"], None, 1,
                    note=f"{total / t_ours:.0f}x (target >= 100x: {'meets' if total / t_ours >= 100 else 'MISSES'})"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_simulator", description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer instances and smaller kernel runs")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch comparison")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_simulator.csv"))
    args = ap.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows = stages_section(args.repeats, args.quick) + kernel_section(args.repeats, args.quick) \
        + cli_section(max(args.repeats, 5)) + scale_section(3 if not args.quick else 1)
    if not args.no_torch:
        rows += torch_section(args.repeats)
    after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows.append(row("machine", f"{os.cpu_count()} CPUs, load average {load:.2f} before and {after:.2f} after"
                    if load is not None else f"{os.cpu_count()} CPUs"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        secs = "" if r["seconds"] is None else f"{r['seconds']:.3f} s"
        size = f"S={r['stages']} B={r['microbatches']}" if r["stages"] != "" else ""
        print(f"{r['section']:<8} {r['what']:<48} {r['schedule']:<13} {size:<15} {secs:>10} "
              f"{r['verdict']:<7} {r['note']}")
    print(f"\nwritten: {out}")
    return 0 if not any(r["verdict"] == "MISSES" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
