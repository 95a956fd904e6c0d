"""Overlapped forward-backward pairs: the two-stream time on a hand-worked timeline and its
bounds, and pairs of a MoE model on hardware through the simulator and CP-SAT's fixed
evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipetab.hardware import Context
from pipetab.hardware.model import TransformerModel
from pipetab.hardware.overlap import two_stream
from pipetab.hardware.system import Device, Link, System
from pipetab.schedules import registry
from pipetab.schedules.ops import B, F, W
from pipetab.solver.cpsat import CpSatConfig, evaluate
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate

C, M = False, True  # compute, communication stream


def test_hand_worked_timeline():
    """F: attention 2, dispatch 3, experts 2, combine 3; B: combine 1, experts 4, dispatch 1,
    attention 4. Earliest start first (ties: F): compute F.a 0-2, comm B.c 0-1, comm F.d 2-5,
    compute B.e 2-6, compute F.e 6-8, comm B.d 6-7, comm F.c 8-11, compute B.a 8-12: the pair
    takes 12, its compute, against 20 one after the other."""
    f = [(C, 2), (M, 3), (C, 2), (M, 3)]
    b = [(M, 1), (C, 4), (M, 1), (C, 4)]
    assert two_stream([f, b]) == 12
    assert two_stream([f]) + two_stream([b]) == 20


def test_without_communication_the_pair_is_the_sum():
    assert two_stream([[(C, 3.0)], [(C, 5.0)]]) == 8.0


def test_communication_bound_pair_is_the_communication_chain():
    eps = 1e-6
    f = [(C, eps), (M, 100.0), (C, eps), (M, 100.0)]
    b = [(M, 100.0), (C, eps), (M, 100.0), (C, eps)]
    assert two_stream([f, b]) == pytest.approx(400.0, abs=1e-5)


segments = st.lists(st.tuples(st.booleans(), st.floats(0, 10, allow_nan=False)), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(chains=st.lists(segments, min_size=1, max_size=3))
def test_pair_lies_between_the_longest_stream_and_the_sum(chains):
    t = two_stream(chains)
    compute = sum(s for chain in chains for comm, s in chain if not comm)
    comm = sum(s for chain in chains for c, s in chain if c)
    longest_chain = max(sum(s for _, s in chain) for chain in chains)
    assert max(compute, comm, longest_chain) - 1e-9 <= t <= compute + comm + 1e-9


# ---- pairs of a MoE model on hardware -----------------------------------------------------------
MOE = TransformerModel("moe", num_layers=8, hidden=1024, heads=8, seq_len=1024, vocab=1000, global_batch=16,
                       ffn_hidden=2048, mlp="swiglu", norm="rmsnorm", bias=False, num_experts=8,
                       experts_per_token=2, expert_ffn_hidden=1024)
DEV = Device(100e12, 0.5, 1e-6, 2e12, 0.8, 50e-9, 80e9)
# dp 2 x pp 4 GPUs (GPU = dp rank + 2 pp rank): pipeline messages on fast links, the EP pairs
# (GPUs 2k, 2k+1) on slow ones, so the all-to-alls are worth hiding
SYSTEM = System("pairs", DEV, Link(200e9, 1e-6), links={(2 * k, 2 * k + 1): Link(5e9, 5e-6) for k in range(4)})


@pytest.mark.parametrize("name, opts", [("dualpipev", {}), ("dualpipe", {}), ("interleaved", {"overlap": True})])
def test_pairs_on_hardware(name, opts):
    """EP 2 on the slow links: every stage's ops carry
    all-to-all chains; each block lies between its longest stream and its ops' sum, strictly
    below the sum where both of its chains communicate; CP-SAT's fixed evaluation equals the
    simulator."""
    sched = registry.generate(name, 4, 8, **opts)
    ctx = Context(dp=2, ep=2, microbatch_size=1)
    costs = hardware_costs(sched, SYSTEM, MOE, ctx)
    assert costs.chains
    hidden = 0
    for block in sched.blocks:
        total = sum(costs.duration(op) for op in block)
        t = costs.block_time(block)
        assert t <= total + 1e-12
        if any(op.kind is F(0, 0).kind for op in block):
            assert t < total
            hidden += total - t
    assert hidden > 0
    sim = simulate(sched, costs)
    q = costs.quantized(costs.default_tick(200))
    res = evaluate(sched, q, CpSatConfig(time_limit_s=60, deterministic_time=30, workers=1))
    assert res.status == "optimal" and res.makespan == simulate(sched, q).makespan
    assert sim.makespan > 0


def test_overlap_beats_serial_pairs_when_communication_dominates():
    """The same DualPipeV orders: with the pairs' all-to-alls hidden the step is shorter
    than running each pair's forward and backward one after the other (about 20 % here,
    the all-to-alls taking 60 % more than the compute around them)."""
    ctx = Context(dp=2, ep=2, microbatch_size=1)
    for name in ("dualpipev", "dualpipe", "interleaved"):
        on, off = (registry.generate(name, 4, 16, overlap=x) for x in (True, False))
        t_on = simulate(on, hardware_costs(on, SYSTEM, MOE, ctx)).makespan
        t_off = simulate(off, hardware_costs(off, SYSTEM, MOE, ctx)).makespan
        assert t_on < 0.9 * t_off


def test_blocks_need_adjacent_independent_ops():
    sched = registry.generate("dualpipev", 2, 4, overlap=False)
    order = sched.orders[0]
    with pytest.raises(ValueError, match="must follow one another"):
        sched.with_blocks([(order[0], order[2])])
    fwd = F(0, 0).kind
    i = next(i for i in range(len(order) - 1) if order[i].kind is not fwd and order[i + 1].kind is fwd)
    with pytest.raises(ValueError, match="a forward must open its block"):
        sched.with_blocks([(order[i], order[i + 1])])
    j = next(i for i in range(len(order) - 1) if order[i].kind is B(0, 0).kind and order[i + 1].kind is W(0, 0).kind
             and order[i + 1][1:] == order[i][1:])
    assert sched.with_blocks([(order[j], order[j + 1])]).blocks  # a full backward: fine
    last = registry.generate("interleaved", 2, 4)  # the last stage's F and B of one microbatch: dependent
    o = last.orders[1]
    k = next(i for i in range(len(o) - 1) if o[i].kind is F(0, 0).kind and o[i + 1][1:] == o[i][1:])
    with pytest.raises(ValueError, match="only a W may follow its own B inside a block"):
        last.with_blocks([(o[k], o[k + 1])])
    # two backwards are no block: the schedule refuses them as the table validator does
    # (the schedule had taken them and the validator then refused their shared slots)
    two = registry.generate("gpipe", 1, 2)
    with pytest.raises(ValueError, match="a block is a forward with another microbatch's backward"):
        two.with_blocks([tuple(op for op in two.orders[0] if op.kind is B(0, 0).kind)])


def test_cpsat_search_seeded_with_pairs_searches_them_unpaired():
    """CP-SAT's search orders ops one at a time: seeded with DualPipeV's overlapped pairs
    (20 % faster than the same orders unpaired, above), it returns and judges schedules
    without pairs, so its bound (of unpaired schedules) stays below the time it reports;
    before, the seed came back paired and fell below the bound."""
    from dataclasses import replace

    from pipetab.solver.cpsat import Problem
    from pipetab.solver.cpsat.api import solve_seconds

    ctx = Context(dp=2, ep=2, microbatch_size=1)
    paired = registry.generate("dualpipev", 4, 16)
    real = hardware_costs(paired, SYSTEM, MOE, ctx)
    problem = replace(Problem.from_schedule(paired, real.quantized(real.default_tick(20))), name="pairs")
    answer = solve_seconds(problem, real, "search", CpSatConfig(deterministic_time=2.0, workers=1), [paired])
    assert answer.schedule is not None and answer.schedule.blocks == ()
    unpaired_time = simulate(paired.with_blocks(()), real).makespan
    assert answer.seconds <= unpaired_time * (1 + 1e-9)
    assert answer.lower_bound_s is not None and answer.lower_bound_s <= answer.seconds
    assert simulate(paired, real).makespan < answer.lower_bound_s  # the pairs beat every unpaired order
    # the search and bound entry points take a paired seed the same way
    from pipetab.solver.cpsat import bound, search

    for solve in (search, bound):
        res = solve(problem, CpSatConfig(deterministic_time=1.0, workers=1), [paired])
        assert res.schedule is not None and res.schedule.blocks == ()
        assert res.lower_bound <= res.makespan


# ---- communication kernels take SMs (issue 41, item 2) ----------------------------------------

def test_a_pair_whose_all_to_all_holds_k_of_n_sms_by_hand():
    from pipetab.hardware.overlap import two_stream

    # k = 1 of N = 4 SMs: compute beside communication runs at 3/4 of its speed.
    # A: 6 s of compute; B: a 3 s all-to-all, then 2 s of compute. 0-3: A at 3/4 (2.25 s of its
    # work done), B's all-to-all; 3-6.75: A's remaining 3.75 s alone; 6.75-8.75: B's compute
    a, b = [(False, 6.0)], [(True, 3.0), (False, 2.0)]
    assert two_stream([a, b], comm_share=0.25) == pytest.approx(8.75)
    assert two_stream([a, b]) == 8.0  # k = 0: today's pair
    # communication longer than the compute beside it: the compute ends at 3 / (3/4) = 4 s, the block at 8
    assert two_stream([[(False, 3.0)], [(True, 8.0)]], comm_share=0.25) == pytest.approx(8.0)
    assert two_stream([[(False, 9.0)], [(True, 8.0)]], comm_share=0.25) == pytest.approx(8 + (9 - 6))


def test_the_event_simulation_at_full_speed_is_the_list_schedule():
    import random

    from pipetab.hardware.overlap import _shared, two_stream

    rng = random.Random(41)
    for _ in range(300):
        chains = [[(rng.random() < 0.5, rng.choice([0.5, 1.0, 2.0, 3.0]) * rng.randint(1, 4))
                   for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 3))]
        assert _shared(chains, 1.0) == pytest.approx(two_stream(chains))
        slow = two_stream(chains, comm_share=0.5)
        compute = sum(t for chain in chains for c, t in chain if not c)
        comm = sum(t for chain in chains for c, t in chain if c)
        # each stream's work, compute at no more than full speed; at most all compute at half
        # speed plus the communication (a slower segment may reorder a list schedule: no
        # more than that is promised)
        assert max(compute, comm) - 1e-9 <= slow <= 2 * compute + comm + 1e-9


def test_deepep_modes_and_the_h800_preset():
    from dataclasses import replace

    from pipetab.hardware.loaders import load_system
    from pipetab.hardware.overlap import comm_share

    h800 = load_system("h800_ib").device
    assert h800.ep_kernels == "deepep_normal" and comm_share(h800.ep_kernels, h800.sm_count) == pytest.approx(20 / 132)
    assert comm_share("deepep_low_latency", 132) == 0.0
    assert comm_share("", 132) == 0.0 and comm_share("deepep_normal", 0) == 0.0
    with pytest.raises(ValueError, match="ep_kernels must be one of"):
        replace(h800, ep_kernels="nccl_magic")
    with pytest.raises(ValueError, match="comm_share must be in"):
        __import__("pipetab.hardware.overlap", fromlist=["two_stream"]).two_stream([], comm_share=1.0)


def test_priced_pairs_slow_by_the_sms_their_all_to_alls_hold():
    from dataclasses import replace

    from pipetab.hardware.context import Context
    from pipetab.hardware.loaders import load_model, load_system
    from pipetab.hardware.overlap import two_stream
    from pipetab.schedules import registry
    from pipetab.solver.pricing import hardware_costs

    sched = registry.generate("dualpipev", 4, 8)
    system = load_system("h800_ib")
    ctx = Context(tp=1, dp=8, ep=8, microbatch_size=1)
    model = load_model("mixtral_8x7b")
    costs = hardware_costs(sched, system, model, ctx)
    free = hardware_costs(sched, replace(system, device=replace(system.device, ep_kernels="")), model, ctx)
    assert costs.comm_share == pytest.approx(20 / 132) and free.comm_share == 0.0
    pair = next(b for b in sched.blocks if len(b) == 3)  # an overlapped pair (F, B, the B's W)
    f, b, w = ((op.kind, op.pipeline, op.stage) for op in pair)
    chains = [list(costs.chains[f]), list(costs.chains[b]) + list(costs.chains.get(w) or [(False, costs.op_time[w])])]
    assert costs.block_time(pair) == pytest.approx(two_stream(chains, 20 / 132))
    assert free.block_time(pair) == pytest.approx(two_stream(chains))
    assert costs.block_time(pair) > free.block_time(pair)
