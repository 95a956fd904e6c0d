"""Golden per-device orders of the schedules pipetab takes from torch and from the authors of
V-Half / V-Min, computed by their own code: ``tests/data/golden_orders.json``.

    python -m experiments.golden_orders --torch SCHEDULES.py --sail GIT_DIR > tests/data/golden_orders.json

* ``--torch``: torch's ``torch/distributed/pipelining/schedules.py`` (an installed torch's,
  or a copy; no torch import is needed): the functions that compute a rank's actions —
  ``ScheduleLoopedBFS._calculate_single_rank_operations``,
  ``ScheduleInterleavedZeroBubble._calculate_single_rank_operations``,
  ``_get_1f1b_rank_ops``, ``_get_warmup_ops`` — are taken from the file's syntax tree and run
  with stand-ins for ``_Action`` and ``_ComputationType``, on an object holding what the
  schedules' constructors set (``pp_group_size``, ``_n_microbatches``, ``_stages``,
  ``n_local_stages``, ``microbatches_per_round = B // max(1, B // S)``). Idle slots (None)
  are dropped; ``_add_bubbles_to_actions`` only inserts idle slots, so it is not run.
* ``--sail``: a git directory of sail-sg/zero-bubble-pipeline-parallelism: its
  ``zbv_greedy.py`` is run with its one import (``ScheduledNode`` and the pass types) stood
  in for, and ``PipelineGraph(S, B, 'half'|'min', 1, 1, 1, 0).create_schedule`` gives each
  device's nodes (F, B, W with chunk and microbatch).

Orders are written as torch action strings (``2F0``, ``3I1``, ``3W1``, ``1B0``) per device.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import subprocess
import sys
import types
from collections import defaultdict
from enum import Enum
from pathlib import Path
from typing import NamedTuple

GRID_LOOPED = [(2, 4, 2), (3, 6, 2), (4, 8, 2), (4, 8, 3), (4, 16, 2), (4, 10, 2), (4, 3, 2), (8, 16, 4)]
GRID_V = [(2, 4), (3, 6), (4, 8), (4, 12), (5, 10), (6, 12), (8, 16)]


class _ComputationType(str, Enum):
    FORWARD = "F"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"
    FULL_BACKWARD = "B"


class _Action(NamedTuple):
    stage_index: int
    computation_type: _ComputationType
    microbatch_index: int | None = None


def _torch_namespace(path: Path) -> dict:
    """The torch functions named in the module docstring, compiled from ``path``."""
    tree = ast.parse(path.read_text())
    wanted = {"_get_1f1b_rank_ops", "_get_warmup_ops"}
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            body.append(node)
        if isinstance(node, ast.ClassDef) and node.name in ("ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "_calculate_single_rank_operations":
                    item.name = f"{node.name}_ops"
                    body.append(item)
    ns = {"_Action": _Action, "_ComputationType": _ComputationType, "defaultdict": defaultdict,
          "BACKWARD_INPUT": _ComputationType.BACKWARD_INPUT, "FULL_BACKWARD": _ComputationType.FULL_BACKWARD,
          "logger": types.SimpleNamespace(debug=lambda *a, **k: None)}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    return ns


def torch_orders(path: Path) -> dict:
    ns = _torch_namespace(path)
    out = {}
    for cls in ("ScheduleLoopedBFS", "ScheduleInterleavedZeroBubble"):
        for s, b, v in GRID_LOOPED:
            rounds = max(1, b // s)
            if cls == "ScheduleInterleavedZeroBubble" and b % rounds:
                continue
            me = types.SimpleNamespace(pp_group_size=s, _n_microbatches=b, _stages=[None] * v, n_local_stages=v,
                                       microbatches_per_round=b // rounds)
            fn = ns[f"{cls}_ops"]
            ranks = [[f"{a.stage_index}{a.computation_type.value}{a.microbatch_index}"
                      for a in fn(me, r) if a is not None] for r in range(s)]
            out[f"{cls} S={s} B={b} v={v}"] = ranks
    return out


def sail_orders(git_dir: str) -> dict:
    text = subprocess.run(["git", "--git-dir", git_dir, "show",
                           "HEAD:megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py"],
                          check=True, capture_output=True, text=True).stdout
    graph = types.ModuleType("graph")
    graph.ScheduledNode = lambda **kw: kw  # type: ignore[attr-defined]
    graph.F, graph.B, graph.W, graph.FuncType = "F", "B", "W", None  # type: ignore[attr-defined]
    for name in ("megatron", "megatron.core", "megatron.core.pipeline_parallel",
                 "megatron.core.pipeline_parallel.zerobubble", "megatron.core.pipeline_parallel.zerobubble.scheduler"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["megatron.core.pipeline_parallel.zerobubble.scheduler.graph"] = graph
    ns: dict = {}
    exec(compile(text, "zbv_greedy.py", "exec"), ns)
    letters = {"F": "F", "B": "I", "W": "W"}
    out = {}
    for mem in ("half", "min"):
        for s, b in GRID_V:
            config = types.SimpleNamespace(max_chunks=2, n_stages=s)
            with contextlib.redirect_stdout(io.StringIO()):
                order = ns["PipelineGraph"](s, b, mem, 1, 1, 1, 0).create_schedule(config)
            out[f"v-{mem} S={s} B={b}"] = [[f"{n['layer_group_idx']}{letters[n['type']]}{n['microbatch']}"
                                            for n in device] for device in order]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.golden_orders")
    ap.add_argument("--torch", type=Path, required=True, help="torch/distributed/pipelining/schedules.py")
    ap.add_argument("--sail", required=True, help="git directory of sail-sg/zero-bubble-pipeline-parallelism")
    args = ap.parse_args(argv)
    doc = {"torch": torch_orders(args.torch), "sail": sail_orders(args.sail)}
    json.dump(doc, sys.stdout, indent=0, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
