"""Lower bounds that let ``plan`` skip candidates without simulating them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipetab.hardware.layer import (
    activation_bytes_per_layer,
    stage_expert_params_per_gpu,
    stage_params_per_gpu,
    weight_memory_bytes_per_layer,
)
from pipetab.hardware.model import partition
from pipetab.schedules import registry
from pipetab.schedules.memory import memory_change
from pipetab.schedules.ops import Kind

if TYPE_CHECKING:
    from pipetab.hardware.context import Context
    from pipetab.schedules.schedule import Schedule

    from .space import PlanSpace


def order_peaks(schedule: Schedule, size: dict, part: dict) -> list[float]:
    """Peak live activation per device from the per-device orders alone (a device runs its
    ops one after another, so the peak does not depend on timing); ``size`` / ``part``: M
    and M_W per (pipeline, stage), changes as ``schedules.memory.memory_change`` defines."""
    split = schedule.split_backward
    change = {(k, p, s): memory_change(k, size[(p, s)], part[(p, s)], split)
              for (p, s) in size for k in (Kind.F, Kind.B, Kind.W)}
    peaks = []
    for order in schedule.orders:
        level = peak = 0.0
        for kind, p, s, _ in order:
            level += change[(kind, p, s)]
            if level > peak:
                peak = level
        peaks.append(peak)
    return peaks


def small_microbatches(pp: int, m: int) -> int:
    """At most ``4 pp`` microbatches with the same divisibility by ``pp`` and ``2 pp``."""
    return 4 * pp if m > 4 * pp and m % (2 * pp) == 0 else m


def _sizes(shape: Context) -> tuple[int, int]:
    """(pp, microbatches) of a resolved shape."""
    if shape.pp is None or shape.microbatches is None:
        raise ValueError(f"shape {shape.label} is not resolved (pp and microbatches needed)")
    return shape.pp, shape.microbatches


class Bounds:
    """Cached generation and per-candidate lower bounds."""

    def __init__(self, space: PlanSpace) -> None:
        self.space = space
        self.schedules: dict = {}
        self.units: dict = {}
        self.costs: dict = {}

    def schedule(self, name: str, opts: dict, pp: int, m: int) -> Schedule | None:
        key = (name, tuple(sorted(opts.items())), pp, m)
        if key not in self.schedules:
            try:
                sched = registry.generate(name, pp, m, **opts)
                partition(sched.stage_work[0], self.space.model.num_layers)
                self.schedules[key] = sched
            except ValueError:
                self.schedules[key] = None
        return self.schedules[key]

    def layer_units(self, sched: Schedule, fraction: float) -> list[float]:
        """Peak activation per device in layer activations (M = layers of the stage)."""
        key = (id(sched), round(fraction, 9))
        if key not in self.units:
            layers = {(p, s): n for p, w in enumerate(sched.stage_work)
                      for s, n in enumerate(partition(w, self.space.model.num_layers))}
            self.units[key] = order_peaks(sched, layers, {k: fraction * n for k, n in layers.items()})
        return self.units[key]

    def memory(self, name: str, opts: dict, shape: Context) -> float | None:
        """Lower bound of the peak memory per GPU (bytes); None when the generator refuses."""
        model = self.space.model
        kinds = {model.is_moe_layer(i) for i in range(model.num_layers)}  # the lighter kind bounds every layer
        act = min(activation_bytes_per_layer(model, shape, moe) for moe in kinds)
        part = min(weight_memory_bytes_per_layer(model, shape, moe) / activation_bytes_per_layer(model, shape, moe)
                   for moe in kinds) * act
        pp, m = _sizes(shape)
        sched = self.schedule(name, opts, pp, small_microbatches(pp, m))
        if sched is None:
            return None
        units = self.layer_units(sched, part / act if sched.split_backward else 1.0)
        params = [0] * sched.num_devices  # type: ignore[union-attr]
        experts = [0] * sched.num_devices  # type: ignore[union-attr]
        for p, w in enumerate(sched.stage_work):  # type: ignore[union-attr]
            counts = partition(w, model.num_layers)
            start = 0
            for s, n in enumerate(counts):
                d, last = sched.placement.device(p, s), s == len(counts) - 1  # type: ignore[union-attr]
                params[d] += stage_params_per_gpu(model, n, s == 0, last, shape, start)
                experts[d] += stage_expert_params_per_gpu(model, n, last, shape, start)
                start += n
        return max(shape.persistent_bytes(model, n, e) + u * act for n, e, u in zip(params, experts, units))

    def shape_time(self, shape: Context) -> float:
        """A lower bound of the step time of every schedule on ``shape``: its microbatches'
        work spread evenly over its ``pp`` pipeline devices with no bubble or optimizer
        step — on the compute stream the forward and backward of the whole model as one
        stage (the roofline of a sum is at most the sum of the rooflines, and under the
        kernel model an op is the sum of its kernels: splitting the model into stages or
        chunks, or a backward into B and W, adds), on the
        communication stream every expert-parallel all-to-all; the longer of the two (a
        block takes at least its longer stream)."""
        from pipetab.hardware.costs import stage_cost
        from pipetab.hardware.moe import moe_layer_comm
        from pipetab.hardware.parallel import Topology

        model, system = self.space.model, self.space.system
        pp, _ = _sizes(shape)
        topo = Topology(system, shape, pp)
        links = [link for link in (topo.tp_link(r) for r in range(pp)) if link is not None]
        fastest = max(links, key=lambda link: (link.bandwidth, -link.latency_s)) if links else None
        whole = stage_cost(model, system.device, shape, model.num_layers, first=True, last=True, tp_link=fastest)
        m = shape.microbatches
        compute = (whole.forward_s - whole.ep_comm_forward_s + whole.backward_s - whole.ep_comm_backward_s) * m  # type: ignore[operator]
        comm = 0.0
        if model.moe and (shape.ep > 1 or shape.etp > 1):
            dispatch, combine = min(moe_layer_comm(model, shape, topo, r) for r in range(shape.pp))  # type: ignore[arg-type]
            layers = model.num_moe_layers + model.mtp_layers
            full = 2 if shape.recompute == "full" else 0
            comm = layers * m * ((dispatch + combine) * (1 + full / 2) + 2 * combine)  # type: ignore[operator]
        return (1 - 1e-9) * max(compute, comm) / shape.pp  # type: ignore[operator]

    def time(self, name: str, opts: dict, shape: Context) -> float:
        """Lower bound of the step time: the simulated step of the instance of at most ``4 pp``
        microbatches, plus the average device work of each further microbatch (module
        docstring); exact when the instance is the shape itself."""
        from pipetab.solver.pricing import hardware_costs
        from pipetab.solver.simulate import simulate

        pp, m = shape.pp, shape.microbatches
        small_m = small_microbatches(pp, m)  # type: ignore[arg-type]
        sched = self.schedule(name, opts, pp, small_m)  # type: ignore[arg-type]
        # the small instance's own global batch: same microbatches, fewer of them; schedules
        # of one structure (placement, stage work, split backward) share their costs
        key = (sched.placement, sched.stage_work, sched.split_backward, sched.microbatch2pipeline,  # type: ignore[union-attr]
               shape.replace(global_batch=None))
        if key not in self.costs:
            self.costs[key] = hardware_costs(sched, self.space.system, self.space.model, key[-1])  # type: ignore[arg-type]
        costs = self.costs[key]
        step = simulate(sched, costs).makespan  # type: ignore[arg-type]
        if small_m == m:
            return step
        # each further microbatch adds at least its ops' compute (a block hides communication only)
        comm = {k: sum(s for c, s in segs if c) for k, segs in costs.chains.items()}
        work = sum(costs.duration(op) - comm.get((op.kind, op.pipeline, op.stage), 0.0)
                   for order in sched.orders for op in order)  # type: ignore[union-attr]
        return step + (m - small_m) * work / (sched.num_devices * small_m)  # type: ignore[union-attr,operator]
