"""PyTorch profiler traces in: Chrome-trace JSON (``torch.profiler``'s
``export_chrome_trace``, plain or gzipped) turned into a pipetab ``Profile``.

One trace per pipeline rank (or per stage, in rank order). ``torch.distributed.pipelining``
marks every action of its schedule runtime with a ``record_function`` annotation named
``PP:<stage><action><microbatch>`` (``PP:0F3``: stage 0's forward of microbatch 3; ``I`` the
input gradient and ``W`` the weight gradient of a split backward, ``B`` a full backward,
``SEND_F`` / ``SEND_B`` a message); its single-stage schedules mark ``Forward <mb>`` and
``Backward <mb>``. An action's time is, where the trace holds the GPU's kernels (the
profiler's ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` events, each tied by its
``correlation`` to the runtime call that launched it): the span from the first to the last
kernel launched, on any CPU thread, while the action's CPU annotation was open (0 where it
launched none). That counts the backward's kernels, which autograd launches from its own
thread: the GPU's copy of an annotation (``gpu_user_annotation``) spans only the kernels of
the annotating thread, and read alone it gives an input gradient of 1 us on an H100 where
the kernels ran 9 ms (``tests/data/traces_h100``). A trace without kernels is read from
the GPU's copies of the annotations where it has them, else from the CPU's
(``user_annotation``), which time the launches, not the GPU.

Per rank (a pipeline device of the profile): ``T_F`` is the sum over the stages it runs of
the mean duration of their forwards (a V or interleaved rank runs two or more stages, each
``1/v`` of the device's share), ``T_B`` likewise of their input gradients (or full
backwards), ``T_W`` of their weight gradients (none without a split backward), the
message time the mean of its sends, and, where the trace recorded memory
(``profile_memory=True``: ``[memory]`` events), the activation bytes of one microbatch: the
mean growth of ``Total Allocated`` over each stage's forwards (their CPU annotations, when
the allocations are made), summed over its stages.

A trace that is not a profiler trace, holds no pipeline ops, or whose ranks disagree with
the stages asked for is refused with one ``ValueError`` sentence naming the file.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from .profile import Profile, StageProfile

ACTION = re.compile(r"PP:(\d+)(F|I|W|B|SEND_F|SEND_B)(\d+)")
LEGACY = re.compile(r"(Forward|Backward) (\d+)")
KIND_OF = {"F": "F", "I": "B", "B": "B", "W": "W", "Forward": "F", "Backward": "B"}


@dataclass
class RankTrace:
    """What one trace holds: its rank (None: not recorded), the durations (s) of each
    ``(stage, kind)``'s ops (kind F, B or W; ``full`` when the backward is not split),
    sends (s) and per stage the allocated bytes an F added (None: no memory recorded)."""

    path: str
    rank: int | None
    ops: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    sends: list[float] = field(default_factory=list)
    activation: dict[int, list[float]] | None = None
    split: bool = False


def _load(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"trace {str(path)!r} does not exist or is not a regular file")
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"trace {str(path)!r} is not readable gzip data ({exc})") from None
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"trace {str(path)!r} is not JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"trace {str(path)!r} is not a trace pipetab can read: its JSON is nested too "
                         "deeply") from None
    except ValueError as exc:  # a number of over 4,300 digits
        raise ValueError(f"trace {str(path)!r} is not a trace pipetab can read ({str(exc).split(';')[0]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"trace {str(path)!r} is not a PyTorch profiler trace (no 'traceEvents' list)")
    return doc


def _event_name(e: dict) -> str:
    name = e.get("name")
    return repr(name[:80]) if isinstance(name, str) else "without a name"


def _number(e: dict, key: str, path: Path, *, args: bool = False, duration: bool = False) -> float:
    """Field ``key`` of event ``e`` (of its ``args`` when ``args``) as a finite float (>= 0
    for a ``duration``); ``ValueError`` naming the trace, the event and the field otherwise."""
    holder = e.get("args") if args else e
    value = holder.get(key) if isinstance(holder, dict) else None
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a float
            number = None
    if number is None or not math.isfinite(number) or (duration and number < 0):
        bits = value.bit_length() if isinstance(value, int) and not isinstance(value, bool) else 0
        shown = f"a number of {bits} bits" if bits >= 128 else repr(value)[:40]
        what = "a duration is a finite number >= 0" if duration else "a time is a finite number"
        field = f"'args.{key}'" if args else f"'{key}'"
        raise ValueError(f"trace {str(path)!r}: event {_event_name(e)} has {field} {shown}; {what}")
    return number


def _correlation(e: dict, path: Path) -> int:
    """An event's ``args.correlation``: an integer id; ``ValueError`` naming it otherwise."""
    value = e["args"]["correlation"]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise ValueError(f"trace {str(path)!r}: event {_event_name(e)} has 'args.correlation' {repr(value)[:40]}; "
                         "it must be an integer id")
    return value


