"""``pipetab plan --html FILE``: the plan as one self-contained HTML page (no network).

The page holds the ranked configurations as a sortable table (every simulated one), the
Pareto picture of step time against peak memory per GPU whose points name their shape on
hover, the winner's and the runner-up's tables, simulated timelines and memory over time
(the viewer's panels: ``pipetab.view.page_data``, drawn by the viewer's script) with the
winner's three levels, and the assumptions of the costs and what plan did not consider.

    from pipetab.view.plan_page import write_plan_page
    write_plan_page("plan.html", plan(space))
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import page_data, render

if TYPE_CHECKING:
    from pipetab.plan import Configuration, Plan

# what the costs assume and what plan never models (pipetab.plan's docstring, docs/cluster.md);
# what this plan's space left out is the plan's own notes (Plan.notes)
ASSUMPTIONS = (
    "Op times are the sum of their kernels (GEMMs in tiles and waves over the SMs, flash attention, "
    "memory-bound kernels) with the system's fitted efficiencies, or the profile's measured times; messages "
    "by the Hockney model; links carry transfers side by side (no congestion).",
    "Tensor-parallel collectives run inside each op; expert-parallel all-to-alls are hidden only inside "
    "overlapped forward-backward pairs; the data-parallel gradient reduction and the optimizer step end the step.",
    "Memory: weights, gradients and optimizer state (ZeRO as given) plus live activations; no fragmentation; "
    "the GPU's reserved memory is not usable.",
    "MFU counts the model's FLOPs (3 x forward of every layer and the LM head, no recomputation) over the "
    "step time and the GPUs' peak.",
)
NEVER_MODELLED = (
    "overlap of tensor-parallel communication with compute",
    "FP8 activation caching (DeepSeek-V3) and activation offloading",
    "network congestion beyond per-link contention",
)


def _row(rank: int, c: Configuration) -> dict:
    from pipetab.plan.result import runs

    s = c.shape
    return {"rank": rank, "schedule": c.label, "source": c.source, "pp": s.pp, "tp": s.tp, "cp": s.cp, "dp": s.dp,
            "ep": f"{s.ep}" + (f"x{s.etp}" if s.etp > 1 else ""), "zero": s.zero, "sp": s.sequence_parallel,
            "layers": runs(c.layers_per_stage), "mb": s.microbatch_size, "micro": s.microbatches,
            "recompute": c.recompute_label, "step": c.step_time_s, "tokens": c.tokens_per_s, "mfu": c.mfu,
            "mfu_causal": c.mfu_causal, "peak": c.peak_memory_bytes / 2**30, "free": c.headroom_bytes / 2**30,
            "fits": c.fits, "shape": shape_name(c)}


def one_run_per_shape(ranked: list[Configuration]) -> list[Configuration]:
    """``ranked`` with each shape of one stage once (the fastest): every schedule on one
    stage is the same run, its microbatches gradient accumulation."""
    seen: set = set()
    out = []
    for c in ranked:
        if c.shape.stages == 1:
            if c.shape in seen:
                continue
            seen.add(c.shape)
        out.append(c)
    return out


def shape_name(c: Configuration) -> str:
    """``zb-h1 PP2 TP8 DP2 b=1 recompute none``: what a point of the Pareto picture is."""
    return f"{c.label} {c.shape.label} recompute {c.recompute_label}"


def plan_data(result: Plan) -> tuple[dict, list[dict]]:
    """What the page draws (plain data): the question, the search's counts, every simulated
    configuration ranked and the Pareto front; and the winner and runner-up as viewer
    panels (``page_data``)."""
    from pipetab.plan.plot import pareto_front

    ranked = one_run_per_shape(list(result.evaluated or result.configurations))
    gib = 2**30
    front = pareto_front([(c.peak_memory_bytes / gib, c.step_time_s) for c in ranked if c.fits])
    panels, names = [], []
    for role, c in zip(("winner", "runner-up"), result.configurations[:2]):
        if c.levels is None:
            continue
        sample = "" if not c.sample_microbatches else (
            f" (the first {c.sample_microbatches} of {c.shape.microbatches} microbatches: the step of all of them, "
            f"{c.step_time_s:.4g} s, is extrapolated exactly from this periodic run)")
        panels.append(page_data(c.levels, f"{role}: {shape_name(c)}{sample}"))
        names.append(role)
    q = result.question
    return {
        "question": q,
        "counts": {"candidates": result.candidates, "pruned_memory": result.pruned_memory,
                   "pruned_time": result.pruned_time, "simulated": result.simulated - result.refined,
                   "refined": result.refined, "outside": result.unbuilt,
                   "runtime_s": round(result.runtime_s, 3)},
        "rows": [_row(i, c) for i, c in enumerate(ranked, 1)],
        "shown": len(result.configurations),
        "front": front,
        "capacity": ranked[0].capacity_bytes / gib if ranked else None,
        "cpsat": list(result.cpsat_notes),
        "certificate": None if result.certificate is None else {
            "text": result.certificate.text(), "assumes": list(result.certificate.assumes)},
        "assumptions": list(ASSUMPTIONS),
        "not_considered": list(result.notes) + list(NEVER_MODELLED),
        "panels": names,
    }, panels


def render_plan_page(result: Plan) -> str:
    """The HTML page of ``result`` (one self-contained document)."""
    q = result.question
    title = (f"pipetab plan: {q['model']} on {q['gpus']} GPUs ({q['system']}), global batch "
             f"{q['global_batch']} x {q['seq_len']} tokens")
    plan, schedules = plan_data(result)
    return render("plan.html", title, {"title": title, "plan": plan, "schedules": schedules},
                  ("view.css", "plan.css"), ("plan.js", "view.js"))


def write_plan_page(path: str | Path, result: Plan) -> Path:
    """Write the plan page of ``result`` to ``path``; returns the path."""
    path = Path(path)
    path.write_text(render_plan_page(result), encoding="utf-8")
    return path
