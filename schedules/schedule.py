"""Placement and Schedule: what runs where, and in which order.

A schedule is a placement ((pipeline, stage) -> device), the pipeline each microbatch takes,
and per device the order of its ops. Times are not part of a schedule; ``layout`` (table)
and the simulator (level 3) derive them.

Underneath, a schedule holds its ops as arrays (``schedules.arrays``) in device order;
``orders`` (tuples of ``Op``) is built from them on first use. Generators may give either.

Blocks: ops that run as one unit (``Schedule.blocks``) — an overlapped forward-backward
pair (torch's ``OVERLAP_F_B``, DualPipe's F&B: one microbatch's forward and another's
backward interleaved on the GPU's compute and communication streams) with or without the
backward's W, or a full backward (B and its W) that sends its input gradient only when
both are done. A block is consecutive in its device's order; it starts when the device is
free and every input of its ops has arrived, and all its ops end together, after the
block's duration (``hardware.overlap``: between the longest stream and the sum of the
parts; the sum when nothing is communicated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator, Mapping, Sequence

import numpy as np

from .arrays import KIND_CODES, OpArrays, Orders, data_predecessors_of, frozen
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


@dataclass(frozen=True, init=False)
class Schedule:
    """Placement + per-device order (+ which pipeline each microbatch takes).

    ``orders[d]`` is device d's ops in order: any sequence of ``Op`` sequences, kept as
    ``arrays.Orders`` (``Schedule.from_arrays`` takes the arrays directly).
    ``stage_work[p][s]`` is the relative amount of computation (share of the model's
    layers) of stage ``s`` of pipeline ``p``; equal by default. ``split_backward`` means
    every backward is split into B (input gradient) and W (weight gradient). Checked on
    construction: each op of every microbatch's chain exactly once, on the device its
    stage is placed on.

    The constructor takes wider types than it keeps (any order sequences, any
    microbatch and stage-work sequences, no stage work), so it is written out: the fields
    hold the normalized values.
    """

    name: str
    placement: Placement
    microbatch2pipeline: tuple[int, ...]
    orders: Orders
    stage_work: tuple[tuple[float, ...], ...]
    split_backward: bool
    params: Mapping[str, object] = field(compare=False)
    blocks: tuple[tuple[Op, ...], ...] = ()

    def __init__(
        self,
        name: str,
        placement: Placement,
        microbatch2pipeline: Sequence[int],
        orders: Orders | Sequence[Sequence[Op]],
        stage_work: Sequence[Sequence[float]] | None = None,
        split_backward: bool = False,
        params: Mapping[str, object] | None = None,
        blocks: Sequence[Sequence[Op]] = (),
    ) -> None:
        pl = placement
        put = object.__setattr__  # frozen: the fields are set once, here
        put(self, "name", name)
        put(self, "placement", placement)
        put(self, "split_backward", split_backward)
        put(self, "params", {} if params is None else params)
        orders = orders if isinstance(orders, Orders) else Orders.from_ops(orders)
        put(self, "orders", orders)
        put(self, "microbatch2pipeline", tuple(int(p) for p in microbatch2pipeline))
        if len(orders) != pl.num_devices:
            raise ValueError(
                f"schedule {self.name!r} has orders for {len(orders)} devices, "
                f"placement has {pl.num_devices}"
            )
        if not self.microbatch2pipeline:
            raise ValueError("a schedule needs at least one microbatch")
        for m, p in enumerate(self.microbatch2pipeline):
            if not 0 <= p < pl.num_pipelines:
                raise ValueError(f"microbatch {m} takes pipeline {p}, which does not exist")
        work = tuple((1.0,) * len(s) for s in pl.stage2device) if stage_work is None else stage_work
        put(self, "stage_work", tuple(tuple(w) for w in work))
        if [len(w) for w in self.stage_work] != [len(s) for s in pl.stage2device]:
            raise ValueError("stage_work must give one value per stage of every pipeline")
        if any(w <= 0 for ws in self.stage_work for w in ws):
            raise ValueError("stage_work values must be > 0")
        _check_ops(self)
        put(self, "blocks", tuple(tuple(Op(*op) for op in b) for b in blocks))
        if self.blocks:
            _check_blocks(self)

    def with_blocks(self, blocks: Sequence[Sequence[Op]], name: str | None = None) -> "Schedule":
        """This schedule with ``blocks`` instead of its own (``()``: every op alone), named
        ``name`` when given."""
        return Schedule(self.name if name is None else name, self.placement, self.microbatch2pipeline, self.orders,
                        self.stage_work, self.split_backward, self.params, blocks)

    @cached_property
    def block_members(self) -> tuple[np.ndarray, np.ndarray]:
        """(first, member) op indices of every block member after the first, in device
        order: ``member`` runs within the block that ``first`` opens."""
        heads = self.block_heads
        sizes = np.array([len(b) - 1 for b in self.blocks], np.int64)
        firsts = np.repeat(heads, sizes)
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        members = firsts + 1 + np.arange(len(firsts)) - starts  # a block's ops follow its first
        return firsts, members

    @cached_property
    def block_patterns(self) -> tuple[np.ndarray, list[tuple[Op, ...]]]:
        """(pattern of every block, the distinct patterns): a block's ops with each
        microbatch renumbered by its first appearance in the block — blocks of one
        pattern take the same time, so costs are worked out once per pattern."""
        ids: dict[tuple[Op, ...], int] = {}
        out = []
        for block in self.blocks:
            seen: dict[int, int] = {}
            canon = tuple(op._replace(microbatch=seen.setdefault(op.microbatch, len(seen))) for op in block)
            out.append(ids.setdefault(canon, len(ids)))
        return np.array(out, np.int64), list(ids)

    @cached_property
    def block_heads(self) -> np.ndarray:
        """Index (in device order) of every block's first op, in the order of ``blocks``."""
        return _locate(self, [b[0] for b in self.blocks]) if self.blocks else np.zeros(0, np.int64)

    @classmethod
    def from_arrays(
        cls,
        name: str,
        placement: Placement,
        microbatch2pipeline: Sequence[int],
        ops: OpArrays,
        offsets: Sequence[int] | np.ndarray,
        stage_work: Sequence[Sequence[float]] | None = None,
        split_backward: bool = False,
        params: Mapping[str, object] | None = None,
        blocks: Sequence[Sequence[Op]] = (),
    ) -> "Schedule":
        """The schedule whose device d runs ``ops[offsets[d]:offsets[d+1]]`` in that order."""
        return cls(name, placement, tuple(microbatch2pipeline), Orders(ops, offsets), stage_work,
                   split_backward, dict(params or {}), blocks)

    @property
    def ops(self) -> OpArrays:
        """Every op, in device order (device 0's order, then device 1's, ...)."""
        return self.orders.ops

    @property
    def offsets(self) -> np.ndarray:
        """Device d's ops are ``ops[offsets[d]:offsets[d+1]]``."""
        return self.orders.offsets

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

    @property
    def num_ops(self) -> int:
        return len(self.ops)

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

    # ---- arrays (per op, in device order) ---------------------------------------------
    @cached_property
    def stage_base(self) -> np.ndarray:
        """Flat stage ids: stage s of pipeline p is ``stage_base[p] + s``."""
        return np.cumsum([0] + [len(s) for s in self.placement.stage2device], dtype=np.int64)

    @cached_property
    def stage_keys(self) -> tuple[tuple[int, int], ...]:
        """(pipeline, stage) of every flat stage id."""
        return tuple((p, s) for p, stages in enumerate(self.placement.stage2device) for s in range(len(stages)))

    @cached_property
    def stage_device(self) -> np.ndarray:
        """Device of every flat stage id."""
        return np.array([d for stages in self.placement.stage2device for d in stages], np.int64)

    @cached_property
    def device(self) -> np.ndarray:
        """Device of every op."""
        return frozen(np.repeat(np.arange(self.num_devices), np.diff(self.offsets)), np.int64)

    @cached_property
    def stage_ids(self) -> np.ndarray:
        """Flat stage id of every op."""
        return frozen(self.stage_base[self.ops.pipeline] + self.ops.stage, np.int64)

    @cached_property
    def codes(self) -> np.ndarray:
        """``3 * stage id + kind`` of every op: index into per-(stage, kind) tables
        (see ``stage_kind_keys``)."""
        return frozen(self.stage_ids * 3 + self.ops.kind, np.int64)

    def stage_kind_keys(self) -> list[tuple[Kind, int, int]]:
        """(kind, pipeline, stage) of every code 0 .. 3 * stages - 1."""
        return [(k, p, s) for p, s in self.stage_keys for k in (Kind.F, Kind.B, Kind.W)]

    @cached_property
    def pred(self) -> np.ndarray:
        """Index of every op's data predecessor (-1: none): F(s) after F(s-1); B(s) after
        B(s+1), or after F(s) on the last stage; W(s) after B(s)."""
        return frozen(data_predecessors_of(self.ops, self.stage_base, self.num_microbatches), np.int64)


