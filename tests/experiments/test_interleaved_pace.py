"""Interleaved placement under a cap of S with messages (``experiments.interleaved_pace``):
Little's law allows 7 ticks per microbatch at S=4, and worked by hand no periodic schedule of
block 1 reaches it; the cyclic model proves the least period is 8."""

import pytest

from experiments.interleaved_pace import little_and_load, problem, relaxation_rows
from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import CpSatConfig
from pipetab.solver.cpsat.model.cyclic import Kernel, check_kernel
from pipetab.solver.cpsat.model.variables import heads_tails
from pipetab.solver.cpsat.params import DecomposeParams
from pipetab.solver.cpsat.phases.cyclic import block_period


def test_little_pace_by_hand():
    # device 0 holds chunk 0 (stage 0) for the round trip: 2S forwards of 1, 2S backwards of 2
    # and 2(2S - 1) messages of 1 (none at the turn); chunk 1 (stage S) from its forward, S
    # forwards and S messages in, to its backward's end, S backwards and S messages before the
    # end. Chunk activations are half an activation; the cap is S activations.
    for S in (4, 8, 16):
        round_trip = 2 * S * 1 + 2 * S * 2 + 2 * (2 * S - 1) * 1
        chunk1 = round_trip - S * (1 + 1) - S * (2 + 1)
        pace, load = little_and_load(problem(S, 8 * S))
        assert load == 2 * (1 + 2)
        assert pace == 0.5 * (round_trip + chunk1) / S
    assert little_and_load(problem(4, 32))[0] == 7.0


def test_block_1_cannot_run_at_littles_pace():
    p = problem(4, 32)
    head, _ = heads_tails(p, p.fixed_placement)
    # at period 7 the cap is full with least lifetimes, so no microbatch may wait: the
    # template is the chain at its least starts. Device 0 then runs F of stage 0 at 0,
    # F of stage 4 at 8 = 1 (mod 7), B of stage 4 at 24-25 = 3-4 and B of stage 0 at 36-37 = 1-2.
    assert sorted(head[Op(k, 0, s, 0)] for k in (Kind.F, Kind.B) for s in (0, 4)) == [0, 8, 24, 36]
    zero_wait = Kernel(p, p.fixed_placement, 1, 7, dict(head))
    assert check_kernel(zero_wait) == "ops of device 0 overlap at phase 1 of the period 7"
    cfg = CpSatConfig(time_limit_s=300, deterministic_time=10.0, decompose=DecomposeParams(cyclic_min_ops=0),
                      workers=1)
    out = block_period(p, p.fixed_placement, 1, cfg, cfg.deadline())
    assert out.period == out.bound == 8
    assert check_kernel(out.kernel) is None


@pytest.mark.slow
def test_relaxation_rows_quick():
    """``--relaxation --quick``: S = 4, B = 16 and 32; at B = 16 the device relaxation lies
    above the analytic bound (125) and not above the optimum the full model proves (140)."""
    rows = list(relaxation_rows(10.0, quick=True))
    assert [(r["S"], r["B"]) for r in rows] == [(4, 16), (4, 32)]
    first = rows[0]
    assert first["analytic"] == 125 and 125 < first["relaxation"] <= 140
    assert all(max(r["analytic"], r["relaxation"]) <= r["best"] for r in rows)
