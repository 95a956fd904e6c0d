"""Property test on random small instances: the lower bound never exceeds the makespan of
a known schedule that fits the cap, and every returned schedule validates and re-evaluates
(evaluator and simulator) to the reported makespan."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipetab.schedules import registry
from pipetab.schedules.evaluate import asap
from pipetab.schedules.table import PlacedOp, Table
from pipetab.schedules.validate import validate
from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.simulate import simulate

CFG = CpSatConfig(time_limit_s=3, workers=2)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    S=st.integers(2, 4),
    B_=st.integers(1, 6),
    comm=st.integers(0, 2),
    cap=st.one_of(st.none(), st.integers(1, 4)),
    fifo=st.booleans(),
)
def test_bound_below_known_and_schedule_valid(S, B_, comm, cap, fifo):
    problem = idealized_problem(S, B_, comm=comm, activation_cap=cap)
    res = search(problem, CFG.replace(ablate=set() if fifo else {"fifo"}, known_generators=False))
    assert res.status in ("optimal", "feasible")  # cap >= 1 always fits a linear pipeline
    assert res.lower_bound is not None and res.lower_bound <= res.makespan
    for name in ("gpipe", "1f1b"):
        sim = simulate(registry.generate(name, S, B_), problem.costs)
        if all(sim.fits_memory):
            assert res.lower_bound <= sim.makespan, name
    s = res.schedule
    assert simulate(s, problem.costs).makespan == res.makespan
    assert all(simulate(s, problem.costs).fits_memory)
    dev = s.device_of
    t = asap(s, problem.costs.duration, lambda q, o, c: problem.costs.transfer(q, dev(q), dev(o)))
    table = Table(s.num_devices, tuple(
        PlacedOp(op, dev(op), int(t.start[op]), int(t.end[op] - t.start[op])) for op in t.start))
    validate(table, s)
