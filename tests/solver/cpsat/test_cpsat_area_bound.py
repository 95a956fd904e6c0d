"""The activation-area device bound (``bounds._memory_area_bound``, Little's law over the
whole step with its fill and drain): hand-worked values, the bound of issue 28's
interleaved placement misses, and never above an optimum CP-SAT proves without it."""

import numpy as np
import pytest

from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.model.bounds import _least_time_holding, _memory_area_bound, makespan_lower_bound
from pipetab.solver.cpsat.model.cyclic import per_microbatch_work
from pipetab.solver.cpsat.model.variables import heads_tails


def _area(problem, device: int) -> int:
    placement = problem.fixed_placement
    head, tail = heads_tails(problem, placement)
    return _memory_area_bound(problem, placement, device, head, tail, per_microbatch_work(problem, placement)[1])


def _held_by_enumeration(cap, act, h, f, r, last, T) -> float:
    """The most area ticks [0, T) hold, tick by tick (the bound's own held() avoids the
    middle ticks)."""
    total = 0.0
    for t in range(T):
        begun = ((t - h) // f + 1 if f else 10**9) if t >= h else 0
        owing = ((T - last - t - 1) // r + 1 if r else 10**9) if t < T - last else 0
        total += min(cap, act * min(begun, owing))
    return total


def test_linear_two_stages_by_hand():
    """Linear S=2, B=6, F=1, B=2, a message of 2, cap 2 activations. Device 0's activation
    lives F0 + 2 + F1 + B1 + 2 + B0 = 10 at least: area 6 x 10 = 60. Its memory is at
    most the forwards begun (t + 1 in tick t: 1 in tick 0, then the cap 2) and at most
    the backwards still to end (ceil(u / 2) in the u-th last tick: 1, 1, then 2): 2T - 3
    >= 60 gives T = 32, one below the optimum CP-SAT proves (33). Device 1 (lifetime F1 +
    B1 = 3, area 18): its first forward begins at 3, so ticks 0..2 hold nothing and tick 3
    one activation (short 7); its backward has a tail of 2 + B0 = 4, so the last 4 ticks
    hold nothing and the 2 before them one (short 10): 2T - 17 >= 18 gives 18."""
    problem = idealized_problem(2, 6, "linear", forward=1, backward=2, comm=2, activation_cap=2)
    assert (_area(problem, 0), _area(problem, 1)) == (32, 18)
    res = search(problem, CpSatConfig(time_limit_s=60, deterministic_time=5.0, workers=2))
    assert res.status == "optimal" and res.makespan == 33


def test_interleaved_placement_miss_by_hand():
    """Issue 28's interleaved S=16, B=128, F:B = 1:2, a message of 1 slot, a cap of 16
    (ticks of 1/2 slot: a chunk's F is 1 tick, its B 2, a hop of 1 slot 2 ticks). Device 0
    holds chunks 0 and 16 (M = 1/2 each). Chunk 0's activation lives through the whole
    round trip: 32 forwards and 31 hops (94), 32 backwards and 31 hops (126), 220 ticks;
    chunk 16's 16 + 30 + 32 + 30 = 108. Area 128 x 1/2 x 328 = 20,992. Fill: 1/2 per
    forward begun, one a tick: ticks 0..30 hold 496 - 248, short 248. Drain: 1/2 per
    backward still to end, each 2 ticks: the last 62 ticks are short 992 - 496 = 496.
    16 T - 744 >= 20,992: T = 1359 ticks, 679.5 slots — above the plain area over the
    cap (20,992 / 16 = 1312)."""
    problem = idealized_problem(16, 128, "interleaved", forward=1, backward=2, comm=1, activation_cap=16)
    assert problem.costs.tick_slots == 0.5
    lb, why = makespan_lower_bound(problem, problem.fixed_placement)
    assert (lb, why) == (1359, "activation lifetimes of device 0 over its memory cap, memory ramping up and down")


@pytest.mark.parametrize("cap,act,h,f,r,last", [
    (16, 0.5, 0, 1, 2, 0), (3, 1.0, 4, 2, 3, 5), (2.5, 0.75, 1, 3, 1, 2), (1, 1.0, 0, 1, 1, 0),
    (4, 1.0, 2, 0, 3, 1), (4, 1.0, 2, 2, 0, 1),  # a zero-length op: that count is unbounded
])
def test_held_area_matches_tick_enumeration(cap, act, h, f, r, last):
    """The bound's closed form past the fill and drain windows against the ticks summed
    one by one: the least T holding an area equals the enumeration's on a range of
    areas."""
    from math import ceil

    k = ceil(cap / act - 1e-9)
    span = h + k * f + last + k * r
    for area in np.linspace(1, 6 * span * cap, 25):
        want = next(T for T in range(1, 100 * span) if _held_by_enumeration(cap, act, h, f, r, last, T)
                    >= area - 1e-9 * area)
        got = _least_time_holding(area, cap, act, h, f, r, last)
        assert got == want, (area, got, want)


def test_no_cap_no_bound():
    problem = idealized_problem(4, 8, "interleaved", comm=1)
    assert all(_area(problem, d) == 0 for d in range(4))


@pytest.mark.slow
@pytest.mark.parametrize("S,B,placement,split,comm,cap,times", [
    (3, 8, "interleaved", True, 2, 1.5, (1, 2, 1)),
    (3, 8, "interleaved", True, 2, 1.5, (1, 1, 1)),
    (4, 6, "interleaved", True, 1, 2.0, (2, 3, 1)),
    (4, 4, "v", False, 1, 4.0, (2, 3, 1)),
    (4, 8, "interleaved", False, 0, 2.0, (1, 2, 1)),
])
def test_never_above_a_proven_optimum(S, B, placement, split, comm, cap, times):
    """Instances where the area bound is the largest analytic one (found by a sweep of 151
    small instances, none above its optimum): CP-SAT proves the optimum in deterministic
    time and the bound is at most it."""
    f, b, w = times
    problem = idealized_problem(S, B, placement, forward=f, backward=b, weight=w, comm=comm, activation_cap=cap,
                                split_backward=split, weight_memory=0.5)
    area = max(_area(problem, d) for d in range(problem.num_devices))
    lb, why = makespan_lower_bound(problem, problem.fixed_placement)
    assert area == lb and "lifetimes" in why
    res = search(problem, CpSatConfig(time_limit_s=120, deterministic_time=10.0, workers=2))
    assert res.status == "optimal" and area <= res.makespan
