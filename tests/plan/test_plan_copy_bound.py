"""``Bounds.copy_time``: an offloading candidate's bound from its copy streams alone (each
device's offloaded bytes through its D2H and H2D engines before its last backward), taken
before its short run is simulated."""

from __future__ import annotations

from dataclasses import replace

from pipetab.plan import plan_question
from pipetab.plan.bounds import Bounds
from pipetab.plan.space import shapes


def test_copy_bound_is_at_most_every_offloading_step_and_bites():
    """Llama 3 70B on PP4 TP8 DP1 (the offload question of test_plan_offload), every registry
    schedule without blocks at offload shares 0.5 and 1: the copy bound is at most the
    simulated step, None without offload; on a host link a quarter as fast, above the priced
    bound (the copies, not the compute, are the bottleneck)."""
    sp = plan_question("llama3_70b", 4, 8, 64, gpu="H100", pp=(4,), tp=(8,), dp=(1,), recompute=("none",),
                       microbatch_sizes=(2,), cpsat_shapes=0, refine=False)
    link = sp.system.host_link
    slow = replace(sp, system=replace(sp.system, host_link=replace(link, d2h=link.d2h / 4, h2d=link.h2d / 4,
                                                                   duplex=link.duplex / 4)))
    _check(sp)
    assert _check(slow) > 0


def _check(sp) -> int:
    """Every offloading candidate's copy bound checked against its run; how many exceed ``cheap``."""
    bounds, runs, bites = Bounds(sp), 0, 0
    for plain in shapes(sp):
        for name, opts in sp.variants():
            assert bounds.copy_time(name, opts, plain) is None
        for share in (0.5, 1.0):
            ctx = plain.replace(offload_activations=share)
            for name, opts in sp.variants():
                copies, run = bounds.copy_time(name, opts, ctx), bounds.run(name, opts, ctx)
                if run is None:
                    continue
                runs += 1
                assert copies is not None and copies <= run.makespan * (1 + 1e-12), (name, opts, share)
                bites += copies > bounds.cheap(name, opts, ctx)
    assert runs > 0
    return bites


def test_a_short_run_that_does_not_fit_means_a_run_that_does_not():
    """``Bounds.short_misfit`` (an offloading candidate whose short run with copies already
    exceeds the GPU) drops the candidate before its run: on Llama 3 70B PP4 TP8 at microbatch
    sizes 1-4 and shares 0.5 and 1, every such run, simulated anyway, does not fit either,
    and some candidates are dropped so (the check bites)."""
    sp = plan_question("llama3_70b", 4, 8, 64, gpu="H100", pp=(4,), tp=(8,), dp=(1,), recompute=("none",),
                       microbatch_sizes=(1, 2, 4), cpsat_shapes=0, refine=False)
    bounds, dropped = Bounds(sp), 0
    for plain in shapes(sp):
        for share in (0.5, 1.0):
            ctx = plain.replace(offload_activations=share)
            for name, opts in sp.variants():
                if bounds.quick(name, opts, ctx) is None or not bounds.short_misfit(name, opts, ctx):
                    continue
                dropped += 1
                run = bounds.run(name, opts, ctx)
                assert run is not None, (name, opts, share)
                costs = run.costs  # plan's verdict on the run (search._evaluate): some GPU over its capacity
                assert any(p + a > c for p, a, c in zip(costs.persistent, run.peaks, costs.capacity)), (name, share)
    assert dropped > 0
