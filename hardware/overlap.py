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
"""

from __future__ import annotations

from typing import Sequence

Segment = tuple[bool, float]  # (on the communication stream, seconds)


def two_stream(chains: Sequence[Sequence[Segment]]) -> float:
    """Seconds to run ``chains`` (each a sequence of (communication?, seconds) segments
    in order) on one compute and one communication stream (module docstring)."""
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
