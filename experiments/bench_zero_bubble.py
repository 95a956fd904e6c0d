"""Table 5 of the Zero Bubble paper reproduced from its Table 6 (issue 14).

For each of the paper's 12 settings, pipetab's ``1f1b``, ``interleaved`` (1F1B-I, v chunks
per device as the paper's setup gives), ``zb-h1`` and ``zb-h2`` run on costs built from the
profiled T_F, T_B, T_W, T_comm (``solver.costs.profile_costs`` on the row as a uniform
profile, memory in M_B), and their bubble rate is computed in the
paper's convention: cost = the longest per-device span (first op's start to last op's end)
of the one-iteration as-soon-as-possible timing — pipetab's level-3 simulator, every message
taking T_comm between the end of its op and the start of the consumer on the next device —
and bubble = (cost - m(T_F + T_B + T_W)) / cost. A full backward (1F1B, 1F1B-I) takes
T_B + T_W; an interleaved chunk op takes 1/v of the stage's time. This is exactly the
authors' computation of the table (sail-sg/zero-bubble-pipeline-parallelism, branch
``arxiv``, ``megatron/core/pipeline_parallel/efficiency.py``).

Each row also carries the least period of the same orders (``solver.periodic.min_period``,
starts free) and its bubble, which is never above the ASAP one, and the steady-state period
of 6 iterations run back to back through the simulator (``repeated_simulation``), which
must equal the least period.

The 1F1B-I column is not reproduced: the authors' simulator lets a chunk on device 0 wait
for the previous chunk's output from device S-1 (and, backward, device S-1 for device 0)
only for the first microbatch of each group of S, dropping the other wrap-around
dependencies. Extra rows with ``timing = authors-deps`` time pipetab's interleaved orders
with those dependencies dropped (``authors_interleaved_span``), which reproduces the column;
they are a diagnosis, not pipetab's result (``docs/period.md``).

Rows are one per (setting, paper column, timing) as dicts; the CSV header is the union.
Writes results/bench_zero_bubble.csv and prints the comparison.

``--cpsat``: the ZB-1p / ZB-2p columns (the authors' scheduler under p M_B and 2p M_B)
against CP-SAT's search under the same limits, memory accounting and cost (the period
objective), on exact 1-us ticks; each schedule re-timed on the real costs and by the
K-iteration simulation; plus the throughput ratios to 1F1B predicted from the periods
against the paper's measured Table 4 (docs/zero_bubble.md). Writes
docs/bench/zero_bubble_cpsat.csv.
Run: python -m experiments.bench_zero_bubble [--out PATH] [--no-periods]
     python -m experiments.bench_zero_bubble --cpsat [--time-limit 120] [--stages 8,16,32] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pipetab.hardware import profile as hardware_profile
from pipetab.schedules import registry
from pipetab.schedules.evaluate import asap
from pipetab.solver.cpsat import CpSatConfig, Problem, search
from pipetab.solver.cpsat.model.oracle import memory_check
from pipetab.solver.periodic import min_period, repeated_simulation, span_period
from pipetab.solver.pricing import profile_costs
from pipetab.solver.simulate import simulate

from .zero_bubble_data import MODELS, PROFILES, REFERENCE, TABLE4_THROUGHPUT, TABLE5, Profile

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule
    from pipetab.solver.costs import Costs

OUT = Path(__file__).resolve().parent.parent / "results" / "bench_zero_bubble.csv"

# paper column -> (registry name, options from the model)
METHODS = {
    "1F1B": ("1f1b", lambda model: {}),
    "1F1B-I": ("interleaved", lambda model: {"chunks": model.chunks}),
    "ZB-H1": ("zb-h1", lambda model: {}),
    "ZB-H2": ("zb-h2", lambda model: {}),
}
MS = 1e-3
ITERATIONS = 6  # of the repeated simulation


def stage_profile(profile: Profile) -> hardware_profile.Profile:
    """A row of Table 6 as a uniform pipetab profile in seconds, memory in units of M_B:
    an activation is 1, of which the model's M_W / M_B (paper's Table 1) stays from B to W
    — what ``solver.costs.profile_costs`` turns into every schedule's costs (an op of a
    stage holding the share w of a device's layers takes w of the times; a full backward
    T_B + T_W; every message T_comm)."""
    stage = hardware_profile.StageProfile(
        forward_s=profile.t_f * MS, backward_s=profile.t_b * MS, weight_s=profile.t_w * MS,
        message_s=profile.t_comm * MS, activation_bytes=1.0,
        weight_memory_bytes=MODELS[profile.model].weight_memory_fraction,
    )
    return hardware_profile.Profile(f"zb-{profile.model}-m{profile.microbatches}", (stage,), uniform=True,
                                    microbatches=profile.microbatches)


def zb_costs(schedule: Schedule, profile: Profile) -> Costs:
    """Costs (seconds, memory in M_B) of ``schedule`` on a row of Table 6."""
    return profile_costs(schedule, stage_profile(profile))


def authors_interleaved_span(schedule: Schedule, costs: Costs) -> float:
    """Diagnosis only: the span cost of an interleaved schedule timed as the authors'
    simulator times it — a wrap-around dependency (the last stage of a chunk, on device S-1,
    to the first stage of the next, on device 0; and back for backwards) is kept only for
    microbatches that are a multiple of S."""
    S = schedule.num_devices

    def lag(pred, op, crosses):
        if pred.stage // S != op.stage // S and op.microbatch % S:
            return -math.inf  # the dependency the authors' simulator leaves out
        return costs.transfer(pred, schedule.device_of(pred), schedule.device_of(op))

    t = asap(schedule, costs.duration, lag)
    return span_period(t.start, t.end, schedule.device_of)


def _profile(row: dict) -> Profile:
    return next(p for p in PROFILES if (p.model, p.microbatches) == (row["model"], row["microbatches"]))


def bubble(cost_ms: float, profile: Profile) -> float:
    """The paper's bubble rate (cost - m(T_F+T_B+T_W)) / cost."""
    return (cost_ms - profile.ideal_ms) / cost_ms


