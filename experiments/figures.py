"""Figures of the reproduction, drawn from the result CSV files (Fig. 3-6, Table I, CP-SAT)
or, for the pictures of single schedules (Fig. 1, Fig. 2), from the public API.

    python -m experiments.figures [--results results] [NAME ...]

NAME: fig1 fig2 fig3 fig4 fig5 fig6 table1 cpsat (default: all whose CSV exists).
Each writes ``<results>/<name>.png`` (Table I also ``table1_hanayo.md``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from experiments import common

HERE = Path(__file__).resolve().parent

COLOURS = {"gpipe": "tab:blue", "1f1b": "tab:orange", "chimera": "tab:green", "hanayo": "tab:red",
           "chimera-asym": "tab:purple", "chimera-fd": "tab:olive", "cpsat": "black"}
# distinct markers and dashes, so that coinciding curves (GPipe and 1F1B) stay visible
STYLE = {"gpipe": ("o", "-"), "1f1b": ("s", "--"), "chimera": ("^", "-"), "hanayo": ("D", "-."),
         "chimera-asym": ("v", "--"), "chimera-fd": ("P", "--")}


def _line(ax, x, y, name, label=None, dashed=False, **kw):
    marker, ls = STYLE.get(name, ("o", "-"))
    ax.plot(x, y, marker=None if dashed else marker, ls=":" if dashed else ls, color=COLOURS.get(name),
            label=label or name, ms=5, mfc="none" if name == "1f1b" else None, **kw)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _log2_x(ax, values) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(values), [str(v) for v in sorted(values)])


# ---- pictures of single schedules ------------------------------------------------------------


def fig1(results: Path, stages: int = 4, microbatches: int = 8) -> Path:
    """Fig. 1-like: the tables (devices x slots, T_F = 1, T_B = 2) of the known schedules."""
    from pipetab.plot import plot_table
    from pipetab.schedules import registry
    from pipetab.schedules.table import SlotDurations, layout

    plt = _plt()
    names = ["gpipe", "1f1b", "chimera", "hanayo"]
    fig, axes = plt.subplots(len(names), 1, figsize=(12, 2.0 * len(names) + 0.5))
    for ax, name in zip(axes, names):
        sched = registry.generate(name, stages, microbatches)
        table = layout(sched, SlotDurations(1, 2))
        plot_table(table, ax, title=f"{name}  S={stages} B={microbatches}  ({table.makespan} slots)")
    return _save(fig, results / "fig1_tables.png")


def fig2(results: Path, name: str = "chimera", stages: int = 4, microbatches: int = 8,
         system: str = "mid_nw_mid_cp") -> Path:
    """Fig. 2-like: the simulated timeline of one schedule on one system, drawn from the
    execution graph (transfers as arrows, optimizer steps grey); also a Chrome trace."""
    from pipetab.plot import plot_timeline
    from pipetab.schedules import registry
    from pipetab.solver.pricing import hardware_costs
    from pipetab.solver.simulate import simulate
    from pipetab.solver.trace import write_chrome_trace

    plt = _plt()
    sched = registry.generate(name, stages, microbatches)
    sim = simulate(sched, hardware_costs(sched, system, "paper_gpt"))
    fig, ax = plt.subplots(figsize=(12, 3.2))
    plot_timeline(sim, ax, title=f"{name} S={stages} B={microbatches} on {system}: "
                  f"T_sim {sim.makespan:.1f} s, idle {sim.idle_ratio:.1%}")
    write_chrome_trace(sim, str(results / "fig2_timeline.trace.json"))
    return _save(fig, results / "fig2_timeline.png")


# ---- from result files ---------------------------------------------------------------------------


def _per_stage_panels(d, draw, ylabel: str, title, yscale: str | None = None, legend: dict | None = None):
    """One panel per S over B: ``draw(ax, name, rows)`` plots one schedule's rows."""
    plt = _plt()
    stages = sorted(d.stages.unique())
    fig, axes = plt.subplots(1, len(stages), figsize=(6 * len(stages), 4), squeeze=False)
    for ax, S in zip(axes[0], stages):
        for name, g in d[d.stages == S].groupby("schedule", sort=False):
            draw(ax, name, g.sort_values("microbatches"))
        _log2_x(ax, d.microbatches.unique())
        if yscale:
            ax.set_yscale(yscale, base=2)
        ax.set_xlabel("microbatches B")
        ax.set_ylabel(ylabel)
        ax.set_title(title(S))
        ax.legend(**(legend or {}))
    return fig


