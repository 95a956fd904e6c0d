"""Pictures of tables and simulated timelines (matplotlib, optional). Functions draw on a
given ``ax`` and never save or show; the CLI saves.

One colour per op kind (the viewer's: forward blue, backward red, weight gradient green)
and a distinct shade of it per *chunk*: the k-th (pipeline, stage) a device holds, darkest
first -- Chimera's two pipelines, interleaved's and Hanayo's chunks, the two halves of a V.
Ops are labelled with kind and microbatch (``F12``) where they are wide enough; a legend
names every colour; axes carry their units.

Long runs stay readable at real sizes: when a device has more ops than can be told apart
(more than ``PANEL_OPS``), the picture shows three windows side by side at the same scale
-- the warm-up, one steady-state window from the middle and the cool-down -- separated by
broken-axis marks, each op drawn and labelled (``panels``). ``window=(t0, t1)`` zooms to one
window instead, and ``aggregate=True`` draws per time bin the share of the bin each kind
fills (the whole run at a glance).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from pipetab.schedules.limits import check_drawable
from pipetab.schedules.ops import Kind

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pipetab.schedules.table import Table

COLOURS = {Kind.F: ("#4e79a7", "#a0cbe8"), Kind.B: ("#e15759", "#ff9d9a"), Kind.W: ("#59a14f", "#8cd17d")}
KIND_NAMES = {Kind.F: "forward", Kind.B: "backward", Kind.W: "weight gradient"}
PANEL_OPS = 150  # more ops than this on a device: three windows (warm-up, steady state, cool-down)
BINS = 300
LABEL_OPS = 320  # ops labelled with kind and microbatch when a window holds at most this many


def colour(kind: Kind, pipeline: int) -> str:
    """The colour of ops of ``kind`` in chunk (or pipeline) ``pipeline`` of two."""
    return COLOURS[kind][min(pipeline, 1)]


def shade(kind: Kind, chunk: int, chunks: int) -> str:
    """The colour of ops of ``kind`` on the ``chunk``-th of ``chunks`` (pipeline, stage)
    pairs of a device: from the kind's dark colour (chunk 0) to its light one (the last)."""
    from matplotlib.colors import to_hex, to_rgb

    if chunks <= 2:
        return colour(kind, chunk)
    dark, light = np.array(to_rgb(COLOURS[kind][0])), np.array(to_rgb(COLOURS[kind][1]))
    f = chunk / (chunks - 1)
    return to_hex(tuple((1 - f) * dark + f * light))


class _Ops(NamedTuple):
    """Ops as columns, in the unit of the picture's time axis; ``chunk``: the index of the
    op's (pipeline, stage) among those of its device."""

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: list
    pipeline: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray
    chunks: int
    by_pipeline: bool  # chunks are pipelines (Chimera): the legend says "pipeline"


def _columns(rows) -> _Ops:
    """``rows`` of (device, start, end, kind, pipeline, stage, microbatch)."""
    device, start, end, kind, pipeline, stage, mb = zip(*rows) if rows else ((),) * 7
    arr = lambda x, t=float: np.asarray(x, dtype=t)  # noqa: E731
    pairs: dict[int, set] = {}
    for d, p, s in zip(device, pipeline, stage):
        pairs.setdefault(d, set()).add((p, s))
    order = {d: {ps: i for i, ps in enumerate(sorted(v))} for d, v in pairs.items()}
    chunk = [order[d][(p, s)] for d, p, s in zip(device, pipeline, stage)]
    chunks = max((len(v) for v in order.values()), default=1)
    by_pipeline = all(len({p for p, _ in v}) == len(v) for v in order.values()) and chunks > 1
    return _Ops(arr(device, int), arr(start), arr(end), list(kind), arr(pipeline, int), arr(mb, int),
                arr(chunk, int), chunks, by_pipeline)


