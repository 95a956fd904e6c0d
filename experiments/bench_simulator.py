"""Benchmark of the level-3 simulator (issue: 1F1B at S=64, B=1024 in <= 0.5 s on 2 cores).

Prints a table: schedule, S, B, compute ops, what was timed, median seconds over repeats.
Generation and cost construction are timed separately from the simulation itself.
Run: python -m experiments.bench_simulator [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from pipetab.schedules.evaluate import asap
from pipetab.schedules.registry import generate
from pipetab.schedules.table import SlotDurations
from pipetab.solver.costs import hardware_costs, slot_costs
from pipetab.solver.simulate import simulate


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = []
    S, B = 64, 1024
    t_gen, sched = timed(lambda: generate("1f1b", S, B), 1)
    rows.append(("1f1b", S, B, sched.num_ops, "generate schedule", t_gen, ""))
    costs = slot_costs(sched, SlotDurations(1, 2), comm_slots=1)
    t, sim = timed(lambda: simulate(sched, costs), args.repeats)
    rows.append(("1f1b", S, B, sched.num_ops, "simulate (slot costs, 1-slot messages)", t, f"T={sim.makespan:g} slots"))
    t, sim = timed(lambda: simulate(sched, replace(costs, contention=True)), args.repeats)
    rows.append(("1f1b", S, B, sched.num_ops, "simulate with link contention", t, f"T={sim.makespan:g} slots"))
    t, timing = timed(lambda: asap(sched, costs.duration, lambda q, o, x: 1 if x else 0), args.repeats)
    rows.append(("1f1b", S, B, sched.num_ops, "ASAP evaluator (schedules.evaluate)", t, f"T={timing.makespan:g} slots"))
    for name, S2, B2 in (("gpipe", 64, 1024), ("chimera", 64, 1024), ("hanayo", 8, 256)):
        sch = generate(name, S2, B2)
        c = slot_costs(sch, SlotDurations(1, 2), comm_slots=1)
        t, sim = timed(lambda: simulate(sch, c), args.repeats)
        rows.append((name, S2, B2, sch.num_ops, "simulate (slot costs)", t, f"T={sim.makespan:g} slots"))
    sch = generate("chimera", 8, 256)
    t_c, hc = timed(lambda: hardware_costs(sch, "mid_nw_mid_cp", "paper_gpt"), 1)
    t, sim = timed(lambda: simulate(sch, hc), args.repeats)
    rows.append(("chimera", 8, 256, sch.num_ops, "simulate (paper_gpt on mid_nw_mid_cp)", t, f"T={sim.makespan:.2f} s (costs {t_c:.3f} s)"))
    print(f"{'schedule':<9} {'S':>3} {'B':>5} {'ops':>7}  {'what':<40} {'median s':>9}  note")
    for name, s, b, n, what, t, note in rows:
        print(f"{name:<9} {s:>3} {b:>5} {n:>7}  {what:<40} {t:>9.3f}  {note}")
    target = next(r for r in rows if r[4].startswith("simulate (slot costs, 1-slot"))
    verdict = "meets" if target[5] <= 0.5 else "MISSES"
    print(f"\n1F1B S=64 B=1024 simulation: {target[5]:.3f} s — {verdict} the 0.5 s target")


if __name__ == "__main__":
    main()