def _marks(doc: dict, cat: str) -> list[dict]:
    """The annotations of the pipeline's actions of one category (CPU or GPU)."""
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == cat
            and isinstance(e.get("name"), str) and (ACTION.fullmatch(e["name"]) or LEGACY.fullmatch(e["name"]))]


def _correlated(doc: dict, cats: tuple[str, ...]) -> list[dict]:
    """The events of categories ``cats`` that carry an ``args.correlation``."""
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in cats
            and isinstance(e.get("args"), dict) and e["args"].get("correlation") is not None]


def _launched(doc: dict, path: Path) -> tuple[list[float], list[tuple[float, float]]] | None:
    """The trace's GPU kernels sorted by when they were launched: (launch times, (start, end)
    of each), or None when the trace holds no kernel tied to a launch. Every field read is
    checked (``_number``, ``_correlation``)."""
    launch = {_correlation(e, path): _number(e, "ts", path) for e in _correlated(doc, ("cuda_runtime", "cuda_driver"))}
    kernels = []
    for e in _correlated(doc, ("kernel", "gpu_memcpy", "gpu_memset")):
        corr = _correlation(e, path)
        if corr in launch:
            ts = _number(e, "ts", path)
            dur = _number(e, "dur", path, duration=True) if "dur" in e else 0.0
            kernels.append((launch[corr], ts, ts + dur))
    kernels.sort()
    return ([k[0] for k in kernels], [(k[1], k[2]) for k in kernels]) if kernels else None


def _timed(doc: dict, path: Path) -> list[tuple[str, float]]:
    """Each pipeline action's (name, seconds), read as the module docstring says."""
    cpu = _marks(doc, "user_annotation")
    kernels = _launched(doc, path)
    out = []
    if kernels and cpu:
        for e in cpu:
            ts, dur = _span(e, path)
            lo, hi = bisect.bisect_left(kernels[0], ts), bisect.bisect_right(kernels[0], ts + dur)
            ran = kernels[1][lo:hi]
            out.append((e["name"], (max(k[1] for k in ran) - min(k[0] for k in ran)) * 1e-6 if ran else 0.0))
        return out
    return [(e["name"], _span(e, path)[1] * 1e-6) for e in _marks(doc, "gpu_user_annotation") or cpu]


def _span(e: dict, path: Path) -> tuple[float, float]:
    return _number(e, "ts", path), _number(e, "dur", path, duration=True)


def _memory(doc: dict, path: Path) -> tuple[list[float], list[float]] | None:
    """(times, Total Allocated) of the trace's ``[memory]`` events (None: none recorded);
    each event's ``ts`` and ``args`` checked."""
    mem = []
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("name") == "[memory]":
            if not isinstance(e.get("args"), dict):
                raise ValueError(f"trace {str(path)!r}: a '[memory]' event has 'args' {repr(e.get('args'))[:40]}; "
                                 "it must be an object holding 'Total Allocated'")
            if "Total Allocated" in e["args"]:
                mem.append((_number(e, "ts", path), _number(e, "Total Allocated", path, args=True)))
    mem.sort()
    return ([t for t, _ in mem], [a for _, a in mem]) if mem else None


def _allocated(mem: tuple[list[float], list[float]], ts: float) -> float:
    i = bisect.bisect_right(mem[0], ts)
    return mem[1][i - 1] if i else 0.0


def _action(name: str) -> tuple[int, str]:
    m = ACTION.fullmatch(name)
    if m:
        return int(m.group(1)), m.group(2)
    legacy = LEGACY.fullmatch(name)
    if legacy is None:  # _marks keeps the names of either form only
        raise ValueError(f"{name!r} is not a pipeline action (PP:<stage>F<microbatch> or 'Forward <microbatch>')")
    return 0, legacy.group(1)


