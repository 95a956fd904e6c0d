"""Overlapped pairs inside the cyclic model (``model.cyclic_kernel`` with ``Problem.overlap_pairs``):
which forward pairs with which backward is the model's choice, as in the full model; the
least period of block k equals the growth of the full model's proven optimum over k
microbatches once B is long enough (B found by enumeration); every kernel is checked, its
expansion re-timed by the simulator, memory-checked and validated."""

from dataclasses import replace

import pytest

from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import CpSatConfig, Problem, search
from pipetab.solver.cpsat.heuristics.starts import Pace
from pipetab.solver.cpsat.model.cyclic import Kernel, check_kernel, least_period, template_ops
from pipetab.solver.cpsat.model.oracle import checked, evaluate_known
from pipetab.solver.cpsat.params import DecomposeParams, StrategyParams
from pipetab.solver.cpsat.phases.cyclic import block_period, cyclic_phase
from pipetab.solver.periodic import block_simulation
from pipetab.solver.pricing import idealized_costs

# F computes then sends its all-to-all, B receives then computes: 2 slots each alone, 2 as a
# pair (each one's communication under the other's compute); COMM_BOUND: 3 and 4 alone, 4 paired
EVEN = (((False, 1), (True, 1)), ((True, 1), (False, 1)))
COMM_BOUND = (((False, 1), (True, 2)), ((True, 2), (False, 2)))
FULL = CpSatConfig(time_limit_s=300, workers=1, deterministic_time=20.0, ablate=frozenset({"cyclic"}))


def _config(det: float = 10.0) -> CpSatConfig:
    return CpSatConfig(time_limit_s=300, deterministic_time=det, workers=1,
                       decompose=DecomposeParams(cyclic_min_ops=0))


def _problem(S: int, B: int, placement: str = "linear", comm: int = 0, cap: float | None = None,
             chains=EVEN) -> Problem:
    stages = 2 * S if placement == "v" else S
    f, b = chains
    base = idealized_costs(S, (stages,), forward=sum(t for _, t in f), backward=sum(t for _, t in b), comm=comm)
    costs = replace(base, chains={(k, 0, s): c for s in range(stages) for k, c in ((Kind.F, f), (Kind.B, b))})
    costs = costs if cap is None else costs.with_activation_cap(cap)
    return Problem(S, (0,) * B, (stages,), costs, placement, overlap_pairs=True)


def _phase(problem: Problem):
    cfg = _config()
    deadline = cfg.deadline()
    return cyclic_phase(problem, problem.fixed_placement, cfg, deadline, 1.0, Pace(deadline, cfg.start))


def test_hand_worked_instance():
    """Linear S=2, F and B of 2 slots, a pair of 2, no messages, no cap. A microbatch's ops
    load a device 4 slots alone, 2 when its forward pairs with a backward: period 2 per
    microbatch (block 1; ops alone: 4). Device 0 at 2a runs F(a) with B(a - 3): B(a - 3) needs
    B of stage 1, run with F(a - 2) at 2a - 2 and ending at 2a. The step: F(0..2) alone from 0,
    pairs from 6, B(B-3..B-1) alone at the end: T(B) = 2B + 6, the full model's optimum."""
    problem = _problem(2, 6)
    out = block_period(problem, problem.fixed_placement, 1, _config(), _config().deadline())
    assert out.period == out.bound == 2
    alone = block_period(replace(problem, overlap_pairs=False), problem.fixed_placement, 1, _config(),
                         _config().deadline())
    assert alone.period == alone.bound == 4
    k = out.kernel
    start = {op: t - k.start[Op(Kind.F, 0, 0, 0)] for op, t in k.start.items()}
    assert start[Op(Kind.B, 0, 0, 0)] - start[Op(Kind.F, 0, 0, 0)] == 3 * 2  # F(a) runs with B(a - 3)
    assert set(k.pairs) == set(template_ops(problem, 1))  # every op in a pair, each of 2 slots
    for B in (4, 5, 7):
        problem = _problem(2, B)
        evals, _, info = _phase(problem)
        assert (info.block, info.period) == (1, 2) and info.proven
        assert min(e.makespan for e in evals) == 2 * B + 6 == search(problem, FULL).makespan


