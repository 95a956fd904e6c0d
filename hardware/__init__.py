"""What a schedule runs on and what its ops cost.

- ``system``: ``Device`` (roofline), ``Link`` (Hockney), ``System`` (devices + links).
- ``model``: ``TransformerModel`` (decoder families: GQA, SwiGLU, RMSNorm, tied
  embeddings; parameter counts) and ``partition``.
- ``layer``: per-layer FLOPs, activation bytes, M_W and traffic per GPU.
- ``context``: ``Context`` (every parallel and batching decision of a run: PP, TP, CP, DP,
  EP, sequence parallelism, ZeRO 0-3, overlap, microbatch size, global batch, sequence
  length, recomputation, per-stage recomputation, layout) and ``Recompute``.
- ``decisions``: each of those decisions declared once (``DECISIONS``: range, help, flag,
  how ``plan`` enumerates it, sweep key, Megatron-LM and torchtitan names) and
  ``ContextSpace`` (the question: candidates per decision).
- ``layout``: ``Layout`` (layers per stage, Megatron's ``pipeline_model_parallel_layout``).
- ``parallel``: ``Topology`` (which GPUs and links a stage's collectives and messages use);
  ``links``: ``StageLinks`` (the links of one stage's collectives, per pipeline device).
- ``cp``, ``zero3``, ``moe``: context parallelism's K/V exchange, ZeRO-3's gathers and
  reductions, expert parallelism's all-to-alls.
- ``costs``: ``stage_cost``, collectives, optimizer; ``pipeline``: ``schedule_costs(schedule,
  system, model, context)`` costs every stage of a schedule. One pricing stack: ``parallel``
  -> ``links`` -> ``costs`` -> ``pipeline`` (-> ``solver.pricing``'s ``Costs``).
- ``profile``: measured op times (``Profile``, ``load_profile``); ``calibrate``: a system's
  efficiencies fitted to a profile.
- ``loaders``: presets as TOML files (``load_system``, ``load_model``, ``list_*``).

``hardware`` imports ``schedules`` only, never ``solver`` or OR-Tools.
"""

from .calibrate import Calibration, calibrate, system_to_toml
from .context import Context, Recompute
from .costs import (
    StageCost,
    activation_bytes_per_layer,
    allreduce_time,
    attention_core_flops,
    head_forward_flops,
    layer_forward_flops,
    layer_forward_traffic,
    message_bytes,
    optimizer_time,
    persistent_bytes,
    ring_allreduce_time,
    stage_cost,
    weight_memory_bytes_per_layer,
)
from .decisions import DECISIONS, ContextSpace, Decision
from .layer import model_flops_per_sequence
from .layout import Layout
from .links import StageLinks
from .loaders import (
    PresetInfo,
    list_models,
    list_systems,
    load_model,
    load_system,
    model_from_file,
    system_from_file,
)
from .model import TransformerModel, partition
from .parallel import Topology
from .pipeline import AllReduce, ScheduleCosts, schedule_costs, stage_costs_of
from .profile import Profile, StageProfile, load_profile, profile_to_toml
from .system import Device, HostLink, Link, System

__all__ = [
    "DECISIONS",
    "AllReduce",
    "Calibration",
    "Context",
    "ContextSpace",
    "Decision",
    "Device",
    "HostLink",
    "Layout",
    "Link",
    "PresetInfo",
    "Profile",
    "Recompute",
    "ScheduleCosts",
    "StageCost",
    "StageLinks",
    "StageProfile",
    "System",
    "Topology",
    "TransformerModel",
    "activation_bytes_per_layer",
    "allreduce_time",
    "attention_core_flops",
    "calibrate",
    "head_forward_flops",
    "layer_forward_flops",
    "layer_forward_traffic",
    "list_models",
    "list_systems",
    "load_model",
    "load_profile",
    "load_system",
    "message_bytes",
    "model_flops_per_sequence",
    "model_from_file",
    "optimizer_time",
    "partition",
    "persistent_bytes",
    "profile_to_toml",
    "ring_allreduce_time",
    "schedule_costs",
    "stage_cost",
    "stage_costs_of",
    "system_from_file",
    "system_to_toml",
    "weight_memory_bytes_per_layer",
]
