"""The problem the CP-SAT model solves: ops of given microbatches on pipelines of stages,
their integer costs, the devices, and how much of the placement is fixed.

``placement`` is a fixed ``Placement``, a family name (``"linear"``: stage d on device d;
``"bidirectional"``: Chimera's down pipeline s -> s and up pipeline s -> S-1-s;
``"wave"``: Hanayo's 2WS stages zig-zagging over S devices; ``"v"``: 2S stages, device d
holding stages d and 2S-1-d as ZB-V and DualPipeV; ``"interleaved"``: vS stages, stage s
on device s mod S), or ``"free"`` (any device for every (pipeline, stage); the solver
chooses).

``objective``: ``"makespan"`` (one synchronous step, all-reduce and optimizer included) or
``"period"`` (the steady-state time of a repeated step without a global barrier: the
longest span of any device from its first op's start to its last op's end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property

from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.generators.chimera import chimera_placement
from pipetab.schedules.generators.hanayo import wave_placement
from pipetab.schedules.generators.interleaved import loop_placement
from pipetab.schedules.generators.linear import linear_placement
from pipetab.schedules.generators.zero_bubble import v_placement
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.costs import Costs, Links
from pipetab.solver.pricing import idealized_costs

FAMILIES = ("linear", "bidirectional", "wave", "v", "interleaved", "free")
OBJECTIVES = ("makespan", "period")

StageKey = tuple[int, int]


def family_placement(family: str, num_devices: int, num_stages: tuple[int, ...]) -> Placement:
    """The placement of a named family for ``num_devices`` devices and the given stage
    counts per pipeline; ``ValueError`` when the shapes do not fit the family."""
    D = num_devices
    if family == "linear":
        if num_stages != (D,):
            raise ValueError(
                f"linear placement needs one pipeline of {D} stages (one per device), got {list(num_stages)}"
            )
        return linear_placement(D)
    if family == "bidirectional":
        if num_stages != (D, D):
            raise ValueError(
                f"bidirectional placement needs two pipelines of {D} stages each, got {list(num_stages)}"
            )
        return chimera_placement(D)
    if family == "wave":
        if len(num_stages) != 1 or num_stages[0] % (2 * D):
            raise ValueError(
                f"wave placement needs one pipeline of 2*W*{D} stages (W waves), got {list(num_stages)}"
            )
        return wave_placement(D, num_stages[0] // (2 * D))
    if family == "v":
        if num_stages != (2 * D,):
            raise ValueError(f"v placement needs one pipeline of {2 * D} stages (two per device), got {list(num_stages)}")
        return v_placement(D)
    if family == "interleaved":
        if len(num_stages) != 1 or num_stages[0] % D or num_stages[0] < 2 * D:
            raise ValueError(
                f"interleaved placement needs one pipeline of v*{D} stages (v >= 2 chunks), got {list(num_stages)}"
            )
        return loop_placement(D, num_stages[0] // D)
    raise ValueError(f"placement must be one of {', '.join(FAMILIES)} or a Placement, got {family!r}")


def _int(value: float, what: str) -> int:
    if value is None or not math.isfinite(value) or abs(value - round(value)) > 1e-9:
        raise ValueError(
            f"{what} is {value!r}; the CP-SAT model needs integer times — quantize the costs "
            "first (Costs.quantized(tick_s))"
        )
    return int(round(value))


@dataclass(frozen=True)
class Problem:
    """One instance: ``microbatch2pipeline[m]`` is the pipeline of microbatch m,
    ``num_stages[p]`` the stages of pipeline p, ``costs`` their integer costs, ``placement``
    a ``Placement``, a family name or ``"free"``. ``stage_work`` (relative work per stage)
    is only carried into returned schedules."""

    num_devices: int
    microbatch2pipeline: tuple[int, ...]
    num_stages: tuple[int, ...]
    costs: Costs
    placement: Placement | str = "linear"
    split_backward: bool = False
    stage_work: tuple[tuple[float, ...], ...] | None = None
    name: str = "problem"
    objective: str = "makespan"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        object.__setattr__(self, "microbatch2pipeline", tuple(self.microbatch2pipeline))
        object.__setattr__(self, "num_stages", tuple(self.num_stages))
        D = self.num_devices
        if not isinstance(D, int) or isinstance(D, bool) or D < 1:
            raise ValueError(f"num_devices must be an integer >= 1, got {D!r}")
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
        if isinstance(self.placement, str):
            if self.placement != "free":
                family_placement(self.placement, D, self.num_stages)  # validates shapes
        elif isinstance(self.placement, Placement):
            if self.placement.num_devices != D:
                raise ValueError(
                    f"placement has {self.placement.num_devices} devices, problem has {D}"
                )
            if tuple(len(s) for s in self.placement.stage2device) != self.num_stages:
                raise ValueError("placement's stages per pipeline differ from num_stages")
        else:
            raise ValueError(f"placement must be a Placement or one of {', '.join(FAMILIES)}")
        c = self.costs
        if not c.integral:
            raise ValueError(
                f"costs are in {c.unit!r} without a tick; the CP-SAT model needs integer times — "
                "use Costs.quantized(tick_s)"
            )
        if c.contention:
            raise ValueError(
                "costs model link contention, which the CP-SAT model does not (yet): "
                "build costs with contention=False"
            )
        if len(c.persistent) != D or len(c.capacity) != D:
            raise ValueError(f"costs describe {len(c.capacity)} devices, problem has {D}")
        for p, n in enumerate(self.num_stages):
            for s in range(n):
                for k in self.kinds:
                    if (k, p, s) not in c.op_time:
                        raise ValueError(f"costs have no time for {k} of stage {s} of pipeline {p}")
                    if _int(c.op_time[(k, p, s)], f"time of {k} on stage {s} of pipeline {p}") < 1:
                        raise ValueError(
                            f"time of {k} on stage {s} of pipeline {p} is 0 ticks; the CP-SAT model "
                            "needs every op to take >= 1 tick — quantize with a smaller tick"
                        )
                if (p, s) not in c.activation:
                    raise ValueError(f"costs have no activation size for stage {s} of pipeline {p}")
        for g in c.replica_groups:
            _int(g.allreduce_time, "an all-reduce time")
            for p, s in g.stages:
                if not (0 <= p < len(self.num_stages) and 0 <= s < self.num_stages[p]):
                    raise ValueError(f"replica group names stage {s} of pipeline {p}, which does not exist")
        for t in c.optimizer_time:
            _int(t, "an optimizer time")
        if self.stage_work is not None:
            object.__setattr__(self, "stage_work", tuple(tuple(w) for w in self.stage_work))
            if tuple(len(w) for w in self.stage_work) != self.num_stages:
                raise ValueError("stage_work must give one value per stage of every pipeline")

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
    def ops(self) -> tuple[Op, ...]:
        return tuple(
            Op(k, p, s, m)
            for m, p in enumerate(self.microbatch2pipeline)
            for s in range(self.num_stages[p])
            for k in self.kinds
        )

    @property
    def is_free(self) -> bool:
        return isinstance(self.placement, str) and self.placement == "free"

    @property
    def placement_label(self) -> str:
        return self.placement if isinstance(self.placement, str) else "given"

    @cached_property
    def fixed_placement(self) -> Placement | None:
        """The placement when it is fixed (given or a family), None when free."""
        if isinstance(self.placement, Placement):
            return self.placement
        if self.placement == "free":
            return None
        return family_placement(self.placement, self.num_devices, self.num_stages)

    def with_placement(self, placement: Placement | str) -> "Problem":
        return replace(self, placement=placement)

    def with_costs(self, costs: Costs) -> "Problem":
        return replace(self, costs=costs)

    # ---- integer costs ------------------------------------------------------------------
    def duration(self, op: Op) -> int:
        return int(round(self.costs.duration(op)))

    def lag(self, pred: Op, src: int, dst: int) -> int:
        return _int(self.costs.transfer(pred, src, dst), f"transfer of {pred}")

    def cap(self, device: int) -> float | None:
        return self.costs.activation_capacity(device)

    def activations_fit(self, cap: float | None, p: int, s: int) -> int | None:
        """How many activations of stage (p, s) ``cap`` holds on their own (None: no cap,
        or the stage keeps no activation)."""
        a = self.costs.activation[(p, s)]
        if cap is None or a <= 0:
            return None
        return int(math.floor(cap / a + 1e-9))

    def weight_part(self, p: int, s: int) -> float:
        """M_W of stage (p, s) when the backward is split (0 without a split: B frees all)."""
        return self.costs.weight_part(p, s) if self.split_backward else 0.0

    def lifetimes(self, p: int, s: int) -> list[tuple[Kind, float]]:
        """An activation of stage (p, s) as parts live from its F's start to the end of an
        op: [(B, M - M_W), (W, M_W)] with a split backward (parts of size 0 left out),
        [(B, M)] without — ``schedules.memory``'s accounting."""
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
        """Under FIFO, with ``cap`` for stage (p, s)'s activations alone: pairs (kind, k)
        meaning the release op ``kind`` of microbatch j ends before F of microbatch j + k
        starts (else more than ``cap`` would be live), and whether these are the whole
        memory constraint of a device holding only this stage (exact). One part (B, or W
        holding all): (that op, k) for k = activations that fit, exact. Two parts
        [(B, M - M_W), (W, M_W)]: (B, k) and (W, k_W) for the least k_W with
        M + k_W M_W > cap — necessary, not exact."""
        k = self.activations_fit(cap, p, s)
        if not k:
            return [], False
        parts = self.lifetimes(p, s)
        if len(parts) == 1:
            return [(parts[0][0], k)], True
        a = self.costs.activation[(p, s)]
        kw = int(math.floor((cap - a) / parts[1][1] + 1e-9)) + 1
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
        return int(round(t[device])) if t else 0

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

    def schedule(self, name: str, placement: Placement, orders) -> Schedule:
        """A ``Schedule`` of this problem with the given placement and per-device orders."""
        return Schedule(
            name, placement, self.microbatch2pipeline, tuple(tuple(o) for o in orders),
            stage_work=self.stage_work, split_backward=self.split_backward,
            params={"source": "cpsat"},
        )

    def schedule_by_starts(self, name: str, placement: Placement, starts: dict[Op, int]) -> Schedule:
        """The ``Schedule`` whose per-device orders are the ops by start time (ties by
        name)."""
        orders: list[list[Op]] = [[] for _ in range(self.num_devices)]
        for op in sorted(starts, key=lambda o: (starts[o], str(o))):
            orders[placement.device(op.pipeline, op.stage)].append(op)
        return self.schedule(name, placement, orders)

    @classmethod
    def from_schedule(cls, schedule: Schedule, costs: Costs, placement: Placement | str | None = None) -> "Problem":
        """The problem a known schedule solves (its placement fixed unless ``placement``)."""
        return cls(
            schedule.num_devices,
            tuple(schedule.microbatch2pipeline),
            tuple(schedule.num_stages(p) for p in range(schedule.num_pipelines)),
            costs,
            schedule.placement if placement is None else placement,
            schedule.split_backward,
            tuple(tuple(w) for w in schedule.stage_work),
            schedule.name,
        )


