"""The levels as rows of text, shared by ``pipetab evaluate`` and ``pipetab view``: one
formatting of ``Levels.as_dict()`` wherever people read it."""

from __future__ import annotations

HEADER = ("quantity", "formula", "table", "simulation")


LIST_MAX = 8  # per-device lists longer than this show as a range


def fmt(v) -> str:
    """A value as people read it: 4 significant digits, yes/NO, '-' for none; a list of
    more than ``LIST_MAX`` per-device values as its range."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list) and len(v) > LIST_MAX:
        if all(isinstance(x, bool) for x in v):
            return f"yes on {sum(v)} of {len(v)} devices"
        return f"{fmt(min(v))} to {fmt(max(v))} over {len(v)} devices"
    if isinstance(v, list):
        return "[" + " ".join(fmt(x) for x in v) + "]"
    return str(v)


def _text(v: object) -> str:
    return v if isinstance(v, str) else fmt(v)


def memory_unit(sim: dict | None) -> tuple[str, float]:
    """GiB, or TiB when the largest peak exceeds 1 TiB."""
    if not sim:
        return "GiB", 2**30
    return ("TiB", 2**40) if max(sim["peak_memory_bytes"]) >= 2**40 else ("GiB", 2**30)


def _in(values, scale) -> list[float] | None:
    return None if values is None else [round(v / scale, 3) for v in values]


def level_rows(doc: dict) -> list[tuple[str, str, str, str]]:
    """``Levels.as_dict()`` as rows (quantity, formula, table, simulation) of text; the
    simulation column is in seconds and bytes (hardware costs)."""
    f, t, s = doc["formula"] or {}, doc["table"], doc.get("simulation")
    unit, scale = memory_unit(s)
    rows = [
        ("bubble / idle ratio", f.get("bubble_ratio"), t["bubble_ratio"], s and s["idle_ratio"]),
        ("makespan", None, f"{t['makespan_slots']:g} slots", s and f"{s['makespan_s']:.4g} s"),
        (f"peak activations (stage units | {unit})", f.get("peak_activations"), t["peak_activation_share"],
         s and _in(s["peak_activation_bytes"], scale)),
        (f"weights (stage copies | {unit} persistent)", f.get("weight_copies"), t["weight_copies"],
         s and _in(s["persistent_bytes"], scale)),
    ]
    if s:
        rows.append((f"peak memory ({unit})", None, None, _in(s["peak_memory_bytes"], scale)))
        rows.append(("fits memory", None, None, s["fits_memory"]))
        rows.append(("exposed communication", None, None,
                     None if s["exposed_comm_s"] is None else f"{s['exposed_comm_s']:.4g} s"))
    if doc.get("cpsat"):
        c = doc["cpsat"]
        shown = c["status"] if c["makespan"] is None else (
            f"{c['makespan']} slots" if c["unit"] == "slots" else f"{c['makespan']:.4g} s")
        rows.append(("CP-SAT makespan", None, shown if c["unit"] == "slots" else None,
                     shown if c["unit"] != "slots" else None))
    return [(_text(a), _text(b), _text(c), _text(d)) for a, b, c, d in rows]


def formula_source(doc: dict) -> str:
    """Where the level-1 numbers come from (or that the schedule has no closed form)."""
    return doc["formula"]["bubble_source"] if doc["formula"] else "no closed form for this schedule"
