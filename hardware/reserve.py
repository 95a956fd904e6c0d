"""The GPU memory a training process holds besides the model's state and activations, term
by term from its sources (``memory_reserve``).

A system preset's ``reserved_bytes`` (3 GiB on the H100, H800 and A100 presets) is one [I]
number; this module says what it is made of, per run, so that a plan can show it and a
run's verdict can be checked against it (``experiments/bench_memory.py`` prints both):

* **CUDA context** (``CUDA_CONTEXT_BYTES``, [I] 512 MiB): the context and the kernel images
  of the libraries a training process loads (PyTorch, cuBLAS, cuDNN, NCCL), outside the
  caching allocator (PyTorch's "CUDA semantics" notes: the context is not counted by
  ``memory_allocated``; lazy module loading keeps it near this size on Hopper).
* **Workspaces** (``WORKSPACE_BYTES``, [I] 2 x 32 MiB): cuBLAS's workspace on the compute
  stream (PyTorch's default ``CUBLAS_WORKSPACE_CONFIG`` on Hopper, ``:4096:8``: 8 x 4 MiB)
  and Transformer Engine's GEMM workspace of the same size.
* **NCCL buffers** (``NCCL_BUFFSIZE`` 4 MiB, the NCCL documentation's default of
  ``NCCL_BUFFSIZE``; [I] ``NCCL_CHANNELS`` 16 channels): each communicator a GPU belongs to
  keeps, per channel, a receive buffer for each of its two ring neighbours: ``16 x 2 x 4
  MiB = 128 MiB``. A GPU belongs to one communicator per group of more than one GPU it is
  in (``communicators``): tensor (TP), context (CP), data (DP x CP, the replicas), expert
  (EP) and expert data (EDP) parallelism, and the pipeline's point-to-point neighbours (PP).
  NVLink SHARP (NVLS) and user-buffer registration add more where enabled (not counted).
* **Allocator fragmentation** (``FRAGMENTATION``, [I] 2 % of the device memory): memory
  PyTorch's caching allocator has reserved in blocks it cannot split for a new request
  (``max_memory_reserved - max_memory_allocated``; smaller with expandable segments).
* **FP8 weight copies** (with fp8 GEMMs): Transformer Engine keeps each weight's fp8 copy
  and, for Hopper's GEMMs that need the other layout, its fp8 transpose: ``2`` bytes per
  parameter on the GPU (TE's ``Float8Tensor`` data and transpose; TE PR #2343 measures
  memory per FP8 recipe, shared/reference/memory-sources.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .context import Context, Precision

if TYPE_CHECKING:
    from .system import Device

MIB = 2**20
CUDA_CONTEXT_BYTES = 512 * MIB
WORKSPACE_BYTES = 2 * 32 * MIB
NCCL_BUFFSIZE = 4 * MIB
NCCL_CHANNELS = 16
NCCL_PEERS = 2  # a ring's two neighbours
FRAGMENTATION = 0.02
FP8_COPY_BYTES_PER_PARAM = 2  # the fp8 weight and its transpose


class Reserve(NamedTuple):
    """The terms of ``memory_reserve``, bytes per GPU; ``communicators`` names the groups."""

    cuda_context: float
    workspaces: float
    nccl: float
    fragmentation: float
    fp8_copies: float
    communicators: tuple[str, ...]

    @property
    def total(self) -> float:
        return self.cuda_context + self.workspaces + self.nccl + self.fragmentation + self.fp8_copies


def communicators(ctx: Context, moe: bool = False) -> tuple[str, ...]:
    """The NCCL communicators one GPU of ``ctx`` belongs to (groups of more than one GPU;
    the expert groups only for a mixture-of-experts model)."""
    groups = {"TP": ctx.tp, "CP": ctx.cp, "DP": ctx.replicas, "PP": ctx.pp or 1}
    if moe:
        groups |= {"EP": ctx.ep, "EDP": ctx.edp}
    return tuple(name for name, size in groups.items() if size > 1)


def memory_reserve(device: Device, ctx: Context, moe: bool = False, params: int = 0) -> Reserve:
    """What one GPU of ``ctx`` holds besides the model's state and activations (module
    docstring); ``params``: the parameters on the GPU (for the fp8 weight copies)."""
    comms = communicators(ctx, moe)
    fp8 = FP8_COPY_BYTES_PER_PARAM * params if ctx.gemm_precision is Precision.FP8 else 0
    return Reserve(CUDA_CONTEXT_BYTES, WORKSPACE_BYTES, len(comms) * NCCL_CHANNELS * NCCL_PEERS * NCCL_BUFFSIZE,
                   FRAGMENTATION * device.memory_bytes, fp8, comms)
