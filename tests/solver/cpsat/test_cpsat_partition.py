"""Stage partitions as a decision: free equals the best fixed split by enumeration, fixed
splits reproduce the evaluator and simulator, invalid splits are refused."""

import itertools
import math
import time
from dataclasses import replace

import pytest

from pipetab.hardware.context import Context
from pipetab.schedules.ops import Kind
from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search
from pipetab.solver.cpsat.api import solve_partition
from pipetab.solver.cpsat.decompose.partition import partition_problem
from pipetab.solver.cpsat.decompose.partition_enum import enumerate_partitions, least_splits, quick_bound
from pipetab.solver.partition import Partition, check_layers, shape_schedule
from pipetab.solver.pricing import HardwareLayers, IdealizedLayers, hardware_costs
from pipetab.solver.simulate import simulate

CFG = CpSatConfig(time_limit_s=20, workers=2)


def _compositions(total, parts):
    for cut in itertools.combinations(range(1, total), parts - 1):
        edges = (0, *cut, total)
        yield tuple(b - a for a, b in itertools.pairwise(edges))


def _all_splits(shape, L):
    rows = [list(_compositions(L, n)) for n in shape.num_stages]
    return itertools.product(*rows)


def _fixed_optimum(shape, lc, layers):
    res = search(partition_problem(shape, lc, layers), CFG)
    assert res.status == "optimal"
    return res.makespan


@pytest.mark.slow
@pytest.mark.parametrize("placement, S, B, L, kw", [
    ("linear", 3, 4, 7, dict(head=2, embedding=1)),
    ("linear", 4, 4, 6, dict(head=1, comm=1, activation_cap=2)),
    ("linear", 3, 3, 6, dict(split_backward=True, head=1)),
    ("bidirectional", 2, 4, 5, dict(head=2)),
    ("bidirectional", 4, 4, 5, dict(head=1, comm=1)),
])
def test_free_partition_equals_best_fixed_split_by_enumeration(placement, S, B, L, kw):
    shape = idealized_problem(S, B, placement, split_backward=kw.get("split_backward", False))
    lc = IdealizedLayers(L, S, shape.num_stages, **kw)
    best = min(_fixed_optimum(shape, lc, lay) for lay in _all_splits(shape, L))
    out = solve_partition(shape, lc, Partition("free"), CFG)
    assert out.result.status == "optimal"
    assert out.result.makespan == best
    assert out.result.lower_bound == best
    assert any(a.startswith("partition free") for a in out.result.bound_assumptions)
    # the chosen split is the schedule's and is optimal for that split
    assert out.result.schedule.stage_work == tuple(tuple(float(n) for n in row) for row in out.layers)
    chosen = partition_problem(shape, lc, out.layers)
    assert simulate(out.result.schedule, chosen.costs).makespan == best


def test_quick_bound_is_below_every_fixed_optimum_and_enumeration_is_complete():
    shape = idealized_problem(3, 4, "linear")
    lc = IdealizedLayers(7, 3, shape.num_stages, head=2)
    splits = list(_all_splits(shape, 7))
    assert enumerate_partitions(shape, lc).enumerated == len(splits) == 15
    for lay in splits:
        assert quick_bound(shape, lc, lay) <= _fixed_optimum(shape, lc, lay)


SMALL_SHAPES = [
    ("linear", 3, 4, 7, dict(head=2, embedding=1)),
    ("linear", 3, 3, 6, dict(split_backward=True, head=1)),
    ("bidirectional", 2, 4, 5, dict(head=2)),
    ("bidirectional", 4, 4, 6, dict(head=1, comm=1)),
]


