"""The step time and peak memory of a long run from a few periods of it.

Every registry schedule is warm-up + a steady state that repeats a pattern of ``p``
microbatches + cool-down: with one more period the steady state runs once more and the
warm-up and cool-down stay as they are. The simulator's makespan is a max-plus function of
the op times (identical for every microbatch), so ``T(m + p) - T(m)`` is non-decreasing
in ``m`` and ends at the steady state's growth per period; each device's peak live
activation (a running sum along its order) grows by a constant once its in-flight
microbatches stop changing. The growth can change late: while the busiest device still
has idle time in the steady state, extra work fills it and the makespan grows by less than
that device's work per period until it is full (DualPipeV on two devices: 67.0 ms per
microbatch up to 14 microbatches, 67.9 ms after).

``periodic_run`` therefore simulates four instances ``m0, m0 + p, m0 + 2p, m0 + 3p``
aligned with ``m`` (``m0`` at least twice the devices; ``p`` each of 1, 2, S, 2S, 4S the
generator accepts in turn: DualPipeV's makespan grows by alternating steps, period 2) and
extrapolates to ``m`` when their three makespan differences agree, are at least the
busiest device's added busy time per period (its work is then the step's growth: the
steady state is reached) and every device's peak grows by equal steps; otherwise, or when
the samples would not be shorter, it simulates ``m`` itself (a slow device's slack can take
as many microbatches to fill as the run has: interleaved 1F1B on 16 devices whose last
stage holds the LM head).
A steady state whose growth rises again after such agreement (a communication cycle
slower than every device) is not excluded in theory; ``tests/plan/test_plan_periodic.py``
checks the extrapolation against the full simulation for every generator on a grid of
(S, B).

The work is then that of four instances of a few times ``S`` microbatches, whatever the
global batch: what keeps ``plan`` fast when a pipeline runs thousands of microbatches.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from pipetab.schedules.memory import memory_deltas

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule
    from pipetab.solver.costs import Costs
    from pipetab.solver.simulate import Simulation

SAMPLES = 4  # instances simulated: three differences must agree
REL_TOL = 1e-9  # differences agree to this share of the makespan (float sums in another order)


@dataclass(frozen=True)
class PeriodicRun:
    """A run of ``microbatches`` microbatches: its simulated ``makespan`` and per-device
    activation ``peaks`` (``order_peaks``), found on ``schedule`` (the run itself,
    or the largest instance simulated when ``extrapolated``) with ``costs``;
    ``schedule_makespan``: the simulated step of ``schedule`` itself."""

    microbatches: int
    makespan: float
    peaks: tuple[float, ...]
    schedule: Schedule
    costs: Costs
    extrapolated: bool
    schedule_makespan: float

    @property
    def scale(self) -> float:
        """Microbatches of the run per microbatch of ``schedule``."""
        return self.microbatches / self.schedule.num_microbatches


def order_peaks(schedule: Schedule, size: Mapping, part: Mapping) -> list[float]:
    """Peak live activation per device from the per-device orders alone (a device runs its
    ops one after another, so the peak does not depend on timing); ``size`` / ``part``: M
    and M_W per (pipeline, stage), changes as ``schedules.memory.memory_change`` defines
    (vectorized over the schedule's op arrays: ``memory_deltas``)."""
    ops, offsets = schedule.orders.ops, schedule.orders.offsets
    pipes = max(size)[0] + 1
    stages = max(s for _, s in size) + 1
    grid_m, grid_w = np.zeros((pipes, stages)), np.zeros((pipes, stages))
    for (p, s), v in size.items():
        grid_m[p, s], grid_w[p, s] = v, part[(p, s)]
    deltas = memory_deltas(ops.kind, grid_m[ops.pipeline, ops.stage], grid_w[ops.pipeline, ops.stage],
                           schedule.split_backward)
    peaks = []
    for a, b in itertools.pairwise(offsets.tolist()):
        run = np.cumsum(deltas[a:b])
        peaks.append(max(0.0, float(run.max())) if b > a else 0.0)
    return peaks


def activation_peaks(sched: Schedule, costs) -> list[float]:
    """``order_peaks`` with the sizes and weight parts of ``costs``."""
    return order_peaks(sched, costs.activation, {k: costs.weight_part(*k) for k in costs.activation})


def run_peaks(sim: Simulation) -> list[float]:
    """Each device's peak activation memory in ``sim``: ``activation_peaks`` of its orders (no
    timing needed), or the simulation's own where its costs offload activations (the copies'
    timing frees and refills memory: ``solver.offload``)."""
    if sim.costs.offload_fraction:
        return list(sim.peak_activation)
    return activation_peaks(sim.schedule, sim.costs)


def sample_sizes(m: int, stages: int) -> list[list[int]]:
    """For each period ``p`` of 1, 2, S, 2S, 4S, ``SAMPLES`` instance sizes ``m0 + i p``
    with ``m0 >= 2 stages + p``, ``m0 + 3p < m`` and ``m - m0`` a multiple of ``p``
    (module docstring); none when ``m`` is too short."""
    out = []
    for p in sorted({1, 2, stages, 2 * stages, 4 * stages}):
        low = 2 * stages + p
        if m < low + SAMPLES * p:
            break
        m0 = m - p * ((m - low) // p)
        out.append([m0 + i * p for i in range(SAMPLES)])
    return out


def _agree(values: list[float], scale: float) -> bool:
    diffs = [b - a for a, b in itertools.pairwise(values)]
    return all(abs(d - diffs[0]) <= REL_TOL * max(scale, 1e-300) for d in diffs)


def _extend(values: list[float], steps: float) -> float:
    return values[-1] + steps * (values[-1] - values[-2])


def busy_times(sim: Simulation) -> list[float]:
    """Per device, the time its ops run (a block's ops share one interval, counted once)."""
    offsets = sim.schedule.orders.offsets.tolist()
    out = []
    for a, b in itertools.pairwise(offsets):
        starts, ends = sim.start_times[a:b], sim.end_times[a:b]
        first = np.ones(b - a, bool)
        first[1:] = starts[1:] != starts[:-1]
        out.append(float(np.sum(ends[first] - starts[first])))
    return out


def _steady(sims: list[Simulation], peaks: list[list[float]]) -> bool:
    """Whether the samples show the steady state (module docstring)."""
    spans = [s.makespan for s in sims]
    if not np.isfinite(spans).all():
        return False
    growth = spans[-1] - spans[-2]
    work = max(b - a for a, b in zip(busy_times(sims[-2]), busy_times(sims[-1])))
    return (_agree(spans, spans[-1]) and growth >= work - REL_TOL * spans[-1]
            and all(_agree(list(v), max(max(v), 1.0)) for v in zip(*peaks)))


def periodic_run(generate: Callable[[int], Schedule | None], costs_of: Callable[[Schedule], Costs],
                 m: int, simulate: Callable[[Schedule, Costs], Simulation],
                 stages: int | None = None) -> PeriodicRun | None:
    """The run of ``m`` microbatches (module docstring): ``generate(n)`` the schedule of
    ``n`` microbatches (None when refused), ``costs_of`` its costs (computed once, on the
    first instance: per-op costs do not depend on the number of microbatches),
    ``simulate`` the simulator, ``stages`` the devices (default: the run's, which is then
    generated first). The run itself is generated only when it is not extrapolated: a
    generator that accepts the four instances aligned with ``m`` accepts ``m`` (regimes
    are lower bounds and divisibility). None when ``generate(m)`` refuses."""
    if stages is None:
        first = generate(m)
        if first is None:
            return None
        stages = first.num_devices
    costs = None
    for sizes in sample_sizes(m, stages):
        made = [generate(n) for n in sizes]
        scheds = [s for s in made if s is not None]
        if len(scheds) < len(made):
            continue
        costs = costs or costs_of(scheds[0])
        sims = [simulate(s, costs) for s in scheds]
        peaks = [run_peaks(sim) for sim in sims]
        if _steady(sims, peaks):
            steps = (m - sizes[-1]) / (sizes[1] - sizes[0])
            return PeriodicRun(m, _extend([s.makespan for s in sims], steps),
                               tuple(_extend(list(v), steps) for v in zip(*peaks)), scheds[-1],
                               costs, True, sims[-1].makespan)
    full = generate(m)
    if full is None:
        return None
    costs = costs or costs_of(full)
    sim = simulate(full, costs)
    return PeriodicRun(m, sim.makespan, tuple(run_peaks(sim)), full, costs, False, sim.makespan)
