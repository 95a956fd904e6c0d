"""Text, CSV, JSON and torch-CSV forms of tables; each ``to_*`` has a ``from_*`` inverse.

* text: an aligned grid like the tables in the reference notes — a header ``t | 0 1 ...``
  and one row ``devD | cell cell ...`` per device; a cell is ``.`` (idle) or an op's compact
  form (``F3s2``, ``B3p1s2``); an op of several slots repeats in consecutive cells;
* CSV: one row per op: device,start,duration,kind,pipeline,stage,microbatch;
* JSON: ``{"schedule", "stages", "microbatches", "devices", "makespan_slots",
  "tick_slots", "bubble_ratio", "ops": [{"device", "start", "duration", "kind",
  "pipeline", "stage", "microbatch"}]}``;

Times of ops are in table ticks (``Table.tick_slots`` slots each; 1 unless a device
holds several stages); ``makespan_slots`` is in slots.
* torch CSV: PyTorch ``torch.distributed.pipelining`` compute-only form — one row per rank,
  one action per cell (``2F0`` = global stage 2, forward, microbatch 0; ``I``/``W`` for a
  split backward, ``B`` a full backward; ``(2F0;5B1)OVERLAP_F_B`` an overlapped pair),
  empty cells for idle slots. Only single-pipeline schedules have it.

Which rank holds which stage is not in a torch CSV: ``torch_layout`` names it and the
torchtitan settings that build it. Actions that compute nothing pipetab models
(``REDUCE_GRAD``, ``UNSHARD``, ``RESHARD``, sends and receives) are skipped when read.

The ops of a block (``Schedule.blocks``) share their slots: the text grid writes them in
one cell joined by ``&`` (``F3s2&B1s5&W1s5``), CSV and JSON as rows of equal start and
duration.
"""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np

from .arrays import KIND_CODES, KINDS, OpArrays
from .limits import check_grid
from .ops import Kind, Op
from .table import Table

FIELDS = ("device", "start", "duration", "kind", "pipeline", "stage", "microbatch")


class FormatError(ValueError):
    """A table file cannot be read."""


def read_text_file(path, what: str = "file") -> str:
    """The text of a regular UTF-8 file; ``ValueError`` with one sentence naming ``what``
    and the path when it is missing, not a regular file (a folder, a pipe, a device: they
    could block or never end), or not UTF-8."""
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} is not a regular file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start})") from None


# ---- text -------------------------------------------------------------------------------

