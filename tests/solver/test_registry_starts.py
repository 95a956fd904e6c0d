"""CP-SAT's starts from the registry: the slow generators (V-Half, V-Min: time growing
with stages^2 x microbatches) join small instances only, and overlapped pairs enter a
search unpaired."""

from pipetab.schedules import registry
from pipetab.solver.cpsat import idealized_problem
from pipetab.solver.cpsat.params import StartParams
from pipetab.solver.cpsat.starts import registry_schedules


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
