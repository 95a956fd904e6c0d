"""Context parallelism's attention: how ``cp`` ranks exchange keys and values.

Each of the ``cp`` ranks of a pipeline device (GPUs ``i + tp*k`` of the device, tensor
rank ``i`` fastest: ``hardware.parallel``) holds ``s/cp`` tokens of every sequence, as
two chunks ``k`` and ``2cp-1-k`` of ``2cp`` (causal load balancing, Megatron-Core and
Llama 3): every rank then computes the same share of the causal attention, ``1/cp`` of
the layer's attention core (``hardware.layer.attention_core_flops`` counts the ranks'
``s/cp`` queries against all ``s`` keys). Everything but attention runs on the rank's own
tokens (``hardware.gemms.local_seq``).

A rank's K and V chunk per GPU: ``kv = c * b * (s/cp) * (k + v)`` bytes, ``k + v`` the
widths the GPU holds (``2 * kv_heads/t * d``; under MLA ``a/t * (d_qk + d_v)``: Megatron
sends the up-projected K and V).

* ``p2p`` (ring attention, Megatron-Core's default, TransformerEngine's KV P2P): ``cp``
  steps; at step ``j`` a rank computes attention against the chunk it holds while sending
  it to the next rank and receiving the next one. Forward: ``cp - 1`` transfers of ``kv``
  bytes, each ``kv/BW + L`` over the ring's slowest hop, overlapped with the step's
  attention (``1/cp`` of the rank's core): the exposed time is ``(cp-1) * max(0,
  transfer - step)``. Backward: the chunks travel again with their gradients (``2 kv``
  per step) against the backward's core (``2 x`` the forward's, ``2.5 x`` with flash).
* ``allgather`` (Llama 3, section 3.3.2): K and V all-gathered before attention (ring,
  ``(cp-1)/cp * cp*kv / BW + (cp-1) L``), not overlapped; the backward gathers them again
  and reduce-scatters their gradients (the same volume).

Full recomputation runs the forward's exchange again in the backward (``hardware.costs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .context import CpComm
from .gemms import check_mb, heads_per_gpu, kv_heads_per_gpu, local_seq
from .parallel import ring_time

if TYPE_CHECKING:
    from .context import Context
    from .model import TransformerModel
    from .system import Device, Link


class RingStep(NamedTuple):
    """One step of a ring exchange: the attention each rank computes, the chunk it sends
    (bytes and seconds) and the exposed seconds of the pass (all ``cp`` steps)."""

    compute_s: float
    transfer_bytes: float
    transfer_s: float
    exposed_s: float


def kv_bytes(model: TransformerModel, ctx: Context) -> float:
    """K and V of one rank's ``s/cp`` tokens on one GPU (module docstring)."""
    t = ctx.tp
    if model.mla:
        width = heads_per_gpu(model, t) * (model.qk_head_dim + model.v_head_dim)
    else:
        width = 2 * kv_heads_per_gpu(model, t) * model.head_dim
    return model.bytes_per_param_compute * check_mb(ctx.microbatch_size) * local_seq(model, ctx) * width


def ring_step(model: TransformerModel, ctx: Context, link: Link, core_s: float, backward: bool) -> RingStep:
    """The ``p2p`` ring's step of one layer's forward (or backward) whose attention core
    takes ``core_s`` on the rank (module docstring)."""
    c = ctx.cp
    nbytes = kv_bytes(model, ctx) * (2 if backward else 1)
    transfer = nbytes / link.bandwidth + link.latency_s
    step = core_s / c
    return RingStep(step, nbytes, transfer, (c - 1) * max(0.0, transfer - step))


def layer_cp_comm(model: TransformerModel, device: Device, ctx: Context, link: Link | None,
                  core_flops: float, tokens: float, flash: bool) -> tuple[float, float]:
    """Exposed seconds of one layer's K/V exchange in its (forward, backward) on one GPU;
    ``core_flops`` is the layer's forward attention core on the rank, run at the
    device's peak times its efficiency at ``tokens`` tokens."""
    if ctx.cp == 1 or link is None:
        return 0.0, 0.0
    if ctx.cp_comm is CpComm.ALLGATHER:
        gather = ring_time(ctx.cp * kv_bytes(model, ctx), ctx.cp, link, steps=1)
        return gather, 2 * gather
    rate = device.peak_flops * device.efficiency(tokens)
    core_f = core_flops / rate
    core_b = core_f * (2.5 if flash else 2.0)
    return (ring_step(model, ctx, link, core_f, False).exposed_s,
            ring_step(model, ctx, link, core_b, True).exposed_s)
