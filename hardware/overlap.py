"""The time of ops run together as one block: a two-stream model of a GPU.

A GPU runs kernels on a compute stream and collectives on a communication stream at the
same time (DeepSeek-V3 section 3.2.1: the all-to-alls of one microbatch hide under the
attention and MLP of another; Megatron-Core's combined 1F1B; torch's ``OVERLAP_F_B``).
Each op of a block is a *chain* of segments, each on one stream (``StageCost.chains``: a
MoE layer's forward is attention, dispatch, experts, combine; its backward the reverse),
and a segment starts when the one before it in its chain has ended and its stream is free.
The block takes as long as this list schedule: the segment that can start earliest goes
first (ties: the lower chain), no segment waits while its stream is idle and it is ready.

So ``max(compute, communication) <= block <= compute + communication``: the left side
because each stream runs its segments one at a time, the right because at every moment
at least one stream is busy (a ready segment never waits for an idle stream). With no
communication the block is the sum of its ops (the pair F&B costs F + B); with
communication much longer than compute it is the communication of both chains.

**Communication kernels take SMs** (issue 41): an all-to-all kernel holds ``k`` of the GPU's
``N`` multiprocessors while it runs (DeepSeek-V3 report, section 3.2.2: DeepEP's dispatch
and combine run on 20 of the H800's 132 SMs), so a compute segment running beside it
progresses at ``(N - k) / N`` of its speed; alone, at full speed. ``comm_share = k / N``;
with ``k = 0`` the block is the list schedule above exactly. The list order is kept (a
segment starts when its chain's previous one has ended and its stream is free; among
ready segments of a stream the lower chain first); only the compute segments' ends move.
The kernels (``EP_KERNELS``, a device's ``ep_kernels``):

* ``deepep_normal`` — DeepEP's normal (training / prefill) kernels: 20 SMs (DeepSeek-V3
  report 3.2.2, "only 20 SMs are sufficient to fully utilize the bandwidths of IB and
  NVLink"; DeepEP's README tests them with the same 20 on an H800);
* ``deepep_low_latency`` — DeepEP's low-latency kernels with its hook-based overlap, which
  "does not occupy any SM resource" (DeepEP README): 0 SMs.
"""

from __future__ import annotations

import math
from typing import Sequence

Segment = tuple[bool, float]  # (on the communication stream, seconds)

EP_KERNELS = {"deepep_normal": 20, "deepep_low_latency": 0}
"""[P] SMs each expert-parallel all-to-all kernel holds while it runs (module docstring)."""


def check_ep_kernels(name: str) -> str:
    """``name`` when it is a kernel of ``EP_KERNELS`` ("" too: communication takes no SMs)."""
    if name and name not in EP_KERNELS:
        raise ValueError(f"ep_kernels must be one of {', '.join(EP_KERNELS)} (or empty), got {name!r}")
    return name


def comm_share(ep_kernels: str, sm_count: int) -> float:
    """``k / N``: the share of a device's ``sm_count`` SMs its all-to-all kernels
    ``ep_kernels`` hold (0 without either)."""
    if not ep_kernels or not sm_count:
        return 0.0
    return min(EP_KERNELS[check_ep_kernels(ep_kernels)] / sm_count, 1.0)


def two_stream(chains: Sequence[Sequence[Segment]], comm_share: float = 0.0) -> float:
    """Seconds to run ``chains`` (each a sequence of (communication?, seconds) segments
    in order) on one compute and one communication stream, compute slowed to ``1 -
    comm_share`` while communication runs (module docstring)."""
    if not 0 <= comm_share < 1:
        raise ValueError(f"comm_share must be in [0, 1), got {comm_share!r}")
    if comm_share:
        return _shared(chains, 1.0 - comm_share)
    ready = [0.0] * len(chains)
    nxt = [0] * len(chains)
    free = {False: 0.0, True: 0.0}
    end = 0.0
    while True:
        best, best_t = -1, 0.0
        for c, chain in enumerate(chains):
            if nxt[c] < len(chain):
                stream = chain[nxt[c]][0]
                t = max(ready[c], free[stream])
                if best < 0 or t < best_t:
                    best, best_t = c, t
        if best < 0:
            return end
        stream, seconds = chains[best][nxt[best]]
        finish = best_t + seconds
        free[stream] = ready[best] = finish
        nxt[best] += 1
        end = max(end, finish)


def _start(chains: Sequence[Sequence[Segment]], nxt: list[int], ready: list[float], stream: bool,
           now: float) -> int:
    """The chain whose next segment starts on ``stream`` at ``now`` (-1: none is ready)."""
    for c, chain in enumerate(chains):
        if nxt[c] < len(chain) and chain[nxt[c]][0] == stream and ready[c] <= now:
            return c
    return -1


def _shared(chains: Sequence[Sequence[Segment]], rate: float) -> float:
    """``two_stream`` with compute at ``rate`` of its speed while communication runs: the
    same list order, simulated event by event."""
    ready = [0.0] * len(chains)
    nxt = [0] * len(chains)
    running: dict[bool, tuple[int, float]] = {}  # stream -> (chain, remaining compute seconds | comm end)
    now = 0.0
    while True:
        for stream in (False, True):
            if stream not in running:
                c = _start(chains, nxt, ready, stream, now)
                if c >= 0:
                    seconds = chains[c][nxt[c]][1]
                    running[stream] = (c, now + seconds if stream else seconds)
                    nxt[c] += 1
                    ready[c] = math.inf
        if not running:
            return now
        speed = rate if True in running else 1.0
        ends = {stream: (v if stream else now + v / speed) for stream, (_, v) in running.items()}
        t = min(ends.values())
        if False in running:
            c, left = running[False]
            running[False] = (c, left - (t - now) * speed)
        for stream, end in ends.items():
            if end <= t:
                ready[running.pop(stream)[0]] = t
        now = t
