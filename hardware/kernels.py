"""What one GPU kernel costs: the kernel model of a ``Device`` with ``sm_count > 0``.

**GEMM** ``C = A B`` of ``M x K`` by ``K x N`` (``batch`` of them: a batched GEMM): the
output is cut into ``tile_m x tile_n`` tiles, ``ceil(M/tile_m) * ceil(N/tile_n)`` per
matrix; the GPU's ``sm_count`` multiprocessors each compute one tile at a time, so the
tiles run in ``waves = ceil(tiles / sm_count)`` and every wave takes as long as a full
tile of the whole ``K``: ``2 * tile_m * tile_n * (K + TILE_EPILOGUE_K)`` FLOPs at a
multiprocessor's share of the peak, ``peak / sm_count``, times ``compute_efficiency``
(``fp8_compute_efficiency`` for fp8 GEMMs: what a tile's main loop reaches, fitted per GPU
type to measured GEMM kernels by ``experiments/calibrate_presets.py``). This is the *tile quantization* (a partial tile
costs a whole one) and *wave quantization* (a partial wave costs a whole one) of NVIDIA's
"Matrix Multiplication Background" user guide (Deep Learning Performance documentation):
a GEMM of one tile more than a full wave takes two waves. The memory side reads ``A`` and
``B`` and writes ``C`` once (``bytes_per_element`` each; fp8 operands 1 byte, output in
the compute precision); the kernel takes the longer of the two, plus its launch
(``compute_latency_s``).

**Fused attention** (one kernel; FlashAttention-2, Dao 2023): the forward's ``QK^T`` and
``PV`` FLOPs, half of them under the causal mask (blocks above the diagonal are skipped);
the backward runs 5 matmuls where the forward runs 2 (``2.5 x`` the FLOPs), ``QK^T``
recomputed among them. Their rate is the device's ``attention_backend`` kernel as
measured, by direction, head dimensions, mask and length (``hardware.attention``); a
device without one runs both at ``attention_efficiency`` of the peak.

**Memory-bound kernels** (norms, activation functions, softmax, dropout, residual adds,
rotary, cross-entropy, optimizer): their bytes read and written at ``mem_bandwidth *
mem_efficiency``, plus the launch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .attention import attention_rate

if TYPE_CHECKING:
    from .system import Device


TILE_EPILOGUE_K = 128
"""[I] A tile's fixed work (loading its first operands, writing its output) in steps of its
main loop over ``K``: a tile costs ``K + 128`` steps, so short-``K`` GEMMs run below peak."""

def gemm_tiles(device: Device, m: float, n: float, batch: int = 1) -> int:
    """Output tiles of a (batched) ``M x N`` GEMM: ``batch * ceil(M/tile_m) * ceil(N/tile_n)``."""
    return batch * math.ceil(m / device.tile_m) * math.ceil(n / device.tile_n)


def gemm_waves(device: Device, m: float, n: float, batch: int = 1) -> int:
    """Waves of tiles over the multiprocessors: ``ceil(tiles / sm_count)``."""
    return math.ceil(gemm_tiles(device, m, n, batch) / device.sm_count)


def gemm_efficiency(device: Device, m: float, n: float, batch: int = 1) -> float:
    """Useful share of the tiles' work: ``M*N*batch / (waves * sm_count * tile_m * tile_n)``
    (1 when the GEMM fills whole tiles and whole waves)."""
    capacity = gemm_waves(device, m, n, batch) * device.sm_count * device.tile_m * device.tile_n
    return batch * m * n / capacity


def gemm_terms(device: Device, m: float, k: float, n: float, *, batch: int = 1, fp8: bool = False,
               bytes_per_element: float = 2.0) -> tuple[float, float]:
    """(compute, memory) seconds of a GEMM at efficiency 1 (``compute_efficiency`` and
    ``mem_efficiency`` divide them; module docstring), launch not included."""
    per_sm = device.peak(fp8) / device.sm_count
    compute = gemm_waves(device, m, n, batch) * 2 * device.tile_m * device.tile_n * (k + TILE_EPILOGUE_K) / per_sm
    operand = 1.0 if fp8 else bytes_per_element
    traffic = batch * (operand * (m * k + k * n) + bytes_per_element * m * n)
    return compute, traffic / device.mem_bandwidth


def gemm_time(device: Device, m: float, k: float, n: float, *, batch: int = 1, fp8: bool = False,
              bytes_per_element: float = 2.0) -> float:
    """Seconds of a (batched) ``M x K`` by ``K x N`` GEMM (module docstring)."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0.0
    compute, memory = gemm_terms(device, m, k, n, batch=batch, fp8=fp8, bytes_per_element=bytes_per_element)
    return max(compute / device.gemm_efficiency(fp8), memory / device.mem_efficiency) + device.compute_latency_s


def attention_time(device: Device, flops: float, nbytes: float, fp8: bool = False,
                   shape: tuple[int, int, bool, float, bool] | None = None) -> float:
    """Seconds of a fused attention kernel doing ``flops`` FLOPs (causal skipping already
    applied) and moving ``nbytes`` (Q, K, V, O and their gradients); ``shape`` is
    ``(d_qk, d_v, causal, queries, backward)``, what the device's ``attention_backend``
    reads (module docstring)."""
    if flops <= 0:
        return 0.0
    if device.attention_backend and shape is not None:
        rate = attention_rate(device.attention_backend, *shape)
    else:
        rate = device.peak(fp8) * (device.attention_efficiency or device.compute_efficiency)
    return max(flops / rate, nbytes / device.effective_mem_bandwidth) + device.compute_latency_s


def memory_time(device: Device, nbytes: float) -> float:
    """Seconds of a memory-bound kernel moving ``nbytes``."""
    if nbytes <= 0:
        return 0.0
    return nbytes / device.effective_mem_bandwidth + device.compute_latency_s
