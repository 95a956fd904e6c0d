"""Generate the public instance set (issue 45 item 4): each instance from a published
profile written as a JSON file of ``experiments/instances/set/`` (format: README.md here),
searched by pipetab's CP-SAT strategy, with its best schedule, makespan, proven bound, gap,
solve times and assumptions, and re-checked by the standalone ``check.py`` before it is
written.

Resumable: an instance whose file exists is skipped (``--redo``: solved again, and the file
replaced where the new gap is no larger); ``--budget`` stops starting new ones after that many
seconds of solving; ``--deterministic-time``: CP-SAT deterministic seconds per instance, the
same work whatever the machine's load (the wall limit still holds); ``--summary`` rewrites
``summary.csv`` from the files.

Run: python -m experiments.instances.generate [--time-limit 60] [--budget 900] [--only NAME]
     python -m experiments.instances.generate --only NAME --redo --deterministic-time 40 --time-limit 900
     python -m experiments.instances.generate --summary
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import ortools

from experiments.cpsat_real_set import name_of as real_name
from experiments.cpsat_real_set import problem_of as real_problem
from experiments.cpsat_real_set import stratified
from experiments.instances.check import check
from experiments.zero_bubble_data import MODELS, PROFILES
from experiments.zero_bubble_data import REFERENCE as ZB_REFERENCE
from pipetab.schedules import registry
from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import CpSatConfig, Problem, idealized_problem, search
from pipetab.solver.cpsat.model.oracle import evaluate_known
from pipetab.solver.pricing import hardware_costs

HERE = Path(__file__).resolve().parent
SET = HERE / "set"
DUALPIPE = ("DeepSeek-AI, DeepSeek-V3 Technical Report (arXiv 2412.19437), section 3.2.1, and the DualPipe "
            "README (github.com/deepseek-ai/DualPipe): two directions over one device chain (or DualPipeV's "
            "V), a split backward, PP + 1 activations per device")
PAPER = "the source paper's systems (experiments/REPORT.md, Fig. 4 setting; hardware/presets), model paper_gpt"
REAL = "issue 28's real-size grid (experiments/cpsat_real_set.py): idealized slots"


@dataclass(frozen=True)
class Spec:
    name: str
    source: str
    tick: str
    build: Callable[[], Problem]


def _zero_bubble() -> list[Spec]:
    """The paper's 12 profiles (Table 6, ms) on 0.1 ms ticks, linear placement, split
    backward, under its ZB-1p and ZB-2p activation limits (p and 2p M_B per device)."""
    out = []
    for pr in PROFILES:
        frac = MODELS[pr.model].weight_memory_fraction
        for k in (1, 2):
            def build(pr=pr, k=k, frac=frac):
                return idealized_problem(pr.stages, pr.microbatches, "linear", forward=round(pr.t_f * 10),
                                         backward=round(pr.t_b * 10), weight=round(pr.t_w * 10),
                                         comm=round(pr.t_comm * 10), activation_cap=k * pr.stages,
                                         split_backward=True, weight_memory=frac)
            out.append(Spec(f"zb-{pr.model}-p{pr.stages}-m{pr.microbatches}-cap{k}p", ZB_REFERENCE, "0.1 ms", build))
    return out


def _dualpipe() -> list[Spec]:
    out = []
    for S in (4, 8, 16):
        for B in (2 * S, 4 * S):
            for placement in ("bidirectional", "v"):
                for f, b, w in ((1, 1, 1), (2, 2, 1)):
                    def build(S=S, B=B, placement=placement, f=f, b=b, w=w):
                        return idealized_problem(S, B, placement, forward=f, backward=b, weight=w, comm=0,
                                                 activation_cap=S + 1, split_backward=True)
                    out.append(Spec(f"dualpipe-{placement}-S{S}-B{B}-fbw{f}:{b}:{w}-capS+1", DUALPIPE, "1 slot",
                                    build))
    return out


def _paper_systems() -> list[Spec]:
    out = []
    for name in ("1f1b", "chimera"):
        for S in (4, 8):
            for B in (8, 16):
                for system in ("slow_nw_fast_cp", "mid_nw_mid_cp", "fast_nw_slow_cp"):
                    def build(name=name, S=S, B=B, system=system):
                        sched = registry.generate(name, S, B)
                        real = hardware_costs(sched, system, "paper_gpt")
                        real = replace(real, capacity=(None,) * S)
                        return Problem.from_schedule(sched, real.quantized(real.default_tick(20)))
                    placement = "linear" if name == "1f1b" else "bidirectional"
                    out.append(Spec(f"paper-{system}-{placement}-S{S}-B{B}", PAPER, "shortest op / 20", build))
    return out


def _real_grid(count: int = 40) -> list[Spec]:
    points = [p for p in stratified() if p[0] in (8, 16) and p[1] in (4, 16)][:count]
    return [Spec(real_name(*p), REAL, "1 slot", lambda p=p: real_problem(p)) for p in points]


def specs() -> list[Spec]:
    return _dualpipe() + _paper_systems() + _real_grid() + _zero_bubble()


def instance_of(spec: Spec, problem: Problem) -> dict:
    """The problem as the README's format: per pipeline its stages' devices, durations,
    message lags, activation sizes and M_W; per device its cap and optimizer time."""
    pl = problem.fixed_placement
    split = problem.split_backward
    pipes = []
    for p, n in enumerate(problem.num_stages):
        dev = [pl.device(p, s) for s in range(n)]

        def lag(pred: Op, succ: Op) -> int:
            a, b = pl.device(pred.pipeline, pred.stage), pl.device(succ.pipeline, succ.stage)
            return problem.lag(pred, a, b) if a != b else 0

        pipes.append({
            "stages": n, "devices": dev, "microbatches": list(problem.pipeline_microbatches.get(p, ())),
            **{k.name: [problem.duration(Op(k, p, s, 0)) for s in range(n)] for k in problem.kinds},
            "lag_F": [lag(Op(Kind.F, p, s, 0), Op(Kind.F, p, s + 1, 0) if s + 1 < n else Op(Kind.B, p, s, 0))
                      for s in range(n)],
            "lag_B": [lag(Op(Kind.B, p, s, 0), Op(Kind.B, p, s - 1, 0)) if s else 0 for s in range(n)],
            "activation": [problem.costs.activation[(p, s)] for s in range(n)],
            "weight_part": [problem.weight_part(p, s) for s in range(n)],
        })
    opt = [problem.optimizer(d) for d in range(problem.num_devices)]
    groups = [{"stages": [list(k) for k in g.stages], "time": round(g.allreduce_time)}
              for g in problem.costs.replica_groups]
    return {"format": "pipetab-instance/1", "name": spec.name, "source": spec.source, "tick": spec.tick,
            "devices": problem.num_devices, "split_backward": split, "objective": "makespan",
            "pipelines": pipes, "cap": [problem.cap(d) for d in range(problem.num_devices)],
            "optimizer": opt, "allreduce": groups}


def solve(spec: Spec, limit: float, workers: int, det: float | None = None) -> dict:
    problem = spec.build()
    inst = instance_of(spec, problem)
    res = search(problem, CpSatConfig(time_limit_s=limit, workers=workers, deterministic_time=det))
    inst["assumptions"] = list(res.bound_assumptions)
    inst["result"] = {
        "status": str(res.status), "makespan": res.makespan, "lower_bound": res.lower_bound,
        "gap": None if res.gap is None else round(res.gap, 6), "solve_seconds": round(res.runtime_s, 3),
        "time_to_first_s": None if res.time_to_first_s is None else round(res.time_to_first_s, 3),
        "time_limit_s": limit, **({"deterministic_time": det} if det is not None else {}),
        "workers": workers, "ortools": ortools.__version__,
        "load_1min": round(os.getloadavg()[0], 2), "cores": os.cpu_count(),
    }
    if res.schedule is not None:
        ev = evaluate_known(problem, res.schedule)
        starts = ev.timing.start if ev.timing is not None else {}
        ops = [[op.kind.name, op.pipeline, op.stage, op.microbatch, round(t)] for op, t in starts.items()]
        ops.sort(key=lambda r: (r[4], r[1], r[2], r[0], r[3]))
        inst["schedule"] = {"name": res.schedule.name, "makespan": ev.makespan, "ops": ops}
        check(inst, ops, ev.makespan)  # the standalone checker agrees, or nothing is written
    return inst


def summary(out: Path) -> int:
    rows = []
    for path in sorted(SET.glob("*.json")):
        inst = json.loads(path.read_text())
        r = inst["result"]
        rows.append({"name": inst["name"], "source": inst["source"].split(",")[0], "status": r["status"],
                     "makespan": r["makespan"], "lower_bound": r["lower_bound"], "gap": r["gap"],
                     "time_to_first_s": r["time_to_first_s"], "solve_seconds": r["solve_seconds"],
                     "time_limit_s": r["time_limit_s"], "deterministic_time": r.get("deterministic_time"),
                     "load_1min": r["load_1min"]})
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["name"])
        w.writeheader()
        w.writerows(rows)
    proven = sum(r["status"] == "optimal" for r in rows)
    print(f"{len(rows)} of {len(specs())} instances solved, {proven} proven optimal")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per instance (default 60)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--budget", type=float, default=None, help="start no instance after this many seconds")
    ap.add_argument("--only", default=None, help="the instance of this name alone")
    ap.add_argument("--redo", action="store_true",
                    help="solve instances whose file exists again; keep the new one where its gap is no larger")
    ap.add_argument("--deterministic-time", type=float, default=None,
                    help="CP-SAT deterministic seconds per instance (default: none, wall clock only)")
    ap.add_argument("--summary", action="store_true", help="rewrite summary.csv from the files and stop")
    args = ap.parse_args(argv)
    if args.summary:
        return summary(HERE / "summary.csv")
    todo = [s for s in specs() if args.only in (None, s.name)]
    if not todo:
        ap.error(f"--only: no instance named {args.only!r}")
    if args.deterministic_time is not None and not args.deterministic_time > 0:
        ap.error(f"--deterministic-time must be > 0 seconds, got {args.deterministic_time:g}")
    SET.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    for spec in todo:
        path = SET / f"{spec.name.replace(':', '-')}.json"  # no colons: portable file names
        if path.exists() and not args.redo:
            continue
        if args.budget is not None and time.perf_counter() - t0 > args.budget:
            print(f"budget of {args.budget:g} s spent; run again to go on", flush=True)
            break
        inst = solve(spec, args.time_limit, args.workers, args.deterministic_time)
        r = inst["result"]
        old = json.loads(path.read_text())["result"]["gap"] if path.exists() else None
        if old is not None and (r["gap"] is None or r["gap"] > old):
            print(spec.name, "kept the file: its gap", old, "is below the new", r["gap"], flush=True)
            continue
        path.write_text(json.dumps(inst, separators=(",", ":")) + "\n")
        print(spec.name, r["status"], r["makespan"], r["lower_bound"], r["solve_seconds"], flush=True)
    return summary(HERE / "summary.csv")


if __name__ == "__main__":
    raise SystemExit(main())
