"""The plan's Pareto picture: step time against peak memory per GPU (matplotlib, optional).
Draws on a given ``ax``; never saves or shows."""

from __future__ import annotations


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (memory, time) points no other point beats in both, by increasing memory."""
    front, best = [], float("inf")
    for mem, t in sorted(points):
        if t < best:
            front.append((mem, t))
            best = t
    return front


def plot_plan(plan, ax, title: str = ""):
    """One marker per simulated configuration (colour: schedule; hollow: does not fit), the
    Pareto front of those that fit, the usable GPU memory as a vertical line, the best
    configuration named."""
    import matplotlib

    confs = plan.evaluated or plan.configurations
    names = sorted({c.label for c in confs})
    cmap = matplotlib.colormaps["tab20" if len(names) > 10 else "tab10"]
    gib = 2**30
    for i, name in enumerate(names):
        mine = [c for c in confs if c.label == name]
        for fits in (True, False):
            pts = [c for c in mine if c.fits == fits]
            if not pts:
                continue
            ax.scatter([c.peak_memory_bytes / gib for c in pts], [c.step_time_s for c in pts],
                       s=36, marker="o", label=name if fits else f"{name} (does not fit)",
                       facecolors=cmap(i % cmap.N) if fits else "none", edgecolors=cmap(i % cmap.N))
    front = pareto_front([(c.peak_memory_bytes / gib, c.step_time_s) for c in confs if c.fits])
    if front:
        ax.step([m for m, _ in front], [t for _, t in front], where="post", color="0.3", lw=1,
                label="Pareto front (fits)")
    if confs:
        ax.axvline(confs[0].capacity_bytes / gib, color="red", ls="--", lw=1, label="usable GPU memory")
    for c in plan.configurations[:1]:
        s = c.shape
        ax.annotate(f"best: {c.label} PP{s.pp} TP{s.tp} DP{s.dp} b{s.microbatch_size} {s.recompute}",
                    (c.peak_memory_bytes / gib, c.step_time_s), textcoords="offset points",
                    xytext=(-10, 10), ha="right", fontsize=8)
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    q = plan.question
    ax.set_title(title or f"{q['model']} on {q['gpus']} GPUs, global batch {q['global_batch']}")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return ax
