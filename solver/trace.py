"""Chrome trace (Trace Event Format) of a simulation: one track per device and per link.

Opens in Perfetto (ui.perfetto.dev) and chrome://tracing. Times are microseconds. The
trace is written as text in pieces (``trace_chunks``), so a large one needs little memory;
``chrome_trace`` gives the same as a dict.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .simulate import Simulation

CHUNK_EVENTS = 65536  # op or message events per piece of text


def chrome_trace(sim: Simulation) -> dict:
    """The trace as a dict: process 0 holds one thread per device, process 1 one per link."""
    return json.loads("".join(trace_chunks(sim)))


def write_chrome_trace(sim: Simulation, path: str) -> None:
    """Write the trace as JSON to ``path``."""
    with open(path, "w") as fh:
        fh.writelines(trace_chunks(sim))


def _scale(sim: Simulation) -> float:
    """Microseconds per unit of the simulation's times."""
    return 1e6 if sim.costs.unit == "s" else (sim.costs.tick_s * 1e6 if sim.costs.tick_s else 1.0)


def trace_chunks(sim: Simulation):
    """The trace's JSON text, piece by piece."""
    scale = _scale(sim)
    sched = sim.schedule
    ops, device = sched.ops, sched.device
    names = ops.names()
    events = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "devices"}},
              {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "links"}}]
    events += [{"ph": "M", "pid": 0, "tid": d, "name": "thread_name", "args": {"name": f"device {d}"}}
               for d in range(sched.num_devices)]
    yield '{"traceEvents": [' + ", ".join(map(json.dumps, events))
    kinds = np.array(["F", "B", "W"])[ops.kind].tolist()
    op_event = (', {{"ph": "X", "pid": 0, "tid": {}, "name": "{}", "cat": "{}", "ts": {!r}, "dur": {!r}, '
                '"args": {{"microbatch": {}, "pipeline": {}, "stage": {}}}}}').format
    columns = (device.tolist(), names, kinds, (sim.start_times * scale).tolist(),
               ((sim.end_times - sim.start_times) * scale).tolist(), ops.microbatch.tolist(),
               ops.pipeline.tolist(), ops.stage.tolist())
    yield from _pieces(op_event, columns)
    src, dst, t0, t1 = sim.transfer_times
    pairs = list(zip(device[src].tolist(), device[dst].tolist()))
    links = {pair: i for i, pair in enumerate(dict.fromkeys(pairs))}
    send_event = ', {{"ph": "X", "pid": 1, "tid": {}, "name": "{}->{}", "cat": "send", "ts": {!r}, "dur": {!r}}}'.format
    sends = ([links[p] for p in pairs], [names[i] for i in src.tolist()], [names[j] for j in dst.tolist()],
             (t0 * scale).tolist(), ((t1 - t0) * scale).tolist())
    yield from _pieces(send_event, sends)
    events = [{"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": f"link {a}->{b}"}}
              for (a, b), tid in links.items()]
    events += [{"ph": "X", "pid": 1, "tid": len(links) + i, "name": f"all-reduce {list(stages)}",
                "cat": "allreduce", "ts": s * scale, "dur": (e - s) * scale}
               for i, (stages, s, e) in enumerate(sim.allreduces)]
    events += [{"ph": "X", "pid": 0, "tid": d, "name": "optimizer", "cat": "opt", "ts": s * scale,
                "dur": (e - s) * scale} for d, (s, e) in enumerate(sim.optimizer) if e > s]
    yield "".join(", " + json.dumps(e) for e in events)
    yield '], "displayTimeUnit": "ms"}'


def _pieces(event, columns):
    """``event(*row)`` for every row of ``columns``, joined in pieces of ``CHUNK_EVENTS``."""
    n = len(columns[0])
    for a in range(0, n, CHUNK_EVENTS):
        yield "".join(map(event, *(c[a:a + CHUNK_EVENTS] for c in columns)))
