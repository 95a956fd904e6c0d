"""What a whole schedule costs on a system: every stage's ``StageCost``
(``hardware.costs.stage_cost``) from the schedule's layout of layers, the gradient
all-reduces of replicated stages, and each device's persistent memory and tail.

Replicated stages (Chimera's two pipelines) all-reduce their gradients between the devices
holding the same layers (ring, ascending devices, slowest hop). Each device then runs its
*tail* (``ScheduleCosts.optimizer_s``): the data-parallel gradient reduction's exposed part,
the optimizer step (Adam, memory-bound: every persistent byte of its ZeRO shard read and
written once, ``2 * bytes_per_param_state * params``, 0 FLOPs), and the exposed part of the
ZeRO weight all-gather (``hardware.parallel``). With ZeRO-3 the reductions and gathers run
inside the ops (``hardware.zero3``) and the tail is the optimizer step alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipetab.schedules.ops import Kind

from .collectives import buckets, sm_shared_exposed
from .context import Context, Recompute
from .costs import StageCost, allreduce_time, optimizer_time, stage_cost
from .gemms import check_mb
from .layer import stage_params_per_gpu
from .layout import Layout
from .links import DeviceLinks
from .moe import edp_group
from .overheads import end_of_step_s
from .parallel import Topology, ring_time
from .zero3 import buffer_bytes, exposed

if TYPE_CHECKING:
    from pipetab.schedules.ops import Op
    from pipetab.schedules.schedule import Schedule

    from .model import TransformerModel
    from .system import Link, System


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
        return check_mb(self.context.microbatch_size)

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
    nbytes)``). One pipeline holds every unit once: none."""
    if len(ranges) == 1:
        return ()
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
    dense parameters reduced among the ``dp x cp`` replicas, routed experts among the
    ``edp`` GPUs holding the same experts (``hardware.moe``); with ZeRO-3 the optimizer
    step alone (``hardware.zero3``)."""
    par = layout.context
    opt = optimizer_time(layout.system.device, model, par.updated_params(params, expert_params))
    if layout.system.device.kernels:  # the end-of-step synchronisation (hardware.overheads)
        opt += end_of_step_s(layout)
    if par.tp * par.replicas == 1 or not stage_costs or par.zero == 3:
        return 0.0, opt
    if layout.system.fabric is not None:
        sync = _fabric_sync(layout, model, device, params, expert_params, stage_costs, split)
        return sync, sync + opt
    reduce, gather = _sync(model, par, params - expert_params, par.replicas,
                           layout.dp_link(device) if par.replicas > 1 else None)
    if expert_params:
        link = layout.ring_link(edp_group(layout, device))
        more = _sync(model, par, expert_params, par.edp, link)
        reduce, gather = reduce + more[0], gather + more[1]
    layers = sum(c.layers for c in stage_costs)
    last_bwd = min(c.weight_s if split else c.backward_s for c in stage_costs)
    first_fwd = min(c.forward_s for c in stage_costs)
    sync = exposed(reduce, last_bwd, layers, par.overlap) + exposed(gather, first_fwd, layers, par.overlap)
    return sync, sync + opt


def _fabric_sync(layout: Topology, model: TransformerModel, device: int, params: int, expert_params: int,
                 stage_costs: list[StageCost], split: bool) -> float:
    """Exposed data-parallel sync seconds on a system with a ``Fabric``: dense and expert
    gradients in Megatron's buckets (``collectives.buckets``), each bucket a collective as
    NCCL runs it (``Topology.collective``), overlapped with the last backward
    (``collectives.sm_shared_exposed``: the compute they overlap slowed by the SMs NCCL's
    kernels hold, ``Device.collective_sms``); with ZeRO the weights' all-gather likewise
    with the first forward. Without ``overlap`` all of it is exposed."""
    par = layout.context
    groups = [(params - expert_params, par.replicas, lambda n, k: layout.dp_collective(n, device, k))]
    if expert_params:
        group = edp_group(layout, device)
        groups.append((expert_params, par.edp, lambda n, k: layout.collective(group, n, k)))
    reduce = gather = 0.0
    count = 0
    for p, members, run in groups:
        if p <= 0 or members < 2:
            continue
        k = buckets(p, members) if par.overlap else 1
        count += k
        if par.zero:
            reduce += k * run(p * model.bytes_per_grad / k, 1)
            gather += k * run(p * model.bytes_per_param_compute / k, 1)
        else:
            reduce += k * run(p * model.bytes_per_grad / k, 2)
    if not par.overlap:
        return reduce + gather
    last_bwd = min(c.weight_s if split else c.backward_s for c in stage_costs)
    first_fwd = min(c.forward_s for c in stage_costs)
    dev = layout.system.device
    share = dev.collective_sms / dev.sm_count if dev.sm_count else 0.0  # NCCL's kernels' SMs
    return sm_shared_exposed(reduce, last_bwd, count, share) + sm_shared_exposed(gather, first_fwd, count, share)


Part = tuple[int, int, bool, bool]  # (first layer, layers, embedding, head) of a stage


def stage_parts(schedule: Schedule, model: TransformerModel, ctx: Context) -> list[list[Part]]:
    """Per pipeline, each stage's (first layer, layers, embedding, head): the context's
    ``layout`` for every pipeline, or ``partition(stage_work[p])`` with the embedding first
    and the head last (``Layout.even``)."""
    out = []
    for works in schedule.stage_work:
        layout = ctx.layout if ctx.layout is not None else Layout.even(model.num_layers, works, mtp=model.mtp_layers)
        layout.check(model, len(works))
        out.append([(f, part.layers, part.embedding, part.head)
                    for f, part in zip(layout.first_layers, layout.stages)])
    return out


_BLENDED = ("forward_s", "backward_s", "weight_s", "activation_bytes", "flops_forward", "flops_backward",
            "flops_weight", "traffic_backward", "weight_memory_bytes", "tp_comm_backward_s", "ep_comm_backward_s",
            "cp_comm_backward_s")


def blend(base: StageCost, full: StageCost, recomputed: int) -> StageCost:
    """A stage whose first ``recomputed`` layers recompute in full (Megatron's block
    method) and the others as ``base``: every per-microbatch quantity linear between the
    stage without and with full recomputation (exact for FLOPs, traffic, collectives and
    activations of equal layers; op times interpolated)."""
    if recomputed <= 0 or base.layers == 0:
        return base
    if recomputed >= base.layers:
        return full
    x = recomputed / base.layers
    return replace(base, **{f: getattr(base, f) + x * (getattr(full, f) - getattr(base, f)) for f in _BLENDED},
                   chains=None if base.chains is None else _blend_chains(base, full, x))


def _blend_chains(base: StageCost, full: StageCost, x: float):
    ours, theirs = base.chains or {}, full.chains or {}
    if set(ours) != set(theirs) or any(len(ours[k]) != len(theirs[k]) for k in ours):
        return base.chains
    return {k: tuple((c, t + x * (u - t)) for (c, t), (_, u) in zip(v, theirs[k])) for k, v in ours.items()}


def _stage_costs(schedule: Schedule, system: System, model: TransformerModel, ctx: Context,
                 parts: list[list[Part]], links: DeviceLinks, pipeline_system: System) -> list[tuple[StageCost, ...]]:
    """Every stage's ``StageCost`` (per-stage recomputation blended in: ``blend``; blocking
    sends: ``_blocking_sends`` on ``pipeline_system``, whose devices are the schedule's)."""
    plain = ctx.even  # the same stage costs whatever the layout
    recomputed = ctx.recompute_layers if ctx.recompute is not Recompute.FULL else None
    full = plain.replace(recompute=Recompute.FULL, recompute_modules=())  # what a recomputed layer costs
    stages = []
    for p, row in enumerate(parts):
        out = []
        for s, (first_layer, n, emb, head) in enumerate(row):
            link = links.of(schedule.placement.device(p, s))

            def priced(c: Context) -> StageCost:
                return stage_cost(model, system.device, c, n, first=emb, last=head,
                                  first_layer=first_layer, split_backward=schedule.split_backward, links=link)

            cost = priced(plain)
            if recomputed is not None and recomputed[s]:
                cost = blend(cost, priced(full), recomputed[s])
            out.append(cost if ctx.overlap_p2p else _blocking_sends(schedule, pipeline_system, p, s, cost))
        stages.append(tuple(out))
    return stages