def bidirectional_microbatches(stages: int, microbatches: int) -> tuple[int, ...]:
    """Chimera's split: in every unit of ``stages`` microbatches the first half go down
    (pipeline 0), the second half up (pipeline 1)."""
    half = max(1, stages // 2)
    return tuple(0 if m % stages < half else 1 for m in range(microbatches))


def idealized_problem(
    stages: int,
    microbatches: int,
    placement: Placement | str = "linear",
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
    objective: str = "makespan",
) -> Problem:
    """An idealized problem on ``stages`` devices (``devices`` for free placement).

    ``linear``: one pipeline of ``stages`` stages; ``bidirectional``: two pipelines of
    ``stages`` stages, microbatches split half/half per unit; ``wave``: one pipeline of
    2*waves*stages stages; ``v``: one pipeline of 2*stages stages; ``interleaved``: one
    of chunks*stages stages; ``free``: ``pipelines`` pipelines (1 or 2, split like
    bidirectional) of ``stages`` stages on ``devices`` (default ``stages``) devices.
    Costs: ``idealized_costs``."""
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise ValueError(f"stages must be an integer >= 1, got {stages!r}")
    if not isinstance(microbatches, int) or isinstance(microbatches, bool) or microbatches < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {microbatches!r}")
    D = devices or stages
    label = placement if isinstance(placement, str) else "given"
    mb2p = (0,) * microbatches
    if label == "bidirectional" or (label in ("free", "given") and pipelines == 2):
        num_stages = (stages, stages)
        mb2p = bidirectional_microbatches(stages, microbatches)
        if 1 not in mb2p:
            half = max(1, stages // 2)
            raise ValueError(f"microbatches must be at least {half + 1} for two pipelines on {stages} stages "
                             f"(each unit of {stages} sends its first {half} down, the rest up), got {microbatches}")
    elif label == "wave":
        if not isinstance(waves, int) or waves < 1:
            raise ValueError(f"waves must be an integer >= 1, got {waves!r}")
        num_stages = (2 * waves * stages,)
    elif label == "v":
        num_stages = (2 * stages,)
    elif label == "interleaved":
        if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 2:
            raise ValueError(f"chunks must be an integer >= 2, got {chunks!r}")
        num_stages = (chunks * stages,)
    else:
        if pipelines not in (1, 2):
            raise ValueError(f"pipelines must be 1 or 2, got {pipelines!r}")
        num_stages = (stages,)
    if isinstance(placement, Placement):
        D = placement.num_devices
        num_stages = tuple(len(s) for s in placement.stage2device)
    costs = idealized_costs(D, num_stages, forward, backward, weight, comm, activation_cap, stage_work,
                            split_backward, weight_memory)
    return Problem(D, mb2p, num_stages, costs, placement, split_backward, stage_work,
                   f"{label}-S{stages}-B{microbatches}", objective)


def profiled_problem(
    stages: int,
    microbatches: int,
    forward_s: float,
    backward_s: float,
    weight_s: float | None = None,
    comm_s: float = 0.0,
    *,
    tick_s: float,
    placement: Placement | str = "linear",
    activation_limit: float | None = None,
    weight_memory: float = 1.0,
    objective: str = "makespan",
    rounding: str = "up",
    chunks: int = 2,
) -> Problem:
    """A problem on measured op times in seconds — T_F, T_B (input gradient when
    ``weight_s`` is given, which splits the backward) and T_W of a stage holding 1/S of the
    model, a constant message time T_comm between devices — quantized to integer ticks of
    ``tick_s`` (``rounding="up"`` for schedules, ``"down"`` for bounds of the real-valued
    problem). Stages holding a share of the model take that share of the times.
    ``activation_limit``: per device, in M_B; ``weight_memory``: M_W / M."""
    for name, t in (("forward_s", forward_s), ("backward_s", backward_s), ("comm_s", comm_s),
                    ("weight_s", 1.0 if weight_s is None else weight_s), ("tick_s", tick_s)):
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0 \
                or (t == 0 and name != "comm_s"):
            raise ValueError(f"{name} must be a time in seconds > 0 (comm_s >= 0), got {t!r}")
    split = weight_s is not None
    shape = idealized_problem(stages, microbatches, placement, activation_cap=activation_limit, chunks=chunks,
                              split_backward=split, weight_memory=weight_memory, objective=objective)
    base = {Kind.F: forward_s, Kind.B: backward_s, Kind.W: weight_s}
    c = shape.costs
    op_time = {(k, p, s): base[k] * c.activation[(p, s)] for k, p, s in c.op_time}
    real = replace(c, unit="s", op_time=op_time, links=Links(constant=float(comm_s)), tick_slots=1.0)
    return replace(shape, costs=real.quantized(tick_s, rounding), name=f"profiled-{shape.name}")
