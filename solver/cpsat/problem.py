"""The problem the CP-SAT model solves: ops of given microbatches on pipelines of stages,
integer costs, devices, a fixed ``Placement`` or a ``PlacementFamily`` (``free``: the solver
chooses), and the ``Objective`` (``objectives`` says what each means to the model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING

from pipetab.schedules.checks import check_count
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.placements import PlacementFamily, family_of, family_placement, family_stages, split_microbatches
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.pricing import idealized_costs

if TYPE_CHECKING:
    from pipetab.solver.costs import Costs

StageKey = tuple[int, int]


class Objective(StrEnum):
    """What a schedule is judged by (module docstring; ``objectives`` for the model)."""

    MAKESPAN = "makespan"
    PERIOD = "period"
    MEMORY = "memory"  # least peak memory at a fixed makespan (``api.least_peak_memory``)


TIME_OBJECTIVES = (Objective.MAKESPAN, Objective.PERIOD)  # what ``search`` and ``bound`` minimize


def objective_of(value: object) -> Objective:
    if isinstance(value, str) and value in {o.value for o in Objective}:
        return Objective(value)
    raise ValueError(f"objective must be one of {', '.join(Objective)}, got {value!r}")


def _int(value: float, what: str) -> int:
    if value is None or not math.isfinite(value) or abs(value - round(value)) > 1e-9:
        raise ValueError(f"{what} is {value!r}; the CP-SAT model needs integer times — quantize the costs "
                         "first (Costs.quantized(tick_s))")
    return round(value)


@dataclass(frozen=True)
class Problem:
    """One instance: ``microbatch2pipeline[m]`` is microbatch m's pipeline, ``num_stages[p]``
    pipeline p's stages; ``stage_work`` is only carried into returned schedules."""

    num_devices: int
    microbatch2pipeline: tuple[int, ...]
    num_stages: tuple[int, ...]
    costs: Costs
    placement: Placement | PlacementFamily = PlacementFamily.LINEAR
    split_backward: bool = False
    stage_work: tuple[tuple[float, ...], ...] | None = None
    name: str = "problem"
    objective: Objective = Objective.MAKESPAN
    blocks: tuple[tuple[Op, ...], ...] = ()
    # the search may run a forward and a backward of different microbatches on one device as
    # one overlapped block (``pairing``; fixed placement, makespan objective, free orders)
    overlap_pairs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "objective", objective_of(self.objective))
        durations = {}
        for block in self.blocks:  # fixed orders only: a block's time on its first op, 0 on the rest
            durations[block[0]] = _int(self.costs.block_time(block), f"block {'&'.join(map(str, block))}")
            durations.update((op, 0) for op in block[1:])
        object.__setattr__(self, "_block_durations", durations)
        object.__setattr__(self, "microbatch2pipeline", tuple(self.microbatch2pipeline))
        object.__setattr__(self, "num_stages", tuple(self.num_stages))
        self._check_shape()
        self._check_placement()
        self._check_costs()
        self._check_pairs()
        if self.stage_work is not None:
            object.__setattr__(self, "stage_work", tuple(tuple(w) for w in self.stage_work))
            if tuple(len(w) for w in self.stage_work) != self.num_stages:
                raise ValueError("stage_work must give one value per stage of every pipeline")

    def _check_shape(self) -> None:
        D = self.num_devices
        check_count("num_devices", D)
        if not self.num_stages or any(n < 1 for n in self.num_stages):
            raise ValueError(f"num_stages must list >= 1 stage per pipeline, got {list(self.num_stages)}")
        if not self.microbatch2pipeline:
            raise ValueError("a problem needs at least one microbatch")
        for m, p in enumerate(self.microbatch2pipeline):
            if not 0 <= p < len(self.num_stages):
                raise ValueError(f"microbatch {m} takes pipeline {p}, which does not exist")
        empty = sorted(set(range(len(self.num_stages))) - set(self.microbatch2pipeline))
        if empty:
            raise ValueError(f"every pipeline needs a microbatch; pipeline {empty[0]} has none")

    def _check_placement(self) -> None:
        D, pl = self.num_devices, self.placement
        if isinstance(pl, Placement):
            if pl.num_devices != D:
                raise ValueError(f"placement has {pl.num_devices} devices, problem has {D}")
            if tuple(len(s) for s in pl.stage2device) != self.num_stages:
                raise ValueError("placement's stages per pipeline differ from num_stages")
            return
        if not isinstance(pl, str):
            raise ValueError(f"placement must be a Placement or one of {', '.join(PlacementFamily)}")
        family = family_of(pl)
        object.__setattr__(self, "placement", family)
        if family is not PlacementFamily.FREE:
            family_placement(family, D, self.num_stages)  # validates shapes

    def _check_pairs(self) -> None:
        if not self.overlap_pairs:
            return
        if self.blocks:
            raise ValueError("overlap_pairs is for a search; a problem with fixed blocks has fixed orders")
        if self.objective is not Objective.MAKESPAN:
            raise ValueError("overlap_pairs needs the makespan objective")
        if self.placement is PlacementFamily.FREE:
            raise ValueError("overlap_pairs needs a fixed placement")

    def _check_costs(self) -> None:
        c, D = self.costs, self.num_devices
        if not c.integral:
            raise ValueError(f"costs are in {c.unit!r} without a tick; the CP-SAT model needs integer times — "
                             "use Costs.quantized(tick_s)")
        if c.contention:
            raise ValueError("costs model link contention, which the CP-SAT model does not (yet): "
                             "build costs with contention=False")
        if len(c.persistent) != D or len(c.capacity) != D:
            raise ValueError(f"costs describe {len(c.capacity)} devices, problem has {D}")
        for p, s in self.stages:
            for k in self.kinds:
                if (k, p, s) not in c.op_time:
                    raise ValueError(f"costs have no time for {k} of stage {s} of pipeline {p}")
                if _int(c.op_time[(k, p, s)], f"time of {k} on stage {s} of pipeline {p}") < 1:
                    raise ValueError(f"time of {k} on stage {s} of pipeline {p} is 0 ticks; the CP-SAT model "
                                     "needs every op to take >= 1 tick — quantize with a smaller tick")
            if (p, s) not in c.activation:
                raise ValueError(f"costs have no activation size for stage {s} of pipeline {p}")
        for g in c.replica_groups:
            _int(g.allreduce_time, "an all-reduce time")
            for p, s in g.stages:
                if not (0 <= p < len(self.num_stages) and 0 <= s < self.num_stages[p]):
                    raise ValueError(f"replica group names stage {s} of pipeline {p}, which does not exist")
        for t in c.optimizer_time:
            _int(t, "an optimizer time")

    # ---- shape ------------------------------------------------------------------------
    @property
    def num_microbatches(self) -> int:
        return len(self.microbatch2pipeline)

    @property
    def num_pipelines(self) -> int:
        return len(self.num_stages)

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return (Kind.F, Kind.B, Kind.W) if self.split_backward else (Kind.F, Kind.B)

    @property
    def release_kind(self) -> Kind:
        """The op whose end frees an activation and finishes a stage's gradient."""
        return Kind.W if self.split_backward else Kind.B

    @cached_property
    def stages(self) -> tuple[StageKey, ...]:
        return tuple((p, s) for p, n in enumerate(self.num_stages) for s in range(n))

    @cached_property
    def num_ops(self) -> int:
        """How many ops (``len(ops)`` without making them)."""
        per = [n * len(self.kinds) for n in self.num_stages]
        return sum(per[p] for p in self.microbatch2pipeline)

    @cached_property
    def ops(self) -> tuple[Op, ...]:
        return tuple(Op(k, p, s, m) for m, p in enumerate(self.microbatch2pipeline)
                     for s in range(self.num_stages[p]) for k in self.kinds)

    @property
    def is_free(self) -> bool:
        return self.placement is PlacementFamily.FREE

    @property
    def family(self) -> PlacementFamily | None:
        """The placement family (None for a given ``Placement``)."""
        return self.placement if isinstance(self.placement, PlacementFamily) else None

    @cached_property
    def fixed_placement(self) -> Placement | None:
        """The placement when it is fixed (given or a family), None when free."""
        if isinstance(self.placement, Placement):
            return self.placement
        if self.is_free:
            return None
        return family_placement(self.placement, self.num_devices, self.num_stages)

    @property
    def dealt(self) -> Placement:
        """The stages dealt round-robin over the devices (each pipeline's stage s on device s mod D)."""
        return Placement(tuple(tuple(s % self.num_devices for s in range(n)) for n in self.num_stages),
                         self.num_devices)

    @property
    def placed(self) -> Placement:
        """``fixed_placement`` where the caller needs one; ``ValueError`` when it is free."""
        if self.fixed_placement is None:
            raise ValueError("this needs a fixed placement; the problem's placement is free")
        return self.fixed_placement

    def with_placement(self, placement: Placement | PlacementFamily) -> "Problem":
        return replace(self, placement=placement)

    def with_costs(self, costs: Costs) -> "Problem":
        return replace(self, costs=costs)

    # ---- integer costs ------------------------------------------------------------------
    def duration(self, op: Op) -> int:
        if self.blocks and op in self._block_durations:  # type: ignore[attr-defined]
            return self._block_durations[op]  # type: ignore[attr-defined]
        return round(self.costs.duration(op))

    def lag(self, pred: Op, src: int, dst: int) -> int:
        return _int(self.costs.transfer(pred, src, dst), f"transfer of {pred}")

    def cap(self, device: int) -> float | None:
        return self.costs.activation_capacity(device)

    def activations_fit(self, cap: float | None, p: int, s: int) -> int | None:
        """Activations of (p, s) that ``cap`` holds alone (None: no cap or no activation)."""
        a = self.costs.activation[(p, s)]
        if cap is None or a <= 0:
            return None
        return math.floor(cap / a + 1e-9)

    def weight_part(self, p: int, s: int) -> float:
        """M_W of stage (p, s) when the backward is split (0 without a split: B frees all)."""
        return self.costs.weight_part(p, s) if self.split_backward else 0.0

    def lifetimes(self, p: int, s: int) -> list[tuple[Kind, float]]:
        """An activation of (p, s) as parts live from its F's start to an op's end: [(B, M - M_W),
        (W, M_W)] with a split backward (empty parts left out), else [(B, M)]."""
        a = self.costs.activation[(p, s)]
        w = min(a, self.weight_part(p, s))
        parts = [(Kind.B, a - w), (Kind.W, w)] if self.split_backward else [(Kind.B, a)]
        return [(k, x) for k, x in parts if x > 1e-12]

    def chain_release(self, p: int, s: int) -> Kind:
        """The op whose end surely frees part of an activation of (p, s) and, when one part
        is all of it, the whole: W when a split backward keeps all of it until W, else B."""
        parts = self.lifetimes(p, s)
        return parts[-1][0] if len(parts) == 1 else Kind.B

    def window_shifts(self, p: int, s: int, cap: float | None) -> tuple[list[tuple[Kind, int]], bool]:
        """Under FIFO with ``cap`` for (p, s)'s activations alone: pairs (kind, k), release op
        ``kind`` of j ends before F of j + k starts, and whether they are the whole memory constraint
        of a one-stage device (exact). One part: (that op, k) for k the activations that fit, exact;
        two parts: (B, k) and (W, k_W), the least k_W with M + k_W M_W > cap — necessary, not exact."""
        k = self.activations_fit(cap, p, s)
        if not k or cap is None:
            return [], False
        parts = self.lifetimes(p, s)
        if len(parts) == 1:
            return [(parts[0][0], k)], True
        a = self.costs.activation[(p, s)]
        kw = math.floor((cap - a) / parts[1][1] + 1e-9) + 1
        return [(Kind.B, k), (Kind.W, kw)], False

    def memory_windows(self, p: int, s: int, cap: float | None) -> tuple[list[tuple[Op, Op]], bool]:
        """``window_shifts`` as op pairs (release of microbatch j, forward of j + k)."""
        shifts, exact = self.window_shifts(p, s, cap)
        mbs = self.pipeline_microbatches[p]
        pairs = [(Op(kind, p, s, mbs[j]), Op(Kind.F, p, s, mbs[j + sh]))
                 for kind, sh in shifts for j in range(len(mbs) - sh)]
        return pairs, exact

    @cached_property
    def pipeline_microbatches(self) -> dict[int, tuple[int, ...]]:
        """Each pipeline's microbatches, in order."""
        by: dict[int, list[int]] = {}
        for m, p in enumerate(self.microbatch2pipeline):
            by.setdefault(p, []).append(m)
        return {p: tuple(ms) for p, ms in by.items()}

    @cached_property
    def pipeline_counts(self) -> dict[int, int]:
        """Each pipeline's number of microbatches."""
        return {p: len(ms) for p, ms in self.pipeline_microbatches.items()}

    def optimizer(self, device: int) -> int:
        t = self.costs.optimizer_time
        return round(t[device]) if t else 0

    def matches(self, schedule: Schedule) -> str | None:
        """None when ``schedule`` is a schedule of this problem; otherwise why not."""
        if schedule.num_devices != self.num_devices:
            return f"{schedule.num_devices} devices, problem has {self.num_devices}"
        if tuple(schedule.microbatch2pipeline) != self.microbatch2pipeline:
            return "different microbatch-to-pipeline map"
        if tuple(schedule.num_stages(p) for p in range(schedule.num_pipelines)) != self.num_stages:
            return "different stages per pipeline"
        if schedule.split_backward != self.split_backward:
            return "different backward split"
        work = self.stage_work or tuple((1.0,) * n for n in self.num_stages)
        # stage_work is relative: layer counts (8, 8) and equal shares (1, 1) are one partition
        if any(abs(a / sum(w) - b / sum(sw)) > 1e-9 for w, sw in zip(work, schedule.stage_work)
               for a, b in zip(w, sw)):
            return "different stage partition"
        fixed = self.fixed_placement
        if fixed is not None and schedule.placement.stage2device != fixed.stage2device:
            return "different placement"
        return None

    def schedule(self, name: str, placement: Placement, orders, blocks: tuple[tuple[Op, ...], ...] = ()) -> Schedule:
        """A ``Schedule`` of this problem with the given placement, orders and blocks."""
        return Schedule(name, placement, self.microbatch2pipeline, tuple(tuple(o) for o in orders),
                        stage_work=self.stage_work, split_backward=self.split_backward, params={"source": "cpsat"},
                        blocks=blocks)

    def schedule_by_starts(self, name: str, placement: Placement, starts: dict[Op, int],
                           blocks: tuple[tuple[Op, ...], ...] = ()) -> Schedule:
        """The ``Schedule`` ordering each device's ops by start (ties: a block's forward, then by
        name), with ``blocks`` (overlapped pairs, sharing their start)."""
        orders: list[list[Op]] = [[] for _ in range(self.num_devices)]
        for op in sorted(starts, key=lambda o: (starts[o], o.kind is not Kind.F, str(o))):
            orders[placement.device(op.pipeline, op.stage)].append(op)
        return self.schedule(name, placement, orders, blocks)

    @classmethod
    def from_schedule(cls, schedule: Schedule, costs: Costs,
                      placement: Placement | PlacementFamily | None = None, blocks: bool = False) -> "Problem":
        """A known schedule's problem (placement fixed unless given); ``blocks``: as the simulator runs them."""
        return cls(schedule.num_devices, tuple(schedule.microbatch2pipeline),
                   tuple(schedule.num_stages(p) for p in range(schedule.num_pipelines)), costs,
                   schedule.placement if placement is None else placement, schedule.split_backward,
                   tuple(tuple(w) for w in schedule.stage_work), schedule.name,
                   blocks=schedule.blocks if blocks else ())


