"""Lower bounds that let ``plan`` skip candidates without simulating them."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from pipetab.hardware.costs import stage_cost
from pipetab.hardware.layer import (
    activation_bytes_per_layer,
    stage_expert_params_per_gpu,
    stage_params_per_gpu,
    weight_memory_bytes_per_layer,
)
from pipetab.hardware.links import fastest_links
from pipetab.hardware.model import partition
from pipetab.schedules import registry

from .periodic import order_peaks, periodic_run, sample_sizes

if TYPE_CHECKING:
    from pipetab.hardware.context import Context
    from pipetab.schedules.schedule import Schedule

    from .space import PlanSpace


def small_microbatches(pp: int, m: int) -> int:
    """At most ``4 pp`` microbatches with the same divisibility by ``pp`` and ``2 pp``."""
    return 4 * pp if m > 4 * pp and m % (2 * pp) == 0 else m


class Bounds:
    """Cached generation and per-candidate lower bounds."""

    def __init__(self, space: PlanSpace) -> None:
        self.space = space
        self.schedules: dict = {}
        self.units: dict = {}
        self.runs: dict = {}
        self.deep: dict = {}  # (name, options, pp) -> more stages than layers
        self.params: dict = {}
        self.op_costs: dict = {}
        self.op_times_: dict = {}  # ``op_times`` of structures not yet priced in full
        self.activations: dict = {}  # shape -> ``_layer_activation``
        self.shorts: dict = {}  # (name, options, pp, m) -> ``short``
        self.shape_bounds: dict = {}  # shape -> (``shape_time``, ``serial_time``)
        self.sims: dict = {}  # (id(schedule), id(costs)) -> (schedule, costs, ``quick``'s simulation)
        self.short_misfits: set = set()  # offloading candidates whose short run does not fit (``quick``)

    def schedule(self, name: str, opts: dict, pp: int, m: int) -> Schedule | None:
        """The named schedule of ``pp`` devices and ``m`` microbatches, or None when the
        generator refuses it or it has more stages than the model has layers (known after
        the first instance of ``(name, opts, pp)``: no other is generated); cached."""
        shape_key = (name, tuple(sorted(opts.items())), pp)
        key = (*shape_key, m)
        if key not in self.schedules:
            sched = None
            if self.deep.get(shape_key) is not True:
                try:
                    sched = registry.generate(name, pp, m, **opts)
                except ValueError:
                    sched = None
                if sched is not None:
                    self.deep[shape_key] = sched.num_stages(0) > self.space.model.num_layers
                    sched = None if self.deep[shape_key] else sched
            self.schedules[key] = sched
        return self.schedules[key]

    def short(self, name: str, opts: dict, pp: int, m: int) -> Schedule | None:
        """A short instance of the run (its peaks are at most the run's): the largest of
        the first periodic samples (``periodic.sample_sizes``: the run simulates them too)
        the generator accepts, else of ``small_microbatches``, else the run itself; cached."""
        key = (name, tuple(sorted(opts.items())), pp, m)
        if key not in self.shorts:
            self.shorts[key] = self._short(name, opts, pp, m)
        return self.shorts[key]

    def _short(self, name: str, opts: dict, pp: int, m: int) -> Schedule | None:
        try:
            if registry.num_ops(name, pp, m, **opts) is None:
                return None
        except ValueError:
            return None
        for n in [sizes[-1] for sizes in sample_sizes(m, pp)] + [small_microbatches(pp, m)]:
            if n < m and (sched := self.schedule(name, opts, pp, n)) is not None:
                return sched
        return self.schedule(name, opts, pp, m)

    def layer_units(self, sched: Schedule, fraction: float) -> list[float]:
        """Peak activation per device in layer activations (M = layers of the stage)."""
        key = (id(sched), round(fraction, 9))
        if key not in self.units:
            layers = {(p, s): n for p, w in enumerate(sched.stage_work)
                      for s, n in enumerate(partition(w, self.space.model.num_layers))}
            self.units[key] = order_peaks(sched, layers, {k: fraction * n for k, n in layers.items()})
        return self.units[key]

    def _device_params(self, sched: Schedule, shape: Context) -> tuple[list[int], list[int]]:
        """(parameters, routed-expert parameters) per GPU of each device of ``sched``'s
        even split; cached (they depend on the split and the TP/EP sizes only)."""
        key = (id(sched), shape.tp, shape.ep, shape.etp)
        if key not in self.params:
            model = self.space.model
            params, experts = [0] * sched.num_devices, [0] * sched.num_devices
            for p, w in enumerate(sched.stage_work):
                counts = partition(w, model.num_layers)
                start = 0
                for s, n in enumerate(counts):
                    d, last = sched.placement.device(p, s), s == len(counts) - 1
                    params[d] += stage_params_per_gpu(model, n, s == 0, last, shape, start)
                    experts[d] += stage_expert_params_per_gpu(model, n, last, shape, start)
                    start += n
            self.params[key] = (params, experts)
        return self.params[key]

    def _layer_activation(self, shape: Context) -> tuple[float, float]:
        """(activation, its weight part) of the lighter layer kind on ``shape``; cached."""
        if shape not in self.activations:
            self.activations[shape] = self._lightest_layer(shape)
        return self.activations[shape]

    def _lightest_layer(self, shape: Context) -> tuple[float, float]:
        model = self.space.model
        kinds = {model.is_moe_layer(i) for i in range(model.num_layers)}  # the lighter kind bounds every layer
        act = min(activation_bytes_per_layer(model, shape, moe) for moe in kinds)
        part = min(weight_memory_bytes_per_layer(model, shape, moe) / activation_bytes_per_layer(model, shape, moe)
                   for moe in kinds) * act
        return act, part

    def shape_memory(self, shape: Context) -> float:
        """A lower bound of the peak memory per GPU of every schedule on ``shape``: a device
        holds at least ``ceil(L / pp)`` layers' weights, gradients and optimizer state and,
        once, their activation (each op pair F, B holds it)."""
        model = self.space.model
        layers = -(-model.num_layers // shape.stages)
        act, _ = self._layer_activation(shape)
        return shape.persistent_bytes(model, stage_params_per_gpu(model, layers, False, False, shape)) + layers * act

    def memory(self, name: str, opts: dict, shape: Context) -> float | None:
        """Lower bound of the peak memory per GPU (bytes); None when the generator refuses."""
        model = self.space.model
        act, part = self._layer_activation(shape)
        sched = self.short(name, opts, shape.stages, shape.sizes.microbatches)
        if sched is None or self.blocked(sched, shape):
            return None
        units = self.layer_units(sched, part / act if sched.split_backward else 1.0)
        params, experts = self._device_params(sched, shape)
        f = shape.offload_activations  # offloaded: the running forward's whole, the others' share left
        persistent = {pe: shape.persistent_bytes(model, *pe) for pe in set(zip(params, experts))}  # few distinct
        return max(persistent[pe] + ((1 - f) * u + f * min(u, 1.0)) * act for pe, u in zip(zip(params, experts), units))

    @staticmethod
    def blocked(sched: Schedule, shape: Context) -> bool:
        """Whether ``sched`` cannot run on ``shape``: offloaded activations with overlapped pairs
        (blocks), whose copy streams the simulator does not model (``solver.offload``)."""
        return bool(shape.offload_activations) and bool(sched.blocks)

    def shape_time(self, shape: Context) -> float:
        """A lower bound of the step time of every schedule on ``shape``, the larger of

        * the whole model's forward and backward (``stage_cost`` of every layer, embedding
          and head on one device, recomputation included) for each microbatch, spread
          evenly over the ``pp`` devices: a sum of roofline times is at least the roofline
          time of the sums and collectives add up, so the stages' ops take at least this
          much together, and the busiest device at least the average;
        * one microbatch's chain: its forwards through every stage, then its input
          gradients back (each waits for the one before; the weight gradients of a split
          backward may wait).

        Collectives run over the cluster's fastest link; no bubble, message, ZeRO-3 gather
        or optimizer step is counted. The expert-parallel all-to-alls stay out of the first
        (overlapped pairs hide them under other ops' compute) but count on the
        communication stream: every device runs its share of them one after the other, so
        a third bound is their sum spread over the devices (and a pair takes at least its
        longer stream)."""
        return self._shape_terms(shape)[0]

    def serial_time(self, shape: Context) -> float:
        """A lower bound of the step time of every schedule without blocks on ``shape``:
        ``shape_time``'s, its first term with the expert-parallel all-to-alls counted (without
        blocks no op hides them: an op's time is its compute plus its collectives). Priced
        from the whole model's stage cost alone (no schedule); cached per shape."""
        return self._shape_terms(shape)[1]

    def _shape_terms(self, shape: Context) -> tuple[float, float]:
        """(``shape_time``, ``serial_time``) of ``shape``; cached."""
        if shape in self.shape_bounds:
            return self.shape_bounds[shape]
        system, model = self.space.system, self.space.model
        ctx = shape.even
        links = fastest_links(system, model, ctx, shape.stages)
        whole, chain = (stage_cost(model, system.device, ctx, model.num_layers, first=True, last=True,
                                   split_backward=split, links=links) for split in (False, True))
        comm = whole.ep_comm_forward_s + whole.ep_comm_backward_s
        work = (whole.forward_s + whole.backward_s - comm) * shape.sizes.microbatches / shape.stages
        all_to_all = comm * shape.sizes.microbatches / shape.stages
        bound = max(work, all_to_all, chain.forward_s + chain.backward_s)
        out = self.shape_bounds[shape] = ((1 - 1e-9) * bound, (1 - 1e-9) * max(bound, work + all_to_all))
        return out

    def costs(self, name: str, opts: dict, shape: Context, sched: Schedule):
        """The costs of the candidate's ops (any instance ``sched`` of it: per-op costs do
        not depend on the number of microbatches, each instance its own global batch); cached
        per schedule structure."""
        from pipetab.solver.pricing import hardware_costs

        # schedules of one structure (placement, stage work, split backward) cost the same, and
        # shapes that differ in the global batch alone (priced without it) too
        key = self._costs_key(shape, sched)
        if key not in self.op_costs:
            self.op_costs[key] = hardware_costs(sched, self.space.system, self.space.model, key[-1])
            self.op_times_.pop(key, None)
        return self.op_costs[key]

    @staticmethod
    def _costs_key(shape: Context, sched: Schedule) -> tuple:
        return (sched.placement.stage2device, sched.stage_work, sched.split_backward,
                shape.replace(global_batch=None))

    def run(self, name: str, opts: dict, shape: Context):
        """The candidate's run (``periodic.periodic_run``: its step time and peaks, from a
        few periods when it is long), or None when the generator refuses it; cached."""

        key = (name, tuple(sorted(opts.items())), shape)
        if key not in self.runs:
            pp, m = shape.stages, shape.sizes.microbatches
            try:
                registry.check_request(name, pp, m, **opts)
            except ValueError:
                self.runs[key] = None
                return None
            short = self.short(name, opts, pp, m) if shape.offload_activations else None
            if short is not None and self.blocked(short, shape):
                self.runs[key] = None
                return None
            self.runs[key] = periodic_run(
                lambda n: self.schedule(name, opts, pp, n),
                lambda s: self.costs(name, opts, shape, s), m, self._simulated, pp)
        return self.runs[key]

    def _simulated(self, sched: Schedule, costs):
        """``solver.offload.simulated``, taken from ``quick``'s short run when that simulated
        the same instance on the same costs (the run's samples include it), once."""
        from pipetab.solver.offload import simulated

        kept = self.sims.pop((id(sched), id(costs)), None)
        if kept is not None and kept[0] is sched and kept[1] is costs:
            return kept[2]
        return simulated(sched, costs)

    def op_times(self, name: str, opts: dict, shape: Context, sched: Schedule) -> tuple[dict, dict]:
        """(op time, chains) of the candidate's ops as ``costs`` has them, from the stages
        alone (``solver.pricing.hardware_op_times``); taken from ``costs`` once that is
        priced; cached as ``costs``."""
        from pipetab.solver.pricing import hardware_op_times

        key = self._costs_key(shape, sched)
        if key in self.op_costs:
            return self.op_costs[key].op_time, self.op_costs[key].chains
        if key not in self.op_times_:
            self.op_times_[key] = hardware_op_times(sched, self.space.system, self.space.model, key[-1])
        return self.op_times_[key]

    def _work(self, sched: Schedule, op_time: dict, chains: dict) -> tuple[list[float], float | None]:
        """(each device's op time, the ops' compute summed over devices, None without
        blocks) of the instance ``sched`` priced by ``op_time`` and ``chains``."""
        from pipetab.solver.simulate import stage_kind_table

        durations = stage_kind_table(sched, lambda k, p, s: op_time.get((k, p, s), 0.0))[sched.codes]
        busy = [float(durations[a:b].sum()) for a, b in itertools.pairwise(sched.offsets.tolist())]
        if not sched.blocks:
            return busy, None
        # a block hides communication only: its time is at least its ops' compute
        comm = stage_kind_table(sched, lambda k, p, s: sum(t for c, t in chains.get((k, p, s), ()) if c))
        return busy, float((durations - comm[sched.codes]).sum())

    def cheap(self, name: str, opts: dict, shape: Context) -> float | None:
        """A lower bound of the step time priced but not simulated (``quick``'s without its
        short run, at most ``quick``'s): the busiest device's op time at ``m`` microbatches
        (``m / n`` times the short instance's: each microbatch brings every device the same
        ops) between its head and tail (``_chain_ends``); with blocks the same in the ops'
        compute alone (a device runs its ops and blocks one after another and a block takes
        at least its ops' compute; a device's first op is a lone forward and, without a split
        backward, its last a lone backward, so head and tail hold too);
        None when the generator refuses."""
        sched = self.short(name, opts, shape.stages, shape.sizes.microbatches)
        if sched is None:
            return None
        m, n = shape.sizes.microbatches, sched.num_microbatches
        op_time, chains = self.op_times(name, opts, shape, sched)
        busy, compute = self._work(sched, op_time, chains)
        if compute is not None:  # a block takes at least its ops' compute: count compute only
            op_time = {key: t - sum(c for is_comm, c in chains.get(key, ()) if is_comm) for key, t in op_time.items()}
            busy, _ = self._work(sched, op_time, {})
        head, tail = _chain_ends(sched, op_time)
        return (1 - 1e-9) * max(h + m * b / n + t for h, b, t in zip(head, busy, tail))

    def copy_time(self, name: str, opts: dict, shape: Context) -> float | None:
        """A lower bound of the step time of an offloading candidate from its copy streams
        alone (``solver.offload``: every forward's activation share goes to the host and
        back before its backward, which waits for it): each device's offloaded bytes (the
        short instance's, times ``m / n``: each microbatch brings every device the same ops)
        cross its D2H engine and then its H2D engine, each at most at its own rate and both
        together at most at the duplex rate, all before its last backward ends; None when
        nothing is offloaded or the generator refuses (or the schedule has blocks)."""
        from pipetab.solver.offload import CopyRates

        m = shape.sizes.microbatches
        sched = self.short(name, opts, shape.stages, m)
        if not shape.offload_activations or sched is None or self.blocked(sched, shape):
            return None
        costs = self.costs(name, opts, shape, sched)
        if costs.host_link is None:
            return None
        rates, ops = CopyRates.of(costs.host_link, costs), sched.ops
        moved = [0.0] * sched.num_devices
        for i in (ops.kind == 0).nonzero()[0].tolist():
            p, st = int(ops.pipeline[i]), int(ops.stage[i])
            moved[int(sched.device[i])] += costs.offload_fraction * costs.activation[(p, st)]
        per_byte = max(1 / rates.d2h, 1 / rates.h2d, 2 / rates.duplex)
        return (1 - 1e-9) * max(moved) * per_byte * m / sched.num_microbatches

    def quick(self, name: str, opts: dict, shape: Context) -> tuple[float, bool] | None:
        """(a lower bound of the step time, whether it is the step itself) from the short
        instance (``short``): the larger of its simulated step and the busiest device's op
        time at ``m`` microbatches (``m / n`` times the short run's: each microbatch brings
        every device the same ops); with blocks (overlapped pairs, whose time is less than
        their ops') the short step plus, for each further microbatch, the average work of a
        device per microbatch (tested for every registry generator with blocks); None
        when the generator refuses."""
        from pipetab.solver.offload import simulated

        m = shape.sizes.microbatches
        sched = self.short(name, opts, shape.stages, m)
        if sched is None or self.blocked(sched, shape):
            return None
        if sched.num_microbatches == m:
            run = self.run(name, opts, shape)
            return None if run is None else (run.makespan, True)
        costs = self.costs(name, opts, shape, sched)
        sim = simulated(sched, costs)
        self.sims[(id(sched), id(costs))] = (sched, costs, sim)  # for ``run``, whose samples include it
        if shape.offload_activations and not all(sim.fits_memory):  # the copies' peaks only grow with m
            self.short_misfits.add((name, tuple(sorted(opts.items())), shape))
        step = sim.makespan
        n = sched.num_microbatches
        busy, compute = self._work(sched, costs.op_time, costs.chains)
        if compute is None:  # a device's ops take their durations: m / n times the short run's, busy
            return max(step, m * max(busy) / n), False
        # each further microbatch brings at least its ops' compute
        return step + (m - n) * compute / (sched.num_devices * n), False

    def short_misfit(self, name: str, opts: dict, shape: Context) -> bool:
        """Whether ``quick``'s short run of an offloading candidate already exceeds the GPU's
        memory: its copies, queued behind more microbatches in the full run, end no sooner,
        so the run's peaks are at least the short run's (the assumption ``memory`` makes of
        every schedule's order peaks) and the run need not be simulated."""
        return (name, tuple(sorted(opts.items())), shape) in self.short_misfits

    def time(self, name: str, opts: dict, shape: Context) -> float | None:
        """The step time of the candidate (``run``: exact, from a few periods when long): a
        bound that needs no more simulation; None when the generator refuses the run."""
        run = self.run(name, opts, shape)
        return None if run is None else run.makespan


def _chain_ends(sched: Schedule, op_time: dict) -> tuple[list[float], list[float]]:
    """Per device, (head, tail): time that must pass before its first op and after its last,
    ignoring messages. Its first op is a forward (a backward follows its own forward on the
    same device) of some stage ``s`` it holds, which waits for the forwards of stages
    ``0 .. s-1`` of that pipeline; without a split backward its last op is a backward of a
    stage ``s`` it holds, after which the backwards of stages ``s-1 .. 0`` of that microbatch
    run (with one, a weight gradient can be last: no tail). The least over the stages it
    holds. With blocks give ``op_time`` the ops' compute alone (a block takes at least that)."""
    from pipetab.schedules.ops import Kind

    head = [float("inf")] * sched.num_devices
    tail = [float("inf") if not sched.split_backward else 0.0] * sched.num_devices
    for p, works in enumerate(sched.stage_work):
        before_f = before_b = 0.0
        for s in range(len(works)):
            d = sched.placement.device(p, s)
            head[d] = min(head[d], before_f)
            if not sched.split_backward:
                tail[d] = min(tail[d], before_b)
            before_f += op_time.get((Kind.F, p, s), 0.0)
            before_b += op_time.get((Kind.B, p, s), 0.0)
    return [0.0 if h == float("inf") else h for h in head], [0.0 if t == float("inf") else t for t in tail]

