"""Pictures: legends, axis units, one colour per kind and pipeline, and long runs drawn as
per-bin shares that add up to each device's busy time."""

from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pipetab.hardware.context import Context  # noqa: E402
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
    plot_table(table, ax, aggregate=True)
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


def test_a_long_timeline_shows_warm_up_steady_state_and_cool_down_at_readable_scale(ax):
    """1F1B with 512 microbatches: three windows at one scale, each op in them drawn once
    and labelled with kind and microbatch where it is wide enough, one legend."""
    sched = generate("1f1b", 4, 512)
    sim = simulate(sched, hardware_costs(sched, "dgx_h100_ib", "llama3_8b", Context(microbatch_size=1)))
    ax.figure.set_size_inches(14, 4)
    plot_timeline(sim, ax)
    panels = ax.child_axes
    assert [p.get_title() for p in panels] == ["warm-up", "steady state (middle of the step)", "cool-down"]
    assert "the warm-up, one steady-state window and the cool-down" in ax.get_title()
    spans = [p.get_xlim()[1] - p.get_xlim()[0] for p in panels]
    assert spans[0] == pytest.approx(spans[1]) == pytest.approx(spans[2])  # the same scale
    scale = 1.0 if sim.makespan >= 10 else 1e3  # seconds, or ms for steps under 10 s
    assert panels[0].get_xlim()[0] == 0 and panels[2].get_xlim()[1] == pytest.approx(sim.makespan * scale)
    assert legend_labels(ax) == ["forward", "backward", "optimizer step"]
    for p in panels:
        t0, t1 = p.get_xlim()
        inside = sum(1 for op, s in sim.start.items() if s * scale < t1 and sim.end[op] * scale > t0)
        assert sum(len(c.get_paths()) for c in p.collections) == inside > 0
    warm = {t.get_text() for t in panels[0].texts}
    assert {"F0", "B0"} <= warm  # microbatch numbers on the ops
    assert "B511" in {t.get_text() for t in panels[2].texts}


def test_each_chunk_of_a_device_has_its_own_shade(ax):
    sched = generate("interleaved", 4, 8, chunks=3)
    sim = simulate(sched, hardware_costs(sched, "mid_nw_mid_cp", "tiny_gpt"))
    ax.figure.set_size_inches(14, 4)
    plot_timeline(sim, ax)
    labels = legend_labels(ax)
    assert labels[:3] == ["forward (chunk 0)", "forward (chunk 1)", "forward (chunk 2)"]
    faces = {tuple(np.round(c.get_facecolor()[0], 3)) for c in ax.collections}
    assert len(faces) == 6  # 2 kinds x 3 chunks, all different
    assert "B0" in {t.get_text() for t in ax.texts}  # microbatch numbers where the op is wide enough


def test_plan_pareto_plot_names_shapes_and_keeps_its_legend_off_the_data(ax):
    from pipetab.plan import plan, plan_question
    from pipetab.plan.plot import plot_plan

    result = plan(plan_question("llama3_8b", 1, 8, 64, cpsat_shapes=0))
    plot_plan(result, ax)
    best = result.configurations[0]
    texts = [t.get_text() for t in ax.texts]
    s = best.shape
    assert any(t.startswith(f"best: {best.label}\nPP{s.pp} TP{s.tp} DP{s.dp} b{s.microbatch_size}") for t in texts)
    assert sum(t.count("PP") for t in texts) >= 2  # the Pareto front's shapes, not only the best's
    legend = ax.get_legend()
    anchor = legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    assert anchor.x0 >= 1.0  # beside the axes, not over the points
    names = {c.label for c in result.evaluated}
    assert names <= set(legend_labels(ax))
    markers = {tuple(c.get_paths()[0].vertices.round(2).flatten()) for c in ax.collections if len(c.get_offsets())}
    assert len(markers) >= min(len(names), 5)  # shapes of markers differ, not only colours
