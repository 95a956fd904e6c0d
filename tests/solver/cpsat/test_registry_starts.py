"""CP-SAT's starts from the registry: the slow generators (V-Half, V-Min: time growing
with stages^2 x microbatches) join small instances only, and overlapped pairs enter a
search unpaired."""

import time

from pipetab.schedules import registry
from pipetab.solver.cpsat import idealized_problem
from pipetab.solver.cpsat.heuristics.starts import registry_schedules
from pipetab.solver.cpsat.params import StartParams


def names(S: int, B: int) -> list[str]:
    problem = idealized_problem(S, B, "v", split_backward=True)
    return [s.name for s in registry_schedules(problem, problem.fixed_placement)]


def test_slow_generators_start_small_searches_only():
    slow = {n for n, spec in registry.REGISTRY.items() if spec.slow_generator}
    assert slow == {"v-half", "v-min"}
    assert 4 * 4 * 8 <= StartParams().slow_generator_cells < 16 * 16 * 16
    assert slow <= set(names(4, 8))
    assert not slow & set(names(16, 16))
    assert "zbv" in names(16, 16)


def test_overlapped_pairs_start_unpaired():
    (dualpipev,) = [n for n in names(4, 8) if n.startswith("dualpipev")]
    assert dualpipev == "dualpipev (pairs not overlapped)"
    problem = idealized_problem(4, 8, "v", split_backward=True)
    assert all(not s.blocks for s in registry_schedules(problem, problem.fixed_placement))


def test_a_search_without_a_model_resumes_the_starts_it_had_no_time_for():
    """With no share of the time for starts, the start phase stops at the first schedule
    that fits; ``more_starts`` (the search's path when it builds no model) judges the
    rest: together exactly the schedules a start phase with all the time judges, and the
    best of them. (The 60-s deadline only has to outlast judging a few tiny schedules.)"""
    from pipetab.solver.cpsat import CpSatConfig
    from pipetab.solver.cpsat.heuristics.starts import Pace, more_starts, start_phase
    from pipetab.solver.deadline import Deadline

    problem = idealized_problem(4, 8, "v", split_backward=True, comm=1, activation_cap=4)
    placement = problem.fixed_placement

    def phase(share: float):
        config = CpSatConfig(time_limit_s=60, start=StartParams(share=share), ablate=("justify",))
        deadline = Deadline.start(60)
        pace = Pace(deadline, config.start)
        return start_phase(problem, placement, config, (), deadline, pace), deadline, pace

    everything, _, _ = phase(1.0)
    short, deadline, pace = phase(0.0)
    assert 1 <= len(short.evals) < len(everything.evals)
    first = {e.name for e in short.evals}
    judged = more_starts(short, deadline, pace)
    assert judged == len(everything.evals) - len(first)
    assert sorted(e.name for e in short.evals) == sorted(e.name for e in everything.evals)
    assert short.best.makespan == everything.best.makespan == min(e.makespan for e in everything.evals if e.fits)
    assert more_starts(short, deadline, pace) == 0  # nothing is judged twice


def test_wide_forward_first_windows_beat_zbv_on_v_under_a_roomy_cap():
    """V, split 3:4:2 (chunk ops F 1.5, B 2, W 1 slots), no messages, a cap of 2S, B = 4S:
    every device carries 4S x 2 x 4.5 = 36S slots, and the middle device S - 1 cannot
    start before the forward has crossed S - 1 chunks (1.5 each), so no schedule is
    shorter than 36S + 1.5(S - 1). ZB-V (built for F = B = W) idles 2(S - 1) per
    device; the greedy start admitting 5S/2 microbatches forward-first comes within 1 %
    of the bound."""
    from experiments.cpsat_real_set import problem_of
    from pipetab.solver.cpsat.heuristics.starts import wide_starts
    from pipetab.solver.cpsat.model.oracle import evaluate_known

    for S in (8, 16):
        problem = problem_of((S, 4, "v", "split", 2, (3, 4, 2), 0))
        placement = problem.fixed_placement
        slots = problem.costs.tick_slots
        bound = 36 * S + 1.5 * (S - 1)
        (zbv,) = [s for s in registry_schedules(problem, placement) if s.name == "zbv"]
        assert evaluate_known(problem, zbv).makespan * slots == 36 * S + 2 * (S - 1)
        (wide,) = [s for s in wide_starts(problem, placement) if s.name == f"greedy-w{5 * S // 2}-ff"]
        got = evaluate_known(problem, wide)
        assert got.fits and bound <= got.makespan * slots <= bound / 0.99


def test_a_registry_generator_skipped_for_time_is_tried_again():
    """A generator predicted to end past ``until`` is skipped, not recorded as done (time
    probes below the problem's cells make the prediction apply; the end is already
    past), so a later pass with time generates it; one generated is not generated again."""
    problem = idealized_problem(4, 8, "v", split_backward=True)
    placement = problem.fixed_placement
    params = StartParams(time_probe_cells=(4, 8))
    done: set[str] = set()
    past = time.perf_counter() - 1.0
    assert list(registry_schedules(problem, placement, until=lambda: past, params=params, done=done)) == []
    assert done == set()
    later = [s.name for s in registry_schedules(problem, placement, params=params, done=done)]
    assert later == names(4, 8) and {"zbv", "dualpipev"} <= done
    assert list(registry_schedules(problem, placement, params=params, done=done)) == []


def test_every_registry_start_names_its_generator():
    """``generator_of`` takes a start's name back to the registry generator that made it —
    plain, fused into a whole backward, or with its pairs run one at a time — on linear,
    V and bidirectional shapes, split and whole (``seconds`` finds the judged ones by it)."""
    from pipetab.schedules.rewrite import generator_of

    seen = set()
    for placement in ("linear", "v", "bidirectional"):
        for split in (True, False):
            problem = idealized_problem(4, 8, placement, split_backward=split)
            for s in registry_schedules(problem, problem.fixed_placement):
                assert generator_of(s.name) in registry.REGISTRY, s.name
                seen.add(s.name)
    assert {"zbv (W fused into B)", "dualpipev (pairs not overlapped)", "1f1b"} <= seen
    assert not any(" (" in n for n in registry.REGISTRY)


def test_no_generator_probed_or_run_past_the_start_deadline(monkeypatch):
    """Above ``time_probe_cells`` (8,192) a generator is timed on small instances before it
    runs at full size; past the start's deadline none is timed or run (16 x 1,024 cells:
    the probes of three generators had run 0.5-0.6 s past it at load 9), before it 1F1B is."""
    from pipetab.solver.cpsat.heuristics import starts

    def probe(*args):
        raise AssertionError("probed past the deadline")

    problem = idealized_problem(16, 1024)
    monkeypatch.setattr(starts, "_generation_time", probe)
    assert list(registry_schedules(problem, problem.fixed_placement, until=lambda: time.perf_counter() - 1.0)) == []
    monkeypatch.setattr(starts, "_generation_time", lambda *args: 0.0)
    found = registry_schedules(problem, problem.fixed_placement, until=lambda: time.perf_counter() + 60.0)
    assert "1f1b" in [s.name for s in found]
