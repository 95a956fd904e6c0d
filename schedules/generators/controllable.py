"""V-Half and V-Min: V-shaped schedules with half and a third of 1F1B's activation memory
(Qi, Wan, Huang, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024,
arXiv 2405.15362), in the order of the authors' generator (sail-sg's ``zbv_greedy.py``).

Each device d holds stages d and 2S-1-d (the V). A *building block* places one
microbatch's four passes on every device at fixed offsets within a period of 6 slots
(``_pattern``: V-Min ``[d, 2S-1-d, 2S+g+d, 4S+g-1-d]`` with ``g = 2`` when 3 divides S;
V-Half ``[2d, 3S-2-d, 3S+g+2d-1, 6S+g-d-2]`` with ``g = 3`` when S is even; the passes
are F of chunk 0, F of chunk 1, B of chunk 1, B of chunk 0) and microbatch m repeats it
``6m`` slots later. Then, as the authors' greedy does:

1. the weight gradients are placed: each B's W fills the first free slot after it
   (``_put_w``) and every pass is moved to the earliest free slot its inputs allow that
   does not raise the device's activation peak (``_reorder`` with W, after the first
   chunk-0 backward of device 0, until the last chunk-0 forward), the result squeezed to
   as-soon-as-possible unit times (``_eager``);
2. the same again without the W's (the forwards and backwards only, from the start);
3. the W's placed again, those of the two chunks kept apart (``split_w``).

A device's order is its passes by time. This module is an independent transcription; the
orders equal the authors' (``tests/data/golden_orders.json``, ``experiments/golden_orders.py``).
"""

from __future__ import annotations

from ..ops import Kind, Op
from ..placements import PlacementFamily, family_placement
from ..schedule import Schedule
from . import check_shape

# pass types: F chunk 0, F chunk 1, B chunk 1, B chunk 0, W chunk 1 (or both), W chunk 0
_MEMORY = (1, 1, 0, 0, -1)  # activation change of a pass (W frees)


def _pattern(stages: int, memory: str) -> list[list[int]]:
    """Slots of the four passes of microbatch 0 on each device (module docstring)."""
    s = stages
    if memory == "min":
        g = 2 if s % 3 == 0 else 0
        return [[d, 2 * s - d - 1, 2 * s + g + d, 4 * s + g - d - 1] for d in range(s)]
    g = 3 if s % 2 == 0 else 0
    return [[2 * d, 3 * s - d - 2, 3 * s + g + 2 * d - 1, 6 * s + g - d - 2] for d in range(s)]


def _next(device: list[list[int]], p: list[int], types: int, inf: int) -> tuple[int, int]:
    """(time, type) of the device's earliest pass not yet visited (lowest type on a tie)."""
    return min((device[t][p[t]] if p[t] < len(device[t]) else inf, t) for t in range(types))


def _put_w(device: list[list[int]], split_w: bool = False) -> list[list[int]]:
    """The device's passes with the W of each B in the first free slot after it (one W list,
    or one per chunk with ``split_w``)."""
    bound = max(x[-1] for x in device)
    inf = bound + 1
    out = [list(x) for x in device] + [[] for _ in range(2 if split_w else 1)]
    pending = [0, 0]
    p = [0] * len(out)
    i = 0
    for i in range(bound + 1):
        time, t = _next(out, p, 4, inf)
        if time == i:
            p[t] += 1
            if 2 <= t < 4:
                pending[t - 2 if split_w else 0] += 1
            continue
        for w in range(2):
            if pending[w]:
                out[w + 4].append(i)
                pending[w] -= 1
                break
    for w in range(2):
        while pending[w] > 0:
            i += 1
            out[w + 4].append(i)
            pending[w] -= 1
    return out


def _peak(device: list[list[int]]) -> int:
    """The device's activation peak (without W lists, each B's W frees at its first free slot)."""
    has_w = len(device) > 4
    bound = max(x[-1] for x in device)
    inf = bound + 1
    pending = level = peak = 0
    p = [0] * len(device)
    for i in range(bound + 1):
        time, t = _next(device, p, len(device), inf)
        if time == i:
            p[t] += 1
            level += _MEMORY[t]
            pending += 2 <= t < 4
        elif not has_w and pending:
            level += _MEMORY[4]
            pending -= 1
        peak = max(peak, level)
    return peak


def _order(result: list[list[list[int]]]) -> list[tuple[int, int, int, int]]:
    """Every pass as (time, device, type, microbatch), in the authors' visiting order."""
    return sorted((t, d, k, m) for d, device in enumerate(result) for k, times in enumerate(device)
                  for m, t in enumerate(times))