def _locate(schedule: Schedule, ops: list[Op]) -> np.ndarray:
    """Index (in device order) of each of ``ops``; -1 for an op not in the schedule."""
    num_mb = schedule.num_microbatches
    keys = schedule.codes * num_mb + schedule.ops.microbatch
    order = np.argsort(keys, kind="stable")
    if not ops:
        return np.zeros(0, np.int64)
    kind = np.array([KIND_CODES[op.kind] for op in ops], np.int64)
    pipe, stage, mb = (np.array([op[i] for op in ops], np.int64) for i in (1, 2, 3))
    base = schedule.stage_base
    npipe = len(base) - 1
    p = np.clip(pipe, 0, npipe - 1)
    ok = (pipe >= 0) & (pipe < npipe) & (stage >= 0) & (stage < base[p + 1] - base[p]) & (mb >= 0) & (mb < num_mb)
    want = np.where(ok, ((base[p] + stage) * 3 + kind) * num_mb + mb, -1)
    pos = np.clip(np.searchsorted(keys[order], want), 0, len(keys) - 1)
    found = order[pos]
    return np.where(ok & (keys[found] == want), found, -1)


def legal_block(block: Sequence[Op]) -> bool:
    """Whether ``block``'s ops may run as one block: two or three ops, exactly one backward
    (B), at most one forward of another microbatch or stage, at most one W and that of
    the block's B (a forward-backward pair, with or without the W, or a full backward)."""
    bs = [op for op in block if op.kind is Kind.B]
    ws = [op for op in block if op.kind is Kind.W]
    fs = [op for op in block if op.kind is Kind.F]
    return (2 <= len(block) <= 3 and len(fs) <= 1 and len(bs) == 1 and len(ws) <= 1
            and all(w[1:] == bs[0][1:] for w in ws) and not any(f[1:] == bs[0][1:] for f in fs))


