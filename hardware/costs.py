"""What a schedule's ops and messages cost on a system (the paper's level-3 cost model).

Notation: ``b`` sequences per microbatch, ``s`` sequence length, ``h`` hidden size, ``f`` MLP
hidden size (``4h`` by default), ``a`` heads, ``V`` vocabulary, ``L`` layers of the stage,
``c`` = ``model.bytes_per_param_compute`` (2 = bf16). All counts are exact integers; times
are seconds.

FLOPs (Megatron, Narayanan et al. 2021; a multiply-add = 2 FLOPs)
    forward of a layer   ``2*b*s*(4h^2 + 2hf) + 4*b*s^2*h``  (= ``24bsh^2 + 4bs^2h`` at f=4h)
    LM head (last stage) ``2*b*s*h*V``; the embedding lookup is 0 FLOPs
    full backward        ``2 x forward`` (input gradient + weight gradient, each ~ the forward)
    split backward       B (input gradient) = W (weight gradient) = ``1 x forward`` each
    recomputation adds to the backward (to B when split): ``"selective"`` the attention core
    ``4*b*s^2*h`` per layer, ``"full"`` the layers' whole forward (not the LM head).

Memory traffic (bytes moved to/from device memory; an [I] choice, not in the paper)
    forward of a layer   ``c*P_layer + c*b*s*(18h + 4f)``: weights read once, and every
    tensor of Korthikanti et al.'s activation accounting written once and read once
    (``2 x 34bsh`` bytes at f=4h, c=2) -- except the ``a*s*s`` attention scores, which a
    fused (FlashAttention-style) kernel keeps on chip.
    LM head              ``c*V*h + 2*c*b*s*V`` (weights; logits written and read by the loss)
    embedding            ``2*c*b*s*h`` (rows gathered, output written)
    backward             ``2 x forward`` (B = W = 1 x forward when split); ``"full"``
    recomputation adds the layers' forward traffic to B; ``"selective"`` adds none (fused).
    Reason: with the scores counted, a paper_gpt layer moves ~5.7x more activation bytes, and every
    ``*_fast_cp`` system would be memory-bound at 3.35 TB/s, hiding the compute scaling.

Op time: roofline, ``max(F/(P*e_c) + L_c, V_m/(BW_m*e_m) + L_m)`` (``Device.compute_time``).

Messages between consecutive stages: ``b*s*h*c`` bytes (activation forward, gradient
backward), Hockney time ``n/BW + L`` over ``system.link(src, dst)``; 0 s on one device.

Activation memory of one microbatch per layer (Korthikanti et al. 2022, 16-bit, no tensor
or sequence parallelism), scaled by ``c/2``:
    ``"none"``      ``s*b*(18h + 4f) + 5*a*s^2*b``  (= ``s*b*h*(34 + 5*a*s/h)`` at f=4h)
    ``"selective"`` ``s*b*(18h + 4f)``              (= ``34*s*b*h``)
    ``"full"``      ``2*s*b*h``                     (layer input only)
Embedding, LM-head and logit activations are not counted.

Weight part M_W of a layer's activation (a split backward, Zero Bubble accounting: B frees
``M - M_W``, W frees ``M_W``): what the weight-gradient GEMMs ``dW = X^T dY`` of the four
linear layers need between B and W -- their inputs ``X`` (QKV: ``h``, attention output
projection: ``h``, MLP up: ``h``, MLP down: ``f`` elements per token) and their output
gradients ``dY`` (``3h``, ``h``, ``f``, ``h``), ``c*s*b*(8h + 2f)`` bytes (= ``32sbh`` at
f=4h, c=2: the Zero Bubble paper's count), at most the layer's activation. The output
gradients are produced by B, not kept from F; counting them inside M is the paper's
convention. With full recomputation W's inputs are recomputed during B and M (``2sbh``)
caps M_W, which understates the memory between B and W.

Persistent memory of a stage: ``params * model.bytes_per_param_state`` (16 = mixed-precision
Adam: bf16 weight 2 + bf16 gradient 2 + fp32 master 4 + Adam m 4 + v 4).

Gradient all-reduce among R replicas (ring): ``2(R-1)/R * n/BW + 2(R-1)*L`` with
``n = params * model.bytes_per_grad``; the ring visits the devices in ascending order and
runs at the slowest hop's bandwidth and latency.

Optimizer step (Adam, memory-bound): reads and writes every persistent byte once,
``2 * bytes_per_param_state * params`` bytes, timed by the roofline with 0 FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Sequence

from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Schedule

from .model import TransformerModel, partition
from .system import Device, Link, System

RECOMPUTE = ("none", "selective", "full")


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")


def _check_mb(mb: int) -> None:
    if not isinstance(mb, int) or isinstance(mb, bool) or mb < 1:
        raise ValueError(f"microbatch size must be an integer >= 1 sequences, got {mb!r}")


# ---- per-layer formulas ----------------------------------------------------------------
def layer_forward_flops(model: TransformerModel, mb: int) -> int:
    """``2*b*s*(4h^2 + 2hf) + 4*b*s^2*h`` (= ``24bsh^2 + 4bs^2h`` at f=4h)."""
    _check_mb(mb)
    h, s, f = model.hidden, model.seq_len, model.ffn_hidden
    return 2 * mb * s * (4 * h * h + 2 * h * f) + 4 * mb * s * s * h  # type: ignore[operator]


def attention_core_flops(model: TransformerModel, mb: int) -> int:
    """``4*b*s^2*h``: the ``QK^T`` and ``softmax*V`` products of one layer (what selective
    recomputation recomputes)."""
    _check_mb(mb)
    return 4 * mb * model.seq_len ** 2 * model.hidden


def head_forward_flops(model: TransformerModel, mb: int) -> int:
    """LM head ``2*b*s*h*V``."""
    _check_mb(mb)
    return 2 * mb * model.seq_len * model.hidden * model.vocab


def layer_forward_traffic(model: TransformerModel, mb: int) -> int:
    """``c*P_layer + c*b*s*(18h + 4f)`` bytes (weights read; non-score intermediates
    written and read once)."""
    _check_mb(mb)
    c, h, s, f = model.bytes_per_param_compute, model.hidden, model.seq_len, model.ffn_hidden
    return c * model.layer_params + c * mb * s * (18 * h + 4 * f)  # type: ignore[operator]


def head_forward_traffic(model: TransformerModel, mb: int) -> int:
    """``c*V*h + 2*c*b*s*V`` bytes (weights read; logits written and read)."""
    _check_mb(mb)
    c = model.bytes_per_param_compute
    return c * model.head_params + 2 * c * mb * model.seq_len * model.vocab


def embedding_forward_traffic(model: TransformerModel, mb: int) -> int:
    """``2*c*b*s*h`` bytes (embedding rows gathered, output written)."""
    _check_mb(mb)
    return 2 * model.bytes_per_param_compute * mb * model.seq_len * model.hidden


def activation_bytes_per_layer(model: TransformerModel, mb: int, recompute: str = "none") -> int:
    """Bytes one layer keeps for the backward of one microbatch (Korthikanti et al. 2022,
    scaled by ``c/2``): ``"none"`` ``s*b*(18h+4f) + 5*a*s^2*b`` (= ``sbh(34 + 5as/h)``),
    ``"selective"`` ``s*b*(18h+4f)`` (= ``34sbh``), ``"full"`` ``2sbh``."""
    _check_mb(mb)
    _check_recompute(recompute)
    h, s, a, f = model.hidden, model.seq_len, model.heads, model.ffn_hidden
    if recompute == "full":
        half_bytes = 2 * s * mb * h
    else:
        half_bytes = s * mb * (18 * h + 4 * f)  # type: ignore[operator]
        if recompute == "none":
            half_bytes += 5 * a * s * s * mb
    return half_bytes * model.bytes_per_param_compute // 2


def weight_memory_bytes_per_layer(model: TransformerModel, mb: int, recompute: str = "none") -> int:
    """M_W of one layer: ``c*s*b*(8h + 2f)`` bytes (``32sbh`` at f=4h, c=2), the inputs and
    output gradients of its weight-gradient GEMMs, at most its activation (module docstring)."""
    _check_mb(mb)
    h, s, f = model.hidden, model.seq_len, model.ffn_hidden
    part = model.bytes_per_param_compute * s * mb * (8 * h + 2 * f)  # type: ignore[operator]
    return min(part, activation_bytes_per_layer(model, mb, recompute))


def message_bytes(model: TransformerModel, mb: int) -> int:
    """Bytes of one activation (forward) or its gradient (backward) between stages:
    ``b*s*h*c``."""
    _check_mb(mb)
    return mb * model.seq_len * model.hidden * model.bytes_per_param_compute


def persistent_bytes(model: TransformerModel, params: int) -> int:
    """``params * bytes_per_param_state`` (weights, gradients, optimizer state)."""
    return params * model.bytes_per_param_state


# ---- collectives and optimizer ------------------------------------------------------------
def ring_allreduce_time(nbytes: float, num_replicas: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` among ``R`` replicas over ``link``:
    ``2(R-1)/R * nbytes/BW + 2(R-1)*L``; 0 for one replica."""
    if not isinstance(num_replicas, int) or isinstance(num_replicas, bool) or num_replicas < 1:
        raise ValueError(f"num_replicas must be an integer >= 1, got {num_replicas!r}")
    if nbytes < 0:
        raise ValueError(f"all-reduce size must be >= 0 bytes, got {nbytes!r}")
    r = num_replicas
    if r == 1:
        return 0.0
    return 2 * (r - 1) / r * nbytes / link.bandwidth + 2 * (r - 1) * link.latency_s


