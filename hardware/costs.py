"""What a stage's ops and messages cost on a system (the paper's level-3 cost model).

One pricing stack, one floor per module: the GPUs and links of a run
(``hardware.parallel.Topology``) -> the links each stage's collectives use
(``hardware.links.StageLinks``) -> a stage's costs (this module: ``stage_cost``, in typed
steps: ``StageSpec`` -> ``StageWork``, ``StageComm`` -> op seconds -> ``StageCost``) -> a
schedule's costs (``hardware.pipeline.schedule_costs``) -> the solver's ``Costs``
(``solver.pricing.hardware_costs``). Per-layer formulas (FLOPs, activation memory, M_W,
traffic, message size) are in ``hardware.layer``.

Op time: roofline, ``max(F/(P*e_c(n)) + L_c, V_m/(BW_m*e_m) + L_m)`` (``Device.compute_time``,
``n`` the microbatch's tokens), plus the op's tensor-parallel collectives (not overlapped):
two all-reduces of ``c*b*s*h`` bytes per layer in F and in B (four in B with full
recomputation), one more in the first stage's F (embedding) and the last stage's B (head).

Messages between consecutive stages: ``b*s*h*c`` bytes over the pipeline link of the two
devices (``Topology.pipeline_link``; ``system.link(src, dst)`` with one GPU per stage),
Hockney time ``n/BW + L``; 0 s on one device.

Persistent memory of a GPU: its parameters' weights, gradients and optimizer state
(``Context.persistent_bytes``; ``params * bytes_per_param_state`` without ZeRO).

With context parallelism the collectives carry a rank's ``1/cp`` of the tokens and each
attention layer adds its exposed K/V exchange (``hardware.cp``); with ZeRO-3 each op adds
the exposed part of its weight gathers and gradient reductions (``hardware.zero3``).
Gradient all-reduces of replicated stages, optimizer steps and the data-parallel tail:
``hardware.pipeline``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.checks import check_count
from pipetab.schedules.ops import Kind

from .activations import check_modules
from .context import Context, Recompute
from .cp import layer_cp_comm
from .gemms import tokens
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
    stage_recompute,
    stage_weight_memory_bytes,
    weight_memory_bytes_per_layer,
)
from .links import NO_LINKS, StageLinks
from .parallel import ring_time
from .parts import stage_segments
from .system import Device, Link, System
from .zero3 import zero3_op_comm

if TYPE_CHECKING:
    from .model import TransformerModel

__all__ = [
    "StageCost", "StageSpec", "activation_bytes_per_layer", "allreduce_time", "attention_core_flops",
    "head_forward_flops", "layer_forward_flops", "layer_forward_traffic", "message_bytes", "optimizer_time",
    "persistent_bytes", "ring_allreduce_time", "stage_cost", "weight_memory_bytes_per_layer",
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
    inside each op, ``ep_comm_*`` those of the expert-parallel all-to-alls, ``cp_comm_*``
    the exposed part of the context-parallel K/V exchange (``hardware.cp``) and
    ``zero3_comm_s`` that of the ZeRO-3 gathers and reductions in F, B, W
    (``hardware.zero3``), all included in the op's time. ``stage_cost`` shares its
    values between calls: never change them.
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
    cp_comm_forward_s: float = 0.0
    cp_comm_backward_s: float = 0.0
    zero3_comm_s: tuple[float, float, float] = (0.0, 0.0, 0.0)

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


@dataclass(frozen=True)
class StageSpec:
    """Which part of the model a stage holds: ``layers`` layers from ``first_layer`` on,
    the embedding when ``first``, the LM head (and the MTP modules) when ``last``; whether
    the schedule splits its backward."""

    layers: int
    first: bool
    last: bool
    first_layer: int = 0
    split_backward: bool = False


@dataclass(frozen=True)
class StageWork:
    """FLOPs and memory traffic per GPU of a stage's F, B and W (0 for W unless split)."""

    flops_f: float
    flops_b: float
    flops_w: float
    traffic_f: float
    traffic_b: float
    traffic_w: float


