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
  of the Hopper presets): the efficiency at which ``hardware.kernels.gemm_time`` reproduces
  the measured real-layer GEMMs of ``gemms.csv`` (every direction; the sweep rows too) in
  the least-squares sense of relative error: ``1/e = sum(a_i / T_i) / sum(a_i^2 / T_i^2)``
  with ``a_i`` the model's compute seconds at efficiency 1 and ``T_i`` the measured time
  less the launch term.
* **Kernel launch** (``compute_latency_s``): ``launch.csv``'s CUDA-graph replay of a small
  kernel, the GPU-side cost of a kernel once the CPU keeps ahead (the eager launch, 8.4 us
  per kernel there, is the CPU's rate and hides under GPU-bound work).
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

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


def _interp(points: list[tuple[int, float]], seq: float) -> float:
    """Linear in log2(length) between the points, flat beyond them."""
    if seq <= points[0][0]:
        return points[0][1]
    for (s0, r0), (s1, r1) in zip(points, points[1:]):
        if seq <= s1:
            x = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return r0 + x * (r1 - r0)
    return points[-1][1]


def fa3_attention(cudnn: dict[tuple[int, int, bool], Curve]) -> dict[tuple[int, int, bool], Curve]:
    """FlashAttention-3 (module docstring): the published forward scaled by cuDNN's shape."""
    fa3 = list(FA3_FORWARD_128)
    base = [(s, f) for s, f, _ in cudnn[(128, 128, False)]]
    out = {}
    for key, curve in cudnn.items():
        out[key] = tuple((s, _r(f * _interp(fa3, s) / _interp(base, s)), _r(b * _interp(fa3, s) / _interp(base, s)))
                         for s, f, b in curve)
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
