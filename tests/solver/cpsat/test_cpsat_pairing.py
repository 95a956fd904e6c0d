"""Overlapped forward-backward pairs chosen inside the CP-SAT model (``Problem.overlap_pairs``,
``solver.cpsat.model.pairing``): its optimum equals an enumeration of every per-device order and
every choice of adjacent pairs, timed by the simulator (two implementations); its bound
never exceeds a registry schedule with pairs; its schedules go back through the simulator
and the validator; the candidates keep every pair the memory cap allows."""

import itertools
from dataclasses import replace

import pytest

from pipetab.schedules import registry
from pipetab.schedules.evaluate import DeadlockError
from pipetab.schedules.ops import Kind, Op
from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.cpsat import CpSatConfig, Problem, search
from pipetab.solver.cpsat.model.oracle import checked, memory_check
from pipetab.solver.cpsat.model.pairing import device_savings, pair_candidates, pairs_only
from pipetab.solver.pricing import idealized_costs
from pipetab.solver.simulate import simulate

DET = CpSatConfig(time_limit_s=120, workers=1, deterministic_time=20.0)


def _costs(devices: int, f=((False, 1), (True, 1)), b=((True, 1), (False, 1)), comm: int = 0):
    """F and B of 2 slots each by default: F computes then sends its all-to-all, B receives
    then computes, so as a pair each one's communication runs beside the other's compute:
    2 slots instead of 4."""
    base = idealized_costs(devices, (devices,), forward=int(sum(t for _, t in f)),
                           backward=int(sum(t for _, t in b)), comm=comm)
    chains = {(kind, 0, s): chain for s in range(devices) for kind, chain in ((Kind.F, f), (Kind.B, b))}
    return replace(base, chains=chains)


def _pairings(order):
    """Every set of disjoint adjacent (forward, backward of another microbatch) in ``order``."""
    at = [i for i in range(len(order) - 1) if order[i].kind is Kind.F and order[i + 1].kind is Kind.B
          and order[i].microbatch != order[i + 1].microbatch]
    for r in range(len(at) + 1):
        for chosen in itertools.combinations(at, r):
            if all(y - x >= 2 for x, y in itertools.pairwise(chosen)):
                yield [(order[i], order[i + 1]) for i in chosen]


def _enumerated_optimum(problem: Problem) -> float:
    """The least simulated makespan over every per-device order (each backward after its own
    stage's forward) and every choice of pairs, among those that run and fit the cap."""
    S, B = problem.num_devices, problem.num_microbatches
    placement = Placement((tuple(range(S)),), S)
    per_device = []
    for s in range(S):
        ops = [Op(k, 0, s, m) for m in range(B) for k in (Kind.F, Kind.B)]
        options = []
        for perm in itertools.permutations(ops):
            pos = {op: i for i, op in enumerate(perm)}
            if all(pos[op._replace(kind=Kind.F)] < pos[op] for op in perm if op.kind is Kind.B):
                options += [(perm, pairs) for pairs in _pairings(perm)]
        per_device.append(options)
    best = None
    for combo in itertools.product(*per_device):
        sched = Schedule("enumerated", placement, (0,) * B, tuple(c[0] for c in combo),
                         blocks=tuple(p for c in combo for p in c[1]))
        if not memory_check(problem, sched).fits:
            continue
        try:
            t = simulate(sched, problem.costs).makespan
        except DeadlockError:
            continue
        best = t if best is None else min(best, t)
    assert best is not None
    return best


@pytest.mark.slow
@pytest.mark.parametrize("S, B, cap, comm, f, b", [
    (2, 2, None, 0, ((False, 1), (True, 1)), ((True, 1), (False, 1))),
    (3, 2, None, 1, ((False, 1), (True, 1)), ((True, 1), (False, 1))),
    (2, 2, None, 0, ((False, 1), (True, 2)), ((True, 2), (False, 2))),  # communication-bound ops
    (2, 3, 2, 0, ((False, 1), (True, 1)), ((True, 1), (False, 1))),     # a cap of 2 activations
])
def test_optimum_equals_enumeration(S, B, cap, comm, f, b):
    costs = _costs(S, f, b, comm)
    if cap is not None:
        costs = costs.with_activation_cap(cap)
    problem = Problem(S, (0,) * B, (S,), costs, "linear", overlap_pairs=True)
    res = search(problem, DET)
    assert str(res.status) == "optimal"
    assert res.makespan == _enumerated_optimum(problem)
    alone = search(replace(problem, overlap_pairs=False), DET)
    if cap is None:  # without a cap the pairs gain here, and the optimum uses them
        assert res.makespan < alone.makespan and res.schedule.blocks
    else:  # under a cap of 2 the pairs gain nothing here (the enumeration agrees)
        assert res.makespan == alone.makespan
    ev = checked(problem, res.schedule, res.makespan)  # simulated, memory-checked, table validated
    assert ev.makespan == res.makespan


