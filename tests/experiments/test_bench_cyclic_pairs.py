"""The benchmark of pairs in the cyclic model (``experiments.bench_cyclic_pairs``): its op
times and the periods of its cheapest rows, worked by hand."""

from experiments.bench_cyclic_pairs import problem, run
from pipetab.schedules.ops import Kind, Op


def test_op_times_by_hand():
    # F: compute 1, all-to-all 1, compute 1, all-to-all 1; B: 1, compute 2, 1, compute 2. As a
    # pair the computes run in turn (2 + 4) with every all-to-all beside the other's compute
    p = problem("linear", 4, 8, 4, True)
    assert p.duration(Op(Kind.F, 0, 0, 0)) == 4 and p.duration(Op(Kind.B, 0, 0, 0)) == 6
    assert p.costs.block_time((Op(Kind.F, 0, 1, 1), Op(Kind.B, 0, 1, 0))) == 6


def test_little_binds_linear_under_a_cap_of_s():
    """Stage 0's activation lives at least its round trip: 4 forwards of 4, 4 backwards of 6
    and 6 messages of 1 = 46 slots, so 4 activations allow 46 per 4 microbatches (11.5, above
    the load of 10): the cyclic model proves it with and without pairs."""
    for pairs in (False, True):
        row = run("linear", 4, 8, 4, pairs, det=2.0)
        assert (row["block"], row["period"], row["proven"]) == (4, 46, True)


def test_pairs_shorten_linear_under_a_cap_of_2s():
    alone, paired = (run("linear", 4, 8, 8, pairs, det=2.0) for pairs in (False, True))
    assert alone["per_microbatch"] == 10 and alone["proven"]  # the load: 4 + 6
    assert paired["per_microbatch"] < 10 and paired["proven"] and paired["blocks"] > 0
    assert paired["makespan"] < alone["makespan"]
