"""Collectives as NCCL runs them (hardware.collectives), worked by hand on 2 nodes x 4 GPUs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.costs_fingerprint import CASES, costs_of, fingerprint
from pipetab.hardware.collectives import (
    Fabric,
    algorithm_times,
    bucketed_exposed,
    buckets,
    collective_time,
    placement,
)
from pipetab.hardware.context import Context
from pipetab.hardware.loaders import load_system
from pipetab.hardware.parallel import Topology, ring_time
from pipetab.hardware.pipeline import schedule_costs
from pipetab.hardware.system import Link, System
from pipetab.schedules.generators.linear import one_f_one_b
from tests.hardware.units import MINI, UNIT

NVLINK, NIC = Link(bandwidth=100e9, latency_s=1e-6), Link(bandwidth=25e9, latency_s=5e-6)
EIGHT = list(range(8))  # both nodes of 4 GPUs, all of them


def _times(nbytes: float, nics: int, gpus=EIGHT, **kw) -> dict[str, float]:
    return algorithm_times(nbytes, placement(gpus, 4), Fabric(nics, **kw), NVLINK, NIC)


@pytest.mark.parametrize("nics, ring, tree, hier", [
    # ring: 2*7/8*800 MB over min(NVLink, the node's NICs shared by its 4 GPUs of the group) + 14 hops of 5 us
    (4, 2 * 7 / 8 * 8e8 / 100e9 + 14 * 5e-6, 2 * 8e8 / 100e9 + 2 * (5e-6 + 3e-6),
     # NVLink reduce-scatter and all-gather (3/4 * 800 MB each, 3 hops), then 200 MB shards ringed between
     # the 2 nodes, each GPU on its own 25 GB/s NIC
     2 * (0.75 * 8e8 / 100e9 + 3e-6) + (2e8 / 25e9 + 2 * 5e-6)),
    (1, 2 * 7 / 8 * 8e8 / 25e9 + 14 * 5e-6, 2 * 8e8 / 25e9 + 2 * (5e-6 + 3e-6),
     2 * (0.75 * 8e8 / 100e9 + 3e-6) + (2e8 / 6.25e9 + 2 * 5e-6)),  # one NIC for four GPUs: 6.25 GB/s each
])
def test_allreduce_2x4_by_hand(nics, ring, tree, hier):
    t = _times(8e8, nics)
    assert t["ring"] == pytest.approx(ring)
    assert t["tree"] == pytest.approx(tree)
    assert t["hierarchical"] == pytest.approx(hier)
    # 800 MB: the ring is NCCL's pick with a NIC per GPU (14.07 ms), hierarchical with one (44.0 ms)
    expected = ring if nics == 4 else hier
    assert collective_time(8e8, placement(EIGHT, 4), Fabric(nics), NVLINK, NIC) == pytest.approx(expected)
    assert min(t.values()) == pytest.approx(14.07e-3 if nics == 4 else 44.016e-3)


def test_tree_wins_small_messages():
    """8 KB: the ring's 14 latency hops (70 us) lose to the tree's log2(2) + 3 (16.2 us)."""
    t = _times(8e3, 4)
    assert t["tree"] == pytest.approx(2 * 8e3 / 100e9 + 2 * (5e-6 + 3e-6))
    assert t["ring"] == pytest.approx(2 * 7 / 8 * 8e3 / 100e9 + 14 * 5e-6)
    assert min(t, key=lambda k: t[k]) == "tree"


@pytest.mark.parametrize("nics, per_gpu", [(4, 25e9), (1, 6.25e9)])
def test_rail_aligned_group(nics, per_gpu):
    """GPU 1 of each node (a DP group of a TP-4 run): with a NIC per GPU it has its rail's
    25 GB/s; sharing one NIC among the node's four groups a quarter of it."""
    where = placement([1, 5], 4)
    assert (where.nodes, where.per_node) == (2, 1)
    t = algorithm_times(8e8, where, Fabric(nics), NVLINK, NIC)
    assert t["ring"] == pytest.approx(8e8 / per_gpu + 2 * 5e-6)


def test_reduce_scatter_2x4_by_hand():
    t = algorithm_times(8e8, placement(EIGHT, 4), Fabric(1), NVLINK, NIC, steps=1)
    assert set(t) == {"ring", "hierarchical"}  # NCCL has no tree reduce-scatter
    assert t["ring"] == pytest.approx(7 / 8 * 8e8 / 25e9 + 7 * 5e-6)
    assert t["hierarchical"] == pytest.approx((0.75 * 8e8 / 100e9 + 3e-6) + (0.5 * 2e8 / 6.25e9 + 5e-6))


def test_nvls_and_sharp():
    """NVLS reads each GPU's buffer once inside the node (n/g over NVLink); SHARP reduces
    the shard in the switch (each byte once over the rail)."""
    t = _times(8e8, 4, nvls=True, sharp=True)
    assert t["hierarchical"] == pytest.approx(2 * (2e8 / 100e9 + 2e-6) + (2e8 / 25e9 + 2 * 5e-6))


def test_one_node_is_nvlink_only():
    t = _times(8e8, 1, gpus=[0, 1, 2, 3])
    assert t["ring"] == pytest.approx(2 * 0.75 * 8e8 / 100e9 + 6 * 1e-6)
    assert collective_time(1.0, placement([3], 4), Fabric(1), NVLINK, NIC) == 0.0


def _simulated_exposed(total: float, window: float, k: int) -> float:
    """Bucket i is ready at i*W/k; each runs T/k after it is ready and the previous ended."""
    end = 0.0
    for i in range(1, k + 1):
        end = max(end, i * window / k) + total / k
    return end - window


