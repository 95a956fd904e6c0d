"""Pictures of tables and simulated timelines (matplotlib, optional). Functions draw on a
given ``ax`` and never save or show; the CLI saves.

One colour per op kind and pipeline (the viewer's: forward blue, backward red, weight
gradient green; pipeline 1 lighter), a legend, axes labelled with their units. Long runs stay
readable: ``window=(t0, t1)`` zooms to a time window, and when a device has more ops than can
be told apart (``aggregate`` None: more than ``AGGREGATE_OPS`` in the window) each device row
shows, per time bin, the share of the bin each kind fills (the rest idle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pipetab.schedules.limits import check_drawable
from pipetab.schedules.ops import Kind

if TYPE_CHECKING:
    from pipetab.schedules.table import Table

COLOURS = {Kind.F: ("#4e79a7", "#a0cbe8"), Kind.B: ("#e15759", "#ff9d9a"), Kind.W: ("#59a14f", "#8cd17d")}
KIND_NAMES = {Kind.F: "forward", Kind.B: "backward", Kind.W: "weight gradient"}
AGGREGATE_OPS = 150  # more ops than this on a device in the window: draw shares per bin
BINS = 300


def colour(kind: Kind, pipeline: int) -> str:
    """The colour of ops of ``kind`` in ``pipeline``."""
    return COLOURS[kind][min(pipeline, 1)]


class _Ops(NamedTuple):
    """Ops as columns, in the unit of the picture's time axis."""

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: list
    pipeline: np.ndarray
    microbatch: np.ndarray


def _columns(rows) -> _Ops:
    device, start, end, kind, pipeline, mb = zip(*rows) if rows else ((),) * 6
    arr = lambda x, t=float: np.asarray(x, dtype=t)  # noqa: E731
    return _Ops(arr(device, int), arr(start), arr(end), list(kind), arr(pipeline, int), arr(mb, int))


