"""What a schedule's ops and messages cost on a system (the paper's level-3 cost model).

Per-layer formulas (FLOPs, activation memory, M_W, traffic, message size) are in
``hardware.layer``; the parallel context of a stage (tensor and data parallelism, the
cluster's links for each message) in ``hardware.parallel``. This module puts them
together per stage and per schedule.

Op time: roofline, ``max(F/(P*e_c(n)) + L_c, V_m/(BW_m*e_m) + L_m)`` (``Device.compute_time``,
``n`` the microbatch's tokens), plus the op's tensor-parallel collectives (not overlapped):
two all-reduces of ``c*b*s*h`` bytes per layer in F and in B (four in B with full
recomputation), one more in the first stage's F (embedding) and the last stage's B (head).

Messages between consecutive stages: ``b*s*h*c`` bytes over the pipeline link of the two
devices (``Topology.pipeline_link``; ``system.link(src, dst)`` with one GPU per stage),
Hockney time ``n/BW + L``; 0 s on one device.

Persistent memory of a GPU: its parameters' weights, gradients and optimizer state
(``Context.persistent_bytes``; ``params * bytes_per_param_state`` without ZeRO).

Replicated stages (Chimera's two pipelines) all-reduce their gradients between the devices
holding the same layers (ring, ascending devices, slowest hop). Each device then runs its
*tail* (``ScheduleCosts.optimizer_s``): the data-parallel gradient reduction's exposed part,
the optimizer step (Adam, memory-bound: every persistent byte of its ZeRO shard read and
written once, ``2 * bytes_per_param_state * params``, 0 FLOPs), and the exposed part of the
ZeRO weight all-gather (``hardware.parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.checks import check_count
from pipetab.schedules.ops import Kind, Op

from .context import Context, Recompute
from .layer import (
    activation_bytes_per_layer,
    attention_core_flops,
    embedding_forward_traffic,
    expert_gemm_flops,
    head_activation_bytes,
    head_forward_flops,
    head_forward_traffic,
    layer_forward_flops,
    layer_forward_traffic,
    layer_gemm_flops,
    message_bytes,
    mtp_forward_flops,
    stage_activation_bytes,
    stage_expert_params_per_gpu,
    stage_params_per_gpu,
    stage_weight_memory_bytes,
    weight_memory_bytes_per_layer,
)
from .model import TransformerModel, partition
from .moe import edp_group, moe_layer_comm
from .overheads import end_of_step_s
from .parallel import Topology, ring_time
from .parts import stage_segments
from .system import Device, Link, System

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule

__all__ = [
    "AllReduce", "ScheduleCosts", "StageCost", "activation_bytes_per_layer",
    "allreduce_time", "attention_core_flops", "head_forward_flops", "layer_forward_flops",
    "layer_forward_traffic", "message_bytes", "optimizer_time", "persistent_bytes",
    "ring_allreduce_time", "schedule_costs", "stage_cost", "weight_memory_bytes_per_layer",
]


def persistent_bytes(model: TransformerModel, params: int) -> int:
    """``params * bytes_per_param_state`` (weights, gradients, optimizer state; no ZeRO)."""
    return params * model.bytes_per_param_state


# ---- collectives and optimizer ------------------------------------------------------------
def ring_allreduce_time(nbytes: float, num_replicas: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` among ``R`` replicas over ``link``:
    ``2(R-1)/R * nbytes/BW + 2(R-1)*L``; 0 for one replica."""
    check_count("num_replicas", num_replicas)
    if nbytes < 0:
        raise ValueError(f"all-reduce size must be >= 0 bytes, got {nbytes!r}")
    return ring_time(nbytes, num_replicas, link)


