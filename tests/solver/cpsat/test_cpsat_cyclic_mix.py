"""Periodic schedules with the pipelines' microbatches mixed (``cyclic.pipeline_mix``,
``mixed_twin``, ``relabelled``) and regular kernels (``modulo.regular_kernel``): Chimera's
split repeats every S microbatches, so its blocks had S microbatches; relabelled, one down
and one up microbatch make a block, and a regular kernel interleaves the two directions at
the devices' load (issue 28's bidirectional misses)."""

import time
from dataclasses import replace

import pytest

from pipetab.schedules.ops import Kind, Op
from pipetab.solver.cpsat import CpSatConfig, idealized_problem
from pipetab.solver.cpsat.heuristics.modulo import first_modulo_kernel, regular_kernel
from pipetab.solver.cpsat.heuristics.starts import Pace, registry_schedules
from pipetab.solver.cpsat.model.cyclic import (
    Kernel,
    check_kernel,
    mixed_twin,
    pattern_period,
    period_lower_bound,
    pipeline_mix,
    relabelled,
    template_ops,
)
from pipetab.solver.cpsat.model.objectives import analytic_lower_bound
from pipetab.solver.cpsat.model.oracle import checked, evaluate_known
from pipetab.solver.cpsat.params import DecomposeParams
from pipetab.solver.cpsat.phases.cyclic import cyclic_applies, cyclic_phase


def _bidirectional(S: int, B: int, cap: float | None = None, comm: int = 1):
    return idealized_problem(S, B, "bidirectional", forward=1, backward=2, comm=comm, activation_cap=cap)


def test_mix_of_chimera_split():
    """S=8: the problem's pattern is four down, four up (period 8); the mix is one of each."""
    problem = _bidirectional(8, 32)
    assert pattern_period(problem) == 8 and pipeline_mix(problem) == (0, 1)
    twin = mixed_twin(problem)
    assert twin.microbatch2pipeline == (0, 1) * 16 and pattern_period(twin) == 2
    assert twin.pipeline_counts == problem.pipeline_counts


@pytest.mark.parametrize("labels,mix", [
    ((0, 0, 1) * 4, None),  # already the shortest repeat of 2:1
    ((0, 0, 0, 0, 1, 1) * 2, (0, 1, 0)),  # 2:1, spread: 0 at 1/4 and 3/4, 1 at 1/2
])
def test_mix_of_uneven_counts(labels, mix):
    base = _bidirectional(4, len(labels))
    assert pipeline_mix(replace(base, microbatch2pipeline=labels)) == mix


def test_no_mix_for_one_pipeline():
    assert pipeline_mix(idealized_problem(4, 16, "interleaved", comm=1)) is None


def test_relabelled_is_the_same_schedule():
    """Every registry schedule of bidirectional S=4, B=8, relabelled to the mix and back:
    the same orders; relabelled once, the same makespan and memory on the twin."""
    problem = _bidirectional(4, 8, cap=4)
    twin = mixed_twin(problem)
    for sched in registry_schedules(problem, problem.fixed_placement):
        there = relabelled(sched, twin.microbatch2pipeline)
        back = relabelled(there, problem.microbatch2pipeline)
        assert back.orders == sched.orders and back.microbatch2pipeline == sched.microbatch2pipeline
        a, b = evaluate_known(problem, sched), evaluate_known(twin, there)
        assert (a.makespan, a.memory.peaks) == (b.makespan, b.memory.peaks)
    with pytest.raises(ValueError, match="pipeline 0 has"):
        relabelled(sched, (0,) * 8)