def _check_blocks(schedule: Schedule) -> None:
    """``ValueError`` unless every block is two or more ops, consecutive in one device's
    order, in no other block, whose ops wait on at most two inputs from outside it, only
    a W on an op of its own block (its B), and whose forward (if any) comes first."""
    blocks = schedule.blocks
    sizes = np.array([len(b) for b in blocks], np.int64)
    at = _locate(schedule, [op for b in blocks for op in b])
    block = np.repeat(np.arange(len(blocks)), sizes)
    head = np.repeat(at[np.cumsum(sizes) - sizes], sizes)
    pos = np.arange(len(at)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    device, pred, kind = schedule.device, schedule.pred, schedule.ops.kind
    j = np.maximum(at, 0)
    consecutive = (at == head + pos) & (device[j] == device[np.maximum(head, 0)])
    counts = np.bincount(at[at >= 0], minlength=schedule.num_ops)
    inside = (pred[j] >= head) & (pred[j] < head + np.repeat(sizes, sizes))
    outside = np.bincount(block, weights=~inside, minlength=len(blocks))
    problems = [
        (sizes < 2, "must hold at least two ops"),
        (np.bincount(block, weights=at < 0, minlength=len(blocks)) > 0, "has an op that is not part of the schedule"),
        (np.bincount(block, weights=~consecutive, minlength=len(blocks)) > 0,
         "its ops must follow one another in one device's order"),
        (np.bincount(block, weights=counts[j] > 1, minlength=len(blocks)) > 0, "has an op that is in two blocks"),
        (np.bincount(block, weights=(pos > 0) & (kind[j] == 0), minlength=len(blocks)) > 0,
         "a forward must open its block"),
        (outside > 2, "a block may wait on at most two inputs from outside it"),
        (np.bincount(block, weights=inside & (kind[j] != 2), minlength=len(blocks)) > 0,
         "an op needs another of the same block; only a W may follow its own B inside a block"),
    ]
    for bad, why in problems:
        if bad.any():
            b = blocks[int(np.argmax(bad))]
            raise ValueError(f"block {'&'.join(map(str, b))} of schedule {schedule.name!r}: {why}")
    for b in blocks:
        if not legal_block(b):
            raise ValueError(f"block {'&'.join(map(str, b))} of schedule {schedule.name!r}: a block is a forward "
                             "with another microbatch's backward (and that backward's W), or a backward with its W")


def _check_ops(schedule: Schedule) -> None:
    """``ValueError`` naming the first op (in device order) that is not part of the
    schedule, placed elsewhere or repeated, else the first missing op."""
    ops, pl = schedule.ops, schedule.placement
    n, num_mb, name = len(ops), schedule.num_microbatches, schedule.name
    nstages = np.array([len(s) for s in pl.stage2device], np.int64)
    mb2pipe = np.array(schedule.microbatch2pipeline, np.int64)
    kind, pipe, stage, mb = ops.kind, ops.pipeline, ops.stage, ops.microbatch
    in_range = (kind >= 0) & (kind < (3 if schedule.split_backward else 2)) & (mb >= 0) & (mb < num_mb)
    in_range &= (pipe == mb2pipe[np.where(in_range, mb, 0)]) & (stage >= 0)
    in_range &= stage < nstages[np.where(in_range, pipe, 0)]
    sid = np.where(in_range, schedule.stage_base[np.where(in_range, pipe, 0)] + stage, 0)
    keys = (sid * num_mb + np.where(in_range, mb, 0)) * 3 + kind
    size = int(schedule.stage_base[-1]) * 3 * num_mb
    counts = np.bincount(keys[in_range], minlength=size)
    device = schedule.device
    misplaced = in_range & (schedule.stage_device[sid] != device)
    if in_range.all() and not misplaced.any() and counts.max(initial=0) <= 1:
        expected = int(nstages[mb2pipe].sum()) * len(schedule.kinds)
        if n == expected:
            return
        present = np.zeros(size, bool)
        present[keys] = True
        _missing(schedule, present, expected - n)
    valid_keys = np.where(in_range, keys, -1)
    order = np.argsort(valid_keys, kind="stable")  # equal keys keep their order: repeats come later
    sk = valid_keys[order]
    repeat = np.zeros(n, bool)
    repeat[order[1:]] = (sk[1:] == sk[:-1]) & (sk[1:] >= 0)
    bad = ~in_range | misplaced | repeat
    i = int(np.argmax(bad))
    op, d = ops.op(i), int(device[i])
    if repeat[i]:
        raise ValueError(f"op {op} appears twice in schedule {name!r}")
    if not in_range[i]:
        raise ValueError(f"op {op} on device {d} is not part of schedule {name!r}")
    raise ValueError(f"op {op} is ordered on device {d} but placed on device {pl.device(op.pipeline, op.stage)}")


def _missing(schedule: Schedule, present: np.ndarray, count: int) -> None:
    """Raise naming the first missing op by (microbatch, pipeline, stage, kind letter)."""
    num_mb = schedule.num_microbatches
    first = None
    for m, p in enumerate(schedule.microbatch2pipeline):
        base = int(schedule.stage_base[p])
        for s in range(schedule.num_stages(p)):
            for k in sorted(schedule.kinds, key=lambda k: k.value):
                if not present[((base + s) * num_mb + m) * 3 + KIND_CODES[k]]:
                    first = Op(k, p, s, m)
                    break
            if first:
                break
        if first:
            break
    raise ValueError(f"op {first} is missing from schedule {schedule.name!r} ({count} missing)")
