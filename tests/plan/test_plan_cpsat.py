"""``plan``'s CP-SAT at every size: a shape of more than 10,000 ops is searched (it was
skipped), on the placement and backward split of the shape's best registry schedule, and
what it returns goes back through the simulator and the validator before it is ranked."""

from dataclasses import replace

import pytest

from pipetab.hardware.model import TransformerModel
from pipetab.plan import PlanSpace, cluster, plan, plan_question, shape
from pipetab.plan.cpsat import cpsat_outcome, cpsat_search
from pipetab.plan.space import costs_of
from pipetab.schedules.table import layout
from pipetab.schedules.validate import validate
from pipetab.solver.simulate import simulate

# test_plan.py's small Llama-like model: 8 layers, GQA 8/2, SwiGLU, 1024 tokens
MODEL = TransformerModel("t", num_layers=8, hidden=512, heads=8, seq_len=1024, vocab=1000, global_batch=32,
                         kv_heads=2, ffn_hidden=1536, mlp="swiglu", norm="rmsnorm", bias=False)


@pytest.mark.slow
def test_a_large_shape_is_searched_and_its_result_checked(monkeypatch):
    """tiny_gpt on 4 stages with 4,096 microbatches: 32,768 ops. The answer's schedule is
    re-simulated on the shape's costs (its step time is the simulator's) and its table
    validated (``evaluate_levels``), and the note gives its gap and its change against
    the shape's best registry schedule."""
    space = plan_question("tiny_gpt", nodes=1, gpus_per_node=4, global_batch=4096, gpu="H100", cpsat_time_s=4.0)
    big = shape(space, 4, 1, 1, 1, "none")
    assert 2 * big.pp * big.microbatches > 10_000
    import pipetab.solver.levels as levels

    validated = []
    real_levels = levels.evaluate_levels

    def spy(schedule, *a, **kw):
        validated.append(schedule)
        return real_levels(schedule, *a, **kw)

    monkeypatch.setattr(levels, "evaluate_levels", spy)
    answer = cpsat_search(space, big)
    assert answer.schedule is not None
    conf, note = cpsat_outcome(space, big, answer, [])
    assert validated == [answer.schedule]
    costs = costs_of(space, answer.schedule, big)
    validate(layout(answer.schedule), answer.schedule)
    assert answer.seconds == simulate(answer.schedule, costs).makespan
    assert "gap" in note and "on the placement of" in note
    assert conf is not None and conf.step_time_s == answer.seconds


def test_the_search_takes_the_best_schedules_placement_and_split():
    base = cluster("H100", 1, 8)
    system = replace(base, device=replace(base.device, memory_bytes=3e8, reserved_bytes=0.0))
    # a pipeline pinned: without one CP-SAT has no ops to order (PP = 1 wins this small model)
    result = plan(PlanSpace(MODEL, system, 32, cpsat_shapes=1, cpsat_time_s=2.0, top=3, pp=(2, 4)))
    (note,) = result.cpsat_notes
    best = min((c for c in result.evaluated if c.fits and c.source == "registry"), key=lambda c: c.step_time_s)
    assert f"on the placement of {best.label}" in note
    assert "the shape's best in the table" in note


def test_the_note_cites_the_time_the_table_shows_for_the_shape():
    """With refinements on, the shape's best in the table may be an uneven layout: the note
    compares CP-SAT's schedule with that row (its time as the table has it), not with the
    even layout's registry schedule."""
    import re

    from pipetab.plan.result import runs

    base = cluster("H100", 1, 8)
    system = replace(base, device=replace(base.device, memory_bytes=3e8, reserved_bytes=0.0))
    result = plan(PlanSpace(MODEL, system, 32, cpsat_shapes=1, cpsat_time_s=2.0, top=3, pp=(2,)))
    (note,) = result.cpsat_notes
    searched = next(c.shape.even for c in result.evaluated if c.fits and f"{c.shape.even.label} recompute" in note)
    table = min((c for c in result.evaluated if c.fits and c.source != "cpsat" and c.shape.even == searched),
                key=lambda c: c.step_time_s)
    cited = re.search(r"best in the table \((.+), ([0-9.e+-]+) s\)", note)
    assert cited is not None and float(cited[2]) == pytest.approx(table.step_time_s, rel=1e-5)
    assert cited[1].startswith(table.label)
    assert table.source == "refined" and f"layers {runs(table.layers_per_stage)}" in cited[1]  # an uneven layout


