"""``plan``'s space: PP = 1, context parallelism for long sequences, ZeRO-3, pins and what
the answer says it left out; the uneven layouts and per-stage recomputation it tries."""

from dataclasses import replace

import pytest

from pipetab.hardware.layout import Layout
from pipetab.hardware.model import TransformerModel
from pipetab.plan import PlanSpace, cluster, plan, shapes
from pipetab.plan.refine import layouts

MODEL = TransformerModel("t", num_layers=8, hidden=512, heads=8, seq_len=1024, vocab=1000, global_batch=32,
                         kv_heads=2, ffn_hidden=1536, mlp="swiglu", norm="rmsnorm", bias=False)


def space(**kw) -> PlanSpace:
    return PlanSpace(MODEL, cluster("H100", 1, 8), 32, **{"cpsat_shapes": 0, "top": 4, **kw})


def splits(sp):
    return {(s.pp, s.tp, s.cp, s.dp) for s in shapes(sp)}


def test_pp1_and_zero3_are_in_the_space():
    sp = space()
    got = splits(sp)
    assert (1, 1, 1, 8) in got and (1, 8, 1, 1) in got and (8, 1, 1, 1) in got
    assert all(pp * tp * cp * dp == 8 for pp, tp, cp, dp in got)
    zeros = {(s.pp, s.dp, s.zero) for s in shapes(sp)}
    assert (1, 8, 3) in zeros and (1, 8, 1) in zeros and (8, 1, 0) in zeros  # ZeRO only with replicas


def test_context_parallel_for_long_sequences_only():
    assert {cp for _, _, cp, _ in splits(space())} == {1}
    long = PlanSpace(replace(MODEL, seq_len=32768), cluster("H100", 1, 8), 32, cpsat_shapes=0)
    # every power of two that leaves 4096 tokens per rank and divides the GPUs left by TP
    assert {cp for _, tp, cp, _ in splits(long) if tp == 1} == {1, 2, 4, 8}
    assert {cp for _, tp, cp, _ in splits(long) if tp == 4} == {1, 2}
    assert "CP not considered: sequences of 1024 tokens (tried from 16384)" in space().notes()


def test_pins():
    sp = space(pp=(2,), tp=(2,))
    assert splits(sp) == {(2, 2, 1, 2)}
    assert "PP pinned to 2" in sp.notes() and "TP pinned to 2" in sp.notes()
    with pytest.raises(ValueError, match=r"--pp 2 x --tp 2 x --cp 1 x --dp 4 = 16 GPUs, the cluster has 8"):
        space(pp=(2,), tp=(2,), cp=(1,), dp=(4,))
    with pytest.raises(ValueError, match="--dp 3 must divide the cluster's 8 GPUs"):
        space(dp=(3,))
    with pytest.raises(ValueError, match=r"--cp 3 must split the sequence of 1024 tokens into 2 x cp = 6"):
        PlanSpace(MODEL, cluster("H100", 3, 8), 24, cp=(3,))
    with pytest.raises(ValueError, match="--pp 16 is more stages than the 8 layers"):
        PlanSpace(MODEL, cluster("H100", 2, 8), 32, pp=(16,))


def test_one_gpu_plans_without_a_pipeline():
    result = plan(PlanSpace(MODEL, cluster("H100", 1, 1), 32, cpsat_shapes=0, top=3))
    best = result.configurations[0]
    assert best.fits and best.shape.pp == 1 and best.schedule in ("1f1b", "gpipe")
    assert best.layout == "Et*8L" and best.layers_per_stage == (8,)


def test_uneven_layouts_by_hand():
    # one layer off the first, off the last, off both, two off the last; each to the middle
    # stage holding the fewest (the one nearest the middle on a tie)
    got = [x.layers for x in layouts((8, 8, 8, 8))]
    assert got == [(7, 9, 8, 8), (8, 9, 8, 7), (7, 9, 9, 7), (8, 9, 9, 6)]
    # two stages: to the other one (both ends moved is the even split again: left out)
    assert [x.layers for x in layouts((4, 4))] == [(3, 5), (5, 3), (6, 2)]
    assert layouts((8, 8, 8, 8))[2] == Layout.parse("Et*7|t*9|t*9|t*7L")


def test_refined_configurations_are_ranked_and_fit():
    base = cluster("H100", 1, 8)
    # launches pinned at 2 us (the preset's value before issue 41 measured 1.02 us): on this toy
    # model the ranking of the three best, whose layouts are refined, turns on the launch cost
    tight = replace(base, device=replace(base.device, memory_bytes=1.5e8, reserved_bytes=0.0, compute_latency_s=2e-6))
    result = plan(PlanSpace(replace(MODEL, num_layers=16), tight, 32, cpsat_shapes=0, top=30))
    refined = [c for c in result.evaluated if c.source == "refined"]
    assert len(refined) >= 2 and all(c.fits for c in refined)
    for c in refined:
        assert c.shape.layout is not None or c.shape.recompute_layers is not None
        if c.shape.recompute_layers is not None:  # later stages hold fewer microbatches: recompute no more
            r = c.shape.recompute_layers
            assert list(r) == sorted(r, reverse=True) and any(r)


def test_per_stage_recompute_is_the_least_that_fits():
    from pipetab.hardware.context import Recompute
    from pipetab.plan.bounds import Bounds
    from pipetab.plan.refine import recompute_layers
    from pipetab.plan.space import shape

    base = cluster("H100", 1, 8)
    model = replace(MODEL, num_layers=16)
    sp = PlanSpace(model, base, 32, cpsat_shapes=0)
    ctx = shape(sp, 4, 1, 2, 1, "none")  # PP4 DP2, 16 microbatches of one sequence: 1F1B holds 4, 3, 2, 1
    bounds = Bounds(sp)
    run = bounds.run("1f1b", {}, ctx)
    # a capacity between what stage 3 and stage 0 need without recomputation
    need = [p + a for p, a in zip(run.costs.persistent, run.peaks)]
    cap = (need[0] + need[2]) / 2
    tight = PlanSpace(model, replace(base, device=replace(base.device, memory_bytes=cap, reserved_bytes=0.0)), 32,
                      cpsat_shapes=0)
    bounds = Bounds(tight)
    r = recompute_layers("1f1b", {}, ctx, (4, 4, 4, 4), bounds)
    assert r is not None and r[0] > 0 and r[2:] == (0, 0)
    fits = bounds.run("1f1b", {}, ctx.replace(recompute_layers=r))
    assert all(p + a <= cap for p, a in zip(fits.costs.persistent, fits.peaks))
    for s in range(4):  # one layer fewer on any stage that recomputes does not fit
        if r[s]:
            less = tuple(n - (i == s) for i, n in enumerate(r))
            run = bounds.run("1f1b", {}, ctx.replace(recompute_layers=less))
            assert run.costs.persistent[s] + run.peaks[s] > cap
    full = bounds.run("1f1b", {}, ctx.replace(recompute=Recompute.FULL))
    assert fits.makespan < full.makespan  # recomputing fewer layers is faster
