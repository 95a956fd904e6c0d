"""Issue 28's real-size CP-SAT set (run by ``python -m experiments.bench_cpsat --real-size``).

Grid: S in {8, 16, 32, 64}, B in {4S, 16S, 64S}, linear and V placements, whole and split
backward, caps {S, 2S} M_B, F:B:W in {1:2:0, 1:1:1, 3:4:2} (whole backward: B + W in one op),
messages C in {0, 1} slot. Split backward with W = 0 (1:2:0) is the whole backward again, so
the 576 grid points are 480 named instances; a whole backward of 1:1:1 is also the same
problem as of 1:2:0 (B + W = 2 either way), so they are 384 distinct problems. Each is searched for ``--time-limit``
seconds (60 by default) with a stop once the proven gap is at most 1 %; a row records the
result, the best registry schedule beside it, the time to the first schedule, what the
cyclic phase proved and the load average. The CSV is appended to row by row and instances
already in it are skipped, so a run can stop and resume (``--part I/N`` over the grid,
``--sample N``: the first N of a stratified order).
"""

from __future__ import annotations

import csv
import itertools
import os
import random
import time
from typing import TYPE_CHECKING

import ortools

from pipetab.solver.cpsat import CpSatConfig, GapBelow, idealized_problem, search

if TYPE_CHECKING:
    from pathlib import Path

SIZES = (8, 16, 32, 64)
RATIOS = (4, 16, 64)
PLACEMENTS = ("linear", "v")
BACKWARDS = ("whole", "split")
CAPS = (1, 2)  # times S, in M_B
FBW = ((1, 2, 0), (1, 1, 1), (3, 4, 2))
COMMS = (0, 1)
DIMENSIONS = (SIZES, RATIOS, PLACEMENTS, BACKWARDS, CAPS, FBW, COMMS)

FIELDS = [
    "instance", "S", "B", "placement", "backward", "fbw", "cap", "C", "status", "makespan", "lower_bound", "gap",
    "gap_le_1pct", "best_registry", "best_registry_makespan", "not_worse_than_registry", "best_start",
    "time_to_first_s", "runtime_s", "cyclic_block", "cyclic_period", "cyclic_period_bound", "message",
    "time_limit_s", "workers", "load_1min", "ortools", "cores",
]


def name_of(S, ratio, placement, backward, cap, fbw, comm) -> str:
    return f"{placement}-S{S}-B{ratio * S}-{backward}-fbw{':'.join(map(str, fbw))}-cap{cap}S-C{comm}"


def distinct(point) -> bool:
    """Split backward needs a W of at least one slot (1:2:0 split is the whole backward)."""
    _, _, _, backward, _, fbw, _ = point
    return not (backward == "split" and fbw[2] == 0)


def grid() -> list[tuple]:
    return [p for p in itertools.product(*DIMENSIONS) if distinct(p)]


def stratified(seed: int = 28) -> list[tuple]:
    """The grid in an order whose every prefix holds each value of each dimension about
    equally often: instance i takes, per dimension, the i-th entry of a sequence of
    shuffled copies of that dimension's values (skipping points that are not distinct and
    repeats)."""
    rng = random.Random(seed)
    seqs = []
    for values in DIMENSIONS:
        seq: list = []
        while len(seq) < 4000:
            block = list(values)
            rng.shuffle(block)
            seq += block
        seqs.append(seq)
    out, seen = [], set()
    for i in range(4000):
        point = tuple(seq[i] for seq in seqs)
        if distinct(point) and point not in seen:
            seen.add(point)
            out.append(point)
    rest = [p for p in grid() if p not in seen]
    rng.shuffle(rest)
    return out + rest


def problem_of(point):
    S, ratio, placement, backward, cap, (f, b, w), comm = point
    split = backward == "split"
    return idealized_problem(S, ratio * S, placement, forward=f, backward=b if split else b + w, weight=max(w, 1),
                             comm=comm, activation_cap=cap * S, split_backward=split)