def _eager(result: list[list[list[int]]]) -> list[list[list[int]]]:
    """Unit-time as-soon-as-possible start of every pass, visited in slot order: after its
    input (the stage before, the pass before on the same microbatch and device), the same
    pass of the microbatch before, and the device's previous pass."""
    s = len(result)
    end: dict[tuple[int, int, int], int] = {}
    last: list[tuple[int, int] | None] = [None] * s
    for _, d, k, m in _order(result):
        ready = 0
        if k in (0, 2) and d > 0:
            ready = max(ready, end[(d - 1, k, m)])
        if k in (1, 3) and d + 1 < s:
            ready = max(ready, end[(d + 1, k, m)])
        if 0 < k < 4:
            ready = max(ready, end[(d, k - 1, m)])
        if m > 0:
            ready = max(ready, end[(d, k, m - 1)])
        prev = last[d]
        if prev is not None:
            ready = max(ready, end[(d, prev[0], prev[1])])
        end[(d, k, m)] = ready + 1
        last[d] = (k, m)
    return [[[end[(d, k, m)] - 1 for m in range(len(times))] for k, times in enumerate(device)]
            for d, device in enumerate(result)]


def _earliest(result: list[list[list[int]]], d: int, k: int, m: int) -> int:
    """The first slot the pass may take: after its inputs' slots (module docstring)."""
    s, ready = len(result), -1
    if k in (0, 2) and d > 0:
        ready = max(ready, result[d - 1][k][m])
    if k in (1, 3) and d + 1 < s:
        ready = max(ready, result[d + 1][k][m])
    if 0 < k < 4:
        ready = max(ready, result[d][k - 1][m])
    if k == 4:
        ready = max(ready, sorted(result[d][2] + result[d][3])[m])
    if m > 0:
        ready = max(ready, result[d][k][m - 1])
    return ready + 1


def _reorder(result: list[list[list[int]]], with_w: bool) -> list[list[list[int]]]:
    """Step 1 (``with_w``) or 2 of the module docstring."""
    if with_w:
        result = [_put_w(device) for device in result]
    peak = max(_peak(device) for device in result)
    taken = [[False] * (device[-1][-1] + 1) for device in result]
    phase, last_f0 = 0, len(result[0][0]) - 1
    for time, d, k, m in _order(result):
        if k == 3 and d == 0 and phase == 0:
            phase = 1
        if phase == 1 or (phase == 0 and not with_w):
            if phase == 1 and k == 0 and m == last_f0:
                phase = 2
            taken[d][result[d][k][m]] = True
            continue
        for slot in range(_earliest(result, d, k, m), time):
            if not taken[d][slot]:
                result[d][k][m] = slot
                if _peak(result[d]) <= peak:
                    break
        else:
            result[d][k][m] = time
        taken[d][result[d][k][m]] = True
    if not with_w:
        result = [_put_w(device) for device in result]
    return _eager(result)


def device_passes(stages: int, microbatches: int, memory: str) -> list[list[tuple[int, int]]]:
    """Each device's (type, microbatch) passes in order (module docstring)."""
    pattern = _pattern(stages, memory)
    result = [[list(range(x, x + 6 * microbatches, 6)) for x in device] for device in pattern]
    first = [device[:4] for device in _reorder(result, with_w=True)]
    second = [device[:4] for device in _reorder(first, with_w=False)]
    final = [_put_w(device, split_w=True) for device in second]
    out: list[list[tuple[int, int]]] = [[] for _ in range(stages)]
    for _, d, k, m in _order(final):
        out[d].append((k, m))
    return out


def _v_schedule(name: str, stages: int, microbatches: int, memory: str) -> Schedule:
    check_shape(stages, microbatches)
    kinds = (Kind.F, Kind.F, Kind.B, Kind.B, Kind.W, Kind.W)
    orders = []
    for d, passes in enumerate(device_passes(stages, microbatches, memory)):
        chunk = {0: d, 1: 2 * stages - 1 - d, 2: 2 * stages - 1 - d, 3: d, 4: 2 * stages - 1 - d, 5: d}
        orders.append(tuple(Op(kinds[k], 0, chunk[k], m) for k, m in passes))
    return Schedule(name, family_placement(PlacementFamily.V, stages, (2 * stages,)), (0,) * microbatches,
                    tuple(orders), split_backward=True, params={"stages": stages, "microbatches": microbatches})


def v_half(stages: int, microbatches: int) -> Schedule:
    """V-Half over ``stages`` devices (module docstring)."""
    return _v_schedule("v-half", stages, microbatches, "half")


def v_min(stages: int, microbatches: int) -> Schedule:
    """V-Min over ``stages`` devices (module docstring)."""
    return _v_schedule("v-min", stages, microbatches, "min")