def idealized_problem(
    stages: int,
    microbatches: int,
    placement: Placement | PlacementFamily | str = PlacementFamily.LINEAR,
    *,
    forward: int = 1,
    backward: int = 2,
    weight: int = 1,
    comm: int = 0,
    activation_cap: float | None = None,
    waves: int = 1,
    chunks: int = 2,
    pipelines: int = 1,
    devices: int | None = None,
    stage_work: tuple[tuple[float, ...], ...] | None = None,
    split_backward: bool = False,
    weight_memory: float = 1.0,
    objective: Objective | str = Objective.MAKESPAN,
) -> Problem:
    """An idealized problem on ``stages`` devices (``devices`` when free), with the family's
    stages per pipeline (``family_stages``: ``waves``, ``chunks``, ``pipelines``) or a given
    ``Placement``'s; two pipelines split the microbatches half and half per unit; ``idealized_costs``."""
    check_count("stages", stages)
    check_count("microbatches", microbatches)
    if isinstance(placement, Placement):
        if pipelines not in (1, 2):
            raise ValueError(f"pipelines must be 1 or 2, got {pipelines!r}")
        D, label = placement.num_devices, "given"
        num_stages = tuple(len(st) for st in placement.stage2device)
    else:
        family = family_of(placement)
        D, label = devices or stages, str(family)
        num_stages = family_stages(family, stages, waves=waves, chunks=chunks, pipelines=pipelines)
    two = len(num_stages) == 2 or pipelines == 2
    mb2p = split_microbatches(2 if two else 1, stages, microbatches)
    if two and 1 not in mb2p:
        half = max(1, stages // 2)
        raise ValueError(f"microbatches must be at least {half + 1} for two pipelines on {stages} stages "
                         f"(each unit of {stages} sends its first {half} down, the rest up), got {microbatches}")
    costs = idealized_costs(D, num_stages, forward, backward, weight, comm, activation_cap, stage_work,
                            split_backward, weight_memory)
    return Problem(D, mb2p, num_stages, costs, placement, split_backward, stage_work,  # type: ignore[arg-type]
                   f"{label}-S{stages}-B{microbatches}", objective)  # type: ignore[arg-type]