def run_one(point, limit: float, workers: int) -> dict:
    problem = problem_of(point)
    S, ratio, placement, backward, cap, fbw, comm = point
    res = search(problem, CpSatConfig(time_limit_s=limit, workers=workers, stop=(GapBelow(0.01),)))
    known = {k: v for k, v in res.known.items() if v.fits and v.makespan is not None and not k.startswith("cyclic-")}
    best = min(known, key=lambda k: known[k].makespan) if known else None
    slots = res.in_slots
    start = res.log.phases[0].note if res.log.phases else ""
    cyc = res.cyclic
    return {
        "instance": name_of(*point), "S": S, "B": ratio * S, "placement": placement, "backward": backward,
        "fbw": ":".join(map(str, fbw)), "cap": cap * S, "C": comm, "status": res.status,
        "makespan": slots(res.makespan), "lower_bound": slots(res.lower_bound),
        "gap": None if res.gap is None else round(res.gap, 5),
        "gap_le_1pct": res.gap is not None and res.gap <= 0.01 + 1e-12,
        "best_registry": best, "best_registry_makespan": slots(known[best].makespan) if best else None,
        "not_worse_than_registry": best is None or (res.makespan is not None and res.makespan <= known[best].makespan),
        "best_start": start.rsplit("best start ", 1)[-1].split()[0] if "best start " in start else None,
        "time_to_first_s": None if res.time_to_first_s is None else round(res.time_to_first_s, 3),
        "runtime_s": round(res.runtime_s, 3),
        "cyclic_block": None if cyc is None else cyc.block,
        "cyclic_period": None if cyc is None else slots(cyc.period),
        "cyclic_period_bound": None if cyc is None else slots(cyc.period_bound),
        "message": res.message[:120], "time_limit_s": limit, "workers": workers,
        "load_1min": round(os.getloadavg()[0], 2), "ortools": ortools.__version__, "cores": os.cpu_count(),
    }


# issue 28 item 4: several stages per device at S >= 16 and B >= 8S (whole backward, F:B = 1:2)
PLACEMENT_DIMENSIONS = ((16, 32), (8, 16), ("bidirectional", "interleaved"), ("whole",), CAPS, ((1, 2, 0),), COMMS)


def placement_points(sample: int | None, seed: int = 29) -> list[tuple]:
    """The placement set in a shuffled order (its first ``sample``)."""
    points = list(itertools.product(*PLACEMENT_DIMENSIONS))
    random.Random(seed).shuffle(points)
    return points[:sample] if sample else points


def run_real_set(limit: float, workers: int, out: Path, part: tuple[int, int], sample: int | None,
                 placements: bool = False, messages_on: str | None = None) -> None:
    """The set (module docstring; ``placements``: ``PLACEMENT_DIMENSIONS`` instead;
    ``messages_on``: only that placement's instances with a message), appended row by row
    to ``out``."""
    done = set()
    if out.exists():
        with out.open() as fh:
            done = {r["instance"] for r in csv.DictReader(fh)}
    if placements:
        points = [p for i, p in enumerate(placement_points(sample)) if i % part[1] == part[0]]
    else:
        points = stratified()[:sample] if sample else [p for i, p in enumerate(grid()) if i % part[1] == part[0]]
    if messages_on is not None:
        at, comm = DIMENSIONS.index(PLACEMENTS), DIMENSIONS.index(COMMS)
        points = [p for p in points if p[at] == messages_on and p[comm]]
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not out.exists()
    with out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for point in points:
            if name_of(*point) in done:
                continue
            t = time.perf_counter()
            row = run_one(point, limit, workers)
            w.writerow(row)
            fh.flush()
            gap = "-" if row["gap"] is None else f"{100 * row['gap']:.2f}%"
            print(f"{row['instance']:<44} {row['status']:>9} {row['makespan']!s:>9} {row['lower_bound']!s:>9} {gap:>7} "
                  f"best registry {row['best_registry_makespan']!s:>9} first {row['time_to_first_s']} s "
                  f"{time.perf_counter() - t:5.1f} s load {row['load_1min']}", flush=True)