def _shape(placement, S, B, L, kw):
    shape = idealized_problem(S, B, placement, split_backward=kw.get("split_backward", False))
    return shape, IdealizedLayers(L, S, shape.num_stages, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("case", SMALL_SHAPES, ids=str)
def test_least_splits_are_the_least_quick_bounds_by_brute_force(case):
    shape, lc = _shape(*case)
    bounds = sorted(quick_bound(shape, lc, lay) for lay in _all_splits(shape, case[3]))
    out = least_splits(shape, lc, 4, time.perf_counter() + 30)
    assert [b for b, _ in out.splits] == bounds[:4]
    assert all(quick_bound(shape, lc, lay) == b for b, lay in out.splits)
    assert len({lay for _, lay in out.splits}) == 4
    assert out.rest_bound <= bounds[4]  # a bound of every split not listed
    everything = least_splits(shape, lc, len(bounds) + 1, time.perf_counter() + 60)
    assert len(everything.splits) == len(bounds) and everything.rest_bound == math.inf


@pytest.mark.parametrize("case", SMALL_SHAPES, ids=str)
def test_enumeration_below_a_threshold_lists_exactly_those_splits(case):
    shape, lc = _shape(*case)
    every = {lay: quick_bound(shape, lc, lay) for lay in _all_splits(shape, case[3])}
    threshold = sorted(every.values())[len(every) // 3]
    enum = enumerate_partitions(shape, lc, threshold)
    assert enum.rest_bound is None
    assert sorted(enum.candidates) == sorted((b, lay) for lay, b in every.items() if b < threshold)


def test_fixed_list_reproduces_evaluator_and_simulator_on_hardware(linear_4_8):
    """A LIST is a stage_work: the problem's costs are hardware_costs of a schedule with
    that stage_work, and op_ticks (the enumeration's table) agrees with them."""
    shape = linear_4_8
    lc = HardwareLayers(shape_schedule(shape), "fast_nw_fast_cp", "paper_gpt", memory_cap=1e15, rounding="up")
    layers = ((30, 34, 34, 30),)
    out = solve_partition(shape, lc, Partition.parse("30,34,34,30"), CpSatConfig(time_limit_s=5, workers=2))
    sched = out.result.schedule
    assert sched.stage_work == ((30.0, 34.0, 34.0, 30.0),)
    real = replace(hardware_costs(sched, "fast_nw_fast_cp", "paper_gpt"), capacity=(1e15,) * 4)
    assert lc.real_costs(layers).op_time == real.op_time
    assert real.activation[(0, 1)] > real.activation[(0, 0)]  # activations follow the layers
    q = real.quantized(lc.tick_s, "up")
    assert simulate(sched, q).makespan == out.result.makespan
    for (k, p, s), t in q.op_time.items():
        assert lc.op_ticks(k, p, s, layers[p][s]) == t
    assert "partition fixed: 30,34,34,30" in out.result.bound_assumptions


def test_idealized_layer_costs_rule():
    lc = IdealizedLayers(8, 2, (2,), forward=1, backward=2, head=3, embedding=1)
    c = lc.costs(((5, 3),))
    assert c.op_time[(Kind.F, 0, 0)] == 5 + 1 and c.op_time[(Kind.B, 0, 0)] == 10 + 2
    assert c.op_time[(Kind.F, 0, 1)] == 3 + 3 and c.op_time[(Kind.B, 0, 1)] == 6 + 6
    assert c.activation[(0, 0)] == 5 * 2 / 8


@pytest.mark.parametrize("layers, words", [
    (((7, 8, 8, 8),), "sums to 31"),
    (((16, 0, 8, 8),), "0 layers"),
    (((8, 8, 16),), "lists 3 stages"),
    (((8, 8), (8, 8), (8, 8)), "3 lists"),
])
def test_invalid_lists_are_refused(layers, words):
    with pytest.raises(ValueError, match=words):
        check_layers(layers, 32, (4,))


def test_parse():
    assert Partition.parse("free") == Partition("free")
    assert Partition.parse("9,8,8,7/7,8,8,9").layers == ((9, 8, 8, 7), (7, 8, 8, 9))
    with pytest.raises(ValueError, match="even, free, or layer counts"):
        Partition.parse("8,eight")


def _cli_json(capsys, *argv):
    import json

    from pipetab.cli import main

    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_free_partition_reports_the_split_and_its_assumption(capsys):
    """The command line's free partition equals the library's (enumerated above) and says so."""
    doc = _cli_json(capsys, "search", "-S", "3", "-B", "4", "--layers", "7", "--head-slots", "2",
                    "--embedding-slots", "1", "--partition", "free", "--time-limit", "20", "--format", "json")
    shape = idealized_problem(3, 4, "linear")
    lc = IdealizedLayers(7, 3, shape.num_stages, head=2, embedding=1)
    best = min(_fixed_optimum(shape, lc, lay) for lay in _all_splits(shape, 7))
    assert doc["status"] == "optimal" and doc["makespan"] == best == doc["lower_bound"]
    assert sum(doc["partition"][0]) == 7
    assert any(a.startswith("partition free") for a in doc["bound_assumptions"])
    fixed = _cli_json(capsys, "bound", "-S", "3", "-B", "4", "--layers", "7", "--head-slots", "2",
                      "--embedding-slots", "1", "--partition", ",".join(map(str, doc["partition"][0])),
                      "--time-limit", "20", "--format", "json")
    assert fixed["lower_bound"] == best
    assert f"partition fixed: {','.join(map(str, doc['partition'][0]))}" in fixed["bound_assumptions"]


def test_cli_hardware_even_names_its_split(capsys):
    doc = _cli_json(capsys, "bound", "-S", "4", "-B", "8", "--system", "fast_nw_fast_cp", "--model", "paper_gpt",
                    "--memory-cap", "100TB",
                    "--time-limit", "5", "--format", "json")
    assert doc["partition"] == [[32, 32, 32, 32]]
    assert "partition fixed: 32,32,32,32" in doc["bound_assumptions"]


@pytest.mark.parametrize("model, ctx", [
    ("llama3_8b", Context(cp=2, microbatch_size=1)),  # context parallelism: it needed the CP link (it raised)
    ("mixtral_8x7b", Context(dp=8, ep=8, microbatch_size=1)),  # the all-to-all (B was a tick short)
    ("llama3_8b", Context(dp=2, zero=3, microbatch_size=1)),  # ZeRO-3's gathers
], ids=["cp", "ep", "zero3"])
def test_op_ticks_price_a_stage_as_hardware_costs_do(model, ctx):
    """The enumeration's per-stage table (op_ticks) and the problem's costs (hardware_costs
    of the split) agree op for op, on every parallel dimension a stage's cost depends on."""
    lc = HardwareLayers(shape_schedule(idealized_problem(4, 8, "linear")), "dgx_h100_ib", model, ctx,
                        memory_cap=1e15, rounding="up")
    n = lc.num_layers
    layers = ((n // 4 - 1, n // 4 + 1, n // 4 + 1, n // 4 - 1),)
    q = lc.costs(layers)
    assert {key: lc.op_ticks(*key, layers[key[1]][key[2]]) for key in q.op_time} == q.op_time


def test_a_free_partition_of_mixed_layers_is_refused():
    """DeepSeek-V3's first three layers are dense: a stage's cost depends on where the split
    puts it, not only on how many layers it holds."""
    with pytest.raises(ValueError, match="layers are all of one kind"):
        HardwareLayers(shape_schedule(idealized_problem(4, 8, "linear")), "h800_ib", "deepseek_v3",
                       Context(dp=8, ep=8, microbatch_size=1))
