"""Benchmark of the CP-SAT model: search + bound on idealized instances.

Grid: S in {4, 8, 16}, B in {S, 2S, 4S}, activation caps {S, 2S, none}, F=1, K=2,
C in {0, 1}, linear and bidirectional placement (plus, unless --quick or --no-systems,
1F1B-shaped problems on two of the paper's systems, quantized). Per instance: time to the
first schedule (a known or greedy one; the solver's own first solution separately), time
to proof, final gap, and the best known schedule's makespan beside the bound. Then the
issue's three performance targets.

``--split-set`` runs issue 14's idealized set instead: S in {4, 8, 16}, B in {2S, 4S},
F:B:W in {1:1:1, 3:3:2, 3:4:2}, C in {0, 1}, caps {S, 2S} M_B, M_W/M in {1.0, 32/34 (the
transformer's with fused attention: 32sbh of the 34sbh a layer keeps, hardware.costs)},
linear placement, split backward, each with and without the registry's seeds (288 runs).
It appends to its CSV and skips the rows already there, so it can run in parts
(``--part I/N``: the I-th of N interleaved parts, each instance with both weight
memories and with and without seeds) and resume.

``--real-size`` runs issue 28's real-size set (``experiments.cpsat_real_set``): S in {8, 16,
32, 64}, B in {4S, 16S, 64S}, whole and split backward, linear and V placements, caps {S, 2S}
M_B, F:B:W in {1:2:0, 1:1:1, 3:4:2}, messages of 0 or 1 slot; 60 s per instance, stopping at a
proven gap of 1 %. ``--sample N``: the first N of a stratified order (every value of every
dimension about equally often); ``--part I/N``: the I-th of N interleaved parts of the whole
grid. Both append to their CSV and skip the instances already there (resumable).

Writes results/bench_cpsat.csv (results/bench_cpsat_split.csv, results/bench_cpsat_real.csv)
and prints a table.
Run: python -m experiments.bench_cpsat [--time-limit SEC] [--quick] [--workers N]
     [--only-targets] [--split-set [--part I/N]] [--real-size [--sample N | --part I/N]] [--out PATH]
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import ortools

from pipetab.schedules import registry
from pipetab.schedules.table import SlotDurations
from pipetab.solver.cpsat import CpSatConfig, Problem, Status, evaluate, idealized_problem, search
from pipetab.solver.pricing import hardware_costs, slot_costs

SPLIT_FIELDS = [
    "instance", "S", "B", "fbw", "C", "cap", "weight_memory", "seeds", "status", "makespan", "lower_bound", "gap",
    "best_start", "best_start_value", "time_to_first_s", "runtime_s", "time_limit_s", "workers", "ortools", "cores",
]
TRANSFORMER_WEIGHT_FRACTION = 32 / 34


def split_set():
    for S in (4, 8, 16):
        for B in (2 * S, 4 * S):
            for fbw in ((1, 1, 1), (3, 3, 2), (3, 4, 2)):
                for C in (0, 1):
                    for cap in (S, 2 * S):
                        for wm in (1.0, TRANSFORMER_WEIGHT_FRACTION):
                            for seeds in (True, False):
                                yield S, B, fbw, C, cap, wm, seeds


def _split_name(S, B, fbw, C, cap, wm, seeds) -> str:
    return f"S{S}-B{B}-fbw{':'.join(map(str, fbw))}-C{C}-cap{cap}-mw{wm:.4f}-{'seeds' if seeds else 'noseeds'}"


def run_split_set(limit: float, workers: int, out: Path, part: tuple[int, int]) -> None:
    """Issue 14's idealized split-backward set, appended row by row to ``out`` (rows
    already there are skipped)."""
    done = set()
    if out.exists():
        with out.open() as fh:
            done = {r["instance"] for r in csv.DictReader(fh)}
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not out.exists()
    with out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=SPLIT_FIELDS)
        if new:
            w.writeheader()
        for i, (S, B, fbw, C, cap, wm, seeds) in enumerate(split_set()):
            name = _split_name(S, B, fbw, C, cap, wm, seeds)
            if name in done or (i // 4) % part[1] != part[0]:
                continue
            problem = idealized_problem(S, B, forward=fbw[0], backward=fbw[1], weight=fbw[2], comm=C,
                                        activation_cap=cap, split_backward=True, weight_memory=wm)
            cfg = CpSatConfig(time_limit_s=limit, workers=workers, known_generators=seeds)
            res = search(problem, cfg)
            start = res.log.phases[0].note if res.log.phases else ""
            best = start.rsplit("best start ", 1)[-1].split() if "best start " in start else [None, None]
            row = {"instance": name, "S": S, "B": B, "fbw": ":".join(map(str, fbw)), "C": C, "cap": cap,
                   "weight_memory": round(wm, 4), "seeds": seeds, "status": res.status, "makespan": res.makespan,
                   "lower_bound": res.lower_bound, "gap": None if res.gap is None else round(res.gap, 5),
                   "best_start": best[0], "best_start_value": best[1],
                   "time_to_first_s": None if res.time_to_first_s is None else round(res.time_to_first_s, 3),
                   "runtime_s": round(res.runtime_s, 3), "time_limit_s": limit, "workers": workers,
                   "ortools": ortools.__version__, "cores": os.cpu_count()}
            w.writerow(row)
            fh.flush()
            print(f"{name:<52} {res.status:>10} {res.makespan!s:>6} {res.lower_bound!s:>6} "
                  f"{'-' if res.gap is None else f'{100 * res.gap:.2f}%':>7} {res.runtime_s:6.1f} s", flush=True)


TIME_LIMIT_CASES = (
    # (placement, S, B, time limit): issue 17's sizes; B = 8S (S=128: the issue's B=1024)
    ("linear", 16, 128, 5.0), ("linear", 32, 256, 5.0), ("linear", 64, 512, 5.0), ("linear", 128, 1024, 5.0),
    ("bidirectional", 32, 64, 10.0), ("bidirectional", 32, 256, 20.0),  # the last: issue 15
)


def run_time_limits(out: Path) -> None:
    """Wall time of whole ``pipetab search`` processes (cap S, C=1, text output as in the
    issue's command) against their limit."""
    import subprocess

    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["placement", "S", "B", "time_limit_s", "wall_s", "within", "status",
                                           "makespan", "lower_bound", "cores"])
        w.writeheader()
        for placement, S, B, limit in TIME_LIMIT_CASES:
            argv = [sys.executable, "-m", "pipetab.cli", "search", "-S", str(S), "-B", str(B), "--placement",
                    placement, "--activation-cap", str(S), "--comm-slots", "1", "--time-limit", str(limit)]
            t0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            m = re.search(r"status (\w+), makespan (\S+) slots, lower bound (\S+),", proc.stdout)
            row = {"placement": placement, "S": S, "B": B, "time_limit_s": limit, "wall_s": round(wall, 2),
                   "within": wall <= 1.1 * limit + 1.0, "status": m[1] if m else f"exit {proc.returncode}",
                   "makespan": m[2] if m else None, "lower_bound": m[3] if m else None, "cores": os.cpu_count()}
            w.writerow(row)
            print(row, flush=True)