def test_a_worker_past_its_budget_is_stopped():
    """A CP-SAT worker that has not answered by its budget is terminated and plan goes on."""
    import time

    from pipetab.plan.workers import Workers

    pool = Workers(1)
    try:
        job = pool.submit(time.sleep, 30)
        t0 = time.perf_counter()
        with pytest.raises(TimeoutError):
            job.result(timeout=0.3)
        assert time.perf_counter() - t0 < 5 and not job.proc.is_alive()
        assert pool.submit(abs, -3).result(timeout=30) == 3
    finally:
        pool.close()


def test_pairs_of_cpsats_order_are_overlapped_when_the_all_to_all_crosses_nodes():
    """A mixture-of-experts shape whose all-to-all crosses nodes (EP 8 over nodes of 4 GPUs),
    and DualPipeV's order run one op at a time (a search's start, which a search may return
    as it is): its adjacent forward-backward pairs are overlapped and the ranked row is the
    paired schedule, validated and simulated, faster than the order one op at a time (and
    here than DualPipeV's own pairs); the note says its bound is of orders without pairs.
    1F1B's order is the counter-example: pairing F(i+1) with B(i) on the first device makes
    the forward wait for the backward's round trip, so the unpaired order stays."""
    from types import SimpleNamespace

    from pipetab.hardware.loaders import load_model
    from pipetab.schedules import registry

    moe = replace(load_model("mixtral_8x7b"), num_layers=8, seq_len=1024)
    space = plan_question(moe, nodes=4, gpus_per_node=4, global_batch=64, gpu="H100")
    big = shape(space, 2, 1, 8, 1, "none", ep=8)

    def outcome(order):
        answer = SimpleNamespace(schedule=order, status="feasible", runtime_s=1.0, lower_bound_s=0.1, gap=0.5,
                                 assumptions=("ops run one at a time: no overlapped forward-backward pairs",),
                                 result=SimpleNamespace(cyclic=None), tick_s=1e-3)
        return cpsat_outcome(space, big, answer, [])

    own = registry.generate("dualpipev", 2, big.microbatches, overlap=True)
    order = own.with_blocks(())
    conf, note = outcome(order)
    costs = costs_of(space, order, big)
    paired = conf.searched
    assert paired.blocks and all(a.kind.name == "F" and b.kind.name == "B" for a, b in paired.blocks)
    validate(layout(paired), paired)
    assert conf.step_time_s == simulate(paired, costs).makespan < simulate(own, costs).makespan
    assert simulate(own, costs).makespan < simulate(order, costs).makespan
    assert "pairs overlapped after the search" in note and "of orders without overlapped pairs" in note
    one_f_one_b = registry.generate("1f1b", 2, big.microbatches)
    conf, note = outcome(one_f_one_b)
    assert conf.searched is one_f_one_b and "no pairing of adjacent ops of its order was faster" in note


@pytest.mark.slow
def test_plans_search_chooses_pairs_on_a_moe_shape():
    """On a MoE shape whose all-to-all crosses nodes plan's CP-SAT search may overlap pairs
    (``Problem.overlap_pairs``): its bound is of schedules with pairs (never above the
    DualPipeV with pairs it starts from), its schedule runs pairs, is re-simulated on the
    shape's costs and validated before it is ranked, and the note counts them."""
    from pipetab.hardware.loaders import load_model
    from pipetab.plan.cpsat import _schedule_of
    from pipetab.schedules import registry

    moe = replace(load_model("mixtral_8x7b"), num_layers=8, seq_len=1024)
    space = plan_question(moe, nodes=4, gpus_per_node=4, global_batch=64, gpu="H100", cpsat_time_s=4.0)
    big = shape(space, 2, 1, 8, 1, "none", ep=8)
    own = registry.generate("dualpipev", 2, big.microbatches, overlap=True)
    costs = costs_of(space, own, big)
    ranked = [c for c in plan(replace(space, pp=(2,), cpsat_shapes=0, top=50)).evaluated if c.shape == big]
    best = min((c for c in ranked if c.fits and c.source == "registry"), key=lambda c: c.step_time_s)
    answer = cpsat_search(space, big, best)
    assert any("overlapped block" in a for a in answer.assumptions)
    assert answer.lower_bound_s <= simulate(_schedule_of(best), costs_of(space, _schedule_of(best), big)).makespan
    assert answer.lower_bound_s <= simulate(own, costs).makespan
    _, note = cpsat_outcome(space, big, answer, ranked)
    found = answer.schedule
    validate(layout(found), found)
    assert answer.seconds == simulate(found, costs_of(space, found, big)).makespan
    assert found.blocks and f"{len(found.blocks)} overlapped forward-backward pairs" in note
    assert "of orders without" not in note
