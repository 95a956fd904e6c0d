"""Benchmark of memory as real runs manage it (issue 40): the published configurations of
``docs/fidelity.md`` and ``docs/moe.md`` that ran, each priced with the memory techniques
it used as published (the source named per technique), judged to fit or not, its predicted
peak per GPU beside a published measurement where one exists; the per-module activation
table beside the bytes an eager layer saved on an H200 (``experiments/measured``); and, for
DeepSeek-V3's run, its step against ``plan``'s winner on its own question. Writes
``docs/bench/memory.csv``.

    python -m experiments.bench_memory            # every run and DeepSeek-V3's plan question
    python -m experiments.bench_memory --quick    # every run; no plan question (seconds)
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from pipetab.hardware import Context, TransformerModel, load_model, load_system, schedule_costs
from pipetab.hardware.layer import activation_bytes_per_layer
from pipetab.hardware.reserve import memory_reserve
from pipetab.plan import plan, plan_question
from pipetab.plan.space import cluster
from pipetab.schedules import registry
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate

from .bench_fidelity import _gpt
from .bench_moe import PUBLISHED, QUESTIONS
from .fidelity_data import KORTHIKANTI, KORTHIKANTI_REF, LLAMA3, LLAMA3_CHUNKS, LLAMA3_REF, MEGATRON, MEGATRON_REF

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "experiments" / "measured" / "h200_2026-11-28" / "saved.csv"
COLUMNS = ["run", "quantity", "techniques", "technique_sources", "predicted", "published", "error_pct", "fits",
           "peak_gib", "usable_gib", "plain_fits", "plain_peak_gib", "sourced_reserve_gib", "communicators",
           "fits_sourced_reserve", "note"]

V3 = "DeepSeek-V3 technical report (arXiv 2412.19437)"
TE_FP8 = ("Transformer Engine keeps the quantized input of an fp8 Linear for its backward (TE PR #1665; "
          "shared/reference/memory-sources.md)")
# per published MoE run: the techniques it used, and where each is stated
MOE_TECHNIQUES = {
    "deepseek-v3 2048 H800": (dict(recompute_modules=("layernorm", "mla_up_proj", "moe_act"),
                                   activation_precision="fp8"),
                              f"layernorm+mla_up_proj: {V3} 3.2.3 (RMSNorm and MLA up-projections recomputed); "
                              f"moe_act and fp8-cache: {V3} 3.3.3 (SwiGLU inputs cached in FP8, output recomputed; "
                              "Linear inputs cached in FP8)"),
    "mixtral-8x7b 64 H100": ({}, "none (bf16; the Megatron-LM MoE README's reference mapping sets no recompute)"),
    "qwen3-235b 256 H100": (dict(activation_precision="fp8"),
                            f"fp8-cache: FP8 GEMMs (FP8-CS recipe); {TE_FP8}; the recipe sets no recompute"),
    "deepseek-v3 1024 H100": (dict(activation_precision="fp8"), f"fp8-cache: FP8 GEMMs; {TE_FP8}"),
}


def _row(run: str, quantity: str, predicted: float | None, published: float | None = None, **kw) -> dict:
    err = None if predicted is None or not published else round(100 * (predicted / published - 1), 1)
    return {"run": run, "quantity": quantity, "predicted": predicted, "published": published, "error_pct": err, **kw}


def _peak(name: str, opts: dict, pp: int, microbatches: int, system, model, ctx: Context) -> tuple[float, bool, float]:
    """(peak GiB per GPU, fits, step s) of a registry schedule on ``ctx``, simulated."""
    return _simulated(name, opts, pp, microbatches, system, model, ctx)[:3]


def _simulated(name: str, opts: dict, pp: int, microbatches: int, system, model, ctx: Context):
    """``_peak`` and the sourced reserve of the peak GPU (``hardware.reserve``)."""
    sched = registry.generate(name, pp, microbatches, **opts)
    costs = hardware_costs(sched, system, model, ctx)
    sim = simulate(sched, costs)
    peaks = [a + b for a, b in zip(sim.peak_activation, costs.persistent)]
    device = max(range(len(peaks)), key=peaks.__getitem__)
    resolved = ctx.resolved(model, microbatches).replace(pp=pp)
    params = sum(c.params for p, row in enumerate(schedule_costs(sched, system, model, resolved).stages)
                 for s, c in enumerate(row) if sched.placement.device(p, s) == device)
    reserve = memory_reserve(system.device, resolved, model.moe, params)
    return peaks[device] / 2**30, all(sim.fits_memory), sim.makespan, reserve, peaks[device]


def _judged(run: str, name: str, opts: dict, pp: int, m: int, system, model, ctx: Context, plain: Context,
            techniques: str, sources: str, note: str = "") -> dict:
    """A published run's memory verdict with its techniques and without (``plain``)."""
    peak, fits, _, reserve, peak_bytes = _simulated(name, opts, pp, m, system, model, ctx)
    plain_peak, plain_fits, _ = (peak, fits, 0.0) if plain == ctx else _peak(name, opts, pp, m, system, model, plain)
    sourced = system.device.memory_bytes - reserve.total
    return _row(run, "fits (published run)", float(fits), 1.0, techniques=techniques, technique_sources=sources,
                fits=fits, peak_gib=round(peak, 1), usable_gib=round(system.device.usable_memory_bytes / 2**30, 1),
                plain_fits=plain_fits, plain_peak_gib=round(plain_peak, 1), note=note,
                sourced_reserve_gib=round(reserve.total / 2**30, 2), fits_sourced_reserve=peak_bytes <= sourced,
                communicators="+".join(reserve.communicators))