def allreduce_time(system: System, devices: Sequence[int], nbytes: float) -> float:
    """Ring all-reduce among distinct ``devices`` (ascending ring, slowest hop's bandwidth
    and latency); 0 for a single device."""
    ring = sorted(set(devices))
    if len(ring) < 2:
        return 0.0
    hops = [system.link(a, b) for a, b in zip(ring, ring[1:] + ring[:1]) if a != b]
    slowest = Link(min(h.bandwidth for h in hops), max(h.latency_s for h in hops))
    return ring_allreduce_time(nbytes, len(ring), slowest)


def optimizer_time(device: Device, model: TransformerModel, params: int) -> float:
    """Adam step over ``params`` parameters, memory-bound: roofline with 0 FLOPs and
    ``2 * bytes_per_param_state * params`` bytes (all state read and written once)."""
    return device.compute_time(0, 2 * model.bytes_per_param_state * params)


# ---- one stage -----------------------------------------------------------------------------
Segment = tuple[bool, float]
"""A part of an op on one of the GPU's two streams: (on the communication stream, seconds)."""


@dataclass(frozen=True)
class StageCost:
    """Costs of one stage for one microbatch, per GPU of its tensor-parallel group.

    ``backward_s`` is the full backward, or only the input gradient (B) when the schedule
    splits the backward; ``weight_s`` is then the weight gradient (W), else 0.
    ``fwd_message_bytes`` is what the stage sends to the next stage per microbatch (0 on the
    last stage), ``bwd_message_bytes`` what it sends to the previous one (0 on the first),
    both for the whole group. ``activation_bytes`` (M) is allocated at the start of F and
    freed at the end of B; when the backward is split, ``weight_memory_bytes`` (M_W) of it
    only at the end of W. ``tp_comm_*`` are the seconds of tensor-parallel collectives
    inside each op, ``ep_comm_*`` those of the expert-parallel all-to-alls (both included
    in the op's time). ``stage_cost`` shares its values between calls: never change them.
    Layers ``first_layer .. first_layer + layers - 1`` of the model;
    ``params`` per GPU, ``expert_params`` of them routed experts. ``chains`` (only with
    expert-parallel communication) give each op kind's parts in order on the compute and
    communication streams (``hardware.overlap``); their sum is the op's time.
    """

    layers: int
    forward_s: float
    backward_s: float
    weight_s: float
    fwd_message_bytes: int
    bwd_message_bytes: int
    activation_bytes: float
    persistent_bytes: int
    flops_forward: float
    flops_backward: float = 0
    flops_weight: float = 0
    traffic_forward: float = 0
    traffic_backward: float = 0
    traffic_weight: float = 0
    params: int = 0
    first_layer: int = 0
    has_embedding: bool = False
    has_head: bool = False
    weight_memory_bytes: float = 0
    tp_comm_forward_s: float = 0.0
    tp_comm_backward_s: float = 0.0
    ep_comm_forward_s: float = 0.0
    ep_comm_backward_s: float = 0.0
    expert_params: int = 0
    chains: dict[Kind, tuple[Segment, ...]] | None = None

    @property
    def layer_range(self) -> tuple[int, int]:
        """``(first, stop)`` of the stage's layers."""
        return self.first_layer, self.first_layer + self.layers


def _chain(parts: list[tuple[float, float]], compute_s: float, reverse: bool) -> tuple[Segment, ...]:
    """An op's segments from its parts ``(weight, comm seconds)`` in forward order: the
    op's compute seconds split over the parts by weight (their kernel seconds under the
    kernel model, else their FLOPs), each part's communication after
    its compute (before it, reversed, for a backward); adjacent compute merged."""
    total = sum(f for f, _ in parts) or 1.0
    seq: list[Segment] = []
    for flops, comm in (reversed(parts) if reverse else parts):
        pair = [(False, compute_s * flops / total), (True, comm)]
        for seg in (reversed(pair) if reverse else pair):
            if seg[1] <= 0:
                continue
            if seq and seq[-1][0] == seg[0]:
                seq[-1] = (seg[0], seq[-1][1] + seg[1])
            else:
                seq.append(seg)
    return tuple(seq)


