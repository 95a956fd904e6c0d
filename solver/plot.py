"""Pictures of tables and simulated timelines (matplotlib, optional). Functions draw on a
given ``ax`` and never save or show; the CLI saves."""

from __future__ import annotations

from schedules.ops import Kind
from schedules.table import Table


def _colour(microbatch: int, num: int):
    import matplotlib

    cmap = matplotlib.colormaps["tab20"] if num > 10 else matplotlib.colormaps["tab10"]
    return cmap(microbatch % cmap.N)


_HATCH = {Kind.F: "", Kind.B: "//", Kind.W: ".."}


def _bar(ax, row, start, width, op, num_mb, label):
    ax.barh(row, width, left=start, height=0.8, color=_colour(op.microbatch, num_mb),
            hatch=_HATCH[op.kind], edgecolor="black", linewidth=0.4)
    if label:
        ax.text(start + width / 2, row, label, ha="center", va="center", fontsize=6)


def plot_table(table: Table, ax, title: str = "", labels: bool = True):
    """Draw ``table``: one row per device, one bar per op coloured by microbatch, backward
    hatched (weight-gradient dotted)."""
    num_mb = table.microbatches
    small = table.makespan <= 120
    for e in table.entries:
        _bar(ax, e.device, e.start, e.duration, e.op, num_mb, f"{e.op.kind.value}{e.op.microbatch}" if labels and small else "")
    ax.set_yticks(range(table.num_devices), [f"dev{d}" for d in range(table.num_devices)])
    ax.invert_yaxis()
    ax.set_xlim(0, table.makespan)
    ax.set_xlabel("slot")
    ax.set_title(title or table.name)
    return ax


def plot_timeline(sim, ax, title: str = "", transfers: bool = True):
    """Draw a simulation: device rows with ops (coloured by microbatch, backward hatched),
    transfers as thin grey arrows from sender to receiver row, optimizer steps in grey."""
    sched = sim.schedule
    unit = sim.costs.unit
    scale = 1e3 if unit == "s" else 1.0
    num_mb = sched.num_microbatches
    for op, s in sim.start.items():
        _bar(ax, sched.device_of(op), s * scale, (sim.end[op] - s) * scale, op, num_mb, "")
    if transfers and len(sim.transfers) <= 4000:
        for tr in sim.transfers:
            ax.annotate("", xy=(tr.end * scale, tr.dst), xytext=(tr.start * scale, tr.src),
                        arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 0.4})
    for d, (s, e) in enumerate(sim.optimizer):
        if e > s:
            ax.barh(d, (e - s) * scale, left=s * scale, height=0.8, color="0.7", edgecolor="black", linewidth=0.4)
    ax.set_yticks(range(sched.num_devices), [f"dev{d}" for d in range(sched.num_devices)])
    ax.invert_yaxis()
    ax.set_xlim(0, sim.makespan * scale)
    ax.set_xlabel("time (ms)" if unit == "s" else unit)
    ax.set_title(title or sched.name)
    return ax
