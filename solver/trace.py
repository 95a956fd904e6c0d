"""Chrome trace (Trace Event Format) of a simulation: one track per device and per link.

Opens in Perfetto (ui.perfetto.dev) and chrome://tracing. Times are microseconds.
"""

from __future__ import annotations

import json

from .simulate import Simulation


def chrome_trace(sim: Simulation) -> dict:
    """The trace as a dict: process 0 holds one thread per device, process 1 one per link."""
    scale = 1e6 if sim.costs.unit == "s" else (sim.costs.tick_s * 1e6 if sim.costs.tick_s else 1.0)
    events: list[dict] = [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "devices"}},
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "links"}},
    ]
    for d in range(sim.schedule.num_devices):
        events.append({"ph": "M", "pid": 0, "tid": d, "name": "thread_name", "args": {"name": f"device {d}"}})
    for op, s in sim.start.items():
        events.append({
            "ph": "X", "pid": 0, "tid": sim.schedule.device_of(op), "name": str(op),
            "cat": op.kind.value, "ts": s * scale, "dur": (sim.end[op] - s) * scale,
            "args": {"microbatch": op.microbatch, "pipeline": op.pipeline, "stage": op.stage},
        })
    links: dict[tuple[int, int], int] = {}
    for tr in sim.transfers:
        tid = links.setdefault((tr.src, tr.dst), len(links))
        events.append({
            "ph": "X", "pid": 1, "tid": tid, "name": f"{tr.op}->{tr.consumer}", "cat": "send",
            "ts": tr.start * scale, "dur": (tr.end - tr.start) * scale,
        })
    for (src, dst), tid in links.items():
        events.append({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": f"link {src}->{dst}"}})
    for i, (stages, s, e) in enumerate(sim.allreduces):
        events.append({"ph": "X", "pid": 1, "tid": len(links) + i, "name": f"all-reduce {list(stages)}",
                       "cat": "allreduce", "ts": s * scale, "dur": (e - s) * scale})
    for d, (s, e) in enumerate(sim.optimizer):
        if e > s:
            events.append({"ph": "X", "pid": 0, "tid": d, "name": "optimizer", "cat": "opt",
                           "ts": s * scale, "dur": (e - s) * scale})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(sim: Simulation, path: str) -> None:
    """Write ``chrome_trace(sim)`` as JSON to ``path``."""
    with open(path, "w") as fh:
        json.dump(chrome_trace(sim), fh)
