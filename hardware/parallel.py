"""Which GPUs and links a pipeline device's collectives and messages use.

GPUs are numbered as Megatron-LM numbers its ranks (order tensor, context, data, pipeline):
the GPU of tensor rank ``i``, context rank ``k``, data rank ``j`` and pipeline rank ``r`` is
``i + tp*(k + cp*(j + dp*r))``. A cluster of nodes fills GPU 0, 1, ... node by node, so a
tensor-parallel group of at most ``gpus_per_node`` GPUs sits inside one node (NVLink),
context-parallel ranks come next, then data-parallel replicas; pipeline stages are the
outermost, usually across nodes — which link each message uses follows from this
numbering and ``System.link`` (intra-node vs inter-node).

Communication (all ring algorithms, each GPU on its own link; a ring runs at its slowest
hop, ``hardware.costs.allreduce_time``):

* tensor parallelism: two all-reduces of a layer's output (``c*b*s*h`` bytes) per layer
  in the forward and two in the backward (in B when the backward is split; W has none);
  with sequence parallelism reduce-scatters and all-gathers of the same volume instead
  (Korthikanti et al. 2022), which divides the replicated activations by ``tp``. The
  vocabulary-parallel embedding adds one all-reduce to the first stage's forward, the
  LM head one to the last stage's backward. They are not overlapped with compute.
* pipeline messages: each GPU of a device sends its ``1/(tp cp)`` share to its counterpart
  in the next device, in parallel; without sequence parallelism the receivers then
  all-gather their context rank's ``1/cp`` inside their tensor group (Megatron's
  scatter-gather). Both are one Hockney link per pair of pipeline devices (``pipeline_link``).
* context parallelism: keys and values travel among the ``cp`` ranks of a device
  (``hardware.cp``, over ``cp_link``).
* data parallelism: after a device's last backward its gradients (``bytes_per_grad``
  per parameter it holds) are all-reduced among its ``dp x cp`` replicas (the GPUs holding
  the same weights: context ranks hold the same layers); with ZeRO
  (``zero >= 1``, Megatron's distributed optimizer) reduce-scattered, and after the
  optimizer step the updated weights all-gathered. With ``overlap`` the reduction runs
  during the device's last backward op and the gather during the next step's first
  forward; at least the share of one layer stays exposed.

On a system with a ``Fabric`` (NICs per node, NVLS, SHARP) the data-parallel and ZeRO-3
collectives are priced as NCCL runs them instead (``hardware.collectives``: ring, tree or
hierarchical, whichever is fastest for the size, on the node's shared NICs;
``Topology.collective``, ``fabric_group``), the DP reduction in Megatron's buckets overlapped
with the last backward (``hardware.pipeline``). Without one, every number is as above.

Memory per GPU (``Context.persistent_bytes``): weights ``bytes_per_param_compute`` per
parameter it holds (``/(dp cp)`` with ZeRO-3); gradients ``bytes_per_grad`` (``/(dp cp)``
from ZeRO-2); optimizer state the rest of ``bytes_per_param_state`` (``/(dp cp)`` from ZeRO-1).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.checks import check_count

from .collectives import FabricGroup, placement
from .system import Link, System

if TYPE_CHECKING:
    from .context import Context


@dataclass(frozen=True)
class Topology:
    """``pp`` pipeline devices of ``context.tp x context.cp`` GPUs each, replicated
    ``context.dp`` ways, on the GPUs of ``system`` (numbered as in the module docstring)."""

    system: System
    context: Context
    pp: int

    def __post_init__(self) -> None:
        check_count("pp", self.pp)
        self.system.check_devices(self.num_gpus)

    @property
    def num_gpus(self) -> int:
        return self.context.tp * self.context.cp * self.context.dp * self.pp

    def gpu(self, tp_rank: int, dp_rank: int, pp_rank: int, cp_rank: int = 0) -> int:
        """Global GPU index of a (tensor, data, pipeline, context) rank tuple."""
        t, c, d = self.context.tp, self.context.cp, self.context.dp
        return tp_rank + t * (cp_rank + c * (dp_rank + d * pp_rank))

    def tp_group(self, pp_rank: int, dp_rank: int = 0, cp_rank: int = 0) -> list[int]:
        return [self.gpu(i, dp_rank, pp_rank, cp_rank) for i in range(self.context.tp)]

    def cp_group(self, pp_rank: int, tp_rank: int = 0, dp_rank: int = 0) -> list[int]:
        return [self.gpu(tp_rank, dp_rank, pp_rank, k) for k in range(self.context.cp)]

    def dp_group(self, pp_rank: int, tp_rank: int = 0) -> list[int]:
        """The ``dp x cp`` GPUs holding the same weights as ``tp_rank`` of ``pp_rank``."""
        c = self.context
        return [self.gpu(tp_rank, j, pp_rank, k) for j in range(c.dp) for k in range(c.cp)]

    def members(self) -> list[tuple[int, int]]:
        """Every (data rank, context rank) of a pipeline device."""
        return [(j, k) for j in range(self.context.dp) for k in range(self.context.cp)]

    @cached_property
    def period(self) -> int | None:
        """``P`` when the link of two GPUs depends only on whether they share a node of
        ``P`` GPUs (a cluster without pair overrides; 1 when every link is the same):
        groups shifted by a multiple of ``P`` then use the same links, so each link below
        is found from one group per residue. None: every group is looked at."""
        if self.system.links:
            return None
        return self.system.devices_per_node or 1

    def _link_kinds(self, same: bool, other: bool) -> Link | None:
        """The slowest of the intra-node link (``same``) and the inter-node one (``other``)."""
        kinds = ([self.system.intra_node_link or self.system.default_link] if same else []) + (
            [self.system.default_link] if other else [])
        return _slowest(kinds)

    def ring_link(self, gpus: list[int]) -> Link | None:
        """The slowest hop of a ring over ``gpus`` (None for a single GPU)."""
        ring = sorted(set(gpus))
        if len(ring) < 2:
            return None
        if self.period is not None:
            self.system.check_devices(ring[-1] + 1)
            nodes = [g // self.period for g in ring]
            one_node = nodes[0] == nodes[-1]
            return self._link_kinds(one_node or any(a == b for a, b in itertools.pairwise(nodes)), not one_node)
        hops = [self.system.link(a, b) for a, b in zip(ring, ring[1:] + ring[:1]) if a != b]
        return Link(min(h.bandwidth for h in hops), max(h.latency_s for h in hops))

    def groups_link(self, bases: list[int], offsets: list[int]) -> Link | None:
        """The slowest ring link over the groups ``{b + o for o in offsets}``, one group per
        residue of its base modulo ``period`` (all of them without a period)."""
        seen: dict[int, Link | None] = {}
        for b in bases:
            key = b if self.period is None else b % self.period
            if key not in seen:
                seen[key] = self.ring_link([b + o for o in offsets])
        return _slowest(list(seen.values()))

    def group_link(self, kind: str, pp_rank: int) -> Link | None:
        """The slowest ring link of the ``kind`` (tp, cp, dp) groups of device ``pp_rank``."""
        c, gpu = self.context, self.gpu
        if kind == "tp":
            return self.groups_link([gpu(0, j, pp_rank, k) for j, k in self.members()], list(range(c.tp)))
        if kind == "cp":
            return self.groups_link([gpu(i, j, pp_rank) for i in range(c.tp) for j in range(c.dp)],
                                    [c.tp * k for k in range(c.cp)])
        return self.groups_link([gpu(i, 0, pp_rank) for i in range(c.tp)],
                                [c.tp * (k + c.cp * j) for j, k in self.members()])

    def _device_link(self, kind: str, pp_rank: int) -> Link | None:
        """``kind``'s link of pipeline device ``pp_rank``: with a period, the same for
        every device whose first GPU has the same residue modulo it (kept per cluster)."""
        c = self.context
        if self.period is None:
            return self.group_link(kind, pp_rank)
        key = (self.system, c.tp, c.cp, c.dp, kind, c.tp * c.cp * c.dp * pp_rank % self.period)
        if key not in _CLUSTER_LINKS:
            if len(_CLUSTER_LINKS) > 4096:
                _CLUSTER_LINKS.clear()
            _CLUSTER_LINKS[key] = self.group_link(kind, pp_rank)
        return _CLUSTER_LINKS[key]

    def tp_link(self, pp_rank: int = 0) -> Link | None:
        """The ring link of pipeline device ``pp_rank``'s tensor-parallel group (the
        slowest over its data- and context-parallel replicas)."""
        return self._device_link("tp", pp_rank)

    def cp_link(self, pp_rank: int = 0) -> Link | None:
        """The ring link of pipeline device ``pp_rank``'s context-parallel groups (the
        slowest over its tensor ranks and replicas)."""
        return None if self.context.cp == 1 else self._device_link("cp", pp_rank)

    def dp_link(self, pp_rank: int = 0) -> Link | None:
        """The ring link of pipeline device ``pp_rank``'s data-parallel groups (the ``dp
        x cp`` GPUs holding the same weights)."""
        return self._device_link("dp", pp_rank)

    def _pair_links(self, a: int, b: int) -> list[Link]:
        """The links of the GPU pairs (one per rank of a device) of pipeline devices ``a``
        and ``b``: with a period, from the residues of device ``a``'s GPUs."""
        c = self.context
        if self.period is None:
            return [self.system.link(self.gpu(i, j, a, k), self.gpu(i, j, b, k))
                    for i in range(c.tp) for j, k in self.members()]
        size, period = c.tp * c.cp * c.dp, self.period
        self.system.check_devices(size * (max(a, b) + 1))
        shift = size * abs(b - a)
        residues = range(period) if size >= period else {(size * min(a, b) + i) % period for i in range(size)}
        same = any(r + shift < period for r in residues)
        other = any(r + shift >= period for r in residues)
        return [link for link in (self._link_kinds(same, False), self._link_kinds(False, other)) if link]

    def pipeline_link(self, a: int, b: int) -> Link:
        """One Hockney link for a message of a whole activation between pipeline devices
        ``a`` and ``b``: each of the ``tp x cp`` GPU pairs carries ``1/(tp cp)`` of it in
        parallel over the slowest of their links; without sequence parallelism each
        receiving tensor group then all-gathers its ``1/cp`` (module docstring). A pair inside
        a node sends at ``p2p_efficiency`` of the intra-node link."""
        t, c = self.context.tp, self.context.cp
        intra, share = self.system.intra_node_link, self.system.device.p2p_efficiency
        # NCCL's send/receive reaches only a share of NVLink (Device.p2p_efficiency)
        pairs = [Link(p.bandwidth * share, p.latency_s) if p == intra else p for p in self._pair_links(a, b)]
        slow = Link(min(p.bandwidth for p in pairs), max(p.latency_s for p in pairs))
        inverse_bw, latency = 1 / (t * c * slow.bandwidth), slow.latency_s
        if t > 1 and not self.context.sequence_parallel:
            gather = _slowest([self.tp_link(a), self.tp_link(b)])
            if gather is not None:  # always: a tensor group of t > 1 GPUs has a link
                inverse_bw += (t - 1) / (t * c * gather.bandwidth)
                latency += (t - 1) * gather.latency_s
        return Link(1 / inverse_bw, latency)

    def collective(self, gpus: list[int], nbytes: float, steps: int = 2) -> float:
        """Seconds of a collective of ``nbytes`` per GPU among ``gpus`` (``steps`` 2: all-reduce;
        1: reduce-scatter or all-gather): as NCCL runs it on the system's ``fabric``
        (``hardware.collectives``), or without one a ring at its slowest hop."""
        group = self.fabric_group(gpus)
        if isinstance(group, FabricGroup):
            return group.time(nbytes, steps)
        return ring_time(nbytes, len(set(gpus)), group, steps)  # group None: one GPU, 0 s

    def fabric_group(self, gpus: list[int]) -> FabricGroup | Link | None:
        """What ``gpus``' collectives run over: a ``FabricGroup`` on a system with a fabric,
        else the ring link (None for one GPU)."""
        fabric, intra, node = self.system.fabric, self.system.intra_node_link, self.system.devices_per_node
        if fabric is None or intra is None or node is None:
            return self.ring_link(gpus)
        if len(set(gpus)) < 2:
            return None
        self.system.check_devices(max(gpus) + 1)
        return FabricGroup(placement(gpus, node), fabric, intra, self.system.default_link)

    def dp_groups(self, pp_rank: int = 0) -> tuple[FabricGroup | Link | None, ...]:
        """``fabric_group`` of each of device ``pp_rank``'s data-parallel groups (one per
        tensor rank); with a period the same for every device whose first GPU has the same
        residue modulo it (a group's ``placement`` and ring link do not change when it moves
        by whole nodes), so kept per cluster like the links."""
        c = self.context
        if self.period is None:
            return tuple(self.fabric_group(self.dp_group(pp_rank, i)) for i in range(c.tp))
        key = (self.system, c.tp, c.cp, c.dp, c.tp * c.cp * c.dp * pp_rank % self.period)
        if key not in _CLUSTER_GROUPS:
            if len(_CLUSTER_GROUPS) > 4096:
                _CLUSTER_GROUPS.clear()
            _CLUSTER_GROUPS[key] = tuple(self.fabric_group(self.dp_group(pp_rank, i)) for i in range(c.tp))
        return _CLUSTER_GROUPS[key]

    def dp_collective(self, nbytes: float, pp_rank: int = 0, steps: int = 2) -> float:
        """The slowest over tensor ranks of ``collective`` on device ``pp_rank``'s
        data-parallel groups (the ``dp x cp`` GPUs holding the same weights)."""
        members = self.context.dp * self.context.cp
        return max(g.time(nbytes, steps) if isinstance(g, FabricGroup) else ring_time(nbytes, members, g, steps)
                   for g in self.dp_groups(pp_rank))

    @cached_property
    def pipeline_system(self) -> System:
        """The ``pp`` pipeline devices as a ``System`` whose links are ``pipeline_link``
        (its device is the cluster's GPU: op costs are per GPU)."""
        c = self.context
        if c.tp == 1 and c.dp == 1 and c.cp == 1 and self.system.device.p2p_efficiency == 1.0:
            return self.system  # GPU r is pipeline device r, messages at the links' rates
        return _pipeline_system(self.system, c.tp, c.dp, bool(c.sequence_parallel), self.pp, c.parallel_label,
                                c.cp)


