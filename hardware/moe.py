"""Expert parallelism's communication: the all-to-all that dispatches tokens to their
experts and combines the results, and the expert-tensor-parallel gathers.

Groups (``Context``, Megatron-Core's expert rank order): inside pipeline stage ``r`` the
GPU of local index ``l = e_t + etp*(e_p + ep*e_d)`` (``l = tp_rank + tp*(cp_rank +
cp*dp_rank)``, the numbering of ``hardware.parallel``) is expert-TP rank ``e_t``, EP rank
``e_p`` and expert data-parallel rank ``e_d``; an EP group is the ``ep`` GPUs of one
``(e_t, e_d)``.

All-to-all (per MoE layer; twice in the forward: dispatch and combine, twice in the
backward: their gradients, in B when the backward is split). A GPU sends ``V = T * k' *
w`` bytes: ``T = b*s/(t*cp)`` tokens of its own, ``k' = experts_per_token *
routing_imbalance`` copies each, ``w = h * bytes per element`` (the dispatch precision
for the forward dispatch, the model's for the rest); ``1/ep`` of it stays on the GPU.
Every GPU sends to all the others at once, so the time is the slower of its two link
classes, each Hockney: ``max(V_nvl / BW_nvl + L_nvl, V_nic / BW_nic + L_nic)`` with
``V_nvl = V (g-1)/ep`` to the ``g - 1`` members on its node and ``V_nic = V (ep-g)/ep``
to the rest (the slowest member counts). With ``node_limit`` M (DeepSeek-V3 section
3.2.2: each token reaches experts on at most M = 4 nodes, sent once per node over
InfiniBand and forwarded over NVLink) a token crosses the NIC once per remote node:
``V_nic = T * w * min(M, N, k') * (N-1)/N`` over the ``N`` nodes the group spans, and
NVLink forwards its copies: ``V_nvl = V (g-1)/g``.

Expert tensor parallelism (``etp > 1``): the expert-TP group all-gathers the tokens
dispatched to it before its experts and reduce-scatters their outputs after (ring, one
step each: ``hardware.parallel.ring_time``), in the forward and again in the backward.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

from .gemms import own_tokens
from .parallel import ring_time

if TYPE_CHECKING:
    from .context import Context
    from .model import TransformerModel
    from .parallel import Topology
    from .system import System


def _node(system: System, gpu: int) -> int:
    per = system.devices_per_node
    return gpu if per is None else gpu // per


def all_to_all_time(system: System, members: Sequence[int], tokens: float, copies: float, width_bytes: float,
                    node_limit: int | None = None) -> float:
    """An all-to-all among ``members`` (GPUs of ``system``) in which each sends ``tokens``
    tokens of ``width_bytes`` bytes, ``copies`` copies of each spread evenly over the
    members (module docstring); 0 for one member."""
    ep = len(members)
    if ep < 2 or tokens <= 0:
        return 0.0
    volume = tokens * copies * width_bytes
    nodes: dict[int, list[int]] = {}
    for gpu in members:
        nodes.setdefault(_node(system, gpu), []).append(gpu)
    spanned = len(nodes)
    worst = 0.0
    # without per-pair links a node's time depends on its member count only: one node of each
    groups = nodes.values() if system.links else {len(g): g for g in nodes.values()}.values()
    for group in groups:
        g, me = len(group), group[0]
        if node_limit is not None and spanned > 1:
            nic = tokens * width_bytes * min(node_limit, spanned, copies) * (spanned - 1) / spanned
            nvl = volume * (g - 1) / g
        else:
            nic = volume * (ep - g) / ep
            nvl = volume * (g - 1) / ep
        t = 0.0
        if nvl > 0:
            link = system.link(me, group[1])
            t = max(t, nvl / link.bandwidth + link.latency_s)
        if nic > 0:
            other = next(m for m in members if _node(system, m) != _node(system, me))
            link = system.link(me, other)
            t = max(t, nic / link.bandwidth + link.latency_s)
        worst = max(worst, t)
    return worst


def ep_group(topology: Topology, pp_rank: int, etp_rank: int = 0, edp_rank: int = 0) -> list[int]:
    """GPUs of the EP group of ``(etp_rank, edp_rank)`` in pipeline stage ``pp_rank``."""
    ctx = topology.context
    return _ep_members(ctx, ctx.tp * ctx.cp * ctx.dp * pp_rank, etp_rank, edp_rank)


def _ep_members(ctx: Context, base: int, etp_rank: int, edp_rank: int) -> list[int]:
    return [base + etp_rank + ctx.etp * (j + ctx.ep * edp_rank) for j in range(ctx.ep)]


@lru_cache(maxsize=4096)
def _all_to_alls(model: TransformerModel, ctx: Context, system: System, base: int,
                 model_bytes: int) -> tuple[float, float]:
    """(dispatch, combine) of the slowest EP group of the stage whose first GPU is
    ``base``; groups alike (without per-pair links: the same offset within a node) are
    priced once."""
    tokens = own_tokens(model, ctx)
    copies = model.experts_per_token * ctx.routing_imbalance
    per = system.devices_per_node
    dispatch = combine = 0.0
    seen: set[int] = set()
    for e_d in range(ctx.edp):
        for e_t in range(ctx.etp):
            members = _ep_members(ctx, base, e_t, e_d)
            if per and not system.links:  # an arithmetic progression: its offset in a node decides its nodes
                if members[0] % per in seen:
                    continue
                seen.add(members[0] % per)
            d = all_to_all_time(system, members, tokens, copies,
                                model.hidden * ctx.dispatch_precision.bytes_per_element, ctx.node_limit)
            cmb = all_to_all_time(system, members, tokens, copies, model.hidden * model_bytes, ctx.node_limit)
            dispatch, combine = max(dispatch, d), max(combine, cmb)
    return dispatch, combine


def etp_group(topology: Topology, pp_rank: int, ep_rank: int = 0, edp_rank: int = 0) -> list[int]:
    """GPUs of the expert-tensor-parallel group of ``(ep_rank, edp_rank)`` in stage
    ``pp_rank``."""
    ctx = topology.context
    base = ctx.tp * ctx.cp * ctx.dp * pp_rank + ctx.etp * (ep_rank + ctx.ep * edp_rank)
    return [base + i for i in range(ctx.etp)]


def edp_group(topology: Topology, pp_rank: int, etp_rank: int = 0, ep_rank: int = 0) -> list[int]:
    """GPUs holding the same experts as ``(etp_rank, ep_rank)`` in stage ``pp_rank``: the
    expert data-parallel group their gradients are reduced over."""
    ctx = topology.context
    base = ctx.tp * ctx.cp * ctx.dp * pp_rank + etp_rank + ctx.etp * ep_rank
    return [base + ctx.etp * ctx.ep * k for k in range(ctx.edp)]


def ep_span(system: System, ctx: Context, pp_rank: int = 0) -> str:
    """Which links the all-to-all of an EP group uses: ``"NVLink (inside a node)"``,
    ``"NIC (1 GPU per node, 8 nodes)"`` or ``"NVLink + NIC (8 GPUs per node, 8 nodes)"``
    (GPUs numbered as ``hardware.parallel``; stage ``pp_rank``'s first group)."""
    base = ctx.tp * ctx.cp * ctx.dp * pp_rank
    members = [base + ctx.etp * j for j in range(ctx.ep)]
    if ctx.ep < 2:
        return "none (EP 1)"
    nodes: dict[int, int] = {}
    for gpu in members:
        nodes[_node(system, gpu)] = nodes.get(_node(system, gpu), 0) + 1
    per = max(nodes.values())
    if len(nodes) == 1:
        return "NVLink (inside a node)"
    if per == 1:
        return f"NIC (1 GPU per node, {len(nodes)} nodes)"
    return f"NVLink + NIC ({per} GPUs per node, {len(nodes)} nodes)"


def moe_layer_comm(model: TransformerModel, ctx: Context, topology: Topology, pp_rank: int) -> tuple[float, float]:
    """Seconds of (dispatch, combine) communication of one MoE layer's forward on the
    slowest EP group of pipeline device ``pp_rank`` (module docstring); the backward's
    two all-to-alls of gradients take (combine, combine) — model-precision both ways."""
    return _layer_comm(model, ctx, topology, pp_rank)


@lru_cache(maxsize=4096)
def _layer_comm(model: TransformerModel, ctx: Context, topology: Topology, pp_rank: int) -> tuple[float, float]:
    system, c = topology.system, model.bytes_per_param_compute
    per = system.devices_per_node
    base = ctx.tp * ctx.cp * ctx.dp * pp_rank
    # without per-pair links, groups shifted by whole nodes cost the same: stage 0's groups
    # shifted by the stage's offset within a node stand for every stage
    shift = base % per if per and not system.links else base
    dispatch, combine = _all_to_alls(model, ctx, system, shift, c)
    if ctx.etp > 1:
        link = topology.ring_link(etp_group(topology, pp_rank))
        copies = model.experts_per_token * ctx.routing_imbalance
        gathered = own_tokens(model, ctx) * copies * ctx.etp * model.hidden * c
        one = ring_time(gathered, ctx.etp, link, steps=1)
        dispatch, combine = dispatch + one, combine + one
    return dispatch, combine