def _blocking_sends(schedule: Schedule, system: System, p: int, s: int, cost: StageCost) -> StageCost:
    """``cost`` with its sends blocking (``Context.overlap_p2p`` False): Megatron-LM's
    blocking send/receive pairs hold the sender until its message is through, so a forward
    lasts its compute plus the Hockney time of its output to the next stage's device, a
    backward its compute plus its input gradient's to the previous one; the message is then
    part of the op, and what is left on the link is its latency (the bytes are zeroed). A
    stage whose neighbour is on its own device sends nothing."""
    device, last = schedule.placement.device, schedule.num_stages(p) - 1
    here = device(p, s)
    forward = system.message_time(here, device(p, s + 1), cost.fwd_message_bytes) if s < last else 0.0
    backward = system.message_time(here, device(p, s - 1), cost.bwd_message_bytes) if s > 0 else 0.0
    if forward == 0.0 and backward == 0.0:
        return cost
    chains = cost.chains
    if chains is not None:  # the send holds the compute stream: a pair pays it too
        added = {Kind.F: forward, Kind.B: backward}
        chains = {k: (*c, (False, added[k])) if added.get(k) else c for k, c in chains.items()}
    return replace(cost, forward_s=cost.forward_s + forward, backward_s=cost.backward_s + backward,
                   fwd_message_bytes=0 if forward else cost.fwd_message_bytes,
                   bwd_message_bytes=0 if backward else cost.bwd_message_bytes, chains=chains)