def _present(ops: _Ops) -> list[tuple[Kind, int]]:
    return sorted({(k, int(c)) for k, c in zip(ops.kind, ops.chunk)}, key=lambda x: ("FBW".index(x[0].value), x[1]))


def _handles(ops: _Ops, present) -> list:
    def name(kind, c):
        if ops.chunks == 1:
            return KIND_NAMES[kind]
        return f"{KIND_NAMES[kind]} ({'pipeline' if ops.by_pipeline else 'chunk'} {c})"

    return [_patch(shade(k, c, ops.chunks), name(k, c)) for k, c in present]


def _rows(ax, num_devices: int) -> None:
    ax.set_ylim(num_devices - 0.5, -0.5)
    step = max(1, num_devices // 16)
    ax.set_yticks(range(0, num_devices, step), [f"dev {d}" for d in range(0, num_devices, step)])


def _legend(ax, handles) -> None:
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _draw(ax, ops: _Ops, num_devices: int, window, aggregate, labels: bool, total: float) -> str:
    """Draw ``ops`` in ``window`` (default everything) on ``ax``; returns a note for the
    title ('' when each op is drawn)."""
    t0, t1 = window if window else (0.0, total)
    if not t1 > t0:
        raise ValueError(f"window must be (t0, t1) with t1 > t0, got {window!r}")
    inside = (ops.end > t0) & (ops.start < t1)
    present = _present(ops)
    if aggregate:
        _shares(ax, ops, num_devices, t0, t1, present)
        note = f"share of each 1/{BINS} of the window per kind"
    else:
        _rectangles(ax, ops, inside, present)
        note = ""
    ax.set_xlim(t0, t1)
    if labels and not aggregate and inside.sum() <= 4 * LABEL_OPS:
        _label(ax, ops, inside, (t0, t1))
    _rows(ax, num_devices)
    ax.set_ylabel("device")
    handles = _handles(ops, present)
    if aggregate:
        handles.append(_patch("white", "idle"))
    _legend(ax, handles)
    return note


def _patch(face: str, label: str):
    from matplotlib.patches import Patch

    return Patch(facecolor=face, edgecolor="0.4", linewidth=0.5, label=label)


def _rectangles(ax, ops: _Ops, inside, present) -> None:
    from matplotlib.collections import PolyCollection

    for kind, c in present:
        sel = inside & np.array([k is kind for k in ops.kind]) & (ops.chunk == c)
        d, s, e = ops.device[sel], ops.start[sel], ops.end[sel]
        verts = np.stack([np.stack([s, d - 0.4], 1), np.stack([e, d - 0.4], 1),
                          np.stack([e, d + 0.4], 1), np.stack([s, d + 0.4], 1)], 1)
        # one (N, 4, 2) array: matplotlib's fast path for equal polygons (its stubs ask for a sequence)
        ax.add_collection(PolyCollection(cast("Sequence[np.ndarray]", verts), facecolors=shade(kind, c, ops.chunks),
                                         edgecolors="white", linewidths=0.6))


def _shares(ax, ops: _Ops, num_devices: int, t0: float, t1: float, present) -> None:
    """Per device and bin, stacked bars of the share each kind fills (ops of one device
    never overlap, so each kind's busy time up to t is a cumulative sum)."""
    from matplotlib.collections import PolyCollection

    edges = np.linspace(t0, t1, BINS + 1)
    width = edges[1] - edges[0]
    for d in range(num_devices):
        base = np.full(BINS, d - 0.4)
        for kind, c in present:
            sel = (ops.device == d) & np.array([k is kind for k in ops.kind]) & (ops.chunk == c)
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
            ax.add_collection(PolyCollection(verts[height > 0], facecolors=shade(kind, c, ops.chunks), linewidths=0))
            base = base + height


def phase_windows(ops: _Ops, num_devices: int, total: float) -> list[tuple[float, float, str]] | None:
    """The warm-up, a steady-state window from the middle and the cool-down, each as long
    as the pipeline takes to fill plus ``max(2 S, 8)`` average ops of a device; None when
    three such windows would cover most of the run (draw it whole)."""
    if not len(ops.start):
        return None
    busy = float(np.sum(ops.end - ops.start))
    avg = busy / len(ops.start)
    fill = max(float(ops.start[ops.device == d].min()) for d in np.unique(ops.device))
    width = fill + max(2 * num_devices, 8) * avg
    if 3 * width >= 0.75 * total:
        return None
    mid = total / 2
    return [(0.0, width, "warm-up"), (mid - width / 2, mid + width / 2, "steady state (middle of the step)"),
            (total - width, total, "cool-down")]


def _panels(ax, ops: _Ops, num_devices: int, total: float, windows, xlabel: str, extra=None) -> list:
    """Draw the ``windows`` side by side in three axes inside ``ax`` (which keeps the title
    and the legend), broken-axis marks between them; ``extra(sub)`` draws more on each."""
    ax.set_axis_off()
    gap, subs = 0.035, []
    width = (1 - 2 * gap) / len(windows)
    for i, (t0, t1, name) in enumerate(windows):
        sub = ax.inset_axes((i * (width + gap), 0.0, width, 1.0))
        inside = (ops.end > t0) & (ops.start < t1)
        _rectangles(sub, ops, inside, _present(ops))
        if extra:
            extra(sub)
        sub.set_xlim(t0, t1)
        if inside.sum() <= 4 * LABEL_OPS:
            _label(sub, ops, inside, (t0, t1))
        _rows(sub, num_devices)
        sub.set_title(name, fontsize=9)
        sub.tick_params(labelsize=7)
        if i:
            sub.tick_params(labelleft=False, left=False)
            sub.spines["left"].set_visible(False)
        else:
            sub.set_ylabel("device")
        if i < len(windows) - 1:
            sub.spines["right"].set_visible(False)
        for side in ([0] if i else []) + ([1] if i < len(windows) - 1 else []):  # broken-axis marks
            for y in (0, 1):
                sub.plot([side - 0.012, side + 0.012], [y - 0.02, y + 0.02], transform=sub.transAxes, color="k",
                         lw=0.8, clip_on=False)
        if i == len(windows) // 2:
            sub.set_xlabel(f"{xlabel}; the axis is broken between the windows")
        subs.append(sub)
    _legend(ax, _handles(ops, _present(ops)))
    return subs


def _too_many(ops: _Ops, num_devices: int) -> bool:
    return bool(np.bincount(ops.device, minlength=num_devices).max(initial=0) > PANEL_OPS)


def plot_table(table: Table, ax, title: str = "", labels: bool = True, window=None, aggregate=None, panels=None):
    """Draw ``table``: one row per device, its ops on the slot axis (labelled with kind and
    microbatch when few enough). ``window`` in slots; ``panels`` (default: when a device
    has more than ``PANEL_OPS`` ops and no window or aggregate is asked): see the module
    docstring."""
    check_drawable(len(table))
    scale = table.tick_slots
    ops = _columns([(e.device, e.start * scale, e.end * scale, e.op.kind, e.op.pipeline, e.op.stage,
                     e.op.microbatch) for e in table.entries])
    total = table.makespan * scale
    windows = _windows(ops, table.num_devices, total, window, aggregate, panels)
    if windows:
        _panels(ax, ops, table.num_devices, total, windows, "time (slots)")
        ax.set_title(_title(title or table.name, f"{total:g} slots in all: the warm-up, one steady-state window and "
                                                 f"the cool-down, {windows[0][1]:.4g} slots each"), pad=22)
        return ax
    note = _draw(ax, ops, table.num_devices, window, aggregate, labels, total)
    ax.set_xlabel("time (slots)")
    ax.set_title(_title(title or table.name, note))
    return ax


def _windows(ops: _Ops, num_devices: int, total: float, window, aggregate, panels):
    if window is not None or aggregate or panels is False:
        return None
    if panels is None and not _too_many(ops, num_devices):
        return None
    return phase_windows(ops, num_devices, total)


def plot_timeline(sim, ax, title: str = "", transfers: bool = True, window=None, aggregate=None, panels=None):
    """Draw a simulation: device rows with ops, messages between devices as thin grey
    arrows (when few enough to see), optimizer steps in grey. Times in seconds (ms for
    steps under 10 s; ``window`` in that unit) or slots for idealized costs. Long runs as
    three windows (``panels``, module docstring)."""
    sched, unit = sim.schedule, sim.costs.unit
    check_drawable(sched.num_ops)
    if unit == "s":
        scale, label = (1.0, "time (s)") if sim.makespan >= 10 else (1e3, "time (ms)")
    else:
        scale, label = sim.costs.tick_slots, "time (slots)"
    ops = _columns([(sched.device_of(op), s * scale, sim.end[op] * scale, op.kind, op.pipeline, op.stage,
                     op.microbatch) for op, s in sim.start.items()])
    steps = [(d, s, e) for d, (s, e) in enumerate(sim.optimizer) if e > s]

    def optimizer(a) -> None:
        for d, s, e in steps:
            a.barh(d, (e - s) * scale, left=s * scale, height=0.8, color="0.75", edgecolor="0.4", linewidth=0.4)

    total = sim.makespan * scale
    windows = _windows(ops, sched.num_devices, total, window, aggregate, panels)
    if windows:
        _panels(ax, ops, sched.num_devices, total, windows, label, optimizer)
        handles = list(ax.get_legend().legend_handles)
        if steps:
            handles.append(_patch("0.75", "optimizer step"))
        _legend(ax, handles)
        unit_name = label.split("(")[1].rstrip(")")
        ax.set_title(_title(title or sched.name, f"a step of {total:.4g} {unit_name}: the warm-up, one steady-state "
                                                 f"window and the cool-down, {windows[0][1]:.3g} {unit_name} each"),
                     pad=22)
        return ax
    note = _draw(ax, ops, sched.num_devices, window, aggregate, True, total)
    if transfers and not note and len(sim.transfers) <= 2000:
        for tr in sim.transfers:
            ax.annotate("", xy=(tr.end * scale, tr.dst), xytext=(tr.start * scale, tr.src),
                        arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 0.4})
    optimizer(ax)
    legend = ax.get_legend()
    handles = list(legend.legend_handles) if legend else []
    if steps:
        handles.append(_patch("0.75", "optimizer step"))
    if transfers and not note and sim.transfers and len(sim.transfers) <= 2000:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="0.45", lw=0.8, label="message"))
    _legend(ax, handles)
    ax.set_xlabel(label)
    ax.set_title(_title(title or sched.name, note))
    return ax


def _label(ax, ops: _Ops, inside, window=None) -> None:
    """``F12`` on each op in ``inside`` wide enough to hold it (6-point text, about 3.6
    points a character, in the axes' width on the figure)."""
    t0, t1 = window or ax.get_xlim()
    fig = ax.get_figure()
    points = ax.get_position().width * fig.get_figwidth() * 72 if fig is not None else 600.0
    per_unit = points / max(t1 - t0, 1e-300)
    for i in np.flatnonzero(inside):
        text = f"{ops.kind[i].value}{ops.microbatch[i]}"
        if (min(ops.end[i], t1) - max(ops.start[i], t0)) * per_unit < 3.6 * len(text) + 2:
            continue
        ax.text((ops.start[i] + ops.end[i]) / 2, ops.device[i], f"{ops.kind[i].value}{ops.microbatch[i]}",
                ha="center", va="center", fontsize=6, color="white" if ops.chunk[i] == 0 else "black", clip_on=True)


def _title(title: str, note: str) -> str:
    return f"{title}\n({note})" if note else title
