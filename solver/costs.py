"""Costs: what every op, message, all-reduce and optimizer step of a schedule costs.

One ``Costs`` value feeds both the simulator and the CP-SAT model, so the two can be held
to the same number. Costs are either

* idealized (``slot_costs``): ops take their table ticks (``tick_slots`` slots each, 1
  unless a device holds several stages), a message between two devices a fixed number of
  ticks, activations count 1 each; unit ``"slots"``;
* from hardware (``hardware_costs``): roofline compute and Hockney messages in seconds,
  activations and persistent memory in bytes; unit ``"s"``;
* quantized (``Costs.quantized``): any of the above in integer ticks of ``tick_s``
  seconds, durations rounded up, which is what the CP-SAT model needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping

from pipetab.schedules.memory import check_weight_fraction
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Schedule
from pipetab.schedules.table import SlotDurations

StageKey = tuple[int, int]  # (pipeline, stage)

SEARCH_TICKS_PER_OP = 20  # default resolution for CP-SAT search and bounds on hardware costs
EVALUATE_TICKS_PER_OP = 1000  # default resolution for CP-SAT evaluation of a fixed schedule


@dataclass(frozen=True)
class Links:
    """Message time between two devices: ``latency + nbytes / bandwidth`` (Hockney), or a
    constant (``constant`` not None, idealized slots). Per device-pair overrides in
    ``pairs`` (unordered pair -> (latency, bandwidth))."""

    latency: float = 0.0
    bandwidth: float = math.inf
    constant: float | None = None
    pairs: Mapping[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    system: object | None = None  # a hardware.System: its links decide (see message_time)

    def time(self, src: int, dst: int, nbytes: float) -> float:
        if src == dst:
            return 0.0
        if self.constant is not None:
            return self.constant
        if self.system is not None:
            return self.system.message_time(src, dst, nbytes)
        lat, bw = self.pairs.get((min(src, dst), max(src, dst)), (self.latency, self.bandwidth))
        return lat + nbytes / bw

    @property
    def uniform(self) -> bool:
        """Whether every pair of distinct devices has the same link."""
        if self.system is not None:
            return self.system.devices_per_node is None and not self.system.links
        return self.constant is not None or not self.pairs


@dataclass(frozen=True)
class ReplicaGroup:
    """Stages holding the same layers on different devices (Chimera's two directions):
    their gradients are all-reduced after the last backward of all members."""

    stages: tuple[StageKey, ...]
    allreduce_time: float


@dataclass(frozen=True)
class Costs:
    """Costs of one schedule structure (pipelines x stages); see module docstring.

    ``op_time[(kind, p, s)]``: duration of that op for one microbatch.
    ``message_bytes[(kind, p, s)]``: size of the message the op's output sends to the next
    op of its chain on another stage (F: s -> s+1, B: s -> s-1).
    ``activation[(p, s)]``: memory one live activation of that stage takes (M).
    ``weight_memory[(p, s)]``: the part M_W of it that a split backward keeps from B's end
    until W's end (``schedules.memory``); a stage not listed keeps all of it (M_W = M).
    ``persistent[d]``: memory always held by device d (weights, gradients, optimizer).
    ``capacity[d]``: memory device d has in total (None: unlimited).
    """

    unit: str
    op_time: Mapping[tuple[Kind, int, int], float]
    message_bytes: Mapping[tuple[Kind, int, int], float]
    links: Links
    activation: Mapping[StageKey, float]
    persistent: tuple[float, ...]
    capacity: tuple[float | None, ...]
    replica_groups: tuple[ReplicaGroup, ...] = ()
    optimizer_time: tuple[float, ...] = ()
    tick_s: float | None = None
    contention: bool = False
    rounding: str = "up"  # how times were quantized to ticks: "up" or "down"
    weight_memory: Mapping[StageKey, float] = field(default_factory=dict)
    tick_slots: float = 1.0  # idealized costs: slots per integer time unit (the table's tick)

    def duration(self, op: Op) -> float:
        return self.op_time[(op.kind, op.pipeline, op.stage)]

    def transfer(self, op: Op, src: int, dst: int) -> float:
        """Time for ``op``'s output to reach device ``dst`` from ``src`` (0 if equal)."""
        if src == dst:
            return 0
        nbytes = self.message_bytes.get((op.kind, op.pipeline, op.stage), 0.0)
        t = self.links.time(src, dst, nbytes)
        if not self.tick_s:
            return t
        return math.ceil(t / self.tick_s - 1e-9) if self.rounding == "up" else math.floor(t / self.tick_s + 1e-9)

    def weight_part(self, pipeline: int, stage: int) -> float:
        """M_W of stage (pipeline, stage): what its activation keeps from B's end to W's end
        when the backward is split (the whole activation unless ``weight_memory`` says less)."""
        key = (pipeline, stage)
        return self.weight_memory.get(key, self.activation[key])

    def with_weight_fraction(self, fraction: float) -> "Costs":
        """Same costs with M_W = ``fraction`` x M on every stage (1.0: held until W)."""
        f = check_weight_fraction(fraction)
        return replace(self, weight_memory={k: f * a for k, a in self.activation.items()})

    def activation_capacity(self, device: int) -> float | None:
        """Memory left for activations on ``device`` (None: unlimited)."""
        cap = self.capacity[device]
        return None if cap is None else cap - self.persistent[device]

    @property
    def integral(self) -> bool:
        """Whether every time is a whole number (what the CP-SAT model needs)."""
        return self.tick_s is not None or self.unit == "slots"

    def with_activation_cap(self, cap: int | None) -> "Costs":
        """Same costs with every device limited to ``cap`` live activations of size 1
        (idealized costs) — ``None`` lifts the limit."""
        return replace(self, capacity=tuple(None if cap is None else cap + p for p in self.persistent))

    def quantized(self, tick_s: float, rounding: str = "up") -> "Costs":
        """These costs (in seconds) as integer ticks of ``tick_s`` seconds.

        ``rounding="up"``: every time rounded up, so a schedule's quantized makespan is an
        upper bound of its real-valued one (for searching). ``rounding="down"``: every time
        rounded down, so a lower bound proven on the quantized problem is a lower bound of
        the real-valued problem (for bounds)."""
        if self.unit != "s":
            raise ValueError(f"only costs in seconds can be quantized, these are in {self.unit}")
        if not tick_s > 0:
            raise ValueError(f"tick must be > 0 seconds, got {tick_s}")
        if rounding not in ("up", "down"):
            raise ValueError(f"rounding must be 'up' or 'down', got {rounding!r}")

        def q(t: float) -> int:
            return math.ceil(t / tick_s - 1e-9) if rounding == "up" else math.floor(t / tick_s + 1e-9)

        return replace(
            self,
            unit="ticks",
            op_time={k: max(1 if rounding == "up" else 0, q(v)) for k, v in self.op_time.items()},
            replica_groups=tuple(replace(g, allreduce_time=q(g.allreduce_time)) for g in self.replica_groups),
            optimizer_time=tuple(q(t) for t in self.optimizer_time),
            tick_s=tick_s,
            rounding=rounding,
        )

    def default_tick(self, ticks_per_op: int) -> float:
        """A tick of 1/``ticks_per_op`` of the shortest op, in seconds: fine ticks
        (``EVALUATE_TICKS_PER_OP``) keep a fixed schedule's rounding error small; a search
        uses coarse ones (``SEARCH_TICKS_PER_OP``), as fine time resolution slows CP-SAT."""
        if self.unit != "s":
            raise ValueError(f"only costs in seconds have ticks, these are in {self.unit}")
        return min(self.op_time.values()) / ticks_per_op


def slot_costs(
    schedule: Schedule,
    slots: SlotDurations | None = None,
    comm_slots: int = 0,
    activation_cap: int | None = None,
    weight_memory: float = 1.0,
) -> Costs:
    """Idealized costs of ``schedule``: table slot durations, ``comm_slots`` per message
    between devices, each activation counts 1 (of which ``weight_memory`` is held until W
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
        links=Links(constant=comm_slots),
        activation={(p, s): 1 for p, n in enumerate(num_stages) for s in range(n)},
        weight_memory={(p, s): fraction for p, n in enumerate(num_stages) for s in range(n)} if fraction < 1 else {},
        persistent=(0,) * num_devices,
        capacity=(activation_cap,) * num_devices,
        optimizer_time=(0,) * num_devices,
        tick_slots=tick_slots,
    )


def check_hardware(system, model, num_devices: int, num_microbatches: int, dp: int = 1,
                   microbatch_size: int | None = None):
    """The loaded (system, model) when ``num_devices`` devices of ``system`` can run
    ``num_microbatches`` equal microbatches of ``model``'s global batch on each of ``dp``
    data-parallel replicas (unless ``microbatch_size`` is given); ``ValueError`` (one
    sentence) otherwise. Cheap: call it before generating a schedule."""
    from pipetab.hardware import load_model, load_system

    system = load_system(system)
    model = load_model(model)
    system.check_devices(num_devices)
    if microbatch_size is None:
        model.microbatch_size(num_microbatches * dp)
    return system, model


def hardware_costs(
    schedule: Schedule,
    system,
    model,
    recompute: str = "none",
    contention: bool = False,
    *,
    parallel=None,
    microbatch_size: int | None = None,
) -> Costs:
    """Costs of ``schedule`` on a system for a model (presets by name, TOML paths, or
    ``hardware`` objects): roofline op times, Hockney messages, activation and persistent
    bytes, replica all-reduces and per-device tails (see ``hardware.costs``); unit ``"s"``.

    ``parallel`` (a ``hardware.Parallel``): each schedule device is a tensor-parallel group
    replicated for data parallelism on the system's GPUs; times, memory and capacity are
    per GPU, and ``optimizer_time`` is each device's tail (exposed data-parallel
    reduction, optimizer step, ZeRO weight gather). ``microbatch_size`` sequences (default
    ``global_batch / (dp * microbatches)``). Capacity is the device's usable memory."""
    from pipetab.hardware import schedule_costs

    dp = 1 if parallel is None else parallel.dp
    system, model = check_hardware(system, model, schedule.num_devices, schedule.num_microbatches,
                                   dp=dp, microbatch_size=microbatch_size)
    sc = schedule_costs(schedule, system, model, recompute=recompute, parallel=parallel,
                        microbatch_size=microbatch_size)
    op_time, message, activation, weight_memory = {}, {}, {}, {}
    for p, row in enumerate(sc.stages):
        for s, cost in enumerate(row):
            op_time[(Kind.F, p, s)] = cost.forward_s
            op_time[(Kind.B, p, s)] = cost.backward_s
            if schedule.split_backward:
                op_time[(Kind.W, p, s)] = cost.weight_s
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
    )


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