@dataclass(frozen=True)
class StageComm:
    """Seconds of a stage's collectives per op: tensor-parallel (``tp_*``), expert-parallel
    all-to-alls (``ep_*``), the exposed context-parallel exchange (``cp_*``)."""

    tp_f: float
    tp_b: float
    ep_f: float
    ep_b: float
    cp_f: float
    cp_b: float


def stage_cost(model: TransformerModel, device: Device, ctx: Context, layers: int, *,
               first: bool, last: bool, first_layer: int = 0, split_backward: bool = False,
               links: StageLinks | None = None, tp_link: Link | None = None,
               moe_comm: tuple[float, float] = (0.0, 0.0), cp_link: Link | None = None,
               shard_links: tuple[Link | None, Link | None] = (None, None)) -> StageCost:
    """Costs of a stage of ``layers`` layers for one microbatch on one GPU of the run
    ``ctx`` (resolved: its microbatch size known) whose collectives use ``links``
    (``hardware.links``; or, given one by one, tensor-parallel collectives over
    ``tp_link``, the context-parallel exchange over ``cp_link``, ZeRO-3 collectives over
    ``shard_links`` (dense, expert) and ``moe_comm``, one MoE layer's (dispatch, combine)
    seconds, ``hardware.moe.moe_layer_comm``); ``first`` / ``last`` add the embedding / LM
    head (and the MTP modules). Formulas: ``hardware.layer`` and the module docstring.
    Where every layer is of one kind the first layer's index changes nothing, so stages of
    equal size share one computation."""
    if links is None:
        links = StageLinks(tp_link, cp_link, shard_links, moe_comm)
    elif (tp_link, cp_link, shard_links, moe_comm) != (NO_LINKS.tp, NO_LINKS.cp, NO_LINKS.shard, NO_LINKS.moe_comm):
        raise ValueError("give a stage's links either as links or one by one, not both")
    spec = StageSpec(layers, first, last, 0 if model.one_layer_kind else first_layer, split_backward)
    cost = _stage_cost(model, device, ctx, spec, links)
    if cost.first_layer == first_layer:
        return cost
    # the same cost at another first layer (one layer kind): kept beside the cost it copies, so
    # the key's id cannot be reused while the entry lives
    kept = _AT_LAYER.get((id(cost), first_layer))
    if kept is None or kept[0] is not cost:
        if len(_AT_LAYER) > 65536:
            _AT_LAYER.clear()
        kept = _AT_LAYER[(id(cost), first_layer)] = (cost, replace(cost, first_layer=first_layer))
    return kept[1]


_AT_LAYER: dict[tuple[int, int], tuple[StageCost, StageCost]] = {}


def _check_stage(model: TransformerModel, ctx: Context, layers: int, links: StageLinks) -> None:
    check_count("layers", layers, 0)
    ctx.check_experts(model)
    check_modules(model, ctx)
    if ctx.tp > 1 or ctx.cp > 1:
        ctx.check(model)
    for size, link, what in ((ctx.tp, links.tp, "tensor-parallel group"), (ctx.cp, links.cp, "context-parallel group")):
        if size > 1 and link is None:
            raise ValueError(f"a {what} of {size} GPUs needs the link its collectives use")


def _gemm_and_core(model: TransformerModel, ctx: Context, spec: StageSpec) -> tuple[float, float]:
    """Forward FLOPs of the stage's layers' GEMMs and of their attention cores."""
    moe_layers = model.moe_layers_in(spec.first_layer, spec.first_layer + spec.layers)
    dense_layers = spec.layers - moe_layers
    gemm = dense_layers * layer_gemm_flops(model, ctx) + (moe_layers * layer_gemm_flops(model, ctx, True)
                                                         if moe_layers else 0)
    return gemm, spec.layers * attention_core_flops(model, ctx)


