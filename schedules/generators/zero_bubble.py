"""Zero-bubble schedules (Qi, Wan, Huang, Lin — ICLR'24): the backward is split into B
(input gradient, on the critical path) and W (weight gradient, needed only before the
optimizer step); every schedule here has ``split_backward=True``.

ZB-H1 (reference ``schedules.md`` §6(a) [V]; = torch ``ScheduleInterleavedZeroBubble`` with one
stage per rank): stage d on device d. Device d runs 1F1B's order — ``min(S-1-d, B)`` warm-up
forwards, pairs [F, B], the remaining B's — but delays the weight gradients: right after
its k-th B it runs W(k-d) when k >= d (device d postpones its first d W's), and it ends
with the remaining W's in ascending order. Every device then holds up to S activations
(min(S, B); 1F1B's first-stage peak). For B >= S the makespan is B(F+K+W) + (S-1)(F+K-W)
for slot lengths F, K (input gradient), W — ZB's (p-1)(T_F+T_B-T_W) idle time per device —
exactly when W <= min(F, K) (measured for F, K, W <= 4, S <= 8, B <= 24; at F = K = W = 1
for S <= 16, B <= 64: 3B + S - 1). For B < S it is 1F1B's 2(B+S-1) plus the last W at
F = K = W = 1.

ZB-H2 (Qi et al., arXiv 2401.10241, Section 2.2 and Figure 3 bottom; op for op the order of
the authors' ``get_hand_schedule(..., warmup_c=2)`` with which they computed the paper's
Table 5 — sail-sg/zero-bubble-pipeline-parallelism, branch ``arxiv``,
``megatron/core/pipeline_parallel/efficiency.py``): stage d on device d. Device d runs
``w = min(2(S-1-d)+1, B)`` warm-up forwards ("more F passes in the warm-up phase to fill
the bubble preceding the initial B"), then for k = 0 .. B-1 the backward of microbatch k,
the weight gradient of microbatch k - 2d once k >= 2d, and the next forward if one is left;
then its remaining W's in ascending order ("reorder the W passes at the tail"). (The worked
ZB-H2 table of reference ``schedules.md`` §6(d), a greedy B > F > W rule, is a different
order with the same warm-up.) At F = B = W = 1 slot and B >= 2S-1 every device is busy from
its first op to its last — zero bubble in ZB's per-device-span convention — and the table's
makespan is 3B + S - 1; for fewer microbatches it is 2S + 1 + floor(5(B-1)/2) (measured for
S <= 16, B <= 64). ZB's span idle time (S-1)(T_F+T_B-2T_W) per device, plus 2(S-1)T_comm
with messages, is exact when T_W <= min(T_F, T_B) and 2 T_comm <= T_F + T_B (B >= 2S-1;
measured for slot lengths up to 4, T_comm <= 2, S <= 8). Device d holds up to
w + f min(2d, B - w) activations, f = M_W / M (``formulas.zb_h2_peak_activations``): for
B >= 2S-1 the paper's (2p-2i+1) M_B + (2i-2) M_W, so (2S-1) M_B on every device when the
whole activation is held until W.

ZB-V (§7(a) [V]; op-by-op the order of torch ``ScheduleZBVZeroBubble`` and sail-sg
``zbv.py`` at T_F = T_B = T_W): V mapping over 2S stages, device d holds stage d (chunk 0)
and stage 2S-1-d (chunk 1). With per-chunk counters (ascending microbatches) and
B_eff = max(B, 2S-1), device d runs

1. 2(S-d)-1 x F0;
2. d x [F1, F0];
3. S-d x [F1, B1, W1];
4. while chunk-1 forwards remain: [F0 (if any left), B0, W0, F1, B1, W1];
5. d x [B0, B1], then S-d x [B0, W0], then the remaining W1's, then the remaining W0's

for B_eff microbatches and drops the ops of microbatches >= B (the reference's handling
of B < 2S-1). It is valid for every B >= 1 (tests: S <= 16, B <= 64). With one slot per
chunk op and B >= 2S-1 the devices are busy from their first op to their last ("zero
bubble" in ZB's per-device-span convention; for B < 2S-1 they are not); in pipetab's global
convention the staggered start remains: makespan 6B + S - 1, bubble (S-1)/(6B+S-1),
whenever 2B >= 3S-1; for fewer microbatches
the dropped ones leave holes and the makespan is 4B + 4S - 2 (both measured for S <= 16,
B <= 64). Device d peaks at min(2S, 2B, B+1+d) live chunk activations of A/2: S stage
activations on every device (ZB's p * M_B) once B >= 2S-1.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..arrays import B_CODE, F_CODE, W_CODE, OpArrays
from ..ops import B, F, Op, W
from ..placements import PlacementFamily, family_placement
from ..schedule import Placement, Schedule
from . import check_shape
from .linear import linear_arrays, one_f_one_b_warmup, warmup_pairs

ZB_H1_REGIME = "S >= 2, B >= 1"
ZB_H2_REGIME = "S >= 2, B >= 1"
ZBV_REGIME = "S >= 2, B >= 1"


def _split_schedule(name: str, placement: Placement, microbatches: int,
                    orders: tuple[tuple[Op, ...], ...]) -> Schedule:
    """A one-pipeline split-backward schedule of a generator here (its devices = stages)."""
    return Schedule(
        name, placement, (0,) * microbatches, orders, split_backward=True,
        params={"stages": placement.num_devices, "microbatches": microbatches},
    )


# ---- ZB-H1 ------------------------------------------------------------------------------

def zb_h1_arrays(devices: int, microbatches: int) -> tuple[OpArrays, np.ndarray]:
    """Op arrays and offsets of ZB-H1: 1F1B's rows with device d's weight gradient of
    microbatch k - d right after its k-th backward, the rest at the end (see module doc)."""
    forward, mb = warmup_pairs(one_f_one_b_warmup(devices, microbatches), microbatches)
    rows, width = forward.shape
    d = np.arange(rows)[:, None]
    inserted = ~forward & (mb >= d)
    pos = np.arange(width)[None, :] + np.cumsum(inserted, axis=1) - inserted
    row = np.broadcast_to(d, forward.shape)
    kind = np.full((rows, 3 * microbatches), W_CODE, np.int8)
    out_mb = np.empty((rows, 3 * microbatches), np.int64)
    kind[row, pos] = np.where(forward, F_CODE, B_CODE)
    out_mb[row, pos] = mb
    out_mb[row[inserted], pos[inserted] + 1] = (mb - d)[inserted]
    cols = np.arange(3 * microbatches)[None, :]
    tail = cols >= width + inserted.sum(axis=1)[:, None]  # the remaining W's, ascending
    out_mb[tail] = np.broadcast_to(cols - width, out_mb.shape)[tail]
    return linear_arrays(kind, out_mb)


def zb_h1(stages: int, microbatches: int) -> Schedule:
    """ZB-H1: 1F1B with split backward and device d's weight gradients delayed by d
    microbatches (see module doc). Any ``stages >= 2``, ``microbatches >= 1``."""
    check_shape(stages, microbatches)
    ops, offsets = zb_h1_arrays(stages, microbatches)
    return Schedule.from_arrays(
        "zb-h1", family_placement(PlacementFamily.LINEAR, stages, (stages,)), (0,) * microbatches, ops, offsets,
        split_backward=True, params={"stages": stages, "microbatches": microbatches},
    )


# ---- ZB-H2 ------------------------------------------------------------------------------

def zb_h2_warmup(devices: int, microbatches: int, device: int) -> int:
    """Forwards device ``device`` runs before its first backward: min(2(S-1-d)+1, B)."""
    return min(2 * (devices - 1 - device) + 1, microbatches)


def zb_h2_orders(devices: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """Per-device orders of ZB-H2: the warm-up forwards, then for each microbatch k its
    backward, the weight gradient of microbatch k - 2d (once k >= 2d) and the next forward,
    then the remaining weight gradients (see module doc)."""
    orders = []
    for d in range(devices):
        warm = zb_h2_warmup(devices, microbatches, d)
        order: list[Op] = [F(m, d) for m in range(warm)]
        next_w = 0
        for k in range(microbatches):
            order.append(B(k, d))
            if k >= 2 * d:
                order.append(W(k - 2 * d, d))
                next_w = k - 2 * d + 1
            if warm + k < microbatches:
                order.append(F(warm + k, d))
        order += [W(m, d) for m in range(next_w, microbatches)]
        orders.append(tuple(order))
    return tuple(orders)


def zb_h2(stages: int, microbatches: int) -> Schedule:
    """ZB-H2: 2(S-1-d)+1 warm-up forwards on device d, then [B, W delayed by 2d
    microbatches, F], then the remaining W's (see module doc). Any ``stages >= 2``,
    ``microbatches >= 1``."""
    check_shape(stages, microbatches)
    placement = family_placement(PlacementFamily.LINEAR, stages, (stages,))
    return _split_schedule("zb-h2", placement, microbatches, zb_h2_orders(stages, microbatches))


# ---- ZB-V -------------------------------------------------------------------------------

class _Counters:
    """Next microbatch of each (kind, chunk) on one device; emits ops, dropping those of
    microbatches >= ``microbatches`` (which only exist in the B_eff construction)."""

    def __init__(self, devices: int, device: int, microbatches: int):
        self.stage = (device, 2 * devices - 1 - device)
        self.microbatches = microbatches
        self.next: dict[tuple[Callable[[int, int], Op], int], int] = {}
        self.order: list[Op] = []

    def count(self, kind: Callable[[int, int], Op], chunk: int) -> int:
        return self.next.get((kind, chunk), 0)

    def emit(self, kind: Callable[[int, int], Op], chunk: int) -> None:
        m = self.count(kind, chunk)
        self.next[(kind, chunk)] = m + 1
        if m < self.microbatches:
            self.order.append(kind(m, self.stage[chunk]))


def zbv_orders(devices: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """Per-device orders of the handcrafted ZB-V rule (see module doc)."""
    n_eff = max(microbatches, 2 * devices - 1)
    orders = []
    for d in range(devices):
        c = _Counters(devices, d, microbatches)
        for _ in range(2 * (devices - d) - 1):  # 1
            c.emit(F, 0)
        for _ in range(d):  # 2
            c.emit(F, 1)
            c.emit(F, 0)
        for _ in range(devices - d):  # 3
            c.emit(F, 1)
            c.emit(B, 1)
            c.emit(W, 1)
        while c.count(F, 1) < n_eff:  # 4
            if c.count(F, 0) < n_eff:
                c.emit(F, 0)
            for kind in (B, W):
                c.emit(kind, 0)
            for kind in (F, B, W):
                c.emit(kind, 1)
        for _ in range(d):  # 5
            c.emit(B, 0)
            c.emit(B, 1)
        for _ in range(devices - d):
            c.emit(B, 0)
            c.emit(W, 0)
        while c.count(W, 1) < n_eff:
            c.emit(W, 1)
        while c.count(W, 0) < n_eff:
            c.emit(W, 0)
        orders.append(tuple(c.order))
    return tuple(orders)


def zbv(stages: int, microbatches: int) -> Schedule:
    """ZB-V: the handcrafted V-shape zero-bubble order over ``stages`` devices (2S stages,
    two per device). Any ``stages >= 2``, ``microbatches >= 1`` (see module doc)."""
    check_shape(stages, microbatches)
    placement = family_placement(PlacementFamily.V, stages, (2 * stages,))
    return _split_schedule("zbv", placement, microbatches, zbv_orders(stages, microbatches))