def dense_runs() -> list[dict]:
    """Megatron SC'21 Table 1, Korthikanti 2022 Table 5, Llama 3 Table 4 (as ``bench_fidelity``
    prices them), each with its published recomputation."""
    a100, h100 = load_system("a100_cluster"), load_system("dgx_h100_ib")
    rows = []
    for r in MEGATRON:
        model, dp = _gpt(r.name, r.layers, r.hidden, r.heads, r.batch), r.gpus // (r.tp * r.pp)
        ctx = Context(tp=r.tp, dp=dp, sequence_parallel=False, zero=0, overlap=False, microbatch_size=r.microbatch,
                      recompute="full")
        name, opts = ("interleaved", {"chunks": r.chunks}) if r.chunks > 1 else ("1f1b", {})
        rows.append(_judged(f"{r.name} TP{r.tp} PP{r.pp} DP{dp} (Megatron SC'21)", name, opts, r.pp,
                            r.batch // (dp * r.microbatch), a100, model, ctx, ctx, "recompute=full",
                            f"{MEGATRON_REF}: every run recomputes activations"))
    for r in KORTHIKANTI:
        if r.pp == 1:
            continue  # one stage: bench_fidelity prices it without a pipeline
        model = _gpt(r.name, r.layers, r.hidden, r.heads, r.batch)
        for what, ctx in (("full recompute", Context(tp=r.tp, sequence_parallel=False, microbatch_size=r.microbatch,
                                                      recompute="full")),
                          ("SP + selective", Context(tp=r.tp, microbatch_size=r.microbatch, recompute="selective"))):
            rows.append(_judged(f"{r.name} TP{r.tp} PP{r.pp} {what} (Korthikanti 2022)", "1f1b", {}, r.pp,
                                r.batch // r.microbatch, a100, model, ctx, ctx,
                                "recompute=full" if what.startswith("full") else "SP+recompute=core_attn",
                                f"{KORTHIKANTI_REF}"))
    model = load_model("llama3_405b")
    for r in LLAMA3:
        ctx = Context(tp=8, dp=r.dp, zero=2, microbatch_size=1, seq_len=8192)
        rows.append(_judged(f"405B TP8 PP16 DP{r.dp} ({r.gpus} H100, Llama 3)", "interleaved",
                            {"chunks": LLAMA3_CHUNKS}, 16, r.sequences_per_pipeline, h100, model, ctx,
                            ctx.replace(zero=1), "ZeRO-2",
                            f"{LLAMA3_REF}; section 3.3.2: no activation checkpointing on 8K sequences; data "
                            "parallelism shards optimizer state and gradients, not weights (issue 40)",
                            note="Meta also frees pipeline inputs and outputs early (not modelled)"))
    return rows


def activation_ratios() -> list[dict]:
    """Korthikanti 2022's headline: SP + selective recomputation cuts activation memory
    about 5x against tensor parallelism alone (abstract; a rounded claim over 22B-1T)."""
    rows = []
    for r in KORTHIKANTI:
        model = _gpt(r.name, r.layers, r.hidden, r.heads, r.batch)
        base = activation_bytes_per_layer(model, Context(tp=8, sequence_parallel=False, microbatch_size=1))
        present = activation_bytes_per_layer(model, Context(tp=8, microbatch_size=1, recompute="selective"))
        rows.append(_row(f"{r.name} TP8 layer (Korthikanti 2022)", "activation ratio TP / (SP + selective)",
                         round(base / present, 2), 5.0, techniques="SP+recompute=core_attn",
                         technique_sources=f"{KORTHIKANTI_REF}, abstract ('reduces activation memory by 5x')",
                         note="the paper's figure is rounded and spans 22B-1T"))
    return rows