def rows(with_periods: bool = True) -> list[dict]:
    """One row per (Table 6 setting, paper column, timing); see the module docstring."""
    out = []
    for prof in PROFILES:
        model = MODELS[prof.model]
        for column, (name, options) in METHODS.items():
            opts = options(model)
            schedule = registry.generate(name, model.pipelines, prof.microbatches, **opts)
            costs = zb_costs(schedule, prof)
            t0 = time.perf_counter()
            sim = simulate(schedule, costs)
            cost = span_period(sim.start, sim.end, schedule.device_of) / MS
            runtime = time.perf_counter() - t0
            paper = TABLE5[(prof.model, prof.microbatches)][column]
            row = _row(prof, column, name, opts, "asap", cost, paper, runtime)
            if with_periods:
                t0 = time.perf_counter()
                period = min_period(schedule, costs) / MS
                row.update(min_period_ms=round(period, 6), bubble_min_period=round(bubble(period, prof), 6),
                           min_period_runtime_s=round(time.perf_counter() - t0, 3))
                run = repeated_simulation(schedule, costs, iterations=ITERATIONS)
                row.update(repeated_period_ms=round(run.period / MS, 6), repeated_periodic_from=run.periodic_from)
            out.append(row)
            if name == "interleaved":
                t0 = time.perf_counter()
                cost = authors_interleaved_span(schedule, costs) / MS
                out.append(_row(prof, column, name, opts, "authors-deps", cost, paper,
                                time.perf_counter() - t0))
    return out


