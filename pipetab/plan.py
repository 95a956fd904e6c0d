"""``plan``: the best pipeline schedule for a model on a cluster, ranked by simulated step time.

The space: every split of the cluster's GPUs into pipeline x tensor x data parallel degrees
(tensor-parallel groups inside a node, dividing the model's heads), microbatch sizes that
divide the global batch, recomputation options, and every registry schedule (with the
variants in ``VARIANTS``) that accepts the shape. Each candidate is judged by the level-3
simulation (``hardware_costs`` + ``simulate``) and ranked by step time among those that fit
the GPU memory; the configurations shown are evaluated at all levels (``evaluate_levels``,
which validates their tables). CP-SAT then searches the linear placement of the best shapes
under the memory cap (``pipetab.solver.cpsat.search``) and adds what it finds.

Pruning, exact for the ranking shown:

* memory: a lower bound per candidate — the exact persistent memory of each device plus its
  peak activation count on an instance of at most ``4 * pp`` microbatches (the peak only
  grows with more microbatches; tested) times one layer's activation — drops candidates that
  cannot fit before anything is simulated; the memory of a candidate's full instance, exact
  from its per-device orders, is checked before it is simulated;
* time: a candidate's step is at least the simulated step of its instance of at most
  ``4 * pp`` microbatches plus, for each further microbatch, the average work of a device
  per microbatch (every registry generator repeats a steady pattern per microbatch, so a
  longer run adds at least that; tested); candidates are simulated in the order of this
  bound, and simulation stops once the bound exceeds the ``top``-th best step time that
  fits.

What it leaves out (``docs/cluster.md``): context and expert parallelism, interleaved or V
placements searched by CP-SAT, uneven layer splits, overlap of tensor-parallel
communication, and pipeline degree 1 (no schedule to choose).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from pipetab.hardware.layer import (
    RECOMPUTE,
    activation_bytes_per_layer,
    model_flops_per_sequence,
    stage_params_per_gpu,
    weight_memory_bytes_per_layer,
)
from pipetab.hardware.costs import stage_cost
from pipetab.hardware.loaders import load_model, load_system
from pipetab.hardware.model import TransformerModel, partition
from pipetab.hardware.parallel import Layout, Parallel
from pipetab.hardware.system import System
from pipetab.schedules import registry
from pipetab.schedules.memory import memory_change
from pipetab.schedules.ops import Kind
from pipetab.schedules.schedule import Schedule

GPUS = {"H100": "dgx_h100_ib", "A100": "a100_cluster"}
# registry schedules with more than their default options
VARIANTS: dict[str, tuple[dict, ...]] = {
    "interleaved": ({"chunks": 2}, {"chunks": 4}),
    "hanayo": ({"waves": 1}, {"waves": 2}),
}
MAX_TOKENS_PER_MICROBATCH = 32768  # default microbatch sizes: powers of two up to this many tokens


def schedule_label(name: str, options: dict) -> str:
    """``interleaved(chunks=4)``, ``chimera-asym(split=1:2)``, ``1f1b``."""
    def text(v):
        return ":".join(map(str, v)) if isinstance(v, tuple) else str(v)

    opts = ",".join(f"{k}={text(v)}" for k, v in sorted(options.items()))
    return f"{name}({opts})" if opts else name


def _count(what: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r}")


def cluster(gpu_or_system: str | System, nodes: int, gpus_per_node: int) -> System:
    """``nodes`` nodes of ``gpus_per_node`` GPUs: the device, intra-node and inter-node links
    of a GPU name (``GPUS``), a system preset or file; ``num_devices = nodes x gpus_per_node``."""
    _count("nodes", nodes)
    _count("gpus per node", gpus_per_node)
    if isinstance(gpu_or_system, str) and gpu_or_system.upper() in GPUS:
        gpu_or_system = GPUS[gpu_or_system.upper()]
    base = load_system(gpu_or_system)
    intra = base.intra_node_link or base.default_link
    return System(f"{nodes}x{gpus_per_node} {base.name}", base.device, base.default_link,
                  nodes * gpus_per_node, (), gpus_per_node, intra, base.summary)


@dataclass(frozen=True)
class Shape:
    """A split of the cluster and a batch layout: ``pp`` x ``tp`` x ``dp`` GPUs, microbatches
    of ``microbatch_size`` sequences, ``microbatches`` per replica, ``recompute``."""

    pp: int
    tp: int
    dp: int
    microbatch_size: int
    microbatches: int
    recompute: str

    def parallel(self, sequence_parallel: bool, zero: int, overlap: bool) -> Parallel:
        return Parallel(tp=self.tp, dp=self.dp, sequence_parallel=sequence_parallel and self.tp > 1,
                        zero=zero if self.dp > 1 else 0, overlap=overlap)


@dataclass(frozen=True)
class Configuration:
    """One ranked candidate: a schedule (``source`` ``registry`` or ``cpsat``) on a shape,
    its simulated step time, throughput, MFU and peak memory per GPU against the usable
    capacity."""

    schedule: str
    options: tuple[tuple[str, object], ...]
    shape: Shape
    step_time_s: float
    tokens_per_s: float
    mfu: float
    peak_memory_bytes: int
    capacity_bytes: int
    fits: bool
    idle_ratio: float
    source: str = "registry"
    levels: object = field(default=None, compare=False, repr=False)
    searched: Schedule | None = field(default=None, compare=False, repr=False)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_memory_bytes

    @property
    def label(self) -> str:
        return schedule_label(self.schedule, dict(self.options))

    def as_dict(self) -> dict:
        s = self.shape
        return {
            "schedule": self.schedule, "options": {k: v for k, v in self.options}, "source": self.source,
            "pp": s.pp, "tp": s.tp, "dp": s.dp, "microbatch_size": s.microbatch_size,
            "microbatches": s.microbatches, "recompute": s.recompute,
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
            "peak_memory_bytes": self.peak_memory_bytes, "capacity_bytes": self.capacity_bytes,
            "headroom_bytes": self.headroom_bytes, "fits": self.fits, "idle_ratio": self.idle_ratio,
        }


@dataclass(frozen=True)
class Plan:
    """The ranked configurations (fitting ones first, each group by step time) and what
    the search did: candidates enumerated, pruned by the memory and time bounds, simulated,
    and CP-SAT's notes."""

    configurations: tuple[Configuration, ...]
    candidates: int
    pruned_memory: int
    pruned_time: int
    simulated: int
    cpsat_notes: tuple[str, ...]
    runtime_s: float
    question: dict
    evaluated: tuple[Configuration, ...] = ()  # every simulated candidate, ranked (for plots)

    def as_dict(self) -> dict:
        return {
            **self.question,
            "candidates": self.candidates, "pruned_by_memory_bound": self.pruned_memory,
            "pruned_by_time_bound": self.pruned_time, "simulated": self.simulated,
            "cpsat": list(self.cpsat_notes), "runtime_s": round(self.runtime_s, 3),
            "configurations": [c.as_dict() for c in self.configurations],
        }