FIELDS = [
    "instance", "placement", "S", "B", "cap", "C", "status", "makespan", "lower_bound", "gap",
    "time_to_first_s", "solver_first_s", "time_to_proof_s", "runtime_s", "best_known",
    "best_known_makespan", "best_known_gap", "1f1b_makespan", "analytic_bound", "families",
    "unit", "workers", "time_limit_s", "seed", "ortools", "cores",
]


def _first_solver_time(res) -> float | None:
    """Seconds into the run of the first solve that found a schedule (None: none did)."""
    t = sum(ph.wall_s for ph in res.log.phases if ph.name == "start")
    for ph in res.log.phases:
        if ph.name == "start":
            continue
        for r in ph.solves:
            if r.value is not None:
                return round(t + r.wall_s, 3)
            t += r.wall_s
    return None


def _row(name, placement, S, B, cap, C, res, config) -> dict:
    known = {k: v for k, v in res.known.items() if v.fits and v.makespan is not None}
    best_name = min(known, key=lambda k: known[k].makespan) if known else None
    return {
        "instance": name, "placement": placement, "S": S, "B": B,
        "cap": "none" if cap is None else cap, "C": C, "status": res.status,
        "makespan": res.makespan, "lower_bound": res.lower_bound,
        "gap": None if res.gap is None else round(res.gap, 5),
        "time_to_first_s": None if res.time_to_first_s is None else round(res.time_to_first_s, 3),
        "solver_first_s": _first_solver_time(res),
        "time_to_proof_s": round(res.runtime_s, 3) if res.status in (Status.OPTIMAL, Status.INFEASIBLE) else None,
        "runtime_s": round(res.runtime_s, 3),
        "best_known": best_name,
        "best_known_makespan": known[best_name].makespan if best_name else None,
        "best_known_gap": None if not best_name or known[best_name].gap is None else round(known[best_name].gap, 5),
        "1f1b_makespan": res.known["1f1b"].makespan if "1f1b" in res.known and res.known["1f1b"].fits else None,
        "analytic_bound": res.analytic_bound,
        "families": "+".join(res.solver.families),
        "unit": res.unit, "workers": config.workers, "time_limit_s": config.time_limit_s,
        "seed": config.random_seed, "ortools": ortools.__version__, "cores": os.cpu_count(),
    }