def _stage_work(model: TransformerModel, ctx: Context, spec: StageSpec) -> StageWork:
    """FLOPs and traffic of the stage's ops: the backward twice the forward (plus the
    recomputed part; flash attention recomputes QK^T), split into B and W when asked."""
    layers, first, last, recompute = spec.layers, spec.first, spec.last, ctx.recompute
    flash = model.attention == "flash"
    moe_layers = model.moe_layers_in(spec.first_layer, spec.first_layer + layers)
    gemm, core = _gemm_and_core(model, ctx, spec)
    head = (head_forward_flops(model, ctx) + mtp_forward_flops(model, ctx)) if last else 0
    flops_f = gemm + core + head
    flash_extra = core // 2 if flash else 0  # the recomputed QK^T
    extra_f = {Recompute.NONE: 0, Recompute.SELECTIVE: 0 if flash else core, Recompute.FULL: gemm + core}[recompute]
    layer_v = (layers - moe_layers) * layer_forward_traffic(model, ctx) + (
        moe_layers * layer_forward_traffic(model, ctx, True) if moe_layers else 0)
    traffic_f = (layer_v + (head_forward_traffic(model, ctx) if last else 0)
                 + (embedding_forward_traffic(model, ctx) if first else 0))
    extra_v = layer_v if recompute is Recompute.FULL else 0
    modules_f, modules_v = stage_recompute(model, ctx, layers, spec.first_layer)
    extra_f, extra_v = extra_f + modules_f, extra_v + modules_v
    if spec.split_backward:
        return StageWork(flops_f, gemm + 2 * core + flash_extra + head + extra_f, gemm + head,
                         traffic_f, traffic_f + extra_v, traffic_f)
    return StageWork(flops_f, 2 * flops_f + flash_extra + extra_f, 0, traffic_f, 2 * traffic_f + extra_v, 0)


