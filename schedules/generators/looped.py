"""Looped schedules with ``v`` chunks per device (the interleaved placement: stage s on
device ``s mod S``) in the orders PyTorch's ``torch.distributed.pipelining`` gives them.

* ``looped_bfs`` (``ScheduleLoopedBFS``; Lamy-Poirier, "Breadth-First Pipeline Parallelism",
  arXiv 2211.05953): device d runs every microbatch's forward through its first local
  stage (``d``), then through its next (``d + S``), ...; then the full backwards, local
  stages in reverse, microbatches in reverse.
* ``interleaved_zb`` (``ScheduleInterleavedZeroBubble``: ZB-1P of Qi et al., ICLR 2024, on
  looped stages): microbatches in rounds of ``B / max(1, B // S)`` (they must divide B);
  device d runs ``min((v-1) * round + (S-1-d), v*B)`` warm-up forwards, then pairs of a
  forward and an input gradient (B), each pair from the (d+1)-th on followed by the weight
  gradient (W) of the oldest input gradient still without one, then the remaining input
  gradients with their W's the same way, then the W's left. A forward's local stage
  advances every round of microbatches (``(step // round) mod v``), a backward's goes
  down the same way from the end of the warm-up.

Both are independent transcriptions of torch's ``_calculate_single_rank_operations``
(``_get_warmup_ops`` and ``_get_1f1b_rank_ops`` for the second), with torch's idle slots
(None) dropped: a pipetab order is the sequence of a device's ops. Their orders equal
torch's (``tests/data/golden_orders.json``, made by ``experiments/golden_orders.py``).
"""

from __future__ import annotations

from ..ops import Kind, Op
from ..placements import PlacementFamily, family_placement
from ..schedule import Schedule
from . import check_shape

MAX_CHUNKS = 16


def _check(stages: int, microbatches: int, chunks: int, name: str) -> None:
    check_shape(stages, microbatches)
    if not isinstance(chunks, int) or isinstance(chunks, bool) or not 2 <= chunks <= MAX_CHUNKS:
        raise ValueError(f"chunks must be an integer between 2 and {MAX_CHUNKS} for {name}, got {chunks!r}")


def looped_bfs(stages: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Breadth-first looped schedule over ``stages`` devices, ``chunks`` stages each
    (module docstring)."""
    _check(stages, microbatches, chunks, "looped-bfs")
    orders = []
    for d in range(stages):
        local = [d + k * stages for k in range(chunks)]
        order = [Op(Kind.F, 0, s, m) for s in local for m in range(microbatches)]
        order += [Op(Kind.B, 0, s, m) for s in reversed(local) for m in reversed(range(microbatches))]
        orders.append(tuple(order))
    return Schedule("looped-bfs", family_placement(PlacementFamily.INTERLEAVED, stages, (chunks * stages,)),
                    (0,) * microbatches, tuple(orders),
                    params={"stages": stages, "microbatches": microbatches, "chunks": chunks})


def _rounds(stages: int, microbatches: int) -> int:
    """Microbatches per round (torch: ``B // max(1, B // S)``, which must divide B)."""
    rounds = max(1, microbatches // stages)
    if microbatches % rounds:
        raise ValueError(f"microbatches must be a multiple of the {rounds} rounds (B // S) for interleaved-zb, "
                         f"got {microbatches}")
    return microbatches // rounds


def _zb_device(d: int, stages: int, microbatches: int, chunks: int) -> tuple[Op, ...]:
    """Device d's order of ``interleaved_zb`` (module docstring)."""
    per_round = _rounds(stages, microbatches)
    total = chunks * microbatches
    warmup = min((chunks - 1) * per_round + (stages - 1 - d), total)

    def fwd_stage(step: int) -> int:
        return ((step // per_round) % chunks) * stages + d

    def bwd_stage(step: int) -> int:
        return (chunks - 1 - ((step - warmup) // per_round) % chunks) * stages + d

    count = {Kind.F: [0] * (chunks * stages), Kind.B: [0] * (chunks * stages), Kind.W: [0] * (chunks * stages)}

    def op(kind: Kind, stage: int) -> Op:
        count[kind][stage] += 1
        return Op(kind, 0, stage, count[kind][stage] - 1)

    order: list[Op] = []
    backwards: list[int] = []  # steps of the input gradients, in order
    weights = 0
    for step in range(warmup + total):
        if step < warmup + (total - warmup):
            order.append(op(Kind.F, fwd_stage(step)))
        if step >= warmup:
            order.append(op(Kind.B, bwd_stage(step)))
            backwards.append(step)
            if step - warmup >= d:
                order.append(op(Kind.W, bwd_stage(backwards[weights])))
                weights += 1
    order += [op(Kind.W, bwd_stage(s)) for s in backwards[weights:]]
    return tuple(order)


def interleaved_zb(stages: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Interleaved zero bubble (ZB-1P) over ``stages`` devices, ``chunks`` stages each
    (module docstring)."""
    _check(stages, microbatches, chunks, "interleaved-zb")
    orders = tuple(_zb_device(d, stages, microbatches, chunks) for d in range(stages))
    return Schedule("interleaved-zb", family_placement(PlacementFamily.INTERLEAVED, stages, (chunks * stages,)),
                    (0,) * microbatches, orders, split_backward=True,
                    params={"stages": stages, "microbatches": microbatches, "chunks": chunks})
