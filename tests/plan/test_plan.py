"""``pipetab.plan``: exact ranking against brute force, only validated configurations shown,
fitting ones first, and the bounds' assumptions on every registry schedule."""

from dataclasses import replace

import pytest

from pipetab.hardware.context import Context
from pipetab.hardware.model import TransformerModel
from pipetab.plan import PlanSpace, cluster, order_peaks, plan, schedule_label, shapes, small_microbatches
from pipetab.schedules import registry
from pipetab.schedules.validate import validate
from pipetab.solver.offload import simulated
from pipetab.solver.pricing import hardware_costs
from pipetab.solver.simulate import simulate

# a small Llama-like model: 8 layers, GQA 8/2, SwiGLU, 1024 tokens
MODEL = TransformerModel("t", num_layers=8, hidden=512, heads=8, seq_len=1024, vocab=1000, global_batch=32,
                         kv_heads=2, ffn_hidden=1536, mlp="swiglu", norm="rmsnorm", bias=False)


def space(memory_bytes: float, **kw) -> PlanSpace:
    base = cluster("H100", 1, 8)
    system = replace(base, device=replace(base.device, memory_bytes=memory_bytes, reserved_bytes=0.0))
    return PlanSpace(MODEL, system, 32, **{"cpsat_shapes": 0, "top": 8, **kw})


def _with_rescues(sp: PlanSpace) -> list[Context]:
    """Every shape and the memory techniques plan tries on it (``plan.space.rescues``): a shape
    none of whose schedules' memory bounds fits the capacity takes the rungs of its ladder one
    after another until one has a schedule that fits once simulated; an offload rung goes its
    own way (the other offload shares after it) beside the recompute rungs after it."""
    from pipetab.plan.bounds import Bounds
    from pipetab.plan.space import rescues

    bounds, cap, out = Bounds(sp), sp.system.device.usable_memory_bytes, []

    def walk(ladder: list[Context], base: Context) -> None:
        for i, rung in enumerate(ladder):
            if bounds.shape_memory(rung) > cap:
                continue
            rest = ladder[i + 1:]
            if rung.offload_activations and not base.offload_activations:
                off = [r for r in rest if r.offload_activations]
                walk([rung, *off], rung)
                walk(rest[len(off):], base)
                return
            out.append(rung)
            if any(not r[0] for r in _rows(sp, rung)):
                return
            base = rung

    for shape in shapes(sp):
        out.append(shape)
        memory = [bounds.memory(n, o, shape) for n, o in sp.variants()]
        if not (bounds.shape_memory(shape) <= cap and any(m is not None and m <= cap for m in memory)):
            walk(rescues(sp, shape), shape)
    return out


def _rows(sp: PlanSpace, shape: Context) -> list[tuple]:
    """(not fits, step, schedule label, shape) of every schedule that runs on ``shape``."""
    rows = []
    for name, opts in sp.variants():
        try:
            sched = registry.generate(name, shape.pp, shape.microbatches, **opts)
            sim = simulated(sched, hardware_costs(sched, sp.system, sp.model, shape))
        except ValueError:  # refused by its generator, or pairs (blocks) with offload
            continue
        rows.append((not all(sim.fits_memory), sim.makespan, schedule_label(name, opts), shape))
    return rows


def brute_force(sp: PlanSpace) -> list[tuple]:
    """Every candidate simulated, no bound: (not fits, step, schedule label, shape)."""
    rows = [r for shape in _with_rescues(sp) for r in _rows(sp, shape)]
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def distinct_runs(rows: list[tuple]) -> list[tuple]:
    """``rows`` with one stage's shapes once (every schedule on one stage is the same run:
    gradient accumulation; ``plan`` shows it once, the fastest)."""
    seen, out = set(), []
    for r in rows:
        if r[3].pp == 1 and r[3] in seen:
            continue
        seen.add(r[3])
        out.append(r)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("memory", [1e9, 3e8, 2.2e8])