def idealized_grid(quick: bool, placements=("linear", "bidirectional")):
    sizes = (4, 8) if quick else (4, 8, 16)
    for placement in placements:
        for S in sizes:
            for B in (S, 2 * S, 4 * S):
                for cap in (S, 2 * S, None):
                    for C in (0, 1):
                        yield placement, S, B, cap, C


def run_idealized(config, quick: bool, rows: list, printer, placements=("linear", "bidirectional")) -> None:
    for placement, S, B, cap, C in idealized_grid(quick, placements):
        problem = idealized_problem(S, B, placement, forward=1, backward=2, comm=C, activation_cap=cap)
        res = search(problem, config)
        row = _row(f"{placement}-S{S}-B{B}-cap{cap}-C{C}", placement, S, B, cap, C, res, config)
        rows.append(row)
        printer(row)


def run_systems(config, rows: list, printer) -> None:
    """1F1B-shaped (linear) problems on two of the paper's systems, no memory cap, costs
    quantized to ticks of 1/10 of the shortest op."""
    for system in ("mid_nw_mid_cp", "slow_nw_fast_cp"):
        for S, B in ((4, 8), (8, 16)):
            sched = registry.generate("1f1b", S, B)
            costs = hardware_costs(sched, system, "paper_gpt")
            costs = replace(costs, capacity=(None,) * S)
            q = costs.quantized(min(costs.op_time.values()) / 10)
            problem = Problem.from_schedule(sched, q, placement="linear")
            res = search(problem, config, [sched])
            row = _row(f"{system}-S{S}-B{B}", "linear", S, B, None, system, res, config)
            rows.append(row)
            printer(row)


