"""The bad-input corpus: every case exits with code 2 and one line on stderr that names the
argument and what is allowed -- no traceback, no hang, nothing silently wrong.

Cases run in-process (``pipetab.cli.main``) under an alarm, so a hang fails the case; the
few that need a real process (stdout on a full disk) run as one. Classes: numbers out of
range, non-finite numbers, files that are not regular, not UTF-8 or too deep, inconsistent
metadata, options that do not apply to the command or schedule, unwritable outputs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipetab.cli import main
from pipetab.cli.main import COMMANDS, build_parser

HANG_S = 20
  # a case still running after this long has hung

# a valid system file and model file that the broken variants below edit one value of
SYSTEM = """summary = "test system"
[device]
peak_flops = 1e15
compute_efficiency = 0.7
compute_latency_s = 1e-6
mem_bandwidth = 3e12
mem_efficiency = 0.8
mem_latency_s = 5e-8
memory_bytes = 80e9
[link]
bandwidth = 50e9
latency_s = 5e-7
"""
MODEL = """summary = "test model"
num_layers = 8
hidden = 256
heads = 4
seq_len = 128
vocab = 1000
global_batch = 64
"""
PROFILE = """summary = "test profile"
time_unit = "ms"
stages = 4
microbatch_size = 2
[default]
forward = 2.0
backward = 3.0
message = 0.25
activation_bytes = 1e6
layers = 2
"""
PROFILE_SPLIT = """summary = "test profile"
time_unit = "ms"
microbatch_size = 1
stages = 4
[default]
forward = 2.0
backward = 3.0
weight = 1.5
message = 0.25
activation_bytes = 100
"""
CLUSTER = """
[grid.cluster]
gpus = 16
tp = [2]
"""
SWEEP = """[grid]
schedules = ["1f1b"]
stages = [4]
microbatches = [8]
systems = ["mid_nw_mid_cp"]
"""


def _table_json(**changes) -> str:
    """The JSON form of 1F1B S=2 B=2 (as ``pipetab table`` writes it), with changes."""
    from pipetab.schedules import formats, registry
    from pipetab.schedules.table import layout

    sched = registry.generate("1f1b", 2, 2)
    doc = formats.to_json_dict(layout(sched), schedule="1f1b", stages=2)
    doc.update(changes)
    return json.dumps(doc)


def _ops_json(edit) -> str:
    doc = json.loads(_table_json())
    edit(doc["ops"])
    return json.dumps(doc)


FILES = {
    # systems: one value out of range or not finite each
    "sys_tiny_flops.toml": SYSTEM.replace("peak_flops = 1e15", "peak_flops = 1e-300"),
    "sys_inf_flops.toml": SYSTEM.replace("peak_flops = 1e15", "peak_flops = inf"),
    "sys_nan_flops.toml": SYSTEM.replace("peak_flops = 1e15", "peak_flops = nan"),
    "sys_big_flops.toml": SYSTEM.replace("peak_flops = 1e15", "peak_flops = 1e400"),
    "sys_zero_bw.toml": SYSTEM.replace("bandwidth = 50e9", "bandwidth = 0"),
    "sys_tiny_bw.toml": SYSTEM.replace("bandwidth = 50e9", "bandwidth = 1e-300"),
    "sys_neg_latency.toml": SYSTEM.replace("latency_s = 5e-7", "latency_s = -1"),
    "sys_eff.toml": SYSTEM.replace("compute_efficiency = 0.7", "compute_efficiency = 1.5"),
    "sys_memory.toml": SYSTEM.replace("memory_bytes = 80e9", "memory_bytes = -80e9"),
    "sys_unknown_key.toml": SYSTEM + "colour = 1\n",
    "sys_missing_key.toml": SYSTEM.replace("peak_flops = 1e15\n", ""),
    "sys_string.toml": SYSTEM.replace("peak_flops = 1e15", 'peak_flops = "fast"'),
    "sys_bad_toml.toml": "summary = \n",
    "sys_eight.toml": SYSTEM.replace('summary = "test system"', 'summary = "eight GPUs"\nnum_devices = 8'),
    "sys_huge_int.toml": SYSTEM.replace('summary = "test system"',
                                        'summary = "x"\nnum_devices = 123456789012345678901234567890'),
    # models
    "model_zero_layers.toml": MODEL.replace("num_layers = 8", "num_layers = 0"),
    "model_float.toml": MODEL.replace("hidden = 256", "hidden = 256.5"),
    "model_huge.toml": MODEL.replace("hidden = 256", "hidden = 123456789012345678901234567890"),
    "model_missing.toml": MODEL.replace("vocab = 1000\n", ""),
    "model_batch.toml": MODEL.replace("global_batch = 64", "global_batch = 6"),
    # profiles
    "prof_ok.toml": PROFILE,
    "prof_negative.toml": PROFILE.replace("forward = 2.0", "forward = -2.0"),
    "prof_zero.toml": PROFILE.replace("backward = 3.0", "backward = 0"),
    "prof_nan.toml": PROFILE.replace("forward = 2.0", "forward = nan"),
    "prof_inf.toml": PROFILE.replace("message = 0.25", "message = inf"),
    "prof_unit.toml": PROFILE.replace('time_unit = "ms"', 'time_unit = "hours"'),
    "prof_unknown_key.toml": PROFILE.replace("layers = 2", "colour = 2"),
    "prof_missing_forward.toml": PROFILE.replace("forward = 2.0\n", ""),
    "prof_stages_zero.toml": PROFILE.replace("stages = 4", "stages = 0"),
    "prof_stage_count.toml": PROFILE + "[[stage]]\nforward = 1.0\n",
    "prof_weight_memory.toml": PROFILE.replace("layers = 2", "weight = 1.0\nweight_memory_bytes = 2e6"),
    "prof_memory.toml": PROFILE.replace("microbatch_size = 2", "memory_bytes = -1"),
    "prof_no_size.toml": PROFILE.replace("microbatch_size = 2\n", ""),
    "prof_mb_zero.toml": PROFILE.replace("microbatch_size = 2", "microbatch_size = 0"),
    "prof_string.toml": PROFILE.replace("forward = 2.0", 'forward = "fast"'),
    "prof_empty.toml": 'summary = "nothing"\n',
    "prof_deep.toml": 'summary = "x"\nsource = ' + "[" * 100_000 + "]" * 100_000 + "\n",
    # profiles with a split backward (weight times)
    "sp_prof_ok.toml": PROFILE_SPLIT,
    "sp_prof_negative.toml": PROFILE_SPLIT.replace("forward = 2.0", "forward = -2.0"),
    "sp_prof_nan.toml": PROFILE_SPLIT.replace("backward = 3.0", "backward = nan"),
    "sp_prof_no_weight.toml": PROFILE_SPLIT.replace("weight = 1.5\n", ""),
    "sp_prof_unit.toml": PROFILE_SPLIT.replace('time_unit = "ms"', 'time_unit = "fortnights"'),
    "sp_prof_unknown_key.toml": PROFILE_SPLIT + "colour = 1\n",
    "sp_prof_bad_toml.toml": "stages = \n",
    "sp_prof_stages_zero.toml": PROFILE_SPLIT.replace("stages = 4", "stages = 0"),
    # sweep configs
    "sweep_ok.toml": SWEEP,
    "sweep_profiles_and_systems.toml": SWEEP.replace("[grid]", '[grid]\nprofiles = ["prof_ok.toml"]'),
    "sweep_profile_missing.toml": SWEEP.replace('systems = ["mid_nw_mid_cp"]', 'profiles = ["none.toml"]'),
    "sweep_cluster_stages.toml": SWEEP + CLUSTER,
    "sweep_cluster_tp_zero.toml": SWEEP + CLUSTER.replace("gpus = 16\n", "").replace("[2]", "[0]"),
    "sweep_cluster_zero.toml": SWEEP + CLUSTER.replace("gpus = 16", "zero = 4"),
    "sweep_cluster_layout.toml": SWEEP + CLUSTER.replace("gpus = 16", 'layout = "Et*4|x"'),
    "sweep_cluster_cp_comm.toml": SWEEP + CLUSTER.replace("gpus = 16", 'cp = [2]\ncp_comm = "ring"'),
    "sweep_cluster_batch.toml": SWEEP + CLUSTER.replace("gpus = 16", "global_batch = 8\nmicrobatch_size = 1"),
    "sweep_cluster_table.toml": SWEEP.replace('systems = ["mid_nw_mid_cp"]\n', "") + CLUSTER.replace("gpus = 16\n", "")
    + '[run]\nmode = "table"\n',
    "sweep_cluster_gpus.toml": SWEEP + CLUSTER.replace("gpus = 16", "gpus = 0"),
    "sweep_unknown.toml": SWEEP + "[extra]\n",
    "sweep_bad.toml": "[grid\n",
    "sweep_stages.toml": SWEEP.replace("stages = [4]", "stages = [1]"),
    "sweep_empty.toml": SWEEP.replace('schedules = ["1f1b"]', "schedules = []"),
    "sweep_deep.toml": "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "sweep_escape.toml": 'name = "../../x"\n' + SWEEP,
    "sweep_control.toml": 'name = "a\\u001b[31mb"\n' + SWEEP,
    "sweep_billions.toml": SWEEP.replace("stages = [4]", "stages = [" + ",".join(map(str, range(2, 1002))) + "]")
    .replace("microbatches = [8]", "microbatches = [" + ",".join(map(str, range(1, 5001))) + "]"),
    "sweep_profile_stages.toml": SWEEP.replace('systems = ["mid_nw_mid_cp"]', 'profiles = ["prof_ok.toml"]')
    .replace("stages = [4]", "stages = [8]"),
    # profiles: what they measured (checked), impossible speeds, overflowing spans
    "prof_recorded.toml": PROFILE.replace('summary = "test profile"', 'summary = "test profile"\nmodel = "tiny_gpt"'
                                          '\nseq_len = 128\ngpu = "H100"\npeak_flops = 989e12'),
    "prof_too_fast.toml": PROFILE.replace('summary = "test profile"', 'summary = "test profile"\nmodel = "llama3_8b"'
                                          '\nseq_len = 8192\npeak_flops = 989e12').replace("layers = 2", "layers = 8"),
    "prof_span.toml": PROFILE.replace("forward = 2.0", "forward = 2e-17"),
    "prof_peak_inf.toml": PROFILE.replace('summary = "test profile"', 'summary = "test profile"\npeak_flops = inf'),
    "prof_layers_many.toml": PROFILE.replace("layers = 2", "layers = 2000"),
    # tables for check
    "empty.json": "",
    "deep.json": "[" * 100_000 + "]" * 100_000,
    "deep_obj.json": '{"ops": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "list.json": "[1, 2]",
    "empty_trace.json": '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]}',
    **{f"rank0_{c}.json": '{"distributedInfo": {"rank": 0}, "traceEvents": [{"ph": "X", "cat": '
                           '"gpu_user_annotation", "name": "PP:0F0", "ts": 0, "dur": 10}]}' for c in "ab"},
    "negative_dur_trace.json": '{"traceEvents": [{"ph": "X", "cat": "gpu_user_annotation", "name": "PP:0F0", '
                                '"ts": 0, "dur": -10}]}',
    "no_ops.json": '{"devices": 2}',
    "ops_empty.json": '{"devices": 2, "ops": []}',
    "claims_makespan.json": _table_json(makespan_slots=999),
    "claims_bubble.json": _table_json(bubble_ratio=0.0),
    "claims_devices.json": _table_json(devices=1),
    "claims_microbatches.json": _table_json(microbatches=7),
    "claims_stages.json": _table_json(stages=9),
    "claims_tick.json": _table_json(tick_slots=-1),
    "huge_start.json": _ops_json(lambda ops: ops[0].update(start=1e400)),
    "nan_start.json": _table_json().replace('"start": 0', '"start": NaN', 1),
    "neg_start.json": _ops_json(lambda ops: ops[0].update(start=-1)),
    "zero_duration.json": _ops_json(lambda ops: ops[0].update(duration=0)),
    "bad_kind.json": _ops_json(lambda ops: ops[0].update(kind="X")),
    "string_stage.json": _ops_json(lambda ops: ops[0].update(stage="one")),
    "overlap.json": _ops_json(lambda ops: ops[1].update(start=ops[0]["start"])),
    "missing_op.json": _ops_json(lambda ops: ops.pop()),
    "duplicate_op.json": _ops_json(lambda ops: ops.append(dict(ops[0], start=100))),
    "early_forward.json": _ops_json(lambda ops: next(o for o in ops if (o["kind"], o["stage"], o["microbatch"])
                                                    == ("F", 1, 0)).update(start=0)),
    "no_header.csv": "0,0,1,F,0,0,0\n",
    "bad_kind.csv": "device,start,duration,kind,pipeline,stage,microbatch\n0,0,1,Q,0,0,0\n",
    "float.csv": "device,start,duration,kind,pipeline,stage,microbatch\n0,0.5,1,F,0,0,0\n",
    "header_only.csv": "device,start,duration,kind,pipeline,stage,microbatch\n",
    "torch_bad.csv": "0F0,XX\n",
    "torch_stage_twice.csv": "0F0\n0F1\n",
    "garbage.txt": "hello world\n",
    "bad_cell.txt": "t | 0 1\ndev0 | F0s0 Z9\n",
    "rows_gap.txt": "t | 0\ndev0 | F0s0\ndev2 | F0s1\n",
}
BINARY = {
    "latin1.txt": "dev0 | F0s0\n# caf\xe9\n".encode("latin-1"),
    "latin1.json": '{"schedule": "caf\xe9", "ops": []}'.encode("latin-1"),
    "latin1_sys.toml": SYSTEM.replace("test system", "caf\xe9").encode("latin-1"),
    "latin1_model.toml": MODEL.replace("test model", "caf\xe9").encode("latin-1"),
    "latin1_sweep.toml": ('name = "caf\xe9"\n' + SWEEP).encode("latin-1"),
    "latin1_prof.toml": PROFILE.replace("test profile", "caf\xe9").encode("latin-1"),
    "binary.csv": bytes(range(256)),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad")
    for name, text in FILES.items():
        (root / name).write_text(text, encoding="utf-8")
    for name, data in BINARY.items():
        (root / name).write_bytes(data)
    (root / "folder.json").mkdir()
    (root / "folder.toml").mkdir()
    (root / "folder.html").mkdir()
    (root / "folder.png").mkdir()
    (root / "folder.csv").mkdir()
    os.mkfifo(root / "fifo.json")
    os.mkfifo(root / "fifo.toml")
    os.symlink("/dev/zero", root / "zero.json")
    for suffix in ("html", "png", "csv"):
        os.mkfifo(root / f"fifo.{suffix}")
    (root / "victim.txt").write_text("not yours to overwrite\n")
    for suffix in ("html", "png", "json", "toml", "csv", "sqlite"):
        os.symlink(root / "victim.txt", root / f"link.{suffix}")
    return root


S4 = ["-S", "4", "-B", "8"]
TRACES = [str(Path(__file__).resolve().parents[1] / "data" / "traces" / f"rank{r}.json.gz") for r in (0, 1)]
PLAN = ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "4", "--global-batch", "8", "--quiet"]
CAL = ["--model", "tiny_gpt", "--system", "mid_nw_mid_cp"]
SYS = ["--system", "mid_nw_mid_cp"]
H100 = ["--model", "tiny_gpt", "--system", "dgx_h100_ib"]  # a system with a host link ([host_link])
MOE = ["--model", "mixtral_8x7b", "--ep", "8", "--dp", "8"]
CP = ["--solver", "cpsat"]

# (id, argv with {d} for the files' folder, what the one line must contain)
SHAPE = [
    ("stages-zero", ["1f1b", "-S", "0", "-B", "8"], "stages"),
    ("stages-one", ["zb-h1", "-S", "1", "-B", "8"], "stages"),
    ("stages-negative", ["1f1b", "-S", "-4", "-B", "8"], "stages"),
    ("stages-word", ["1f1b", "-S", "four", "-B", "8"], "stages"),
    ("stages-float", ["1f1b", "-S", "2.5", "-B", "8"], "stages"),
    ("stages-empty", ["1f1b", "-S", "", "-B", "8"], "stages"),
    ("microbatches-zero", ["1f1b", "-S", "4", "-B", "0"], "microbatches"),
    ("microbatches-negative", ["1f1b", "-S", "4", "-B", "-1"], "microbatches"),
    ("microbatches-exp", ["1f1b", "-S", "4", "-B", "1e3"], "microbatches"),
    ("stages-missing", ["1f1b", "-B", "8"], "stages"),
    ("waves-zero", ["hanayo", *S4, "--waves", "0"], "waves"),
    ("waves-nine", ["hanayo", *S4, "--waves", "9"], "waves"),
    ("chunks-one", ["interleaved", *S4, "--chunks", "1"], "chunks"),
    ("chunks-many", ["interleaved", *S4, "--chunks", "99"], "chunks"),
    ("split-zero", ["chimera-asym", *S4, "--split", "0:1"], "split"),
    ("split-one-number", ["chimera-asym", *S4, "--split", "1"], "split"),
    ("split-words", ["chimera-asym", *S4, "--split", "a:b"], "split"),
    ("forward-slots-zero", ["1f1b", *S4, "--forward-slots", "0"], "forward slots"),
    ("backward-slots-zero", ["1f1b", *S4, "--backward-slots", "0"], "backward slots"),
    ("weight-slots-zero", ["zb-h1", *S4, "--weight-slots", "0"], "weight slots"),
    ("chimera-odd", ["chimera", "-S", "3", "-B", "6"], "stages"),
    ("chimera-batch", ["chimera", "-S", "4", "-B", "6"], "microbatches"),
    ("hanayo-batch", ["hanayo", "-S", "4", "-B", "6"], "microbatches"),
    ("interleaved-batch", ["interleaved", "-S", "4", "-B", "6"], "microbatches"),
    ("dualpipev-batch", ["dualpipev", "-S", "4", "-B", "4"], "microbatches"),
    ("chimera-fd-batch", ["chimera-fd", "-S", "4", "-B", "4"], "microbatches"),
    ("unknown-schedule", ["zigzag", *S4], "unknown schedule"),
    ("waves-on-1f1b", ["1f1b", *S4, "--waves", "2"], "--waves"),
    ("chunks-on-gpipe", ["gpipe", *S4, "--chunks", "2"], "--chunks"),
    ("split-on-hanayo", ["hanayo", *S4, "--split", "1:2"], "--split"),
    ("weight-slots-on-1f1b", ["1f1b", *S4, "--weight-slots", "2"], "--weight-slots"),
    ("weight-slots-on-chimera", ["chimera", *S4, "--weight-slots", "2"], "--weight-slots"),
]
CASES = [(f"{cmd}-{cid}", [cmd, *argv], frag) for cmd in ("table", "evaluate", "view") for cid, argv, frag in SHAPE]
CASES += [
    # evaluate: options that need another option, numbers, files
    ("evaluate-model-without-system", ["evaluate", "1f1b", *S4, "--model", "tiny_gpt"], "--model"),
    ("evaluate-recompute-without-system", ["evaluate", "1f1b", *S4, "--recompute", "full"], "--recompute"),
    ("evaluate-contention-without-system", ["evaluate", "1f1b", *S4, "--contention"], "--contention"),
    ("evaluate-trace-without-system", ["evaluate", "1f1b", *S4, "--trace", "{d}/t.json"], "--trace"),
    ("evaluate-plot-without-system", ["evaluate", "1f1b", *S4, "--plot", "{d}/t.png"], "--plot"),
    ("evaluate-tick-without-solver", ["evaluate", "1f1b", *S4, *SYS, "--tick", "0.001"], "--tick"),
    ("evaluate-tick-without-system", ["evaluate", "1f1b", *S4, *CP, "--tick", "0.001"], "--tick"),
    ("evaluate-tick-zero", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "0"], "tick"),
    ("evaluate-tick-negative", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "-1"], "tick"),
    ("evaluate-tick-nan", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "nan"], "tick"),
    ("evaluate-tick-inf", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "inf"], "tick"),
    ("evaluate-tick-overflow", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "1e400"], "tick"),
    ("evaluate-tick-word", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "fine"], "tick"),
    ("evaluate-tick-coarse", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "1e9"], "--tick"),
    ("evaluate-solver-unknown", ["evaluate", "1f1b", *S4, "--solver", "gurobi"], "--solver"),
    ("evaluate-format-unknown", ["evaluate", "1f1b", *S4, "--format", "xml"], "--format"),
    ("evaluate-recompute-unknown", ["evaluate", "1f1b", *S4, *SYS, "--recompute", "some"], "--recompute"),
    ("evaluate-batch-split", ["evaluate", "1f1b", "-S", "4", "-B", "3", *SYS, "--model", "paper_gpt"], "global batch"),
    ("evaluate-batch-too-many", ["evaluate", "1f1b", "-S", "4", "-B", "1024", *SYS, "--model", "paper_gpt"],
     "global batch"),
    ("evaluate-system-unknown", ["evaluate", "1f1b", *S4, "--system", "cray"], "system"),
    ("evaluate-system-missing-file", ["evaluate", "1f1b", *S4, "--system", "{d}/none.toml"], "none.toml"),
    ("evaluate-system-folder", ["evaluate", "1f1b", *S4, "--system", "{d}/folder.toml"], "folder.toml"),
    ("evaluate-system-fifo", ["evaluate", "1f1b", *S4, "--system", "{d}/fifo.toml"], "fifo.toml"),
    ("evaluate-system-latin1", ["evaluate", "1f1b", *S4, "--system", "{d}/latin1_sys.toml"], "not UTF-8"),
    ("evaluate-system-bad-toml", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_bad_toml.toml"], "TOML"),
    ("evaluate-system-tiny-flops", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_tiny_flops.toml"], "peak_flops"),
    ("evaluate-system-inf-flops", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_inf_flops.toml"], "peak_flops"),
    ("evaluate-system-nan-flops", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_nan_flops.toml"], "peak_flops"),
    ("evaluate-system-big-flops", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_big_flops.toml"], "peak_flops"),
    ("evaluate-system-zero-bandwidth", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_zero_bw.toml"], "bandwidth"),
    ("evaluate-system-tiny-bandwidth", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_tiny_bw.toml"], "bandwidth"),
    ("evaluate-system-negative-latency", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_neg_latency.toml"], "latency"),
    ("evaluate-system-efficiency", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_eff.toml"], "compute_efficiency"),
    ("evaluate-system-memory", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_memory.toml"], "memory_bytes"),
    ("evaluate-system-unknown-key", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_unknown_key.toml"], "colour"),
    ("evaluate-system-missing-key", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_missing_key.toml"], "peak_flops"),
    ("evaluate-system-string", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_string.toml"], "peak_flops"),
    ("evaluate-system-huge-int", ["evaluate", "1f1b", *S4, "--system", "{d}/sys_huge_int.toml"], "num_devices"),
    ("evaluate-model-unknown", ["evaluate", "1f1b", *S4, *SYS, "--model", "llama9"], "model"),
    ("evaluate-model-folder", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/folder.toml"], "folder.toml"),
    ("evaluate-model-latin1", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/latin1_model.toml"], "not UTF-8"),
    ("evaluate-model-zero-layers", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/model_zero_layers.toml"],
     "num_layers"),
    ("evaluate-model-float", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/model_float.toml"], "hidden"),
    ("evaluate-model-huge", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/model_huge.toml"], "hidden"),
    ("evaluate-model-missing-key", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/model_missing.toml"], "vocab"),
    ("evaluate-model-batch", ["evaluate", "1f1b", *S4, *SYS, "--model", "{d}/model_batch.toml"], "global batch"),
    # context parallelism, ZeRO-3, layouts, per-stage recomputation
    ("evaluate-cp-sequence", ["evaluate", "1f1b", *S4, *CAL, "--cp", "3"], "cp 3 must split the sequence of 128"),
    ("evaluate-cp-comm-without-cp", ["evaluate", "1f1b", *S4, *CAL, "--cp-comm", "allgather"],
     "--cp-comm applies with --cp > 1"),
    ("evaluate-tp-heads", ["evaluate", "1f1b", *S4, *CAL, "--tp", "3"], "tp 3 must divide the heads (4)"),
    ("evaluate-zero3-alone", ["evaluate", "1f1b", *S4, *CAL, "--zero", "3"], "--zero applies with --dp > 1"),
    ("evaluate-reshard-without-zero3", ["evaluate", "1f1b", *S4, *CAL, "--dp", "2", "--no-reshard-after-forward"],
     "--no-reshard-after-forward applies with --zero 3"),
    ("evaluate-layout-layers", ["evaluate", "1f1b", *S4, *CAL, "--layout", "Et*3|t*3|t*3|t*3L"],
     "holds 12 transformer layers t, model 'tiny_gpt' has 16"),
    ("evaluate-layout-stages", ["evaluate", "1f1b", *S4, *CAL, "--layout", "Et*8|t*8L"],
     "has 2 stages, the schedule 4"),
    ("evaluate-layout-empty-stage", ["evaluate", "1f1b", *S4, *CAL, "--layout", "Et*8||t*4|t*4L"],
     "stage 1 holds nothing"),
    ("evaluate-layout-garbage", ["evaluate", "1f1b", *S4, *CAL, "--layout", "Ex"], "--layout"),
    ("evaluate-layout-no-loss", ["evaluate", "1f1b", *S4, *CAL, "--layout", "Et*4|t*4|t*4|t*4"], "loss L"),
    ("evaluate-recompute-layers-length", ["evaluate", "1f1b", *S4, *CAL, "--recompute-layers", "1,2"],
     "recompute layers name 2 stages, the schedule has 4"),
    ("evaluate-recompute-layers-word", ["evaluate", "1f1b", *S4, *CAL, "--recompute-layers", "a,b"],
     "recompute layers"),
    ("evaluate-recompute-layers-more-than-held", ["evaluate", "1f1b", *S4, *CAL, "--recompute-layers", "5,0,0,0"],
     "recompute layers: stage 0 holds 4 layers, so at most 4 can recompute, got 5"),
    ("evaluate-recompute-modules-unknown", ["evaluate", "1f1b", *S4, *CAL, "--recompute-modules", "attention"],
     "recompute modules must be among core_attn, layernorm"),
    ("evaluate-recompute-modules-not-in-model", ["evaluate", "1f1b", *S4, *CAL, "--recompute-modules", "moe_act"],
     "recompute module moe_act does not apply to model 'tiny_gpt'"),
    ("evaluate-activation-precision-bf16-gemms", ["evaluate", "1f1b", *S4, *CAL, "--activation-precision", "fp8"],
     "activation precision fp8 (GEMM inputs cached in fp8) applies with gemm precision fp8 only"),
    ("evaluate-activation-precision-unknown", ["evaluate", "1f1b", *S4, *CAL, "--activation-precision", "fp4"],
     "--activation-precision"),
    # activation offload: a share from 0 to 1, over a host link, timed by the simulator's copy streams
    ("evaluate-offload-above-one", ["evaluate", "1f1b", *S4, *H100, "--offload-activations", "1.5"],
     "offload activations must be a number >= 0 and <= 1, got '1.5'"),
    ("evaluate-offload-word", ["evaluate", "1f1b", *S4, *H100, "--offload-activations", "half"],
     "offload activations must be a number"),
    ("evaluate-offload-no-host-link", ["evaluate", "1f1b", *S4, *CAL, "--offload-activations", "0.5"],
     "--offload-activations needs a system with a host link"),
    ("evaluate-offload-no-system", ["evaluate", "1f1b", *S4, "--offload-activations", "0.5"],
     "--offload-activations needs --system"),
    ("evaluate-offload-cpsat", ["evaluate", "1f1b", *S4, *H100, "--offload-activations", "0.5", "--solver", "cpsat"],
     "--solver cpsat does not apply with --offload-activations"),
    ("evaluate-offload-pairs", ["evaluate", "dualpipev", *S4, *H100, "--offload-activations", "0.5"],
     "--offload-activations does not apply to dualpipev: its ops run in pairs"),
    ("search-offload-free-placement", ["search", *S4, *H100, "--offload-activations", "0.5", "--placement", "free"],
     "needs a fixed placement"),
    ("bound-offload-period", ["bound", *S4, *H100, "--offload-activations", "0.5", "--objective", "period"],
     "needs --objective makespan"),
    ("bound-offload-partition", ["bound", *S4, *H100, "--offload-activations", "0.5", "--partition", "free"],
     "needs the even partition"),
    ("search-offload-no-host-link", ["search", *S4, *CAL, "--offload-activations", "1"], "host link"),
    ("plan-offload-no-host-link", [*PLAN, "--gpu", "A100", "--offload-activations", "0.5"],
     "--offload-activations needs a system with a host link"),
    ("plan-offload-above-one", [*PLAN, "--offload-activations", "2"], "offload activations must be a number"),
    ("evaluate-offload-profile", ["evaluate", "1f1b", *S4, "--profile", "{d}/prof_ok.toml", "--offload-activations",
                                  "0.5"], "--offload-activations does not apply with --profile"),
    ("plan-offload-profile", [*PLAN, "--profile", "{d}/prof_ok.toml", "--offload-activations", "0.5"],
     "--offload-activations does not apply with --profile"),
    # unwritable outputs
    ("evaluate-plot-missing-folder", ["evaluate", "1f1b", *S4, *SYS, "--plot", "{d}/nowhere/t.png"], "--plot"),
    ("evaluate-plot-full-disk", ["evaluate", "1f1b", *S4, *SYS, "--plot", "/dev/full"], "--plot"),
    ("evaluate-plot-folder", ["evaluate", "1f1b", *S4, *SYS, "--plot", "{d}/folder.png"], "--plot"),
    ("evaluate-plot-suffix", ["evaluate", "1f1b", *S4, *SYS, "--plot", "{d}/t.txt"], "--plot"),
    ("evaluate-trace-missing-folder", ["evaluate", "1f1b", *S4, *SYS, "--trace", "{d}/nowhere/t.json"], "--trace"),
    ("evaluate-trace-full-disk", ["evaluate", "1f1b", *S4, *SYS, "--trace", "/dev/full"], "--trace"),
    ("evaluate-trace-folder", ["evaluate", "1f1b", *S4, *SYS, "--trace", "{d}/folder.json"], "--trace"),
    ("table-plot-missing-folder", ["table", "1f1b", *S4, "--plot", "{d}/nowhere/t.png"], "--plot"),
    ("table-plot-full-disk", ["table", "1f1b", *S4, "--plot", "/dev/full"], "--plot"),
    ("table-format-unknown", ["table", "1f1b", *S4, "--format", "yaml"], "--format"),
    ("table-torch-two-pipelines", ["table", "chimera", *S4, "--format", "torch-csv"], "torch"),
    ("view-output-missing-folder", ["view", "1f1b", *S4, "-o", "{d}/nowhere/v.html"], "--output"),
    ("view-output-full-disk", ["view", "1f1b", *S4, "-o", "/dev/full"], "--output"),
    ("view-output-folder", ["view", "1f1b", *S4, "-o", "{d}/folder.html"], "--output"),
    ("view-output-suffix", ["view", "1f1b", *S4, "-o", "{d}/v.png"], "--output"),
    ("view-twice", ["view", "1f1b", "1f1b", *S4], "twice"),
    ("view-waves-none-takes", ["view", "1f1b", "gpipe", *S4, "--waves", "2"], "--waves"),
    ("view-one-unknown", ["view", "1f1b", "zigzag", *S4], "unknown schedule"),
    ("view-one-outside-regime", ["view", "1f1b", "chimera", "-S", "4", "-B", "6"], "microbatches"),
    # check: files that are not regular, not UTF-8, too deep, malformed, or inconsistent
    ("check-missing", ["check", "{d}/none.json"], "none.json"),
    ("check-folder", ["check", "{d}/folder.json"], "folder.json"),
    ("check-fifo", ["check", "{d}/fifo.json"], "fifo.json"),
    ("check-dev-zero", ["check", "{d}/zero.json"], "zero.json"),
    ("check-latin1-text", ["check", "{d}/latin1.txt"], "not UTF-8"),
    ("check-latin1-json", ["check", "{d}/latin1.json"], "not UTF-8"),
    ("check-binary-csv", ["check", "{d}/binary.csv"], "not UTF-8"),
    ("check-empty", ["check", "{d}/empty.json"], "JSON"),
    ("check-deep-list", ["check", "{d}/deep.json"], "deep"),
    ("check-deep-ops", ["check", "{d}/deep_obj.json"], "deep"),
    ("check-list", ["check", "{d}/list.json"], "ops"),
    ("check-no-ops", ["check", "{d}/no_ops.json"], "ops"),
    ("check-ops-empty", ["check", "{d}/ops_empty.json"], "no ops"),
    ("check-claims-makespan", ["check", "{d}/claims_makespan.json"], "makespan_slots"),
    ("check-claims-bubble", ["check", "{d}/claims_bubble.json"], "bubble_ratio"),
    ("check-claims-devices", ["check", "{d}/claims_devices.json"], "device"),
    ("check-claims-microbatches", ["check", "{d}/claims_microbatches.json"], "microbatches"),
    ("check-claims-stages", ["check", "{d}/claims_stages.json"], "stages"),
    ("check-claims-tick", ["check", "{d}/claims_tick.json"], "tick_slots"),
    ("check-huge-start", ["check", "{d}/huge_start.json"], "start"),
    ("check-nan-start", ["check", "{d}/nan_start.json"], "start"),
    ("check-negative-start", ["check", "{d}/neg_start.json"], "start"),
    ("check-zero-duration", ["check", "{d}/zero_duration.json"], "duration"),
    ("check-bad-kind", ["check", "{d}/bad_kind.json"], "kind"),
    ("check-string-stage", ["check", "{d}/string_stage.json"], "stage"),
    ("check-overlap", ["check", "{d}/overlap.json"], "device 0"),
    ("check-missing-op", ["check", "{d}/missing_op.json"], "missing"),
    ("check-duplicate-op", ["check", "{d}/duplicate_op.json"], "twice"),
    ("check-early-forward", ["check", "{d}/early_forward.json"], "F0s1"),
    ("check-csv-no-header", ["check", "{d}/no_header.csv"], "torch CSV"),
    ("check-csv-bad-kind", ["check", "{d}/bad_kind.csv"], "kind"),
    ("check-csv-float", ["check", "{d}/float.csv"], "start"),
    ("check-csv-header-only", ["check", "{d}/header_only.csv"], "no ops"),
    ("check-torch-bad", ["check", "{d}/torch_bad.csv"], "action"),
    ("check-torch-stage-twice", ["check", "{d}/torch_stage_twice.csv"], "stage 0"),
    ("check-text-garbage", ["check", "{d}/garbage.txt"], "devN"),
    ("check-text-bad-cell", ["check", "{d}/bad_cell.txt"], "slot 1"),
    ("check-text-rows-gap", ["check", "{d}/rows_gap.txt"], "dev0..dev1"),
    ("check-format-unknown", ["check", "{d}/garbage.txt", "--format", "xml"], "--format"),
    # sweep
    ("sweep-missing", ["sweep", "{d}/none.toml"], "none.toml"),
    ("sweep-folder", ["sweep", "{d}/folder.toml"], "folder.toml"),
    ("sweep-fifo", ["sweep", "{d}/fifo.toml"], "fifo.toml"),
    ("sweep-latin1", ["sweep", "{d}/latin1_sweep.toml"], "not UTF-8"),
    ("sweep-bad-toml", ["sweep", "{d}/sweep_bad.toml"], "TOML"),
    ("sweep-deep-toml", ["sweep", "{d}/sweep_deep.toml"], "deep"),
    ("sweep-unknown-key", ["sweep", "{d}/sweep_unknown.toml"], "extra"),
    ("sweep-stages", ["sweep", "{d}/sweep_stages.toml"], "grid.stages"),
    ("sweep-empty-list", ["sweep", "{d}/sweep_empty.toml"], "grid.schedules"),
    ("sweep-workers-zero", ["sweep", "{d}/sweep_unknown.toml", "--workers", "0"], "workers"),
    ("sweep-limit-zero", ["sweep", "{d}/sweep_unknown.toml", "--limit", "0"], "limit"),
    ("sweep-executor-unknown", ["sweep", "{d}/sweep_unknown.toml", "--executor", "slurm"], "--executor"),
    ("sweep-export-suffix", ["sweep", "{d}/sweep_ok.toml", "--export", "{d}/x.txt"], "--export"),
    ("sweep-scheduler-without-dask", ["sweep", "{d}/sweep_ok.toml", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
    # sweep: profiles and [grid.cluster]
    ("sweep-profiles-and-systems", ["sweep", "{d}/sweep_profiles_and_systems.toml"], "exclude each other"),
    ("sweep-profile-missing", ["sweep", "{d}/sweep_profile_missing.toml"], "grid.profiles"),
    ("sweep-cluster-with-stages", ["sweep", "{d}/sweep_cluster_stages.toml"], "grid.stages"),
    ("sweep-cluster-tp-zero", ["sweep", "{d}/sweep_cluster_tp_zero.toml"], "grid.cluster.tp"),
    ("sweep-cluster-zero-stage", ["sweep", "{d}/sweep_cluster_zero.toml"], "grid.cluster.zero"),
    ("sweep-cluster-layout", ["sweep", "{d}/sweep_cluster_layout.toml"], "grid.cluster.layout"),
    ("sweep-cluster-cp-comm", ["sweep", "{d}/sweep_cluster_cp_comm.toml"], "grid.cluster.cp_comm"),
    ("sweep-cluster-batch-and-size", ["sweep", "{d}/sweep_cluster_batch.toml"], "microbatch_size"),
    ("sweep-cluster-in-table-mode", ["sweep", "{d}/sweep_cluster_table.toml"], "grid.cluster"),
    ("sweep-cluster-gpus-zero", ["sweep", "{d}/sweep_cluster_gpus.toml"], "grid.cluster.gpus"),
    # stage partitions (search and bound)
    *[(f"{cmd}-{cid}", [cmd, "-S", "4", "-B", "8", *argv], frag) for cmd in ("search", "bound") for cid, argv, frag in [
        ("partition-sum", ["--layers", "32", "--partition", "7,8,8,8"], "--partition sums to 31"),
        ("partition-zero", ["--layers", "32", "--partition", "16,0,8,8"], "--partition gives a stage 0"),
        ("partition-length", ["--layers", "32", "--partition", "8,8,16"], "--partition lists 3"),
        ("partition-not-int", ["--layers", "32", "--partition", "8,8,8,8.0"], "--partition must be"),
        ("partition-word", ["--layers", "32", "--partition", "uneven"], "--partition must be"),
        ("partition-directions", ["--layers", "32", "--partition", "8,8,8,8/8,8,8,8"], "--partition gives 2"),
        ("partition-no-layers", ["--partition", "free"], "--partition free or a list needs --layers"),
        ("partition-placement", ["--layers", "32", "--partition", "free", "--placement", "v"], "--placement linear"),
        ("head-without-layers", ["--head-slots", "2"], "--head-slots"),
        ("layers-with-system", ["--layers", "32", "--system", "fast_nw_fast_cp"], "--layers"),
        ("layers-too-few", ["--layers", "3"], "--layers"),
        ("system-partition-sum", ["--system", "fast_nw_fast_cp", "--partition", "32,32,32,31"], "--partition sums"),
    ]],
    # listings and the command itself
    ("schedules-format", ["schedules", "--format", "xml"], "--format"),
    ("systems-extra-argument", ["systems", "extra"], "extra"),
    ("models-format", ["models", "--format", "csv"], "--format"),
    ("no-command", [], "command"),
    ("unknown-command", ["simulate"], "simulate"),
]


# the costs of the simulation level on every command that has one: --profile and the
# real-cluster options (pipetab/cli/hardware_args.py)
H100 = ["--system", "dgx_h100_ib", "--model", "llama3_8b"]
PROF = ["--profile", "{d}/prof_ok.toml"]
HARDWARE = [
    ("tp-zero", [*H100, "--tp", "0"], "tp"),
    ("tp-word", [*H100, "--tp", "eight"], "tp"),
    ("tp-float", [*H100, "--tp", "2.5"], "tp"),
    ("dp-negative", [*H100, "--dp", "-2"], "dp"),
    ("tp-not-dividing-heads", [*H100, "--tp", "3"], "heads"),
    ("zero-unknown", [*H100, "--dp", "2", "--zero", "4"], "--zero"),
    ("zero-without-dp", [*H100, "--zero", "1"], "--zero"),
    ("no-overlap-without-dp", [*H100, "--no-overlap"], "--no-overlap"),
    ("no-sp-without-tp", [*H100, "--no-sequence-parallel"], "--no-sequence-parallel"),
    ("microbatch-size-zero", [*H100, "--microbatch-size", "0"], "microbatch size"),
    ("global-batch-zero", [*H100, "--global-batch", "0"], "global batch"),
    ("global-batch-split", [*H100, "--global-batch", "12"], "global batch"),
    ("global-batch-dp-split", [*H100, "--global-batch", "16", "--dp", "4"], "global batch"),
    ("global-batch-and-size-disagree", [*H100, "--global-batch", "64", "--microbatch-size", "4"], "--global-batch"),
    ("seq-zero", [*H100, "--seq", "0"], "sequence length"),
    ("seq-inf", [*H100, "--seq", "inf"], "sequence length"),
    ("tp-without-system", ["--tp", "2"], "--tp"),
    ("dp-without-system", ["--dp", "2"], "--dp"),
    ("global-batch-without-system", ["--global-batch", "64"], "--global-batch"),
    ("profile-with-system", [*PROF, "--system", "mid_nw_mid_cp"], "--system"),
    ("profile-with-model", [*PROF, "--model", "tiny_gpt"], "--model"),
    ("profile-with-recompute", [*PROF, "--recompute", "full"], "--recompute"),
    ("profile-with-tp", [*PROF, "--tp", "2"], "--tp"),
    ("profile-with-microbatch-size", [*PROF, "--microbatch-size", "2"], "--microbatch-size"),
    ("profile-missing", ["--profile", "{d}/none.toml"], "none.toml"),
    ("profile-folder", ["--profile", "{d}/folder.toml"], "folder.toml"),
    ("profile-fifo", ["--profile", "{d}/fifo.toml"], "fifo.toml"),
    ("profile-latin1", ["--profile", "{d}/latin1_prof.toml"], "not UTF-8"),
    ("profile-bad-toml", ["--profile", "{d}/sys_bad_toml.toml"], "TOML"),
    ("profile-deep", ["--profile", "{d}/prof_deep.toml"], "deep"),
    ("profile-negative-time", ["--profile", "{d}/prof_negative.toml"], "forward"),
    ("profile-zero-time", ["--profile", "{d}/prof_zero.toml"], "backward"),
    ("profile-nan-time", ["--profile", "{d}/prof_nan.toml"], "forward"),
    ("profile-inf-message", ["--profile", "{d}/prof_inf.toml"], "message"),
    ("profile-time-unit", ["--profile", "{d}/prof_unit.toml"], "time_unit"),
    ("profile-unknown-key", ["--profile", "{d}/prof_unknown_key.toml"], "colour"),
    ("profile-missing-forward", ["--profile", "{d}/prof_missing_forward.toml"], "forward"),
    ("profile-stages-zero", ["--profile", "{d}/prof_stages_zero.toml"], "stages"),
    ("profile-stage-count", ["--profile", "{d}/prof_stage_count.toml"], "stages"),
    ("profile-weight-memory", ["--profile", "{d}/prof_weight_memory.toml"], "weight_memory_bytes"),
    ("profile-memory-negative", ["--profile", "{d}/prof_memory.toml"], "memory_bytes"),
    ("profile-microbatch-zero", ["--profile", "{d}/prof_mb_zero.toml"], "microbatch_size"),
    ("profile-string", ["--profile", "{d}/prof_string.toml"], "forward"),
    ("profile-empty", ["--profile", "{d}/prof_empty.toml"], "[default]"),
    ("profile-not-a-system", ["--profile", "{d}/sys_eff.toml"], "device"),
]
CASES += [(f"evaluate-{cid}", ["evaluate", "1f1b", "-S", "4", "-B", "8", *argv], frag) for cid, argv, frag in HARDWARE]
CASES += [(f"{cmd}-{cid}", [cmd, "-S", "4", "-B", "8", "--time-limit", "1", *argv], frag)
          for cmd in ("search", "bound") for cid, argv, frag in HARDWARE[:12] + HARDWARE[16:26]]
CASES += [(f"view-{cid}", ["view", "1f1b", "gpipe", "-S", "4", "-B", "8", "-o", "{d}/v.html", *argv], frag)
          for cid, argv, frag in HARDWARE[:3] + HARDWARE[6:9] + HARDWARE[19:30]]
CASES += [
    ("evaluate-profile-stages-disagree", ["evaluate", "1f1b", "-S", "8", "-B", "8", *PROF], "--stages"),
    ("evaluate-profile-split-without-weight", ["evaluate", "zb-h1", "-S", "4", "-B", "8", *PROF], "weight"),
    ("evaluate-profile-tick-without-solver", ["evaluate", "1f1b", "-S", "4", "-B", "8", *PROF, "--tick", "1e-4"],
     "--tick"),
    ("evaluate-too-many-gpus",
     ["evaluate", "1f1b", "-S", "4", "-B", "8", "--system", "{d}/sys_eight.toml", "--tp", "4"], "GPUs"),
    ("search-profile-comm-slots", ["search", "-S", "4", "-B", "8", *PROF, "--comm-slots", "1"], "--comm-slots"),
    ("search-profile-activation-cap", ["search", "-S", "4", "-B", "8", *PROF, "--activation-cap", "2"],
     "--activation-cap"),
    ("bound-profile-stages-disagree", ["bound", "-S", "2", "-B", "8", *PROF], "--stages"),
    # bidirectional sends the first half of each unit of S microbatches down: B=2 on S=4 leaves none up
    ("search-bidirectional-one-direction", ["search", "-S", "4", "-B", "2", "--placement", "bidirectional"],
     "microbatches must be at least 3"),
    ("bound-profile-split-without-weight", ["bound", "-S", "4", "-B", "8", *PROF, "--split-backward"], "weight"),
    # plan
    ("plan-nodes-zero", ["plan", "--model", "tiny_gpt", "--nodes", "0", "--gpus-per-node", "8", "--global-batch", "8"],
     "nodes"),
    ("plan-gpus-word", ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "x", "--global-batch", "8"],
     "gpus per node"),
    ("plan-batch-missing", ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "8"], "--global-batch"),
    ("plan-batch-negative", [*PLAN[:7], "--global-batch", "-8"], "global batch"),
    ("plan-seq-zero", [*PLAN, "--seq", "0"], "sequence length"),
    # issue 44: pins no stage can hold and options plan would have ignored
    ("plan-ep-above-the-cluster", ["plan", "--model", "mixtral_8x7b", "--nodes", "1", "--gpus-per-node", "4",
                                   "--global-batch", "64", "--ep", "8"], "--ep 8 must divide the cluster's 4 GPUs"),
    ("plan-etp-not-a-divisor", ["plan", "--model", "mixtral_8x7b", "--nodes", "1", "--gpus-per-node", "8",
                                "--global-batch", "64", "--etp", "3"], "--etp 3 must divide the expert MLP size"),
    ("plan-routing-imbalance-huge", ["plan", "--model", "mixtral_8x7b", "--nodes", "1", "--gpus-per-node", "8",
                                     "--global-batch", "64", "--routing-imbalance", "1e308"],
     "routing imbalance must be a number >= 1 and <= 1024"),
    ("plan-reshard-without-zero3", [*PLAN, "--zero", "1", "--no-reshard-after-forward"],
     "--no-reshard-after-forward applies with ZeRO-3 only"),
    ("plan-cp-comm-without-cp", [*PLAN, "--cp-comm", "allgather"], "--cp-comm applies with context parallelism only"),
    ("plan-microbatch-sizes-zero", [*PLAN, "--microbatch-sizes", "1,0"], "microbatch sizes"),
    ("plan-microbatch-sizes-word", [*PLAN, "--microbatch-sizes", "one"], "microbatch sizes"),
    ("plan-recompute-unknown", [*PLAN, "--recompute", "none,some"], "recompute"),
    ("plan-schedules-unknown", [*PLAN, "--schedules", "1f1b,zigzag"], "zigzag"),
    ("plan-schedules-empty", [*PLAN, "--schedules", ","], "schedules"),
    ("plan-zero-unknown", [*PLAN, "--zero", "4"], "--zero"),
    ("plan-pins-contradict", [*PLAN, "--pp", "2", "--tp", "2", "--cp", "1", "--dp", "2"],
     "--pp 2 x --tp 2 x --cp 1 x --dp 2 = 8 GPUs, the cluster has 4"),
    ("plan-pin-not-dividing", [*PLAN, "--dp", "3"], "--dp 3 must divide the cluster's 4 GPUs"),
    ("plan-pin-word", [*PLAN, "--pp", "two"], "pp"),
    ("plan-pin-tp-node", [*PLAN[:4], "2", "--gpus-per-node", "2", *PLAN[7:], "--tp", "4"],
     "--tp 4 must divide the 2 GPUs of a node"),
    ("plan-cp-sequence", [*PLAN, "--seq", "100", "--cp", "4"], "--cp 4 must split the sequence of 100 tokens"),
    ("plan-pp-layers", [*PLAN[:4], "8", "--gpus-per-node", "4", *PLAN[7:], "--pp", "32"], "--pp 32 is more stages"),
    ("plan-emit-unknown", [*PLAN, "--emit", "deepspeed"], "--emit"),
    ("plan-emit-csv-alone", [*PLAN, "--emit-csv", "{d}/s.csv"],
     "--emit-csv applies with --emit torchtitan or torchtitan-toml only"),
    ("plan-force-alone", [*PLAN, "--force"], "--force applies with --emit only"),
    ("plan-no-substitute-alone", [*PLAN, "--no-substitute"], "--no-substitute applies with --emit only"),
    ("plan-emit-json", [*PLAN, "--emit", "megatron", "--format", "json"], "--emit"),
    ("plan-emit-version-unknown", [*PLAN, "--emit", "torchtitan", "--emit-version", "0.1.0"],
     "--emit-version '0.1.0': --emit torchtitan writes for 0.3.0 or 0.2.2"),
    ("plan-emit-version-alone", [*PLAN, "--emit-version", "0.3.0"], "--emit-version applies with --emit only"),
    ("plan-no-substitute-refused", [*PLAN, "--schedules", "zbv", "--emit", "megatron", "--no-substitute"],
     "--no-substitute: the megatron configuration would differ from the plan: the best configuration"),
    ("plan-emit-bridge-no-recipe", [*PLAN, "--emit", "megatron-bridge"],
     "--model tiny_gpt: Megatron-Bridge 0.3.1 has no recipe of it"),
    ("plan-cp-comm-unknown", [*PLAN, "--cp-comm", "a2a"], "--cp-comm"),
    ("plan-top-zero", [*PLAN, "--top", "0"], "top"),
    ("plan-cpsat-time-zero", [*PLAN, "--cpsat-time", "0"], "cpsat time"),
    ("plan-cpsat-time-nan", [*PLAN, "--cpsat-time", "nan"], "cpsat time"),
    ("plan-cpsat-time-inf", [*PLAN, "--cpsat-time", "inf"], "cpsat time"),
    ("plan-cpsat-time-without-shapes", [*PLAN, "--cpsat-shapes", "0", "--cpsat-time", "2"], "--cpsat-time"),
    ("plan-gpu-unknown", [*PLAN, "--gpu", "TPU"], "--gpu"),
    ("plan-gpu-and-system", [*PLAN, "--gpu", "H100", "--system", "dgx_h100_ib"], "--system"),
    ("plan-model-unknown", ["plan", "--model", "llama9", *PLAN[3:]], "llama9"),
    ("plan-model-folder", ["plan", "--model", "{d}/folder.toml", *PLAN[3:]], "folder.toml"),
    ("plan-model-latin1", ["plan", "--model", "{d}/latin1_model.toml", *PLAN[3:]], "not UTF-8"),
    ("plan-system-tiny-flops", [*PLAN, "--system", "{d}/sys_tiny_flops.toml"], "peak_flops"),
    ("plan-profile-with-zero", [*PLAN, *PROF, "--zero", "0"], "--zero"),
    ("plan-profile-missing", [*PLAN, "--profile", "{d}/none.toml"], "none.toml"),
    ("plan-profile-negative", [*PLAN, "--profile", "{d}/prof_negative.toml"], "forward"),
    ("plan-profile-no-size", [*PLAN, "--profile", "{d}/prof_no_size.toml"], "microbatch_size"),
    ("plan-plot-missing-folder", [*PLAN, "--plot", "{d}/nowhere/p.png"], "--plot"),
    ("plan-plot-suffix", [*PLAN, "--plot", "{d}/p.txt"], "--plot"),
    ("plan-plot-folder", [*PLAN, "--plot", "{d}/folder.png"], "--plot"),
    ("plan-plot-full-disk", [*PLAN, "--plot", "/dev/full"], "--plot"),
    ("plan-format-unknown", [*PLAN, "--format", "yaml"], "--format"),
    # calibrate
    ("calibrate-profile-missing", ["calibrate", "{d}/none.toml", *CAL], "none.toml"),
    ("calibrate-profile-folder", ["calibrate", "{d}/folder.toml", *CAL], "folder.toml"),
    ("calibrate-profile-fifo", ["calibrate", "{d}/fifo.toml", *CAL], "fifo.toml"),
    ("calibrate-profile-latin1", ["calibrate", "{d}/latin1_prof.toml", *CAL], "not UTF-8"),
    ("calibrate-profile-negative", ["calibrate", "{d}/prof_negative.toml", *CAL], "forward"),
    ("calibrate-profile-nan", ["calibrate", "{d}/prof_nan.toml", *CAL], "forward"),
    ("calibrate-profile-no-size", ["calibrate", "{d}/prof_no_size.toml", *CAL], "microbatch_size"),
    ("calibrate-model-missing", ["calibrate", "{d}/prof_ok.toml", "--system", "mid_nw_mid_cp"], "--model"),
    ("calibrate-model-unknown", ["calibrate", "{d}/prof_ok.toml", "--model", "llama9", "--system", "mid_nw_mid_cp"],
     "llama9"),
    ("calibrate-system-bad", ["calibrate", "{d}/prof_ok.toml", "--model", "tiny_gpt", "--system",
                              "{d}/sys_eff.toml"], "compute_efficiency"),
    ("calibrate-recompute-unknown", ["calibrate", "{d}/prof_ok.toml", *CAL, "--recompute", "half"], "--recompute"),
    ("calibrate-out-missing-folder", ["calibrate", "{d}/prof_ok.toml", *CAL, "--out", "{d}/nowhere/s.toml"], "--out"),
    ("calibrate-out-folder", ["calibrate", "{d}/prof_ok.toml", *CAL, "--out", "{d}/folder.toml"], "--out"),
    ("calibrate-out-suffix", ["calibrate", "{d}/prof_ok.toml", *CAL, "--out", "{d}/s.json"], "--out"),
    ("calibrate-out-full-disk", ["calibrate", "{d}/prof_ok.toml", *CAL, "--out", "/dev/full"], "--out"),
    ("calibrate-format-unknown", ["calibrate", "{d}/prof_ok.toml", *CAL, "--format", "xml"], "--format"),
    # models and systems given files
    ("models-missing-file", ["models", "{d}/none.toml"], "none.toml"),
    ("models-folder", ["models", "{d}/folder.toml"], "folder.toml"),
    ("models-fifo", ["models", "{d}/fifo.toml"], "fifo.toml"),
    ("models-latin1", ["models", "{d}/latin1_model.toml"], "not UTF-8"),
    ("models-zero-layers", ["models", "{d}/model_zero_layers.toml"], "num_layers"),
    ("models-huge", ["models", "{d}/model_huge.toml"], "hidden"),
    ("models-a-system-file", ["models", "{d}/sys_eff.toml"], "device"),
    ("models-deep", ["models", "{d}/sweep_deep.toml"], "deep"),
    ("systems-missing-file", ["systems", "{d}/none.toml"], "none.toml"),
    ("systems-folder", ["systems", "{d}/folder.toml"], "folder.toml"),
    ("systems-latin1", ["systems", "{d}/latin1_sys.toml"], "not UTF-8"),
    ("systems-nan-flops", ["systems", "{d}/sys_nan_flops.toml"], "peak_flops"),
    ("systems-negative-latency", ["systems", "{d}/sys_neg_latency.toml"], "latency"),
    ("systems-a-model-file", ["systems", "{d}/model_float.toml"], "num_layers"),
    ("systems-format", ["systems", "--format", "yaml"], "--format"),
]


# cases written on main alongside these (the same id is the same case: kept once)
LLAMA = ["--system", "dgx_h100_ib", "--model", "llama3_8b"]
PROF = ["--profile", "{d}/sp_prof_ok.toml"]
PLAN8 = ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "8"]
MAIN_CASES = [
    # the cluster context and profiles on evaluate, view, search and bound
    *[(f"{cmd}-{cid}", [cmd, *head, *argv], frag)
      for cmd, head in (("evaluate", ["1f1b", *S4]), ("view", ["1f1b", *S4]), ("search", S4), ("bound", S4))
      for cid, argv, frag in [
          ("tp-without-system", ["--tp", "2"], "--tp"),
          ("dp-without-system", ["--dp", "2"], "--dp"),
          ("seq-without-system", ["--seq", "1024"], "--seq"),
          ("global-batch-without-system", ["--global-batch", "64"], "--global-batch"),
          ("tp-zero", [*LLAMA, "--tp", "0"], "tp"),
          ("dp-float", [*LLAMA, "--dp", "1.5"], "dp"),
          ("tp-splits-no-heads", [*LLAMA, "--tp", "3"], "tp"),
          ("zero-without-dp", [*LLAMA, "--zero", "1"], "--zero"),
          ("zero-unknown", [*LLAMA, "--dp", "2", "--zero", "4"], "--zero"),
          ("no-overlap-without-dp", [*LLAMA, "--no-overlap"], "--no-overlap"),
          ("no-sp-without-tp", [*LLAMA, "--no-sequence-parallel"], "--no-sequence-parallel"),
          ("global-batch-not-divisible", [*LLAMA, "--global-batch", "12"], "12"),
          ("seq-zero", [*LLAMA, "--seq", "0"], "seq"),
          ("too-many-gpus", ["--system", "{d}/sys_eight.toml", "--tp", "4", "--dp", "4", "--microbatch-size", "1"],
           "GPUs"),
          ("profile-with-system", [*PROF, "--system", "mid_nw_mid_cp"], "--profile"),
          ("profile-with-model", [*PROF, "--model", "tiny_gpt"], "--model"),
          ("profile-with-tp", [*PROF, "--tp", "2"], "--tp"),
          ("profile-missing", ["--profile", "{d}/none.toml"], "none.toml"),
          ("profile-folder", ["--profile", "{d}/folder.toml"], "folder.toml"),
          ("profile-latin1", ["--profile", "{d}/latin1_sweep.toml"], "not UTF-8"),
          ("profile-negative", ["--profile", "{d}/sp_prof_negative.toml"], "forward"),
          ("profile-nan", ["--profile", "{d}/sp_prof_nan.toml"], "backward"),
          ("profile-unit", ["--profile", "{d}/sp_prof_unit.toml"], "time_unit"),
          ("profile-unknown-key", ["--profile", "{d}/sp_prof_unknown_key.toml"], "colour"),
          ("profile-bad-toml", ["--profile", "{d}/sp_prof_bad_toml.toml"], "TOML"),
          ("profile-stages-zero", ["--profile", "{d}/sp_prof_stages_zero.toml"], "stages"),
      ]],
    ("evaluate-profile-other-stages", ["evaluate", "1f1b", "-S", "8", "-B", "8", *PROF], "4"),
    ("search-profile-split-without-weight",
     ["search", *S4, "--split-backward", "--profile", "{d}/sp_prof_no_weight.toml"], "weight"),
    ("search-profile-comm-slots", ["search", *S4, *PROF, "--comm-slots", "1"], "--comm-slots"),
    ("search-profile-activation-cap", ["search", *S4, *PROF, "--activation-cap", "2"], "--activation-cap"),
    ("search-overlap-pairs-idealized", ["search", *S4, "--overlap-pairs", "on"], "--overlap-pairs"),
    ("search-overlap-pairs-dense", ["search", *S4, *SYS, "--model", "tiny_gpt", "--overlap-pairs", "on"],
     "--overlap-pairs"),
    ("search-overlap-pairs-bad", ["search", *S4, *SYS, *MOE, "--overlap-pairs", "maybe"], "overlap-pairs"),
    ("search-overlap-pairs-free", ["search", *S4, *SYS, *MOE, "--placement", "free", "--overlap-pairs", "on"],
     "--overlap-pairs"),
    ("bound-overlap-pairs-period", ["bound", *S4, *SYS, *MOE, "--objective", "period", "--overlap-pairs", "on"],
     "--overlap-pairs"),
    ("search-overlap-pairs-partition-free", ["search", *S4, *SYS, *MOE, "--partition", "free", "--overlap-pairs",
                                             "on"], "--overlap-pairs"),
    # plan
    ("plan-no-model", ["plan", "--nodes", "1", "--gpus-per-node", "8", "--global-batch", "8"], "--model"),
    ("plan-unknown-model", [*PLAN8[:2], "nope", *PLAN8[3:], "--global-batch", "8"], "nope"),
    ("plan-nodes-zero", ["plan", "--model", "tiny_gpt", "--nodes", "0", "--gpus-per-node", "8", "--global-batch", "8"],
     "nodes"),
    ("plan-gpus-float",
     ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "2.5", "--global-batch", "8"], "gpus"),
    ("plan-batch-zero", [*PLAN8, "--global-batch", "0"], "global"),
    ("plan-batch-huge", [*PLAN8, "--global-batch", "123456789012345678901234567890"], "--global-batch"),
    ("plan-seq-negative", [*PLAN8, "--global-batch", "8", "--seq", "-1"], "seq"),
    ("plan-gpu-unknown", [*PLAN8, "--global-batch", "8", "--gpu", "TPU"], "TPU"),
    ("plan-gpu-and-system", [*PLAN8, "--global-batch", "8", "--gpu", "H100", "--system", "dgx_h100_ib"], "--system"),
    ("plan-mb-sizes-bad", [*PLAN8, "--global-batch", "8", "--microbatch-sizes", "1,x"], "microbatch"),
    ("plan-recompute-bad", [*PLAN8, "--global-batch", "8", "--recompute", "half"], "recompute"),
    ("plan-schedules-unknown", [*PLAN8, "--global-batch", "8", "--schedules", "1f1b,zigzag"], "zigzag"),
    ("plan-zero-bad", [*PLAN8, "--global-batch", "8", "--zero", "4"], "--zero"),
    ("plan-top-zero", [*PLAN8, "--global-batch", "8", "--top", "0"], "top"),
    ("plan-cpsat-time-nan", [*PLAN8, "--global-batch", "8", "--cpsat-time", "nan"], "cpsat"),
    ("plan-cpsat-time-without-shapes", [*PLAN8, "--global-batch", "8", "--cpsat-shapes", "0", "--cpsat-time", "2"],
     "--cpsat-time"),
    ("plan-plot-suffix", [*PLAN8, "--global-batch", "8", "--plot", "{d}/p.txt"], "--plot"),
    ("plan-plot-missing-folder", [*PLAN8, "--global-batch", "8", "--plot", "{d}/nowhere/p.png"], "--plot"),
    ("plan-profile-missing", [*PLAN8, "--global-batch", "8", "--profile", "{d}/none.toml"], "none.toml"),
    ("plan-format", [*PLAN8, "--global-batch", "8", "--format", "xml"], "--format"),
    # calibrate
    ("calibrate-missing", ["calibrate", "{d}/none.toml", "--model", "tiny_gpt", "--system", "dgx_h100_ib"],
     "none.toml"),
    ("calibrate-latin1", ["calibrate", "{d}/latin1_sweep.toml", "--model", "tiny_gpt", "--system", "dgx_h100_ib"],
     "not UTF-8"),
    ("calibrate-negative", ["calibrate", "{d}/sp_prof_negative.toml", "--model", "tiny_gpt", "--system", "dgx_h100_ib"],
     "forward"),
    ("calibrate-unknown-system", ["calibrate", "{d}/sp_prof_ok.toml", "--model", "tiny_gpt", "--system", "nope"],
     "nope"),
    ("calibrate-out-missing-folder",
     ["calibrate", "{d}/sp_prof_ok.toml", "--model", "tiny_gpt", "--system", "dgx_h100_ib",
      "--out", "{d}/nowhere/s.toml"], "--out"),
    # profile (PyTorch profiler traces in)
    ("profile-not-json", ["profile", "{d}/empty.json", "-o", "{d}/p.toml"], "is not JSON"),
    ("profile-not-a-trace", ["profile", "{d}/list.json", "-o", "{d}/p.toml"], "not a PyTorch profiler trace"),
    ("profile-table-not-a-trace", ["profile", "{d}/no_ops.json", "-o", "{d}/p.toml"], "no 'traceEvents'"),
    ("profile-no-pipeline-ops", ["profile", "{d}/empty_trace.json", "-o", "{d}/p.toml"], "no pipeline ops"),
    ("profile-same-trace-twice", ["profile", "{d}/negative_dur_trace.json", "{d}/negative_dur_trace.json", "-o",
                                  "{d}/p.toml"], "negative_dur_trace.json' is given twice"),
    ("profile-negative-duration", ["profile", "{d}/negative_dur_trace.json", "-o", "{d}/p.toml"],
     "negative_dur_trace.json': event 'PP:0F0' has 'dur' -10; a duration is a finite number >= 0"),
    ("profile-ranks-disagree", ["profile", *TRACES, "-o", "{d}/p.toml", "-S", "3"], "-S is 3 pipeline devices"),
    ("profile-stages-huge", ["profile", *TRACES, "-o", "{d}/p.toml", "-S", str(2**70)],
     "stages must be an integer between 1 and 1,024"),
    ("profile-layers-huge", ["profile", *TRACES, "-o", "{d}/p.toml", "--layers", "1," + "9" * 30],
     "layers must be at most 1024 comma-separated integers from 0 to 16,384"),
    ("profile-tp-huge", ["profile", *TRACES, "-o", "{d}/p.toml", "--tp", str(2**40)], "tp must be"),
    ("profile-rank-twice", ["profile", "{d}/rank0_a.json", "{d}/rank0_b.json", "-o", "{d}/p.toml"],
     "traces repeat a rank (0, 0)"),
    ("profile-trace-twice", ["profile", TRACES[0], TRACES[0], "-o", "{d}/p.toml"], "rank0.json.gz' is given twice"),
    ("profile-missing", ["profile", "{d}/none.json", "-o", "{d}/p.toml"], "none.json"),
    ("profile-folder", ["profile", "{d}/folder.json", "-o", "{d}/p.toml"], "folder.json"),
    ("profile-fifo", ["profile", "{d}/fifo.json", "-o", "{d}/p.toml"], "fifo.json"),
    ("profile-deep", ["profile", "{d}/deep.json", "-o", "{d}/p.toml"], "nested too deeply"),
    ("profile-out-suffix", ["profile", *TRACES, "-o", "{d}/p.txt"], "--out"),
    ("profile-out-missing", ["profile", *TRACES], "--out"),
    ("profile-layers-words", ["profile", *TRACES, "-o", "{d}/p.toml", "--layers", "a,b"], "layers"),
    ("profile-layers-count", ["profile", *TRACES, "-o", "{d}/p.toml", "--layers", "1,2,3"], "--layers gives 3"),
    ("profile-stages-zero", ["profile", *TRACES, "-o", "{d}/p.toml", "-S", "0"], "stages"),
    ("gemm-precision-fp8-without-fp8", ["evaluate", "1f1b", *S4, "--system", "mid_nw_mid_cp", "--model", "tiny_gpt",
                                        "--gemm-precision", "fp8"], "--gemm-precision"),
    ("gemm-precision-unknown", ["evaluate", "1f1b", *S4, "--system", "dgx_h100_ib", "--model", "tiny_gpt",
                                "--gemm-precision", "fp4"], "--gemm-precision"),
    # a bad model file
    ("evaluate-bad-model-file", ["evaluate", "1f1b", *S4, "--system", "dgx_h100_ib", "--model",
                                 "{d}/model_zero_layers.toml"], "num_layers"),
]
CASES += [c for c in MAIN_CASES if c[0] not in {x[0] for x in CASES}]

# issue 29: huge numbers, unsafe outputs, checked inputs, sweeps, options that change nothing
BIG = str(2**40)
ISSUE29 = [
    # size guards before work, on every command (each hung, overflowed or ran past a minute)
    ("evaluate-dp-huge", ["evaluate", "1f1b", *S4, *SYS, "--dp", BIG], "dp"),
    ("evaluate-tp-huge", ["evaluate", "1f1b", *S4, *SYS, "--tp", BIG], "tp"),
    ("evaluate-gpus-too-many", ["evaluate", "1f1b", *S4, *SYS, "--tp", "1024", "--dp", "1024"], "GPUs"),
    ("evaluate-microbatch-size-huge", ["evaluate", "1f1b", *S4, *SYS, "--microbatch-size", BIG], "microbatch size"),
    ("evaluate-seq-huge", ["evaluate", "1f1b", *S4, *SYS, "--seq", BIG], "sequence length"),
    ("evaluate-global-batch-huge", ["evaluate", "1f1b", *S4, *SYS, "--global-batch", BIG], "global batch"),
    ("evaluate-slots-huge", ["evaluate", "1f1b", *S4, "--forward-slots", str(2**62)], "forward slots"),
    ("table-slots-huge", ["table", "1f1b", *S4, "--backward-slots", str(2**62)], "backward slots"),
    ("view-chunks-huge", ["view", "interleaved", *S4, "--chunks", str(2**20)], "chunks"),
    ("search-stages-huge", ["search", "-S", "100000", "-B", "8"], "stages"),
    ("search-microbatches-huge", ["search", "-S", "4", "-B", "1000000000"], "ops"),
    ("search-chunks-huge", ["search", *S4, "--placement", "interleaved", "--chunks", str(2**20)], "--chunks"),
    ("search-waves-huge", ["search", *S4, "--placement", "wave", "--waves", str(2**20)], "--waves"),
    ("search-devices-huge", ["search", *S4, "--placement", "free", "--devices", BIG], "stages"),
    ("bound-dp-huge", ["bound", *S4, *SYS, "--dp", BIG], "dp"),
    ("search-memory-cap-overflow", ["search", *S4, *SYS, "--memory-cap", "1e400"], "--memory-cap"),
    ("bound-memory-cap-huge", ["bound", *S4, *SYS, "--memory-cap", "1e30"], "--memory-cap"),
    ("search-tick-inf", ["search", *S4, *SYS, "--tick", "inf"], "--tick"),
    ("search-tick-tiny", ["search", *S4, *SYS, "--tick", "1e-15"], "--tick"),
    ("bound-tick-too-fine", ["bound", *S4, *SYS, "--model", "paper_gpt", "--tick", "1e-11"], "ticks"),
    ("evaluate-cpsat-tick-too-fine", ["evaluate", "1f1b", *S4, *SYS, *CP, "--tick", "1e-12"], "ticks"),
    ("plan-nodes-huge", [*PLAN[:3], "--nodes", BIG, *PLAN[5:]], "nodes"),
    ("plan-gpus-per-node-huge", [*PLAN[:5], "--gpus-per-node", BIG, *PLAN[7:]], "gpus per node"),
    ("plan-gpus-too-many", [*PLAN[:3], "--nodes", "100000", "--gpus-per-node", "1000", *PLAN[7:]], "GPUs"),
    ("plan-top-huge", [*PLAN, "--top", BIG], "top"),
    ("plan-cpsat-shapes-huge", [*PLAN, "--cpsat-shapes", BIG], "cpsat shapes"),
    ("plan-microbatch-sizes-huge", [*PLAN, "--microbatch-sizes", f"1,{BIG}"], "microbatch sizes"),
    ("search-profile-span", ["search", *S4, "--profile", "{d}/prof_span.toml"], "span"),
    ("evaluate-profile-peak-inf", ["evaluate", "1f1b", *S4, "--profile", "{d}/prof_peak_inf.toml"], "peak_flops"),
    # outputs: FIFOs, folders, planted links (never followed), a full disk
    ("view-output-fifo", ["view", "1f1b", *S4, "-o", "{d}/fifo.html"], "not a regular file"),
    ("view-output-link", ["view", "1f1b", *S4, "-o", "{d}/link.html"], "symbolic link"),
    ("evaluate-plot-fifo", ["evaluate", "1f1b", *S4, *SYS, "--plot", "{d}/fifo.png"], "not a regular file"),
    ("evaluate-plot-link", ["evaluate", "1f1b", *S4, *SYS, "--plot", "{d}/link.png"], "symbolic link"),
    ("evaluate-trace-fifo", ["evaluate", "1f1b", *S4, *SYS, "--trace", "{d}/fifo.json"], "not a regular file"),
    ("evaluate-trace-link", ["evaluate", "1f1b", *S4, *SYS, "--trace", "{d}/link.json"], "symbolic link"),
    ("table-plot-fifo", ["table", "1f1b", *S4, "--plot", "{d}/fifo.png"], "not a regular file"),
    ("plan-plot-fifo", [*PLAN, "--plot", "{d}/fifo.png"], "not a regular file"),
    ("plan-plot-link", [*PLAN, "--plot", "{d}/link.png"], "symbolic link"),
    ("plan-html-fifo", [*PLAN, "--html", "{d}/fifo.html"], "not a regular file"),
    ("plan-html-link", [*PLAN, "--html", "{d}/link.html"], "symbolic link"),
    ("plan-html-folder", [*PLAN, "--html", "{d}/folder.html"], "folder"),
    ("plan-html-suffix", [*PLAN, "--html", "{d}/p.txt"], "--html"),
    ("plan-html-device", [*PLAN, "--html", "/dev/full"], "--html"),
    ("calibrate-out-fifo", ["calibrate", "{d}/prof_ok.toml", *CAL, "--out", "{d}/fifo.toml"], "not a regular file"),
    ("calibrate-out-link", ["calibrate", "{d}/prof_ok.toml", *CAL, "--out", "{d}/link.toml"], "symbolic link"),
    ("sweep-export-fifo", ["sweep", "{d}/sweep_ok.toml", "--export", "{d}/fifo.csv"], "not a regular file"),
    ("sweep-export-link", ["sweep", "{d}/sweep_ok.toml", "--export", "{d}/link.csv"], "symbolic link"),
    ("sweep-export-folder", ["sweep", "{d}/sweep_ok.toml", "--export", "{d}/folder.csv"], "folder"),
    ("sweep-db-link", ["sweep", "{d}/sweep_ok.toml", "--db", "{d}/link.sqlite"], "symbolic link"),
    # sweeps: a name escaping results/, control characters, a grid of billions, failed rows
    ("sweep-name-escapes", ["sweep", "{d}/sweep_escape.toml"], "plain file name"),
    ("sweep-name-control", ["sweep", "{d}/sweep_control.toml"], "plain file name"),
    ("sweep-grid-billions", ["sweep", "{d}/sweep_billions.toml"], "configurations"),
    ("sweep-profile-other-stages", ["sweep", "{d}/sweep_profile_stages.toml", "--db", "{d}/ps.sqlite", "--quiet"],
     "describes 4 pipeline devices"),
    # checked inputs: a profile of another model, sequence or GPU; impossible speeds
    ("plan-profile-other-model", [*PLAN[:1], "--model", "llama3_8b", *PLAN[3:], "--profile", "{d}/prof_recorded.toml"],
     "'tiny_gpt'"),
    ("plan-profile-other-seq", [*PLAN, "--seq", "256", "--profile", "{d}/prof_recorded.toml"], "128 tokens"),
    ("plan-profile-other-gpu", [*PLAN, "--gpu", "A100", "--profile", "{d}/prof_recorded.toml"], "989 TFLOP/s"),
    ("evaluate-profile-model-recorded", ["evaluate", "1f1b", *S4, "--profile", "{d}/prof_recorded.toml", "--model",
                                         "llama3_8b"], "'tiny_gpt'"),
    ("evaluate-profile-too-fast", ["evaluate", "1f1b", *S4, "--profile", "{d}/prof_too_fast.toml"], "faster than"),
    ("bound-profile-too-fast", ["bound", *S4, "--profile", "{d}/prof_too_fast.toml"], "faster than"),
    ("calibrate-profile-too-fast", ["calibrate", "{d}/prof_too_fast.toml", "--model", "llama3_8b", "--system",
                                    "dgx_h100_ib"], "faster than"),
    ("calibrate-layers-beyond-model", ["calibrate", "{d}/prof_layers_many.toml", *CAL], "more than the 16"),
    # options that change nothing, problems with no answer but an immediate one
    ("evaluate-selective-flash", ["evaluate", "1f1b", *S4, *LLAMA, "--recompute", "selective"], "changes nothing"),
    ("plan-selective-flash", [*PLAN[:1], "--model", "llama3_8b", *PLAN[3:], "--recompute", "selective"],
     "changes nothing"),
    ("search-persistent-beyond-gpu", ["search", *S4, "--placement", "bidirectional", "--partition", "free",
                                      "--system", "fast_nw_mid_cp", "--model", "paper_gpt"], "no schedule fits"),
    ("evaluate-torch-csv-two-pipelines", ["evaluate", "chimera", *S4, "--format", "torch-csv"], "one pipeline"),
    ("evaluate-torch-csv-solver", ["evaluate", "1f1b", *S4, "--format", "torch-csv", *CP], "--solver"),
]
CASES += ISSUE29


@pytest.fixture
def alarm():
    """Fail a case that runs longer than ``HANG_S`` instead of hanging the suite."""

    def hung(*_):
        raise TimeoutError(f"the case ran for more than {HANG_S} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_every_command_is_known_before_parsing():
    """``main`` names the command in errors argparse raises before it knows it."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(COMMANDS) == set(sub.choices)