def _draw(ax, ops: _Ops, num_devices: int, window, aggregate, labels: bool, total: float) -> str:
    """Draw ``ops`` in ``window`` (default everything); returns a note for the title."""
    t0, t1 = window if window else (0.0, total)
    if not t1 > t0:
        raise ValueError(f"window must be (t0, t1) with t1 > t0, got {window!r}")
    inside = (ops.end > t0) & (ops.start < t1)
    per_device = np.bincount(ops.device[inside], minlength=num_devices).max(initial=0)
    if aggregate is None:
        aggregate = per_device > AGGREGATE_OPS
    present = sorted({(k, int(p)) for k, p in zip(ops.kind, ops.pipeline)},
                     key=lambda x: ("FBW".index(x[0].value), x[1]))
    if aggregate:
        _shares(ax, ops, num_devices, t0, t1, present)
        note = f"share of each 1/{BINS} of the window per kind"
    else:
        _rectangles(ax, ops, inside, present, labels and inside.sum() <= 200)
        note = ""
    ax.set_xlim(t0, t1)
    ax.set_ylim(num_devices - 0.5, -0.5)
    step = max(1, num_devices // 16)
    ax.set_yticks(range(0, num_devices, step), [f"dev {d}" for d in range(0, num_devices, step)])
    ax.set_ylabel("device")
    two = any(p for _, p in present)
    handles = [_patch(colour(k, p), KIND_NAMES[k] + (f" (pipeline {p})" if two else "")) for k, p in present]
    if aggregate:
        handles.append(_patch("white", "idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return note


def _patch(face: str, label: str):
    from matplotlib.patches import Patch

    return Patch(facecolor=face, edgecolor="0.4", linewidth=0.5, label=label)


def _rectangles(ax, ops: _Ops, inside, present, labels: bool) -> None:
    from matplotlib.collections import PolyCollection

    for kind, p in present:
        sel = inside & np.array([k is kind for k in ops.kind]) & (ops.pipeline == p)
        d, s, e = ops.device[sel], ops.start[sel], ops.end[sel]
        verts = np.stack([np.stack([s, d - 0.4], 1), np.stack([e, d - 0.4], 1),
                          np.stack([e, d + 0.4], 1), np.stack([s, d + 0.4], 1)], 1)
        ax.add_collection(PolyCollection(verts, facecolors=colour(kind, p), edgecolors="white", linewidths=0.6))
    if labels:
        for i in np.flatnonzero(inside):
            ax.text((ops.start[i] + ops.end[i]) / 2, ops.device[i], f"{ops.kind[i].value}{ops.microbatch[i]}",
                    ha="center", va="center", fontsize=6, color="white")


def _shares(ax, ops: _Ops, num_devices: int, t0: float, t1: float, present) -> None:
    """Per device and bin, stacked bars of the share each kind fills (ops of one device
    never overlap, so each kind's busy time up to t is a cumulative sum)."""
    from matplotlib.collections import PolyCollection

    edges = np.linspace(t0, t1, BINS + 1)
    width = edges[1] - edges[0]
    for d in range(num_devices):
        base = np.full(BINS, d - 0.4)
        for kind, p in present:
            sel = (ops.device == d) & np.array([k is kind for k in ops.kind]) & (ops.pipeline == p)
            s, e = ops.start[sel], ops.end[sel]
            order = np.argsort(s)
            s, e = s[order], e[order]
            cum = np.concatenate([[0.0], np.cumsum(e - s)])
            k = np.searchsorted(e, edges, side="right")  # ops ended by each edge
            partial = np.where(k < len(s), np.clip(edges - s[np.minimum(k, len(s) - 1)], 0, None), 0.0) if len(s) else 0
            busy = cum[k] + partial
            height = 0.8 * np.diff(busy) / width
            x0, x1 = edges[:-1], edges[1:]
            verts = np.stack([np.stack([x0, base], 1), np.stack([x1, base], 1),
                              np.stack([x1, base + height], 1), np.stack([x0, base + height], 1)], 1)
            ax.add_collection(PolyCollection(verts[height > 0], facecolors=colour(kind, p), linewidths=0))
            base = base + height


def plot_table(table: Table, ax, title: str = "", labels: bool = True, window=None, aggregate=None):
    """Draw ``table``: one row per device, its ops on the slot axis (labelled with kind and
    microbatch when few enough). ``window`` in slots; see the module docstring."""
    check_drawable(len(table))
    scale = table.tick_slots
    ops = _columns([(e.device, e.start * scale, e.end * scale, e.op.kind, e.op.pipeline, e.op.microbatch)
                    for e in table.entries])
    note = _draw(ax, ops, table.num_devices, window, aggregate, labels, table.makespan * scale)
    ax.set_xlabel("time (slots)")
    ax.set_title(_title(title or table.name, note))
    return ax


def plot_timeline(sim, ax, title: str = "", transfers: bool = True, window=None, aggregate=None):
    """Draw a simulation: device rows with ops, messages between devices as thin grey
    arrows (when few enough to see), optimizer steps in grey. Times in seconds (ms for
    steps under 10 s; ``window`` in that unit) or slots for idealized costs."""
    sched, unit = sim.schedule, sim.costs.unit
    check_drawable(sched.num_ops)
    if unit == "s":
        scale, label = (1.0, "time (s)") if sim.makespan >= 10 else (1e3, "time (ms)")
    else:
        scale, label = sim.costs.tick_slots, "time (slots)"
    ops = _columns([(sched.device_of(op), s * scale, sim.end[op] * scale, op.kind, op.pipeline, op.microbatch)
                    for op, s in sim.start.items()])
    note = _draw(ax, ops, sched.num_devices, window, aggregate, False, sim.makespan * scale)
    if transfers and not note and len(sim.transfers) <= 2000:
        for tr in sim.transfers:
            ax.annotate("", xy=(tr.end * scale, tr.dst), xytext=(tr.start * scale, tr.src),
                        arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 0.4})
    steps = [(d, s, e) for d, (s, e) in enumerate(sim.optimizer) if e > s]
    for d, s, e in steps:
        ax.barh(d, (e - s) * scale, left=s * scale, height=0.8, color="0.75", edgecolor="0.4", linewidth=0.4)
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend else []
    if steps:
        handles.append(_patch("0.75", "optimizer step"))
    if transfers and not note and sim.transfers and len(sim.transfers) <= 2000:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="0.45", lw=0.8, label="message"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_xlabel(label)
    ax.set_title(_title(title or sched.name, note))
    return ax


def _title(title: str, note: str) -> str:
    return f"{title}\n({note})" if note else title
