"""``plan`` offloads activations where a shape fits only so: the row names the technique,
the same schedule without it does not fit, its simulated step decides against recomputation
(over PCIe, recomputing the norms costs less here), and ``--emit megatron`` writes Megatron-LM's
fine-grained activation offloading flags for it."""

from __future__ import annotations

import pytest

from pipetab.plan import plan, plan_question
from pipetab.plan.emit.megatron import megatron_text, read_megatron
from pipetab.plan.emit.notes import Notes
from pipetab.solver.offload import simulated
from pipetab.solver.pricing import hardware_costs


def _question(**kw):
    """Llama 3 70B on four 8xH100 nodes pinned to PP4 TP8 DP1, 64 sequences of 8,192 tokens in
    microbatches of 2, no recomputation: 1F1B's first stage holds four microbatches, 80 GiB."""
    return plan_question("llama3_70b", 4, 8, 64, gpu="H100", pp=(4,), tp=(8,), dp=(1,), recompute=("none",),
                         microbatch_sizes=(2,), schedules=("1f1b",), cpsat_shapes=0, refine=False, top=5, **kw)


@pytest.fixture(scope="module")
def offloaded():
    sp = _question()
    return sp, plan(sp)


def _offloading(result):
    return next(c for c in result.configurations if c.shape.offload_activations)


def test_the_row_names_offload_and_needs_it(offloaded):
    """A configuration offloads half of each activation over PCIe: it fits, its simulated
    peak is the one ranked, the same schedule without offload does not fit, and it ranks
    after recomputing the layer norms (the rung beside it), which the copies' exposure makes
    faster here."""
    sp, result = offloaded
    best = _offloading(result)
    assert best.fits and best.techniques == ("offload=0.5",) and best.recompute_label == "offload=0.5"
    first = result.configurations[0]
    assert first.techniques == ("recompute=layernorm",) and first.step_time_s < best.step_time_s
    sched = best.full_schedule()
    costs = hardware_costs(sched, sp.system, sp.model, best.shape)
    sim = simulated(sched, costs)
    assert all(sim.fits_memory)
    assert max(a + p for a, p in zip(sim.peak_activation, costs.persistent)) == pytest.approx(
        best.peak_memory_bytes, rel=1e-9)
    plain = hardware_costs(sched, sp.system, sp.model, best.shape.replace(offload_activations=0.0))
    assert not all(simulated(sched, plain).fits_memory)
    assert sim.makespan > simulated(sched, plain).makespan  # the copies PCIe cannot hide
    assert best.as_dict()["offload_activations"] == 0.5


def test_pinned_to_zero_plan_does_not_offload():
    """``--offload-activations 0`` pins it off: no row offloads, recompute modules rescue."""
    result = plan(_question(offload_activations=0.0))
    assert not any(c.shape.offload_activations for c in result.evaluated)
    assert result.configurations[0].fits and result.configurations[0].shape.recompute_modules


def test_emit_megatron_writes_the_offload_flags(offloaded):
    """Megatron's flags for fine-grained activation offloading (Megatron-LM d98e8a64
    ``TransformerConfig``: ``fine_grained_activation_offloading``, ``offload_modules``,
    ``activation_offload_fraction``): every module of a dense layer it can offload, and a
    DIFFERS line, since their inputs hold less than half of a Llama layer's saved bytes (its
    MLP's intermediates are none of them); read back, offloading is on as planned."""
    sp, result = offloaded
    best = _offloading(result)
    notes = Notes()
    text = megatron_text(best, sp.model, sp.num_gpus, notes)
    assert "--fine-grained-activation-offloading" in text
    assert "--offload-modules attn_norm qkv_linear core_attn attn_proj mlp_norm \\" in text
    assert "--activation-offload-fraction 1" in text and "expert_fc1" not in text
    assert any("--offload-modules hold" in n and "offloads less" in n for n in notes.differs)
    assert read_megatron(text, sp.num_gpus)["activation_offloading"] is True
