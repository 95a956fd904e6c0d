"""Chrome trace (Trace Event Format) of a simulation: one track per device and per link.

Opens in Perfetto (ui.perfetto.dev) and chrome://tracing. Times are microseconds.
"""

from __future__ import annotations

import json
from itertools import islice

from .simulate import Simulation

CHUNK_EVENTS = 65536  # events per piece written by ``write_chrome_trace``


def chrome_trace(sim: Simulation) -> dict:
    """The trace as a dict: process 0 holds one thread per device, process 1 one per link."""
    return {"traceEvents": list(trace_events(sim)), "displayTimeUnit": "ms"}


def trace_events(sim: Simulation):
    """The trace's events, one at a time."""
    scale = 1e6 if sim.costs.unit == "s" else (sim.costs.tick_s * 1e6 if sim.costs.tick_s else 1.0)
    yield {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "devices"}}
    yield {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "links"}}
    for d in range(sim.schedule.num_devices):
        yield {"ph": "M", "pid": 0, "tid": d, "name": "thread_name", "args": {"name": f"device {d}"}}
    sched = sim.schedule
    ops = sched.ops
    names = ops.names()
    cats = ["F", "B", "W"]
    for name, k, p, st, m, d, s, dur in zip(
        names, ops.kind.tolist(), ops.pipeline.tolist(), ops.stage.tolist(), ops.microbatch.tolist(),
        sched.device.tolist(), (sim.start_times * scale).tolist(),
        ((sim.end_times - sim.start_times) * scale).tolist(),
    ):
        yield {
            "ph": "X", "pid": 0, "tid": d, "name": name, "cat": cats[k], "ts": s, "dur": dur,
            "args": {"microbatch": m, "pipeline": p, "stage": st},
        }
    links: dict[tuple[int, int], int] = {}
    src, dst, t0, t1 = sim.transfer_times
    dev = sched.device
    for i, j, a, b, s, e in zip(src.tolist(), dst.tolist(), dev[src].tolist(), dev[dst].tolist(),
                                t0.tolist(), t1.tolist()):
        tid = links.setdefault((a, b), len(links))
        yield {
            "ph": "X", "pid": 1, "tid": tid, "name": f"{names[i]}->{names[j]}", "cat": "send",
            "ts": s * scale, "dur": (e - s) * scale,
        }
    for (src, dst), tid in links.items():
        yield {"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": f"link {src}->{dst}"}}
    for i, (stages, s, e) in enumerate(sim.allreduces):
        yield {"ph": "X", "pid": 1, "tid": len(links) + i, "name": f"all-reduce {list(stages)}",
               "cat": "allreduce", "ts": s * scale, "dur": (e - s) * scale}
    for d, (s, e) in enumerate(sim.optimizer):
        if e > s:
            yield {"ph": "X", "pid": 0, "tid": d, "name": "optimizer", "cat": "opt",
                   "ts": s * scale, "dur": (e - s) * scale}


def write_chrome_trace(sim: Simulation, path: str) -> None:
    """Write ``chrome_trace(sim)`` as JSON to ``path`` (in pieces: memory stays small)."""
    events = trace_events(sim)
    with open(path, "w") as fh:
        fh.write('{"traceEvents": [')
        sep = ""
        while chunk := list(islice(events, CHUNK_EVENTS)):
            fh.write(sep + json.dumps(chunk)[1:-1])
            sep = ", "
        fh.write('], "displayTimeUnit": "ms"}')