def run_targets(workers: int, rows: list, printer) -> None:
    """The issue's performance targets, each with its own time limit."""
    # 1. prove the optimum of S=8, B=32, F=1, K=2, C=1, cap 8, linear, in <= 10 s
    cfg = CpSatConfig(time_limit_s=10, workers=workers)
    res = search(idealized_problem(8, 32, comm=1, activation_cap=8), cfg)
    row = _row("TARGET1 prove S8 B32 cap8 C1 (<=10 s)", "linear", 8, 32, 8, 1, res, cfg)
    rows.append(row)
    printer(row)
    # 2. S=16, B=64, cap 16: within 1 % of the proven bound in <= 120 s
    cfg = CpSatConfig(time_limit_s=120, workers=workers)
    res = search(idealized_problem(16, 64, comm=1, activation_cap=16), cfg)
    row = _row("TARGET2 S16 B64 cap16 C1 gap<=1% (<=120 s)", "linear", 16, 64, 16, 1, res, cfg)
    rows.append(row)
    printer(row)
    # 3. evaluate S=8, B=256 in <= 2 s
    sched = registry.generate("1f1b", 8, 256)
    costs = slot_costs(sched, SlotDurations(1, 2), comm_slots=1, activation_cap=8)
    cfg = CpSatConfig(time_limit_s=30, workers=workers)
    t0 = time.perf_counter()
    res = evaluate(sched, costs, cfg)
    wall = time.perf_counter() - t0
    row = _row("TARGET3 evaluate 1f1b S8 B256 (<=2 s)", "linear", 8, 256, 8, 1, res, cfg)
    row["runtime_s"] = round(wall, 3)
    row["time_to_proof_s"] = round(wall, 3)
    rows.append(row)
    printer(row)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per instance (default 20)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--placement", choices=["linear", "bidirectional"], default=None,
                    help="only this placement's idealized instances")
    ap.add_argument("--quick", action="store_true", help="S in {4, 8}, 5 s per instance, no systems, no targets")
    ap.add_argument("--no-systems", action="store_true")
    ap.add_argument("--no-targets", action="store_true")
    ap.add_argument("--only-targets", action="store_true")
    ap.add_argument("--split-set", action="store_true", help="issue 14's idealized split-backward set (resumable)")
    ap.add_argument("--time-limits", action="store_true",
                    help="wall time of whole search processes on issue 17's sizes against their limit")
    ap.add_argument("--whole-commands", action="store_true",
                    help="wall time of issue 28's and 44's whole commands against a 5-s limit "
                         "(experiments.whole_commands: --load, --only, --append)")
    ap.add_argument("--part", default="0/1",
                    help="with --split-set or --real-size: run rows i mod n == I of I/N (default 0/1)")
    ap.add_argument("--real-size", action="store_true", help="issue 28's real-size set (resumable)")
    ap.add_argument("--sample", type=int, default=None,
                    help="with --real-size: the first N instances of a stratified order instead of the grid")
    ap.add_argument("--placement-set", action="store_true",
                    help="with --real-size: bidirectional and interleaved, S in {16, 32}, B in {8S, 16S} instead")
    ap.add_argument("--messages-on", choices=["linear", "v"], default=None,
                    help="with --real-size: only the instances of this placement with a message (C = 1)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    results = Path(__file__).resolve().parent.parent / "results"
    if args.time_limits:
        run_time_limits(Path(args.out or results / "bench_cpsat_time_limits.csv"))
        return 0
    if args.whole_commands:
        from .whole_commands import run_whole_commands

        run_whole_commands(Path(args.out or results / "bench_cpsat_whole_commands.csv"))
        return 0
    try:
        part = tuple(int(x) for x in args.part.split("/"))
        assert len(part) == 2 and 0 <= part[0] < part[1]
    except (ValueError, AssertionError):
        ap.error(f"--part must look like I/N with 0 <= I < N, got {args.part!r}")
    for flag, given in (("--sample", args.sample is not None), ("--placement-set", args.placement_set),
                        ("--messages-on", args.messages_on is not None)):
        if given and not args.real_size:
            ap.error(f"{flag} applies with --real-size only")
    if args.real_size:
        from .cpsat_real_set import run_real_set

        limit = 60.0 if args.time_limit == 20.0 else args.time_limit
        run_real_set(limit, args.workers, Path(args.out or results / "bench_cpsat_real.csv"), part, args.sample,
                     args.placement_set, args.messages_on)
        return 0
    if args.split_set:
        limit = 5.0 if args.quick and args.time_limit == 20.0 else 30.0 if args.time_limit == 20.0 else args.time_limit
        run_split_set(limit, args.workers, Path(args.out or results / "bench_cpsat_split.csv"), part)
        return 0
    args.out = args.out or str(results / "bench_cpsat.csv")
    limit = 5.0 if args.quick and args.time_limit == 20.0 else args.time_limit
    config = CpSatConfig(time_limit_s=limit, workers=args.workers, random_seed=args.seed)
    rows: list[dict] = []
    cols = ("instance", "status", "makespan", "lower_bound", "gap", "time_to_first_s",
            "solver_first_s", "time_to_proof_s", "runtime_s", "best_known", "best_known_makespan")
    widths = (44, 10, 9, 9, 8, 8, 8, 8, 8, 12, 8)
    print(f"CP-SAT benchmark: ortools {ortools.__version__}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, workers {args.workers}, {limit:g} s per instance")
    print(" ".join(f"{c[:w]:>{w}}" if i else f"{c:<{w}}" for i, (c, w) in enumerate(zip(cols, widths))))

    def printer(row: dict) -> None:
        def fmt(v):
            if v is None:
                return "-"
            if isinstance(v, float):
                return f"{v:.4g}"
            return str(v)
        cells = [fmt(row[c]) for c in cols]
        print(" ".join(f"{x[:w]:>{w}}" if i else f"{x[:w]:<{w}}" for i, (x, w) in enumerate(zip(cells, widths))),
              flush=True)

    if not args.only_targets:
        run_idealized(config, args.quick, rows, printer,
                      (args.placement,) if args.placement else ("linear", "bidirectional"))
        if not args.quick and not args.no_systems:
            run_systems(config, rows, printer)
    if (not args.quick and not args.no_targets) or args.only_targets:
        run_targets(args.workers, rows, printer)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    solved = sum(r["status"] == "optimal" for r in rows)
    print(f"{len(rows)} instances, {solved} proven optimal; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
