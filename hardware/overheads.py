"""What a training step costs besides its ops and their messages (kernel model only:
``Device.sm_count > 0``; each device's tail, ``ScheduleCosts.optimizer_s``).

* **Optimizer step** over the GPU's ZeRO shard: memory-bound, every persistent byte read
  and written once (``hardware.costs.optimizer_time``; Adam's multi-tensor kernels stream
  the parameters, gradients and both moments).
* **Kernel launches**: every kernel of an op pays ``Device.compute_latency_s``
  (``hardware.kernels``; a launch costs a few microseconds — NVIDIA, "Getting Started with
  CUDA Graphs", 2019).
* **Run overhead** (``Device.run_overhead``): what a real run loses beyond its kernels and
  messages as modelled — stragglers, synchronisation jitter, clocks below the measured ones
  under a sustained power cap, host-side stalls — as a stretch of every op's kernel seconds
  by ``1 + run_overhead`` (``run_factor``; ``hardware.parts``), so a step's bubbles and
  tails scale with the ops that make them. Kept apart from the kernels' efficiencies
  (fitted to kernels alone): it is the one term fitted to a cluster run
  (``experiments/calibrate_presets.py``).
* **End-of-step synchronisation**: Megatron-LM's step all-reduces the loss over the
  data-parallel GPUs, the gradient norm for clipping and the fp16 loss scaler's found-inf
  flag over all GPUs (``megatron/training/training.py``, ``clip_grads.py``,
  ``optimizer.py``): ``SYNC_ALLREDUCES`` all-reduces of a few bytes, latency-bound. NCCL
  runs them as a tree (NCCL 2.4 and later: Sanders et al.'s double binary tree), ``2 *
  ceil(log2 N)`` hops of the slowest link's latency over ``N`` GPUs; the step cannot end
  before them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .parallel import Topology
    from .system import Device

SYNC_ALLREDUCES = 3
"""The loss, the gradient norm and the found-inf flag (module docstring)."""


def end_of_step_s(layout: Topology) -> float:
    """Seconds of the end-of-step synchronisation over the run's GPUs (module docstring);
    0 on one GPU."""
    gpus = layout.num_gpus
    if gpus < 2:
        return 0.0
    system = layout.system
    link = system.intra_node_link if system.devices_per_node and gpus <= system.devices_per_node else None
    latency = (link or system.default_link).latency_s
    return SYNC_ALLREDUCES * 2 * math.ceil(math.log2(gpus)) * latency



def run_factor(device: Device) -> float:
    """``1 + run_overhead``: the stretch of an op's kernel seconds in a real run (module
    docstring)."""
    return 1.0 + device.run_overhead