def _moe_parts(model: TransformerModel, ctx: Context, first_layer: int, layers: int, last: bool,
               comm: tuple[float, float]) -> list[tuple[float, float]]:
    """The stage's parts in forward order (flops of the forward, comm seconds after each)
    for ``_chain``: dense layers whole; a MoE layer as attention (with router and shared
    experts) then its dispatch, the routed experts then the combine (``comm``: their
    seconds); the head (and MTP)."""
    dispatch, combine = comm
    dense_f, moe_f, expert_f = (layer_forward_flops(model, ctx), layer_forward_flops(model, ctx, True),
                                expert_gemm_flops(model, ctx))
    parts: list[tuple[float, float]] = []
    for i in range(first_layer, first_layer + layers):
        if model.is_moe_layer(i):
            parts += [(moe_f - expert_f, dispatch), (expert_f, combine)]
        else:
            parts.append((dense_f, 0.0))
    if last:
        parts.append((head_forward_flops(model, ctx), 0.0))
        for _ in range(model.mtp_layers):
            parts += [(moe_f - expert_f, dispatch), (expert_f, combine)]
    return parts


def _weighted(parts: list[tuple[float, float]], seconds: list[float] | None) -> list[tuple[float, float]]:
    """``parts`` with each part's kernel seconds (``hardware.parts``) in place of its FLOPs."""
    if not seconds or len(seconds) != len(parts):
        return parts
    return [(sec, comm) for sec, (_, comm) in zip(seconds, parts)]


