"""ZeRO stage 3 / FSDP: weights sharded over the GPUs holding the same layers, gathered for
each op that needs them, gradients reduce-scattered.

With ``zero = 3`` every GPU keeps ``1/R`` of its weights, gradients and optimizer state
(``Context.persistent_bytes``; ``R = dp x cp`` for dense weights, ``edp`` for routed
experts). Per microbatch (Rajbhandari et al. 2020; PyTorch FSDP):

* F all-gathers the stage's weights (``c`` bytes per parameter it holds; ring, one step:
  ``(R-1)/R * n/BW + (R-1) L``); the backward all-gathers them again unless
  ``reshard_after_forward`` is false (FSDP's ``reshard_after_forward=False``: the gathered
  weights stay from F to B), and reduce-scatters the stage's gradients
  (``bytes_per_grad`` per parameter) — in B, or in W when the backward is split (W makes
  the gradients; B then needs only the weights).
* Gathers run one unit ahead (prefetch; a unit is a layer, the embedding or the head):
  an op's collectives overlap its compute except the first unit's share,
  ``max(comm - compute, comm / units)`` exposed (all of it without ``overlap``).
* Working memory per GPU (``buffer_bytes``): with resharding, two gathered units (the
  one running and the one prefetched) and one unit's unsharded gradient; without, every
  weight of the device's stages gathered (held from a microbatch's F to its B, and
  microbatches overlap) plus one unit's gradient.

No tail: the gradients are reduced during the step and the weights gathered on demand;
the optimizer step runs on the GPU's shard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .collectives import FabricGroup
from .layer import layer_params_per_gpu, mtp_params_per_gpu
from .parallel import ring_time

if TYPE_CHECKING:
    from .context import Context
    from .model import TransformerModel
    from .system import Link


def exposed(total: float, window: float, units: int, overlap: bool) -> float:
    """What stays of a collective of ``total`` seconds overlapped with ``window`` seconds
    of compute, in ``units`` pieces: ``max(total - window, total / units)``; all of it
    without overlap."""
    if not overlap or total == 0:
        return total
    return max(total - window, total / max(units, 1))


def gather_bytes(model: TransformerModel, params: int) -> int:
    """Bytes one op all-gathers for ``params`` parameters of a GPU (its full copy)."""
    return params * model.bytes_per_param_compute


def _one(nbytes: float, members: int, link: Link | FabricGroup | None, units: int) -> float:
    """A gather or reduce-scatter of ``nbytes``: one ring, or on a fabric one collective per
    unit as FSDP runs them (``hardware.collectives``)."""
    if isinstance(link, FabricGroup):
        return link.time(nbytes, 1, units)
    return ring_time(nbytes, members, link, steps=1)


def op_collectives(model: TransformerModel, ctx: Context, params: int, expert_params: int,
                   links: tuple[Link | FabricGroup | None, Link | FabricGroup | None],
                   units: int = 1) -> tuple[float, float]:
    """(all-gather, reduce-scatter) seconds of ``params`` parameters on one GPU (of them
    ``expert_params`` routed experts, over ``edp`` GPUs and ``links[1]``; the rest over
    ``dp x cp`` and ``links[0]``); on a fabric in ``units`` collectives."""
    dense = params - expert_params
    gather = (_one(gather_bytes(model, dense), ctx.replicas, links[0], units)
              + _one(gather_bytes(model, expert_params), ctx.edp, links[1], units))
    reduce = (_one(dense * model.bytes_per_grad, ctx.replicas, links[0], units)
              + _one(expert_params * model.bytes_per_grad, ctx.edp, links[1], units))
    return gather, reduce


def zero3_op_comm(model: TransformerModel, ctx: Context, params: int, expert_params: int,
                  links: tuple[Link | FabricGroup | None, Link | FabricGroup | None], units: int,
                  windows: tuple[float, float, float],
                  split_backward: bool) -> tuple[float, float, float]:
    """Exposed seconds of ZeRO-3 collectives added to a stage's (F, B, W) per microbatch
    (module docstring); ``windows`` their compute seconds, ``units`` the stage's units."""
    if ctx.zero != 3:
        return 0.0, 0.0, 0.0
    gather, reduce = op_collectives(model, ctx, params, expert_params, links, units)
    again = gather if ctx.reshard_after_forward else 0.0
    fwd = exposed(gather, windows[0], units, ctx.overlap)
    if split_backward:
        return fwd, exposed(again, windows[1], units, ctx.overlap), exposed(reduce, windows[2], units, ctx.overlap)
    return fwd, exposed(again + reduce, windows[1], units, ctx.overlap), 0.0


def step_volumes(model: TransformerModel, ctx: Context, params: int, microbatches: int) -> tuple[float, float]:
    """(bytes all-gathered, bytes reduce-scattered) per GPU in one step by a device of
    ``params`` dense parameters per GPU running ``microbatches`` microbatches: ring
    collectives move ``(R-1)/R`` of the full size into (and out of) each GPU."""
    r = ctx.replicas
    share = (r - 1) / r
    passes = 2 if ctx.reshard_after_forward else 1
    return (microbatches * passes * share * gather_bytes(model, params),
            microbatches * share * params * model.bytes_per_grad)


def _units(model: TransformerModel, ctx: Context, stages: Sequence[tuple[int, int, bool, bool]]) -> list[int]:
    """Parameters per GPU of each unit (layer, embedding, head with the MTP modules) of the
    ``stages`` ``(first_layer, layers, embedding, head)`` a device holds."""
    table = -(-model.vocab // ctx.tp) * model.hidden
    out = []
    for first, layers, emb, head in stages:
        out += [layer_params_per_gpu(model, ctx, model.is_moe_layer(i)) for i in range(first, first + layers)]
        out += [table] if emb else []
        out += [table + mtp_params_per_gpu(model, ctx)[0]] if head else []
    return out


def buffer_bytes(model: TransformerModel, ctx: Context, stages: Sequence[tuple[int, int, bool, bool]]) -> int:
    """Working memory of ZeRO-3 on one GPU holding ``stages`` (module docstring); 0 below
    stage 3."""
    if ctx.zero != 3:
        return 0
    units = _units(model, ctx, stages)
    if not units:
        return 0
    largest = max(units)
    gathered = 2 * largest if ctx.reshard_after_forward else sum(units)
    return gathered * model.bytes_per_param_compute + largest * model.bytes_per_grad
