"""Pictures of tables and simulated timelines (matplotlib, optional). Functions draw on a
given ``ax`` and never save or show; the CLI saves."""

from __future__ import annotations

from pipetab.schedules.limits import check_drawable
from pipetab.schedules.ops import Kind
from pipetab.schedules.table import Table


def _colour(microbatch: int, num: int):
    import matplotlib

    cmap = matplotlib.colormaps["tab20"] if num > 10 else matplotlib.colormaps["tab10"]
    return cmap(microbatch % cmap.N)


_HATCH = {Kind.F: "", Kind.B: "//", Kind.W: ".."}


def _bars(ax, items, num_mb, labels=False):
    """Draw ``(row, start, width, op)`` rectangles: one collection per op kind (fast for
    thousands of ops), coloured by microbatch, hatched by kind."""
    from matplotlib.collections import PolyCollection

    by_kind: dict = {}
    for row, start, width, op in items:
        by_kind.setdefault(op.kind, []).append((row, start, width, op))
        if labels:
            ax.text(start + width / 2, row, f"{op.kind.value}{op.microbatch}", ha="center", va="center", fontsize=6)
    for kind, rects in by_kind.items():
        verts = [[(x, r - 0.4), (x + w, r - 0.4), (x + w, r + 0.4), (x, r + 0.4)] for r, x, w, _ in rects]
        colours = [_colour(op.microbatch, num_mb) for *_, op in rects]
        ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="black",
                                         linewidths=0.4, hatch=_HATCH[kind] or None))


def plot_table(table: Table, ax, title: str = "", labels: bool = True):
    """Draw ``table``: one row per device, one bar per op coloured by microbatch, backward
    hatched (weight-gradient dotted)."""
    check_drawable(len(table))
    items = [(e.device, e.start, e.duration, e.op) for e in table.entries]
    _bars(ax, items, table.microbatches, labels=labels and table.makespan <= 120)
    ax.set_ylim(table.num_devices - 0.5, -0.5)
    ax.set_yticks(range(table.num_devices), [f"dev{d}" for d in range(table.num_devices)])
    ax.set_xlim(0, table.makespan)
    ax.set_xlabel("slot")
    ax.set_title(title or table.name)
    return ax


def plot_timeline(sim, ax, title: str = "", transfers: bool = True):
    """Draw a simulation: device rows with ops (coloured by microbatch, backward hatched),
    transfers as thin grey arrows from sender to receiver row, optimizer steps in grey."""
    sched = sim.schedule
    check_drawable(sched.num_ops)
    unit = sim.costs.unit
    seconds = unit == "s" and sim.makespan >= 10
    scale = (1.0 if seconds else 1e3) if unit == "s" else 1.0
    num_mb = sched.num_microbatches
    _bars(ax, [(sched.device_of(op), s * scale, (sim.end[op] - s) * scale, op) for op, s in sim.start.items()], num_mb)
    if transfers and len(sim.transfers) <= 4000:
        for tr in sim.transfers:
            ax.annotate("", xy=(tr.end * scale, tr.dst), xytext=(tr.start * scale, tr.src),
                        arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 0.4})
    for d, (s, e) in enumerate(sim.optimizer):
        if e > s:
            ax.barh(d, (e - s) * scale, left=s * scale, height=0.8, color="0.7", edgecolor="black", linewidth=0.4)
    ax.set_yticks(range(sched.num_devices), [f"dev{d}" for d in range(sched.num_devices)])
    ax.set_ylim(sched.num_devices - 0.5, -0.5)
    ax.set_xlim(0, sim.makespan * scale)
    ax.set_xlabel(("time (s)" if seconds else "time (ms)") if unit == "s" else unit)
    ax.set_title(title or sched.name)
    return ax
