"""The device relaxation bound (``model.device_relaxation``, issue 45 item 1): one device's
ops kept whole under its cap, every other device free. It counts the waits that
microbatches meeting on that device force, which the analytic bound does not; it is never
above an optimum CP-SAT proves of the full model, nor above any registry schedule's
simulated time (a property test over small random instances)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.heuristics.starts import registry_schedules
from pipetab.solver.cpsat.model.bounds import makespan_lower_bound
from pipetab.solver.cpsat.model.device_relaxation import relaxation_bound
from pipetab.solver.cpsat.model.oracle import evaluate_known

CFG = CpSatConfig(time_limit_s=60, deterministic_time=4.0, workers=2)


def _device_bounds(problem, seconds: float = 60.0) -> list[int]:
    pl = problem.fixed_placement
    return [relaxation_bound(problem, pl, (d,), CFG, seconds) for d in range(problem.num_devices)]


@pytest.mark.slow
def test_interleaved_s4_counts_the_waits():
    """Interleaved S=4, B=16, per chunk F = 1, B = 2, a message of 1 slot (2 ticks), a cap of
    4: the full model proves 182, the analytic bound is 163 (device 0's activation area).
    Device 0 alone under its cap, with its chunk-0 and chunk-4 chains contracted to their
    least lags, cannot keep every op at its least lag: its bound lies strictly above the
    analytic one and not above the optimum (measured: 181)."""
    problem = idealized_problem(4, 16, "interleaved", forward=1, backward=2, comm=1, activation_cap=4)
    analytic = makespan_lower_bound(problem, problem.fixed_placement)[0]
    assert analytic == 163
    b = relaxation_bound(problem, problem.fixed_placement, (0,), CFG, 60.0, lower=analytic)
    assert analytic < b <= 182


def test_linear_without_cap_by_hand():
    """Linear S=2, B=3, F = 1, B = 2, no message, no cap. Device 1 kept: its first forward
    starts at 1 (device 0's forward before it), it runs 3 F and 3 B back to back (9), and
    its last B has a tail of device 0's B (2): 12. A schedule meets it (device 0: F at 0,
    1, 2, B at 6, 8, 10; device 1: F at 1, 2, 3, B at 4, 6, 8), and CP-SAT proves 12."""
    problem = idealized_problem(2, 3, "linear", forward=1, backward=2, comm=0)
    assert _device_bounds(problem)[1] == 12
    res = search(problem, CFG)
    assert (res.status, res.makespan) == ("optimal", 12)


def test_refuses_bad_devices():
    problem = idealized_problem(2, 2, "linear", forward=1, backward=2, comm=0)
    with pytest.raises(ValueError, match="devices"):
        relaxation_bound(problem, problem.fixed_placement, (2,), CFG, 1.0)
    with pytest.raises(ValueError, match="devices"):
        relaxation_bound(problem, problem.fixed_placement, (), CFG, 1.0)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    S=st.integers(2, 3),
    extra=st.integers(0, 3),
    placement=st.sampled_from(["linear", "v", "bidirectional", "interleaved"]),
    split=st.booleans(),
    times=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2)),
    comm=st.integers(0, 2),
    cap=st.one_of(st.none(), st.sampled_from([1.0, 1.5, 2.0])),
)
def test_never_above_an_optimum_or_a_registry_schedule(S, extra, placement, split, times, comm, cap):
    """Random small instances: each device's relaxation bound is at most the optimum CP-SAT
    proves of the full model (where it proves one) and at most every registry schedule's
    simulated makespan that fits its cap."""
    B = S + extra + (S % 2 if placement == "bidirectional" else 0)
    problem = idealized_problem(S, B, placement, forward=times[0], backward=times[1], weight=times[2], comm=comm,
                                activation_cap=None if cap is None else cap * S, split_backward=split)
    bounds = _device_bounds(problem, 20.0)
    res = search(problem, CFG)
    if res.status == "optimal":
        assert max(bounds) <= res.makespan, (bounds, res.makespan)
    elif res.status == "infeasible":
        return
    for sched in registry_schedules(problem, problem.fixed_placement):
        ev = evaluate_known(problem, sched)
        if ev.fits:
            assert max(bounds) <= ev.makespan, (sched.name, bounds, ev.makespan)


def test_refuses_free_placement():
    problem = idealized_problem(2, 2, "linear", forward=1, backward=2, comm=0)
    with pytest.raises(ValueError, match="placement"):
        relaxation_bound(problem, None, (0,), CFG, 1.0)