@pytest.mark.slow
def test_bound_below_registry_schedules_with_pairs():
    """DualPipeV with its overlapped pairs (V placement) and interleaved 1F1B with pairs:
    the paired search's bound is at most their simulated makespans, its schedule no worse."""
    S, B = 4, 8
    for name, opts in (("dualpipev", {}), ("interleaved", {"overlap": True})):
        sched = registry.generate(name, S, B, **opts)
        assert sched.blocks
        stages = sched.num_stages(0)
        chains = {(k, 0, s): ((False, 1), (True, 1)) if k is Kind.F else ((True, 1), (False, 1))
                  for s in range(stages) for k in (Kind.F, Kind.B, Kind.W)}
        base = idealized_costs(S, (stages,), forward=2, backward=2, weight=1, comm=1,
                               split_backward=sched.split_backward)
        costs = replace(base, chains={k: v for k, v in chains.items() if k[0] is not Kind.W})
        problem = replace(Problem.from_schedule(sched, costs), overlap_pairs=True)
        known = pairs_only(sched)
        t_known = simulate(known, costs).makespan
        res = search(problem, CpSatConfig(time_limit_s=60, workers=1, deterministic_time=5.0), [sched])
        assert res.lower_bound <= t_known
        assert res.makespan <= t_known
        assert checked(problem, res.schedule, res.makespan).makespan == res.makespan


def test_candidates_keep_what_the_cap_allows():
    """Under a cap of k activations a forward pairs with a backward at most k - 1
    microbatches before it on the same stage; without a cap with any earlier one."""
    costs = _costs(2)
    problem = Problem(2, (0,) * 5, (2,), costs, "linear", overlap_pairs=True)
    pl = problem.fixed_placement
    free = pair_candidates(problem, pl, 10_000)
    offsets = {(f.stage, f.microbatch - b.microbatch) for f, b, _ in free.pairs}
    assert offsets == {(s, o) for s in range(2) for o in range(1, 5)}
    assert not free.restricted
    capped = pair_candidates(replace(problem, costs=costs.with_activation_cap(3)), pl, 10_000)
    assert {f.microbatch - b.microbatch for f, b, _ in capped.pairs} == {1, 2}
    assert len(capped.pairs) == 2 * (4 + 3)
    cut = pair_candidates(problem, pl, 5)  # too many: only distances 1 and 2 (no incumbent)
    assert cut.restricted and {f.microbatch - b.microbatch for f, b, _ in cut.pairs} == {1, 2}


def test_no_gain_no_candidates_and_savings():
    """Pairs that take as long as their two ops are no candidates; a pair of 2 slots in
    place of 4 saves at most 2 slots per forward of the device (4 of them)."""
    flat = _costs(2, ((False, 2),), ((False, 2),))
    problem = Problem(2, (0,) * 4, (2,), flat, "linear", overlap_pairs=True)
    assert pair_candidates(problem, problem.fixed_placement, 100) is None
    problem = Problem(2, (0,) * 4, (2,), _costs(2), "linear", overlap_pairs=True)
    savings = device_savings(problem, problem.fixed_placement)
    assert {d: (x.forwards, x.backwards, x.forward_share, x.backward_share) for d, x in savings.items()} == \
        {0: (8, 8, 1.0, 1.0), 1: (8, 8, 1.0, 1.0)}


def test_analytic_bound_with_pairs_by_hand():
    """S=2, B=4, ops of 2 slots, a pair of 2 (a saving of 2, a whole tick per tick).
    Device 0 holds 16 slots of ops alone, at most 8 saved; its first backward can start at
    6 (F F B on the way), so the 6 slots before run forwards alone and forgo 6: 16 - 8 + 6 =
    14. Device 1: head 2, tail 2 (B of stage 1 is followed by B of stage 0), 16 slots, a
    backward from 4: 2 + 16 + 2 - 8 + 2 = 14. Without the windows the bound is 16 - 8 = 8 on
    device 0 and 20 - 8 = 12 on device 1; a schedule of 14 exists (the search finds it)."""
    from pipetab.solver.cpsat.model.objectives import analytic_lower_bound

    problem = Problem(2, (0,) * 4, (2,), _costs(2), "linear", overlap_pairs=True)
    assert analytic_lower_bound(problem, problem.fixed_placement)[0] == 14 == search(problem, DET).makespan


def test_overlap_pairs_refused_where_it_cannot_apply():
    costs = _costs(2)
    with pytest.raises(ValueError, match="fixed placement"):
        Problem(2, (0,) * 4, (2,), costs, "free", overlap_pairs=True)
    with pytest.raises(ValueError, match="makespan"):
        Problem(2, (0,) * 4, (2,), costs, "linear", objective="period", overlap_pairs=True)


def test_paired_schedule_reads_back_from_search_json():
    """``pipetab search``'s JSON columns of a schedule with pairs: its blocks' ops share
    their start and duration, and ``schedules.formats.from_json`` reads them back as blocks."""
    import json

    from pipetab.cli.solve_cmd import ops_columns
    from pipetab.schedules.formats import from_json

    problem = Problem(3, (0,) * 4, (3,), _costs(3), "linear", overlap_pairs=True)
    res = search(problem, DET)
    assert res.schedule.blocks
    cols, _ = ops_columns(res.schedule, problem.costs)
    table = from_json(json.dumps({"devices": 3, "tick_slots": 1.0, "ops": cols}))
    assert {frozenset(b) for b in table.blocks()} == {frozenset(b) for b in res.schedule.blocks}
    assert table.makespan == res.makespan


def test_a_block_shorter_than_its_op_is_refused():
    """An op time longer than its own chain (4 slots against a chain of 2) would let a
    block end before the op alone; the model's heads and tails assume it cannot."""
    costs = _costs(2)
    costs = replace(costs, op_time={**costs.op_time, (Kind.B, 0, 1): 4})
    problem = Problem(2, (0,) * 4, (2,), costs, "linear", overlap_pairs=True)
    with pytest.raises(ValueError, match="less than one of its ops alone"):
        search(problem, DET)
