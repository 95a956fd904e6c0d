"""Benchmark of ``pipetab plan`` over a set of questions: wall and CPU time, the search's
counts, and the answer (best configuration, MFU, memory, layers per stage). Writes
``results/bench_plan.csv``.

    python -m experiments.bench_plan            # every question
    python -m experiments.bench_plan --quick    # the default question only (issue 16's target)
    python -m experiments.bench_plan --scale    # issue 26's: 8B to 405B, 1 to 2,048 nodes
    python -m experiments.bench_plan --frontier --repeat 3 [--workers 2]   # issue 43's

(the frontier run is copied to docs/bench/plan_frontier.csv, which docs/cluster.md quotes)

Issue 26's targets: each ``--scale`` question at most 5 s on 2 cores; the 16,384-GPU plan
(405B on 2,048 nodes) at most 3x the 32-GPU plan's time of the same model in the same run
(``ratio_to_32_gpus``). The machine's load average is recorded with each row: the 2-core CI
and shared machines make single timings noisy (CPU seconds are the steadier measure).
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

from pipetab.plan import plan, plan_question

# model, nodes, GPUs per node, GPU, global batch (sequences), sequence length
QUESTIONS = [
    ("llama3_70b", 4, 8, "H100", 1024, 8192),   # the default (issue 16's 20-s target)
    ("llama3_8b", 1, 8, "H100", 256, 8192),
    ("llama3_70b", 8, 8, "H100", 1024, 8192),
    ("gpt3_175b", 8, 8, "A100", 1536, 2048),
    ("zb_28p3b", 4, 8, "A100", 96, 1024),
    ("llama3_405b", 16, 8, "H100", 2048, 8192),
]
# issue 26: Llama 3 8B on 1 and 2 nodes (8k and 128k context), 70B on 4 and 64 nodes, 405B on
# 16, 1,024 and 2,048 nodes (16M tokens per step, as Meta's run)
SCALE = [
    ("llama3_8b", 1, 8, "H100", 256, 8192),
    ("llama3_8b", 1, 8, "H100", 16, 131072),
    ("llama3_8b", 2, 8, "H100", 256, 8192),
    ("llama3_8b", 2, 8, "H100", 16, 131072),
    ("llama3_70b", 4, 8, "H100", 1024, 8192),
    ("llama3_70b", 64, 8, "H100", 1024, 8192),
    ("llama3_405b", 4, 8, "H100", 2048, 8192),  # the 32-GPU plan the 16,384-GPU one is held to
    ("llama3_405b", 16, 8, "H100", 2048, 8192),
    ("llama3_405b", 1024, 8, "H100", 2048, 8192),
    ("llama3_405b", 2048, 8, "H100", 2048, 8192),
]
# issue 43: the frontier questions (targets: 10 s for the MoE ones, 5 s for dense up to 1,024 GPUs, CP-SAT on,
# at load <= 2 on 2 cores); the last item is plan_question's extra options (docs/moe.md's DeepSeek-V3 command)
FRONTIER = [
    ("llama3_405b", 2048, 8, "H100", 2048, 8192, {}),
    ("qwen3_235b_a22b", 32, 8, "dgx_h100_ib", 2048, None, {}),
    ("deepseek_v3", 256, 8, "h800_ib", 15360, None,
     {"dispatch_precision": "fp8", "node_limit": 4, "microbatch_sizes": (1,), "gemm_precision": "fp8"}),
]
COLUMNS = ["model", "gpus", "gpu", "global_batch", "seq", "cpsat_shapes", "candidates", "pruned_memory",
           "pruned_time", "simulated", "wall_s", "cpu_s", "load_avg_1min", "ratio_to_32_gpus", "best", "pp", "tp",
           "cp", "dp", "zero", "microbatch_size", "microbatches", "recompute", "step_s", "mfu", "peak_gib",
           "capacity_gib", "layout", "certificate_pct", "workers"]


def run(question, cpsat_shapes: int, workers: int = 1) -> dict:
    model, nodes, gpn, gpu, batch, seq, *extra = question
    load = os.getloadavg()[0]
    executor = None
    if workers > 1:
        from pipetab.sweep import make_executor

        executor = make_executor("local", workers)
    wall, cpu = time.perf_counter(), time.process_time()
    result = plan(plan_question(model, nodes, gpn, batch, gpu, seq, cpsat_shapes=cpsat_shapes,
                                **(extra[0] if extra else {})), executor=executor)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {"model": model, "gpus": nodes * gpn, "gpu": gpu, "global_batch": batch, "seq": seq,
           "cpsat_shapes": cpsat_shapes, "candidates": result.candidates, "pruned_memory": result.pruned_memory,
           "pruned_time": result.pruned_time, "simulated": result.simulated, "wall_s": round(wall, 2),
           "cpu_s": round(cpu, 2), "load_avg_1min": round(load, 2), "workers": workers,
           "certificate_pct": "" if result.certificate is None else round(100 * result.certificate.gap, 3)}
    if result.configurations:
        c = result.configurations[0]
        s = c.shape
        row.update(best=c.label if c.fits else f"{c.label} (does not fit)", pp=s.pp, tp=s.tp, cp=s.cp, dp=s.dp,
                   zero=s.zero, microbatch_size=s.microbatch_size, microbatches=s.microbatches,
                   recompute=c.recompute_label, step_s=round(c.step_time_s, 3), mfu=round(c.mfu, 4),
                   peak_gib=round(c.peak_memory_bytes / 2**30, 2), capacity_gib=round(c.capacity_bytes / 2**30, 2),
                   layout=c.layout)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_plan")
    ap.add_argument("--quick", action="store_true", help="the default question only")
    ap.add_argument("--scale", action="store_true", help="issue 26's questions (8B to 405B, 1 to 2,048 nodes)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per question (default 1)")
    ap.add_argument("--frontier", action="store_true",
                    help="issue 43's questions: Llama 3 405B on 16,384 H100, Qwen3-235B on 256 H100, DeepSeek-V3 "
                         "on 2,048 H800 (together about half a minute on 2 cores; docs/bench/plan_frontier.csv)")
    ap.add_argument("--only", type=int, default=None, help="with --frontier: only the first N questions")
    ap.add_argument("--workers", type=int, default=1, help="a local process pool of this many workers (default 1: "
                                                           "in this process)")
    ap.add_argument("--cpsat-shapes", type=int, default=2)
    ap.add_argument("--out", default="results/bench_plan.csv")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    questions = (QUESTIONS[:1] if args.quick else SCALE if args.scale else
                 FRONTIER[:args.only] if args.frontier else QUESTIONS)
    base: dict[str, float] = {}  # per model, the 32-GPU plan's wall time in this run
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for q in questions:
            for _ in range(args.repeat):
                row = run(q, args.cpsat_shapes, args.workers)
                if row["gpus"] == 32:
                    base.setdefault(row["model"], row["wall_s"])
                b = base.get(row["model"])
                row["ratio_to_32_gpus"] = round(row["wall_s"] / b, 2) if b else ""
                writer.writerow(row)
                fh.flush()
                print(", ".join(f"{k}={row.get(k, '')}" for k in COLUMNS))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