def to_text(table: Table) -> str:
    """The aligned grid (see module docstring); the ops of a block share their cells,
    written ``F3s2&B1s5``."""
    check_grid(table.num_devices, table.makespan)
    names = table.ops.names()
    keep = ~table.shared
    if not keep.all():
        for i in np.nonzero(~keep)[0].tolist():
            opener = i - 1
            while not keep[opener]:
                opener -= 1
            names[opener] += "&" + names[i]
    index = np.nonzero(keep)[0]
    names = [names[i] for i in index.tolist()] + ["."]
    device, start, duration = table.device[index], table.start[index], table.duration[index]
    cells = np.full((table.num_devices, table.makespan), len(names) - 1, np.int64)
    rows = np.repeat(device, duration)
    first = np.repeat(start - np.cumsum(np.concatenate([[0], duration[:-1]])), duration)
    cols = first + np.arange(len(rows))
    cells[rows, cols] = np.repeat(np.arange(len(index)), duration)
    width = max(max(map(len, names)), len(str(table.makespan - 1)), 1)
    dev_w = len(f"dev{table.num_devices - 1}")
    padded = np.array([x.ljust(width) for x in names], dtype=object)
    head = "t".ljust(dev_w) + " | " + " ".join(str(t).ljust(width) for t in range(table.makespan))
    lines = [head] + [f"dev{d}".ljust(dev_w) + " | " + " ".join(padded[row]) for d, row in enumerate(cells)]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def from_text(text: str, name: str = "") -> Table:
    """Parse the aligned grid; raises ``FormatError`` naming the line and cell."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    rows = [ln for ln in lines if re.match(r"^\s*dev\d+\s*\|", ln)]
    if not rows:
        raise FormatError("text table has no 'devN | ...' rows")
    records: list[tuple[Op, int, int, int]] = []
    devices = []
    for ln in rows:
        head, _, body = ln.partition("|")
        d = int(head.strip()[3:])
        devices.append(d)
        cells = body.split()
        t = 0
        while t < len(cells):
            cell = cells[t]
            if cell == ".":
                t += 1
                continue
            try:
                block = [Op.parse(part) for part in cell.split("&")]
            except ValueError as exc:
                raise FormatError(f"dev{d}, slot {t}: {exc}") from None
            t0 = t
            while t < len(cells) and cells[t] == cell:
                t += 1
            records.extend((op, d, t0, t - t0) for op in block)
    if sorted(devices) != list(range(len(devices))):
        raise FormatError(f"text table rows must be dev0..dev{len(devices) - 1}, got {sorted(devices)}")
    return _table(len(devices), records, name)


def _table(num_devices: int, records: list[tuple[Op, int, int, int]], name: str, tick_slots: float = 1.0) -> Table:
    """The table of (op, device, start, duration) records."""
    if not records:
        return Table.from_arrays(num_devices, OpArrays.from_ops([]), [], [], [], name, tick_slots)
    ops, device, start, duration = zip(*records)
    return Table.from_arrays(num_devices, OpArrays.from_ops(ops), device, start, duration, name, tick_slots)


# ---- CSV --------------------------------------------------------------------------------

CHUNK_OPS = 65536  # ops per chunk of the streamed CSV and JSON forms


def to_csv(table: Table) -> str:
    """One row per op, header ``device,start,duration,kind,pipeline,stage,microbatch``."""
    return "".join(csv_chunks(table))


def csv_chunks(table: Table):
    """``to_csv`` in pieces of at most ``CHUNK_OPS`` rows (for writing large tables)."""
    yield ",".join(FIELDS) + "\n"
    for a in range(0, len(table), CHUNK_OPS):
        rows = zip(*(map(str, c) for c in _columns(table, slice(a, a + CHUNK_OPS))))
        yield "".join(f"{','.join(r)}\n" for r in rows)


def _columns(table: Table, part: slice = slice(None)) -> list[list]:
    """The ``FIELDS`` columns of (a slice of) the table as lists of plain values."""
    ops = table.ops
    letters = np.array(["F", "B", "W"])[ops.kind[part]].tolist()
    return [table.device[part].tolist(), table.start[part].tolist(), table.duration[part].tolist(), letters,
            ops.pipeline[part].tolist(), ops.stage[part].tolist(), ops.microbatch[part].tolist()]


MAX_FIELD = 2**40  # larger numbers in a table file are refused (not a table pipetab can hold)
MAX_OPS_COLUMN = 2**24  # a run-length column expands to at most ten times this many values


def _record_to_entry(rec: dict, where: str) -> tuple[Op, int, int, int]:
    missing = [f for f in FIELDS if f not in rec]
    if missing:
        raise FormatError(f"{where}: missing field {missing[0]!r} (fields: {', '.join(FIELDS)})")
    try:
        kind = Kind(str(rec["kind"]).strip())
    except ValueError:
        raise FormatError(f"{where}: kind must be F, B or W, got {rec['kind']!r}") from None
    values = {}
    for f in ("device", "start", "duration", "pipeline", "stage", "microbatch"):
        raw = rec[f]
        try:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            values[f] = int(raw)
        except (TypeError, ValueError):
            raise FormatError(f"{where}: {f} must be an integer, got {raw!r}") from None
        if values[f] < 0 or (f == "duration" and values[f] < 1):
            raise FormatError(f"{where}: {f} must be {'>= 1' if f == 'duration' else '>= 0'}, got {raw!r}")
        if values[f] > MAX_FIELD:
            raise FormatError(f"{where}: {f} must be at most {MAX_FIELD}, got {raw!r}")
    op = Op(kind, values["pipeline"], values["stage"], values["microbatch"])
    return op, values["device"], values["start"], values["duration"]


def from_csv(text: str, name: str = "", num_devices: int | None = None) -> Table:
    """Parse the per-op CSV; the device count is the largest device + 1 unless given."""
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or set(FIELDS) - set(reader.fieldnames):
        raise FormatError(f"CSV table must have the header {','.join(FIELDS)}")
    records = [_record_to_entry(r, f"CSV row {i + 2}") for i, r in enumerate(reader)]
    if not records:
        raise FormatError("CSV table has no ops")
    n = num_devices or max(r[1] for r in records) + 1
    return _table(n, records, name)


# ---- JSON -------------------------------------------------------------------------------

def op_records(table: Table) -> list[dict]:
    """The ``ops`` records of the JSON form."""
    return [dict(zip(FIELDS, row)) for row in zip(*_columns(table))]


def to_json_dict(
    table: Table, schedule: str = "", stages: int | None = None, bubble_ratio: float | None = None
) -> dict:
    """The JSON form as a dict (see module docstring)."""
    return {**_json_head(table, schedule, stages, bubble_ratio), "ops": op_records(table)}


def _json_head(table: Table, schedule: str, stages: int | None, bubble_ratio: float | None) -> dict:
    makespan = table.makespan
    if bubble_ratio is None:
        busy = int(table.duration.sum())
        bubble_ratio = 1 - busy / (table.num_devices * makespan) if makespan else 0.0
    return {
        "schedule": schedule or table.name,
        "stages": stages if stages is not None else table.num_devices,
        "microbatches": table.microbatches,
        "devices": table.num_devices,
        "makespan_slots": table.makespan_slots,
        "tick_slots": table.tick_slots,
        "bubble_ratio": bubble_ratio,
    }


def to_json(table: Table, **kwargs) -> str:
    """The JSON form as text: the fields indented, one op per line."""
    return "".join(json_chunks(table, **kwargs))


def json_chunks(table: Table, schedule: str = "", stages: int | None = None, bubble_ratio: float | None = None):
    """``to_json`` in pieces of at most ``CHUNK_OPS`` ops (for writing large tables)."""
    head = json.dumps(_json_head(table, schedule, stages, bubble_ratio), indent=1)
    yield head[:-2] + ',\n "ops": ['
    fields = ", ".join(f'"{f}": "{{}}"' if f == "kind" else f'"{f}": {{}}' for f in FIELDS)
    template = "\n  {{" + fields + "}}"
    for a in range(0, len(table), CHUNK_OPS):
        lines = (template.format(*row) for row in zip(*_columns(table, slice(a, a + CHUNK_OPS))))
        yield ("," if a else "") + ",".join(lines)
    yield "\n ]\n}"


def from_json(text: str, name: str = "") -> Table:
    """Parse the JSON form (only ``devices`` and ``ops`` are needed). ``ops`` is a list of
    records, or the compact columns ``pipetab search`` writes: an object of equally long
    lists ``device``, ``start``, ``duration``, ``pipeline``, ``stage``, ``microbatch`` and
    ``kind`` as a string of letters (or a list of them); a column may also be given as
    ``{"runs": [[value, count], ...]}``. A ``tick_slots`` of null (a result in seconds,
    its ops in ticks) reads as 1."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"JSON table is malformed: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise FormatError("JSON table is nested too deeply (a table is an object with an 'ops' list of "
                          "flat records)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), (list, dict)):
        raise FormatError("JSON table must be an object with an 'ops' list (or an object of columns)")
    if isinstance(doc["ops"], dict):
        return _from_columns(doc, name)
    records = [
        _record_to_entry(r if isinstance(r, dict) else {}, f"JSON op {i}") for i, r in enumerate(doc["ops"])
    ]
    if not records:
        raise FormatError("JSON table has no ops")
    devices = doc.get("devices", max(r[1] for r in records) + 1)
    if not isinstance(devices, int) or devices < 1:
        raise FormatError(f"JSON table: devices must be an integer >= 1, got {devices!r}")
    try:
        return _table(devices, records, name or str(doc.get("schedule", "")), _tick_slots(doc))
    except ValueError as exc:
        raise FormatError(f"JSON table: {exc}") from None


def _tick_slots(doc: dict) -> float:
    tick = doc.get("tick_slots", 1.0)
    tick = 1.0 if tick is None else tick
    if isinstance(tick, bool) or not isinstance(tick, (int, float)) or not 0 < tick < float("inf"):
        raise FormatError(f"JSON table: tick_slots must be a number > 0, got {tick!r}")
    return float(tick)


def _unrun(col, name: str):
    """A column given as ``{"runs": [[value, count], ...]}`` as its list of values."""
    if not isinstance(col, dict):
        return col
    runs = col.get("runs")
    if set(col) != {"runs"} or not isinstance(runs, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            and r[1] >= 1 for r in runs) or sum(r[1] for r in runs) > 10 * MAX_OPS_COLUMN:
        raise FormatError(f'JSON ops columns: {name} must be a list of integers or {{"runs": [[value, count], ...]}} '
                          "with counts >= 1")
    return [v for v, n in runs for _ in range(n)]


def _from_columns(doc: dict, name: str) -> Table:
    """The compact form: ``ops`` an object of columns (``from_json``)."""
    cols = doc["ops"]
    missing = [f for f in FIELDS if f not in cols]
    if missing:
        raise FormatError(f"JSON ops columns: missing {missing[0]!r} (columns: {', '.join(FIELDS)})")
    kinds = cols["kind"]
    if isinstance(kinds, str):
        kinds = list(kinds)
    if not isinstance(kinds, list) or any(k not in ("F", "B", "W") for k in kinds):
        raise FormatError("JSON ops columns: kind must be a string of the letters F, B and W (or a list of them)")
    values = {}
    for f in ("device", "start", "duration", "pipeline", "stage", "microbatch"):
        col = _unrun(cols[f], f)
        try:
            arr = np.array(col) if isinstance(col, list) else None
        except (OverflowError, ValueError):
            arr = None
        if arr is None or (arr.size and arr.dtype.kind not in "iu") or arr.ndim != 1:
            raise FormatError(f"JSON ops columns: {f} must be a list of integers")
        if len(arr) != len(kinds):
            raise FormatError(f"JSON ops columns: {f} has {len(arr)} values, kind has {len(kinds)}")
        low = 1 if f == "duration" else 0
        bad = np.flatnonzero((arr < low) | (arr > MAX_FIELD))
        if bad.size:
            raise FormatError(f"JSON op {int(bad[0])}: {f} must be {'>= 1' if low else '>= 0'} and at most "
                              f"{MAX_FIELD}, got {col[int(bad[0])]!r}")
        values[f] = arr.astype(np.int64)
    if not kinds:
        raise FormatError("JSON table has no ops")
    devices = doc.get("devices", int(values["device"].max()) + 1)
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise FormatError(f"JSON table: devices must be an integer >= 1, got {devices!r}")
    codes = np.array([KIND_CODES[Kind(k)] for k in kinds], np.int8)
    ops = OpArrays(codes, values["pipeline"], values["stage"], values["microbatch"])
    try:
        return Table.from_arrays(devices, ops, values["device"], values["start"], values["duration"],
                                 name or str(doc.get("schedule", "")), _tick_slots(doc))
    except ValueError as exc:
        raise FormatError(f"JSON table: {exc}") from None


# ---- torch CSV --------------------------------------------------------------------------

_TORCH_RE = re.compile(r"^(\d+)([FBIW])(\d+)$")
_OVERLAP_RE = re.compile(r"^\(([^;()]+);([^;()]+)\)OVERLAP_F_B$")
# actions torch writes that compute nothing pipetab models: gradient reduction and FSDP
# (un)sharding per stage, and the sends and receives of the compute_comms form
_TORCH_SKIPPED = re.compile(r"^\d+(REDUCE_GRAD|UNSHARD|RESHARD|(SEND|RECV)_[FB]\d+)$")


def _torch_action(ops: list[Op], letters: dict[Kind, str]) -> str:
    """One torch action for an op or a block: ``2F0``; a full backward (B with its W)
    ``3B1``; an overlapped pair ``(2F0;5B1)OVERLAP_F_B`` (its backward full when the block
    holds its W, else ``I``)."""
    def one(op: Op, letter: str) -> str:
        return f"{op.stage}{letter}{op.microbatch}"

    kinds = [op.kind for op in ops]
    if len(ops) == 1:
        return one(ops[0], letters[ops[0].kind])
    backward = next(op for op in ops if op.kind is Kind.B)
    full = Kind.W in kinds
    if Kind.F not in kinds:
        return one(backward, "B")
    forward = next(op for op in ops if op.kind is Kind.F)
    return f"({one(forward, 'F')};{one(backward, 'B' if full else letters[Kind.B])})OVERLAP_F_B"


def to_torch_csv(table: Table) -> str:
    """PyTorch compute-only CSV (one row per rank; idle slots empty). With a split backward
    the input-gradient op is written ``I`` and the weight-gradient op ``W``, as torch does;
    otherwise a backward is ``B``. A block is one action: a full backward ``B`` (its input
    gradient and W together), an overlapped pair torch's ``(F;B)OVERLAP_F_B``. Multi-slot
    ops are written once, at their start slot."""
    ops = table.ops
    if ops.pipeline.any():
        raise ValueError("torch CSV holds one pipeline; this table has several (e.g. Chimera)")
    check_grid(table.num_devices, table.makespan)
    split = bool((ops.kind == KIND_CODES[Kind.W]).any())
    letters = {Kind.F: "F", Kind.B: "I" if split else "B", Kind.W: "W"}
    # one action per block's first op (a lone op's text straight from the columns: 1M ops)
    heads = np.flatnonzero(~table.shared)
    ends = np.append(heads[1:], len(ops)).tolist()
    stage, mb, kind = ops.stage.tolist(), ops.microbatch.tolist(), ops.kind.tolist()
    code = [letters[k] for k in KINDS]
    text = [f"{stage[i]}{code[kind[i]]}{mb[i]}" if j == i + 1 else
            _torch_action([ops.op(k) for k in range(i, j)], letters) for i, j in zip(heads.tolist(), ends)]
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    bounds = table.offsets.tolist()
    cut = np.searchsorted(heads, bounds).tolist()  # device d's actions: text[cut[d]:cut[d + 1]]
    at = table.start[heads].tolist()
    for d in range(table.num_devices):
        row = [""] * (at[cut[d + 1] - 1] + 1 if cut[d + 1] > cut[d] else 0)
        for h in range(cut[d], cut[d + 1]):
            row[at[h]] = text[h]
        w.writerow(row)
    return out.getvalue()


def _torch_ops(cell: str, where: str) -> tuple[list[tuple[int, str, int]], bool]:
    """(stage, letter, microbatch) of each action in a cell, and whether it is a pair."""
    pair = _OVERLAP_RE.match(cell)
    parts = [pair[1], pair[2]] if pair else [cell]
    out = []
    for part in parts:
        m = _TORCH_RE.match(part.strip())
        if not m:
            raise FormatError(f"torch CSV {where}: action {cell!r} is not like '2F0' or '(2F0;5B1)OVERLAP_F_B'")
        out.append((int(m[1]), m[2], int(m[3])))
    if pair and [p[1] for p in out] not in (["F", "B"], ["F", "I"]):
        raise FormatError(f"torch CSV {where}: OVERLAP_F_B pairs a forward with a backward, got {cell!r}")
    return out, bool(pair)


def from_torch_csv(text: str, name: str = "", slots=None) -> Table:
    """Read PyTorch's compute-only CSV into a table: each rank's actions in row order,
    laid out as soon as possible with ``slots`` (default F=1, B=2, I=B, W=1). With ``I``
    or ``W`` anywhere a ``B`` is a full backward: its input gradient and W as one block;
    an ``OVERLAP_F_B`` pair is a block."""
    from .schedule import Placement, Schedule
    from .table import SlotDurations, layout

    rows = list(csv.reader(io.StringIO(text)))
    parsed_rows: list[list[tuple[list[tuple[int, str, int]], bool]]] = []
    stage2dev: dict[int, int] = {}
    for d, row in enumerate(rows):
        parsed = []
        for c, cell in enumerate(row):
            cell = cell.strip()
            if cell and not _TORCH_SKIPPED.match(cell):
                actions, pair = _torch_ops(cell, f"row {d + 1}, column {c + 1}")
                for stage, _, _ in actions:
                    if stage2dev.setdefault(stage, d) != d:
                        raise FormatError(f"torch CSV: stage {stage} appears on ranks {stage2dev[stage]} and {d}")
                parsed.append((actions, pair))
        parsed_rows.append(parsed)
    if not stage2dev:
        raise FormatError("torch CSV has no actions")
    split = any(letter in "IW" for row in parsed_rows for actions, _ in row for _, letter, _ in actions)
    orders: list[list[Op]] = []
    blocks: list[tuple[Op, ...]] = []
    mbs: set[int] = set()
    kinds = {"F": Kind.F, "B": Kind.B, "I": Kind.B, "W": Kind.W}
    for prow in parsed_rows:
        order: list[Op] = []
        for actions, _pair in prow:
            block: list[Op] = []
            for stage, letter, mb in actions:
                block.append(Op(kinds[letter], 0, stage, mb))
                if letter == "B" and split:  # a full backward: its W with it
                    block.append(Op(Kind.W, 0, stage, mb))
                mbs.add(mb)
            order.extend(block)
            if len(block) > 1:
                blocks.append(tuple(block))
        orders.append(order)
    num_stages = max(stage2dev) + 1
    missing = [s for s in range(num_stages) if s not in stage2dev]
    if missing:
        raise FormatError(f"torch CSV: stage {missing[0]} has no actions")
    placement = Placement((tuple(stage2dev[s] for s in range(num_stages)),), len(rows))
    sched = Schedule(name or "torch", placement, (0,) * (max(mbs) + 1), tuple(map(tuple, orders)),
                     split_backward=split, blocks=blocks)
    return layout(sched, slots or SlotDurations())


# ---- the stage -> rank layout torch and torchtitan need -----------------------------------

TORCHTITAN_V = ("ZBVZeroBubble", "DualPipeV")  # torchtitan places stages in a V for these names


def torch_layout(schedule) -> dict:
    """What a torch CSV of ``schedule`` (one pipeline) leaves out: which rank holds which
    stage, and the torchtitan settings that build that placement. torchtitan places the
    stages from the schedule's *name* -- a V (rank r holds stages r and 2R-1-r) for
    ZBVZeroBubble and DualPipeV, a loop (rank r holds r, r+R, ...) for every other -- also
    when the order comes from ``pipeline_parallel_schedule_csv``. ``style`` is "loop", "v",
    or None (no torchtitan layout builds it: ``warning`` says why)."""
    stage2dev = schedule.placement.stage2device
    if len(stage2dev) != 1:
        raise ValueError("torch CSV holds one pipeline; this schedule has several (e.g. Chimera)")
    ranks, stages = schedule.num_devices, list(stage2dev[0])
    per = len(stages) // ranks if len(stages) % ranks == 0 else 0
    loop = per > 0 and all(d == s % ranks for s, d in enumerate(stages))
    vee = per == 2 and all(d == (s if s < ranks else 2 * ranks - 1 - s) for s, d in enumerate(stages))
    style = "loop" if loop else "v" if vee else None
    layout = {r: [s for s, d in enumerate(stages) if d == r] for r in range(ranks)}
    out: dict = {"ranks": ranks, "stages": len(stages), "stages_per_rank": per or None, "style": style,
                 "stage_to_rank": stages, "rank_stages": layout, "warning": None, "torchtitan": None}
    if style is None:
        out["warning"] = ("no torchtitan layout builds this placement (torchtitan places stages in a loop, or in a "
                          "V for ZBVZeroBubble and DualPipeV); torch's runtime runs it with stages placed by hand "
                          "as 'rank_stages' says")
        return out
    name = TORCHTITAN_V[0] if style == "v" else ("Interleaved1F1B" if per > 1 else "1F1B")
    out["torchtitan"] = {
        "parallelism.pipeline_parallel_degree": ranks,
        "parallelism.pipeline_parallel_schedule": name,
        "parallelism.pipeline_parallel_schedule_csv": "FILE.csv",
        "stages": len(stages),
        "microbatches": schedule.num_microbatches,
    }
    return out


def torch_layout_lines(schedule) -> list[str]:
    """``torch_layout`` as lines for people (the CLI prints them on stderr beside a CSV)."""
    lay = torch_layout(schedule)
    shown = "; ".join(f"rank {r}: stages {', '.join(map(str, ss))}" for r, ss in list(lay["rank_stages"].items())[:8])
    more = f"; ... ({lay['ranks']} ranks)" if lay["ranks"] > 8 else ""
    lines = [f"stage -> rank ({lay['style'] or 'neither loop nor V'}): {shown}{more}"]
    if lay["warning"]:
        return [*lines, f"warning: {lay['warning']}"]
    t = lay["torchtitan"]
    lines.append(f"torchtitan: --parallelism.pipeline_parallel_degree {t['parallelism.pipeline_parallel_degree']} "
                 f"--parallelism.pipeline_parallel_schedule {t['parallelism.pipeline_parallel_schedule']} "
                 "--parallelism.pipeline_parallel_schedule_csv FILE.csv")
    lines.append(f"  the model split into {t['stages']} stages (pipeline_parallel_layers_per_stage = layers / "
                 f"{t['stages']}), {t['microbatches']} microbatches per step (local batch / "
                 "pipeline_parallel_microbatch_size)")
    return lines
