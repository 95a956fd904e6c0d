"""Collectives as NCCL runs them across nodes (issue 41 item 3).

Without a ``Fabric`` on the system every collective is one ring at its slowest hop, each
GPU on its own link (``hardware.parallel.ring_time``, the model of the paper). A ``Fabric``
says how the nodes are wired: ``nics_per_node`` network interfaces (one per GPU on a
rail-optimised DGX-style node), NVLink SHARP in the node's NVSwitch (``nvls``) and
in-network reduction in the InfiniBand switches (``sharp``). Then a group of ``R`` GPUs
spread as ``g`` GPUs on each of ``N`` nodes of ``P`` GPUs is priced with

* the node's network share: every GPU of a node reduces at once (all tensor ranks reduce
  their gradients together), so the ``P/g`` groups on a node share its ``nics`` interfaces
  and one group gets ``nics*B_net*g/P`` of network bandwidth (a rail-aligned group, ``g = 1``
  with one NIC per GPU, uses its own NIC: ``B_net``);
* **ring** (one ring through all ``R`` GPUs, crossing each node boundary once per channel):
  ``steps*(R-1)/R * n / min(B_nvlink, share) + steps*(R-1)*L_slowest``;
* **tree** (all-reduce only; NCCL's chain inside a node and double binary tree between
  nodes): each node sends and receives the whole buffer once going up and once coming
  down, ``2 * n / min(B_nvlink, share) + 2*(ceil(log2 N)*L_net + (g-1)*L_nvlink)``;
* **hierarchical**: reduce-scatter inside the node over NVLink (``(g-1)/g * n / B_nvlink``,
  or with NVLS the switch reduces: ``n/g / B_nvlink`` — NVLS reads each GPU's buffer once),
  then the ``g`` shards reduced between the nodes concurrently, each GPU over
  ``nics*B_net/P`` (a ring of ``N``, or with SHARP the switch reduces: each byte crosses the
  rail once each way, ``n/g / share``, all-reduce only), then for an all-reduce the all-gather inside the
  node again;

and NCCL's tuner takes the fastest algorithm it has for the size (``collective_time``):
ring and tree for an all-reduce, ring for a reduce-scatter or all-gather, each also
hierarchical. Bandwidths are per direction; latencies the links' per-step ones. The
algorithm descriptions follow NCCL's documentation and its tuning model
(``src/graph/tuning.cc``: ring bus bandwidth ratio ``2(R-1)/R``, tree ratio 1/2 of the
algorithm bandwidth); no NCCL constant is copied.

Bucketed reductions overlapped with the backward (``bucketed_exposed``): Megatron's
``--overlap-grad-reduce`` splits the gradients into buckets of ``bucket_params``
parameters (Megatron-core ``DistributedDataParallelConfig.bucket_size``, default
``max(40e6, 1e6 * dp)``) and launches each bucket's reduction as soon as the last
microbatch's backward has produced it; FSDP reduces one wrapped unit (a layer) at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

from pipetab.schedules.checks import check_count


class Link(Protocol):
    """What a collective needs of a ``hardware.system.Link`` (which imports this module)."""

    @property
    def bandwidth(self) -> float: ...

    @property
    def latency_s(self) -> float: ...

MEGATRON_BUCKET_PARAMS = 40_000_000
"""Megatron-core's default DDP bucket: ``max(40e6, 1e6 * dp_size)`` parameters."""


