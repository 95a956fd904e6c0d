"""Interleaved 1F1B (Narayanan et al., SC'21 — Megatron "virtual pipeline stages").

Placement (reference ``schedules.md`` §0/§3, loop mapping): one pipeline of v*S stages;
chunk c of device d is stage c*S + d, so device d holds stages d, S+d, ..., (v-1)S+d. All
stages have the same work: each chunk is 1/v of an ordinary stage, and one chunk op takes
the given slot durations (as for Hanayo), so the weights add up to one copy per device.

Order [V] (Megatron ``forward_backward_pipelining_with_interleaving``; torch
``ScheduleInterleaved1F1B`` gives the same per-rank order): every device runs v*B chunk
forwards and v*B chunk backwards, indexed k = 0 .. vB-1 ("virtual microbatches"):

* forward k: group g = k div (vS), chunk c = (k mod vS) div S, microbatch g*S + k mod S
  (S microbatches go through chunk 0, then the same S through chunk 1, ...);
* backward k: the same with the chunks reversed, c = v-1 - (k mod vS) div S;
* device d runs w_d = min((v-1)S + 2(S-1-d), vB) warm-up forwards, then the pairs
  [forward k + w_d, backward k], then the remaining backwards.

Regime: B a multiple of S (Megatron's condition; the forward / backward index maps above
need it) and 2 <= v <= 16. Throughout that regime the table's bubble is Megatron's
(S-1)/(vB+S-1): makespan (vB + S - 1)(F + K) for chunk ops of F and K slots (measured for
S <= 12, v <= 4, B <= 48 with several F, K; at F = K = 1 for S <= 16, B <= 64).

Overlap (``overlap=True``; Megatron-Core's combined 1F1B, ``--overlap-moe-expert-parallel-comm``,
which needs the virtual pipeline): each steady-state pair [forward k + w_d, backward k]
runs as one block (``Schedule.blocks``), the all-to-alls of either hidden under the other's
compute (``hardware.overlap``); without communication the block takes F + B, but it starts
only when both inputs are there.

Memory: device d peaks at min(w_d + 1, vB) live chunk activations of A/v each, i.e.
((v-1)S + 2(S-1-d) + 1)/v stage activations once B > S (at B = S device 0 holds all vS).
"""

from __future__ import annotations

import numpy as np

from ..arrays import B_CODE, F_CODE, OpArrays, Orders
from ..placements import PlacementFamily, family_placement
from ..schedule import Schedule
from . import check_shape
from .linear import warmup_pairs

MAX_CHUNKS = 16
INTERLEAVED_REGIME = f"2 <= v <= {MAX_CHUNKS}, B a multiple of S"


def _check(stages: object, microbatches: object, chunks: object) -> None:
    stages, microbatches = check_shape(stages, microbatches)
    if not isinstance(chunks, int) or isinstance(chunks, bool) or not 2 <= chunks <= MAX_CHUNKS:
        raise ValueError(
            f"chunks must be an integer from 2 to {MAX_CHUNKS} for interleaved, got {chunks!r}"
        )
    if microbatches % stages:
        raise ValueError(
            f"microbatches must be a multiple of stages ({stages}) for interleaved, got {microbatches}"
        )


def warmup(devices: int, microbatches: int, chunks: int, device: int) -> int:
    """Warm-up chunk forwards of ``device``: min((v-1)S + 2(S-1-d), vB)."""
    return min((chunks - 1) * devices + 2 * (devices - 1 - device), chunks * microbatches)


def interleaved_arrays(devices: int, microbatches: int, chunks: int) -> tuple[OpArrays, np.ndarray]:
    """Op arrays and offsets of the Megatron rule (see module doc); needs B a multiple of S."""
    group = devices * chunks
    total = chunks * microbatches
    warm = np.array([warmup(devices, microbatches, chunks, d) for d in range(devices)])
    forward, k = warmup_pairs(warm, total)
    mb = (k // group) * devices + k % devices
    chunk = (k % group) // devices
    chunk = np.where(forward, chunk, chunks - 1 - chunk)
    stage = chunk * devices + np.arange(devices)[:, None]
    ops = OpArrays(np.where(forward, F_CODE, B_CODE).ravel(), np.zeros(forward.size, np.int64),
                   stage.ravel(), mb.ravel())
    return ops, np.arange(devices + 1, dtype=np.int64) * (2 * total)


def steady_pairs(orders: Orders, devices: int, microbatches: int, chunks: int) -> list[tuple]:
    """The steady-state (forward, backward) pairs of every device: positions w_d + 2i and
    w_d + 2i + 1 of its order (module doc), except a backward right after its own forward
    (the last stage's, which must wait for it)."""
    pairs = []
    total = chunks * microbatches
    for d in range(devices):
        order = orders[d]
        w = warmup(devices, microbatches, chunks, d)
        for i in range(total - w):
            f, b = order[w + 2 * i], order[w + 2 * i + 1]
            if (f.stage, f.microbatch) != (b.stage, b.microbatch):
                pairs.append((f, b))
    return pairs


def interleaved(stages: int, microbatches: int, chunks: int = 2, overlap: bool = False) -> Schedule:
    """Megatron interleaved 1F1B with ``chunks`` (v) chunks per device over ``stages``
    devices: one pipeline of v*S equal stages in the loop mapping; with ``overlap`` the
    steady-state forward-backward pairs run as blocks (module doc). Requires 2 <= v <= 16
    and ``microbatches`` a multiple of ``stages``."""
    _check(stages, microbatches, chunks)
    orders = Orders(*interleaved_arrays(stages, microbatches, chunks))
    blocks = steady_pairs(orders, stages, microbatches, chunks) if overlap else []
    return Schedule(
        "interleaved",
        family_placement(PlacementFamily.INTERLEAVED, stages, (chunks * stages,)),
        (0,) * microbatches,
        orders,
        params={"stages": stages, "microbatches": microbatches, "chunks": chunks,
                **({"overlap": True} if overlap else {})},
        blocks=blocks,
    )
