"""Chimera (Li & Hoefler, SC'21): two opposite pipelines over the same devices.

Placement: pipeline 0 ("down") puts stage s on device s, pipeline 1 ("up") puts stage s on
device S-1-s, so device d holds down stage d and up stage S-1-d (two weight copies).
Microbatches come in basic units of S: in unit u, microbatches uS .. uS+S/2-1 go down and
uS+S/2 .. uS+S-1 go up. Inside a pipeline microbatches run in ascending order.

Per-device order of one basic unit (reference ``schedules.md`` §4(a) [V], read from the
SC'21 runtime): with H = S/2, device d's *own* pipeline is the one in which it holds a stage
of the first half (down for d < H, up for d >= H), the *other* pipeline is the other one;
``a_d = H-d`` for d < H, ``d-H+1`` otherwise, and ``b_d = H-a_d``:

1. ``a_d`` x F(own)
2. ``b_d`` x [F(other), F(own)]
3. ``a_d`` x [F(other), B(other)]
4. ``b_d`` x [B(own), B(other)]
5. ``a_d`` x B(own)

For B > S the B/S units are concatenated directly: in every unit after the first, step 1
becomes ``a_d`` x [B(own, previous unit), F(own)], and step 5 appears only after the last
unit. With equal forward and backward times this leaves no intermediate bubbles and the
table's bubble is the paper's (S-2)/(2B+S-2); with a backward twice a forward it does leave
intermediate bubbles (the paper removes them with forward doubling, ``chimera-fd`` below).

``chimera_forward_doubling`` (``chimera-fd``) is the SC'21 runtime's forward doubling
(``main_with_runtime_forward_doubling.py``, reference §4(a) [V]): units of 2S microbatches;
in unit u, microbatches 2uS .. 2uS+S-1 go down and 2uS+S .. 2uS+2S-1 go up (the first half
down, as in ``chimera``; the reference table "Forward doubling D=4, N=8" sends 0-3 down and
4-7 up: device 0, the first stage of the down pipeline, starts F0 F1 F2 F3, device 3 starts
F4 F5 F6 F7). Every forward of the rule above becomes two consecutive forwards of the next two
microbatches of the same pipeline, step 4 runs ``b_d + H`` times instead of ``b_d`` (so each
device still does S forwards and S backwards per pipeline and unit), and in units u >= 1
step 1 is ``a_d`` x [B(own, previous unit), F(own), F(own)]. A paired forward (2 T_F) then
matches one backward (T_B = 2 T_F), which removes the intermediate bubbles of direct
concatenation, at the price of S more in-flight activations per device than ``chimera``
(3S/2 + 1 + min(d, S-1-d): 2S, twice Chimera's, on the middle devices; measured).

``chimera_asym`` is pipetab's interpretation [I] of the paper's remark that the layers may be
split ~1:2 unevenly between the two directions: the same placement and order, but within
each pipeline stages s < S/2 have relative work ``a`` and stages s >= S/2 work ``b``
(``split=(a, b)``), so every device holds one light and one heavy stage (device d < S/2:
light down stage d, heavy up stage S-1-d; mirrored for d >= S/2). ``split=(2, 1)`` is the
heavier-first variant. Nothing is normalised: ``stage_work`` carries the raw ``a`` and ``b``.
"""

from __future__ import annotations

import numpy as np

from ..arrays import OpArrays, Orders
from ..ops import B, F, Op
from ..placements import PlacementFamily, family_placement, traits
from ..schedule import Schedule
from . import check_shape

CHIMERA_REGIME = "S even, B a multiple of S"
CHIMERA_FD_REGIME = "S even, B a multiple of 2S"

DOWN, UP = 0, 1
# the first half of every unit of stages (2 x stages with forward doubling) goes down, the rest up
SPLIT = traits(PlacementFamily.BIDIRECTIONAL).microbatch2pipeline


def _check(stages: object, microbatches: object, name: str, per: int = 1) -> None:
    stages, microbatches = check_shape(stages, microbatches)
    if stages % 2:
        raise ValueError(f"stages must be even for {name}, got {stages}")
    if per == 1 and microbatches % stages:
        raise ValueError(
            f"microbatches must be a multiple of stages ({stages}) for {name}, got {microbatches}"
        )
    if microbatches % (per * stages):
        raise ValueError(
            f"microbatches must be a multiple of {per}*stages ({per * stages}) for {name}, "
            f"got {microbatches}"
        )