def fig3(results: Path) -> Path:
    """Bubble ratio, formula (dotted) vs table (markers), over B; one panel per S."""

    def draw(ax, name, g):
        _line(ax, g.microbatches, g.table_bubble_ratio, name, f"{name} table")
        _line(ax, g.microbatches, g.formula_bubble_ratio, name, f"{name} formula", dashed=True)

    fig = _per_stage_panels(common.read(results, "fig3_bubble"), draw, "bubble ratio",
                            lambda S: f"S={S}: formula (dotted) vs table (markers), T_B = 2 T_F",
                            legend={"fontsize": 7, "ncol": 2})
    return _save(fig, results / "fig3_bubble.png")


def fig4(results: Path) -> Path:
    """T_sim (top) and idle ratio (bottom) vs B at S=8, one column per system; when the
    CP-SAT results exist, its best schedule over the placements without a memory cap,
    re-simulated on the real-valued costs (star), and the smallest lower bound valid for the
    real-valued problem (red bar; proven with durations rounded down to ticks)."""
    plt = _plt()
    d = common.read(results, "fig4_runtime")
    try:
        cp = common.cpsat_cases(common.read(results, "cpsat_fig4"))
    except FileNotFoundError:
        cp = None
    systems = list(dict.fromkeys(d.system))
    fig, axes = plt.subplots(2, len(systems), figsize=(5 * len(systems), 7), squeeze=False)
    for j, system in enumerate(systems):
        g = d[d.system == system]
        for name, h in g.groupby("schedule", sort=False):
            h = h.sort_values("microbatches")
            _line(axes[0][j], h.microbatches, h.simulation_makespan_s, name)
            _line(axes[1][j], h.microbatches, h.simulation_idle_ratio, name)
        for i in range(2):
            _log2_x(axes[i][j], d.microbatches.unique())
            axes[i][j].set_xlabel("microbatches B")
        if cp is not None:
            real = "cpsat_real_s" if cp["cpsat_real_s"].notna().any() else "cpsat_s"
            lbcol = "bound_real_s" if cp["bound_real_s"].notna().any() else "bound_s"
            c = cp[(cp.system == system) & (cp.cap == "none")].dropna(subset=[real])
            if not c.empty:
                best = c.groupby("microbatches").agg(t=(real, "min"), lb=(lbcol, "min"))
                axes[0][j].plot(best.index, best.t, "*", color="black", ms=10, label="CP-SAT schedule")
                axes[0][j].plot(best.index, best.lb, "_", color="red", ms=16, mew=2.5,
                                label="proven lower bound")
        axes[0][j].set_title(f"{system} ({common.SYSTEM_ROLE.get(system, '')})")
        axes[0][j].set_ylabel("T_sim (s)")
        axes[1][j].set_ylabel("idle ratio")
        axes[0][j].legend(fontsize=8)
    return _save(fig, results / "fig4_runtime.png")


def fig5(results: Path) -> Path:
    """Peak per-device activation memory (TiB) vs B, one panel per S."""

    def draw(ax, name, g):
        _line(ax, g.microbatches, g.simulation_peak_activation_bytes / 2**40, name)

    fig = _per_stage_panels(common.read(results, "fig5_memory"), draw,
                            "peak activation memory per device (TiB)", lambda S: f"S={S}", yscale="log")
    return _save(fig, results / "fig5_memory.png")


def fig6(results: Path) -> Path:
    """T_sim(chimera-asym) / T_sim(chimera) vs B, one line per system, one panel per S."""
    plt = _plt()
    r = common.asym_ratio(common.read(results, "fig6_asym"))
    stages = sorted(r.stages.unique())
    fig, axes = plt.subplots(1, len(stages), figsize=(6 * len(stages), 4.2), squeeze=False)
    for ax, S in zip(axes[0], stages):
        for system, g in r[r.stages == S].groupby("system", sort=False):
            g = g.sort_values("microbatches")
            ax.plot(g.microbatches, g.ratio, "-o", ms=3, label=system)
        ax.axhline(1.0, color="0.5", lw=0.8)
        _log2_x(ax, r.microbatches.unique())
        ax.set_xlabel("microbatches B")
        ax.set_ylabel("T_sim(chimera-asym) / T_sim(chimera)")
        ax.set_title(f"S={S}")
        ax.legend(fontsize=6, ncol=2)
    return _save(fig, results / "fig6_asym.png")