def moe_runs() -> list[dict]:
    """docs/moe.md's published runs, priced as ``bench_moe`` prices them, with their techniques."""
    rows = []
    for p in PUBLISHED:
        label, model, nodes, gpn, system, batch, ctx_args, name, opts, precision, *_ = p
        m, sys_ = load_model(model), cluster(system, nodes, gpn)
        plain = Context(global_batch=batch, seq_len=m.seq_len, gemm_precision=precision, **ctx_args)
        plain = plain.resolved(m, batch // (plain.dp * plain.microbatch_size))  # type: ignore[operator]
        extra, sources = MOE_TECHNIQUES[label]
        ctx = plain.replace(**extra)
        techniques = " ".join(ctx.memory_techniques) or "none"
        rows.append(_judged(label, name, {**opts, "overlap": True}, ctx.stages, ctx.sizes.microbatches, sys_, m,
                            ctx, plain, techniques, sources))
    return rows


def eager_layer() -> list[dict]:
    """The table beside the bytes an eager Llama-style layer saved on an H200, in all (bytes
    per token per hidden; the measurement attributes a tensor to the first module that
    saved it, so only the total compares): pipetab counts a fused layer (flash attention
    keeping Q, K, V, its output and log-sum-exp; one SwiGLU kernel keeping gate, up and
    product), eager PyTorch keeps each op's inputs (RoPE's outputs, GQA's expanded K and V,
    SiLU's input and output besides the product)."""
    measured: dict[str, float] = {}
    shapes: dict[str, tuple] = {}
    with MEASURED.open() as fh:
        for r in csv.DictReader(fh):
            measured[r["shape"]] = measured.get(r["shape"], 0.0) + float(r["bytes_per_token_per_hidden"])
            shapes[r["shape"]] = tuple(int(r[k]) for k in ("hidden", "heads", "kv_heads", "ffn", "seq"))
    rows = []
    for shape, (h, a, kv, f, s) in shapes.items():
        model = TransformerModel(shape, num_layers=1, hidden=h, heads=a, kv_heads=kv, ffn_hidden=f, seq_len=s, vocab=16,
                                 global_batch=1, mlp="swiglu", norm="rmsnorm", bias=False, dropout=False)
        got = activation_bytes_per_layer(model, Context(microbatch_size=1)) / (s * h)
        rows.append(_row(f"{shape} layer (H200 eager, experiments/measured)", "saved bytes per token per hidden",
                         round(got, 3), round(measured[shape], 3), techniques="none",
                         note="disagrees by design: pipetab counts fused kernels (Megatron/TE); eager PyTorch "
                         "saves each op's inputs"))
    return rows


def deepseek_question() -> list[dict]:
    """DeepSeek-V3's run against plan's winner on its own question (bench_moe's)."""
    q = next(q for q in QUESTIONS if q[0] == "deepseek-v3-2048")
    _, model, nodes, gpn, system, batch, options = q
    t0 = time.perf_counter()
    result = plan(plan_question(model, nodes, gpn, batch, system, cpsat_shapes=0, **options))
    wall = time.perf_counter() - t0
    best = result.configurations[0]
    p = next(p for p in PUBLISHED if p[0] == "deepseek-v3 2048 H800")
    label, _, _, _, _, _, ctx_args, name, opts, precision, *_ = p
    m, sys_ = load_model(model), cluster(system, nodes, gpn)
    ctx = Context(global_batch=batch, seq_len=m.seq_len, gemm_precision=precision, **ctx_args,
                  **MOE_TECHNIQUES[label][0])
    ctx = ctx.resolved(m, batch // (ctx.dp * ctx.microbatch_size))  # type: ignore[operator]
    peak, fits, step = _peak(name, {**opts, "overlap": True}, ctx.stages, ctx.sizes.microbatches, sys_, m, ctx)
    note = (f"plan's winner {best.label} {best.shape.label} {best.recompute_label}: {best.step_time_s:.3f} s, "
            f"{best.peak_memory_bytes / 2**30:.1f} GiB, fits {best.fits}; plan took {wall:.0f} s")
    return [_row(f"{label} vs plan's winner", "step (s): published configuration / plan's winner", round(step, 3),
                 round(best.step_time_s, 3), techniques=" ".join(ctx.memory_techniques), fits=fits,
                 peak_gib=round(peak, 1), note=note)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the plan question (seconds)")
    parser.add_argument("--csv", default=str(ROOT / "docs" / "bench" / "memory.csv"))
    args = parser.parse_args(argv)
    rows = dense_runs() + activation_ratios() + moe_runs() + eager_layer()
    if not args.quick:
        rows += deepseek_question()
    path = Path(args.csv)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k, "")) for k in COLUMNS})
    judged = [r for r in rows if r["quantity"] == "fits (published run)"]
    print(f"{sum(r['fits'] for r in judged)} of {len(judged)} published runs fit with their techniques "
          f"({sum(r['plain_fits'] for r in judged)} without); wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
