"""The cyclic model (``cpsat.model.cyclic``, ``model.cyclic_kernel``, ``phases.cyclic``): the least period of
periodic schedules of block k against an enumeration without CP-SAT, against the full
model's proven optima of long steps, and against the simulator running the expanded
schedule; every expansion valid."""

import itertools

import pytest

from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.heuristics.starts import Pace
from pipetab.solver.cpsat.model.cyclic import (
    Kernel,
    blocks,
    check_kernel,
    kernel_of,
    least_period,
    pattern_period,
    period_lower_bound,
    template_ops,
)
from pipetab.solver.cpsat.model.oracle import checked, evaluate_known
from pipetab.solver.cpsat.params import DecomposeParams
from pipetab.solver.cpsat.phases.cyclic import block_period, cyclic_phase
from pipetab.solver.periodic import block_simulation, repeated_simulation
from pipetab.solver.simulate import simulate


def _config(det: float = 10.0, **kw) -> CpSatConfig:
    """Deterministic limits; the cyclic phase on problems of any size."""
    return CpSatConfig(time_limit_s=300, deterministic_time=det, decompose=DecomposeParams(cyclic_min_ops=0),
                       **{"workers": 1, **kw})  # one worker: the same run on a loaded machine


def _phase(problem, det: float = 10.0):
    cfg = _config(det)
    deadline = cfg.deadline()
    return cyclic_phase(problem, problem.fixed_placement, cfg, deadline, 1.0, Pace(deadline, cfg.start))


def _block(problem, k: int, det: float = 10.0, **kw):
    cfg = _config(det, **kw)
    return block_period(problem, problem.fixed_placement, k, cfg, cfg.deadline())


# ---- the least period, enumerated -----------------------------------------------------------
def _enumerated_least_period(problem, horizon: int) -> int:
    """Least P for which some template (block 1, F of stage 0 at 0, every other op starting
    in [0, horizon)) passes ``check_kernel``: no CP-SAT involved."""
    ops = template_ops(problem, 1)
    free = [o for o in ops if o != Op(Kind.F, 0, 0, 0)]
    P = 1
    while True:
        for times in itertools.product(range(horizon), repeat=len(free)):
            start = dict(zip(free, times))
            start[Op(Kind.F, 0, 0, 0)] = 0
            if check_kernel(Kernel(problem, problem.fixed_placement, 1, P, start)) is None:
                return P
        P += 1


@pytest.mark.slow
@pytest.mark.parametrize("S, forward, backward, comm, cap", [
    (2, 1, 2, 1, 2), (2, 1, 2, 1, 1), (2, 2, 3, 0, 1), (2, 1, 1, 2, 1.5), (2, 1, 2, 2, None),
])
def test_least_period_of_block_1_equals_enumeration(S, forward, backward, comm, cap):
    problem = idealized_problem(S, 8, forward=forward, backward=backward, comm=comm, activation_cap=cap)
    out = _block(problem, 1)
    horizon = 3 * (S * (forward + backward) + 2 * (S - 1) * comm)
    assert out.period == out.bound == _enumerated_least_period(problem, horizon)
    assert check_kernel(out.kernel) is None


def test_fifo_loses_nothing_in_the_cyclic_model():
    for cap, comm, k in ((2, 1, 2), (3, 1, 2), (2, 0, 3)):
        problem = idealized_problem(3, 12, comm=comm, activation_cap=cap)
        with_fifo = _block(problem, k)
        without = _block(problem, k, ablate=frozenset({"fifo"}))
        assert with_fifo.period == with_fifo.bound == without.period == without.bound