def _priced_stages(schedule: Schedule, system: System, model: TransformerModel, context: Context):
    """(context resolved, model applied, topology, stage parts, ``StageCost`` of every
    stage) of ``schedule_costs``."""
    ctx = context.resolved(model, schedule.num_microbatches)
    model = ctx.apply(model)
    ctx.check_experts(model)
    ctx.check_sequence(model)
    if ctx.recompute_layers is not None and len(ctx.recompute_layers) != schedule.num_stages(0):
        raise ValueError(f"recompute layers name {len(ctx.recompute_layers)} stages, the schedule has "
                         f"{schedule.num_stages(0)}")
    topology = Topology(system, ctx, schedule.num_devices)
    parts = stage_parts(schedule, model, ctx)
    for s, (r, (_, n, _, _)) in enumerate(zip(ctx.recompute_layers or (), parts[0])):
        if r > n:
            raise ValueError(f"recompute layers: stage {s} holds {n} layers, so at most {n} can recompute, got {r}")
    return ctx, model, topology, parts, _stage_costs(schedule, system, model, ctx, parts, DeviceLinks(topology, model),
                                                       topology.pipeline_system)


def stage_costs_of(schedule: Schedule, system: System, model: TransformerModel,
                   context: Context = Context()) -> tuple[tuple[StageCost, ...], ...]:
    """The ``StageCost`` of every stage of ``schedule`` (per pipeline), as ``schedule_costs``
    prices them, without the devices' tails, memory and replica reductions: what an op's
    time reads."""
    return tuple(_priced_stages(schedule, system, model, context)[4])


def schedule_costs(schedule: Schedule, system: System, model: TransformerModel,
                   context: Context = Context()) -> ScheduleCosts:
    """Cost every stage of ``schedule`` on ``system`` for ``model`` in the run ``context``.

    Each pipeline is the whole model, split by ``stage_parts`` (the context's layout, or
    ``partition(schedule.stage_work[p], model.num_layers)`` with the embedding on the
    first stage and the LM head on the last). A schedule device is ``context.tp x
    context.cp`` GPUs, the pipeline is replicated ``context.dp`` ways
    (``hardware.parallel``; default: one GPU, one replica). The context is resolved for
    the schedule's microbatches (``Context.resolved``: by default microbatches of
    ``global_batch / (dp * num_microbatches)`` sequences). Model parts held by stages of
    several pipelines (Chimera) are replicas and get a gradient all-reduce.
    """
    ctx, model, topology, parts, stages = _priced_stages(schedule, system, model, context)
    stage2device = schedule.placement.stage2device
    n = schedule.num_devices
    params, experts = [0] * n, [0] * n
    held: list[list[StageCost]] = [[] for _ in range(n)]
    on_device: list[list[Part]] = [[] for _ in range(n)]
    for p, row in enumerate(stages):
        for s, cost in enumerate(row):
            d = stage2device[p][s]
            params[d] += cost.params
            experts[d] += cost.expert_params
            held[d].append(cost)
            on_device[d].append(parts[p][s])
    tails = [_device_tail(topology, model, d, params[d], experts[d], held[d], schedule.split_backward)
             for d in range(n)]

    def reduce_time(devices, nbytes):  # replicas: tensor rank 0 of each device, per GPU
        return allreduce_time(system, [topology.gpu(0, 0, d) for d in devices], nbytes)

    ranges = [[(f, f + k) for f, k, _, _ in row] for row in parts]
    return ScheduleCosts(
        schedule_name=schedule.name, system=topology.pipeline_system, model=model, context=ctx,
        split_backward=schedule.split_backward, stage2device=stage2device, stages=tuple(stages),
        persistent_bytes=tuple(ctx.persistent_bytes(model, params[d], experts[d])
                               + buffer_bytes(model, ctx, on_device[d]) for d in range(n)),
        optimizer_s=tuple(t for _, t in tails),
        allreduces=_allreduces(model, stage2device, ranges, ctx, reduce_time),
        dp_sync_s=tuple(s for s, _ in tails),
    )