@lru_cache(maxsize=65536)
def stage_cost(model: TransformerModel, device: Device, ctx: Context, layers: int, *,
               first: bool, last: bool, first_layer: int = 0, split_backward: bool = False,
               tp_link: Link | None = None, moe_comm: tuple[float, float] = (0.0, 0.0)) -> StageCost:
    """Costs of a stage of ``layers`` layers for one microbatch on one GPU of the run
    ``ctx`` (resolved: its microbatch size known) whose tensor-parallel collectives run
    over ``tp_link``; ``first`` / ``last`` add the embedding / LM head (and the MTP
    modules); ``moe_comm`` is one MoE layer's (dispatch, combine) seconds
    (``hardware.moe.moe_layer_comm``). Formulas: ``hardware.layer`` and the module
    docstring."""
    check_count("layers", layers, 0)
    t, recompute = ctx.tp, ctx.recompute
    ctx.check_experts(model)
    if t > 1:
        ctx.check(model)
        if tp_link is None:
            raise ValueError(f"a tensor-parallel group of {t} GPUs needs the link its collectives use")
    flash = model.attention == "flash"
    moe_layers = model.moe_layers_in(first_layer, first_layer + layers)
    dense_layers = layers - moe_layers
    gemm = dense_layers * layer_gemm_flops(model, ctx) + (moe_layers * layer_gemm_flops(model, ctx, True)
                                                         if moe_layers else 0)
    core = layers * attention_core_flops(model, ctx)
    head = (head_forward_flops(model, ctx) + mtp_forward_flops(model, ctx)) if last else 0
    flops_f = gemm + core + head
    flash_extra = core // 2 if flash else 0  # the recomputed QK^T
    extra_f = {Recompute.NONE: 0, Recompute.SELECTIVE: 0 if flash else core, Recompute.FULL: gemm + core}[recompute]
    layer_v = dense_layers * layer_forward_traffic(model, ctx) + (
        moe_layers * layer_forward_traffic(model, ctx, True) if moe_layers else 0)
    traffic_f = (layer_v + (head_forward_traffic(model, ctx) if last else 0)
                 + (embedding_forward_traffic(model, ctx) if first else 0))
    full = recompute is Recompute.FULL
    extra_v = layer_v if full else 0
    one = ring_time(message_bytes(model, ctx), t, tp_link)  # one all-reduce of an activation
    comm_f = one * (2 * layers + (1 if first else 0))
    comm_b = one * ((4 if full else 2) * layers + (1 if last else 0))
    a2a_layers = moe_layers + (model.mtp_layers if last else 0)
    ep_f = a2a_layers * (moe_comm[0] + moe_comm[1])
    ep_b = a2a_layers * 2 * moe_comm[1] + (ep_f if full else 0)
    tokens = ctx.microbatch_size * model.seq_len  # type: ignore[operator]
    if split_backward:
        flops_b = gemm + 2 * core + flash_extra + head + extra_f
        flops_w = gemm + head
        traffic_b, traffic_w = traffic_f + extra_v, traffic_f
        weight_s = device.compute_time(flops_w, traffic_w, tokens)
    else:
        flops_b, flops_w = 2 * flops_f + flash_extra + extra_f, 0
        traffic_b, traffic_w = 2 * traffic_f + extra_v, 0
        weight_s = 0.0
    compute_f = device.compute_time(flops_f, traffic_f, tokens) + comm_f
    compute_b = device.compute_time(flops_b, traffic_b, tokens) + comm_b
    segments = None
    if device.kernels:  # ops as their kernels (hardware.parts); the FLOPs and traffic above stay the model's
        segments = [stage_segments(model, device, ctx, layers, first=first, last=last, first_layer=first_layer,
                                   kind=kind, split_backward=split_backward) for kind in (Kind.F, Kind.B, Kind.W)]
        compute_f, compute_b = sum(segments[0]) + comm_f, sum(segments[1]) + comm_b
        weight_s = sum(segments[2]) if split_backward else 0.0
    chains = None
    if ep_f > 0:
        again = moe_comm if full else (0.0, 0.0)  # full recomputation runs the forward's all-to-alls again
        comm_bwd = (moe_comm[1] + again[0], moe_comm[1] + again[1])
        seconds: list[list[float] | None] = list(segments) if segments else [None, None]
        parts_f = _weighted(_moe_parts(model, ctx, first_layer, layers, last, moe_comm), seconds[0])
        parts_b = _weighted(_moe_parts(model, ctx, first_layer, layers, last, comm_bwd), seconds[1])
        chains = {Kind.F: _chain(parts_f, compute_f, reverse=False),
                  Kind.B: _chain(parts_b, compute_b, reverse=True)}
        if split_backward:
            chains[Kind.W] = ((False, weight_s),)
    params = stage_params_per_gpu(model, layers, first, last, ctx, first_layer)
    expert_params = stage_expert_params_per_gpu(model, layers, last, ctx, first_layer)
    msg = message_bytes(model, ctx)
    activation = stage_activation_bytes(model, ctx, layers, first_layer)
    if last:
        activation += head_activation_bytes(model, ctx)
    return StageCost(
        layers=layers,
        forward_s=compute_f + ep_f,
        backward_s=compute_b + ep_b,
        weight_s=weight_s,
        fwd_message_bytes=0 if last else msg,
        bwd_message_bytes=0 if first else msg,
        activation_bytes=activation,
        persistent_bytes=ctx.persistent_bytes(model, params, expert_params),
        flops_forward=flops_f,
        flops_backward=flops_b,
        flops_weight=flops_w,
        traffic_forward=traffic_f,
        traffic_backward=traffic_b,
        traffic_weight=traffic_w,
        params=params,
        first_layer=first_layer,
        has_embedding=first,
        has_head=last,
        weight_memory_bytes=stage_weight_memory_bytes(model, ctx, layers, first_layer),
        tp_comm_forward_s=comm_f,
        tp_comm_backward_s=comm_b,
        ep_comm_forward_s=ep_f,
        ep_comm_backward_s=ep_b,
        expert_params=expert_params,
        chains=chains,
    )