def _orders(stages: int, microbatches: int, per: int = 1) -> tuple[tuple[Op, ...], ...]:
    """Per-device orders; ``per`` forwards per forward slot (1: plain, 2: forward doubling)."""
    half = stages // 2
    units = microbatches // (per * stages)
    extra = half if per == 2 else 0  # forward doubling repeats step 4 b_d + H times
    orders = []
    for d in range(stages):
        own, other = (DOWN, UP) if d < half else (UP, DOWN)
        a = half - d if d < half else d - half + 1
        b = half - a
        stage = {DOWN: d, UP: stages - 1 - d}  # the stage device d holds in each pipeline
        first = {DOWN: 0, UP: per * half}  # offset of a pipeline's microbatches in a unit
        order: list[Op] = []
        tail: list[Op] = []  # step 5 of the previous unit
        for u in range(units):
            lo = {p: u * per * stages + first[p] for p in (DOWN, UP)}
            mbs = {p: range(lo[p], lo[p] + per * half) for p in (DOWN, UP)}
            fwd = {p: iter(mbs[p]) for p in (DOWN, UP)}
            bwd = {p: iter(mbs[p]) for p in (DOWN, UP)}

            def f(p: int) -> list[Op]:
                return [F(next(fwd[p]), stage[p], p) for _ in range(per)]

            def bk(p: int) -> Op:
                return B(next(bwd[p]), stage[p], p)

            for i in range(a):  # 1 (after the first unit: interleaved with the previous tail)
                order += ([tail[i]] if u else []) + f(own)
            for _ in range(b):  # 2
                order += f(other) + f(own)
            for _ in range(a):  # 3
                order += [*f(other), bk(other)]
            for _ in range(b + extra):  # 4
                order += [bk(own), bk(other)]
            tail = [bk(own) for _ in range(a)]  # 5, deferred into the next unit
        order += tail
        orders.append(tuple(order))
    return tuple(orders)


def _orders_arrays(stages: int, microbatches: int, per: int = 1) -> Orders:
    """``_orders`` as arrays without building every op: a device's order is unit 0, then
    units 1.. (each the previous with microbatches one unit later, starting with the
    previous unit's step 5), then the last unit's step 5; the orders of one and two units
    give every piece."""
    unit = per * stages
    units = microbatches // unit
    half = stages // 2
    columns: list[list[np.ndarray]] = [[], [], [], []]
    sizes = []
    for d, (one, two) in enumerate(zip(_orders(stages, unit, per), _orders(stages, 2 * unit, per))):
        a = half - d if d < half else d - half + 1  # step 5's length
        first, later, tail = (OpArrays.from_ops(x) for x in (one[:-a], two[len(one) - a:-a], two[-a:]))
        shift = np.repeat(np.arange(units - 1) * unit, len(later))
        for col, name in zip(columns, ("kind", "pipeline", "stage", "microbatch")):
            f, m, t = getattr(first, name), getattr(later, name), getattr(tail, name)
            extra = (shift, (units - 2) * unit) if name == "microbatch" else (0, 0)
            col += [f, np.tile(m, units - 1) + extra[0], t + extra[1]]
        sizes.append(len(first) + (units - 1) * len(later) + len(tail))
    ops = OpArrays(*(np.concatenate(col) for col in columns))
    return Orders(ops, np.cumsum([0, *sizes], dtype=np.int64))


def chimera(stages: int, microbatches: int) -> Schedule:
    """Chimera with two pipelines and directly concatenated basic units (see module doc).

    Requires ``stages`` even and ``microbatches`` a multiple of ``stages``."""
    _check(stages, microbatches, "chimera")
    return Schedule(
        "chimera",
        family_placement(PlacementFamily.BIDIRECTIONAL, stages, (stages, stages)),
        SPLIT(stages, microbatches),
        _orders_arrays(stages, microbatches),
        params={"stages": stages, "microbatches": microbatches},
    )


def chimera_forward_doubling(stages: int, microbatches: int) -> Schedule:
    """Chimera with forward doubling (SC'21 runtime, see module doc): units of 2S
    microbatches, every forward slot runs two microbatches of the same pipeline.

    Requires ``stages`` even and ``microbatches`` a multiple of ``2 * stages``."""
    _check(stages, microbatches, "chimera-fd", per=2)
    return Schedule(
        "chimera-fd",
        family_placement(PlacementFamily.BIDIRECTIONAL, stages, (stages, stages)),
        SPLIT(stages, microbatches, per=2),
        _orders_arrays(stages, microbatches, per=2),
        params={"stages": stages, "microbatches": microbatches},
    )


def chimera_asym(stages: int, microbatches: int, split: tuple[int, int] = (1, 2)) -> Schedule:
    """Chimera's placement and order with stages of uneven work: within each pipeline,
    stages s < S/2 have work ``split[0]`` and stages s >= S/2 work ``split[1]``, so every
    device holds one stage of each size (pipetab's interpretation [I], see module doc)."""
    _check(stages, microbatches, "chimera-asym")
    if (
        not isinstance(split, (tuple, list))
        or len(split) != 2
        or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in split)
    ):
        raise ValueError(f"split must be two positive integers (a, b), e.g. (1, 2), got {split!r}")
    a, b = split
    half = stages // 2
    work = tuple(a if s < half else b for s in range(stages))
    return Schedule(
        "chimera-asym",
        family_placement(PlacementFamily.BIDIRECTIONAL, stages, (stages, stages)),
        SPLIT(stages, microbatches),
        _orders_arrays(stages, microbatches),
        stage_work=(work, work),
        params={"stages": stages, "microbatches": microbatches, "split": (a, b)},
    )