@pytest.mark.parametrize("total, window, k, expected", [
    (1.0, 2.0, 4, 0.25),  # the reduction hides but for the last bucket
    (3.0, 2.0, 4, 1.5),  # longer than the backward: 3 - 2 * 3/4
    (3.0, 2.0, 1, 3.0),  # one bucket starts after the backward
])
def test_bucketed_exposed_by_hand(total, window, k, expected):
    assert bucketed_exposed(total, window, k) == pytest.approx(expected)
    assert _simulated_exposed(total, window, k) == pytest.approx(expected)


def test_megatron_buckets():
    assert buckets(100_000_000, 8) == 3  # 40M-parameter buckets
    assert buckets(100_000_000, 64) == 2  # max(40M, 1M * 64) = 64M
    assert buckets(10, 8) == 1


def test_without_fabric_the_old_ring():
    system = System.nodes("n", UNIT, 4, NVLINK, NIC)
    topo = Topology(system, Context(tp=1, dp=8, sequence_parallel=False, zero=0), 1)
    assert topo.collective(EIGHT, 8e8) == ring_time(8e8, 8, topo.ring_link(EIGHT))
    assert topo.dp_collective(8e8) == ring_time(8e8, 8, topo.dp_link(0))


FAST, SLOW = Link(bandwidth=1e3, latency_s=1e-3), Link(bandwidth=1e2, latency_s=1e-2)


@pytest.mark.parametrize("nics, per_gpu", [(2, 1e2), (1, 50.0)])
@pytest.mark.parametrize("overlap", [False, True])
def test_data_parallel_tail_with_fabric(nics, per_gpu, overlap):
    """tests/hardware/test_hw_parallel.py's hand-worked tail on nodes of 2 GPUs with a
    fabric: GPU 0's DP partner is GPU 2 on the other node; a NIC per GPU gives today's
    ring, one NIC per node half of it. 984 parameters are one Megatron bucket, which
    starts when the backward has ended: all exposed, with overlap or without."""
    pairs = replace(System.nodes("pairs", UNIT, 2, FAST, SLOW), fabric=Fabric(nics))
    par = Context(tp=2, dp=2, microbatch_size=None, sequence_parallel=False, zero=0, overlap=overlap)
    sc = schedule_costs(one_f_one_b(2, 1), pairs, replace(MINI, global_batch=8), par)
    grads = 2 * (2 * 460 + 8 * 8)
    assert sc.dp_sync_s[0] == pytest.approx(2 * 0.5 * grads / per_gpu + 2 * 1e-2)


def test_fabric_validation():
    with pytest.raises(ValueError, match="nics_per_node must be an integer >= 1, got 0"):
        Fabric(0)
    with pytest.raises(ValueError, match="fabric needs devices_per_node"):
        System.uniform("u", UNIT, NIC).__class__("u", UNIT, NIC, fabric=Fabric(1))


def test_fabric_from_toml(tmp_path):
    import re

    from pipetab.hardware.loaders import _resolve, system_from_file

    assert load_system("a100_cluster").fabric == Fabric(8)  # the preset's, with its sources
    text = re.sub(r"^\[fabric\].*?(?=^\[|\Z)", "", _resolve("system", "a100_cluster").read_text(),
                  flags=re.MULTILINE | re.DOTALL)  # the preset less its [fabric] table
    good = tmp_path / "railed.toml"
    good.write_text(text + "\n[fabric]\nnics_per_node = 8\nsharp = true\n")
    assert system_from_file(good).fabric == Fabric(8, sharp=True)
    bad = tmp_path / "bad.toml"
    bad.write_text(text + "\n[fabric]\nnics_per_node = 8\nrails = 8\n")
    with pytest.raises(ValueError, match=r"unknown key 'fabric\.rails'"):
        system_from_file(bad)


BEFORE_FABRIC = json.loads((Path(__file__).parent.parent / "data" / "costs_baseline_before_fabric.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_without_fabric_the_costs_of_before_exactly(case):
    """The regression configurations on their presets less the [fabric] table (and with
    dgx_h100_ib's run overhead as fitted before it, 0.276; a100_cluster had none) cost
    exactly what they cost before the fabric existed (tests/data/costs_baseline_before_fabric.json,
    made by experiments/costs_fingerprint.py at commit 9241c55)."""
    base = load_system(case[5])
    device = replace(base.device, run_overhead={"dgx_h100_ib": 0.276}.get(case[5], 0.0))
    old = replace(base, fabric=None, device=device)
    assert fingerprint(costs_of((*case[:5], old, *case[6:]))) == BEFORE_FABRIC[case[0]]


def test_fsdp_gathers_one_per_unit_on_a_fabric():
    """ZeRO-3 over 4 replicas, one GPU on each of 4 nodes of 4 with a NIC per GPU: the
    stage's 1872 parameters (3744 B) gathered in 3 units of 1248 B, each a ring of 4 on
    its own rail (25 GB/s, 5 us a hop): 3 x (3/4 x 1248 / 25e9 + 3 x 5e-6)."""
    from pipetab.hardware.collectives import FabricGroup
    from pipetab.hardware.zero3 import op_collectives

    group = FabricGroup(placement([0, 4, 8, 12], 4), Fabric(4), NVLINK, NIC)
    ctx = Context(dp=4, zero=3, microbatch_size=1)
    ag, rs = op_collectives(MINI, ctx, 1872, 0, (group, None), units=3)
    one = 0.75 * 1248 / 25e9 + 3 * 5e-6
    assert ag == pytest.approx(3 * one) and rs == pytest.approx(3 * one)
    assert op_collectives(MINI, ctx, 1872, 0, (NIC, None), units=3)[0] == pytest.approx(0.75 * 3744 / 25e9 + 3 * 5e-6)
