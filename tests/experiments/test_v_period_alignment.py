"""The V alignment argument (``experiments.v_period_alignment``): tilings counted by hand,
a zero-delay step worked by hand, lifetimes summed by hand, and Karp's minimum mean cycle
equal to a brute force over all cycles of two steps."""

import itertools

from experiments.v_period_alignment import least_mean_delay, lifetime_sum, slack, step_cost, tilings


def test_tilings_counted_by_hand():
    # P = 6: B_u at any of 6 phases, B_d two, three or four later (3), the two F's in the
    # two slots left, either way round (2): 36
    assert len(tilings(1, 2)) == 36


def test_a_step_without_delay():
    # F_d 0, F_u 1, B_u 2-3, B_d 4-5 on device d; without messages the next device's ops
    # move by +1, -1, +2, -2: F_d 1, F_u 0, B_u 4-5, B_d 2-3, again a tiling, for free
    assert (1, 0, 4, 2) in tilings(1, 2)
    assert step_cost((0, 1, 2, 4), (1, 0, 4, 2), 1, 2, 0) == 0
    # with a message of 1 the same target needs a delay on each of the four hops
    assert step_cost((0, 1, 2, 4), (1, 0, 4, 2), 1, 2, 1) == 5 + 5 + 5 + 5


def test_lifetimes_by_hand():
    # S = 2, F = 1, B = 2, c = 1: stage 0 lives through F of 4 stages (4), 2 messages,
    # B of 4 stages (8), 2 messages: 16; stage 3 its own F and B: 3
    assert lifetime_sum(2, 1, 2, 1) == 19
    # a cap of 2 activations holds 4 half-size ones: 4 x 6 = 24 ticks, 5 left, one step
    assert slack(2, 1, 2, 1) == 5


def test_karp_equals_brute_force_over_two_step_cycles():
    nodes = tilings(1, 2)
    brute = min((step_cost(u, v, 1, 2, 1) + step_cost(v, u, 1, 2, 1)) / 2
                for u, v in itertools.product(nodes, repeat=2))
    assert brute == least_mean_delay(1, 2, 1) == 2.0


def test_lifetimes_equal_the_models_own_per_device_sum():
    """The closed form against ``cyclic.per_microbatch_work`` (each device's size x least
    lifetime, from the problem's heads), on idealized V problems: every device holds the
    same sum, the closed form's (half-size activations: size 1/2)."""
    from pipetab.solver.cpsat import idealized_problem
    from pipetab.solver.cpsat.model.cyclic import per_microbatch_work

    for S, (f, b), c in itertools.product((2, 4, 8), ((1, 2), (3, 6)), (0, 1)):
        problem = idealized_problem(S, 4 * S, "v", forward=f, backward=b, comm=c)
        _, held = per_microbatch_work(problem, problem.fixed_placement)
        # the closed form counts in ticks: a message of c slots is 2c ticks of half slots
        assert [2 * x for x in held[0]] == [lifetime_sum(S, f, b, 2 * c)] * S, (S, f, b, c)


def test_a_message_at_its_stated_size():
    """A message of one slot is 2 ticks of half a slot (issue 44): the alignment needs 4 ticks
    per device step on 1:2 (Karp equals the brute force over two-step cycles), and a cap of S
    cannot hold even the zero-delay lifetimes at the load's period: S = 16, P = 6, stage 0
    lives 32 F + 30 messages x 2 + 64 of B + 30 x 2 = 216 ticks and stage 31 its F and B, 3:
    219 against 2S x P = 192 stage-activation ticks, (192 - 219) / 15 = -1.8 per step."""
    nodes = tilings(1, 2)
    brute = min((step_cost(u, v, 1, 2, 2) + step_cost(v, u, 1, 2, 2)) / 2
                for u, v in itertools.product(nodes, repeat=2))
    assert brute == least_mean_delay(1, 2, 2) == 4.0
    assert lifetime_sum(16, 1, 2, 2) == 219
    assert slack(16, 1, 2, 2) == -1.8
