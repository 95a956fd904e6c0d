"""Costs: what every op, message, all-reduce and optimizer step of a schedule costs.

One ``Costs`` value feeds both the simulator and the CP-SAT model, so the two can be held
to the same number. ``solver.pricing`` produces them: idealized (unit ``"slots"``), from
hardware or a profile (unit ``"s"``); ``Costs.quantized`` turns seconds into integer ticks
of ``tick_s`` seconds (``Rounding`` up or down), which is what the CP-SAT model needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Mapping, Sequence

from pipetab.schedules.memory import check_weight_fraction
from pipetab.schedules.ops import Kind

if TYPE_CHECKING:
    from pipetab.hardware.system import HostLink, System
    from pipetab.schedules.ops import Op

StageKey = tuple[int, int]  # (pipeline, stage)


class Rounding(StrEnum):
    """How times in seconds become integer ticks: ``up`` (a schedule's quantized time is
    at least its real one: for searching) or ``down`` (a bound proven on the quantized
    problem holds for the real-valued one: for bounds)."""

    UP = "up"
    DOWN = "down"


def _ticks(t: float, tick_s: float, rounding: Rounding) -> int:
    return math.ceil(t / tick_s - 1e-9) if rounding is Rounding.UP else math.floor(t / tick_s + 1e-9)

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
    system: System | None = None  # its links decide (see message_time)

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
    ``chains[(kind, p, s)]``: the op's parts on the compute and communication streams
    (``hardware.overlap``; in the unit of ``op_time``, not rounded), for ops that
    communicate inside (expert parallelism); ``block_time`` runs a block of ops on them,
    compute slowed by ``comm_share`` (the share of the SMs the communication kernels hold)
    while communication runs.
    ``offload_fraction``: the share of every activation copied to host memory over each GPU's
    ``host_link`` after its forward and back before its backward
    (``hardware.Context.offload_activations``); ``solver.offload.simulated`` times it.
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
    rounding: Rounding = Rounding.UP  # how times were quantized to ticks
    weight_memory: Mapping[StageKey, float] = field(default_factory=dict)
    tick_slots: float = 1.0  # idealized costs: slots per integer time unit (the table's tick)
    chains: Mapping[tuple[Kind, int, int], tuple[tuple[bool, float], ...]] = field(default_factory=dict)
    comm_share: float = 0.0  # the SMs' share communication kernels hold (hardware.overlap)
    offload_fraction: float = 0.0  # of each activation, to host memory on a copy stream (solver.offload)
    host_link: HostLink | None = None  # each GPU's link to host memory (the system's)
    _blocks: dict = field(init=False, default_factory=dict, repr=False, compare=False)  # block_time's cache

    def duration(self, op: Op) -> float:
        return self.op_time[(op.kind, op.pipeline, op.stage)]

    def block_time(self, ops: Sequence[Op]) -> float:
        """Time of ``ops`` run as one block (``schedules.schedule``): the sum of their
        times when none communicates inside, else the two-stream time of their chains
        (``hardware.overlap``; a W joins its own B's chain), rounded as the op times are."""
        keys = [(op.kind, op.pipeline, op.stage) for op in ops]
        if not any(k in self.chains for k in keys):
            return sum(self.op_time[k] for k in keys)
        # a W joins its own B's chain; every other op is a chain of its own
        threads = tuple(i - 1 if op.kind is Kind.W and i and ops[i - 1][1:] == op[1:] else i
                        for i, op in enumerate(ops))
        cache_key = (tuple(keys), threads)
        if cache_key not in self._blocks:
            self._blocks[cache_key] = self._block_time(keys, threads)
        return self._blocks[cache_key]

    def _block_time(self, keys: list, threads: tuple[int, ...]) -> float:
        from pipetab.hardware.overlap import two_stream

        chains: dict[int, list[tuple[bool, float]]] = {}
        for key, thread in zip(keys, threads):
            chains.setdefault(thread, []).extend(self.chains.get(key) or ((False, self.op_time[key]),))
        t = two_stream(list(chains.values()), self.comm_share)
        return t if self.tick_s is None else max(int(self.rounding is Rounding.UP), _ticks(t, 1.0, self.rounding))

    def transfer(self, op: Op, src: int, dst: int) -> float:
        """Time for ``op``'s output to reach device ``dst`` from ``src`` (0 if equal)."""
        if src == dst:
            return 0
        nbytes = self.message_bytes.get((op.kind, op.pipeline, op.stage), 0.0)
        t = self.links.time(src, dst, nbytes)
        if not self.tick_s:
            return t
        return _ticks(t, self.tick_s, self.rounding)

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

    def quantized(self, tick_s: float, rounding: Rounding | str = Rounding.UP) -> "Costs":
        """These costs (in seconds) as integer ticks of ``tick_s`` seconds, rounded
        ``rounding`` (``Rounding``: up for searching, down for bounds of the real-valued
        problem)."""
        if self.unit != "s":
            raise ValueError(f"only costs in seconds can be quantized, these are in {self.unit}")
        if not tick_s > 0:
            raise ValueError(f"tick must be > 0 seconds, got {tick_s}")
        try:
            r = Rounding(rounding)
        except ValueError:
            raise ValueError(f"rounding must be 'up' or 'down', got {rounding!r}") from None

        def q(t: float) -> int:
            return _ticks(t, tick_s, r)

        return replace(
            self,
            unit="ticks",
            op_time={k: max(1 if r is Rounding.UP else 0, q(v)) for k, v in self.op_time.items()},
            chains={k: tuple((c, v / tick_s) for c, v in segs) for k, segs in self.chains.items()},
            replica_groups=tuple(replace(g, allreduce_time=q(g.allreduce_time)) for g in self.replica_groups),
            optimizer_time=tuple(q(t) for t in self.optimizer_time),
            tick_s=tick_s,
            rounding=r,
        )

    def default_tick(self, ticks_per_op: int) -> float:
        """A tick of 1/``ticks_per_op`` of the shortest op, in seconds: fine ticks
        (``EVALUATE_TICKS_PER_OP``) keep a fixed schedule's rounding error small; a search
        uses coarse ones (``SEARCH_TICKS_PER_OP``), as fine time resolution slows CP-SAT."""
        if self.unit != "s":
            raise ValueError(f"only costs in seconds have ticks, these are in {self.unit}")
        return min(self.op_time.values()) / ticks_per_op
