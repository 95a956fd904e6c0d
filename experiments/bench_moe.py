"""Benchmark of mixture-of-experts planning: ``pipetab plan`` on MoE questions (wall time,
winner, MFU, the all-to-all and how much of it the winner hides), each overlapping schedule's
gain over its no-overlap version on the winner's shape, and pipetab's prediction beside
published measured runs. Writes ``docs/bench/moe_plan.csv`` and ``docs/bench/moe_published.csv``.

    python -m experiments.bench_moe            # every question and every published run
    python -m experiments.bench_moe --quick    # Mixtral 8x7B on 64 GPUs and DeepSeek-V3's run only

The published runs (sources in ``PUBLISHED``) are priced as run: their parallel split,
microbatch size, global batch, schedule and GEMM precision (FP8 runs at the GPU's fp8 peak,
``Context.gemm_precision``). DeepSeek-V3 trained with FP8 GEMMs, so its question is planned
with them too.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

from pipetab.hardware import Context, load_model
from pipetab.hardware.layer import model_flops_per_sequence
from pipetab.plan import plan, plan_question
from pipetab.plan.space import cluster
from pipetab.schedules import registry
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate

# label, model, nodes, GPUs per node, system, global batch (sequences), plan options
QUESTIONS = [
    ("mixtral-8x7b-8", "mixtral_8x7b", 1, 8, "dgx_h100_ib", 256, {}),
    ("mixtral-8x7b-32", "mixtral_8x7b", 4, 8, "dgx_h100_ib", 256, {}),
    ("mixtral-8x7b-64", "mixtral_8x7b", 8, 8, "dgx_h100_ib", 256, {}),
    ("qwen3-235b-256", "qwen3_235b_a22b", 32, 8, "dgx_h100_ib", 2048, {}),
    ("deepseek-v3-2048", "deepseek_v3", 256, 8, "h800_ib", 15360,
     {"dispatch_precision": "fp8", "node_limit": 4, "microbatch_sizes": (1,), "gemm_precision": "fp8"}),
]
QUICK = ("mixtral-8x7b-64", "deepseek-v3-2048")
OVERLAPPING = (("dualpipe", {}), ("dualpipev", {}), ("interleaved", {"chunks": 2}), ("interleaved", {"chunks": 4}))

# label, model, nodes, GPUs per node, system, global batch, context, schedule, options,
# precision, measured step (s), measured tokens/s/GPU, measured TFLOP/s/GPU, source
PUBLISHED = [
    ("deepseek-v3 2048 H800", "deepseek_v3", 256, 8, "h800_ib", 15360,
     dict(pp=16, tp=1, dp=128, ep=64, zero=1, microbatch_size=1, dispatch_precision="fp8", node_limit=4),
     "dualpipe", {}, "fp8", 19.926, 1541.7, None,
     "Zhao et al., Insights into DeepSeek-V3 (ISCA'25, arXiv 2505.09343) Table 4; V3 report sections 3.2, 4.2"),
    ("mixtral-8x7b 64 H100", "mixtral_8x7b", 8, 8, "dgx_h100_ib", 256,
     dict(pp=4, tp=1, dp=16, ep=8, zero=1, microbatch_size=1),
     "interleaved", {"chunks": 8}, "bf16", None, None, 468.0,
     "Megatron-LM megatron/core/transformer/moe/README.md (MCore v0.9, 468 TFLOPS; reference mapping TP1 EP8 "
     "PP4 VP8 MBS1 GBS256)"),
    ("qwen3-235b 256 H100", "qwen3_235b_a22b", 32, 8, "dgx_h100_ib", 2048,
     dict(pp=8, tp=2, dp=16, ep=32, zero=1, microbatch_size=1),
     "interleaved", {"chunks": 4}, "fp8", None, 1575.0, None,
     "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary (25.11, DGX-H100, FP8-CS, TP2 PP8 VP4 EP32 GBS2048)"),
    ("deepseek-v3 1024 H100", "deepseek_v3", 128, 8, "dgx_h100_ib", 8192,
     dict(pp=8, tp=2, dp=64, ep=64, zero=1, microbatch_size=1),
     "interleaved", {"chunks": 4}, "fp8", None, 1297.0, None,
     "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive (25.09, DGX-H100, TP2 PP8 VP4 EP64 GBS8192)"),
]

PLAN_COLUMNS = ["question", "model", "gpus", "global_batch", "candidates", "pruned_memory", "pruned_time",
                "simulated", "wall_s", "cpu_s", "load_avg_1min", "best", "fits", "pp", "tp", "dp", "ep", "etp",
                "microbatch_size", "recompute", "step_s", "mfu", "peak_gib", "a2a_s", "a2a_hidden_pct", "a2a_links",
                "overlap_gains"]
PUBLISHED_COLUMNS = ["run", "schedule", "gemm_precision", "predicted_step_s", "measured_step_s", "step_error_pct",
                     "predicted_tokens_per_s_gpu", "measured_tokens_per_s_gpu", "tokens_error_pct",
                     "predicted_tflops", "measured_tflops", "tflops_error_pct", "overlap_gain_pct", "fits",
                     "peak_gib", "source"]


def _step(name: str, opts: dict, ctx: Context, system, model) -> tuple[float, object, object]:
    """(step seconds, the simulation, its costs) of a registry schedule on ``ctx``."""
    sched = registry.generate(name, ctx.pp, ctx.microbatches, **opts)
    costs = hardware_costs(sched, system, model, ctx)
    sim = simulate(sched, costs)
    return sim.makespan, sim, costs


def overlap_gains(q: tuple, shape: Context) -> str:
    """Each overlapping schedule on ``shape``: step without overlap / step with - 1."""
    _, model, nodes, gpn, system, *_ = q
    sys_, m = cluster(system, nodes, gpn), load_model(model)
    out = []
    for name, opts in OVERLAPPING:
        try:
            on = _step(name, {**opts, "overlap": True}, shape, sys_, m)[0]
            off = _step(name, {**opts, "overlap": False}, shape, sys_, m)[0]
        except ValueError:
            continue
        label = name + (f"(v={opts['chunks']})" if opts else "")
        out.append(f"{label} {100 * (off / on - 1):+.1f}%")
    return "; ".join(out)


def run_question(q: tuple, cpsat_shapes: int) -> dict:
    label, model, nodes, gpn, system, batch, options = q
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    result = plan(plan_question(model, nodes, gpn, batch, system, cpsat_shapes=cpsat_shapes, **options))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {"question": label, "model": model, "gpus": nodes * gpn, "global_batch": batch,
           "candidates": result.candidates, "pruned_memory": result.pruned_memory,
           "pruned_time": result.pruned_time, "simulated": result.simulated, "wall_s": round(wall, 2),
           "cpu_s": round(cpu, 2), "load_avg_1min": round(load, 2)}
    if result.configurations:
        c = result.configurations[0]
        s = c.shape
        row.update(best=c.label, fits=c.fits, pp=s.pp, tp=s.tp, dp=s.dp, ep=s.ep, etp=s.etp,
                   microbatch_size=s.microbatch_size, recompute=str(s.recompute), step_s=round(c.step_time_s, 3),
                   mfu=round(c.mfu, 4), peak_gib=round(c.peak_memory_bytes / 2**30, 1), a2a_s=round(c.a2a_s, 3),
                   a2a_hidden_pct=round(100 * c.a2a_hidden_s / c.a2a_s, 1) if c.a2a_s else 0.0,
                   a2a_links=c.ep_links, overlap_gains=overlap_gains(q, s))
    return row


def _err(predicted: float, measured: float | None) -> float | None:
    return None if measured is None else round(100 * (predicted / measured - 1), 1)


def run_published(p: tuple, system_override=None) -> dict:
    """One published run priced as run (on ``system_override`` instead of its preset when given)."""
    label, model, nodes, gpn, system, batch, ctx_args, name, opts, precision, step, tokens, tflops, source = p
    m, sys_ = load_model(model), cluster(system_override or system, nodes, gpn)
    pp = ctx_args["pp"]
    ctx = Context(global_batch=batch, seq_len=m.seq_len, gemm_precision=precision, **ctx_args)
    ctx = ctx.resolved(m, batch // (ctx.dp * ctx.microbatch_size))  # type: ignore[operator]
    on, sim, costs = _step(name, {**opts, "overlap": True}, ctx, sys_, m)
    off = _step(name, {**opts, "overlap": False}, ctx, sys_, m)[0]
    predicted_tokens = batch * m.seq_len / on / (nodes * gpn)
    predicted_tflops = model_flops_per_sequence(m) * batch / on / (nodes * gpn) / 1e12
    peak = max(a + b for a, b in zip(sim.peak_activation, costs.persistent))
    return {"run": label, "schedule": f"{name}{opts or ''} on PP{pp} {ctx.parallel_label}", "gemm_precision": precision,
            "predicted_step_s": round(on, 3), "measured_step_s": step, "step_error_pct": _err(on, step),
            "predicted_tokens_per_s_gpu": round(predicted_tokens, 1), "measured_tokens_per_s_gpu": tokens,
            "tokens_error_pct": _err(predicted_tokens, tokens), "predicted_tflops": round(predicted_tflops, 1),
            "measured_tflops": tflops, "tflops_error_pct": _err(predicted_tflops, tflops),
            "overlap_gain_pct": round(100 * (off / on - 1), 1), "fits": all(sim.fits_memory),
            "peak_gib": round(peak / 2**30, 1), "source": source}


def _write(path: Path, columns: list[str], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_moe")
    ap.add_argument("--quick", action="store_true", help="two questions and the DeepSeek-V3 run only")
    ap.add_argument("--cpsat-shapes", type=int, default=2, help="CP-SAT shapes per plan (default 2, as plan)")
    ap.add_argument("--out", default="docs/bench", help="folder of the two CSVs (default docs/bench)")
    args = ap.parse_args(argv)
    questions = [q for q in QUESTIONS if not args.quick or q[0] in QUICK]
    rows = []
    for q in questions:
        rows.append(run_question(q, args.cpsat_shapes))
        r = rows[-1]
        print(f"{r['question']}: {r['wall_s']} s, {r.get('best')} PP{r.get('pp')} TP{r.get('tp')} DP{r.get('dp')} "
              f"EP{r.get('ep')} MFU {r.get('mfu')} fits {r.get('fits')}; {r.get('overlap_gains')}", flush=True)
    _write(Path(args.out) / "moe_plan.csv", PLAN_COLUMNS, rows)
    published = [p for p in PUBLISHED if not args.quick or p[0].startswith("deepseek-v3 2048")]
    prow = []
    for p in published:
        prow.append(run_published(p))
        r = prow[-1]
        print(f"{r['run']}: predicted {r['predicted_step_s']} s, {r['predicted_tokens_per_s_gpu']} tok/s/GPU, "
              f"{r['predicted_tflops']} TFLOP/s; errors step {r['step_error_pct']} tokens {r['tokens_error_pct']} "
              f"tflops {r['tflops_error_pct']} %", flush=True)
    _write(Path(args.out) / "moe_published.csv", PUBLISHED_COLUMNS, prow)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
