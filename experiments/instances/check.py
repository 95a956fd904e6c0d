"""Check a pipeline schedule against an instance of experiments/instances (README.md there).

Standalone: Python 3.8+ and its standard library only, no pipetab. A schedule is a list of
ops with start times ([kind, pipeline, stage, microbatch, start]); the checker recomputes
every end from the instance's durations and checks, naming the first violated constraint:

  op-set       every op of the instance exactly once, nothing else, starts whole and >= 0
  precedence   F(p,s,m) after F(p,s-1,m) + lag; B(p,last,m) after F(p,last,m) + lag;
               B(p,s,m) after B(p,s+1,m) + lag; W(p,s,m) after B(p,s,m)
  no-overlap   a device runs one op at a time
  memory-cap   a device's live activations (F's start to B's end; with a split backward
               M - M_W to B's end and M_W to W's end) never exceed its cap
  makespan     a makespan claimed for the schedule equals the one recomputed

Usage: python check.py INSTANCE.json [SCHEDULE.json]   (SCHEDULE: {"ops": [...], "makespan": T}
       or a list of ops; without it the instance's own schedule is checked). Exit 0 and the
       makespan when valid, 1 and "invalid: <constraint>: ..." when not, 2 on bad input.
"""

import json
import sys
from collections import defaultdict

TOL = 1e-9


class Invalid(Exception):
    def __init__(self, constraint, detail):
        super().__init__(f"{constraint}: {detail}")
        self.constraint = constraint


def _ops_of(instance):
    kinds = ["F", "B", "W"] if instance["split_backward"] else ["F", "B"]
    for p, pipe in enumerate(instance["pipelines"]):
        for m in pipe["microbatches"]:
            for s in range(pipe["stages"]):
                for k in kinds:
                    yield (k, p, s, m)


def _starts(instance, ops):
    want = set(_ops_of(instance))
    start = {}
    for row in ops:
        if not (isinstance(row, (list, tuple)) and len(row) == 5):
            raise Invalid("op-set", f"an op is [kind, pipeline, stage, microbatch, start], got {row!r}")
        key = (row[0], int(row[1]), int(row[2]), int(row[3]))
        if key not in want:
            raise Invalid("op-set", f"{key} is not an op of the instance")
        if key in start:
            raise Invalid("op-set", f"{key} appears twice")
        if not isinstance(row[4], int) or row[4] < 0:
            raise Invalid("op-set", f"{key} starts at {row[4]!r}, not a whole number of ticks >= 0")
        start[key] = row[4]
    missing = want - set(start)
    if missing:
        raise Invalid("op-set", f"{len(missing)} ops missing, e.g. {sorted(missing)[0]}")
    return start


def _precedences(instance, start, end):
    for (k, p, s, m), t in start.items():
        pipe = instance["pipelines"][p]
        last = pipe["stages"] - 1
        if k == "F" and s > 0:
            pred, lag = ("F", p, s - 1, m), pipe["lag_F"][s - 1]
        elif k == "B" and s == last:
            pred, lag = ("F", p, s, m), pipe["lag_F"][s]
        elif k == "B":
            pred, lag = ("B", p, s + 1, m), pipe["lag_B"][s + 1]
        elif k == "W":
            pred, lag = ("B", p, s, m), 0
        else:
            continue
        if t < end[pred] + lag:
            raise Invalid("precedence", f"{(k, p, s, m)} starts at {t}, before {pred} ends ({end[pred]}) + lag {lag}")


def _device_of(instance, p, s):
    return instance["pipelines"][p]["devices"][s]


def _no_overlap(instance, start, end):
    by_dev = defaultdict(list)
    for op, t in start.items():
        by_dev[_device_of(instance, op[1], op[2])].append((t, end[op], op))
    for d, items in by_dev.items():
        items.sort()
        for i in range(1, len(items)):
            (a0, a1, a), (b0, _, b) = items[i - 1], items[i]
            if b0 < a1:
                raise Invalid("no-overlap", f"device {d} runs {a} [{a0}, {a1}) and {b} from {b0}")


def _memory(instance, start, end):
    events = defaultdict(list)
    split = instance["split_backward"]
    for (k, p, s, m), t in start.items():
        if k != "F":
            continue
        size = instance["pipelines"][p]["activation"][s]
        w = min(size, instance["pipelines"][p]["weight_part"][s]) if split else 0.0
        d = _device_of(instance, p, s)
        for rel, part in (("B", size - w), ("W", w)):
            if part > TOL:
                events[d] += [(t, part), (end[(rel, p, s, m)], -part)]
    for d, evs in events.items():
        cap = instance["cap"][d]
        if cap is None:
            continue
        live = 0.0
        for t, delta in sorted(evs, key=lambda e: (e[0], e[1])):  # frees before allocations at one time
            live += delta
            if live > cap + TOL:
                raise Invalid("memory-cap", f"device {d} holds {live:g} at tick {t}, over its cap {cap:g}")


def makespan_of(instance, end):
    """The step's end: each device's optimizer after its last op and the all-reduces of the
    stages it holds (an all-reduce after its stages' last backward, W with a split one)."""
    ready = [0] * instance["devices"]
    for (k, p, s, m), e in end.items():
        d = _device_of(instance, p, s)
        ready[d] = max(ready[d], e)
    last = "W" if instance["split_backward"] else "B"
    for group in instance["allreduce"]:
        s0 = max(e for (k, p, s, m), e in end.items() if k == last and [p, s] in group["stages"])
        for p, s in group["stages"]:
            d = _device_of(instance, p, s)
            ready[d] = max(ready[d], s0 + group["time"])
    return max(r + o for r, o in zip(ready, instance["optimizer"]))


def check(instance, ops, claimed=None):
    """The makespan of a valid schedule; raises ``Invalid`` naming the violated constraint."""
    start = _starts(instance, ops)
    end = {}
    for op, t in start.items():
        k, p, s, _ = op
        end[op] = t + instance["pipelines"][p][k][s]
    _precedences(instance, start, end)
    _no_overlap(instance, start, end)
    _memory(instance, start, end)
    T = makespan_of(instance, end)
    if claimed is not None and claimed != T:
        raise Invalid("makespan", f"claimed {claimed}, recomputed {T}")
    return T


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-5], file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as fh:
            instance = json.load(fh)
        sched = instance["schedule"]
        if len(argv) == 3:
            with open(argv[2]) as fh:
                sched = json.load(fh)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot read the instance or schedule: {exc}", file=sys.stderr)
        return 2
    ops, claimed = (sched, None) if isinstance(sched, list) else (sched.get("ops", []), sched.get("makespan"))
    try:
        T = check(instance, ops, claimed)
    except Invalid as exc:
        print(f"invalid: {exc}")
        return 1
    print(f"valid: makespan {T} ticks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