def _stage_comm(model: TransformerModel, device: Device, ctx: Context, spec: StageSpec,
                links: StageLinks) -> StageComm:
    """The collectives inside the stage's ops (module docstring); full recomputation runs
    the forward's again in the backward."""
    layers, first, last = spec.layers, spec.first, spec.last
    full = ctx.recompute is Recompute.FULL
    one = ring_time(message_bytes(model, ctx) // ctx.cp, ctx.tp, links.tp)  # one all-reduce of a CP rank's activation
    tp_f = one * (2 * layers + (1 if first else 0))
    tp_b = one * ((4 if full else 2) * layers + (1 if last else 0))
    a2a_layers = model.moe_layers_in(spec.first_layer, spec.first_layer + layers) + (model.mtp_layers if last else 0)
    ep_f = a2a_layers * (links.moe_comm[0] + links.moe_comm[1])
    ep_b = a2a_layers * 2 * links.moe_comm[1] + (ep_f if full or "moe" in ctx.recompute_modules else 0)
    cp_f, cp_b = layer_cp_comm(model, device, ctx, links.cp, attention_core_flops(model, ctx), tokens(model, ctx),
                               model.attention == "flash")
    attention_layers = layers + (model.mtp_layers if last else 0)
    return StageComm(tp_f, tp_b, ep_f, ep_b, attention_layers * cp_f, attention_layers * (cp_b + (cp_f if full else 0)))


def _kernel_segments(model: TransformerModel, device: Device, ctx: Context, spec: StageSpec) -> list[list[float]]:
    """The stage's F, B and W as kernel seconds (``hardware.parts``)."""
    return [stage_segments(model, device, ctx, spec.layers, first=spec.first, last=spec.last,
                           first_layer=spec.first_layer, kind=kind, split_backward=spec.split_backward)
            for kind in (Kind.F, Kind.B, Kind.W)]


def _op_seconds(model: TransformerModel, device: Device, ctx: Context, spec: StageSpec, work: StageWork,
                comm: StageComm, segments: list[list[float]] | None) -> tuple[float, float, float]:
    """Seconds of the stage's (F, B, W) without the all-to-alls and ZeRO-3 collectives:
    roofline of the work (or the kernels' seconds, ``segments``) plus the tensor-parallel
    collectives and the exposed context-parallel exchange."""
    n = tokens(model, ctx)
    if segments is not None:  # ops as their kernels; the FLOPs and traffic stay the model's
        compute_f, compute_b = sum(segments[0]) + comm.tp_f, sum(segments[1]) + comm.tp_b
        weight_s = sum(segments[2]) if spec.split_backward else 0.0
    else:
        compute_f = device.compute_time(work.flops_f, work.traffic_f, n) + comm.tp_f
        compute_b = device.compute_time(work.flops_b, work.traffic_b, n) + comm.tp_b
        weight_s = device.compute_time(work.flops_w, work.traffic_w, n) if spec.split_backward else 0.0
    return compute_f + comm.cp_f, compute_b + comm.cp_b, weight_s


def _stage_parts(model: TransformerModel, ctx: Context, spec: StageSpec, links: StageLinks,
                 segments: list[list[float]] | None) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The forward's and the backward's parts (``_moe_parts``, weighted by kernel seconds
    when ``segments``) for ``_stage_chains``."""
    moe_comm = links.moe_comm
    # full recomputation or the moe recompute module: the all-to-alls again
    again = moe_comm if ctx.recompute is Recompute.FULL or "moe" in ctx.recompute_modules else (0.0, 0.0)
    comm_bwd = (moe_comm[1] + again[0], moe_comm[1] + again[1])
    kernel: list[list[float] | None] = list(segments) if segments else [None, None]
    return (_weighted(_moe_parts(model, ctx, spec.first_layer, spec.layers, spec.last, moe_comm), kernel[0]),
            _weighted(_moe_parts(model, ctx, spec.first_layer, spec.layers, spec.last, comm_bwd), kernel[1]))


def _stage_chains(parts: tuple[list[tuple[float, float]], list[tuple[float, float]]], spec: StageSpec,
                  seconds: tuple[float, float, float]) -> dict[Kind, tuple[Segment, ...]]:
    """Each op's parts on the compute and communication streams (``StageCost.chains``)."""
    chains = {Kind.F: _chain(parts[0], seconds[0], reverse=False), Kind.B: _chain(parts[1], seconds[1], reverse=True)}
    if spec.split_backward:
        chains[Kind.W] = ((False, seconds[2]),)
    return chains


# The Context fields a stage's work, kernels, activations, parameters and collectives inside its
# ops read: all but the replica and batch fields (dp, pp, global_batch, zero, overlap,
# reshard_after_forward), which enter only its persistent bytes and ZeRO-3's collectives. Shapes
# that differ in those alone share one ``_StageCore``.
STAGE_READS = ("tp", "sequence_parallel", "microbatch_size", "seq_len", "recompute", "ep", "etp",
               "dispatch_precision", "routing_imbalance", "node_limit", "gemm_precision", "cp", "cp_comm", "layout",
               "recompute_layers", "recompute_modules", "activation_precision")


class _ByReads:
    """A context as the key of what reads only ``STAGE_READS`` of it (equal when those are)."""

    __slots__ = ("ctx", "key")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.key = tuple(getattr(ctx, f) for f in STAGE_READS)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ByReads) and self.key == other.key


@dataclass(frozen=True)
class _StageCore:
    """What ``_stage_cost`` computes from ``STAGE_READS`` alone: work, collectives, op seconds
    before ZeRO-3, parameters, memory, and the parts of the chains (with expert-parallel
    communication)."""

    work: StageWork
    comm: StageComm
    compute: tuple[float, float, float]
    params: int
    expert_params: int
    message: int
    activation: float
    weight_memory: float
    parts: tuple[list[tuple[float, float]], list[tuple[float, float]]] | None
    chains: dict[Kind, tuple[Segment, ...]] | None  # with ``compute`` (no exposed ZeRO-3 collective)


