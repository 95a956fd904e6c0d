"""``make demo``: the main job on a realistic default.

1. ``plan``: Llama 3 70B on 4 nodes of 8 H100, global batch 1024 sequences of 8192 tokens —
   the (PP, TP, DP) split, microbatch size, recomputation and schedule ranked by simulated
   step time, with a Pareto picture;
2. the best configuration at the three levels (formula, table, simulation), with its
   simulated timeline;
3. the CP-SAT model on a small idealized instance (search and bound).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipetab.cli.plan_cmd import print_plan
from pipetab.console import Progress
from pipetab.demo_cpsat import run as run_cpsat
from pipetab.plan import plan, plan_question


def _levels(conf) -> None:
    doc = conf.levels.as_dict()
    f, t, s = doc["formula"], doc["table"], doc["simulation"]
    gib = 2**30
    from pipetab.console import say
    print(f"{conf.label} on PP{conf.shape.pp} TP{conf.shape.tp} DP{conf.shape.dp}, "
          f"{conf.shape.microbatches} microbatches of {conf.shape.microbatch_size}, step {conf.step_time_s:.1f} s")
    if conf.sample_microbatches:
        say(f"(the levels of its first {conf.sample_microbatches} microbatches: the periodic run the step of all "
            f"{conf.shape.microbatches} is extrapolated from, exactly)", " ")
    print(f"  formula     bubble {'-' if f is None or f['bubble_ratio'] is None else format(f['bubble_ratio'], '.4f')}")
    print(f"  table       bubble {t['bubble_ratio']:.4f}, makespan {t['makespan_slots']:g} slots")
    say(f"  simulation  idle {s['idle_ratio']:.4f}, step {s['makespan_s']:.1f} s, exposed messages "
        f"{s['exposed_comm_s']:.2f} s, peak memory per GPU {max(s['peak_memory_bytes']) / gib:.1f} GiB "
        f"of {s['capacity_bytes'][0] / gib:.1f} GiB usable", " " * 14)


def _pictures(result, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib not installed: no pictures)")
        return
    from pipetab.plan.plot import plot_plan
    from pipetab.plot import plot_timeline

    fig, ax = plt.subplots(figsize=(10, 6))
    plot_plan(result, ax=ax)
    fig.tight_layout()
    fig.savefig(out / "plan.png", dpi=110)
    plt.close(fig)
    best = result.configurations[0]
    sim, shape = best.levels.simulation, best.shape
    fig, ax = plt.subplots(figsize=(14, 2.6 + 0.5 * shape.pp))
    plot_timeline(sim, ax=ax, transfers=False,  # a long run: warm-up, steady state and cool-down at real scale
                  title=f"best: {best.label}, PP{shape.pp} TP{shape.tp} DP{shape.dp}, "
                        + (f"the first {best.sample_microbatches} of " if best.sample_microbatches else "")
                        + f"{shape.microbatches} microbatches of {shape.microbatch_size}")
    fig.tight_layout()
    fig.savefig(out / "best_timeline.png", dpi=110)
    plt.close(fig)
    from pipetab.view.plan_page import write_plan_page

    write_plan_page(out / "plan.html", result)
    print(f"\nwrote {out / 'plan.png'} (the Pareto picture),\n      {out / 'best_timeline.png'} (the best's timeline "
          f"at real scale),\n      {out / 'plan.html'} (the plan as a page: sortable table, Pareto plot, timelines)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipetab.demo")
    ap.add_argument("--model", default="llama3_70b")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--global-batch", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--out", default="results/demo")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    print(f"== 1. pipetab plan --model {args.model} --nodes {args.nodes} --gpus-per-node {args.gpus_per_node} "
          f"--gpu {args.gpu}\n        --global-batch {args.global_batch} --seq {args.seq}\n")
    with Progress("  plan") as progress:
        result = plan(plan_question(args.model, args.nodes, args.gpus_per_node, args.global_batch, args.gpu,
                                    args.seq), progress=progress)
    print_plan(result)
    if not result.configurations:
        return 0
    print("\n== 2. The best configuration at the three levels\n")
    _levels(result.configurations[0])
    _pictures(result, out)
    run_cpsat()
    print("\n== 4. The paper's experiments, small version: experiments/reproduce.py --quick (next)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
