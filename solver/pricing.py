"""Pricing: every producer of ``Costs`` (``solver.costs``) in one place.

What ops cost on hardware is priced once, in ``hardware`` (``parallel.Topology`` ->
``links.StageLinks`` -> ``costs.stage_cost`` -> ``pipeline.schedule_costs``); this module
only turns that stack's ``ScheduleCosts`` (or a profile, or table slots) into the one
``Costs`` value the simulator and CP-SAT read: the solver sees only ``Costs``.

* idealized: ``slot_costs`` (a schedule's table slots), ``shape_slot_costs`` (the same for
  a shape), ``idealized_costs`` (a shape's stages sized by their share of the model, units
  of M_B: what the CP-SAT model's idealized problems use);
* hardware: ``hardware_costs`` (roofline op times and Hockney messages of a schedule on a
  system for a model, in a run ``hardware.Context``), ``check_hardware``;
* measured: ``profile_costs`` (a ``hardware.Profile``), and ``costs_profile`` back;
* layer splits: ``IdealizedLayers`` and ``HardwareLayers`` price any split of a model's
  layers into a shape's stages (``LayerCosts``), for the free stage partition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol, Sequence, cast

from pipetab.hardware.context import Context
from pipetab.hardware.costs import stage_cost
from pipetab.hardware.links import DeviceLinks
from pipetab.hardware.model import TransformerModel, partition
from pipetab.hardware.parallel import Topology
from pipetab.schedules.checks import check_count
from pipetab.schedules.memory import check_weight_fraction
from pipetab.schedules.ops import Kind
from pipetab.schedules.table import SlotDurations

from .costs import SEARCH_TICKS_PER_OP, Costs, Links, ReplicaGroup, Rounding

if TYPE_CHECKING:
    from pipetab.hardware.system import System
    from pipetab.schedules.schedule import Schedule

Layers = tuple[tuple[int, ...], ...]


# ---- idealized -------------------------------------------------------------------------------
def slot_costs(
    schedule: Schedule,
    slots: SlotDurations | None = None,
    comm_slots: int = 0,
    activation_cap: int | None = None,
    weight_memory: float = 1.0,
) -> Costs:
    """Idealized costs of ``schedule``: table slot durations, ``comm_slots`` slots per message
    between devices (``message_ticks``), each activation counts 1 (of which ``weight_memory`` is held until W
    when the backward is split), at most ``activation_cap`` live per device."""
    return shape_slot_costs(
        schedule.num_devices, tuple(schedule.num_stages(p) for p in range(schedule.num_pipelines)),
        slots, comm_slots, activation_cap, schedule.stage_work, schedule.split_backward, weight_memory,
        SlotDurations.tick_slots(schedule),
    )


def shape_slot_costs(
    num_devices: int,
    num_stages: tuple[int, ...],
    slots: SlotDurations | None = None,
    comm_slots: int = 0,
    activation_cap: int | None = None,
    stage_work: tuple[tuple[float, ...], ...] | None = None,
    split_backward: bool = False,
    weight_memory: float = 1.0,
    tick_slots: float = 1.0,
) -> Costs:
    """``slot_costs`` for a shape (devices, stages per pipeline, stage work) rather than a
    schedule — what a search over schedules of that shape needs."""
    slots = slots or SlotDurations()
    if not isinstance(comm_slots, int) or isinstance(comm_slots, bool) or comm_slots < 0:
        raise ValueError(f"comm slots must be an integer >= 0, got {comm_slots!r}")
    if activation_cap is not None and (
        not isinstance(activation_cap, int) or isinstance(activation_cap, bool) or activation_cap < 1
    ):
        raise ValueError(f"activation cap must be an integer >= 1, got {activation_cap!r}")
    fraction = check_weight_fraction(weight_memory)
    work = stage_work or tuple((1.0,) * n for n in num_stages)
    lightest = min(min(w) for w in work)
    kinds = (Kind.F, Kind.B, Kind.W) if split_backward else (Kind.F, Kind.B)
    op_time = {
        (k, p, s): slots.scaled(k, work[p][s], lightest)
        for p, n in enumerate(num_stages) for s in range(n) for k in kinds
    }
    return Costs(
        unit="slots",
        op_time=op_time,
        message_bytes={},
        links=Links(constant=message_ticks(comm_slots, tick_slots)),
        activation={(p, s): 1 for p, n in enumerate(num_stages) for s in range(n)},
        weight_memory={(p, s): fraction for p, n in enumerate(num_stages) for s in range(n)} if fraction < 1 else {},
        persistent=(0,) * num_devices,
        capacity=(activation_cap,) * num_devices,
        optimizer_time=(0,) * num_devices,
        tick_slots=tick_slots,
    )


def message_ticks(comm_slots: int, tick_slots: float) -> int:
    """A message of ``comm_slots`` slots in ticks of ``tick_slots`` slots, rounded as op
    times are (``SlotDurations.scaled``; at least 1 tick when it is not 0): on a placement
    whose device holds v stages a tick is 1/v slot, so a message of C slots lasts C v ticks."""
    if comm_slots == 0:
        return 0
    return max(1, math.floor(comm_slots / tick_slots + 0.5))


def idealized_costs(
    num_devices: int,
    num_stages: tuple[int, ...],
    forward: int = 1,
    backward: int = 2,
    weight: int = 1,
    comm: int = 0,
    activation_cap: float | None = None,
    stage_work: tuple[tuple[float, ...], ...] | None = None,
    split_backward: bool = False,
    weight_memory: float = 1.0,
) -> Costs:
    """Idealized costs for a problem shape (``shape_slot_costs``), with times in ticks of
    the lightest stage's share of the model (``tick_slots``) and every activation sized by
    its stage's share of the model (units of M_B, the activation of a stage holding
    1/num_devices of it): a device's work and memory per microbatch are the same for every
    placement. ``activation_cap``: at most that much (in M_B) live per device;
    ``weight_memory``: M_W / M of a split backward."""
    if activation_cap is not None and (isinstance(activation_cap, bool) or not isinstance(activation_cap, (int, float))
                                       or not math.isfinite(activation_cap) or activation_cap <= 0):
        raise ValueError(f"activation cap must be a number > 0 (units of M_B), got {activation_cap!r}")
    work = stage_work or tuple((1.0,) * n for n in num_stages)
    share = {(p, s): w[s] * num_devices / sum(w) for p, w in enumerate(work) for s in range(len(w))}
    costs = shape_slot_costs(num_devices, num_stages, SlotDurations(forward, backward, weight), comm, None,
                             stage_work, split_backward, weight_memory, min(share.values()))
    return replace(
        costs,
        activation=share,
        weight_memory={k: f * share[k] for k, f in costs.weight_memory.items()},
        capacity=(activation_cap,) * num_devices,
    )


# ---- hardware and measured -------------------------------------------------------------------
def check_hardware(system, model, num_devices: int, num_microbatches: int,
                   context: Context | None = None) -> tuple[System, TransformerModel, Context]:
    """The loaded (system, model) and ``context`` resolved for ``num_microbatches``
    microbatches per replica (``Context.resolved``), when ``num_devices`` pipeline devices
    of ``system`` can run them; ``ValueError`` (one sentence) otherwise. Cheap: call it
    before generating a schedule."""
    from pipetab.hardware import load_model, load_system

    system = load_system(system)
    model = load_model(model)
    system.check_devices(num_devices)
    ctx = (context or Context()).resolved(model, num_microbatches)
    if ctx.offload_activations and system.host_link is None:
        raise ValueError(f"offload activations needs a system with a host link (a [host_link] table: PCIe or "
                         f"NVLink-C2C to host memory); {system.name} has none")
    return system, ctx.apply(model), ctx


def hardware_costs(schedule: Schedule, system, model, context: Context | None = None, *,
                   contention: bool = False) -> Costs:
    """Costs of ``schedule`` on a system for a model (presets by name, TOML paths, or
    ``hardware`` objects) in the run ``context`` (``hardware.Context``: tensor and data
    parallelism, microbatch size, recomputation, ...; default one GPU per device, one
    replica, the model's batch): roofline op times, Hockney messages, activation and
    persistent bytes, replica all-reduces and per-device tails (see ``hardware.costs``);
    unit ``"s"``. Times, memory and capacity are per GPU; ``optimizer_time`` is each
    device's tail (exposed data-parallel reduction, optimizer step, ZeRO weight gather).
    Capacity is the device's usable memory. ``contention``: links carry one transfer at
    a time (the simulator's option)."""
    from pipetab.hardware import schedule_costs
    from pipetab.hardware.overlap import comm_share

    system, model, ctx = check_hardware(system, model, schedule.num_devices, schedule.num_microbatches, context)
    sc = schedule_costs(schedule, system, model, ctx)
    op_time, chains = _op_tables(sc.stages, schedule.split_backward)
    message, activation, weight_memory = {}, {}, {}
    for p, row in enumerate(sc.stages):
        for s, cost in enumerate(row):
            if schedule.split_backward:
                weight_memory[(p, s)] = cost.weight_memory_bytes
            message[(Kind.F, p, s)] = cost.fwd_message_bytes
            message[(Kind.B, p, s)] = cost.bwd_message_bytes
            activation[(p, s)] = cost.activation_bytes
    groups = tuple(ReplicaGroup(a.members, a.time_s) for a in sc.allreduces)
    return Costs(
        unit="s",
        op_time=op_time,
        message_bytes=message,
        links=Links(system=sc.system),
        activation=activation,
        weight_memory=weight_memory,
        persistent=tuple(float(b) for b in sc.persistent_bytes),
        capacity=(float(system.device.usable_memory_bytes),) * schedule.num_devices,
        replica_groups=groups,
        optimizer_time=tuple(sc.optimizer_s),
        contention=contention,
        chains=chains,
        comm_share=comm_share(system.device.ep_kernels, system.device.sm_count),
        offload_fraction=ctx.offload_activations,
        host_link=system.host_link,
    )


def _op_tables(stages, split_backward: bool) -> tuple[dict, dict]:
    """(op time, chains) per (kind, pipeline, stage) of the stages' ``StageCost``."""
    op_time, chains = {}, {}
    for p, row in enumerate(stages):
        for s, cost in enumerate(row):
            for kind, chain in (cost.chains or {}).items():
                chains[(kind, p, s)] = chain
            op_time[(Kind.F, p, s)] = cost.forward_s
            op_time[(Kind.B, p, s)] = cost.backward_s
            if split_backward:
                op_time[(Kind.W, p, s)] = cost.weight_s
    return op_time, chains


def hardware_op_times(schedule: Schedule, system, model, context: Context | None = None) -> tuple[dict, dict]:
    """(``Costs.op_time``, ``Costs.chains``) of ``hardware_costs`` alone: the stages priced,
    not the devices' tails, memory or replica reductions (what a bound on op times needs)."""
    from pipetab.hardware import stage_costs_of

    system, model, ctx = check_hardware(system, model, schedule.num_devices, schedule.num_microbatches, context)
    return _op_tables(stage_costs_of(schedule, system, model, ctx), schedule.split_backward)


def profile_costs(schedule: Schedule, profile, contention: bool = False) -> Costs:
    """Costs of ``schedule`` from measured op times (a ``hardware.Profile`` or a profile
    TOML path); unit ``"s"``.

    A profile stage is what one pipeline device does for a stage holding ``1/devices`` of
    the model; a schedule stage holding a share ``w`` of its pipeline's work (``stage_work``)
    takes ``w * devices`` of the device's times and memory (1 for one stage per device,
    ``1/v`` for interleaved chunks, ``1/2`` for V shapes) — the table's slot convention. A
    message between devices ``d`` and ``d+1`` (and from the last device back to device 0)
    takes device ``d``'s message time, any other pair the longest one. A schedule without a
    split backward takes ``T_B + T_W`` as its backward (as the Zero Bubble paper times
    1F1B from its profiles); a split-backward schedule needs a profile with ``T_W``. The profile's
    ``tail`` is each device's optimizer time; replicas (Chimera) get no all-reduce (a
    profile does not measure one). Capacity: the profile's ``memory_bytes`` (None: memory
    not checked)."""
    from pipetab.hardware.profile import load_profile

    profile = load_profile(profile)
    n = schedule.num_devices
    profile.check_devices(n)
    if schedule.split_backward and not profile.split_backward:
        raise ValueError(
            f"schedule {schedule.name!r} splits the backward but profile {profile.name!r} has no weight times"
        )
    op_time, activation, weight_memory = {}, {}, {}
    for p, works in enumerate(schedule.stage_work):
        total = sum(works)
        for s, w in enumerate(works):
            st = profile.stage(schedule.placement.device(p, s))
            share = w * n / total
            op_time[(Kind.F, p, s)] = st.forward_s * share
            full = st.backward_s + (st.weight_s or 0.0) if not schedule.split_backward else st.backward_s
            op_time[(Kind.B, p, s)] = full * share
            activation[(p, s)] = st.activation_bytes * share
            if schedule.split_backward:
                op_time[(Kind.W, p, s)] = st.weight_s * share
                if st.weight_memory_bytes is not None:
                    weight_memory[(p, s)] = st.weight_memory_bytes * share
    messages = [profile.stage(d).message_s for d in range(n)]
    pairs: dict[tuple[int, int], tuple[float, float]] = {}
    for d in range(n if n > 1 else 0):  # d -> d+1 first, then the wrap n-1 -> 0
        pairs.setdefault((min(d, (d + 1) % n), max(d, (d + 1) % n)), (messages[d], math.inf))
    return Costs(
        unit="s",
        op_time=op_time,
        message_bytes={},
        links=Links(latency=max(messages), pairs=pairs),
        activation=activation,
        weight_memory=weight_memory,
        persistent=tuple(float(profile.stage(d).persistent_bytes) for d in range(n)),
        capacity=(profile.memory_bytes,) * n,
        optimizer_time=tuple(profile.stage(d).tail_s for d in range(n)),
        contention=contention,
    )


def costs_profile(schedule: Schedule, costs: Costs, name: str = "predicted", **info):
    """The profile of ``costs`` (in seconds) for a schedule with one stage per device and
    one pipeline: what ``profile_costs`` turns back into the same op times, messages,
    memory and tails. ``info``: ``Profile`` fields such as ``microbatch_size``."""
    from pipetab.hardware.profile import Profile, StageProfile

    if costs.unit != "s":
        raise ValueError(f"a profile holds seconds, these costs are in {costs.unit}")
    n = schedule.num_devices
    if schedule.num_pipelines != 1 or schedule.num_stages(0) != n:
        raise ValueError("a profile of predicted costs needs one pipeline with one stage per device")
    if any(schedule.placement.device(0, s) != s for s in range(n)):
        raise ValueError("a profile of predicted costs needs stage s on device s")
    split = schedule.split_backward
    stages = []
    for d in range(n):
        nxt = (d + 1) % n
        stages.append(StageProfile(
            forward_s=costs.op_time[(Kind.F, 0, d)],
            backward_s=costs.op_time[(Kind.B, 0, d)],
            weight_s=costs.op_time[(Kind.W, 0, d)] if split else None,
            message_s=costs.links.time(d, nxt, costs.message_bytes.get((Kind.F, 0, d), 0.0)) if n > 1 else 0.0,
            activation_bytes=costs.activation[(0, d)],
            weight_memory_bytes=costs.weight_part(0, d) if split else None,
            persistent_bytes=costs.persistent[d],
            tail_s=costs.optimizer_time[d] if costs.optimizer_time else 0.0,
        ))
    capacity = {c for c in costs.capacity}
    memory = capacity.pop() if len(capacity) == 1 else None
    return Profile(name, tuple(stages), memory_bytes=memory, **info)


# ---- layer splits ----------------------------------------------------------------------------
def even_layers(num_layers: int, num_stages: Sequence[int]) -> Layers:
    """Each pipeline's layers split as evenly as ``hardware.model.partition`` splits them."""
    return tuple(partition((1.0,) * n, num_layers) for n in num_stages)


def with_layers(schedule: Schedule, layers: Layers) -> Schedule:
    """``schedule`` with its stages holding ``layers`` layers (its ``stage_work``)."""
    return replace(schedule, stage_work=tuple(tuple(float(x) for x in w) for w in layers))


class LayerCosts(Protocol):
    """Costs of a problem shape for any layer split."""

    num_layers: int

    def costs(self, layers: Layers) -> Costs: ...

    def op_ticks(self, kind: Kind, p: int, s: int, n: int) -> int:
        """Integer time of op ``kind`` of stage (p, s) when it holds ``n`` layers."""


@dataclass(frozen=True)
class IdealizedLayers:
    """Idealized costs per layer: a stage of n layers takes n times ``forward``,
    ``backward`` (input gradient when split), ``weight`` slots; each pipeline's last stage
    adds the LM head and loss, ``head`` slots to F and twice that to the backward (B, or B
    and W once each when split) — a GEMM's forward-to-backward ratio — and its first stage
    the embedding, ``embedding`` slots by the same rule. A slot is the unit of these times.
    Activations: a stage of n layers keeps n * num_devices / num_layers M_B (its share of
    the model; head and embedding keep none), ``weight_memory`` of it until W."""

    num_layers: int
    num_devices: int
    num_stages: tuple[int, ...]
    forward: int = 1
    backward: int = 2
    weight: int = 1
    head: int = 0
    embedding: int = 0
    comm: int = 0
    activation_cap: float | None = None
    split_backward: bool = False
    weight_memory: float = 1.0

    def __post_init__(self) -> None:
        check_count("layers", self.num_layers, max(self.num_stages))
        for what in ("forward", "backward", "weight"):
            check_count(f"{what} slots", getattr(self, what), 1)
        for what in ("head", "embedding", "comm"):
            check_count(f"{what} slots", getattr(self, what), 0)

    def op_ticks(self, kind: Kind, p: int, s: int, n: int) -> int:
        per = {Kind.F: self.forward, Kind.B: self.backward, Kind.W: self.weight}[kind]
        ends = (self.head if s == self.num_stages[p] - 1 else 0) + (self.embedding if s == 0 else 0)
        extra = ends if kind is Kind.F or self.split_backward else 2 * ends
        return n * per + extra

    def costs(self, layers: Layers) -> Costs:
        kinds = (Kind.F, Kind.B, Kind.W) if self.split_backward else (Kind.F, Kind.B)
        share = {(p, s): n * self.num_devices / self.num_layers for p, row in enumerate(layers)
                 for s, n in enumerate(row)}
        return Costs(
            unit="slots",
            op_time={(k, p, s): self.op_ticks(k, p, s, n) for p, row in enumerate(layers)
                     for s, n in enumerate(row) for k in kinds},
            message_bytes={},
            links=Links(constant=self.comm),
            activation=share,
            weight_memory={k: self.weight_memory * a for k, a in share.items()} if self.weight_memory < 1 else {},
            persistent=(0,) * self.num_devices,
            capacity=(self.activation_cap,) * self.num_devices,
            optimizer_time=(0,) * self.num_devices,
        )


@dataclass(frozen=True)
class HardwareLayers:
    """Hardware costs of the shape of ``schedule`` (any schedule of it: its placement,
    pipelines and microbatches) for any layer split (``hardware_costs`` in ``context``),
    quantized to ``tick_s`` (``rounding`` up for schedules, down for bounds of the
    real-valued problem); ``memory_cap`` replaces the device's memory. ``tick_s`` None:
    ``default_tick`` — the finer of the even split's search tick and the shortest op of a
    one-layer stage over ``ticks_per_layer``, so no op of any split rounds to 0 ticks."""

    schedule: Schedule
    system: object
    model: object
    context: Context = field(default_factory=Context)
    memory_cap: float | None = None
    rounding: Rounding = Rounding.DOWN
    tick_s: float | None = None
    ticks_per_layer: int = 2
    num_layers: int = field(init=False)
    _links: DeviceLinks = field(init=False, repr=False, compare=False)

    @property
    def hw_system(self) -> System:
        """``system`` as resolved on construction (a name or file becomes a ``System``)."""
        return cast("System", self.system)

    @property
    def hw_model(self) -> TransformerModel:
        """``model`` as resolved on construction (a name or file becomes a model)."""
        return cast("TransformerModel", self.model)

    @property
    def tick(self) -> float:
        """``tick_s`` as set on construction (``default_tick`` where not given)."""
        return cast("float", self.tick_s)

    def __post_init__(self) -> None:
        s = self.schedule
        system, model, ctx = check_hardware(self.system, self.model, s.num_devices, s.num_microbatches, self.context)
        object.__setattr__(self, "system", system)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "context", ctx)
        object.__setattr__(self, "rounding", Rounding(self.rounding))
        object.__setattr__(self, "num_layers", model.num_layers)
        if not model.one_layer_kind:
            # op_ticks prices a stage by its layer count alone: where dense and MoE layers
            # mix, what a stage holds depends on where the split puts it
            raise ValueError(f"a free layer partition needs a model whose layers are all of one kind; "
                             f"{model.name!r} mixes dense and mixture-of-experts layers")
        object.__setattr__(self, "_links", DeviceLinks(Topology(system, ctx, s.num_devices), model))
        if self.tick_s is None:
            object.__setattr__(self, "tick_s", self.default_tick())

    def real_costs(self, layers: Layers) -> Costs:
        """Costs in seconds of the split ``layers``."""
        costs = hardware_costs(with_layers(self.schedule, layers), self.system, self.model, self.context)
        if self.memory_cap is not None:
            costs = replace(costs, capacity=(self.memory_cap,) * len(costs.capacity))
        return costs

    def costs(self, layers: Layers) -> Costs:
        return self.real_costs(layers).quantized(self.tick, self.rounding)

    def _stage_seconds(self, p: int, s: int, n: int):
        """Stage (p, s) holding ``n`` layers, priced as ``hardware_costs`` prices it (the
        same links, all-to-all and ZeRO-3 gathers of its device)."""
        last = s == self.schedule.num_stages(p) - 1
        links = self._links.of(self.schedule.placement.device(p, s))
        return stage_cost(self.hw_model, self.hw_system.device, self.context, n, first=s == 0,
                          last=last, split_backward=self.schedule.split_backward, links=links)

    def op_ticks(self, kind: Kind, p: int, s: int, n: int) -> int:
        memo = self.__dict__.setdefault("_memo", {})
        key = (kind, p, s, n)
        if key not in memo:
            c = self._stage_seconds(p, s, n)
            t = {Kind.F: c.forward_s, Kind.B: c.backward_s, Kind.W: c.weight_s}[kind]
            q = t / self.tick
            memo[key] = max(1, math.ceil(q - 1e-9)) if self.rounding is Rounding.UP else math.floor(q + 1e-9)
        return memo[key]

    def default_tick(self) -> float:
        shape = self.schedule
        even = self.real_costs(even_layers(self.num_layers, [shape.num_stages(p) for p in range(shape.num_pipelines)]))
        kinds = (Kind.F, Kind.B, Kind.W) if shape.split_backward else (Kind.F, Kind.B)
        c = self._stage_seconds(0, 1 if shape.num_stages(0) > 2 else 0, 1)
        one = min({Kind.F: c.forward_s, Kind.B: c.backward_s, Kind.W: c.weight_s}[k] for k in kinds)
        return min(even.default_tick(SEARCH_TICKS_PER_OP), one / self.ticks_per_layer)
