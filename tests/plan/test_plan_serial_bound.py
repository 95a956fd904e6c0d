"""``Bounds.serial_time``: the bound a schedule without blocks enters an opened shape with,
before it is priced (the expert all-to-alls counted: without overlapped pairs no op hides them)."""

from dataclasses import replace

import pytest

from pipetab.hardware import load_model
from pipetab.plan import PlanSpace, cluster, plan
from pipetab.plan.bounds import Bounds
from pipetab.plan.parallel import opening
from pipetab.plan.space import shape, shapes
from pipetab.schedules import registry
from pipetab.solver.offload import simulated
from pipetab.solver.pricing import hardware_costs


def _moe() -> PlanSpace:
    return PlanSpace(replace(load_model("mixtral_8x7b"), num_layers=16, seq_len=1024), cluster("H100", 2, 8), 256,
                     cpsat_shapes=0)


def test_serial_bound_is_at_most_every_step_without_blocks_and_bites():
    """At most the simulated step of every schedule without blocks, at least the shape's
    bound, and above it where the all-to-alls cross nodes (EP 8 over 2 nodes)."""
    moe = _moe()
    bounds = Bounds(moe)
    runs = above = 0
    for ctx in (shape(moe, 4, 1, 4, 1, "none", ep=4), shape(moe, 2, 2, 4, 1, "none", ep=2),
                shape(moe, 8, 1, 2, 1, "none", ep=2), shape(moe, 2, 1, 8, 2, "full", ep=8)):
        serial, whole = bounds.serial_time(ctx), bounds.shape_time(ctx)
        assert serial >= whole
        above += serial > whole * (1 + 1e-6)
        for name, opts in moe.variants():
            run = bounds.run(name, opts, ctx)
            if run is not None and not run.schedule.blocks:
                runs += 1
                assert serial <= run.makespan * (1 + 1e-12), (name, opts, ctx.label)
    assert runs > 0 and above > 0


def test_lazy_opening_enters_the_same_candidates_with_lower_bounds():
    """``opening(lazy=True)`` gives the same candidates as the eager one; the unpriced
    (no blocks) enter with ``serial_time``, at most their priced bound; the priced are equal."""
    moe = _moe()
    bounds = Bounds(moe)
    ctx = shape(moe, 4, 1, 4, 1, "none", ep=4)
    eager, eager_misfits = opening(moe, bounds, ctx)
    lazy, lazy_misfits = opening(moe, bounds, ctx, lazy=True)
    assert eager_misfits == lazy_misfits
    assert [(n, o) for _, n, o, _ in eager] == [(n, o) for _, n, o, _ in lazy]
    assert all(priced for *_, priced in eager) and not all(priced for *_, priced in lazy)
    for (b, *_), (lb, _, _, priced) in zip(eager, lazy):
        assert lb == b if priced else lb == bounds.serial_time(ctx) <= b * (1 + 1e-12)


def test_plan_of_a_mixture_of_experts_ranks_what_brute_force_ranks():
    """Every candidate of a small mixture-of-experts question simulated (memory ample: no
    rescue), no bound: the plan's fitting steps are the best of them, in order."""
    base = cluster("H100", 1, 8)
    system = replace(base, device=replace(base.device, memory_bytes=1e12, reserved_bytes=0.0))
    model = replace(load_model("mixtral_8x7b"), num_layers=8, seq_len=512, hidden=512, heads=8, kv_heads=2,
                    ffn_hidden=1024, vocab=1000)
    sp = PlanSpace(model, system, 32, cpsat_shapes=0, top=6, refine=False)
    steps = []
    for ctx in shapes(sp):
        for name, opts in sp.variants():
            try:
                sched = registry.generate(name, ctx.pp, ctx.microbatches, **opts)
                steps.append((simulated(sched, hardware_costs(sched, sp.system, sp.model, ctx)).makespan, ctx.pp))
            except ValueError:
                continue
    # one stage: every schedule is the same run, shown once
    truth, seen = [], set()
    for step, pp in sorted(steps):
        if pp == 1 and round(step, 12) in seen:
            continue
        seen.add(round(step, 12))
        truth.append(step)
    got = [c.step_time_s for c in plan(sp).configurations if c.fits]
    assert len(got) == sp.top
    assert got == pytest.approx(truth[:sp.top], rel=1e-12)