def allreduce_time(system: System, devices: Sequence[int], nbytes: float) -> float:
    """Ring all-reduce among distinct ``devices`` (ascending ring, slowest hop's bandwidth
    and latency); 0 for a single device."""
    ring = sorted(set(devices))
    if len(ring) < 2:
        return 0.0
    hops = [system.link(a, b) for a, b in zip(ring, ring[1:] + ring[:1]) if a != b]
    slowest = Link(min(l.bandwidth for l in hops), max(l.latency_s for l in hops))
    return ring_allreduce_time(nbytes, len(ring), slowest)


def optimizer_time(device: Device, model: TransformerModel, params: int) -> float:
    """Adam step over ``params`` parameters, memory-bound: roofline with 0 FLOPs and
    ``2 * bytes_per_param_state * params`` bytes (all state read and written once)."""
    return device.compute_time(0, 2 * model.bytes_per_param_state * params)


# ---- one stage -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StageCost:
    """Costs of one stage for one microbatch.

    ``backward_s`` is the full backward, or only the input gradient (B) when the schedule
    splits the backward; ``weight_s`` is then the weight gradient (W), else 0.
    ``fwd_message_bytes`` is what the stage sends to the next stage per microbatch (0 on the
    last stage), ``bwd_message_bytes`` what it sends to the previous one (0 on the first).
    ``activation_bytes`` (M) is allocated at the start of F and freed at the end of B;
    when the backward is split, ``weight_memory_bytes`` (M_W) of it only at the end of W.
    Layers ``first_layer .. first_layer + layers - 1`` of the model.
    """

    layers: int
    forward_s: float
    backward_s: float
    weight_s: float
    fwd_message_bytes: int
    bwd_message_bytes: int
    activation_bytes: int
    persistent_bytes: int
    flops_forward: int
    flops_backward: int = 0
    flops_weight: int = 0
    traffic_forward: int = 0
    traffic_backward: int = 0
    traffic_weight: int = 0
    params: int = 0
    first_layer: int = 0
    has_embedding: bool = False
    has_head: bool = False
    weight_memory_bytes: int = 0

    @property
    def layer_range(self) -> tuple[int, int]:
        """``(first, stop)`` of the stage's layers."""
        return self.first_layer, self.first_layer + self.layers