@lru_cache(maxsize=256)
def _pipeline_system(system: System, tp: int, dp: int, sequence_parallel: bool, pp: int, label: str,
                     cp: int = 1) -> System:
    """``Topology.pipeline_system``, shared by every schedule of the same split (plan
    prices thousands)."""
    from .context import Context

    topo = Topology(system, Context(tp=tp, dp=dp, cp=cp, sequence_parallel=sequence_parallel), pp)
    links = {(a, b): topo.pipeline_link(a, b) for a in range(pp) for b in range(a + 1, pp)}
    default = links[(0, 1)] if pp > 1 else system.default_link
    return System(f"{system.name} ({label}, PP{pp})", system.device, default, pp, tuple(links.items()),
                  summary=system.summary)


_CLUSTER_LINKS: dict[tuple, Link | None] = {}  # (system, tp, cp, dp, kind, residue) -> link
_CLUSTER_GROUPS: dict[tuple, tuple] = {}  # (system, tp, cp, dp, residue) -> ``Topology.dp_groups``


def _slowest(links: Sequence[Link | None]) -> Link | None:
    real = [link for link in links if link is not None]
    if not real:
        return None
    return Link(min(link.bandwidth for link in real), max(link.latency_s for link in real))


def ring_time(nbytes: float, members: int, link: Link | None, steps: int = 2) -> float:
    """A ring collective among ``members`` GPUs: ``steps*(R-1)/R * n/BW + steps*(R-1)*L``
    (2 steps: all-reduce; 1: reduce-scatter or all-gather); 0 for one member."""
    if members < 2 or link is None:
        return 0.0
    if nbytes < 0:
        raise ValueError(f"collective size must be >= 0 bytes, got {nbytes!r}")
    r = members
    return steps * (r - 1) / r * nbytes / link.bandwidth + steps * (r - 1) * link.latency_s