def test_plan_ranks_exactly_what_brute_force_ranks(memory):
    sp = space(memory, refine=False)  # brute force knows even layouts only
    result = plan(sp)
    truth = distinct_runs([r for r in brute_force(sp) if not r[0]])[:sp.top]
    got = [(not c.fits, c.step_time_s, c.label, c.shape) for c in result.configurations if c.fits]
    assert len(got) == len(truth)
    for g, t in zip(got, truth):
        assert g[1] == pytest.approx(t[1], rel=1e-12)
    # ties in step time may order differently; the sets of (schedule, shape) per time agree
    # (but for a tie at the cut: GPipe and 1F1B on one stage take the same time)
    cut = round(truth[-1][1], 12)
    assert sorted((round(g[1], 12), g[2], g[3].__repr__()) for g in got if round(g[1], 12) != cut) == \
        sorted((round(t[1], 12), t[2], t[3].__repr__()) for t in truth if round(t[1], 12) != cut)
    assert result.pruned_memory + result.pruned_time + result.simulated <= result.candidates


def test_shown_configurations_validate_and_fitting_ones_come_first():
    sp = space(6e7, top=40)
    result = plan(sp)  # fewer fit than shown: the closest misfits follow
    confs = result.configurations
    assert any(c.fits for c in confs) and any(not c.fits for c in confs)
    seen_misfit = False
    for c in confs:
        seen_misfit |= not c.fits
        assert not (seen_misfit and c.fits), "a configuration that fits ranked below one that does not"
        lv = c.levels
        validate(lv.table, lv.schedule)  # evaluate_levels validated it; check independently again
        sim = lv.simulation
        if c.sample_microbatches is not None:  # extrapolated from shorter instances: the full run agrees
            assert lv.schedule.num_microbatches == c.sample_microbatches < c.shape.microbatches
            full = registry.generate(c.schedule, c.shape.pp, c.shape.microbatches, **dict(c.options))
            sim = simulated(full, hardware_costs(full, sp.system, sp.model, c.shape))
        assert sim.makespan == pytest.approx(c.step_time_s, rel=1e-9)
        assert max(sim.peak_memory) == pytest.approx(c.peak_memory_bytes, abs=1)
        assert all(sim.fits_memory) == c.fits
    steps = [c.step_time_s for c in confs if c.fits]
    assert steps == sorted(steps)


def test_nothing_fits_is_an_answer():
    result = plan(space(5e7))
    assert result.configurations and not any(c.fits for c in result.configurations)


def test_mfu_and_tokens_by_hand():
    result = plan(space(1e9, top=1))
    c = result.configurations[0]
    tokens = 32 * 1024
    assert c.tokens_per_s == pytest.approx(tokens / c.step_time_s)
    # model FLOPs per sequence: 3 x (layers' forward + LM head), each GEMM 2 FLOPs per weight
    # per token; attention core 4*s^2*h per layer
    h, s, f, kv, V = 512, 1024, 1536, 128, 1000
    layer = 2 * s * (2 * h * h + 2 * h * kv + 3 * h * f) + 4 * s * s * h
    per_seq = 3 * (8 * layer + 2 * s * h * V)
    assert c.mfu == pytest.approx(per_seq * 32 / (c.step_time_s * 8 * 989e12))


@pytest.mark.parametrize("name, opts", [(n, o) for n, o in PlanSpace(MODEL, cluster("H100", 1, 8), 32).variants()])
def test_bound_assumptions_hold_for_every_registry_schedule(name, opts):
    """The plan's bounds assume that the peak activation count only grows with more
    microbatches and, for schedules with blocks, that each microbatch beyond the short
    instance adds at least the average device work to the step (LoopedBFS, without blocks,
    shows that the assumption does not hold for every schedule: its bubble shrinks)."""
    pp = 4
    small, big = small_microbatches(pp, 64), 64
    assert small == 16
    try:
        s_small = registry.generate(name, pp, small, **opts)
        s_big = registry.generate(name, pp, big, **opts)
    except ValueError:
        pytest.skip(f"{name} {opts} does not take S={pp}")
    for sched in (s_small, s_big):
        assert sched.num_devices == pp
    sizes = {(p, s): 1.0 for p, w in enumerate(s_small.stage_work) for s in range(len(w))}
    part = {k: 0.5 for k in sizes}
    assert all(a <= b for a, b in zip(order_peaks(s_small, sizes, part), order_peaks(s_big, sizes, part)))
    deep = replace(MODEL, num_layers=32)  # enough layers for 4 chunks on 4 devices
    for system in ("dgx_h100_ib", "slow_nw_mid_cp"):
        c_small = hardware_costs(s_small, system, deep, Context(microbatch_size=1))
        c_big = hardware_costs(s_big, system, deep, Context(microbatch_size=1))
        work = sum(c_small.duration(op) for order in s_small.orders for op in order) / (pp * small)
        t_small, t_big = simulate(s_small, c_small).makespan, simulate(s_big, c_big).makespan
        assert t_big >= t_small * (1 - 1e-12)  # Bounds.quick takes the short run's step as a bound
        if s_small.blocks:
            assert t_big >= t_small + (big - small) * work * (1 - 1e-12)
        busiest = max(sum(c_big.duration(op) for op in order) for order in s_big.orders)
        assert t_big >= busiest * (1 - 1e-12)


