"""Every fitted kernel constant of the presets, from the named development set (issue 41).

The development set of the kernel model is the GPU measurements in ``experiments/measured/``
(``h200_2026-11-28``: one H200, the H100's chip and rates; ``README.md`` there) and the
published kernel benchmarks cited below. Nothing here reads a cluster run: kernel efficiency
comes from kernels, run overhead is a term of its own (``hardware.overheads``).

What it produces (``python -m experiments.calibrate_presets``; the presets and
``hardware.attention`` say which of these produced each value, and
``tests/experiments/test_calibrate_presets.py`` runs it and compares exactly):

* **Attention kernels** (``hardware.attention.TABLES``): forward and backward TFLOP/s of each
  backend by head dimensions, mask and sequence length. ``hopper_fa2`` and ``hopper_cudnn``
  are the H200 rows of ``attention.csv`` as measured (rounded to 0.1 TFLOP/s).
  ``hopper_fa3``: FlashAttention-3's forward, head dimension 128, full mask, as published
  in pytorch/benchmark PR 2391 (H100, FA3 beside Triton's FA2; ``FA3_FORWARD_128``); every
  other FA3 case [I] scales that curve by cuDNN's measured rate for the case over cuDNN's
  forward, head dimension 128, full mask, at the same length (both are Hopper-native
  warp-specialised kernels). ``ampere_fa2``: [I] the H200's measured FlashAttention-2
  curves scaled so that the best forward (head dimension 128, full mask, longest sequence)
  reaches 73 % of the A100's 312 TFLOP/s, the top of the FlashAttention-2 paper's "50-73 %
  of the theoretical maximum FLOPs/s on A100" (Dao 2023, abstract).
* **GEMM kernel efficiency** per GPU (``compute_efficiency``, ``fp8_compute_efficiency``
  of the Hopper presets): the tile efficiency at which ``hardware.kernels.gemm_time``
  reproduces the measured GEMMs of ``gemms.csv`` (real layers in every direction and the
  size sweep; 60 bf16, 60 fp8): the median of ``a_i / (T_i - launch)``, ``a_i`` the
  model's compute seconds at efficiency 1 and ``T_i`` the measured time. The median, not
  a least-squares mean: the tile model overprices the 256-row expert GEMMs (cuBLAS picks
  smaller tiles there) by up to 3x, and a mean would let them pull every other GEMM.
* **Kernel launch** (``compute_latency_s``): ``launch.csv``'s CUDA-graph replay of a small
  kernel, the GPU-side cost of a kernel once the CPU keeps ahead (the eager launch, 8.4 us
  per kernel there, is the CPU's rate and hides under GPU-bound work).
* **Run overhead** (``run_overhead`` of ``dgx_h100_ib``; ``hardware.overheads``): the one
  term fitted to a cluster run — the stretch of its ops' kernel time Llama 3 405B's 8,192-GPU run
  (430 TFLOP/s per GPU, Dubey et al. 2024, Table 4) loses beyond its kernels and messages
  as modelled, the kernels at the values above. ``h800_ib`` has no run to fit and none.
* ``a100_cluster``'s ``p2p_efficiency``: the share of NVLink a pipeline message reaches,
  from the Zero Bubble paper's measured message times (T_comm, Table 6) inside one node
  (``a100_p2p_efficiency``); no other source measures it, so the fold without Zero Bubble
  keeps the link's bandwidth (1). The Hopper presets keep 1: no message time of theirs is
  in the development set.
* ``a100_cluster``'s ``run_overhead`` (``a100_run_overhead``): the stretch of every op's
  kernel seconds at which the Zero Bubble paper's 1F1B step of its calibration setting
  (6.2B, p = 8, m = 24, Table 4) is priced as measured; its op times (Table 6) were timed
  alone, so they fit the kernels and this the run. Without Zero Bubble: Korthikanti et
  al.'s one-node 22B iteration with full recomputation (Table 5).
* ``a100_cluster``'s ``compute_efficiency`` and ``mem_efficiency``: ``pipetab calibrate``
  of the Zero Bubble paper's 6.2B profile (Table 6, p = 8, m = 24; A100 op times); the
  Hopper presets' ``mem_efficiency`` is the same value (no Hopper memory-bound kernel is
  fitted: the H200's HBM is faster than the H100's).

**Leave one source out** (``preset_values(without=study)``, ``experiments.fidelity_band``):
every value above refitted without one study of ``bench_fidelity``. A constant whose source
is left out is fitted to the development set's next source of the same kind instead: the
A100 efficiencies to Korthikanti et al.'s ten per-layer times of the 22B model (Table 4, one
layer, TP 8, with and without sequence parallelism and recomputation; the same least squares
as ``pipetab calibrate``, ``hardware.calibrate.fit_kernel_ops``), the H100 run overhead to
Mixtral 8x7B on 64 H100s (468 TFLOP/s per GPU, the Megatron-LM MoE README run of
``docs/moe.md``, priced as ``experiments.bench_moe`` prices it). The GPU measurements are
no study's cells and stay in every fold.
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from pipetab.hardware.attention import interp_log2

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "experiments" / "measured" / "h200_2026-11-28"
RUN = "python -m experiments.calibrate_presets (experiments/measured/h200_2026-11-28)"

FA3_FORWARD_128 = ((512, 430.32), (1024, 517.099), (2048, 565.544), (4096, 590.233), (8192, 614.234),
                   (16384, 620.73))
"""[P] FlashAttention-3 forward TFLOP/s on an H100, head dimension 128, 16 heads, batch x
length 16k, full mask: pytorch/benchmark PR 2391 (commit ff65cb6, its test plan's table)."""

A100_PEAK_TFLOPS = 312.0
FA2_A100_BEST = 0.73
"""[P] FlashAttention-2 reaches "50-73 % of the theoretical maximum FLOPs/s on A100"
(Dao 2023, arXiv 2307.08691, abstract): the top of the range is its best forward."""

Curve = tuple[tuple[int, float, float], ...]  # (sequence length, forward, backward TFLOP/s)


def _r(x: float) -> float:
    return round(x, 1)


def measured_attention(backend: str) -> dict[tuple[int, int, bool], Curve]:
    """``attention.csv``'s rows of ``backend`` (flash or cudnn) as curves by (d_qk, d_v, causal)."""
    out: dict[tuple[int, int, bool], list[tuple[int, float, float]]] = {}
    with (H200 / "attention.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["backend"] != backend or row["error"]:
                continue
            key = (int(row["head_dim"]), int(row["v_head_dim"]), row["causal"] == "True")
            out.setdefault(key, []).append((int(row["seq"]), _r(float(row["forward_tflops"])),
                                            _r(float(row["backward_tflops"]))))
    return {k: tuple(sorted(v)) for k, v in sorted(out.items())}


def fa3_attention(cudnn: dict[tuple[int, int, bool], Curve]) -> dict[tuple[int, int, bool], Curve]:
    """FlashAttention-3 (module docstring): the published forward scaled by cuDNN's shape."""
    fa3 = list(FA3_FORWARD_128)
    base = [(s, f) for s, f, _ in cudnn[(128, 128, False)]]
    out = {}
    for key, curve in cudnn.items():
        scale = [interp_log2(fa3, s) / interp_log2(base, s) for s, _, _ in curve]
        out[key] = tuple((s, _r(f * x), _r(b * x)) for (s, f, b), x in zip(curve, scale))
    return out


def a100_fa2_attention(flash: dict[tuple[int, int, bool], Curve]) -> dict[tuple[int, int, bool], Curve]:
    """FlashAttention-2 on an A100 (module docstring): the H200 curves scaled to the paper's best."""
    best = max(f for f_curve in flash.values() for _, f, _ in f_curve)
    scale = FA2_A100_BEST * A100_PEAK_TFLOPS / best
    return {key: tuple((s, _r(f * scale), _r(b * scale)) for s, f, b in curve) for key, curve in flash.items()}


def attention_tables() -> dict[str, dict[tuple[int, int, bool], Curve]]:
    """Every attention table of ``hardware.attention.TABLES`` (module docstring)."""
    flash, cudnn = measured_attention("flash"), measured_attention("cudnn")
    return {"hopper_fa2": flash, "hopper_cudnn": cudnn, "hopper_fa3": fa3_attention(cudnn),
            "ampere_fa2": a100_fa2_attention(flash)}


def launch_s() -> float:
    """``launch.csv``'s CUDA-graph replay per kernel (seconds, 3 significant digits)."""
    with (H200 / "launch.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["what"].startswith("CUDA graph"))
    return float(f"{float(row['per_kernel_s']):.3g}")


def gemm_rows(precision: str) -> list[tuple[float, float, float, float]]:
    """``gemms.csv``'s GEMMs in ``precision`` (every direction, the sweep too): (m, k, n, seconds)."""
    with (H200 / "gemms.csv").open() as fh:
        return [(float(r["m"]), float(r["k"]), float(r["n"]), float(r["time_s"])) for r in csv.DictReader(fh)
                if r["precision"] == precision and r["direction"] != "cast"]


def gemm_efficiency(fp8: bool, launch: float) -> float:
    """The tile efficiency at which ``gemm_time`` reproduces the measured GEMMs (module
    docstring): the median over them of ``a_i / (T_i - launch)``, 3 decimals."""
    from pipetab.hardware.kernels import gemm_terms
    from pipetab.hardware.loaders import load_system

    device = load_system("dgx_h100_ib").device
    rows = gemm_rows("fp8" if fp8 else "bf16")
    ratios = [gemm_terms(device, m, k, n, fp8=fp8)[0] / (t - launch) for m, k, n, t in rows]
    return round(statistics.median(ratios), 3)


def a100_efficiencies() -> tuple[float, float]:
    """``a100_cluster``'s GEMM and memory-bound efficiencies: ``pipetab calibrate`` of the
    Zero Bubble paper's 6.2B profile (Table 6, p = 8, m = 24), 3 decimals."""
    from pipetab.hardware.calibrate import calibrate
    from pipetab.hardware.loaders import load_model, load_system
    from pipetab.hardware.profile import load_profile

    profile = load_profile(ROOT / "experiments" / "profiles" / "zb_6p2b_p8_m24.toml")
    fit = calibrate(profile, load_model("zb_6p2b"), load_system("a100_cluster")).system.device
    return round(fit.compute_efficiency, 3), round(fit.mem_efficiency, 3)


def a100_p2p_efficiency() -> float:
    """``a100_cluster``'s ``p2p_efficiency``: the share of NVLink's bandwidth a pipeline
    message reaches, from the Zero Bubble paper's measured T_comm (Table 6) of the runs
    inside one node (p = 8: the 1.5B and 6.2B models, three m each): the median over them
    of ``bytes / (T_comm - latency)`` over the link's bandwidth, 3 decimals; ``bytes`` is the
    activation an interior stage sends (``stage_cost``)."""
    from pipetab.hardware import Context, load_model
    from pipetab.hardware.costs import stage_cost
    from pipetab.hardware.loaders import load_system

    from .bench_fidelity import ZB_PRESET
    from .zero_bubble_data import MODELS, PROFILES

    a100 = load_system("a100_cluster")
    link, rates = a100.intra_node_link, []
    assert link is not None and a100.devices_per_node == 8
    for prof in PROFILES:
        spec = MODELS[prof.model]
        if spec.pipelines > a100.devices_per_node:
            continue  # hops between nodes too: not NVLink's rate alone
        ctx = Context(microbatch_size=spec.microbatch_size, seq_len=spec.sequence)
        cost = stage_cost(load_model(ZB_PRESET[prof.model]), a100.device, ctx, spec.chunks, first=False, last=False)
        rates.append(cost.fwd_message_bytes / (prof.t_comm / 1e3 - link.latency_s))
    return round(statistics.median(rates) / link.bandwidth, 3)


def a100_efficiencies_from_layers() -> tuple[float, float]:
    """``a100_cluster``'s GEMM and memory-bound efficiencies fitted to Korthikanti et al.'s
    per-layer forward and backward times of the 22B model (Table 4; module docstring), 3 decimals."""
    from pipetab.hardware import Context
    from pipetab.hardware.calibrate import fit_kernel_ops
    from pipetab.hardware.costs import stage_cost
    from pipetab.hardware.loaders import load_system
    from pipetab.hardware.parts import stage_parts
    from pipetab.schedules.ops import Kind

    from .bench_fidelity import _gpt
    from .fidelity_data import KORTHIKANTI, KORTHIKANTI_LAYER

    a100, r = load_system("a100_cluster"), KORTHIKANTI[0]
    model = _gpt(r.name, r.layers, r.hidden, r.heads, r.batch)
    ops = []
    for (sp, recompute), (f_ms, b_ms) in KORTHIKANTI_LAYER.items():
        ctx = Context(tp=8, sequence_parallel=sp, microbatch_size=r.microbatch, recompute=recompute, seq_len=2048)
        cost = stage_cost(model, a100.device, ctx, 1, first=False, last=False, tp_link=a100.intra_node_link)
        for kind, ms, comm in ((Kind.F, f_ms, cost.tp_comm_forward_s), (Kind.B, b_ms, cost.tp_comm_backward_s)):
            parts = stage_parts(model, ctx, 1, first=False, last=False, first_layer=0, kind=kind, split_backward=False)
            ops.append((kind.name, ms / 1e3, parts, comm))
    e_c, e_m, _, _ = fit_kernel_ops(ops, a100.device)
    return round(e_c, 3), round(e_m, 3)


def _bisect(tflops, target: float) -> float:
    """The run overhead in [0, 1] at which ``tflops(overhead)`` (falling with it) meets
    ``target``; bisection, 3 decimals."""
    low, high = 0.0, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if tflops(mid) > target else (low, mid)
    return round((low + high) / 2, 3)


def run_overhead_from_mixtral(kernel_values: dict[str, float]) -> float:
    """``dgx_h100_ib``'s run overhead fitted to Mixtral 8x7B on 64 H100s instead of Llama 3
    (468 TFLOP/s per GPU; module docstring), the kernels at ``kernel_values``."""
    from dataclasses import replace

    from pipetab.hardware.loaders import load_system

    from . import bench_moe

    run = next(p for p in bench_moe.PUBLISHED if p[0] == "mixtral-8x7b 64 H100")
    base = load_system("dgx_h100_ib")

    def tflops(x: float) -> float:
        device = replace(base.device, **kernel_values, run_overhead=x)
        return float(bench_moe.run_published(run, replace(base, device=device))["predicted_tflops"])

    return _bisect(tflops, run[12])


def run_overhead(kernel_values: dict[str, float]) -> float:
    """``dgx_h100_ib``'s run overhead: the stretch of every op's kernel seconds
    (``hardware.overheads``) at which Llama 3 405B on 8,192 H100s reaches the 430 TFLOP/s per GPU Meta measured
    (Dubey et al. 2024, Table 4; the cell of ``experiments/bench_fidelity.py``), the
    kernels at ``kernel_values``; bisection, 3 decimals."""
    from dataclasses import replace

    from pipetab.hardware.loaders import load_system

    from .bench_fidelity import llama3
    from .fidelity_data import LLAMA3

    base = load_system("dgx_h100_ib")

    def tflops(x: float) -> float:
        device = replace(base.device, **kernel_values, run_overhead=x)
        return float(llama3(replace(base, device=device))[0]["predicted"])

    return _bisect(tflops, next(r.tflops for r in LLAMA3 if r.gpus == 8192))


def a100_run_overhead(kernel_values: dict[str, float], without: str | None = None) -> float:
    """``a100_cluster``'s run overhead, the kernels at ``kernel_values``: the stretch of every
    op's kernel seconds at which the Zero Bubble paper's 1F1B step of the calibration setting
    (6.2B, p = 8, m = 24, Table 4: 24 x 3 / (3.50 x 8) = 2.571 s) is priced as measured.
    Its op times (Table 6) were timed alone, a ``torch.cuda.synchronize`` before and after
    each op (the authors' ``ScheduleTimers``, ``megatron/timers.py``); the step runs them
    back to back beside their messages, the scheduler's host work and the step's tail.
    Without Zero Bubble: the same stretch between Korthikanti et al.'s 22B per-layer times
    (Table 4, the kernels' source in that fold) and its one-node iteration time with full
    recomputation (Table 5, 1.42 s). Bisection, 3 decimals."""
    from dataclasses import replace

    from pipetab.hardware.loaders import load_system

    from .bench_fidelity import ZB_CALIBRATION, _korthikanti_step, _zb_run
    from .fidelity_data import KORTHIKANTI
    from .zero_bubble_data import MODELS, TABLE4_THROUGHPUT

    base = load_system("a100_cluster")

    def system(x: float):
        return replace(base, device=replace(base.device, **kernel_values, run_overhead=x))

    if without == "Zero Bubble":
        r = KORTHIKANTI[0]
        return _bisect(lambda x: 1.0 / _korthikanti_step(r, False, system(x))[0], 1.0 / r.full_s)
    key, m = ZB_CALIBRATION
    spec = MODELS[key]
    measured = m * spec.microbatch_size / (TABLE4_THROUGHPUT[(key, m)]["1F1B"] * spec.pipelines)
    return _bisect(lambda x: 1.0 / _zb_run(key, m, "1F1B", system(x))[0], 1.0 / measured)


def preset_values(without: str | None = None) -> dict[str, dict[str, float]]:
    """Every [F] value of the system presets, by preset and key (module docstring); with
    ``without`` (a study of ``bench_fidelity``), fitted without that study's cells."""
    launch = launch_s()
    a100_c, a100_m = a100_efficiencies_from_layers() if without == "Zero Bubble" else a100_efficiencies()
    hopper = {"compute_efficiency": gemm_efficiency(False, launch),
              "fp8_compute_efficiency": gemm_efficiency(True, launch), "compute_latency_s": launch,
              "mem_efficiency": a100_m}
    overhead = run_overhead_from_mixtral(hopper) if without == "Llama 3" else run_overhead(hopper)
    a100_p2p = 1.0 if without == "Zero Bubble" else a100_p2p_efficiency()  # no other source measures it
    a100 = {"compute_efficiency": a100_c, "mem_efficiency": a100_m, "p2p_efficiency": a100_p2p}
    return {"dgx_h100_ib": {**hopper, "run_overhead": overhead}, "h800_ib": dict(hopper),
            "a100_cluster": {**a100, "run_overhead": a100_run_overhead(a100, without)}}


def fitted_system(preset: str, values: dict[str, dict[str, float]]):
    """The system ``preset`` with its fitted device values replaced by ``values[preset]``."""
    from dataclasses import replace

    from pipetab.hardware.loaders import load_system

    system = load_system(preset)
    return replace(system, device=replace(system.device, **values.get(preset, {})))


def main(argv: list[str] | None = None) -> int:
    """Print every fitted value (the presets' [F] keys) and the attention tables' sizes."""
    del argv
    for preset, values in preset_values().items():
        for key, value in values.items():
            print(f"{preset}.device.{key} = {value!r}")
    for name, curves in attention_tables().items():
        print(f"attention {name}: {sum(len(c) for c in curves.values())} points over {len(curves)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
