"""Why interleaved placements under a cap of S activations with messages stay open (issue 28,
item 4): the pace Little's law allows against the least periods CP-SAT proves, per block.

Interleaved (2S stages on S devices), whole backward, per chunk F = 1 tick, B = 2 and a
message of 1 (the placement set's F:B = 1:2 with a message; a slot is 2 ticks); a cap of S
activations, 2S chunk activations. For each S the script writes:

- ``little``: the per-microbatch pace the activation-area bound allows (device 0's sum of
  chunk-activation size x least lifetime over its cap), in ticks, and ``load``: a device's
  work per microbatch;
- per block k, the least period per microbatch CP-SAT finds (``period``) and proves
  (``bound``: no periodic schedule of block k is shorter) for periodic schedules of block k;
- on S = 4, the full model's makespan found (``period``) and proven (``bound``) at B = 8 and
  16, in ticks, beside the analytic bound of all schedules (``analytic``).

A bound of all schedules can use Little's law only; the periodic bounds say what no periodic
schedule of that block beats, not what every schedule needs. Where CP-SAT proves the
optimum, it is ``little`` x B plus the fill and drain at a pace above ``little``: the bound
misses the waits that colliding microbatches force.

With ``--relaxation`` (issue 45 item 1) it writes instead, per instance (S = 4, B = 16 and
32; issue 28's misses S = 16/32, B = 8S/16S), the analytic bound, the device relaxation's
(``model.device_relaxation``: device 0's ops whole under its cap, every other device free,
proven by CP-SAT in ``--time-limit`` seconds), and the gaps before and after against
``best``, the best makespan a search finds in the same time, all in ticks.

Run: python -m experiments.interleaved_pace [--out docs/bench/interleaved_pace.csv]
     python -m experiments.interleaved_pace --relaxation [--quick] --out docs/bench/interleaved_relaxation.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.model.bounds import makespan_lower_bound
from pipetab.solver.cpsat.model.cyclic import per_microbatch_work
from pipetab.solver.cpsat.model.device_relaxation import relaxation_bound
from pipetab.solver.cpsat.phases.cyclic import block_period


def problem(S: int, B: int):
    return idealized_problem(S, B, "interleaved", forward=1, backward=2, comm=1, activation_cap=S)


def little_and_load(p) -> tuple[float, int]:
    """Little's law's pace on the tightest capped device, and the largest device load."""
    load, held = per_microbatch_work(p, p.fixed_placement)
    pace = max(held[0][d] / p.cap(d) for d in range(p.num_devices))
    return pace, max(load[0])


def rows(limit: float, blocks: tuple[int, ...], sizes: tuple[int, ...]):
    for S in sizes:
        p = problem(S, 8 * S)
        little, load = little_and_load(p)
        for k in blocks:
            cfg = CpSatConfig(time_limit_s=limit, workers=2)
            t = time.perf_counter()
            out = block_period(p, p.fixed_placement, k, cfg, cfg.deadline())
            yield {"S": S, "what": f"periodic, block {k}", "B": None, "little": round(little, 4), "load": load,
                   "period": None if out.period is None else round(out.period / k, 4),
                   "bound": round(out.bound / k, 4), "analytic": None,
                   "seconds": round(time.perf_counter() - t, 1)}
    for B in (8, 16):
        p = problem(4, B)
        little, load = little_and_load(p)
        t = time.perf_counter()
        res = search(p, CpSatConfig(time_limit_s=4 * limit, workers=2))
        yield {"S": 4, "what": f"all schedules, {res.status}", "B": B, "little": round(little, 4), "load": load,
               "period": res.makespan, "bound": res.lower_bound,
               "analytic": makespan_lower_bound(p, p.fixed_placement)[0],
               "seconds": round(time.perf_counter() - t, 1)}


SIZES = ((4, 16), (4, 32), (16, 128), (16, 256), (32, 256), (32, 512))


def relaxation_rows(limit: float, quick: bool):
    """Per size: the best schedule a search finds in ``limit`` s, the analytic bound and the
    device relaxation's bound of device 0 (ticks)."""
    for S, B in SIZES[:2] if quick else SIZES:
        p = problem(S, B)
        before = makespan_lower_bound(p, p.fixed_placement)[0]
        cfg = CpSatConfig(time_limit_s=limit, workers=2)
        best = search(p, cfg).makespan
        t = time.perf_counter()
        after = relaxation_bound(p, p.fixed_placement, (0,), cfg, limit, lower=before)
        yield {"S": S, "B": B, "best": best, "analytic": before, "relaxation": after,
               "gap_before": round((best - before) / best, 4),
               "gap_after": round((best - max(before, after)) / best, 4),
               "seconds": round(time.perf_counter() - t, 1)}


def write_rows(out: Path, made, fields: list[str] | None = None) -> None:
    """Write ``made``'s rows to ``out`` as they come, each with the load average, printing
    each (``fields``: the columns, else the first row's keys and the load)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = None
        for row in made:
            row["load_1min"] = round(os.getloadavg()[0], 2)
            if w is None:
                w = csv.DictWriter(fh, fieldnames=fields or list(row))
                w.writeheader()
            w.writerow(row)
            fh.flush()
            print(row, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per block size (default 20)")
    ap.add_argument("--out", default="results/interleaved_pace.csv")
    ap.add_argument("--relaxation", action="store_true", help="the device relaxation's rows (issue 45)")
    ap.add_argument("--quick", action="store_true", help="with --relaxation: S = 4 only")
    args = ap.parse_args(argv)
    if args.quick and not args.relaxation:
        ap.error("--quick applies only with --relaxation")
    fields = ["S", "what", "B", "little", "load", "period", "bound", "analytic", "seconds", "load_1min"]
    if args.relaxation:
        fields = ["S", "B", "best", "analytic", "relaxation", "gap_before", "gap_after", "seconds", "load_1min"]
    made = relaxation_rows(args.time_limit, args.quick) if args.relaxation else \
        rows(args.time_limit, (1, 2, 3, 4), (4, 8, 16))
    write_rows(Path(args.out), made, fields)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