CASES = [  # (S, placement, comm, cap, chains, B range, whether pairs shorten the period)
    (2, "linear", 0, 3, EVEN, range(4, 11), True),
    (2, "linear", 0, None, COMM_BOUND, range(4, 9), True),
    (3, "linear", 1, None, EVEN, range(4, 9), True),
    (3, "linear", 1, 3, EVEN, range(4, 10), False),  # under a cap of 3 the pairs gain nothing here
    (2, "v", 0, None, EVEN, range(4, 8), True),
]


@pytest.mark.slow
@pytest.mark.parametrize("S, placement, comm, cap, chains, Bs, gains", CASES)
def test_cyclic_period_with_pairs_is_the_full_optimum_growth(S, placement, comm, cap, chains, Bs, gains):
    """The full model's proven optimum with pairs T(B) grows by the cyclic model's proven
    least period P per block k once B is long enough: the least such B is found by
    enumeration over the range and must leave two checks; every expansion is a schedule
    (never below T(B)), re-timed, memory-checked and validated, and reaches T(B) somewhere."""
    optima, best, info = {}, {}, None
    for B in Bs:
        problem = _problem(S, B, placement, comm, cap, chains)
        full = search(problem, FULL)
        assert full.status == "optimal"
        optima[B] = full.makespan
        evals, _, info = _phase(problem)
        for e in evals:
            assert checked(problem, e.schedule, None).makespan == e.makespan >= full.makespan
        best[B] = min(e.makespan for e in evals)
    k, P = info.block, info.period
    assert info.proven
    tail = [B for B in Bs if B + k in optima]
    start = next(B for B in tail if all(optima[x + k] - optima[x] == P for x in tail if x >= B))
    assert len([B for B in tail if start <= B]) >= 2
    assert any(best[B] == optima[B] for B in Bs if start <= B)
    alone = block_period(replace(problem, overlap_pairs=False), problem.fixed_placement, k, _config(),
                         _config().deadline())
    assert alone.period > P if gains else alone.period == P


@pytest.mark.parametrize("S, placement, comm, cap, k", [
    (2, "linear", 0, None, 1), (2, "linear", 0, 3, 3), (3, "linear", 1, None, 1), (2, "v", 1, None, 1)])
def test_kernels_with_pairs_go_back_through_the_simulator(S, placement, comm, cap, k):
    """A kernel with pairs: valid, its orders admit no shorter period (``least_period``), and
    its expansion to 48 blocks, run by the simulator with its pairs as blocks, grows by exactly
    the period per block in the middle."""
    problem = _problem(S, 16, placement, comm, cap)
    out = block_period(problem, problem.fixed_placement, k, _config(), _config().deadline())
    kernel = out.kernel
    assert kernel.pairs and check_kernel(kernel) is None
    assert least_period(kernel) == kernel.period
    expanded = kernel.expand(48 * kernel.block)
    assert expanded.blocks
    run = block_simulation(expanded, problem.costs, kernel.block)
    assert run.period == kernel.period and run.periodic_to - run.periodic_from >= 8


def test_a_pair_that_gains_nothing_is_an_overlap():
    """Two ops of one device at one phase are a pair only where their block is shorter than
    the two in turn; otherwise the check names the overlap. Period 8: F of stage 0 at 0, of
    stage 1 at 2, B of stage 1 at 4, B of stage 0 at 8 (phase 0, with the next F)."""
    start = {Op(Kind.F, 0, 0, 0): 0, Op(Kind.F, 0, 1, 0): 2, Op(Kind.B, 0, 1, 0): 4, Op(Kind.B, 0, 0, 0): 8}
    paired = _problem(2, 6)
    kernel = Kernel(paired, paired.fixed_placement, 1, 8, start)
    assert kernel.pairs == {Op(Kind.F, 0, 0, 0): 2, Op(Kind.B, 0, 0, 0): 2} and check_kernel(kernel) is None
    flat = _problem(2, 6, chains=(((False, 2),), ((False, 2),)))
    kernel = Kernel(flat, flat.fixed_placement, 1, 8, start)
    assert not kernel.pairs and "overlap" in check_kernel(kernel)


