"""Mirror-symmetric schedules of a bidirectional problem, a heuristic restriction: Chimera's
placement is its own mirror (swap the pipelines, reverse the devices). Where costs, caps and
optimizer steps agree under that swap, a schedule in which the j-th microbatch of each
direction starts each op at the same time is valid. Searching only those halves the space;
it is no loss-free restriction, so its bound is never reported (only its schedules, checked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipetab.schedules.ops import Op, data_successors

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..problem import Problem


def mirror_pairs(problem: Problem, placement: Placement) -> list[tuple[Op, Op]] | None:
    """(op of pipeline 0, its twin of pipeline 1) for every op, when the problem is
    mirror-symmetric under ``placement`` (see the module docstring); else None."""
    if problem.num_pipelines != 2 or problem.num_stages[0] != problem.num_stages[1]:
        return None
    if problem.costs.replica_groups:
        return None
    mbs = problem.pipeline_microbatches
    if len(mbs[0]) != len(mbs[1]):
        return None
    n, costs = problem.num_stages[0], problem.costs
    twin_device: dict[int, int] = {}
    for s in range(n):
        a, b = placement.device(0, s), placement.device(1, s)
        if twin_device.setdefault(a, b) != b or twin_device.setdefault(b, a) != a:
            return None
    for d in range(placement.num_devices):
        e = twin_device.get(d, d)
        if problem.cap(d) != problem.cap(e) or problem.optimizer(d) != problem.optimizer(e):
            return None
    for s in range(n):
        if (costs.activation[(0, s)] != costs.activation[(1, s)]
                or problem.weight_part(0, s) != problem.weight_part(1, s)):
            return None
        for k in problem.kinds:
            down, up = Op(k, 0, s, mbs[0][0]), Op(k, 1, s, mbs[1][0])
            if problem.duration(down) != problem.duration(up):
                return None
            for nx in data_successors(down, n, problem.split_backward):
                a, b = placement.device(0, s), placement.device(0, nx.stage)
                if a != b and problem.lag(down, a, b) != problem.lag(up, twin_device[a], twin_device[b]):
                    return None
    return [(Op(k, 0, s, m0), Op(k, 1, s, m1)) for s in range(n) for k in problem.kinds
            for m0, m1 in zip(mbs[0], mbs[1])]