# ---- a whole schedule ------------------------------------------------------------------------
@dataclass(frozen=True)
class AllReduce:
    """One gradient all-reduce between stages that hold the same part of the model.

    ``members`` are the (pipeline, stage) pairs holding layers ``layers = (start, stop)``
    (plus the embedding / LM head when flagged); ``devices`` their distinct devices.
    ``time_s`` is the ring all-reduce of ``nbytes = params * bytes_per_grad`` per GPU (0
    when all members sit on one device). It can start once every member's last backward
    (W when split) has finished, and must end before the optimizer step of those devices.
    """

    members: tuple[tuple[int, int], ...]
    devices: tuple[int, ...]
    layers: tuple[int, int]
    embedding: bool
    head: bool
    params: int
    nbytes: int
    time_s: float


@dataclass(frozen=True)
class ScheduleCosts:
    """Everything a schedule's ops and messages cost on one system for one model.

    ``stages[p][s]`` is the ``StageCost`` of stage ``s`` of pipeline ``p``; per device
    ``persistent_bytes`` (sum over the stages it holds, each replica a separate copy, per
    GPU) and ``optimizer_s`` (the device's tail: data-parallel reduction, optimizer step,
    weight gather); ``allreduces`` the gradient all-reduces of replicated model parts.
    ``system`` has one device per pipeline device (``Topology.pipeline_system``);
    ``context`` is the run's, resolved (microbatch size, global batch, sequence length).
    """

    schedule_name: str
    system: System
    model: TransformerModel
    context: Context
    split_backward: bool
    stage2device: tuple[tuple[int, ...], ...]
    stages: tuple[tuple[StageCost, ...], ...]
    persistent_bytes: tuple[int, ...]
    optimizer_s: tuple[float, ...]
    allreduces: tuple[AllReduce, ...]
    dp_sync_s: tuple[float, ...] = ()

    @property
    def microbatch_size(self) -> int:
        return self.context.microbatch_size  # type: ignore[return-value]

    @property
    def recompute(self) -> Recompute:
        return self.context.recompute

    @property
    def num_devices(self) -> int:
        return len(self.persistent_bytes)

    def stage(self, pipeline: int, stage: int) -> StageCost:
        return self.stages[pipeline][stage]

    def op_time(self, op: Op) -> float:
        """Duration of ``op``: F -> ``forward_s``, B -> ``backward_s``, W -> ``weight_s``."""
        cost = self.stages[op.pipeline][op.stage]
        if op.kind is Kind.F:
            return cost.forward_s
        if op.kind is Kind.B:
            return cost.backward_s
        if not self.split_backward:
            raise ValueError(f"op {op} is a weight-gradient op, but the backward is not split")
        return cost.weight_s

    def message_time(self, src_device: int, dst_device: int, nbytes: float) -> float:
        """Hockney time ``nbytes/BW + L`` over ``system.link(src, dst)``; 0 on one device."""
        return self.system.message_time(src_device, dst_device, nbytes)

    def allreduce_s(self, pipeline: int, stage: int) -> float:
        """Total all-reduce time of the groups stage (pipeline, stage) belongs to (0 if its
        layers are held by no other stage)."""
        key = (pipeline, stage)
        return sum(a.time_s for a in self.allreduces if key in a.members)

    def device_allreduce_s(self, device: int) -> float:
        """Sum of the all-reduce times device ``device`` takes part in (serial, no overlap)."""
        return sum(a.time_s for a in self.allreduces if device in a.devices)

    @property
    def description(self) -> str:
        return (
            f"{self.schedule_name} on {self.system.name} with {self.model.name}: "
            f"microbatch {self.microbatch_size} sequences, recompute {self.recompute}, "
            f"{self.context.parallel_label}, max persistent {max(self.persistent_bytes) / 2**30:.3g} GiB/GPU"
        )