# ---- the full model's optima of long steps ----------------------------------------------------
CASES = [
    # S, cap, comm, F, B, split, M_W / M
    (2, 2, 1, 1, 2, False, 1.0),
    (2, 1.5, 1, 1, 1, True, 0.5),
    (3, 2, 1, 1, 2, False, 1.0),
    (2, 2, 0, 2, 3, False, 1.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("S, cap, comm, F, Bk, split, wm", CASES)
def test_cyclic_period_and_expansion_equal_the_full_optimum(S, cap, comm, F, Bk, split, wm):
    """The full model's proven optimum T(B) grows by the least period of the best block
    per block once B is long enough (over two blocks: the optima may alternate, e.g. 5
    and 3 for a period of 4), and the cyclic phase's expanded schedule reaches
    T(B) itself (its warm-up and cool-down included)."""
    optima, info = {}, None
    for B in range(6, 12):
        problem = idealized_problem(S, B, comm=comm, activation_cap=cap, forward=F, backward=Bk,
                                    split_backward=split, weight_memory=wm)
        full = search(problem, _config(20, ablate=frozenset({"cyclic"})))
        assert full.status == "optimal"
        optima[B] = full.makespan
        evals, _, info = _phase(problem)
        assert min(e.makespan for e in evals) == full.makespan
        for e in evals:
            assert checked(problem, e.schedule, None).makespan == e.makespan
    k, P = info.block, info.period
    assert info.proven
    for B in range(6, 12 - 2 * k):
        assert optima[B + 2 * k] - optima[B] == 2 * P


# ---- the simulator on the expansion -----------------------------------------------------------
SIM_CASES = [
    ("linear", 4, 1, 2, 1, 4, False),
    ("linear", 8, 1, 2, 1, 8, False),
    ("linear", 4, 1, 1, 1, 4, True),
    ("v", 4, 1, 2, 1, 4, False),
    ("interleaved", 4, 1, 2, 1, 4, False),
    ("linear", 6, 2, 3, 1, 5, False),
]


@pytest.mark.parametrize("placement, S, F, Bk, comm, cap, split", SIM_CASES)
def test_block_simulation_period_equals_the_cyclic_period(placement, S, F, Bk, comm, cap, split):
    """Every kernel the cyclic phase returns, expanded to 48 blocks and run by the
    simulator: the starts grow by exactly the kernel's period per block in the middle,
    and the kernel's orders admit no shorter period (``least_period``)."""
    problem = idealized_problem(S, 8 * S, placement, forward=F, backward=Bk, comm=comm, activation_cap=cap,
                                split_backward=split)
    out = _block(problem, pattern_period(problem))
    kernel = out.kernel
    assert kernel is not None and check_kernel(kernel) is None
    assert least_period(kernel) == kernel.period
    run = block_simulation(kernel.expand(48 * kernel.block), problem.costs, kernel.block)
    assert run.period == kernel.period
    assert run.periodic_to - run.periodic_from >= 8


@pytest.mark.slow
def test_expansions_judged_by_the_period_are_the_repeated_simulation_period():
    """With the period objective the expanded schedules are judged like any other: the
    K-iteration barrier-free simulation of each returned step settles at the period the
    phase reports for it."""
    import math

    problem = idealized_problem(4, 16, comm=1, activation_cap=4, split_backward=True, backward=1,
                                weight_memory=0.5, objective="period")
    evals, _, info = _phase(problem, 2)
    assert info is not None and evals
    for e in evals:
        run = repeated_simulation(e.schedule, problem.costs, 8)
        assert math.ceil(run.period - 1e-9) == e.makespan
        assert run.cyclicity > 1 or run.period == e.makespan


def test_kernel_of_a_known_steady_state(capped_4_32):
    """1F1B's middle is periodic: its kernel is valid and its period is the simulator's
    growth per microbatch block."""
    from pipetab.schedules import registry

    problem = capped_4_32
    sched = registry.generate("1f1b", 4, 32)
    kernel = kernel_of(problem, problem.fixed_placement, sched, simulate(sched, problem.costs).start_times, 8)
    assert kernel is not None and check_kernel(kernel) is None
    run = block_simulation(sched, problem.costs, kernel.block)
    assert run.period == kernel.period


def test_blocks_follow_the_pipelines_pattern():
    problem = idealized_problem(4, 16, "bidirectional")
    assert pattern_period(problem) == 4
    assert blocks(problem, 8) == [4, 8]
    assert blocks(idealized_problem(4, 16), 3) == [1, 2, 3]


def test_period_lower_bound_is_load_or_little():
    # linear S=4, F=1 B=2: load 3 per microbatch; cap 4 and a message of 1: the activation
    # of stage 0 lives at least 4 * 3 + 2 * 3 = 18, so 4 in flight need 18 / 4 = 4.5
    problem = idealized_problem(4, 16, comm=1, activation_cap=4)
    assert period_lower_bound(problem, problem.fixed_placement, 1)[0] == 5
    assert period_lower_bound(problem, problem.fixed_placement, 2)[0] == 9
    assert period_lower_bound(idealized_problem(4, 16), problem.fixed_placement, 2)[0] == 6


def test_invalid_kernels_are_named():
    problem = idealized_problem(2, 4, comm=1, activation_cap=1)
    ops = template_ops(problem, 1)
    start = {op: 0 for op in ops}
    assert "before its input" in check_kernel(Kernel(problem, problem.fixed_placement, 1, 10, start))
    good = _block(problem, 1).kernel
    assert "overlap" in check_kernel(Kernel(problem, problem.fixed_placement, 1, good.period - 1, good.start)) or \
        check_kernel(Kernel(problem, problem.fixed_placement, 1, good.period - 1, good.start)) is not None


def test_search_reports_what_the_cyclic_phase_proved(capped_4_32):
    problem = capped_4_32
    res = search(problem, _config(10))
    assert res.cyclic is not None and res.cyclic.proven
    assert res.cyclic.period / res.cyclic.block == 4.5
    assert "periodic schedules of block" in res.cyclic.assumption()
    assert evaluate_known(problem, res.schedule).makespan == res.makespan


def test_no_full_model_after_the_cyclic_phase_from_cyclic_only_ops(capped_4_32):
    """From ``StrategyParams.cyclic_only_ops`` ops the search ends after the cyclic phase
    (no bound or search phase), with the best schedule so far and the analytic bound;
    below it the full model's phases run."""
    from pipetab.solver.cpsat.model.bounds import makespan_lower_bound
    from pipetab.solver.cpsat.params import StrategyParams

    problem = capped_4_32
    full = search(problem, _config(10))
    assert {"bound", "search"} & {ph.name for ph in full.log.phases}
    short = search(problem, _config(10, strategy=StrategyParams(cyclic_only_ops=problem.num_ops)))
    assert [ph.name for ph in short.log.phases] == ["start", "cyclic"]
    assert "the full model is not built" in short.message and short.status == "feasible"
    assert short.lower_bound == makespan_lower_bound(problem, problem.fixed_placement)[0]
    assert evaluate_known(problem, short.schedule).makespan == short.makespan > short.lower_bound
