"""The plan's Pareto picture: step time against peak memory per GPU (matplotlib, optional).
Draws on a given ``ax``; never saves or shows."""

from __future__ import annotations

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (memory, time) points no other point beats in both, by increasing memory."""
    front, best = [], float("inf")
    for mem, t in sorted(points):
        if t < best:
            front.append((mem, t))
            best = t
    return front


def shape_label(c) -> str:
    """``PP2 TP8 DP2 b1``, and the recomputation when there is one: a point's shape."""
    s = c.shape
    text = f"PP{s.pp} TP{s.tp} DP{s.dp} b{s.microbatch_size}"
    return text if c.recompute_label == "none" else f"{text} {c.recompute_label}"


def plot_plan(plan, ax, title: str = "", labels: int = 8):
    """One marker per simulated configuration (colour and marker: schedule; hollow: does
    not fit), the Pareto front of those that fit labelled with each point's shape (at most
    ``labels`` of them, the best always), the usable GPU memory as a vertical line; the
    legend sits beside the axes, off the data."""
    import matplotlib

    confs = plan.evaluated or plan.configurations
    names = sorted({c.label for c in confs})
    cmap = matplotlib.colormaps["tab20" if len(names) > 10 else "tab10"]
    gib = 2**30
    for i, name in enumerate(names):
        mine = [c for c in confs if c.label == name]
        colour, marker = cmap(i % cmap.N), MARKERS[i % len(MARKERS)]
        for fits in (True, False):
            pts = [c for c in mine if c.fits == fits]
            if not pts:
                continue
            ax.scatter([c.peak_memory_bytes / gib for c in pts], [c.step_time_s for c in pts],
                       s=30, marker=marker, label=name if fits else f"{name} (does not fit)", linewidths=1,
                       facecolors=colour if fits else "none", edgecolors=colour, zorder=3)
    fitting = [c for c in confs if c.fits]
    front = pareto_front([(c.peak_memory_bytes / gib, c.step_time_s) for c in fitting])
    if front:
        ax.step([m for m, _ in front], [t for _, t in front], where="post", color="0.3", lw=1, zorder=2,
                label="Pareto front (fits)")
    if confs:
        ax.axvline(confs[0].capacity_bytes / gib, color="red", ls="--", lw=1, label="usable GPU memory")
    _label_front(ax, plan, fitting, front, labels)
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    q = plan.question
    ax.set_title(title or f"{q['model']} on {q['gpus']} GPUs, global batch {q['global_batch']}: "
                          "every simulated configuration")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              title="schedule", title_fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def _label_front(ax, plan, fitting, front, most: int) -> None:
    """Name the shape of the best configuration and of the Pareto front's points (every
    other one when there are more than ``most``), alternating above and below so that
    neighbours do not cover each other."""
    gib = 2**30
    on_front = []
    for mem, t in front:
        c = next(c for c in fitting if c.peak_memory_bytes / gib == mem and c.step_time_s == t)
        on_front.append(c)
    step = max(1, -(-len(on_front) // max(1, most)))
    chosen = on_front[::step]
    best = plan.configurations[0] if plan.configurations and plan.configurations[0].fits else None
    if best is not None and best not in chosen:
        chosen.append(best)
    for i, c in enumerate(chosen):
        text = f"best: {c.label}\n{shape_label(c)}" if c == best else shape_label(c)
        up = i % 2 == 0
        ax.annotate(text, (c.peak_memory_bytes / gib, c.step_time_s), textcoords="offset points",
                    xytext=(6, 12 if up else -18), ha="left", va="bottom" if up else "top", fontsize=7,
                    arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6},
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.7", "alpha": 0.85}, zorder=4)