def _row(prof: Profile, column: str, name: str, opts: dict, timing: str, cost_ms: float,
         paper: float, runtime_s: float) -> dict:
    b = bubble(cost_ms, prof)
    return {
        "model": prof.model, "stages": prof.stages, "microbatches": prof.microbatches,
        "method": column, "schedule": name,
        "options": " ".join(f"{k}={v}" for k, v in opts.items()),
        "timing": timing, "cost_ms": round(cost_ms, 6), "ideal_ms": round(prof.ideal_ms, 6),
        "bubble": round(b, 6), "paper_bubble": paper, "diff": round(b - paper, 6),
        "reproduced": round(b, 4) == paper, "runtime_s": round(runtime_s, 3),
    }


def write_csv(table: list[dict], path: Path) -> None:
    """Write rows whose keys may differ: the header is the union in order of appearance."""
    fields: list[str] = []
    for r in table:
        fields += [k for k in r if k not in fields]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(table)


def summary(table: list[dict]) -> list[str]:
    """Per paper column and timing: how many settings reproduce to 4 decimals, and the
    range of the difference."""
    lines = []
    keys = sorted({(r["method"], r["timing"]) for r in table}, key=lambda k: (list(METHODS).index(k[0]), k[1]))
    for method, timing in keys:
        rs = [r for r in table if r["method"] == method and r["timing"] == timing]
        ok = sum(r["reproduced"] for r in rs)
        diffs = [r["diff"] for r in rs]
        lines.append(f"{method:<7} {timing:<13} {ok:>2}/{len(rs)} reproduced to 4 decimals; "
                     f"pipetab - paper in [{min(diffs):+.5f}, {max(diffs):+.5f}]")
    return lines


# ---- CP-SAT against the Zero Bubble scheduler (ZB-1p, ZB-2p) and Table 4's ratios ----------

TICK_S = 1e-6  # Table 6 gives microseconds: on 1-us ticks the quantized problem is the real one
CPSAT_OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "zero_bubble_cpsat.csv"
CAPS = {"ZB-1p": 1, "ZB-2p": 2}  # the paper's activation limits p M_B and 2p M_B


def cpsat_problem(profile: Profile, cap_pipelines: int) -> tuple[Problem, Costs]:
    """The Zero Bubble scheduler's problem on a row of Table 6 as a CP-SAT problem: linear
    placement, split backward, F allocates M_B, B frees M_B - M_W, W frees M_W (the paper's
    accounting), at most ``cap_pipelines`` x p M_B live per device, period objective (the
    paper's cost: the longest device span). Returns it with its real-valued costs; the
    1-us ticks are exact (``ValueError`` otherwise)."""
    model = MODELS[profile.model]
    shape = registry.generate("zb-h1", model.pipelines, profile.microbatches)
    costs = zb_costs(shape, profile).with_activation_cap(cap_pipelines * model.pipelines)
    up, down = costs.quantized(TICK_S, "up"), costs.quantized(TICK_S, "down")
    if up.op_time != down.op_time or up.transfer(shape.orders[0][0], 0, 1) != down.transfer(shape.orders[0][0], 0, 1):
        raise ValueError(f"the times of {profile} are not whole multiples of the {TICK_S} s tick")
    problem = replace(Problem.from_schedule(shape, up, "linear"), objective="period",
                      name=f"zb-{profile.model}-m{profile.microbatches}-cap{cap_pipelines}p")
    return problem, costs


