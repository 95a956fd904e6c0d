"""Split backward with partial weight memory and the period objective: CP-SAT's optimum
equals an enumeration of every per-device order of tiny instances, each judged by the
simulator and the memory accounting of ``schedules.memory`` (no CP-SAT involved)."""

import itertools

import pytest

from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import CpSatConfig, analytic_lower_bound, bound, idealized_problem, search
from pipetab.solver.cpsat.model.oracle import evaluate_known
from pipetab.solver.periodic import span_period
from pipetab.solver.simulate import simulate


def _device_orders(stage: int, microbatches: int, kinds):
    """Every order of one stage's ops in which each kind runs in microbatch order (FIFO,
    without loss of generality) and F(j) < B(j) < W(j)."""
    n = len(kinds)

    def rec(done, seq):
        if all(d == microbatches for d in done):
            yield tuple(seq)
            return
        for i, kind in enumerate(kinds):
            j = done[i]
            if j < microbatches and (i == 0 or done[i - 1] > j):
                done[i] += 1
                seq.append(Op(kind, 0, stage, j))
                yield from rec(done, seq)
                seq.pop()
                done[i] -= 1

    yield from rec([0] * n, [])


def _enumerated_optimum(problem):
    """The least objective over all FIFO per-device orders that fit the caps."""
    kinds = problem.kinds
    per_device = [list(_device_orders(s, problem.num_microbatches, kinds)) for s in range(problem.num_devices)]
    best = None
    for orders in itertools.product(*per_device):
        ev = evaluate_known(problem, problem.schedule("enum", problem.fixed_placement, orders))
        if ev.fits and (best is None or ev.makespan < best):
            best = ev.makespan
    return best


CASES = [
    # S, B, F, B, W, comm, cap (M_B), M_W / M, objective
    (2, 3, 1, 1, 1, 1, 1.5, 0.5, "makespan"),
    (2, 3, 1, 1, 1, 0, 1.5, 0.5, "period"),
    (2, 2, 1, 2, 1, 1, 1.0, 0.5, "makespan"),
    (3, 2, 1, 1, 1, 1, 1.25, 0.25, "makespan"),
    (2, 3, 3, 3, 2, 1, 2.0, 0.75, "period"),
    (2, 3, 1, 2, 1, 1, 1.0, 1.0, "period"),
    (3, 2, 1, 1, 1, 1, 1.0, 0.5, "period"),
    (3, 2, 2, 1, 1, 2, 1.5, 0.5, "period"),
]


@pytest.mark.slow
@pytest.mark.parametrize("S,B_,f,b,w,comm,cap,frac,objective", CASES)
def test_split_backward_optimum_equals_enumeration(S, B_, f, b, w, comm, cap, frac, objective):
    problem = idealized_problem(S, B_, forward=f, backward=b, weight=w, comm=comm, activation_cap=cap,
                                split_backward=True, weight_memory=frac, objective=objective)
    res = search(problem, CpSatConfig(time_limit_s=20, workers=2))
    optimum = _enumerated_optimum(problem)
    assert res.status == "optimal" and res.makespan == optimum
    assert analytic_lower_bound(problem, problem.fixed_placement)[0] <= optimum
    sim = simulate(res.schedule, problem.costs)
    assert all(sim.fits_memory)


@pytest.mark.parametrize("S,B_,comm,cap,objective", [(2, 3, 1, 2, "period"), (3, 2, 1, None, "period"),
                                                     (2, 3, 0, 1, "makespan")])
def test_unsplit_optimum_equals_enumeration(S, B_, comm, cap, objective):
    problem = idealized_problem(S, B_, comm=comm, activation_cap=cap, objective=objective)
    res = bound(problem, CpSatConfig(time_limit_s=20, workers=2))
    optimum = _enumerated_optimum(problem)
    assert res.status == "optimal" and res.lower_bound == optimum
    assert analytic_lower_bound(problem, problem.fixed_placement)[0] <= optimum


@pytest.mark.slow
def test_partial_weight_memory_is_what_makes_a_schedule_fit():
    """S=2, B=3 with cap 1.5 M_B: holding whole activations until W (M_W = M) is slower
    than freeing half at B (M_W = M/2), which the enumeration confirms."""
    kw = dict(forward=1, backward=1, weight=1, comm=1, activation_cap=1.5, split_backward=True)
    held = idealized_problem(2, 3, weight_memory=1.0, **kw)
    freed = idealized_problem(2, 3, weight_memory=0.5, **kw)
    assert _enumerated_optimum(freed) < _enumerated_optimum(held)
    cfg = CpSatConfig(time_limit_s=20, workers=2)
    assert search(freed, cfg).makespan == _enumerated_optimum(freed)
    assert search(held, cfg).makespan == _enumerated_optimum(held)


def test_period_of_a_timed_schedule_by_hand():
    """One device: F, B back to back is a span of F + B; two devices with a message of 1:
    device 0 spans F, message, F, B, message, B = 1 + 1 + 1 + 2 + 1 + 2 = 8, device 1
    F + B = 3; the least period keeps device 0's span (its ops are chained)."""
    problem = idealized_problem(2, 1, comm=1, objective="period")
    orders = ((Op(Kind.F, 0, 0, 0), Op(Kind.B, 0, 0, 0)), (Op(Kind.F, 0, 1, 0), Op(Kind.B, 0, 1, 0)))
    ev = evaluate_known(problem, problem.schedule("one", problem.fixed_placement, orders))
    assert ev.makespan == 8 == span_period(ev.timing.start, ev.timing.end, ev.schedule.device_of)


