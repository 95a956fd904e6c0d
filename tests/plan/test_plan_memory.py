"""``plan`` chooses memory techniques (``plan.space.rescues``): where no schedule of a shape
fits, ZeRO-2, FP8 caching, activation offload and recompute modules enter, cheapest first; over plan's
configurations "fits" agrees with the simulated peak per GPU against the usable capacity,
and every technique a row names is in the configuration it describes and was needed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipetab.hardware.context import RECOMPUTE_MODULES, Context, Precision, Recompute
from pipetab.plan import PlanSpace, plan, plan_question
from pipetab.plan.space import rescues
from pipetab.schedules import registry
from pipetab.solver.offload import simulated
from pipetab.solver.pricing import hardware_costs


def _space(gib: float, **kw) -> PlanSpace:
    """Llama 3 8B, 16 sequences on 8 H100 whose memory is ``gib`` GiB (no recompute
    enumerated: what fits beyond the plain shapes is plan's choice of technique)."""
    sp = plan_question("llama3_8b", 1, 8, 16, gpu="H100", cpsat_shapes=0, refine=False, top=5,
                       microbatch_sizes=(1,), recompute=("none",), **kw)
    device = replace(sp.system.device, memory_bytes=gib * 2**30)
    return replace(sp, system=replace(sp.system, device=device))


def _named(shape: Context) -> dict[str, bool]:
    """Each technique a row can name, and whether ``shape`` holds it."""
    modules = set(shape.recompute_modules) | ({"core_attn"} if shape.recompute is Recompute.SELECTIVE else set())
    out = {"fp8-cache": shape.activation_precision is Precision.FP8, "ZeRO-2": shape.zero == 2,
           "recompute=full": shape.recompute is Recompute.FULL,
           f"offload={shape.offload_activations:g}": bool(shape.offload_activations)}
    if modules:
        out["recompute=" + "+".join(m for m in RECOMPUTE_MODULES if m in modules)] = True
    return out


@pytest.mark.parametrize("gib", [24.0, 34.0])
def test_fits_agrees_with_the_simulated_peak_and_rows_name_what_they_use(gib):
    """Re-simulated, each configuration's peak per GPU is the one ranked and "fits" is that
    peak against the usable capacity; every technique a row names is in its shape, and a
    technique plan added was needed: the same schedule without it does not fit."""
    sp = _space(gib)
    result = plan(sp)
    assert result.evaluated
    cap = sp.system.device.usable_memory_bytes
    for c in result.evaluated:
        sched = c.full_schedule()
        costs = hardware_costs(sched, sp.system, sp.model, c.shape)
        sim = simulated(sched, costs)
        peak = max(a + b for a, b in zip(sim.peak_activation, costs.persistent))
        assert c.peak_memory_bytes == pytest.approx(peak, rel=1e-9)
        assert c.fits == (peak <= cap) == all(sim.fits_memory)
        named = _named(c.shape)
        assert all(named.get(t) for t in c.techniques), (c.techniques, named)
        if c.techniques:  # added by plan: the plain shape of the same schedule does not fit
            plain = c.shape.replace(recompute_modules=(), activation_precision="bf16", offload_activations=0.0,
                                    zero=1 if c.shape.zero == 2 else c.shape.zero)
            plain_costs = hardware_costs(sched, sp.system, sp.model, plain)
            assert not all(simulated(sched, plain_costs).fits_memory)
    techniques = {t for c in result.evaluated for t in c.techniques}
    assert bool(techniques) == (gib == 24.0)  # 34 GiB: plain shapes fit and need none


def test_the_ladder_is_cheapest_first_and_only_what_the_model_has():
    """ZeRO-2 and FP8 caching (free in step time) first, then activation offload of half and
    of all of each activation (the H100 system has a host link), then modules one by one:
    MLA's and the MoE ones only on models that have them; nothing on a shape that recomputes."""
    sp = plan_question("llama3_8b", 2, 8, 64, gpu="H100", gemm_precision="fp8")
    shape = Context(pp=2, tp=8, dp=1, microbatch_size=1, global_batch=64, seq_len=8192, gemm_precision="fp8",
                    zero=0)
    ladder = rescues(sp, shape)
    assert ladder[0].activation_precision is Precision.FP8 and not ladder[0].recompute_modules
    assert [r.offload_activations for r in ladder[1:3]] == [0.5, 1.0]
    assert [r.recompute_modules for r in ladder[3:]] == [("layernorm",), ("core_attn", "layernorm"),
                                                         ("core_attn", "layernorm", "mlp")]
    assert not any(r.offload_activations for r in ladder[3:])
    assert all(r.activation_precision is Precision.FP8 for r in ladder)
    with_dp = shape.replace(dp=2, zero=1)
    assert [r.zero for r in rescues(sp, with_dp)][:3] == [2, 1, 2]
    assert rescues(sp, shape.replace(recompute="full")) == []


def test_meta_s_405b_fits_without_recompute_as_it_ran():
    """Llama 3 405B pinned to Meta's PP16 TP8 DP128 (16,384 H100, 2,048 sequences of
    8,192): ZeRO-1 does not fit, ZeRO-2 (Meta's sharding of optimizer state and gradients)
    does, with no recomputation (Dubey et al. 2024, section 3.3.2)."""
    sp = plan_question("llama3_405b", 2048, 8, 2048, gpu="H100", pp=(16,), tp=(8,), dp=(128,), cpsat_shapes=0,
                       refine=False, top=3, recompute=("none",))
    best = plan(sp).configurations[0]
    assert best.fits and best.techniques == ("ZeRO-2",) and best.shape.recompute is Recompute.NONE
    assert registry.spec(best.schedule)  # a registry schedule
