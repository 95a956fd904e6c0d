"""Interleaved placement under a cap of S with messages (``experiments.interleaved_pace``):
with messages of 1 slot at their stated size (2 ticks of half slots) Little's law allows 9.5
ticks per microbatch at S=4; worked by hand the zero-wait template of block 1 overlaps at
the least whole period above it (10), and the cyclic model proves 10 all the same (with
waits). Before messages were priced at their stated size (issue 44, item 0) a message was
1 tick, Little's pace 7 and the proven period 8."""

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
    # and 2(2S - 1) messages of 2 ticks (none at the turn); chunk 1 (stage S) from its forward,
    # S forwards and S messages in, to its backward's end, S backwards and S messages before
    # the end. Chunk activations are half an activation; the cap is S activations.
    for S in (4, 8, 16):
        round_trip = 2 * S * 1 + 2 * S * 2 + 2 * (2 * S - 1) * 2
        chunk1 = round_trip - S * (1 + 2) - S * (2 + 2)
        pace, load = little_and_load(problem(S, 8 * S))
        assert load == 2 * (1 + 2)
        assert pace == 0.5 * (round_trip + chunk1) / S
    assert little_and_load(problem(4, 32))[0] == 9.5


def test_block_1_at_the_least_whole_period_above_littles_pace():
    p = problem(4, 32)
    head, _ = heads_tails(p, p.fixed_placement)
    # the chain at its least starts: device 0 runs F of stage 0 at 0, F of stage 4 at 4 x 1 +
    # 4 x 2 = 12 = 2 (mod 10), B of stage 4 at 34-35 = 4-5 and B of stage 0 at 50-51 = 0-1:
    # with no waits, B of stage 0 meets F of stage 0 at phase 0 of the period 10
    assert sorted(head[Op(k, 0, s, 0)] for k in (Kind.F, Kind.B) for s in (0, 4)) == [0, 12, 34, 50]
    zero_wait = Kernel(p, p.fixed_placement, 1, 10, dict(head))
    assert check_kernel(zero_wait) == "ops of device 0 overlap at phase 0 of the period 10"
    cfg = CpSatConfig(time_limit_s=300, deterministic_time=10.0, decompose=DecomposeParams(cyclic_min_ops=0),
                      workers=1)
    out = block_period(p, p.fixed_placement, 1, cfg, cfg.deadline())
    assert out.period == out.bound == 10
    assert check_kernel(out.kernel) is None


@pytest.mark.slow
def test_relaxation_rows_quick():
    """``--relaxation --quick``: S = 4, B = 16 and 32; at B = 16 the device relaxation lies
    above the analytic bound (163) and not above the optimum the full model proves (182)."""
    rows = list(relaxation_rows(10.0, quick=True))
    assert [(r["S"], r["B"]) for r in rows] == [(4, 16), (4, 32)]
    first = rows[0]
    assert first["analytic"] == 163 and 163 < first["relaxation"] <= 182
    assert all(max(r["analytic"], r["relaxation"]) <= r["best"] for r in rows)
