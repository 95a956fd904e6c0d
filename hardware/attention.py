"""Fused attention kernels as measured: forward and backward rates by backend, head
dimensions, mask and sequence length (issue 41, item 1).

A table maps ``(d_qk, d_v, causal)`` to a curve of ``(sequence length, forward TFLOP/s,
backward TFLOP/s)``: the rate of one fused kernel over ``QK^T`` and ``PV`` counted as
``hardware.layer.attention_core_flops`` does (``2 s^2 (d_qk + d_v)`` per head, halved
under the causal mask; the backward ``2.5 x`` the forward's FLOPs), the convention of
``experiments/device_kernels.py``. Tables (written by ``experiments/calibrate_presets.py``;
its docstring gives each one's source and ``tests/experiments`` checks they are its output):

* ``hopper_cudnn`` — cuDNN's fused attention (what Transformer Engine runs on Hopper),
  measured on an H200 (``experiments/measured/h200_2026-11-28/attention.csv``), MLA's
  192/128 heads included;
* ``hopper_fa2`` — FlashAttention-2 (torch's built-in kernel), the same run; no kernel for
  head dimension 192 there (the rows say so), so MLA reads the 128 curve;
* ``hopper_fa3`` — FlashAttention-3: its published forward (head dimension 128, full mask)
  shaped by cuDNN's measured curves [I];
* ``ampere_fa2`` — FlashAttention-2 on an A100: the H200 curves scaled to the
  FlashAttention-2 paper's best A100 forward [I].

Lookup: the exact ``(d_qk, d_v, causal)`` curve; else the same head dimensions under the
other mask; else linear in the head dimension between the table's square heads (64, 128),
the nearest beyond them. Along a curve: linear in ``log2`` of the length, flat beyond its
ends. The length is the queries a kernel runs over (``s/cp`` under context parallelism:
ring attention's blocks are ``s/cp`` long).

Sliding-window attention would reach a kernel as fewer FLOPs at the window's length;
pipetab's models have no window field yet, so none is priced.
"""

from __future__ import annotations

import itertools
import math

Curve = tuple[tuple[int, float, float], ...]
"""(sequence length, forward TFLOP/s, backward TFLOP/s), ascending lengths."""

