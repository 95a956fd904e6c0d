"""``pipetab view``: schedules compared on one self-contained HTML page.

The page needs no server and no network: its data (every op's table cell and simulated
times, per-device memory over time, the levels' numbers from ``Levels.as_dict()``) and the
script and style that draw it are written into the one file. Each schedule shows as its
table (ticks), its simulated timeline and its memory per device over time; hovering an op
shows its times and its device's memory, the wheel zooms and dragging pans (the timeline
and the memory chart of a schedule move together). Without hardware costs the table is the
timeline (no message time) and memory counts activations.

    from pipetab.view import write_page
    write_page("view.html", [evaluate_levels("1f1b", 4, 8, costs=...), ...])
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from pipetab.formatting import HEADER, formula_source, level_rows
from pipetab.schedules.text import html_text
from pipetab.solver.levels import check_finite
from pipetab.solver.pricing import slot_costs
from pipetab.solver.simulate import simulate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pipetab.solver.levels import Levels
    from pipetab.solver.simulate import Simulation

__all__ = ["page_data", "render_page", "timeline", "write_page"]


def timeline(levels: Levels) -> Simulation:
    """The simulation to draw: the levels' own, else the table's slot costs simulated
    (no message time: the timeline is the table, memory counts activations)."""
    if levels.simulation is not None:
        return levels.simulation
    return check_finite(simulate(levels.schedule, slot_costs(levels.schedule, levels.slots)))


def _times(values, integral: bool) -> list:
    return [int(v) for v in values] if integral else [round(float(v), 9) for v in values]


def _settled(steps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Memory steps with one value per time, the one after every change at that time (at
    equal times releases come first, so no peak is lost)."""
    out: list[tuple[float, float]] = []
    for t, v in steps:
        if out and out[-1][0] == t:
            out[-1] = (t, v)
        else:
            out.append((t, v))
    return out


def page_data(levels: Levels, title: str | None = None) -> dict:
    """What the page draws of one schedule (plain data): ``ops`` as columns in device
    order (kind, pipeline, stage, microbatch, table start/end in ticks, simulated start/end),
    ``memory`` as per-device steps (time, amount held), the levels' numbers and units."""
    doc = levels.as_dict()
    rows = level_rows(doc)
    sim, sched, table = timeline(levels), levels.schedule, levels.table
    hardware = levels.simulation is not None and sim.costs.unit == "s"
    cell = table.by_op
    ops = [op for order in sched.orders for op in order]
    integral = sim.costs.unit != "s"
    tick = 1.0 if hardware else sim.costs.tick_slots
    memory = []
    for d in range(sched.num_devices):
        steps = _settled(sim.memory_timeline(d))
        memory.append([_times([t for t, _ in steps], integral), [float(v) for _, v in steps]])
    capacity = list(sim.costs.capacity) if hardware else []
    return {
        "title": title or f"{doc['schedule']} S={doc['stages']} B={doc['microbatches']}",
        "devices": sched.num_devices,
        "pipelines": sched.num_pipelines,
        "levels": doc,
        "rows": [list(HEADER), *map(list, rows)],
        "formula_source": formula_source(doc),
        "time_unit": "s" if hardware else "slots",
        "time_scale": tick,  # seconds or slots per simulated time unit
        "memory_unit": "bytes" if hardware else "activations",
        "capacity": [None if c is None else float(c) for c in capacity],
        "table_tick_slots": table.tick_slots,
        "table_makespan": table.makespan,
        "makespan": sim.makespan,
        "ops": {
            "device": [sched.device_of(op) for op in ops],
            "kind": "".join(op.kind.value for op in ops),
            "pipeline": [op.pipeline for op in ops],
            "stage": [op.stage for op in ops],
            "microbatch": [op.microbatch for op in ops],
            "table_start": [cell[op].start for op in ops],
            "table_end": [cell[op].end for op in ops],
            "start": _times((sim.start[op] for op in ops), integral),
            "end": _times((sim.end[op] for op in ops), integral),
        },
        "memory": memory,
    }


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render(template: str, title: str, payload: dict, styles: tuple[str, ...], scripts: tuple[str, ...]) -> str:
    """The asset ``template`` with ``title``, ``payload`` as JSON data and the assets
    ``styles`` and ``scripts`` filled in: one self-contained document."""
    data = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    # nothing in the data can end the script element or open an HTML comment or tag in it
    # ("</script>", "<!--", "<script" from a name in a user's file): <, > and & as JSON escapes
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    parts = {"title": html_text(title), "style": "".join(map(_asset, styles)), "data": data,
             "script": "\n".join(map(_asset, scripts))}
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], _asset(template))


def render_page(schedules: list[dict], title: str = "pipetab view") -> str:
    """The HTML page of ``page_data`` values (one self-contained document)."""
    return render("page.html", title, {"title": title, "schedules": schedules}, ("view.css",), ("view.js",))


def write_page(path: str | Path, levels: list[Levels], titles: Sequence[str | None] | None = None,
               title: str = "pipetab view") -> Path:
    """Write the page comparing ``levels`` to ``path``; returns the path."""
    titles = titles or [None] * len(levels)
    text = render_page([page_data(lv, t) for lv, t in zip(levels, titles)], title)
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path
