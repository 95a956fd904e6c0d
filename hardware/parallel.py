"""Which GPUs and links a pipeline device's collectives and messages use.

GPUs are numbered as Megatron-LM numbers its ranks (order tensor, data, pipeline): the GPU
of tensor rank ``i``, data rank ``j`` and pipeline rank ``r`` is ``i + tp*(j + dp*r)``. A
cluster of nodes fills GPU 0, 1, ... node by node, so a tensor-parallel group of at most
``gpus_per_node`` GPUs sits inside one node (NVLink), data-parallel replicas come next and
pipeline stages are the outermost, usually across nodes — which link each message uses
follows from this numbering and ``System.link`` (intra-node vs inter-node).

Communication (all ring algorithms, each GPU on its own link; a ring runs at its slowest
hop, ``hardware.costs.allreduce_time``):

* tensor parallelism: two all-reduces of a layer's output (``c*b*s*h`` bytes) per layer
  in the forward and two in the backward (in B when the backward is split; W has none);
  with sequence parallelism reduce-scatters and all-gathers of the same volume instead
  (Korthikanti et al. 2022), which divides the replicated activations by ``tp``. The
  vocabulary-parallel embedding adds one all-reduce to the first stage's forward, the
  LM head one to the last stage's backward. They are not overlapped with compute.
* pipeline messages: each GPU of a group sends its ``1/tp`` share to its counterpart in
  the next group, in parallel; without sequence parallelism the receivers then
  all-gather the full activation inside their group (Megatron's scatter-gather). Both
  are one Hockney link per pair of pipeline devices (``pipeline_link``).
* data parallelism: after a device's last backward its gradients (``bytes_per_grad``
  per parameter it holds) are all-reduced among its ``dp`` replicas; with ZeRO
  (``zero >= 1``, Megatron's distributed optimizer) reduce-scattered, and after the
  optimizer step the updated weights all-gathered. With ``overlap`` the reduction runs
  during the device's last backward op and the gather during the next step's first
  forward; at least the share of one layer stays exposed.

Memory per GPU (``Context.persistent_bytes``): weights ``bytes_per_param_compute`` per
parameter it holds; gradients ``bytes_per_grad`` (``/dp`` with ZeRO-2); optimizer state
the rest of ``bytes_per_param_state`` (``/dp`` with ZeRO-1 or 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from pipetab.schedules.checks import check_count

from .system import Link, System

if TYPE_CHECKING:
    from .context import Context


@dataclass(frozen=True)
class Topology:
    """``pp`` pipeline devices of ``context.tp`` GPUs each, replicated ``context.dp``
    ways, on the GPUs of ``system`` (numbered as in the module docstring)."""

    system: System
    context: Context
    pp: int

    def __post_init__(self) -> None:
        check_count("pp", self.pp)
        self.system.check_devices(self.num_gpus)

    @property
    def num_gpus(self) -> int:
        return self.context.tp * self.context.dp * self.pp

    def gpu(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        """Global GPU index of a (tensor, data, pipeline) rank triple."""
        t, d = self.context.tp, self.context.dp
        return tp_rank + t * (dp_rank + d * pp_rank)

    def tp_group(self, pp_rank: int, dp_rank: int = 0) -> list[int]:
        return [self.gpu(i, dp_rank, pp_rank) for i in range(self.context.tp)]

    def dp_group(self, pp_rank: int, tp_rank: int = 0) -> list[int]:
        return [self.gpu(tp_rank, j, pp_rank) for j in range(self.context.dp)]

    def ring_link(self, gpus: list[int]) -> Link | None:
        """The slowest hop of a ring over ``gpus`` (None for a single GPU)."""
        ring = sorted(set(gpus))
        if len(ring) < 2:
            return None
        hops = [self.system.link(a, b) for a, b in zip(ring, ring[1:] + ring[:1]) if a != b]
        return Link(min(h.bandwidth for h in hops), max(h.latency_s for h in hops))

    def tp_link(self, pp_rank: int = 0) -> Link | None:
        """The ring link of pipeline device ``pp_rank``'s tensor-parallel group (the
        slowest over its data-parallel replicas)."""
        links = [self.ring_link(self.tp_group(pp_rank, j)) for j in range(self.context.dp)]
        return _slowest(links)

    def dp_link(self, pp_rank: int = 0) -> Link | None:
        """The ring link of pipeline device ``pp_rank``'s data-parallel groups."""
        return _slowest([self.ring_link(self.dp_group(pp_rank, i)) for i in range(self.context.tp)])

    def pipeline_link(self, a: int, b: int) -> Link:
        """One Hockney link for a message of a whole activation between pipeline devices
        ``a`` and ``b``: each of the ``tp`` GPU pairs carries ``1/tp`` of it in parallel
        over the slowest of their links; without sequence parallelism the receiving group
        then all-gathers it (module docstring)."""
        t = self.context.tp
        pairs = [self.system.link(self.gpu(i, j, a), self.gpu(i, j, b))
                 for i in range(t) for j in range(self.context.dp)]
        slow = Link(min(p.bandwidth for p in pairs), max(p.latency_s for p in pairs))
        inverse_bw, latency = 1 / (t * slow.bandwidth), slow.latency_s
        if t > 1 and not self.context.sequence_parallel:
            gather = _slowest([self.tp_link(a), self.tp_link(b)])
            inverse_bw += (t - 1) / (t * gather.bandwidth)  # type: ignore[union-attr]
            latency += (t - 1) * gather.latency_s  # type: ignore[union-attr]
        return Link(1 / inverse_bw, latency)

    @cached_property
    def pipeline_system(self) -> System:
        """The ``pp`` pipeline devices as a ``System`` whose links are ``pipeline_link``
        (its device is the cluster's GPU: op costs are per GPU)."""
        c = self.context
        if c.tp == 1 and c.dp == 1:
            return self.system  # GPU r is pipeline device r
        return _pipeline_system(self.system, c.tp, c.dp, bool(c.sequence_parallel), self.pp, c.parallel_label)


@lru_cache(maxsize=256)
def _pipeline_system(system: System, tp: int, dp: int, sequence_parallel: bool, pp: int, label: str) -> System:
    """``Topology.pipeline_system``, shared by every schedule of the same split (plan
    prices thousands)."""
    from .context import Context

    topo = Topology(system, Context(tp=tp, dp=dp, sequence_parallel=sequence_parallel), pp)
    links = {(a, b): topo.pipeline_link(a, b) for a in range(pp) for b in range(a + 1, pp)}
    default = links[(0, 1)] if pp > 1 else system.default_link
    return System(f"{system.name} ({label}, PP{pp})", system.device, default, pp, tuple(links.items()),
                  summary=system.summary)


def _slowest(links: list[Link | None]) -> Link | None:
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