@lru_cache(maxsize=65536)
def _stage_core(model: TransformerModel, device: Device, reads: _ByReads, spec: StageSpec,
                links: StageLinks) -> _StageCore:
    """``_stage_cost``'s part that depends on the context's ``STAGE_READS`` and the stage's
    tensor-parallel, context-parallel and expert-parallel links only."""
    ctx = reads.ctx
    layers, first, last, first_layer = spec.layers, spec.first, spec.last, spec.first_layer
    work, comm = _stage_work(model, ctx, spec), _stage_comm(model, device, ctx, spec, links)
    segments = _kernel_segments(model, device, ctx, spec) if device.kernels else None
    parts = _stage_parts(model, ctx, spec, links, segments) if comm.ep_f > 0 else None
    activation = stage_activation_bytes(model, ctx, layers, first_layer)
    if last:
        activation += head_activation_bytes(model, ctx)
    compute = _op_seconds(model, device, ctx, spec, work, comm, segments)
    return _StageCore(work, comm, compute,
                      stage_params_per_gpu(model, layers, first, last, ctx, first_layer),
                      stage_expert_params_per_gpu(model, layers, last, ctx, first_layer),
                      message_bytes(model, ctx), activation, stage_weight_memory_bytes(model, ctx, layers, first_layer),
                      parts, None if parts is None else _stage_chains(parts, spec, compute))


@lru_cache(maxsize=65536)
def _stage_cost(model: TransformerModel, device: Device, ctx: Context, spec: StageSpec,
                links: StageLinks) -> StageCost:
    """``stage_cost`` of ``spec``: its work, collectives, op seconds (ZeRO-3's exposed
    gathers and reductions added), chains and memory; the part that reads only
    ``STAGE_READS`` shared (``_stage_core``)."""
    _check_stage(model, ctx, spec.layers, links)
    layers, first, last, first_layer = spec.layers, spec.first, spec.last, spec.first_layer
    core = _stage_core(model, device, _ByReads(ctx), spec, replace(links, shard=(None, None)))
    work, comm, (compute_f, compute_b, weight_s) = core.work, core.comm, core.compute
    params, expert_params = core.params, core.expert_params
    zero3 = zero3_op_comm(model, ctx, params, expert_params, links.shard, layers + first + last,
                          (compute_f, compute_b, weight_s), spec.split_backward)
    seconds = (compute_f + zero3[0], compute_b + zero3[1], weight_s + zero3[2])
    chains = core.chains if core.parts is None or not any(zero3) else _stage_chains(core.parts, spec, seconds)
    msg = core.message
    return StageCost(
        layers=layers, forward_s=seconds[0] + comm.ep_f, backward_s=seconds[1] + comm.ep_b, weight_s=seconds[2],
        fwd_message_bytes=0 if last else msg, bwd_message_bytes=0 if first else msg,
        activation_bytes=core.activation, persistent_bytes=ctx.persistent_bytes(model, params, expert_params),
        flops_forward=work.flops_f, flops_backward=work.flops_b, flops_weight=work.flops_w,
        traffic_forward=work.traffic_f, traffic_backward=work.traffic_b, traffic_weight=work.traffic_w,
        params=params, first_layer=first_layer, has_embedding=first, has_head=last,
        weight_memory_bytes=core.weight_memory,
        tp_comm_forward_s=comm.tp_f, tp_comm_backward_s=comm.tp_b, ep_comm_forward_s=comm.ep_f,
        ep_comm_backward_s=comm.ep_b, expert_params=expert_params, chains=chains,
        cp_comm_forward_s=comm.cp_f, cp_comm_backward_s=comm.cp_b, zero3_comm_s=zero3,
    )
