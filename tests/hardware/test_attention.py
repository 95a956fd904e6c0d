"""Fused attention kernels as measured (issue 41, item 1): each backend's times at measured
and published points, the backward/forward ratio within the measured range, lookup between
points, and the flat efficiency kept for devices without a backend."""

import csv
import math
from dataclasses import replace
from pathlib import Path

import pytest

from pipetab.hardware.attention import BACKENDS, TABLES, attention_rate
from pipetab.hardware.kernels import attention_time
from pipetab.hardware.system import Device

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "experiments" / "measured" / "h200_2026-11-28" / "attention.csv"

# an H100 (its chip is the H200's) without launch cost and with memory never the bound
H100 = Device(peak_flops=989e12, compute_efficiency=0.8, compute_latency_s=0.0, mem_bandwidth=1e16, mem_efficiency=1.0,
              mem_latency_s=0.0, memory_bytes=80e9, sm_count=132, attention_efficiency=0.6)


def _row(backend: str, head_dim: int, v_head_dim: int, seq: int, causal: bool) -> dict:
    with MEASURED.open() as fh:
        for row in csv.DictReader(fh):
            if (row["backend"], int(row["head_dim"]), int(row["v_head_dim"]), int(row["seq"]), row["causal"]) == \
                    (backend, head_dim, v_head_dim, seq, str(causal)):
                return row
    raise KeyError((backend, head_dim, seq, causal))


def _flops(row: dict) -> float:
    """``2 b a s^2 (d_qk + d_v)``, halved under the causal mask: the forward's FLOPs."""
    b, a, s = int(row["batch"]), int(row["heads"]), int(row["seq"])
    return 2 * b * a * s * s * (int(row["head_dim"]) + int(row["v_head_dim"])) * (0.5 if row["causal"] == "True" else 1)


@pytest.mark.parametrize("backend, table, shape", [
    ("cudnn", "hopper_cudnn", (128, 128, 8192, True)),    # Llama-style heads, 8k tokens
    ("cudnn", "hopper_cudnn", (192, 128, 4096, True)),    # MLA's heads (DeepSeek-V3)
    ("flash", "hopper_fa2", (64, 64, 2048, False)),
    ("flash", "hopper_fa2", (128, 128, 32768, True)),
])
def test_measured_kernel_times_at_measured_shapes(backend, table, shape):
    # the time pipetab gives the measured shape's FLOPs is the measured forward and backward time
    d, dv, seq, causal = shape
    row = _row(backend, d, dv, seq, causal)
    dev = replace(H100, attention_backend=table)
    fwd = attention_time(dev, _flops(row), 0.0, shape=(d, dv, causal, seq, False))
    bwd = attention_time(dev, 2.5 * _flops(row), 0.0, shape=(d, dv, causal, seq, True))
    # the tables keep 0.1 TFLOP/s: 0.05 % at the slowest rate
    assert fwd == pytest.approx(float(row["forward_s"]), rel=5e-4)
    assert bwd == pytest.approx(float(row["backward_s"]), rel=5e-4)


@pytest.mark.parametrize("seq, published", [(1024, 517.099), (4096, 590.233)])
def test_flash_attention_3_at_the_published_points(seq, published):
    # pytorch/benchmark PR 2391: FA3 forward on an H100, head dimension 128, 16 heads, b*s = 16k, full mask
    batch, heads, d = 16384 // seq, 16, 128
    flops = 2 * batch * heads * seq * seq * (d + d)
    dev = replace(H100, attention_backend="hopper_fa3")
    t = attention_time(dev, flops, 0.0, shape=(d, d, False, seq, False))
    assert t == pytest.approx(flops / (published * 1e12), rel=5e-4)


def test_flash_attention_2_on_an_a100_reaches_the_papers_best():
    # the best forward of the table (head dimension 128, full mask, 2k: the H200's best FA2 forward)
    # is 73 % of the A100's 312 TFLOP/s (Dao 2023); a causal 1k forward keeps the H200's
    # measured proportion to it, 271.6 / 355.4 TFLOP/s
    best = 0.73 * 312
    assert attention_rate("ampere_fa2", 128, 128, False, 2048, False) == pytest.approx(best * 1e12, rel=5e-4)
    assert attention_rate("ampere_fa2", 128, 128, True, 1024, False) == pytest.approx(
        best * 271.6 / 355.4 * 1e12, rel=5e-4)


def test_backward_over_forward_time_within_the_measured_range():
    # measured backward/forward time ratios of every backend and shape: 2.7x (cuDNN, full, long) to
    # 4.9x (cuDNN MLA 1k); FLOPs 2.5x, the rest the backward's lower rate
    with MEASURED.open() as fh:
        ratios = [float(r["backward_s"]) / float(r["forward_s"]) for r in csv.DictReader(fh) if r["forward_s"]]
    low, high = min(ratios), max(ratios)
    for name in BACKENDS:
        for (d, dv, causal), curve in TABLES[name].items():
            for seq, _, _ in curve:
                dev = replace(H100, attention_backend=name)
                ratio = attention_time(dev, 2.5, 0.0, shape=(d, dv, causal, seq, True)) / \
                    attention_time(dev, 1.0, 0.0, shape=(d, dv, causal, seq, False))
                assert low * 0.999 <= ratio <= high * 1.001, (name, d, causal, seq)
    # MLA at 4k on cuDNN: the measured 4.32 ms / 1.16 ms (the DeepSeek profile: 3.4x)
    row = _row("cudnn", 192, 128, 4096, True)
    dev = replace(H100, attention_backend="hopper_cudnn")
    r = attention_time(dev, 2.5, 0.0, shape=(192, 128, True, 4096, True)) / \
        attention_time(dev, 1.0, 0.0, shape=(192, 128, True, 4096, False))
    assert r == pytest.approx(float(row["backward_s"]) / float(row["forward_s"]), rel=1e-3)


def test_lookup_between_and_beyond_the_points():
    # 2^12.5 tokens: halfway (in log2) between the 4k and 8k rates; beyond 64k: the 64k rate
    mid = attention_rate("hopper_cudnn", 128, 128, True, 2 ** 12.5, False)
    assert mid == pytest.approx((620.1 + 637.8) / 2 * 1e12)
    assert attention_rate("hopper_cudnn", 128, 128, True, 1 << 20, False) == pytest.approx(603.7e12)
    assert attention_rate("hopper_cudnn", 128, 128, True, 256, False) == pytest.approx(480.1e12)
    # head dimension 96: halfway between the 64 and 128 curves
    assert attention_rate("hopper_cudnn", 96, 96, True, 4096, True) == pytest.approx((368.0 + 461.0) / 2 * 1e12)
    # MLA's full mask, not measured: its causal curve; FA2 has no 192 kernel: the 128 curve
    assert attention_rate("hopper_cudnn", 192, 128, False, 4096, False) == pytest.approx(590.1e12)
    assert attention_rate("hopper_fa2", 192, 128, True, 4096, False) == pytest.approx(332.3e12)


def test_without_a_backend_the_flat_efficiency_as_before():
    flops = 1e12
    assert attention_time(H100, flops, 0.0, shape=(128, 128, True, 4096, True)) == pytest.approx(
        flops / (989e12 * 0.6))
    assert math.isclose(attention_time(replace(H100, attention_efficiency=0.0), flops, 0.0), flops / (989e12 * 0.8))


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        replace(H100, attention_backend="fa4")
