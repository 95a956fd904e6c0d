"""Placement and Schedule: what runs where, and in which order.

A schedule is a placement ((pipeline, stage) -> device), the pipeline each microbatch takes,
and per device the order of its ops. Times are not part of a schedule; ``layout`` (table)
and the simulator (level 3) derive them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, Mapping

from .ops import Kind, Op


@dataclass(frozen=True)
class Placement:
    """``stage2device[p][s]`` is the device that runs stage ``s`` of pipeline ``p``."""

    stage2device: tuple[tuple[int, ...], ...]
    num_devices: int

    def __post_init__(self) -> None:
        if self.num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {self.num_devices}")
        if not self.stage2device or any(len(p) == 0 for p in self.stage2device):
            raise ValueError("placement needs at least one pipeline with at least one stage")
        for p, stages in enumerate(self.stage2device):
            for s, d in enumerate(stages):
                if not 0 <= d < self.num_devices:
                    raise ValueError(
                        f"placement puts stage {s} of pipeline {p} on device {d}; "
                        f"devices are 0..{self.num_devices - 1}"
                    )

    @property
    def num_pipelines(self) -> int:
        return len(self.stage2device)

    def num_stages(self, pipeline: int = 0) -> int:
        return len(self.stage2device[pipeline])

    def device(self, pipeline: int, stage: int) -> int:
        return self.stage2device[pipeline][stage]

    def stages_on(self, device: int) -> list[tuple[int, int]]:
        """(pipeline, stage) pairs held by ``device``."""
        return [
            (p, s)
            for p, stages in enumerate(self.stage2device)
            for s, d in enumerate(stages)
            if d == device
        ]


@dataclass(frozen=True)
class Schedule:
    """Placement + per-device order (+ which pipeline each microbatch takes).

    ``stage_work[p][s]`` is the relative amount of computation (share of the model's
    layers) of stage ``s`` of pipeline ``p``; equal by default. ``split_backward`` means
    every backward is split into B (input gradient) and W (weight gradient).
    """

    name: str
    placement: Placement
    microbatch2pipeline: tuple[int, ...]
    orders: tuple[tuple[Op, ...], ...]
    stage_work: tuple[tuple[float, ...], ...] | None = None
    split_backward: bool = False
    params: Mapping[str, object] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        pl = self.placement
        if len(self.orders) != pl.num_devices:
            raise ValueError(
                f"schedule {self.name!r} has orders for {len(self.orders)} devices, "
                f"placement has {pl.num_devices}"
            )
        if not self.microbatch2pipeline:
            raise ValueError("a schedule needs at least one microbatch")
        for m, p in enumerate(self.microbatch2pipeline):
            if not 0 <= p < pl.num_pipelines:
                raise ValueError(f"microbatch {m} takes pipeline {p}, which does not exist")
        if self.stage_work is None:
            object.__setattr__(
                self, "stage_work", tuple((1.0,) * len(s) for s in pl.stage2device)
            )
        if [len(w) for w in self.stage_work] != [len(s) for s in pl.stage2device]:
            raise ValueError("stage_work must give one value per stage of every pipeline")
        if any(w <= 0 for ws in self.stage_work for w in ws):
            raise ValueError("stage_work values must be > 0")
        expected = set(self.expected_ops())
        seen: set[Op] = set()
        for d, order in enumerate(self.orders):
            for op in order:
                if op in seen:
                    raise ValueError(f"op {op} appears twice in schedule {self.name!r}")
                if op not in expected:
                    raise ValueError(f"op {op} on device {d} is not part of schedule {self.name!r}")
                want = pl.device(op.pipeline, op.stage)
                if want != d:
                    raise ValueError(f"op {op} is ordered on device {d} but placed on device {want}")
                seen.add(op)
        missing = expected - seen
        if missing:
            first = min(missing, key=lambda o: (o.microbatch, o.pipeline, o.stage, o.kind.value))
            raise ValueError(f"op {first} is missing from schedule {self.name!r} ({len(missing)} missing)")

    # ---- shape ----------------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return self.placement.num_devices

    @property
    def num_microbatches(self) -> int:
        return len(self.microbatch2pipeline)

    @property
    def num_pipelines(self) -> int:
        return self.placement.num_pipelines

    def num_stages(self, pipeline: int = 0) -> int:
        return self.placement.num_stages(pipeline)

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return (Kind.F, Kind.B, Kind.W) if self.split_backward else (Kind.F, Kind.B)

    def expected_ops(self) -> Iterator[Op]:
        """Every op the schedule must contain: each kind, on each stage of each
        microbatch's pipeline."""
        for m, p in enumerate(self.microbatch2pipeline):
            for s in range(self.placement.num_stages(p)):
                for k in self.kinds:
                    yield Op(k, p, s, m)

    def device_of(self, op: Op) -> int:
        return self.placement.device(op.pipeline, op.stage)

    @cached_property
    def num_ops(self) -> int:
        return sum(len(o) for o in self.orders)

    def work(self, op: Op) -> float:
        """Relative work of the op's stage (see ``stage_work``)."""
        return self.stage_work[op.pipeline][op.stage]

    def activation_share(self, pipeline: int, stage: int) -> float:
        """Size of one activation of this stage relative to a stage holding 1/num_devices
        of the model's layers."""
        works = self.stage_work[pipeline]
        return works[stage] * self.num_devices / sum(works)

    def weight_copies(self) -> list[float]:
        """Per device, the weights held in units of 1/num_devices of the model."""
        copies = [0.0] * self.num_devices
        for p, stages in enumerate(self.placement.stage2device):
            for s, d in enumerate(stages):
                copies[d] += self.activation_share(p, s)
        return copies