def cpsat_rows(time_limit_s: float, stages: tuple[int, ...], workers: int = 2,
               settings: tuple[tuple[str, int], ...] | None = None) -> list[dict]:
    """Per setting of Table 6 (with p in ``stages``) and paper column ZB-1p / ZB-2p: CP-SAT's
    search under that column's memory limit with the period objective — its schedule's
    bubble (re-timed on the real costs by ``min_period``, checked by the K-iteration
    simulation), the proven bound, the gap — beside the paper's bubble, and the
    throughput ratio to 1F1B predicted from the periods against Table 4's measured one.
    ``settings``: only these (model, microbatches)."""
    out = []
    for prof in PROFILES:
        model = MODELS[prof.model]
        if model.pipelines not in stages or (settings is not None and (prof.model, prof.microbatches) not in settings):
            continue
        one_f = registry.generate("1f1b", model.pipelines, prof.microbatches)
        period_1f1b = min_period(one_f, zb_costs(one_f, prof)) / MS
        measured = TABLE4_THROUGHPUT[(prof.model, prof.microbatches)]
        paper = TABLE5[(prof.model, prof.microbatches)]
        for column, mult in CAPS.items():
            problem, real = cpsat_problem(prof, mult)
            res = search(problem, CpSatConfig(time_limit_s=time_limit_s, workers=workers))
            row = {"model": prof.model, "stages": prof.stages, "microbatches": prof.microbatches,
                   "method": f"CP-SAT {column} limit", "cap_mb": mult * model.pipelines,
                   "weight_memory": round(model.weight_memory_fraction, 6),
                   "time_limit_s": time_limit_s, "workers": workers, "status": res.status,
                   "runtime_s": round(res.runtime_s, 2),
                   "schedule": None if res.schedule is None else res.schedule.name,
                   "paper_column": column, "paper_bubble": paper[column], "ideal_ms": round(prof.ideal_ms, 6)}
            if res.schedule is not None:
                period = min_period(res.schedule, real) / MS
                run = repeated_simulation(res.schedule, real, iterations=ITERATIONS)
                lb = res.lower_bound * res.tick_s / MS
                b = bubble(period, prof)
                row.update(
                    cost_ms=round(period, 6), bubble=round(b, 6), diff=round(b - paper[column], 6),
                    meets_paper=round(b, 4) <= paper[column],
                    lower_bound_ms=round(lb, 6), bound_bubble=round(bubble(lb, prof), 6),
                    gap=round(max(0.0, (period - lb) / period), 6), repeated_period_ms=round(run.period / MS, 6),
                    peak_activations=round(max(memory_check(problem, res.schedule).peaks), 4),
                    period_1f1b_ms=round(period_1f1b, 6),
                    predicted_ratio=round(period_1f1b / period, 4),
                    paper_predicted_ratio=round((1 - paper[column]) / (1 - paper["1F1B"]), 4),
                    measured_ratio=round(measured[column] / measured["1F1B"], 4),
                )
                row["ratio_error"] = round(row["predicted_ratio"] / row["measured_ratio"] - 1, 4)
            out.append(row)
            print(_cpsat_line(row), flush=True)
    return out


def _cpsat_line(r: dict) -> str:
    if "bubble" not in r:
        return (f"{r['model']:<6} {r['stages']:>3} {r['microbatches']:>4}  {r['paper_column']}: {r['status']}, "
                "no schedule")
    return (f"{r['model']:<6} {r['stages']:>3} {r['microbatches']:>4}  {r['paper_column']:<6} "
            f"paper {r['paper_bubble']:.4f} "
            f"cp-sat {r['bubble']:.4f} ({'<=' if r['meets_paper'] else '> '}) bound {r['bound_bubble']:.4f} "
            f"gap {100 * r['gap']:5.2f}% {r['status']:<8} {r['runtime_s']:6.1f} s  ratio to 1F1B "
            f"{r['predicted_ratio']:.3f} measured {r['measured_ratio']:.3f} ({100 * r['ratio_error']:+.1f}%)")


