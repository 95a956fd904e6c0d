"""DualPipe and DualPipeV (DeepSeek-AI, deepseek-ai/DualPipe ``dualpipe.py`` and
``dualpipev.py``, commit 3da1bbe; DeepSeek-V3 report section 3.2.1).

**DualPipe** (bidirectional): PP devices (PP even), two pipelines of PP stages each over
them — direction 0 enters at device 0, direction 1 at device PP-1 — so device r holds
stage r of pipeline 0 and stage PP-1-r of pipeline 1 (two copies of the weights, Chimera's
placement); half of the microbatches take each direction. **DualPipeV** (the "cut-in-half"
DualPipe of Sea AI Lab): one pipeline of 2S stages in a V over S devices, device r holding
stage r and stage 2S-1-r (reference ``schedules.md`` §8); all microbatches enter at device
0, which also holds the last stage.

Order [V] (transcribed from ``DualPipe.step`` / ``DualPipeV.step``; torch
``ScheduleDualPipeV`` gives the same per-rank order): per device, with ``H`` = PP/2 and
``h`` = min(r, PP-1-r) for DualPipe (``H`` = S and ``h`` = r for DualPipeV), ``n`` the
microbatches per direction (all of them for DualPipeV), local phase 0 the stage whose
microbatches reach the device first, per-phase forward and backward counters (ascending
microbatches) and a FIFO queue of deferred weight gradients:

1. 2(H-h-1) x F0
2. h+1 x [F0, F1]
3. H-h-1 x [B1*, W, F1]
4. n-2H+h+1 x [F0&B1, F1&B0]
5. H-h-1 x [B1, F1&B0]
6. h+1 x [B1, B0]; the backwards become B* from the middle iteration i = (h+1) div 2 on:
   before its B1 when h is odd, before its B0 (after the B1) when h is even
7. H-h-1 x [W, B0*]
8. h+1 x W

where X0 / X1 is an op of phase 0 / 1, ``B*`` an input-gradient backward whose weight
gradient goes to the queue, ``W`` runs the oldest queued weight gradient, and ``F&B`` an
overlapped pair — except the first pair of step 4 on the middle devices (DualPipe: h =
H-1; DualPipeV: the last device), which the reference deliberately runs one after the other.

How pipetab models it: the backward is split everywhere (``split_backward=True``); a full
backward B is the block (B, W) — its input gradient leaves when both are done — and B* is
B alone with its W where the queue pops it. With ``overlap`` (the default) an overlapped
pair is the block (F, B, W): it starts when both inputs are there, its time is the two
streams' (``hardware.overlap``: the all-to-alls of a MoE model hide under the other
microbatch's compute), F + B + W without communication. Without ``overlap`` a pair is its
forward followed by its full backward (torch's runtime without an overlap callback).

At F = B = W = 1 slot per op the table then gives DeepSeek's (PP/2-1)(F&B+B-3W) idle per
device (DualPipeV: PP = 2S, makespan 6B + 2(S-1)), and every device peaks at PP+1 live
stage activations (DeepSeek's table). The orders need B >= 2S (DualPipeV) and an even
number of microbatches >= 2 PP (DualPipe), as the reference asserts.
"""

from __future__ import annotations

from collections import deque

from ..ops import B, F, Op, W
from ..placements import PlacementFamily, family_placement, split_microbatches
from ..schedule import Schedule
from . import check_shape

DUALPIPEV_REGIME = "B >= 2S (S devices, 2S stages)"
DUALPIPE_REGIME = "S even, B even and >= 2S (S devices, two pipelines of S stages)"


def _check_v(stages: object, microbatches: object) -> None:
    stages, microbatches = check_shape(stages, microbatches)
    if microbatches < 2 * stages:
        raise ValueError(
            f"microbatches must be at least 2 x stages ({2 * stages}) for dualpipev, got {microbatches}"
        )


def _check_bidirectional(stages: object, microbatches: object) -> None:
    stages, microbatches = check_shape(stages, microbatches)
    if stages % 2:
        raise ValueError(f"stages must be even for dualpipe, got {stages}")
    if microbatches % 2 or microbatches < 2 * stages:
        raise ValueError(f"microbatches must be even and at least 2 x stages ({2 * stages}) for dualpipe, "
                         f"got {microbatches}")


class _Device:
    """The step loop's state on one device: counters, W queue, the emitted order and its
    blocks. ``phases[k]`` is the (pipeline, stage) of local phase k, ``microbatches[k]``
    the microbatches of that phase's pipeline in the order they enter it."""

    def __init__(self, phases: tuple[tuple[int, int], tuple[int, int]],
                 microbatches: tuple[list[int], list[int]]) -> None:
        self.phases, self.microbatches = phases, microbatches
        self.f = [0, 0]
        self.b = [0, 0]
        self.queue: deque[Op] = deque()
        self.order: list[Op] = []
        self.full: list[tuple[Op, Op]] = []  # full backwards (B, its W)
        self.pairs: list[tuple[Op, Op, Op]] = []  # overlapped pairs (F, B, the B's W)

    def forward(self, phase: int) -> None:
        p, s = self.phases[phase]
        self.order.append(F(self.microbatches[phase][self.f[phase]], s, p))
        self.f[phase] += 1

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        p, s = self.phases[phase]
        m = self.microbatches[phase][self.b[phase]]
        self.b[phase] += 1
        self.order.append(B(m, s, p))
        w = W(m, s, p)
        if zero_bubble:
            self.queue.append(w)  # B*: weight gradient deferred
        else:
            self.order.append(w)  # full backward = B then its W
            self.full.append((self.order[-2], w))

    def weight(self) -> None:
        self.order.append(self.queue.popleft())

    def forward_backward(self, f_phase: int, b_phase: int, overlapped: bool = True) -> None:
        """A pair F&B: the forward, then the full backward (overlapped unless the
        reference runs it plainly)."""
        self.forward(f_phase)
        self.backward(b_phase)
        if overlapped:
            self.full.pop()
            self.pairs.append((self.order[-3], self.order[-2], self.order[-1]))