@dataclass(frozen=True)
class PlanSpace:
    """The question: ``model`` with ``global_batch`` sequences per step on ``system`` (a
    ``cluster``), and which options to search. Empty tuples mean the defaults: microbatch
    sizes powers of two up to ``MAX_TOKENS_PER_MICROBATCH`` tokens, every recompute option
    (``selective`` only with classic attention), every registry schedule."""

    model: TransformerModel
    system: System
    global_batch: int
    microbatch_sizes: tuple[int, ...] = ()
    recompute: tuple[str, ...] = ()
    schedules: tuple[str, ...] = ()
    zero: int = 1
    sequence_parallel: bool = True
    overlap: bool = True
    top: int = 10
    cpsat_shapes: int = 2
    cpsat_time_s: float = 3.0

    def __post_init__(self) -> None:
        _count("global batch", self.global_batch)
        _count("top", self.top)
        if self.system.num_devices is None or self.system.devices_per_node is None:
            raise ValueError("plan needs a cluster with a number of GPUs and GPUs per node (use plan.cluster)")
        for b in self.microbatch_sizes:
            _count("microbatch size", b)
        for r in self.recompute:
            if r not in RECOMPUTE:
                raise ValueError(f"recompute must be among {', '.join(RECOMPUTE)}, got {r!r}")
        for name in self.schedules:
            registry.spec(name)
        if self.zero not in (0, 1, 2):
            raise ValueError(f"zero must be 0, 1 or 2, got {self.zero!r}")
        if not (isinstance(self.cpsat_shapes, int) and self.cpsat_shapes >= 0):
            raise ValueError(f"cpsat shapes must be an integer >= 0, got {self.cpsat_shapes!r}")
        if not (math.isfinite(self.cpsat_time_s) and self.cpsat_time_s > 0):
            raise ValueError(f"cpsat time must be a number of seconds > 0, got {self.cpsat_time_s!r}")

    @property
    def num_gpus(self) -> int:
        return self.system.num_devices  # type: ignore[return-value]

    def sizes(self) -> tuple[int, ...]:
        if self.microbatch_sizes:
            return self.microbatch_sizes
        out, b = [], 1
        while b * self.model.seq_len <= MAX_TOKENS_PER_MICROBATCH and b <= self.global_batch:
            out.append(b)
            b *= 2
        return tuple(out) or (1,)

    def recomputes(self) -> tuple[str, ...]:
        if self.recompute:
            return self.recompute
        return tuple(r for r in RECOMPUTE if not (r == "selective" and self.model.attention == "flash"))

    def variants(self) -> list[tuple[str, dict]]:
        """(schedule, options) pairs: each registry schedule with its default options, or the
        ``VARIANTS`` listed for it."""
        names = self.schedules or tuple(registry.REGISTRY)
        out = []
        for n in names:
            defaults = {o.name: o.default for o in registry.spec(n).options}
            out += [(n, {**defaults, **o}) for o in VARIANTS.get(n, ({},))]
        return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def shapes(space: PlanSpace) -> list[Shape]:
    """Every (pp, tp, dp) split with tp inside a node dividing the model, pp >= 2, and every
    microbatch size and recompute option the global batch allows."""
    model, G, N = space.model, space.system.devices_per_node, space.num_gpus
    out = []
    for tp in _divisors(G):  # type: ignore[arg-type]
        try:
            Parallel(tp=tp).check(model)
        except ValueError:
            continue
        for pp in _divisors(N // tp):
            if pp < 2 or pp > model.num_layers or (N // tp) % pp:
                continue
            dp = N // (tp * pp)
            for b in space.sizes():
                if space.global_batch % (dp * b):
                    continue
                for rc in space.recomputes():
                    out.append(Shape(pp, tp, dp, b, space.global_batch // (dp * b), rc))
    return out


# ---- bounds --------------------------------------------------------------------------------
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


def _small_microbatches(pp: int, m: int) -> int:
    """At most ``4 pp`` microbatches with the same divisibility by ``pp`` and ``2 pp``."""
    return 4 * pp if m > 4 * pp and m % (2 * pp) == 0 else m


class _Bounds:
    """Cached generation and per-candidate lower bounds."""

    def __init__(self, space: PlanSpace) -> None:
        self.space = space
        self.schedules: dict = {}
        self.units: dict = {}

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

    def memory(self, name: str, opts: dict, shape: Shape, par: Parallel) -> float | None:
        """Lower bound of the peak memory per GPU (bytes); None when the generator refuses."""
        model = self.space.model
        act = activation_bytes_per_layer(model, shape.microbatch_size, shape.recompute, tp=par.tp,
                                         sequence_parallel=par.sequence_parallel)
        part = weight_memory_bytes_per_layer(model, shape.microbatch_size, shape.recompute, tp=par.tp,
                                             sequence_parallel=par.sequence_parallel)
        sched = self.schedule(name, opts, shape.pp, _small_microbatches(shape.pp, shape.microbatches))
        if sched is None:
            return None
        units = self.layer_units(sched, part / act if sched.split_backward else 1.0)
        params = [0] * sched.num_devices  # type: ignore[union-attr]
        for p, w in enumerate(sched.stage_work):  # type: ignore[union-attr]
            counts = partition(w, model.num_layers)
            for s, n in enumerate(counts):
                params[sched.placement.device(p, s)] += stage_params_per_gpu(  # type: ignore[union-attr]
                    model, n, s == 0, s == len(counts) - 1, par.tp)
        return max(par.persistent_bytes(model, n) + u * act for n, u in zip(params, units))

    def time(self, name: str, opts: dict, shape: Shape, par: Parallel) -> float:
        """Lower bound of the step time: the simulated step of the instance of at most ``4 pp``
        microbatches, plus the average device work of each further microbatch (module
        docstring); exact when the instance is the shape itself."""
        from pipetab.solver.costs import hardware_costs
        from pipetab.solver.simulate import simulate

        small_m = _small_microbatches(shape.pp, shape.microbatches)
        sched = self.schedule(name, opts, shape.pp, small_m)
        costs = hardware_costs(sched, self.space.system, self.space.model, shape.recompute,  # type: ignore[arg-type]
                               parallel=par, microbatch_size=shape.microbatch_size)
        step = simulate(sched, costs).makespan  # type: ignore[arg-type]
        if small_m == shape.microbatches:
            return step
        work = sum(costs.duration(op) for order in sched.orders for op in order)  # type: ignore[union-attr]
        return step + (shape.microbatches - small_m) * work / (sched.num_devices * small_m)  # type: ignore[union-attr]


# ---- the search ------------------------------------------------------------------------------
def _configuration(space: PlanSpace, name: str, opts: dict, shape: Shape, sched: Schedule, costs,
                   step: float, acts: list[float], searched: Schedule | None = None,
                   capacity: float | None = None) -> Configuration:
    """A ranked candidate from its simulated step time and its peak activations per device
    (``order_peaks``: the simulator's memory definition); busy time from the op durations."""
    model, system = space.model, space.system
    peak = max(p + a for p, a in zip(costs.persistent, acts))
    fits = all(c is None or p + a <= c + 1e-9 for p, a, c in zip(costs.persistent, acts, costs.capacity))
    per_pipeline = [sched.microbatch2pipeline.count(p) for p in range(sched.num_pipelines)]
    busy = sum(n * costs.op_time[(kind, p, s)] for (kind, p, s) in costs.op_time
               for n in (per_pipeline[p],)) + sum(costs.optimizer_time)
    tokens = space.global_batch * model.seq_len
    flops = model_flops_per_sequence(model) * space.global_batch
    return Configuration(
        name, tuple(sorted(opts.items())), shape, step, tokens / step,
        flops / (step * space.num_gpus * system.device.peak_flops),
        int(round(peak)), int(capacity or system.device.usable_memory_bytes), fits,
        1 - busy / (sched.num_devices * step), "registry" if searched is None else "cpsat",
        searched=searched)


def _activation_peaks(sched: Schedule, costs) -> list[float]:
    return order_peaks(sched, costs.activation, {k: costs.weight_part(*k) for k in costs.activation})


def _rank(configs) -> list[Configuration]:
    return sorted(configs, key=lambda c: (not c.fits, c.step_time_s, c.schedule))


def plan(space: PlanSpace, progress: Callable[[str], None] | None = None, profile=None) -> Plan:
    """Search ``space`` (module docstring) and rank what fits by simulated step time.
    With a ``profile`` (``hardware.Profile``) the split, microbatch size and op costs are
    the profiled run's, and only the schedules vary (``plan_profiled``)."""
    from pipetab.solver.costs import hardware_costs
    from pipetab.solver.simulate import simulate

    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    if profile is not None:
        return plan_profiled(space, profile, say, t0)
    bounds = _Bounds(space)
    pool = _worker_pool(min(2, space.cpsat_shapes)) if space.cpsat_shapes else None
    if pool:
        for _ in range(min(2, space.cpsat_shapes)):
            pool.submit(int)  # fork now, while the process is small
    cap = space.system.device.usable_memory_bytes
    candidates, misfits = [], []
    all_shapes = shapes(space)
    total = len(all_shapes) * len(space.variants())
    say(f"{len(all_shapes)} shapes x {len(space.variants())} schedules = {total} candidates")
    for shape in all_shapes:
        par = shape.parallel(space.sequence_parallel, space.zero, space.overlap)
        for name, opts in space.variants():
            need = bounds.memory(name, opts, shape, par)
            if need is None:
                continue
            if need > cap:
                misfits.append((need, name, opts, shape, par))
                continue
            candidates.append((bounds.time(name, opts, shape, par), name, opts, shape, par))
    candidates.sort(key=lambda c: (c[0], c[1]))
    say(f"{len(candidates)} candidates pass the memory bound ({len(misfits)} cannot fit); simulating by time bound")
    results: list[Configuration] = []
    fitting: list[float] = []
    too_big: list[tuple] = []
    simulated = visited = 0
    last_note = time.perf_counter()
    for bound, name, opts, shape, par in candidates:
        if len(fitting) >= space.top and bound >= sorted(fitting)[space.top - 1]:
            break
        visited += 1
        sched = bounds.schedule(name, opts, shape.pp, shape.microbatches)
        if sched is None:  # the generator refuses the full count (a smaller instance passed)
            continue
        costs = hardware_costs(sched, space.system, space.model, shape.recompute, parallel=par,
                               microbatch_size=shape.microbatch_size)
        acts = _activation_peaks(sched, costs)
        if any(c is not None and p + a > c + 1e-9 for p, a, c in zip(costs.persistent, acts, costs.capacity)):
            too_big.append((name, opts, shape, sched, (costs, acts)))
            continue
        conf = _configuration(space, name, opts, shape, sched, costs, simulate(sched, costs).makespan, acts)
        simulated += 1
        results.append(conf)
        fitting.append(conf.step_time_s)
        if time.perf_counter() - last_note > 2:
            say(f"simulated {simulated} of {len(candidates)}")
            last_note = time.perf_counter()
    pruned_time = len(candidates) - visited
    pruned_memory = len(misfits) + len(too_big)
    # fewer fit than asked for: show the closest misfits (least memory first), ranked after
    too_big += [(name, opts, shape, None, par) for _, name, opts, shape, par in sorted(misfits, key=lambda m: m[0])]
    for name, opts, shape, sched, extra in too_big:
        if len(results) >= space.top:
            break
        if sched is None:
            sched = bounds.schedule(name, opts, shape.pp, shape.microbatches)
            if sched is None:
                continue
            costs = hardware_costs(sched, space.system, space.model, shape.recompute, parallel=extra,
                                   microbatch_size=shape.microbatch_size)
            acts = _activation_peaks(sched, costs)
        else:
            costs, acts = extra
        results.append(_configuration(space, name, opts, shape, sched, costs, simulate(sched, costs).makespan, acts))
        simulated += 1
        pruned_memory -= 1
    ranked = _rank(results)
    jobs = []
    for shape in _cpsat_shapes(space, ranked):  # CP-SAT in a worker while the main process validates
        say(f"CP-SAT: searching PP{shape.pp} TP{shape.tp} DP{shape.dp} b={shape.microbatch_size} "
            f"m={shape.microbatches} for {space.cpsat_time_s:g} s")
        jobs.append((shape, pool.submit(cpsat_search, space, shape) if pool else None))
    say(f"validating the {min(len(ranked), space.top)} best configurations")
    checked = {id(c): _validated(space, c, bounds) for c in ranked[:space.top]}
    notes = [_cpsat_outcome(space, shape, job.result() if job else cpsat_search(space, shape), ranked)
             for shape, job in jobs]
    if pool:
        pool.shutdown()
    ranked = _rank(ranked + [c for c, _ in notes if c is not None])
    shown = [checked.get(id(c)) or _validated(space, c, bounds) for c in ranked[:space.top]]
    return Plan(tuple(shown), total, pruned_memory, pruned_time, simulated,
                tuple(n for _, n in notes), time.perf_counter() - t0, _question(space), tuple(ranked))


def _question(space: PlanSpace, profile=None) -> dict:
    out = {"model": space.model.name, "gpus": space.num_gpus,
           "gpus_per_node": space.system.devices_per_node, "system": space.system.name,
           "global_batch": space.global_batch, "seq_len": space.model.seq_len}
    if profile is not None:
        out["profile"] = profile.name
    return out


def plan_profiled(space: PlanSpace, profile, say, t0: float) -> Plan:
    """Every registry schedule on the profiled shape (its stages, ``tp``, ``dp`` and
    microbatch size; the microbatches follow from the global batch), costs from the
    profile (``solver.costs.profile_costs``), memory against the profile's ``memory_bytes``
    or else the GPU's usable memory."""
    from pipetab.solver.costs import profile_costs
    from pipetab.solver.simulate import simulate

    tp, dp, b, n = profile.tp, profile.dp, profile.microbatch_size, space.num_gpus
    if b is None:
        raise ValueError(f"profile {profile.name!r} gives no 'microbatch_size': plan needs it")
    pp = profile.num_stages or n // (tp * dp)
    if pp * tp * dp != n:
        raise ValueError(f"profile {profile.name!r} describes {pp} stages x TP {tp} x DP {dp} GPUs, "
                         f"the cluster has {n}")
    if space.global_batch % (dp * b):
        raise ValueError(f"global batch {space.global_batch} is not a multiple of DP {dp} x microbatch size {b}")
    shape = Shape(pp, tp, dp, b, space.global_batch // (dp * b), "profiled")
    capacity = profile.memory_bytes or space.system.device.usable_memory_bytes
    results, skipped = [], 0
    for name, opts in space.variants():
        try:
            sched = registry.generate(name, pp, shape.microbatches, **opts)
            costs = replace(profile_costs(sched, profile), capacity=(capacity,) * pp)
        except ValueError:
            skipped += 1
            continue
        say(f"simulating {schedule_label(name, opts)} on the profile")
        results.append(_configuration(space, name, opts, shape, sched, costs, simulate(sched, costs).makespan,
                                      _activation_peaks(sched, costs), capacity=capacity))
    shown = _rank(results)[:space.top]
    validated = []
    for c in shown:
        sched = registry.generate(c.schedule, pp, shape.microbatches, **dict(c.options))
        validated.append(_validated(space, c, None, replace(profile_costs(sched, profile), capacity=(capacity,) * pp),
                                    sched))
    total = len(space.variants())
    return Plan(tuple(validated), total, 0, 0, len(results),
                (f"not run: the profile fixes the op times of one shape ({skipped} schedules do not apply)",),
                time.perf_counter() - t0, _question(space, profile), tuple(_rank(results)))


def _costs_of(space: PlanSpace, sched: Schedule, shape: Shape):
    from pipetab.solver.costs import hardware_costs

    par = shape.parallel(space.sequence_parallel, space.zero, space.overlap)
    return hardware_costs(sched, space.system, space.model, shape.recompute, parallel=par,
                          microbatch_size=shape.microbatch_size)


def _validated(space: PlanSpace, conf: Configuration, bounds: _Bounds | None, costs=None,
               sched: Schedule | None = None) -> Configuration:
    """``conf`` with its levels (``evaluate_levels`` validates the table; its simulation
    must give the ranked step time)."""
    from pipetab.solver.levels import evaluate_levels

    sched = sched or conf.searched or bounds.schedule(  # type: ignore[union-attr]
        conf.schedule, dict(conf.options), conf.shape.pp, conf.shape.microbatches)
    levels = evaluate_levels(sched, costs=costs or _costs_of(space, sched, conf.shape))
    if abs(levels.simulation.makespan - conf.step_time_s) > 1e-9 * conf.step_time_s:
        raise AssertionError(f"{conf.label}: evaluate_levels gives {levels.simulation.makespan} s, "
                             f"the plan ranked {conf.step_time_s} s")
    return replace(conf, levels=levels)


def _cpsat_shapes(space: PlanSpace, ranked: list[Configuration]) -> list[Shape]:
    """The best ``space.cpsat_shapes`` distinct shapes that fit."""
    out: list[Shape] = []
    for conf in ranked:
        if len(out) >= space.cpsat_shapes or not conf.fits:
            break
        if conf.shape not in out:
            out.append(conf.shape)
    return out


def cpsat_search(space: PlanSpace, shape: Shape):
    """CP-SAT search of the linear placement (full backward, 1F1B and GPipe as hints) of
    ``shape`` on its quantized hardware costs under the memory cap; returns the ``Result``."""
    from pipetab.solver.costs import SEARCH_TICKS_PER_OP
    from pipetab.solver.cpsat import CpSatConfig, idealized_problem, search

    known = []
    for name in ("1f1b", "gpipe"):
        try:
            known.append(registry.generate(name, shape.pp, shape.microbatches))
        except ValueError:
            continue
    costs = _costs_of(space, known[0], shape)
    quantized = costs.quantized(costs.default_tick(SEARCH_TICKS_PER_OP))
    problem = replace(idealized_problem(shape.pp, shape.microbatches, "linear"), costs=quantized,
                      name=f"plan {shape}")
    return search(problem, CpSatConfig(time_limit_s=space.cpsat_time_s, workers=1), known)


def _cpsat_outcome(space: PlanSpace, shape: Shape, result, ranked: list[Configuration]) -> tuple:
    """(configuration when it beats the shape's best registry schedule, else None; note)."""
    from pipetab.solver.simulate import simulate

    where = f"PP{shape.pp} TP{shape.tp} DP{shape.dp} b={shape.microbatch_size} recompute {shape.recompute}"
    if result.schedule is None:
        return None, f"{where}: no schedule within {space.cpsat_time_s:g} s ({result.status})"
    sched = result.schedule
    costs = _costs_of(space, sched, shape)
    found = _configuration(space, "cpsat", {}, shape, sched, costs, simulate(sched, costs).makespan,
                           _activation_peaks(sched, costs), searched=sched)
    best = min((c.step_time_s for c in ranked if c.shape == shape and c.fits), default=math.inf)
    better = found.fits and found.step_time_s < best * (1 - 1e-9)
    gain = (best - found.step_time_s) / best if math.isfinite(best) else 0.0
    return (found if better else None,
            f"{where}: {result.status} in {result.runtime_s:.1f} s, {found.step_time_s:.6g} s "
            f"({100 * gain:+.3f}% against the best registry schedule of this shape{'' if better else '; not shown'})")


def _worker_pool(workers: int):
    """Forked workers for CP-SAT (one solver thread each), so the searches overlap the
    validation on the other core (None where processes cannot be forked: CP-SAT then runs
    inline)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    except ValueError:
        return None


def plan_question(model: str | TransformerModel, nodes: int, gpus_per_node: int, global_batch: int,
                  gpu: str = "H100", seq_len: int | None = None, **options) -> PlanSpace:
    """A ``PlanSpace`` from plain arguments: model preset or file, cluster size, GPU name or
    system, global batch in sequences, optional sequence length; ``options`` are the other
    ``PlanSpace`` fields."""
    m = load_model(model)
    if seq_len is not None:
        _count("sequence length", seq_len)
        m = replace(m, seq_len=seq_len)
    return PlanSpace(m, cluster(gpu, nodes, gpus_per_node), global_batch, **options)
