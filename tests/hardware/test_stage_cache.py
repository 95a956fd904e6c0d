"""``stage_cost``'s shared part (``_stage_core``) is keyed by the context fields it reads
(``STAGE_READS``): contexts that differ only in a field it does not read share one entry,
and computing each afresh gives the same values; contexts that differ in a read field do not
share one. ``plan`` opens hundreds of shapes that differ in dp, ZeRO and the global batch
alone (issue 43 item 1)."""

from __future__ import annotations

import dataclasses
from typing import cast

import pytest

from pipetab.hardware import Context, costs, load_model, load_system
from pipetab.hardware.costs import STAGE_READS, stage_cost
from pipetab.hardware.decisions import DECISIONS
from pipetab.hardware.links import fastest_links

MODEL = load_model("deepseek_v3")
SYSTEM = load_system("h800_ib")
BASE = Context(tp=2, dp=8, ep=8, zero=1, microbatch_size=1, global_batch=64, seq_len=4096)
# the fields a stage's shared part never reads (the replica and batch ones, and activation offload,
# which the simulator's copy streams move): each changed to its declaration's example
UNREAD = {d.name: cast("list", d.example)[0] if d.sweep_list else d.example
          for d in DECISIONS if d.name not in STAGE_READS}
# a second value of each read field (one that the model and BASE accept)
READ = {"tp": 4, "sequence_parallel": False, "microbatch_size": 2, "seq_len": 2048, "recompute": "full", "ep": 16,
        "etp": 2, "dispatch_precision": "fp8", "routing_imbalance": 1.5, "node_limit": 2, "gemm_precision": "fp8",
        "cp": 2, "cp_comm": "allgather", "layout": "Et*31|t*30mL", "recompute_layers": (1, 1),
        "recompute_modules": ("layernorm",), "activation_precision": "fp8"}


def _cost(ctx: Context, model=MODEL):
    links = fastest_links(SYSTEM, model, ctx, 2)
    return stage_cost(model, SYSTEM.device, ctx, 4, first=False, last=False, first_layer=8, links=links)


def _core_fields(cost) -> tuple:
    """What the shared part gives a ``StageCost`` (all but persistent bytes and ZeRO-3)."""
    return (cost.flops_forward, cost.flops_backward, cost.traffic_forward, cost.traffic_backward, cost.params,
            cost.expert_params, cost.activation_bytes, cost.weight_memory_bytes, cost.fwd_message_bytes,
            cost.tp_comm_forward_s, cost.ep_comm_forward_s, cost.ep_comm_backward_s, cost.forward_s,
            cost.backward_s, cost.chains)


def test_every_context_field_is_classified():
    """Each field is read by a stage's costs or checked unread below (a declaration's example);
    the replica and batch fields are among the unread ones."""
    assert set(STAGE_READS) | set(UNREAD) == {f.name for f in dataclasses.fields(Context)}
    assert {"dp", "pp", "global_batch", "zero"} <= set(UNREAD)
    assert set(READ) == set(STAGE_READS)


@pytest.mark.parametrize("field", sorted(UNREAD))
def test_unread_field_shares_an_entry(field):
    other = BASE.replace(**{field: UNREAD[field]})
    costs._stage_core.cache_clear()
    costs._stage_cost.cache_clear()
    fresh_other = _core_fields(_cost(other))
    costs._stage_core.cache_clear()
    costs._stage_cost.cache_clear()
    fresh_base = _core_fields(_cost(BASE))
    assert fresh_other == fresh_base  # computed afresh from each context: the field changes nothing shared
    before = costs._stage_core.cache_info()
    costs._stage_cost.cache_clear()
    assert _core_fields(_cost(other)) == fresh_base
    after = costs._stage_core.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)


@pytest.mark.parametrize("field", sorted(READ))
def test_read_field_gets_its_own_entry(field):
    change = {field: READ[field]}
    if field in ("gemm_precision", "activation_precision"):  # fp8 caching needs fp8 GEMMs: both change
        change.update(gemm_precision="fp8", activation_precision="fp8" if field == "activation_precision" else "bf16")
    if field == "recompute_layers":
        change["pp"] = 2
    base, model = BASE, MODEL
    if field == "sequence_parallel":  # MoE layers at tp > 1 need it: a dense model turns it off
        base, model = Context(tp=2, dp=8, microbatch_size=1, global_batch=64, seq_len=4096), load_model("llama3_8b")
    other = base.replace(**change)
    costs._stage_core.cache_clear()
    costs._stage_cost.cache_clear()
    _cost(base, model)
    _cost(other, model)
    info = costs._stage_core.cache_info()
    assert (info.hits, info.misses) == (0, 2)


def test_persistent_bytes_stay_per_context():
    """dp and ZeRO change the stage's persistent bytes (and at ZeRO-3 its gathers and
    reductions, outside the shared entry) while the shared part is one entry."""
    costs._stage_core.cache_clear()
    costs._stage_cost.cache_clear()
    a, b = _cost(BASE.replace(zero=3)), _cost(BASE.replace(zero=3, dp=16))
    assert a.params == b.params and a.activation_bytes == b.activation_bytes
    assert a.persistent_bytes > b.persistent_bytes  # sharded over more replicas
    info = costs._stage_core.cache_info()
    assert (info.hits, info.misses) == (1, 1)


def test_links_given_twice_refused():
    links = fastest_links(SYSTEM, MODEL, BASE, 2)
    with pytest.raises(ValueError, match="either as links or one by one"):
        stage_cost(MODEL, SYSTEM.device, BASE, 4, first=False, last=False, links=links, tp_link=links.tp)
    with pytest.raises(ValueError, match="either as links or one by one"):
        stage_cost(MODEL, SYSTEM.device, BASE, 4, first=False, last=False, links=links, moe_comm=(1.0, 1.0))