def _allreduces(model: TransformerModel, stage2device, ranges, ctx: Context,
                reduce_time) -> tuple[AllReduce, ...]:
    """Group the model's units (embedding, layers 0..L-1, LM head) by the tuple of stages
    holding them (one per pipeline); consecutive units with the same holders form one
    group; groups held by more than one stage are all-reduced (``reduce_time(devices,
    nbytes)``)."""
    num_layers = model.num_layers
    holders_of_layer = []
    for layer in range(num_layers):
        holders_of_layer.append(tuple(
            (p, next(s for s, (a, b) in enumerate(rs) if a <= layer < b))
            for p, rs in enumerate(ranges)
        ))
    emb = tuple((p, 0) for p in range(len(ranges)))
    head = tuple((p, len(rs) - 1) for p, rs in enumerate(ranges))
    # units: -1 = embedding, 0..L-1 layers, L = head
    units = [(-1, emb), *list(enumerate(holders_of_layer)), (num_layers, head)]
    groups: list[list] = []
    for unit, holders in units:
        if groups and groups[-1][1] == holders:
            groups[-1][0].append(unit)
        else:
            groups.append([[unit], holders])
    out = []
    for unit_list, holders in groups:
        if len(holders) < 2:
            continue
        layer_units = [u for u in unit_list if 0 <= u < num_layers]
        has_emb, has_head = -1 in unit_list, num_layers in unit_list
        start = layer_units[0] if layer_units else (0 if has_emb else num_layers)
        stop = layer_units[-1] + 1 if layer_units else start
        params = stage_params_per_gpu(model, len(layer_units), has_emb, has_head, ctx, start)
        devices = tuple(sorted({stage2device[p][s] for p, s in holders}))
        nbytes = params * model.bytes_per_grad
        out.append(AllReduce(holders, devices, (start, stop), has_emb, has_head, params,
                             nbytes, reduce_time(devices, nbytes)))
    return tuple(out)


def _exposed(total: float, window: float, layers: int, overlap: bool) -> float:
    """What stays of a collective of ``total`` seconds overlapped with ``window`` seconds
    of compute: ``max(total - window, total / layers)``; all of it without overlap."""
    if not overlap or total == 0:
        return total
    return max(total - window, total / max(layers, 1))


def _sync(model: TransformerModel, par: Context, params: int, replicas: int, link: Link | None) -> tuple[float, float]:
    """(gradient reduction, weight gather) seconds of ``params`` parameters among
    ``replicas`` GPUs: a ring all-reduce, or with ZeRO a reduce-scatter and, after the
    optimizer step, an all-gather."""
    grads = params * model.bytes_per_grad
    if par.zero:  # ZeRO stage 1 or 2 (Context sets 0 or 1 when not given)
        return (ring_time(grads, replicas, link, steps=1),
                ring_time(params * model.bytes_per_param_compute, replicas, link, steps=1))
    return ring_time(grads, replicas, link, steps=2), 0.0


def _device_tail(layout: Topology, model: TransformerModel, device: int, params: int, expert_params: int,
                 stage_costs: list[StageCost], split: bool) -> tuple[float, float]:
    """(data-parallel sync seconds exposed, whole tail seconds) of one pipeline device:
    dense parameters reduced among the ``dp`` replicas, routed experts among the ``edp``
    GPUs holding the same experts (``hardware.moe``)."""
    par = layout.context
    opt = optimizer_time(layout.system.device, model, par.updated_params(params, expert_params))
    if layout.system.device.kernels:
        opt += end_of_step_s(layout)
    if par.tp * par.dp == 1 or not stage_costs:
        return 0.0, opt
    reduce, gather = _sync(model, par, params - expert_params, par.dp,
                           layout.dp_link(device) if par.dp > 1 else None)
    if expert_params:
        link = layout.ring_link(edp_group(layout, device))
        more = _sync(model, par, expert_params, par.edp, link)
        reduce, gather = reduce + more[0], gather + more[1]
    layers = sum(c.layers for c in stage_costs)
    last_bwd = min(c.weight_s if split else c.backward_s for c in stage_costs)
    first_fwd = min(c.forward_s for c in stage_costs)
    sync = _exposed(reduce, last_bwd, layers, par.overlap) + _exposed(gather, first_fwd, layers, par.overlap)
    return sync, sync + opt