def test_regular_kernel_by_hand():
    """Bidirectional S=32, F=1, B=2, a message of 1, a cap of 32. One down and one up
    microbatch, both starting at 0, each forward one slot after its input arrives: F(s) at
    3s, the last at 93, its B at 94 and B(s) at 94 + 3 (31 - s) = 187 - 3s. Device d runs
    down stage d and up stage 31 - d: forwards at 3d and 93 - 3d, one even and one odd
    multiple of 3, so at phases 0 and 3 of the period 6; backwards at 187 - 3d and 94 + 3d,
    at phases 1-2 and 4-5. Period 6 is device load (every slot busy). Device 0's down
    activation lives 189 slots: 31 copies at every phase and a 32nd on phases 0-2; its up
    activation 3 slots, on phases 3-5: 32 at most, the cap. The list scheduler, forwards
    as early as they can, finds period 8 at best."""
    problem = mixed_twin(_bidirectional(32, 64, cap=32))
    pl = problem.fixed_placement
    assert period_lower_bound(problem, pl, 2)[0] == 6
    kernel = regular_kernel(problem, pl, 2, 6)
    assert kernel is not None and kernel.period == 6 and check_kernel(kernel) is None
    for s in range(32):
        assert kernel.start[Op(Kind.F, 0, s, 0)] == kernel.start[Op(Kind.F, 1, s, 1)] == 3 * s
        assert kernel.start[Op(Kind.B, 0, s, 0)] == kernel.start[Op(Kind.B, 1, s, 1)] == 187 - 3 * s
    listed = first_modulo_kernel(problem, pl, 2, 6, (1.1, 1.25, 1.5), 6)
    assert listed is not None and listed.period == 8
    # past its time the list scheduler begins no microbatch
    assert first_modulo_kernel(problem, pl, 2, 6, (1.1, 1.25, 1.5), 6, until=time.perf_counter() - 1) is None
    tight = mixed_twin(_bidirectional(32, 64, cap=31))
    assert regular_kernel(tight, tight.fixed_placement, 2, 6, tries=1) is None  # period 6 used the cap whole


def test_regular_kernel_needs_distinct_pipelines():
    problem = idealized_problem(4, 16, "linear", comm=1)
    assert regular_kernel(problem, problem.fixed_placement, 2, 6) is None
    assert regular_kernel(problem, problem.fixed_placement, 1, 3).period == 3


def test_cyclic_phase_finds_the_mixed_kernel():
    """Bidirectional S=16, B=128, a cap of 16, a message of 1 (issue 28's placement set had
    470 against a bound of 449): the cyclic phase runs on the mixed twin, block 2 at period
    6, expanded for the problem's own labels, re-timed and validated. It ends where the
    kernel built by hand does (forwards at 3s, backwards at 91 - 3s, as at S=32 above):
    its 64 blocks at period 6 end by 63 x 6 + 93 = 471; the simulator, running the same
    orders as early as they can, takes 456."""
    problem = _bidirectional(16, 128, cap=16)
    cfg = CpSatConfig(time_limit_s=300, deterministic_time=5.0, workers=1, decompose=DecomposeParams(cyclic_min_ops=0))
    deadline = cfg.deadline()
    assert cyclic_applies(problem, cfg)
    evals, _, info = cyclic_phase(problem, problem.fixed_placement, cfg, deadline, 1.0, Pace(deadline, cfg.start))
    assert (info.block, info.period, info.period_bound, info.mix) == (2, 6, 6, (0, 1))
    assert "taking pipelines 0, 1 in turn" in info.assumption()
    twin = mixed_twin(problem)
    by_hand = Kernel(twin, twin.fixed_placement, 2, 6, {
        o: 3 * o.stage if o.kind is Kind.F else 91 - 3 * o.stage for o in template_ops(twin, 2)})
    assert check_kernel(by_hand) is None
    hand = evaluate_known(problem, by_hand.expand(labels=problem.microbatch2pipeline)).makespan
    best = min(e.makespan for e in evals)
    assert best == hand == 456 <= 471
    assert all(e.schedule.microbatch2pipeline == problem.microbatch2pipeline for e in evals)
    assert all(checked(problem, e.schedule, e.makespan).makespan == e.makespan for e in evals)
    assert analytic_lower_bound(problem, problem.fixed_placement)[0] == 449
