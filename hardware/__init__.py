"""What a schedule runs on and what its ops cost.

- ``system``: ``Device`` (roofline), ``Link`` (Hockney), ``System`` (devices + links).
- ``model``: ``TransformerModel`` (GPT decoder, parameter counts) and ``partition``.
- ``costs``: FLOPs, memory traffic, activation / persistent bytes, messages, all-reduce,
  optimizer; ``schedule_costs(schedule, system, model)`` costs every stage of a schedule.
- ``loaders``: presets as TOML files (``load_system``, ``load_model``, ``list_*``).

``hardware`` imports ``schedules`` only, never ``solver`` or OR-Tools.
"""

from .costs import (
    RECOMPUTE,
    AllReduce,
    ScheduleCosts,
    StageCost,
    activation_bytes_per_layer,
    allreduce_time,
    attention_core_flops,
    head_forward_flops,
    layer_forward_flops,
    layer_forward_traffic,
    message_bytes,
    weight_memory_bytes_per_layer,
    optimizer_time,
    persistent_bytes,
    ring_allreduce_time,
    schedule_costs,
    stage_cost,
)
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
from .system import Device, Link, System

__all__ = [
    "RECOMPUTE", "AllReduce", "Device", "Link", "PresetInfo", "ScheduleCosts", "StageCost",
    "System", "TransformerModel", "activation_bytes_per_layer", "allreduce_time",
    "attention_core_flops", "head_forward_flops", "layer_forward_flops",
    "layer_forward_traffic", "list_models", "list_systems", "load_model", "load_system",
    "message_bytes", "model_from_file", "optimizer_time", "partition", "persistent_bytes",
    "ring_allreduce_time", "schedule_costs", "stage_cost", "system_from_file",
    "weight_memory_bytes_per_layer",
]
