"""Trim a PyTorch profiler trace to what ``pipetab profile`` reads (no torch needed).

Kept: the pipeline's annotations (``PP:...``, CPU and GPU copies), the GPU's kernels,
copies and sets (name cut to 80 characters; of their arguments the ``correlation``,
``stream`` and ``device``), the runtime and driver calls that launch them (their
``correlation``), the ``[memory]`` events (their ``Total Allocated`` and ``Bytes``) and the
trace's ``distributedInfo``. Everything ``hardware.trace`` uses survives; a trace of a few
MB becomes a few hundred KB.

Run: python -m experiments.trim_trace IN.json[.gz] OUT.json.gz
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

LAUNCH = re.compile(r"Launch|Memcpy|Memset")
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _keep(e: dict) -> dict | None:
    cat, name, args = e.get("cat"), str(e.get("name", "")), e.get("args") or {}
    base = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in e}
    if cat in ("user_annotation", "gpu_user_annotation") and name.startswith("PP:"):
        return base
    if name == "[memory]":
        return base | {"args": {k: args[k] for k in ("Total Allocated", "Bytes") if k in args}}
    if cat in GPU_WORK:
        kept = {k: args[k] for k in ("correlation", "stream", "device") if k in args}
        return base | {"name": name[:80], "args": kept}
    if cat in ("cuda_runtime", "cuda_driver") and LAUNCH.search(name) and "correlation" in args:
        return base | {"args": {"correlation": args["correlation"]}}
    return None


def trim(doc: dict) -> dict:
    """The trace ``doc`` with only the events and fields listed in the module docstring."""
    events = [k for e in doc["traceEvents"] if isinstance(e, dict) and (k := _keep(e)) is not None]
    out = {"traceEvents": events}
    if "distributedInfo" in doc:
        out["distributedInfo"] = doc["distributedInfo"]
    return out


def compressed(doc: dict) -> bytes:
    """``doc`` as compact, reproducible gzipped JSON (no timestamp in the gzip header)."""
    return gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0)


def main(src: str, dst: str) -> None:
    raw = Path(src).read_bytes()
    doc = json.loads(gzip.decompress(raw) if src.endswith(".gz") else raw)
    Path(dst).write_bytes(compressed(trim(doc)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
