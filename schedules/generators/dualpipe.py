"""DualPipeV (DeepSeek-AI, deepseek-ai/DualPipe ``dualpipev.py``; the "cut-in-half"
DualPipe of Sea AI Lab): one pipeline of 2S stages in a V over S devices.

Placement (reference ``schedules.md`` §8): device r holds stage r (phase 0) and stage
2S-1-r (phase 1); all microbatches enter at device 0, which also holds the last stage.

Order [V] (transcribed from ``DualPipeV.step``; torch ``ScheduleDualPipeV`` gives the same
per-rank order): per device r, with per-phase forward and backward counters (ascending
microbatches) and a FIFO queue of deferred weight gradients,

1. 2(S-r-1) x F0
2. r+1 x [F0, F1]
3. S-r-1 x [B1*, W, F1]
4. B-2S+r+1 x [F0&B1, F1&B0]
5. S-r-1 x [B1, F1&B0]
6. r+1 x [B1, B0]; the backwards become B* from the middle iteration i = (r+1) div 2 on:
   before its B1 when r is odd, before its B0 (after the B1) when r is even
7. S-r-1 x [W, B0*]
8. r+1 x W

where X0 / X1 is an op of phase 0 / 1, ``B*`` is an input-gradient backward whose weight
gradient is pushed to the queue and ``W`` runs the oldest queued weight gradient.

How pipetab models it: the backward is split everywhere (``split_backward=True``), so a
plain ("full") backward B is the op B immediately followed by its own W on the same device,
and B* is the op B alone with its W placed where the step loop pops it. An overlapped pair
F&B is its forward followed by its backward, with no overlap gain (as the reference's
worked table; the overlap hides communication, which tables do not have). The first pair of
step 4 on the last device, which DualPipeV deliberately does not overlap, is the same two
ops in the same order.

Consequence for timing: DualPipe starts a pair only when the inputs of both its ops are
there, and a full backward (2 slots) sends its input gradient only when both slots are
done. pipetab's table lays the ops out ASAP instead: a pair's F may start before its B's
input arrives, and B sends its input gradient before its W. Measured at F = B = W = 1 slot
per chunk op (S <= 16, 2S <= B <= 64): pipetab's table has makespan 6B + S - 1 (S-1 idle
slots per device), while the same orders under DualPipe's two rules (``full_backwards``,
``overlapped_pairs``) take 6B + 2(S-1), DeepSeek's (PP/2-1)(F&B+B-3W) with PP = 2S — and
reproduce the reference's S=4, B=8 table cell for cell. Every device peaks at 2S+1 live
chunk activations (DeepSeek's PP+1) in both.

Regime: B >= 2S (``DualPipeV.step`` asserts it: step 4 needs B-2S+r+1 >= 1 on device 0).
"""

from __future__ import annotations

from collections import deque

from ..ops import B, F, Op, W
from ..placements import PlacementFamily, family_placement
from ..schedule import Schedule
from . import check_shape

DUALPIPEV_REGIME = "B >= 2S (S devices, 2S stages)"


def _check(stages: object, microbatches: object) -> None:
    stages, microbatches = check_shape(stages, microbatches)
    if microbatches < 2 * stages:
        raise ValueError(
            f"microbatches must be at least 2 x stages ({2 * stages}) for dualpipev, got {microbatches}"
        )


class _Device:
    """The step loop's state on one device: counters, W queue, and the emitted order."""

    def __init__(self, devices: int, rank: int):
        self.stage = (rank, 2 * devices - 1 - rank)
        self.f = [0, 0]
        self.b = [0, 0]
        self.queue: deque[Op] = deque()
        self.order: list[Op] = []
        self.full: list[Op] = []  # B ops run as a full backward (their W right after)
        self.pairs: list[tuple[Op, Op]] = []  # overlapped F&B pairs (forward, backward)

    def forward(self, phase: int) -> None:
        self.order.append(F(self.f[phase], self.stage[phase]))
        self.f[phase] += 1

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        m = self.b[phase]
        self.b[phase] += 1
        self.order.append(B(m, self.stage[phase]))
        w = W(m, self.stage[phase])
        if zero_bubble:
            self.queue.append(w)  # B*: weight gradient deferred
        else:
            self.order.append(w)  # full backward = B then its W
            self.full.append(self.order[-2])

    def weight(self) -> None:
        self.order.append(self.queue.popleft())

    def forward_backward(self, f_phase: int, b_phase: int) -> None:
        """An overlapped pair F&B: the forward, then the (full) backward."""
        self.forward(f_phase)
        self.backward(b_phase)
        self.pairs.append((self.order[-3], self.order[-2]))


def _step_loop(devices: int, microbatches: int) -> list[_Device]:
    devs = []
    for r in range(devices):
        dev = _Device(devices, r)
        for _ in range(2 * (devices - r - 1)):  # 1
            dev.forward(0)
        for _ in range(r + 1):  # 2
            dev.forward(0)
            dev.forward(1)
        for _ in range(devices - r - 1):  # 3
            dev.backward(1, zero_bubble=True)
            dev.weight()
            dev.forward(1)
        for _ in range(microbatches - 2 * devices + r + 1):  # 4
            dev.forward_backward(0, 1)
            dev.forward_backward(1, 0)
        for _ in range(devices - r - 1):  # 5
            dev.backward(1)
            dev.forward_backward(1, 0)
        zb = False
        for i in range(r + 1):  # 6
            if i == (r + 1) // 2 and r % 2 == 1:
                zb = True
            dev.backward(1, zero_bubble=zb)
            if i == (r + 1) // 2 and r % 2 == 0:
                zb = True
            dev.backward(0, zero_bubble=zb)
        for _ in range(devices - r - 1):  # 7
            dev.weight()
            dev.backward(0, zero_bubble=True)
        for _ in range(r + 1):  # 8
            dev.weight()
        assert not dev.queue, "DualPipeV step loop left weight gradients queued"
        devs.append(dev)
    return devs


def dualpipev_orders(devices: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """Per-device orders of the DualPipeV step loop (see module doc); needs B >= 2S."""
    return tuple(tuple(dev.order) for dev in _step_loop(devices, microbatches))


def full_backwards(devices: int, microbatches: int) -> frozenset[Op]:
    """The B ops DualPipeV runs as a full backward (not B*): in the orders each is
    immediately followed by its own W. With these fused into one op of B + W slots (the
    input gradient leaving only when both are done) the orders give DualPipe's own timing."""
    return frozenset(op for dev in _step_loop(devices, microbatches) for op in dev.full)


def overlapped_pairs(devices: int, microbatches: int) -> tuple[tuple[Op, Op], ...]:
    """The (forward, backward) ops DualPipeV runs as one overlapped F&B pair (including
    the last device's deliberately un-overlapped first pair of step 4). In the orders the
    backward follows its forward directly; DualPipe starts a pair only once the inputs of
    both are there."""
    return tuple(p for dev in _step_loop(devices, microbatches) for p in dev.pairs)


def dualpipev(stages: int, microbatches: int) -> Schedule:
    """DualPipeV over ``stages`` devices (2S pipeline stages in a V), order from the
    DeepSeek step loop with every backward split into B and W (see module doc).
    Requires ``microbatches >= 2 * stages``."""
    _check(stages, microbatches)
    return Schedule(
        "dualpipev",
        family_placement(PlacementFamily.V, stages, (2 * stages,)),
        (0,) * microbatches,
        dualpipev_orders(stages, microbatches),
        split_backward=True,
        params={"stages": stages, "microbatches": microbatches},
    )
