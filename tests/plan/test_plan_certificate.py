"""``certify`` on hand-made plans: which terms reach the text (each one that says something)."""

from types import SimpleNamespace

import pytest

from pipetab.hardware.context import Context
from pipetab.plan.certificate import certify


def conf(step: float, fits: bool = True):
    return SimpleNamespace(step_time_s=step, fits=fits)


SHAPE = Context(pp=2, tp=1, dp=4, microbatch_size=1)


def test_a_cpsat_bound_below_number_one_sets_the_gap():
    cert = certify([conf(10.0)], [conf(10.0), conf(12.0)], 10.5, [(SHAPE, 9.5, ("placement fixed",))])
    assert cert.gap == pytest.approx(0.05) and cert.least_s == 9.5  # 1 - 9.5 / 10
    assert cert.text().startswith("no configuration in the searched space is more than 5.00 % faster than #1")
    assert "bounded at 10.5 s, 5.00 % slower" in cert.text()
    assert any("placement fixed" in a for a in cert.assumes)


def test_bounds_at_or_above_number_one_are_stated_not_counted_as_a_gap():
    cert = certify([conf(10.0)], [conf(10.0)], float("inf"), [(SHAPE, 10.0, ()), (SHAPE, 11.0, ())])
    assert cert.gap == 0 and cert.unsimulated_s is None and cert.cpsat_above == 2
    assert cert.text() == ("no configuration in the searched space is faster than #1 (10 s): every other was "
                           "simulated, or a lower bound of its step is at least #1's; CP-SAT's lower bound is at "
                           "least #1's step on 2 of the shapes it searched")


def test_a_search_whose_invariants_fail_still_claims_no_less_than_the_truth():
    faster = certify([conf(10.0)], [conf(9.0)], float("inf"), [])  # a faster simulated configuration than #1
    assert faster.gap == pytest.approx(0.1) and faster.least_s == 9.0
    early = certify([conf(10.0)], [conf(10.0)], 9.9, [])  # the search stopped below #1's step
    assert early.gap == pytest.approx(0.01) and early.least_s == 9.9
    assert certify([conf(10.0, fits=False)], [], float("inf"), []) is None
