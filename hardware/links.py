"""The links a stage's collectives use on its pipeline device: the second floor of the
pricing stack (``Topology`` -> ``StageLinks`` -> ``costs.stage_cost`` ->
``pipeline.schedule_costs`` -> the solver's ``Costs``).

A ``StageLinks`` value holds what a stage's op times need of the cluster: the ring link of
its device's tensor-parallel group, that of its context-parallel groups, the links of its
ZeRO-3 gathers and reductions (dense parameters, routed experts) and one MoE layer's
(dispatch, combine) all-to-all seconds (``hardware.moe``). ``DeviceLinks`` finds them per
pipeline device of a ``Topology`` (``hardware.parallel``), once each; ``fastest_links`` is the
optimistic choice of ``plan``'s shape bound: every collective over the cluster's fastest
link and the fastest expert group's all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .collectives import FabricGroup
from .moe import edp_group, moe_layer_comm
from .parallel import Topology
from .system import Link

if TYPE_CHECKING:
    from .context import Context
    from .model import TransformerModel
    from .system import System


@dataclass(frozen=True)
class StageLinks:
    """What a stage's collectives run over: ``tp`` the tensor-parallel ring link, ``cp`` the
    context-parallel one, ``shard`` the ZeRO-3 (dense, expert) links, ``moe_comm`` one MoE
    layer's (dispatch, combine) seconds; None (0 s) where the run has no such group."""

    tp: Link | None = None
    cp: Link | None = None
    shard: tuple[Link | FabricGroup | None, Link | FabricGroup | None] = (None, None)
    moe_comm: tuple[float, float] = (0.0, 0.0)


NO_LINKS = StageLinks()
"""A stage on one GPU: no collective."""


class DeviceLinks:
    """The ``StageLinks`` of each pipeline device of ``topology`` for ``model``, computed
    once per device."""

    def __init__(self, topology: Topology, model: TransformerModel) -> None:
        self.topology, self.model = topology, model
        self.memo: dict[int, StageLinks] = {}

    def of(self, device: int) -> StageLinks:
        if device not in self.memo:
            t, ctx, moe = self.topology, self.topology.context, self.model.moe
            shard = (self._shard(device), t.fabric_group(edp_group(t, device)) if moe else None) \
                if ctx.zero == 3 else (None, None)
            self.memo[device] = StageLinks(t.tp_link(device), t.cp_link(device), shard,
                                           moe_layer_comm(self.model, ctx, t, device) if moe else (0.0, 0.0))
        return self.memo[device]


    def _shard(self, device: int) -> Link | FabricGroup | None:
        """The ZeRO-3 link of the dense parameters: the DP ring link, or on a fabric the
        slowest tensor rank's group (``Topology.fabric_group``)."""
        t = self.topology
        if t.system.fabric is None:
            return t.dp_link(device)
        groups = t.dp_groups(device)
        return max(groups, key=lambda g: g.time(1e9) if isinstance(g, FabricGroup) else 0.0)


def fastest_link(system: System) -> Link:
    """The fastest bandwidth and least latency of ``system``'s default and intra-node links."""
    links = [system.default_link, *([system.intra_node_link] if system.intra_node_link else [])]
    return Link(max(k.bandwidth for k in links), min(k.latency_s for k in links))


def fastest_links(system: System, model: TransformerModel, ctx: Context, pp: int) -> StageLinks:
    """Links no stage of a run of ``pp`` pipeline devices beats: tensor- and
    context-parallel collectives over ``fastest_link`` (where the run has such groups), no
    ZeRO-3 link, and the all-to-all of the pipeline device whose expert groups are fastest
    (with expert or expert-tensor parallelism)."""
    fast = fastest_link(system)
    moe_comm = (0.0, 0.0)
    if model.moe and (ctx.ep > 1 or ctx.etp > 1):
        topology = Topology(system, ctx, pp)
        moe_comm = min(moe_layer_comm(model, ctx, topology, r) for r in range(pp))
    return StageLinks(fast if ctx.tp > 1 else None, fast if ctx.cp > 1 else None, (None, None), moe_comm)