TABLES: dict[str, dict[tuple[int, int, bool], Curve]] = {
    "hopper_fa2": {
        (64, 64, False): (
            (1024, 292.6, 198.7), (2048, 306.2, 237.2), (4096, 309.0, 264.2), (8192, 310.6, 280.4),
            (16384, 312.6, 290.3),
        ),
        (64, 64, True): (
            (1024, 210.8, 139.1), (2048, 272.6, 185.7), (4096, 291.9, 222.9), (8192, 301.4, 250.1),
            (16384, 308.2, 268.2), (32768, 308.6, 280.1), (65536, 312.0, 283.9),
        ),
        (128, 128, False): (
            (1024, 346.8, 215.5), (2048, 355.4, 257.5), (4096, 346.7, 289.5), (8192, 349.9, 304.5),
            (16384, 347.5, 312.5),
        ),
        (128, 128, True): (
            (1024, 271.6, 153.5), (2048, 312.1, 207.6), (4096, 332.3, 253.3), (8192, 332.2, 288.3),
            (16384, 340.8, 305.4), (32768, 344.4, 316.8), (65536, 344.0, 321.1),
        ),
    },
    "hopper_cudnn": {
        (64, 64, False): (
            (1024, 440.6, 331.4), (2048, 467.0, 402.6), (4096, 480.7, 429.9), (8192, 489.4, 435.7),
            (16384, 471.6, 443.0),
        ),
        (64, 64, True): (
            (1024, 342.6, 217.8), (2048, 401.7, 300.2), (4096, 441.9, 368.0), (8192, 456.4, 399.3),
            (16384, 472.1, 421.2), (32768, 460.6, 415.7), (65536, 458.5, 422.0),
        ),
        (128, 128, False): (
            (1024, 638.8, 402.8), (2048, 665.4, 474.9), (4096, 672.5, 497.8), (8192, 639.4, 518.6),
            (16384, 614.7, 538.4),
        ),
        (128, 128, True): (
            (1024, 480.1, 280.0), (2048, 562.5, 385.6), (4096, 620.1, 461.0), (8192, 637.8, 478.8),
            (16384, 615.9, 511.3), (32768, 605.0, 527.5), (65536, 603.7, 525.4),
        ),
        (192, 128, True): (
            (1024, 463.7, 237.1), (2048, 537.5, 329.2), (4096, 590.1, 397.9), (8192, 627.5, 426.6),
        ),
    },
    "hopper_fa3": {
        (64, 64, False): (
            (1024, 356.7, 268.3), (2048, 396.9, 342.2), (4096, 421.9, 377.3), (8192, 470.1, 418.6),
            (16384, 476.2, 447.3),
        ),
        (64, 64, True): (
            (1024, 277.3, 176.3), (2048, 341.4, 255.1), (4096, 387.8, 323.0), (8192, 438.4, 383.6),
            (16384, 476.7, 425.3), (32768, 465.1, 419.8), (65536, 463.0, 426.1),
        ),
        (128, 128, False): (
            (1024, 517.1, 326.1), (2048, 565.5, 403.6), (4096, 590.2, 436.9), (8192, 614.2, 498.2),
            (16384, 620.7, 543.7),
        ),
        (128, 128, True): (
            (1024, 388.6, 226.7), (2048, 478.1, 327.7), (4096, 544.2, 404.6), (8192, 612.7, 460.0),
            (16384, 621.9, 516.3), (32768, 610.9, 532.7), (65536, 609.6, 530.6),
        ),
        (192, 128, True): (
            (1024, 375.4, 191.9), (2048, 456.8, 279.8), (4096, 517.9, 349.2), (8192, 602.8, 409.8),
        ),
    },
    "ampere_fa2": {
        (64, 64, False): (
            (1024, 187.5, 127.3), (2048, 196.2, 152.0), (4096, 198.0, 169.3), (8192, 199.0, 179.7),
            (16384, 200.3, 186.0),
        ),
        (64, 64, True): (
            (1024, 135.1, 89.1), (2048, 174.7, 119.0), (4096, 187.1, 142.8), (8192, 193.2, 160.3),
            (16384, 197.5, 171.9), (32768, 197.8, 179.5), (65536, 199.9, 181.9),
        ),
        (128, 128, False): (
            (1024, 222.2, 138.1), (2048, 227.8, 165.0), (4096, 222.2, 185.5), (8192, 224.2, 195.1),
            (16384, 222.7, 200.3),
        ),
        (128, 128, True): (
            (1024, 174.1, 98.4), (2048, 200.0, 133.0), (4096, 213.0, 162.3), (8192, 212.9, 184.8),
            (16384, 218.4, 195.7), (32768, 220.7, 203.0), (65536, 220.5, 205.8),
        ),
    },
}
"""[M]/[I] Every backend's curves (module docstring; output of experiments/calibrate_presets.py)."""

BACKENDS = tuple(TABLES)


def check_backend(name: str) -> str:
    """``name`` when it is a table of ``TABLES`` ("" too: no table, a flat efficiency)."""
    if name and name not in TABLES:
        raise ValueError(f"attention_backend must be one of {', '.join(BACKENDS)} (or empty), got {name!r}")
    return name


def interp_log2(points: list[tuple[int, float]], seq: float) -> float:
    """Linear in ``log2(seq)`` between ``(length, value)`` points, flat beyond them."""
    if seq <= points[0][0]:
        return points[0][1]
    for (s0, r0), (s1, r1) in itertools.pairwise(points):
        if seq <= s1:
            x = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return r0 + x * (r1 - r0)
    return points[-1][1]


def _curve_rate(curve: Curve, seq: float, backward: bool) -> float:
    return interp_log2([(s, b if backward else f) for s, f, b in curve], seq)


def attention_rate(backend: str, d_qk: int, d_v: int, causal: bool, seq: float, backward: bool) -> float:
    """FLOP/s of ``backend``'s forward (or backward) kernel at this shape (module docstring)."""
    curves = TABLES[check_backend(backend)]
    for key in ((d_qk, d_v, causal), (d_qk, d_v, not causal)):
        if key in curves:
            return 1e12 * _curve_rate(curves[key], seq, backward)
    square = sorted(d for d, v, c in curves if d == v and c == causal)
    width = (d_qk + d_v) / 2
    lo = max([d for d in square if d <= width], default=square[0])
    hi = min([d for d in square if d >= width], default=square[-1])
    r_lo = _curve_rate(curves[(lo, lo, causal)], seq, backward)
    if hi == lo:
        return 1e12 * r_lo
    r_hi = _curve_rate(curves[(hi, hi, causal)], seq, backward)
    return 1e12 * (r_lo + (width - lo) / (hi - lo) * (r_hi - r_lo))