def stage_cost(model: TransformerModel, device: Device, mb: int, layers: int, *,
               first: bool, last: bool, first_layer: int = 0, recompute: str = "none",
               split_backward: bool = False) -> StageCost:
    """Costs of a stage of ``layers`` layers for a microbatch of ``mb`` sequences; ``first``
    / ``last`` add the embedding / LM head (see the module docstring for the formulas)."""
    _check_mb(mb)
    _check_recompute(recompute)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 0:
        raise ValueError(f"layers must be an integer >= 0, got {layers!r}")
    layer_f = layers * layer_forward_flops(model, mb)
    flops_f = layer_f + (head_forward_flops(model, mb) if last else 0)
    layer_v = layers * layer_forward_traffic(model, mb)
    traffic_f = (layer_v + (head_forward_traffic(model, mb) if last else 0)
                 + (embedding_forward_traffic(model, mb) if first else 0))
    extra_f = {"none": 0, "selective": layers * attention_core_flops(model, mb), "full": layer_f}[recompute]
    extra_v = layer_v if recompute == "full" else 0
    if split_backward:
        flops_b, flops_w = flops_f + extra_f, flops_f
        traffic_b, traffic_w = traffic_f + extra_v, traffic_f
        weight_s = device.compute_time(flops_w, traffic_w)
    else:
        flops_b, flops_w = 2 * flops_f + extra_f, 0
        traffic_b, traffic_w = 2 * traffic_f + extra_v, 0
        weight_s = 0.0
    params = model.stage_params(layers, first, last)
    msg = message_bytes(model, mb)
    return StageCost(
        layers=layers,
        forward_s=device.compute_time(flops_f, traffic_f),
        backward_s=device.compute_time(flops_b, traffic_b),
        weight_s=weight_s,
        fwd_message_bytes=0 if last else msg,
        bwd_message_bytes=0 if first else msg,
        activation_bytes=layers * activation_bytes_per_layer(model, mb, recompute),
        persistent_bytes=persistent_bytes(model, params),
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
        weight_memory_bytes=layers * weight_memory_bytes_per_layer(model, mb, recompute),
    )