def _steps(dev: _Device, H: int, h: int, n: int, middle: bool) -> None:
    """The eight steps of the reference's ``step`` on one device (module docstring)."""
    for _ in range(2 * (H - h - 1)):  # 1
        dev.forward(0)
    for _ in range(h + 1):  # 2
        dev.forward(0)
        dev.forward(1)
    for _ in range(H - h - 1):  # 3
        dev.backward(1, zero_bubble=True)
        dev.weight()
        dev.forward(1)
    for i in range(n - 2 * H + h + 1):  # 4
        dev.forward_backward(0, 1, overlapped=not (i == 0 and middle))
        dev.forward_backward(1, 0)
    for _ in range(H - h - 1):  # 5
        dev.backward(1)
        dev.forward_backward(1, 0)
    zb = False
    for i in range(h + 1):  # 6
        if i == (h + 1) // 2 and h % 2 == 1:
            zb = True
        dev.backward(1, zero_bubble=zb)
        if i == (h + 1) // 2 and h % 2 == 0:
            zb = True
        dev.backward(0, zero_bubble=zb)
    for _ in range(H - h - 1):  # 7
        dev.weight()
        dev.backward(0, zero_bubble=True)
    for _ in range(h + 1):  # 8
        dev.weight()
    assert not dev.queue, "DualPipe step loop left weight gradients queued"


def _v_devices(devices: int, microbatches: int) -> list[_Device]:
    mbs = list(range(microbatches))
    out = []
    for r in range(devices):
        dev = _Device(((0, r), (0, 2 * devices - 1 - r)), (mbs, mbs))
        _steps(dev, devices, r, microbatches, middle=r == devices - 1)
        out.append(dev)
    return out


def _bidirectional_devices(devices: int, microbatches: int) -> list[_Device]:
    half = microbatches // 2
    down, up = list(range(half)), list(range(half, microbatches))
    H = devices // 2
    out = []
    for r in range(devices):
        mine = ((0, r), (1, devices - 1 - r))
        mbs = (down, up)
        if r >= H:  # the second half of the devices meets direction 1 first
            mine, mbs = (mine[1], mine[0]), (up, down)
        dev = _Device(mine, mbs)
        _steps(dev, H, min(r, devices - 1 - r), half, middle=r in (H - 1, H))
        out.append(dev)
    return out


def _blocks(devs: list[_Device], overlap: bool) -> list[tuple[Op, ...]]:
    blocks: list[tuple[Op, ...]] = [b for dev in devs for b in dev.full]
    for dev in devs:
        for f, b, w in dev.pairs:
            blocks.extend([(f, b, w)] if overlap else [(b, w)])
    return blocks


def full_backwards(devices: int, microbatches: int) -> frozenset[Op]:
    """The B ops DualPipeV runs as a full backward (not B*), overlapped pairs included: in
    the orders each is immediately followed by its own W."""
    devs = _v_devices(devices, microbatches)
    return frozenset([b for dev in devs for b, _ in dev.full] + [b for dev in devs for _, b, _ in dev.pairs])


def overlapped_pairs(devices: int, microbatches: int) -> tuple[tuple[Op, Op], ...]:
    """The (forward, backward) ops DualPipeV runs as one overlapped F&B pair (not the
    last device's deliberately plain first pair of step 4). In the orders the backward
    follows its forward directly."""
    return tuple((f, b) for dev in _v_devices(devices, microbatches) for f, b, _ in dev.pairs)


def dualpipev(stages: int, microbatches: int, overlap: bool = True) -> Schedule:
    """DualPipeV over ``stages`` devices (2S pipeline stages in a V), order from the
    DeepSeek step loop, full backwards and (with ``overlap``) overlapped pairs as blocks
    (see module doc). Requires ``microbatches >= 2 * stages``."""
    _check_v(stages, microbatches)
    devs = _v_devices(stages, microbatches)
    return Schedule(
        "dualpipev",
        family_placement(PlacementFamily.V, stages, (2 * stages,)),
        (0,) * microbatches,
        tuple(tuple(dev.order) for dev in devs),
        split_backward=True,
        params={"stages": stages, "microbatches": microbatches, **({} if overlap else {"overlap": False})},
        blocks=_blocks(devs, overlap),
    )


def dualpipe(stages: int, microbatches: int, overlap: bool = True) -> Schedule:
    """Bidirectional DualPipe over ``stages`` devices (even): two pipelines of S stages in
    opposite directions, microbatches 0 .. B/2-1 down and B/2 .. B-1 up, order from the
    DeepSeek step loop (see module doc). Requires an even ``microbatches >= 2 * stages``."""
    _check_bidirectional(stages, microbatches)
    devs = _bidirectional_devices(stages, microbatches)
    return Schedule(
        "dualpipe",
        family_placement(PlacementFamily.BIDIRECTIONAL, stages, (stages, stages)),
        split_microbatches(2, microbatches, microbatches),
        tuple(tuple(dev.order) for dev in devs),
        split_backward=True,
        params={"stages": stages, "microbatches": microbatches, **({} if overlap else {"overlap": False})},
        blocks=_blocks(devs, overlap),
    )