@dataclass(frozen=True)
class Fabric:
    """How a system's nodes are wired (module docstring): ``nics_per_node`` network
    interfaces of the system's ``default_link`` each; ``nvls`` NVLink SHARP inside a node;
    ``sharp`` in-network reduction between nodes."""

    nics_per_node: int
    nvls: bool = False
    sharp: bool = False

    def __post_init__(self) -> None:
        check_count("nics_per_node", self.nics_per_node)
        for name in ("nvls", "sharp"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"fabric {name} must be true or false, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Placement:
    """A group of ``nodes x per_node`` GPUs on nodes of ``node_size`` GPUs."""

    nodes: int
    per_node: int
    node_size: int

    @property
    def members(self) -> int:
        return self.nodes * self.per_node


def placement(gpus: Sequence[int], node_size: int) -> Placement:
    """Where ``gpus`` sit: the number of nodes and the most GPUs on one of them."""
    counts: dict[int, int] = {}
    for g in set(gpus):
        counts[g // node_size] = counts.get(g // node_size, 0) + 1
    return Placement(len(counts), max(counts.values()), node_size)


def _share(fabric: Fabric, net: Link, where: Placement) -> float:
    """Network bandwidth of one group: the node's NICs shared by its ``P/g`` groups."""
    return fabric.nics_per_node * net.bandwidth * where.per_node / where.node_size


def _path(where: Placement, fabric: Fabric, nvlink: Link, net: Link) -> tuple[float, float]:
    """(bandwidth, slowest hop latency) of a path through the group: NVLink inside a node,
    the group's network share between nodes."""
    if where.nodes == 1:
        return nvlink.bandwidth, nvlink.latency_s
    share = _share(fabric, net, where)
    if where.per_node == 1:
        return share, net.latency_s
    return min(share, nvlink.bandwidth), max(net.latency_s, nvlink.latency_s)


def ring(nbytes: float, where: Placement, fabric: Fabric, nvlink: Link, net: Link, steps: int) -> float:
    """One ring through the group (module docstring)."""
    r = where.members
    if r < 2:
        return 0.0
    bw, lat = _path(where, fabric, nvlink, net)
    return steps * (r - 1) / r * nbytes / bw + steps * (r - 1) * lat


def tree(nbytes: float, where: Placement, fabric: Fabric, nvlink: Link, net: Link) -> float:
    """A tree all-reduce (module docstring); inside one node NCCL's tree is a chain."""
    if where.members < 2:
        return 0.0
    bw = _path(where, fabric, nvlink, net)[0]
    hops = math.ceil(math.log2(where.nodes)) * net.latency_s + (where.per_node - 1) * nvlink.latency_s
    return 2 * nbytes / bw + 2 * hops


def _intra(nbytes: float, where: Placement, fabric: Fabric, nvlink: Link) -> float:
    """One reduce-scatter (or all-gather) of ``nbytes`` inside a node."""
    g = where.per_node
    if g < 2:
        return 0.0
    if fabric.nvls:
        return nbytes / g / nvlink.bandwidth + 2 * nvlink.latency_s
    return (g - 1) / g * nbytes / nvlink.bandwidth + (g - 1) * nvlink.latency_s


def hierarchical(nbytes: float, where: Placement, fabric: Fabric, nvlink: Link, net: Link, steps: int) -> float:
    """Reduce-scatter inside each node, the shards reduced between the nodes, and (for an
    all-reduce, ``steps == 2``) the all-gather inside each node."""
    shard = nbytes / where.per_node
    per_gpu = fabric.nics_per_node * net.bandwidth / where.node_size
    n = where.nodes
    if n < 2:
        between = 0.0
    elif fabric.sharp and steps == 2:  # each byte crosses the rail once each way, reduced in the switch
        between = shard / per_gpu + 2 * net.latency_s
    else:
        between = steps * (n - 1) / n * shard / per_gpu + steps * (n - 1) * net.latency_s
    return _intra(nbytes, where, fabric, nvlink) * (2 if steps == 2 else 1) + between


def algorithm_times(nbytes: float, where: Placement, fabric: Fabric, nvlink: Link, net: Link,
                    steps: int = 2) -> dict[str, float]:
    """Seconds of each algorithm NCCL has for the collective (``steps`` 2: all-reduce; 1:
    reduce-scatter or all-gather)."""
    if nbytes < 0:
        raise ValueError(f"collective size must be >= 0 bytes, got {nbytes!r}")
    times = {"ring": ring(nbytes, where, fabric, nvlink, net, steps),
             "hierarchical": hierarchical(nbytes, where, fabric, nvlink, net, steps)}
    if steps == 2:
        times["tree"] = tree(nbytes, where, fabric, nvlink, net)
    return times


def collective_time(nbytes: float, where: Placement, fabric: Fabric, nvlink: Link, net: Link,
                    steps: int = 2) -> float:
    """The fastest of ``algorithm_times`` (NCCL's tuner's choice by size); 0 for one GPU."""
    if where.members < 2:
        return 0.0
    return min(algorithm_times(nbytes, where, fabric, nvlink, net, steps).values())


def buckets(params: int, dp: int, bucket_params: int | None = None) -> int:
    """How many buckets Megatron's DDP splits ``params`` gradients into."""
    size = bucket_params if bucket_params is not None else max(MEGATRON_BUCKET_PARAMS, 1_000_000 * dp)
    return max(1, math.ceil(params / size))


def bucketed_exposed(total: float, window: float, count: int) -> float:
    """What stays exposed of a reduction of ``total`` seconds in ``count`` equal buckets,
    the backward producing them evenly over ``window`` seconds and each bucket starting
    when it is ready and the previous one has finished: bucket ``i`` (1..k) is ready at
    ``i*W/k``, the last ends at ``max_i(i*W/k + (k-i+1)*T/k)``, linear in ``i``, so the
    exposed remainder is ``max(T/k, T - W*(k-1)/k)``."""
    k = max(count, 1)
    return max(total / k, total - window * (k - 1) / k)


def sm_shared_exposed(total: float, window: float, count: int, share: float) -> float:
    """``bucketed_exposed`` with the collective's kernels holding ``share`` of the SMs while
    they run (``Device.collective_sms / sm_count``): the compute they overlap runs at ``1 -
    share`` meanwhile, so a window doing ``W`` seconds of full-speed work beside ``T_ov``
    seconds of overlapped reduction lasts ``W + share * T_ov``; that stretch adds to what
    stays exposed, ``share * (T - exposed)`` (the buckets' readiness is kept as at full
    speed). ``share`` 0: ``bucketed_exposed``."""
    if not 0 <= share < 1:
        raise ValueError(f"the collective's share of the SMs must be in [0, 1), got {share!r}")
    bare = bucketed_exposed(total, window, count)
    return bare + share * (total - bare)


@dataclass(frozen=True)
class FabricGroup:
    """A group's collectives on a ``Fabric`` (what ``Topology.fabric_group`` finds), small
    and hashable so stage costs can be cached by it."""

    where: Placement
    fabric: Fabric
    nvlink: Link
    net: Link

    def time(self, nbytes: float, steps: int = 2, pieces: int = 1) -> float:
        """``pieces`` collectives of ``nbytes / pieces`` each (one per FSDP unit or bucket)."""
        k = max(pieces, 1)
        return k * collective_time(nbytes / k, self.where, self.fabric, self.nvlink, self.net, steps)