def test_measured_times_round_up_for_schedules_and_down_for_bounds():
    """Measured times in seconds (T_F = 18.5 ms, T_B = 18.8 ms, T_W = 12.4 ms, T_comm =
    0.6 ms) on ticks of 1 ms: up gives 19, 19, 13 ticks, down 18, 18, 12; the bound on the
    rounded-down problem is below ZB-H1's real-valued time, the search's schedule at most
    its rounded-up one (``cpsat.api.solve_seconds``)."""
    from pipetab.hardware.profile import Profile, StageProfile
    from pipetab.schedules import registry
    from pipetab.solver.cpsat.api import solve_seconds
    from pipetab.solver.pricing import profile_costs

    profile = Profile("measured", (StageProfile(0.0185, 0.0188, 0.0124, 0.0006, activation_bytes=1.0,
                                                weight_memory_bytes=0.5),), memory_bytes=4.0, uniform=True)
    zb = registry.generate("zb-h1", 4, 8)
    real = profile_costs(zb, profile)
    up, down = real.quantized(1e-3, "up"), real.quantized(1e-3, "down")
    assert [up.op_time[(k, 0, 0)] for k in (Kind.F, Kind.B, Kind.W)] == [19, 19, 13]
    assert [down.op_time[(k, 0, 0)] for k in (Kind.F, Kind.B, Kind.W)] == [18, 18, 12]
    real_time = simulate(zb, real).makespan
    shape = idealized_problem(4, 8, split_backward=True)
    cfg = CpSatConfig(time_limit_s=10, workers=2)
    lb = solve_seconds(shape, real, "bound", cfg, tick_s=1e-3)
    assert lb.lower_bound_s <= real_time + 1e-12 and any("rounded down" in a for a in lb.assumptions)
    found = solve_seconds(shape, real, "search", cfg, tick_s=1e-3)
    assert found.search.makespan <= found.search.known["zb-h1"].makespan
    assert found.seconds <= found.search.makespan * 1e-3 + 1e-12 and found.known["zb-h1"].seconds == real_time
    with pytest.raises(ValueError, match="forward_s"):
        StageProfile(-1.0, 0.01)


def test_the_known_schedules_in_seconds_are_those_the_search_judged():
    """``solve_seconds`` times in seconds exactly the known schedules the search judged —
    registry names, and names with a note (W fused into B, pairs not overlapped) — each
    the registry schedule simulated on the real costs (only the judged ones are generated
    again, found by their names)."""
    from pipetab.hardware.profile import Profile, StageProfile
    from pipetab.schedules import registry
    from pipetab.schedules.rewrite import fused_backward
    from pipetab.solver.cpsat.api import solve_seconds
    from pipetab.solver.cpsat.heuristics.starts import registry_schedules
    from pipetab.solver.pricing import profile_costs

    profile = Profile("measured", (StageProfile(0.0185, 0.0376, None, 0.0006, activation_bytes=1.0),),
                      memory_bytes=8.0, uniform=True)
    real = profile_costs(fused_backward(registry.generate("zbv", 4, 8)), profile)
    shape = idealized_problem(4, 8, "v")
    found = solve_seconds(shape, real, "search", CpSatConfig(time_limit_s=30, deterministic_time=5, workers=1),
                          tick_s=1e-3)
    pool = {s.name: s for s in registry_schedules(shape, shape.fixed_placement)}
    named = [k for k in found.search.known if k in pool]
    assert any(" (W fused into B)" in k for k in named)
    assert set(found.known) == set(found.search.known)
    for k in named:
        expected = simulate(pool[k], real).makespan if found.search.known[k].makespan is not None else None
        assert found.known[k].seconds == expected


def test_the_answer_begins_no_simulation_past_the_deadline():
    """After the solves ``solve_seconds`` simulates its schedule once (its time in seconds),
    then three times for the rounding spread and once per known schedule — each only where
    the first simulation's time says it ends by the deadline: with the deadline passed the
    answer keeps its time, bound and the known schedules' names and fits, without rounding
    or their seconds; with time left, the same as the first answer."""
    import time

    from pipetab.hardware.profile import Profile, StageProfile
    from pipetab.schedules import registry
    from pipetab.solver.cpsat.api import _answer, solve_seconds
    from pipetab.solver.cpsat.result import Mode
    from pipetab.solver.deadline import Deadline
    from pipetab.solver.pricing import profile_costs

    profile = Profile("measured", (StageProfile(0.0185, 0.0376, None, 0.0006, activation_bytes=1.0),),
                      memory_bytes=8.0, uniform=True)
    real = profile_costs(registry.generate("1f1b", 4, 8), profile)
    shape = idealized_problem(4, 8)
    first = solve_seconds(shape, real, "search", CpSatConfig(time_limit_s=30, deterministic_time=5, workers=1),
                          tick_s=1e-3)
    assert first.rounding is not None and first.known["1f1b"].seconds == simulate(registry.generate("1f1b", 4, 8),
                                                                                   real).makespan

    def again(deadline: Deadline):
        return _answer(shape, real, Mode.SEARCH, 1e-3, first.search, first.bound, [], real, deadline)

    late = again(Deadline.start(1.0, t0=time.perf_counter() - 10.0))
    assert (late.seconds, late.lower_bound_s, late.rounding) == (first.seconds, first.lower_bound_s, None)
    assert {k: v.fits for k, v in late.known.items()} == {k: v.fits for k, v in first.known.items()}
    assert all(v.seconds is None for v in late.known.values())
    timely = again(Deadline.start(60.0))
    assert (timely.rounding, timely.known) == (first.rounding, first.known)
