"""The REPORT's capped bidirectional runs (``experiments.fig4_caps_bound``): the cap is the
sweep's ``4act`` (persistent memory plus 4 of the largest activation per device), and the
device relaxation on the middle device lies between the analytic bound and a schedule
CP-SAT finds."""

import pytest

from experiments.fig4_caps_bound import problem
from pipetab.solver.cpsat import CpSatConfig, search
from pipetab.solver.cpsat.model.bounds import makespan_lower_bound
from pipetab.solver.cpsat.model.device_relaxation import relaxation_bound


def test_cap_is_four_activations_over_persistent():
    """Every device holds four of its largest stage's activations beside its persistent
    memory, and not five."""
    p = problem("mid_nw_mid_cp", 16, 16)
    pl = p.fixed_placement
    for d in range(16):
        largest = max(p.costs.activation[k] for k in pl.stages_on(d))
        assert 4 * largest <= p.cap(d) < 5 * largest


@pytest.mark.slow
def test_middle_device_relaxation_between_analytic_and_a_schedule():
    p = problem("mid_nw_mid_cp", 16, 16)
    analytic = makespan_lower_bound(p, p.fixed_placement)[0]
    cfg = CpSatConfig(time_limit_s=30, deterministic_time=3.0, workers=2)
    b = relaxation_bound(p, p.fixed_placement, (7,), cfg, 30.0, lower=analytic)
    res = search(p, cfg)
    assert res.makespan is not None
    assert analytic <= b <= res.makespan
