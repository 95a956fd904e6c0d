"""Idealized messages last their stated slots on every placement (issue 44, item 0): where
a device holds v stages a tick is 1/v slot, so a message of C slots is C v ticks. Each
case is one microbatch alone, its chain worked by hand: the stages it passes forward (F
of 1 slot per whole-model share) and backward (B of 2), and a message of C slots wherever
two consecutive stages sit on different devices."""

from __future__ import annotations

import pytest

from pipetab.schedules import registry
from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.pricing import message_ticks, slot_costs
from pipetab.solver.simulate import simulate

C = 2  # slots per message


# (placement, options, stages of the chain, device changes along it (each way), slots per stage)
CHAINS = [
    ("linear", {}, 4, 3, 1.0),        # 4 F + 4 B of 1 and 2 slots, 3 messages each way
    ("v", {}, 8, 6, 0.5),             # 8 half stages; stages 3 and 4 share device 3
    ("interleaved", {"chunks": 2}, 8, 7, 0.5),  # stage s on device s mod 4: every hop moves
    ("wave", {"waves": 1}, 8, 6, 0.5),  # a zig-zag: the turn stays on its device
]


def hand_worked(stages: int, hops: int, share: float) -> float:
    return stages * share * 1 + stages * share * 2 + 2 * hops * C


@pytest.mark.parametrize("placement, options, stages, hops, share", CHAINS)
def test_one_microbatch_chain_by_hand(placement, options, stages, hops, share):
    """CP-SAT's optimum of one microbatch is its chain, messages at their stated size."""
    problem = idealized_problem(4, 1, placement=placement, comm=C, **options)
    res = search(problem, CpSatConfig(time_limit_s=30, workers=1, deterministic_time=10))
    assert res.in_slots(res.makespan) == hand_worked(stages, hops, share)


@pytest.mark.parametrize("name, options, ticks_per_slot", [("zbv", {}, 2), ("interleaved", {"chunks": 2}, 2),
                                                            ("interleaved", {"chunks": 4}, 4),
                                                            ("hanayo", {"waves": 2}, 4), ("1f1b", {}, 1)])
def test_registry_schedules_price_messages_in_ticks(name, options, ticks_per_slot):
    """A registry schedule's idealized costs hold a message of C slots as C x (stages per
    device) ticks, and the simulator's step in slots grows by C per hop of one chain."""
    sched = registry.generate(name, 4, 4, **options)
    costs = slot_costs(sched, comm_slots=C)
    assert costs.tick_slots * ticks_per_slot == 1
    assert costs.links.constant == C * ticks_per_slot
    without = simulate(sched, slot_costs(sched)).makespan * costs.tick_slots
    assert simulate(sched, costs).makespan * costs.tick_slots >= without + 2 * C  # one hop each way at least


def test_message_ticks_rounds_as_op_times():
    assert message_ticks(0, 0.5) == 0
    assert message_ticks(2, 0.5) == 4
    assert message_ticks(1, 0.25) == 4
    assert message_ticks(1, 1.0) == 1
    assert message_ticks(1, 3.0) == 1  # never 0 for a message that exists