def test_the_corpus_is_large_and_ids_unique():
    assert len(CASES) >= 200 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_line(argv, fragment, files, capsys, alarm, monkeypatch):
    monkeypatch.chdir(files)  # nothing a case writes lands in the working tree
    argv = [a.replace("{d}", str(files)) for a in argv]
    fragment = fragment.replace("{d}", str(files))
    code = main(argv)
    _out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code}; stderr: {err!r}"
    assert len(lines) == 1, f"stderr must be one line, got {err!r}"
    assert "Traceback" not in err and fragment in lines[0], lines[0]
    command = argv[0] if argv and not argv[0].startswith("-") and argv[0] in COMMANDS else None
    assert lines[0].startswith(f"pipetab {command}: error: " if command else "pipetab: error: "), lines[0]


@pytest.mark.parametrize("argv", [["schedules"], ["table", "1f1b", "-S", "4", "-B", "8"], ["models"], ["systems"],
                                  ["evaluate", "1f1b", "-S", "4", "-B", "8"], ["check", "README.md"],
                                  ["schedules", "--format", "json"],
                                  ["plan", "--model", "tiny_gpt", "--nodes", "1", "--gpus-per-node", "2",
                                   "--global-batch", "4", "--quiet"]])
def test_a_closed_stdout_is_one_line(argv):
    proc = subprocess.run([sys.executable, "-m", "pipetab.cli", *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=60, pass_fds=(),
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"pipetab {argv[0]}: error: standard output is closed, so nothing could be printed; "
        "redirect it to a file or /dev/null"]


def test_a_broken_pipe_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "pipetab.cli", "table", "1f1b", "-S", "8", "-B", "4000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100)  # the reader wants no more
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and err == ""


def test_a_planted_link_is_not_followed(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    before = (files / "victim.txt").read_text()
    for argv in (["view", "1f1b", *S4, "-o", "link.html"], ["evaluate", "1f1b", *S4, *SYS, "--trace", "link.json"]):
        assert main(argv) == 2
    capsys.readouterr()
    assert (files / "victim.txt").read_text() == before and (files / "link.html").is_symlink()


def test_a_full_disk_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    """The page is written to a temporary file beside the target, renamed only when
    complete: a write failing half-way (ENOSPC) leaves the old file and nothing else."""
    import errno

    from pipetab.view import plan_page  # noqa: F401 (the module whose writer fails below)

    target = tmp_path / "v.html"
    target.write_text("the old page\n")

    def half_then_full(self, text, *a, **kw):
        with open(self, "w") as fh:
            fh.write(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("pathlib.Path.write_text", half_then_full)
    code = main(["view", "1f1b", *S4, "-o", str(target)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"pipetab view: error: --output {str(target)!r} cannot be written: "
                                 "No space left on device"]
    assert target.read_text() == "the old page\n" and sorted(p.name for p in tmp_path.iterdir()) == ["v.html"]


def test_control_characters_from_files_are_shown_escaped(tmp_path, capsys):
    model = tmp_path / "evil.toml"
    model.write_text(FILES_MODEL_EVIL)
    assert main(["models", str(model)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2J" in out
    bad = tmp_path / "bad.toml"
    bad.write_text(FILES_MODEL_EVIL + "colour = 1\n")
    assert main(["models", str(bad)]) == 2
    assert "\x1b" not in capsys.readouterr().err


FILES_MODEL_EVIL = MODEL.replace('summary = "test model"', 'summary = "clear \\u001b[2J the screen"')


def test_stdout_on_a_full_disk_is_one_line():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "pipetab.cli", "table", "1f1b", "-S", "4", "-B", "64"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "pipetab table: error: cannot write the output: No space left on device"]


def test_bidi_override_in_a_model_path_is_escaped(tmp_path, capsys):
    """A model's path with U+202E (and an ESC) reaches the terminal escaped in the models table."""
    folder = tmp_path / "ev\u202eil\x1b[2J"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text((Path(__file__).parents[1] / "data" / "hf" / "llama-3.1-8b.json").read_text())
    assert main(["models", str(config)]) in (0, None)
    out = capsys.readouterr().out
    assert "\u202e" not in out and "\x1b" not in out and "ev\\u202eil" in out


@pytest.mark.parametrize("key, value", [("num_hidden_layers", 2**70), ("num_local_experts", 2**40),
                                        ("vocab_size", 10**40)])
def test_config_json_sizes_refused_by_every_command(tmp_path, capsys, key, value):
    """An absurd size in a config.json: exit 2, one line naming the file and the key, at
    once (it had hung plan or printed 10^34 B parameters with exit 0)."""
    doc = json.loads((Path(__file__).parents[1] / "data" / "hf" / "mixtral-8x7b.json").read_text())
    doc[key] = value
    config = tmp_path / "config.json"
    config.write_text(json.dumps(doc))
    for argv in (["models", str(config)],
                 ["plan", "--model", str(config), "--nodes", "1", "--gpus-per-node", "8", "--gpu", "H100",
                  "--global-batch", "64"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"key '{key}' must be an integer from 1 to" in err[0] and "config.json" in err[0]