def test_cheap_and_quick_bounds_are_at_most_the_step():
    """``Bounds.cheap`` (priced, not simulated) and ``Bounds.quick`` (a short run) are at
    most the step: a candidate enters the search with the first and is re-entered with the
    larger of the two, then with its step."""
    from pipetab.hardware import load_model
    from pipetab.plan.bounds import Bounds
    from pipetab.plan.space import shape

    sp = PlanSpace(replace(MODEL, num_layers=32), cluster("H100", 1, 8), 128, cpsat_shapes=0)
    bounds = Bounds(sp)
    for ctx in (shape(sp, 4, 1, 2, 1, "none"), shape(sp, 2, 2, 2, 2, "full"), shape(sp, 8, 1, 1, 1, "none")):
        for name, opts in sp.variants():
            quick, run = bounds.quick(name, opts, ctx), bounds.run(name, opts, ctx)
            if run is not None:
                assert quick[0] <= run.makespan * (1 + 1e-12), (name, opts, ctx.label)
                assert bounds.cheap(name, opts, ctx) <= run.makespan * (1 + 1e-12), (name, opts, ctx.label)
    # blocks (overlapped pairs, whose all-to-alls hide under compute): a mixture of experts
    moe = PlanSpace(replace(load_model("mixtral_8x7b"), num_layers=16, seq_len=1024), cluster("H100", 2, 8), 256,
                    cpsat_shapes=0)
    bounds = Bounds(moe)
    blocks = 0
    shapes = (shape(moe, 4, 1, 4, 1, "none", ep=4), shape(moe, 2, 2, 4, 1, "none", ep=2),
              shape(moe, 8, 1, 2, 1, "none", ep=2), shape(moe, 2, 1, 8, 2, "full", ep=8))
    # blocking sends (Megatron's send/receive pairs) hold the compute stream inside a pair too
    for ctx in (*shapes, *(s.replace(overlap_p2p=False) for s in shapes[:2])):
        for name, opts in moe.variants():
            quick, run = bounds.quick(name, opts, ctx), bounds.run(name, opts, ctx)
            if run is not None:
                blocks += bool(run.schedule.blocks)
                assert max(bounds.cheap(name, opts, ctx), quick[0]) <= run.makespan * (1 + 1e-12)
    assert blocks > 0


def test_order_peaks_is_the_simulators_memory():
    sched = registry.generate("zbv", 4, 16)
    costs = hardware_costs(sched, "dgx_h100_ib", MODEL, Context(microbatch_size=2))
    sim = simulate(sched, costs)
    peaks = order_peaks(sched, costs.activation, {k: costs.weight_part(*k) for k in costs.activation})
    assert peaks == pytest.approx(list(sim.peak_activation), rel=1e-12)


def test_plan_space_errors():
    base = cluster("H100", 1, 8)
    with pytest.raises(ValueError, match="global batch must be an integer >= 1, got 0"):
        PlanSpace(MODEL, base, 0)
    with pytest.raises(ValueError, match="unknown schedule 'nope'"):
        PlanSpace(MODEL, base, 8, schedules=("nope",))
    with pytest.raises(ValueError, match="recompute must be among none, selective, full, got 'some'"):
        PlanSpace(MODEL, base, 8, recompute=("some",))
    with pytest.raises(ValueError, match="nodes must be an integer >= 1, got 0"):
        cluster("H100", 0, 8)
    with pytest.raises(ValueError, match="unknown system 'B200'"):
        cluster("B200", 1, 8)


