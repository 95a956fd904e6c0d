"""``make demo``: the main job on built-in defaults.

1. the seed schedules at S=8, B=16 as tables (F=1, B=2 slots) with formula and table levels;
2. the three levels side by side on the paper's balanced system, and a timeline picture;
3. the CP-SAT model: a searched schedule and a proven lower bound beside the known ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipetab.schedules import formats, registry
from pipetab.schedules.metrics import table_metrics
from pipetab.schedules.table import SlotDurations, layout
from pipetab.demo_cpsat import run as run_cpsat

SEEDS = [("gpipe", {}), ("1f1b", {}), ("chimera", {}), ("hanayo", {"waves": 1}), ("chimera-asym", {"split": (1, 2)})]


def _levels(stages: int, microbatches: int, system: str, model: str) -> list[dict]:
    from pipetab.solver.costs import hardware_costs
    from pipetab.solver.simulate import simulate

    rows = []
    for name, opts in SEEDS:
        try:
            schedule = registry.generate(name, stages, microbatches, **opts)
        except ValueError as exc:
            print(f"  {name}: skipped ({exc})")
            continue
        table = layout(schedule, SlotDurations(1, 2))
        m = table_metrics(table, schedule)
        f = registry.formula(name, stages, microbatches, **opts)
        sim = simulate(schedule, hardware_costs(schedule, system, model))
        rows.append({
            "schedule": name, "formula_bubble": f.bubble_ratio, "table_bubble": m.bubble_ratio,
            "makespan_slots": m.makespan_slots, "sim_idle": sim.idle_ratio, "T_sim_s": sim.makespan,
            "peak_act_TiB": max(sim.peak_activation) / 2**40, "peak_mem_TiB": max(sim.peak_memory) / 2**40,
            "fits": all(sim.fits_memory), "_sim": sim, "_table": table,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipetab.demo")
    ap.add_argument("--stages", type=int, default=8)
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--system", default="mid_nw_mid_cp")
    ap.add_argument("--model", default="paper_gpt")
    ap.add_argument("--out", default="results/demo")
    ap.add_argument("--no-tables", action="store_true", help="skip printing the full tables")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    S, B = args.stages, args.microbatches

    print(f"== 1. Seed schedules at S={S}, B={B} as tables (forward 1 slot, backward 2 slots)\n")
    rows = _levels(S, B, args.system, args.model)
    for r in rows:
        if not args.no_tables:
            print(f"-- {r['schedule']}")
            sys.stdout.write(formats.to_text(r["_table"]))
            print()
    print(f"== 2. Three levels side by side on {args.system} with {args.model}\n")
    head = f"{'schedule':<13} {'formula':>8} {'table':>7} {'slots':>6} {'sim idle':>9} {'T_sim (s)':>10} {'peak act TiB':>13} {'peak mem TiB':>13} fits"
    print(head)
    print("-" * len(head))
    for r in rows:
        fb = "-" if r["formula_bubble"] is None else f"{r['formula_bubble']:.3f}"
        print(f"{r['schedule']:<13} {fb:>8} {r['table_bubble']:>7.3f} {r['makespan_slots']:>6} "
              f"{r['sim_idle']:>9.3f} {r['T_sim_s']:>10.2f} {r['peak_act_TiB']:>13.3f} {r['peak_mem_TiB']:>13.3f} "
              f"{'yes' if r['fits'] else 'no'}")
    print("\n(formula/table: bubble ratio; sim idle: simulated idle ratio; memory with no recomputation,"
          " as in the paper's Fig. 5 — far beyond one device's 80 GB)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from pipetab.plot import plot_table, plot_timeline

        fig, axes = plt.subplots(len(rows), 1, figsize=(14, 2.6 * len(rows)))
        for ax, r in zip(axes, rows):
            plot_timeline(r["_sim"], ax=ax, title=f"{r['schedule']} on {args.system}", transfers=False)
        fig.tight_layout()
        fig.savefig(out / "timelines.png", dpi=110)
        plt.close(fig)
        fig, axes = plt.subplots(len(rows), 1, figsize=(14, 2.6 * len(rows)))
        for ax, r in zip(axes, rows):
            plot_table(r["_table"], ax=ax, title=r["schedule"], labels=False)
        fig.tight_layout()
        fig.savefig(out / "tables.png", dpi=110)
        plt.close(fig)
        print(f"\npictures: {out / 'tables.png'}, {out / 'timelines.png'}")
    except ImportError:
        print("\n(matplotlib not installed: no pictures)")
    run_cpsat()
    print("\n== 4. The paper's experiments, small version: experiments/reproduce.py --quick (next)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
