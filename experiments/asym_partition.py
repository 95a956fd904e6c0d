"""The asymmetric Chimera-style space: bidirectional placement with each direction's layer
split free, on the paper's model and systems, beside Chimera and pipetab's chimera-asym.

    python -m experiments.asym_partition                 # docs/bench/asym_partition.csv
    python -m experiments.asym_partition --quick         # two instances, a smoke test
    python -m experiments.asym_partition --target linear  # S=4 fast network, 60 s each
    python -m experiments.asym_partition --target bidirectional

Per instance: the best split found (``solve_partition`` with the partition free, durations
rounded down to ticks so its bound holds for the real-valued problem), that schedule's
T_sim re-simulated on the real-valued costs of its split, the proven bound in seconds, and
the T_sim of Chimera (even split) and chimera-asym (its 1:2 split). No memory cap.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from pipetab.schedules import registry
from pipetab.solver.cpsat import CpSatConfig, idealized_problem
from pipetab.solver.cpsat.api import solve_partition
from pipetab.solver.partition import Partition, format_layers, shape_schedule
from pipetab.solver.pricing import HardwareLayers, hardware_costs
from pipetab.solver.simulate import simulate

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "asym_partition.csv"
MODEL = "paper_gpt"
NO_CAP = 1e15  # bytes: no memory cap
FAST_NETWORK = ("fast_nw_fast_cp", "fast_nw_mid_cp", "fast_nw_slow_cp")
FIG4 = ("slow_nw_fast_cp", "mid_nw_mid_cp", "fast_nw_slow_cp")


def instances(quick: bool, target: bool = False) -> list[tuple[str, int, int, float]]:
    """(system, S, B, time limit): S=4 on the Fig. 4 and fast-network systems, S=8 on the
    Fig. 4 systems; B in 8..64. ``target``: the S=4 fast-network instances at 60 s."""
    if target:
        return [(s, 4, b, 60.0) for s in FAST_NETWORK for b in (8, 16, 32, 64)]
    if quick:
        return [("fast_nw_fast_cp", 4, 8, 5.0), ("mid_nw_mid_cp", 4, 8, 5.0)]
    s4 = [(s, 4, b, 25.0) for s in dict.fromkeys(FAST_NETWORK + FIG4) for b in (8, 16, 32, 64)]
    s8 = [(s, 8, b, 15.0) for s in FIG4 for b in (8, 16, 32, 64)]
    return s4 + s8


def _sim(name: str, S: int, B: int, system: str) -> float:
    sched = registry.generate(name, S, B)
    costs = hardware_costs(sched, system, MODEL)
    return simulate(sched, replace(costs, capacity=(NO_CAP,) * S)).makespan


def run_one(system: str, S: int, B: int, limit: float, workers: int = 2, placement: str = "bidirectional") -> dict:
    shape = idealized_problem(S, B, placement)
    lc = HardwareLayers(shape_schedule(shape), system, MODEL, memory_cap=NO_CAP, rounding="down")
    t = time.perf_counter()
    out = solve_partition(shape, lc, Partition("free"), CpSatConfig(time_limit_s=limit, workers=workers))
    wall = time.perf_counter() - t
    res = out.result
    t_sim = simulate(res.schedule, lc.real_costs(out.layers)).makespan if out.layers else None
    bound = None if res.lower_bound is None else res.lower_bound * lc.tick_s
    even_layers = ((lc.num_layers // S,) * S,) * shape.num_pipelines
    first = out.even.schedule if out.even is not None else None
    even_sim = simulate(first, lc.real_costs(even_layers)).makespan if first is not None else None
    chimera, asym = _sim("chimera", S, B, system), _sim("chimera-asym", S, B, system)
    even = _sim("1f1b", S, B, system)
    note = next((a for a in res.bound_assumptions if a.startswith("partition free")), "")
    return {
        "placement": placement, "system": system, "stages": S, "microbatches": B, "model": MODEL, "time_limit_s": limit,
        "workers": workers, "tick_s": lc.tick_s, "status": res.status,
        "layers_down": format_layers(out.layers[:1]) if out.layers else "",
        "layers_up": format_layers(out.layers[1:]) if out.layers else "",
        "t_sim_s": t_sim, "bound_s": bound,
        "gap": None if t_sim is None or bound is None else (t_sim - bound) / t_sim,
        "even_split_s": even_sim, "chimera_s": chimera, "chimera_asym_s": asym,
        "vs_chimera": None if t_sim is None else 1 - t_sim / chimera,
        "vs_even_split": None if t_sim is None or even_sim is None else 1 - t_sim / even_sim,
        "asym_vs_chimera": 1 - asym / chimera, "one_f_one_b_s": even, "wall_s": round(wall, 2), "search": note,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--target", choices=["linear", "bidirectional"], default=None,
                    help="the S=4 fast-network target instances (60 s each) on this placement")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or (OUT.with_name("asym_partition_quick.csv") if args.quick else
                       OUT.with_name(f"partition_target_{args.target}.csv") if args.target else OUT)
    rows = []
    for system, S, B, limit in instances(args.quick, args.target is not None):
        rows.append(run_one(system, S, B, limit, placement=args.target or "bidirectional"))
        r = rows[-1]
        print(f"{system} S={S} B={B}: {r['layers_down']}/{r['layers_up']} T_sim {r['t_sim_s']:.3f} s, bound "
              f"{r['bound_s']:.3f} s, chimera {r['chimera_s']:.3f}, asym {r['chimera_asym_s']:.3f}, "
              f"{r['wall_s']} s", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