# ---- a whole schedule ------------------------------------------------------------------------
@dataclass(frozen=True)
class AllReduce:
    """One gradient all-reduce between stages that hold the same part of the model.

    ``members`` are the (pipeline, stage) pairs holding layers ``layers = (start, stop)``
    (plus the embedding / LM head when flagged); ``devices`` their distinct devices.
    ``time_s`` is the ring all-reduce of ``nbytes = params * bytes_per_grad`` (0 when all
    members sit on one device). It can start once every member's last backward (W when
    split) has finished, and must end before the optimizer step of those devices.
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
    ``persistent_bytes`` (sum over the stages it holds, each replica a separate copy) and
    ``optimizer_s``; ``allreduces`` the gradient all-reduces of replicated model parts.
    """

    schedule_name: str
    system: System
    model: TransformerModel
    recompute: str
    microbatch_size: int
    split_backward: bool
    stage2device: tuple[tuple[int, ...], ...]
    stages: tuple[tuple[StageCost, ...], ...]
    persistent_bytes: tuple[int, ...]
    optimizer_s: tuple[float, ...]
    allreduces: tuple[AllReduce, ...]

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
            f"max persistent {max(self.persistent_bytes) / 2**30:.3g} GiB/device"
        )


def _allreduces(system: System, model: TransformerModel, stage2device, ranges) -> tuple[AllReduce, ...]:
    """Group the model's units (embedding, layers 0..L-1, LM head) by the tuple of stages
    holding them (one per pipeline); consecutive units with the same holders form one
    group; groups held by more than one stage are all-reduced."""
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
    units = [(-1, emb)] + list(enumerate(holders_of_layer)) + [(num_layers, head)]
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
        params = model.stage_params(len(layer_units), has_emb, has_head)
        devices = tuple(sorted({stage2device[p][s] for p, s in holders}))
        nbytes = params * model.bytes_per_grad
        out.append(AllReduce(holders, devices, (start, stop), has_emb, has_head, params,
                             nbytes, allreduce_time(system, devices, nbytes)))
    return tuple(out)


def schedule_costs(schedule: Schedule, system: System, model: TransformerModel,
                   recompute: str = "none") -> ScheduleCosts:
    """Cost every stage of ``schedule`` on ``system`` for ``model``.

    Each pipeline is the whole model: its layers are ``partition(schedule.stage_work[p],
    model.num_layers)``; its first stage holds the embedding, its last the LM head. The
    microbatch size is ``global_batch / num_microbatches``. Model parts held by stages of
    several pipelines (Chimera) are replicas and get a gradient all-reduce.
    """
    _check_recompute(recompute)
    system.check_devices(schedule.num_devices)
    mb = model.microbatch_size(schedule.num_microbatches)
    stage2device = schedule.placement.stage2device
    stages, ranges = [], []
    for p, works in enumerate(schedule.stage_work):
        counts = partition(works, model.num_layers)
        starts = [0, *accumulate(counts)]
        ranges.append([(starts[s], starts[s + 1]) for s in range(len(counts))])
        stages.append(tuple(
            stage_cost(model, system.device, mb, n, first=s == 0, last=s == len(counts) - 1,
                       first_layer=starts[s], recompute=recompute,
                       split_backward=schedule.split_backward)
            for s, n in enumerate(counts)
        ))
    per_device_params = [0] * schedule.num_devices
    for p, row in enumerate(stages):
        for s, cost in enumerate(row):
            per_device_params[stage2device[p][s]] += cost.params
    return ScheduleCosts(
        schedule_name=schedule.name,
        system=system,
        model=model,
        recompute=recompute,
        microbatch_size=mb,
        split_backward=schedule.split_backward,
        stage2device=stage2device,
        stages=tuple(stages),
        persistent_bytes=tuple(persistent_bytes(model, n) for n in per_device_params),
        optimizer_s=tuple(optimizer_time(system.device, model, n) for n in per_device_params),
        allreduces=_allreduces(system, model, stage2device, ranges),
    )