def test_cpsat_on_the_best_shape():
    result = plan(space(3e8, cpsat_shapes=1, cpsat_time_s=2.0, top=3, pp=(2, 4)))
    assert len(result.cpsat_notes) == 1 and "PP" in result.cpsat_notes[0]
    unpiped = plan(space(3e8, cpsat_shapes=1, cpsat_time_s=2.0, top=1))  # PP 1 wins: nothing to order
    assert all(c.shape.pp == 1 for c in unpiped.configurations[:1])
    assert unpiped.cpsat_notes == ("not run: no configuration simulated has a pipeline (CP-SAT orders a pipeline's "
                                   "ops; pin --pp to search one)",)
    for c in result.configurations:
        assert c.levels is not None


def test_each_configuration_is_shown_once_with_its_best_layout():
    """The layouts and per-stage recomputations tried on the best shapes stay in
    ``evaluated``, but the ranking shows each (schedule, options, shape) once: the best of
    its layouts, which is the first of them in ``evaluated``."""
    result = plan(space(3e8, top=8, pp=(2, 4)))  # pipelines: layouts to refine

    def key(c):
        return (c.schedule, c.options, c.shape.even)

    tried = [key(c) for c in result.evaluated]
    assert len(set(tried)) < len(tried)  # some configuration has several layouts
    shown = [key(c) for c in result.configurations]
    assert len(set(shown)) == len(shown)
    # the refinements are counted apart from the candidates (the count of candidates never
    # built went negative when they were not)
    assert result.refined == sum(c.shape != c.shape.even for c in result.evaluated) > 0
    assert result.unbuilt >= 0
    assert result.pruned_memory + result.pruned_time + result.simulated - result.refined + result.unbuilt == \
        result.candidates
    for c in result.configurations:
        assert c.step_time_s == min(e.step_time_s for e in result.evaluated if key(e) == key(c))


@pytest.mark.parametrize("memory, cpsat", [(1e9, 0), (3e8, 0), (2.2e8, 0), (3e8, 1)])
def test_the_certificate_never_claims_less_than_the_truth(memory, cpsat):
    """Every candidate simulated (brute force, no bound): none that fits is faster than the
    certificate's least step time, so none beats #1 by more than its gap. Without CP-SAT
    the plan's pruning is exact and the gap is 0 (the truth's best is #1); with CP-SAT on a
    pinned pipeline its proven bound sets the gap, below every schedule it ranked."""
    sp = space(memory, refine=False, cpsat_shapes=cpsat, cpsat_time_s=2.0, **({"pp": (2, 4)} if cpsat else {}))
    result = plan(sp)
    cert = result.certificate
    best = result.configurations[0]
    assert cert is not None and best.fits and cert.best_s == best.step_time_s
    truth = min(r[1] for r in brute_force(sp) if not r[0])
    assert truth >= cert.least_s * (1 - 1e-12)
    assert truth >= best.step_time_s * (1 - cert.gap) * (1 - 1e-12)
    assert all(c.step_time_s >= cert.least_s * (1 - 1e-12) for c in result.evaluated if c.fits)
    # the closest candidate never simulated: its bound is below the true step of every
    # candidate plan did not simulate, and at least #1's (so it does not move the gap)
    done = {(c.label, c.shape) for c in result.evaluated}
    unsimulated = [r[1] for r in brute_force(sp) if not r[0] and (r[2], r[3]) not in done]
    if cert.unsimulated_s is not None:
        assert cert.unsimulated_s >= best.step_time_s
        assert all(t >= cert.unsimulated_s * (1 - 1e-12) for t in unsimulated)
        assert f"{100 * (cert.unsimulated_s / best.step_time_s - 1):.2f} % slower" in cert.text()
    if not cpsat:
        assert cert.gap == 0 and truth == pytest.approx(best.step_time_s, rel=1e-12)
        # no dead term: without a bound below #1 the text says nothing is faster, not "0.00 %"
        assert cert.text().startswith("no configuration in the searched space is faster than #1")
        assert "0.00 %" not in cert.text() and cert.cpsat_above == 0
    else:
        assert "CP-SAT" in cert.basis and 0 < cert.gap < 0.05
        assert f"more than {100 * cert.gap:.2f} % faster" in cert.text()
        assert any("CP-SAT's bound on PP" in a for a in cert.assumes)