def table1(results: Path) -> Path:
    """Table I as Markdown: Hanayo (W = 1, and every other wave count run) vs Chimera at
    (8, 8) on every system."""
    lines = common.table1_markdown(common.read(results, "table1_hanayo"))
    path = results / "table1_hanayo.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def cpsat(results: Path) -> Path:
    """One panel per system; per (B, cap): the known schedules (light bars, cross-hatched
    when over the cap), CP-SAT's best schedule per placement (dark bars, "lin" / "bid") and
    its proven lower bound (red tick), all on the quantized costs, in seconds."""
    plt = _plt()
    from matplotlib.patches import Patch

    cases = common.cpsat_cases(common.read(results, "cpsat_fig4"))
    systems = list(dict.fromkeys(cases.system))
    fig, axes = plt.subplots(1, len(systems), figsize=(5.2 * len(systems), 4.2), squeeze=False)
    names = []
    for ax, system in zip(axes[0], systems):
        sub = cases[cases.system == system]
        groups = list(dict.fromkeys(zip(sub.microbatches, sub.cap)))
        for j, (B, cap) in enumerate(groups):
            g = sub[(sub.microbatches == B) & (sub.cap == cap)]
            bars = []
            for r in g.itertuples():
                bars += [("known", n, t, fits) for n, t, fits in r.known]
                bars.append(("cpsat", r.placement, r.cpsat_s, r.bound_s))
            width = 0.8 / max(1, len(bars))
            for k, (kind, name, t, extra) in enumerate(bars):
                x = j - 0.4 + (k + 0.5) * width
                if t is None or pd.isna(t):
                    continue
                if kind == "known":
                    names.append(name)
                    ax.bar(x, t, width, color=COLOURS.get(name), alpha=0.5, hatch=None if extra else "xx")
                else:
                    ax.bar(x, t, width, color="0.25")
                    if extra is not None and not pd.isna(extra):
                        ax.plot([x - width / 2, x + width / 2], [extra] * 2, color="red", lw=2.5)
                    ax.text(x, t, name[:3], ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(groups)), [f"B={b}\ncap={c}" for b, c in groups], fontsize=8)
        ax.set_title(f"{system} ({common.SYSTEM_ROLE.get(system, '')})", fontsize=9)
        ax.set_ylabel("makespan, quantized costs (s)")
    handles = [Patch(color=COLOURS.get(n), alpha=0.5, label=f"{n} (known)") for n in dict.fromkeys(names)]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="xx", label="known, over the cap"),
                Patch(color="0.25", label="CP-SAT best (lin / bid placement)"),
                Patch(color="red", label="proven lower bound")]
    axes[0][0].legend(handles=handles, fontsize=7)
    fig.suptitle("CP-SAT beside the known schedules (Fig. 4 setting, S=8)", fontsize=10)
    return _save(fig, results / "cpsat_fig4.png")


FIGURES = {"fig1": fig1, "fig2": fig2, "fig3": fig3, "fig4": fig4, "fig5": fig5, "fig6": fig6,
           "table1": table1, "cpsat": cpsat}
NEEDS = {"fig3": "fig3_bubble", "fig4": "fig4_runtime", "fig5": "fig5_memory", "fig6": "fig6_asym",
         "table1": "table1_hanayo", "cpsat": "cpsat_fig4"}


def draw(results: Path, names: list[str] | None = None) -> list[Path]:
    """Draw the named figures (default: every one whose CSV exists); returns the files."""
    out = []
    for name in names or list(FIGURES):
        need = NEEDS.get(name)
        if need and not (results / f"{need}.csv").exists():
            if names:
                raise SystemExit(f"figures: {results / (need + '.csv')} is missing; run the sweep first")
            continue
        out.append(FIGURES[name](results))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.figures", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=" ".join(FIGURES))
    ap.add_argument("--results", default="results", type=Path)
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in FIGURES]
    if unknown:
        ap.error(f"unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}")
    args.results.mkdir(parents=True, exist_ok=True)
    for p in draw(args.results, args.names or None):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