def read_trace(path: str | Path) -> RankTrace:
    """One trace's pipeline ops (module docstring)."""
    path = Path(path)
    doc = _load(path)
    info = doc.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) and isinstance(info.get("rank"), int) else None
    out = RankTrace(str(path), rank)
    mem = _memory(doc, path)
    activation: dict[int, list[float]] = {}
    out.activation = activation if mem else None
    for name, seconds in _timed(doc, path):
        stage, action = _action(name)
        if action.startswith("SEND"):
            out.sends.append(seconds)
            continue
        out.split |= action in ("I", "W")
        out.ops.setdefault((stage, KIND_OF[action]), []).append(seconds)
    for e in _marks(doc, "user_annotation") if mem else ():
        stage, action = _action(e["name"])
        if mem and KIND_OF.get(action) == "F":
            ts, dur = _span(e, path)
            grown = _allocated(mem, ts + dur) - _allocated(mem, ts)
            activation.setdefault(stage, []).append(max(grown, 0.0))
    if not out.ops:
        raise ValueError(f"trace {str(path)!r} holds no pipeline ops (annotations PP:<stage>F<microbatch> "
                         "or 'Forward <microbatch>' of torch.distributed.pipelining)")
    return out


def _stage_profile(t: RankTrace, split: bool, layers: int | None) -> StageProfile:
    stages = sorted({s for s, _ in t.ops})

    def total(kind: str) -> float:
        return sum(fmean(t.ops[(s, kind)]) for s in stages if (s, kind) in t.ops)

    for s in stages:
        for kind in ("F", "B", "W") if split else ("F", "B"):
            if (s, kind) not in t.ops:
                name = {"F": "forward", "B": "backward", "W": "weight-gradient"}[kind]
                raise ValueError(f"trace {t.path!r}: stage {s} has no {name} op")
    act = sum(fmean(v) for v in t.activation.values()) if t.activation else 0.0
    try:
        return StageProfile(forward_s=total("F"), backward_s=total("B"), weight_s=total("W") if split else None,
                            message_s=fmean(t.sends) if t.sends else 0.0, activation_bytes=act, layers=layers)
    except ValueError as exc:  # e.g. annotations that last 0 us
        rank = f" (rank {t.rank})" if t.rank is not None else ""
        raise ValueError(f"trace {t.path!r}{rank}: {exc}; its pipeline ops must last some time") from None


def profile_from_traces(paths: list[str | Path], stages: int | None = None, *, microbatch_size: int | None = None,
                        tp: int = 1, dp: int = 1, layers: list[int] | None = None,
                        summary: str = "") -> Profile:
    """The ``Profile`` of one trace per pipeline rank (module docstring): ranks from the
    traces' ``distributedInfo`` (else the order of ``paths``), ``stages`` pipeline devices
    (None: as many as traces), ``layers`` per device (for ``calibrate``)."""
    seen: dict[Path, str] = {}
    for p in paths:
        key = Path(p).resolve()
        if key in seen:
            raise ValueError(f"trace {str(p)!r} is given twice (as {seen[key]!r}): give one trace per rank")
        seen[key] = str(p)
    traces = [read_trace(p) for p in paths]
    ranks = [t.rank if t.rank is not None else i for i, t in enumerate(traces)]
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"traces repeat a rank ({', '.join(map(str, sorted(ranks)))}): give one trace per rank")
    want = stages if stages is not None else len(traces)
    if sorted(ranks) != list(range(want)):
        raise ValueError(f"-S is {want} pipeline devices but the traces hold ranks {', '.join(map(str, sorted(ranks)))}"
                         f": give one trace for each rank 0..{want - 1}")
    if layers is not None and len(layers) != want:
        raise ValueError(f"--layers gives {len(layers)} counts for {want} pipeline devices")
    split = any(t.split for t in traces)
    by_rank = dict(zip(ranks, traces))
    entries = tuple(_stage_profile(by_rank[r], split, layers[r] if layers else None) for r in range(want))
    source = "PyTorch profiler traces: " + ", ".join(Path(p).name for p in paths)
    ranks_said = f"{want} rank{'s' if want != 1 else ''}"
    return Profile(name="trace", stages=entries, summary=summary or f"profile of {ranks_said} from their traces",
                   source=source, microbatch_size=microbatch_size, tp=tp, dp=dp)