def cpsat_summary(table: list[dict]) -> list[str]:
    """Per p: settings where CP-SAT's bubble is at most the paper's (to its 4 decimals), the
    largest gap; and how many predicted throughput ratios are within 5 % of Table 4's."""
    lines = []
    for p in sorted({r["stages"] for r in table}):
        for column in CAPS:
            rs = [r for r in table if r["stages"] == p and r["paper_column"] == column]
            found = [r for r in rs if "bubble" in r]
            if not rs:
                continue
            meets = sum(bool(r["meets_paper"]) for r in found)
            gaps = [r["gap"] for r in found]
            ratio = sum(abs(r["ratio_error"]) <= 0.05 for r in found)
            lines.append(f"p={p:<3} {column}: bubble <= paper on {meets}/{len(rs)}; largest gap "
                         f"{100 * max(gaps):.2f}%; throughput ratio within 5 % of Table 4 on {ratio}/{len(rs)}"
                         if gaps else f"p={p:<3} {column}: no schedule on {len(rs)} settings")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help=f"CSV (default {OUT}, with --cpsat {CPSAT_OUT})")
    ap.add_argument("--no-periods", action="store_true",
                    help="skip the least-period and repeated-simulation columns")
    ap.add_argument("--cpsat", action="store_true",
                    help="CP-SAT under the ZB-1p / ZB-2p memory limits, and Table 4's throughput ratios")
    ap.add_argument("--time-limit", type=float, default=120.0, help="CP-SAT seconds per run (--cpsat)")
    ap.add_argument("--stages", default="8,16,32", help="pipeline sizes p to run (--cpsat)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers (--cpsat)")
    ap.add_argument("--quick", action="store_true", help="--cpsat with 5 s per run (a few minutes in all)")
    args = ap.parse_args()
    if args.quick:
        args.cpsat, args.time_limit = True, 5.0
    if args.cpsat:
        try:
            stages = tuple(int(x) for x in args.stages.split(","))
        except ValueError:
            ap.error(f"--stages must list integers separated by commas, got {args.stages!r}")
        if not args.time_limit > 0:
            ap.error(f"--time-limit must be > 0 seconds, got {args.time_limit}")
        t0 = time.perf_counter()
        print(f"CP-SAT against the Zero Bubble scheduler ({REFERENCE}); period objective, "
              f"{args.time_limit:g} s per run, {args.workers} workers\n")
        table = cpsat_rows(args.time_limit, stages, args.workers)
        out = Path(args.out or CPSAT_OUT)
        write_csv(table, out)
        print()
        for line in cpsat_summary(table):
            print(line)
        print(f"\nwrote {out} ({len(table)} rows) in {time.perf_counter() - t0:.1f} s")
        return
    args.out = args.out or str(OUT)
    t0 = time.perf_counter()
    table = rows(with_periods=not args.no_periods)
    write_csv(table, Path(args.out))
    print(f"Table 5 of {REFERENCE}, from its Table 6; bubble = (cost - m(TF+TB+TW)) / cost,")
    print("cost = longest per-device span of the ASAP timing (min period: the least span over timings)\n")
    head = f"{'model':<6} {'p':>3} {'m':>4}  {'method':<7} {'timing':<13} {'paper':>7} {'pipetab':>8} {'diff':>8}"
    if not args.no_periods:
        head += f" {'min-period':>10} {'K-run':>8}"
    print(head)
    for r in table:
        line = (f"{r['model']:<6} {r['stages']:>3} {r['microbatches']:>4}  {r['method']:<7} {r['timing']:<13} "
                f"{r['paper_bubble']:>7.4f} {r['bubble']:>8.4f} {r['diff']:>+8.4f}")
        if "bubble_min_period" in r:
            line += f" {r['bubble_min_period']:>10.4f} {bubble(r['repeated_period_ms'], _profile(r)):>8.4f}"
        print(line)
    print()
    for line in summary(table):
        print(line)
    print("1F1B-I is not reproduced: the authors' simulator keeps the wrap-around dependency (device S-1 "
          "-> device 0 between chunks, and back) only for every S-th microbatch; with the others dropped "
          "(authors-deps rows, a diagnosis) it is. See docs/period.md.")
    timed = [r for r in table if "min_period_ms" in r]
    if timed:
        same = sum(abs(r["repeated_period_ms"] - r["min_period_ms"]) <= 1e-6 * r["min_period_ms"] for r in timed)
        lower = sum(r["min_period_ms"] < r["cost_ms"] - 1e-6 for r in timed)
        print(f"least period: below the ASAP span on {lower}/{len(timed)} rows; "
              f"{ITERATIONS}-iteration simulation equal to it on {same}/{len(timed)}")
    print(f"\nwrote {args.out} ({len(table)} rows) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
