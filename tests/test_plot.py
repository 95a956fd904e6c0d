"""Pictures: legends, axis units, one colour per kind and pipeline, and long runs drawn as
per-bin shares that add up to each device's busy time."""

from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipetab.plot import colour, plot_table, plot_timeline  # noqa: E402
from pipetab.schedules.ops import Kind  # noqa: E402
from pipetab.schedules.registry import generate  # noqa: E402
from pipetab.schedules.table import layout  # noqa: E402
from pipetab.solver.pricing import hardware_costs  # noqa: E402
from pipetab.solver.simulate import simulate  # noqa: E402


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def legend_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_timeline_has_legend_units_and_colours_per_kind_and_pipeline(ax):
    sched = generate("chimera", 4, 8)
    sim = simulate(sched, hardware_costs(sched, "mid_nw_mid_cp", "paper_gpt"))
    plot_timeline(sim, ax)
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "device"
    assert legend_labels(ax)[:4] == ["forward (pipeline 0)", "forward (pipeline 1)", "backward (pipeline 0)",
                                     "backward (pipeline 1)"]
    assert "message" in legend_labels(ax)
    faces = {tuple(np.round(c.get_facecolor()[0], 3)) for c in ax.collections}
    expected = {tuple(np.round(matplotlib.colors.to_rgba(colour(k, p)), 3)) for k in (Kind.F, Kind.B) for p in (0, 1)}
    assert faces == expected  # one colour for each kind and pipeline, nothing else
    assert sum(len(c.get_paths()) for c in ax.collections) == 4 * 8 * 2  # every op once


def test_long_table_is_drawn_as_shares_that_add_up_to_busy_time(ax):
    sched = generate("1f1b", 4, 512)
    table = layout(sched)
    plot_table(table, ax)
    assert "share of each" in ax.get_title() and "idle" in legend_labels(ax) and ax.get_xlabel() == "time (slots)"
    busy = np.zeros(4)
    for c in ax.collections:
        for path in c.get_paths():
            xs, ys = path.vertices[:4, 0], path.vertices[:4, 1]
            row = round(ys.min())  # a row's bars stack from device - 0.4 to at most device + 0.4
            busy[row] += (xs.max() - xs.min()) * (ys.max() - ys.min()) / 0.8
    expected = [sum(e.duration for e in table.entries if e.device == d) for d in range(4)]
    assert busy == pytest.approx(expected, rel=1e-9)


def test_a_window_zooms_to_single_ops(ax):
    table = layout(generate("1f1b", 4, 512))
    plot_table(table, ax, window=(100, 130))
    assert "share" not in ax.get_title() and ax.get_xlim() == (100, 130)
    in_window = sum(1 for e in table.entries if e.end > 100 and e.start < 130)
    assert sum(len(c.get_paths()) for c in ax.collections) == in_window
    with pytest.raises(ValueError, match="window"):
        plot_table(table, ax, window=(5, 5))