def test_dualpipev_steady_state_is_a_kernel_with_pairs():
    """DualPipeV (W fused into B, its pairs kept), S=4, B=48, F = compute 1 + all-to-all 1,
    B = all-to-all 1 + compute 2, a message of 1: its steady state is a kernel of block 4 and
    period 36 with every op in a pair, valid, whose orders allow no shorter period and whose
    expansion the simulator runs at 36 per block. A pair takes 3 (computes 1 + 2, each
    all-to-all beside the other's compute) and a device runs two per microbatch, so without a
    cap the cyclic model proves 6 per microbatch (block 1). Under DualPipeV's own peak of 4.5
    activations it proves 9, which is DualPipeV's pace."""
    from pipetab.schedules import registry
    from pipetab.solver.cpsat.heuristics.starts import fused_backward
    from pipetab.solver.cpsat.model.cyclic import kernel_of
    from pipetab.solver.simulate import simulate

    sched = fused_backward(registry.generate("dualpipev", 4, 48), keep_pairs=True)
    f, b = ((False, 1), (True, 1)), ((True, 1), (False, 2))
    base = idealized_costs(4, (8,), forward=2, backward=3, comm=1)
    costs = replace(base, chains={(k, 0, s): c for s in range(8) for k, c in ((Kind.F, f), (Kind.B, b))})
    problem = replace(Problem.from_schedule(sched, costs), overlap_pairs=True)
    run = simulate(sched, costs)
    kernel = kernel_of(problem, problem.fixed_placement, sched, run.start_times, 16)
    assert (kernel.block, kernel.period) == (4, 36) and set(kernel.pairs) == set(template_ops(problem, 4))
    assert check_kernel(kernel) is None and least_period(kernel) == 36
    assert block_simulation(kernel.expand(48 * 4), costs, 4).period == 36
    free = block_period(problem, problem.fixed_placement, 1, _config(), _config().deadline())
    assert free.period == free.bound == 6
    assert max(run.peak_activation) == 4.5
    capped = problem.with_costs(costs.with_activation_cap(4.5))
    out = block_period(capped, capped.fixed_placement, 1, _config(), _config().deadline())
    assert out.period == out.bound == 9 and out.kernel.pairs


def test_search_proves_the_steady_state_with_pairs():
    """The search's cyclic phase runs where pairs may overlap: on the hand-worked instance at a
    size where the full model is not built (``cyclic_only_ops`` 0) the result holds the cyclic
    model's period with pairs, 2 per microbatch, proven among periodic schedules of block 1 with
    pairs, and its expansion, T(B) = 2B + 6 re-timed, validated and memory-checked; the same
    phase with every op alone proves 4 and says nothing of pairs."""
    B = 24
    problem = _problem(2, B)
    cfg = CpSatConfig(time_limit_s=300, deterministic_time=10.0, workers=1,
                      decompose=DecomposeParams(cyclic_min_ops=0),
                      strategy=StrategyParams(cyclic_all_ops=0, cyclic_only_ops=0))
    res = search(problem, cfg)
    assert (res.cyclic.block, res.cyclic.period, res.cyclic.period_bound) == (1, 2, 2) and res.cyclic.pairs
    assert "pairs may run overlapped" in res.cyclic.assumption() and res.cyclic.as_dict()["pairs"]
    assert [ph.name for ph in res.log.phases] == ["start", "cyclic"]  # no search with ops alone before it
    assert res.makespan == 2 * B + 6 and res.schedule.blocks
    judged = evaluate_known(problem, res.schedule)
    assert judged.makespan == res.makespan and judged.fits
    alone = _phase(replace(problem, overlap_pairs=False))[2]
    assert (alone.period, alone.period_bound, alone.pairs) == (4, 4, False) and "pair" not in alone.assumption()