def schedule_costs(schedule: Schedule, system: System, model: TransformerModel,
                   context: Context = Context()) -> ScheduleCosts:
    """Cost every stage of ``schedule`` on ``system`` for ``model`` in the run ``context``.

    Each pipeline is the whole model: its layers are ``partition(schedule.stage_work[p],
    model.num_layers)``; its first stage holds the embedding, its last the LM head. A
    schedule device is a tensor-parallel group of ``context.tp`` GPUs, the pipeline is
    replicated ``context.dp`` ways (``hardware.parallel``; default: one GPU, one replica).
    The context is resolved for the schedule's microbatches (``Context.resolved``: by
    default microbatches of ``global_batch / (dp * num_microbatches)`` sequences). Model
    parts held by stages of several pipelines (Chimera) are replicas and get a gradient
    all-reduce.
    """
    ctx = context.resolved(model, schedule.num_microbatches)
    model = ctx.apply(model)
    ctx.check_experts(model)
    layout = Topology(system, ctx, schedule.num_devices)
    stage2device = schedule.placement.stage2device
    comm: dict[int, tuple[float, float]] = {}

    def moe_comm(device: int) -> tuple[float, float]:
        if not model.moe:
            return 0.0, 0.0
        if device not in comm:
            comm[device] = moe_layer_comm(model, ctx, layout, device)
        return comm[device]

    tp_links: dict[int, Link | None] = {}

    def tp_link(device: int) -> Link | None:
        if device not in tp_links:
            tp_links[device] = layout.tp_link(device)
        return tp_links[device]

    stages, ranges = [], []
    for p, works in enumerate(schedule.stage_work):
        counts = partition(works, model.num_layers)
        starts = [0, *accumulate(counts)]
        ranges.append([(starts[s], starts[s + 1]) for s in range(len(counts))])
        stages.append(tuple(
            stage_cost(model, system.device, ctx, n, first=s == 0, last=s == len(counts) - 1,
                       first_layer=starts[s], split_backward=schedule.split_backward,
                       tp_link=tp_link(stage2device[p][s]), moe_comm=moe_comm(stage2device[p][s]))
            for s, n in enumerate(counts)
        ))
    per_device_params = [0] * schedule.num_devices
    per_device_experts = [0] * schedule.num_devices
    per_device_stages: list[list[StageCost]] = [[] for _ in range(schedule.num_devices)]
    for p, row in enumerate(stages):
        for s, cost in enumerate(row):
            per_device_params[stage2device[p][s]] += cost.params
            per_device_experts[stage2device[p][s]] += cost.expert_params
            per_device_stages[stage2device[p][s]].append(cost)
    tails = [_device_tail(layout, model, d, n, per_device_experts[d], per_device_stages[d], schedule.split_backward)
             for d, n in enumerate(per_device_params)]

    def reduce_time(devices, nbytes):  # replicas: tensor rank 0 of each device, per GPU
        return allreduce_time(system, [layout.gpu(0, 0, d) for d in devices], nbytes)

    return ScheduleCosts(
        schedule_name=schedule.name,
        system=layout.pipeline_system,
        model=model,
        context=ctx,
        split_backward=schedule.split_backward,
        stage2device=stage2device,
        stages=tuple(stages),
        persistent_bytes=tuple(ctx.persistent_bytes(model, n, e)
                               for n, e in zip(per_device_params, per_device_experts)),
        optimizer_s=tuple(t for _, t in tails),
        allreduces=_allreduces(model, stage2device, ranges, ctx, reduce_time),
        dp_sync_s=tuple(s for s, _ in tails),
    )
