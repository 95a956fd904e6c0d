"""Activation offload on a copy stream, and optimizer-state offload, in the level-3 simulator.

An offloaded activation of (pipeline p, stage s, microbatch m) moves a ``fraction`` of the
stage's activation M to host memory and back:

* **D2H** is issued when F(p, s, m) ends; **H2D** (the prefetch) when the op ``prefetch``
  places before B(p, s, m) in its device's order starts (or, if later, when the D2H has
  ended); B waits for the H2D's end — its **exposure** when the stream cannot keep up.
* Each device has one copy engine per direction, each first come first served; a copy
  alone runs at its direction's bandwidth, two (one each way) at once share ``duplex``
  (``CopyRates.shared``): the contention PCIe shows (experiments/measured/h200_2026-11-28:
  52.7 / 54.8 GB/s alone, 92-96 GB/s both ways together). Copies overlap compute.
* Device memory: F allocates M at its start as always; the offloaded part is freed at the
  D2H's end and allocated again at the H2D's start (B and W release as ``schedules.memory``
  says). Host memory holds it from the D2H's start to the H2D's end.

Everything else is the plain simulator's rule (``solver.simulate``): with no offloaded
activation, or an infinitely fast host link, ``simulate_offload`` gives ``simulate``'s times.
Blocks (overlapped pairs) and link contention are refused here, not ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from .simulate import Simulation, _messages, _tails, stage_kind_table

if TYPE_CHECKING:
    from pipetab.hardware.system import HostLink
    from pipetab.schedules.schedule import Schedule

    from .costs import Costs

D2H, H2D = 0, 1


@dataclass(frozen=True)
class CopyRates:
    """The host link in the costs' units (memory units of ``Costs.activation`` per unit of
    ``Costs.op_time``): each direction alone, and both at once in total (``duplex``)."""

    d2h: float
    h2d: float
    duplex: float = math.inf

    def __post_init__(self) -> None:
        for what in ("d2h", "h2d", "duplex"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"copy rate {what} must be > 0, got {value!r}")

    @classmethod
    def of(cls, link: HostLink, costs: Costs) -> "CopyRates":
        """``link`` (bytes/s) in the units of ``costs`` (seconds, or ticks of ``tick_s``)."""
        if costs.unit == "s":
            scale = 1.0
        elif costs.unit == "ticks" and costs.tick_s:
            scale = costs.tick_s
        else:
            raise ValueError(f"costs in {costs.unit} have no bytes per second; give CopyRates directly")
        return cls(link.d2h * scale, link.h2d * scale, link.duplex * scale)

    def shared(self, both: bool) -> tuple[float, float]:
        """(D2H, H2D) rates when ``both`` directions copy at once (else each alone): each
        direction at most its own rate, together at most ``duplex``, split evenly unless one
        cannot use its half."""
        if not both:
            return self.d2h, self.h2d
        half = self.duplex / 2
        return min(self.d2h, max(half, self.duplex - self.h2d)), min(self.h2d, max(half, self.duplex - self.d2h))


@dataclass(frozen=True)
class Offload:
    """Which activations go to host memory: ``fraction[(p, s, m)]`` of the activation of
    stage (p, s), microbatch m (missing: 0), over a link of ``rates``; the H2D is prefetched
    ``prefetch`` ops before its backward — or, with ``issue`` (a time for every offloaded
    activation, as CP-SAT chose it), at that time (the H2D queue in order of it). The
    activations in ``recompute`` are freed at their F's end and held again from their B's
    start, which runs the stage's forward again first (B lasts F + B)."""

    rates: CopyRates
    fraction: Mapping[tuple[int, int, int], float] = field(default_factory=dict)
    prefetch: int = 1
    issue: Mapping[tuple[int, int, int], float] | None = None
    recompute: frozenset[tuple[int, int, int]] = frozenset()  # freed after F, its forward run again before B

    def __post_init__(self) -> None:
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or self.prefetch < 1:
            raise ValueError(f"prefetch must be an integer >= 1, got {self.prefetch!r}")
        for key, f in self.fraction.items():
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
                raise ValueError(f"offload fraction of {key} must be between 0 and 1, got {f!r}")
        if any(self.fraction.get(k) for k in self.recompute):
            raise ValueError("an activation is either offloaded or recomputed, not both")
        if self.issue is not None and {k for k, f in self.fraction.items() if f} - set(self.issue):
            raise ValueError("offload issue must give a time for every offloaded activation")

    @classmethod
    def every(cls, schedule: Schedule, rates: CopyRates, fraction: float = 1.0, prefetch: int = 1) -> "Offload":
        """``fraction`` of every activation of ``schedule`` offloaded."""
        ops = schedule.ops
        fwd = np.nonzero(ops.kind == 0)[0]
        keys = zip(ops.pipeline[fwd].tolist(), ops.stage[fwd].tolist(), ops.microbatch[fwd].tolist())
        return cls(rates, {k: fraction for k in keys}, prefetch)


@dataclass(frozen=True)
class Copy:
    """One copy of an offloaded activation (``key`` = (p, s, m)) on ``device``'s copy
    stream: ``direction`` D2H (0) or H2D (1), ``size`` in the activation's unit."""

    key: tuple[int, int, int]
    device: int
    direction: int
    size: float
    start: float
    end: float


@dataclass(frozen=True, eq=False)
class OffloadSimulation(Simulation):
    """A ``Simulation`` whose memory counts the copies of ``offload`` (``copies``: every
    D2H and H2D with its times)."""

    offload: Offload | None = None
    copies: tuple[Copy, ...] = ()
    recomputed: tuple[tuple[int, float, float, float], ...] = ()  # (device, F's end, B's start, size)

    def _memory_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rc = self.recomputed
        dev = np.array([c.device for c in self.copies] + [r[0] for r in rc] * 2, np.int64)
        time = np.array([c.end if c.direction == D2H else c.start for c in self.copies]
                        + [r[1] for r in rc] + [r[2] for r in rc], float)
        delta = np.array([-c.size if c.direction == D2H else c.size for c in self.copies]
                         + [-r[3] for r in rc] + [r[3] for r in rc], float)
        return dev, time, delta

    def host_peaks(self, devices_per_node: int | None = None) -> tuple[float, ...]:
        """Largest amount of offloaded activation held in host memory at once, per node of
        ``devices_per_node`` devices (None: all devices on one node)."""
        per = devices_per_node or self.schedule.num_devices
        num_nodes = -(-self.schedule.num_devices // per)
        events = sorted((c.start if c.direction == D2H else c.end, c.direction == D2H, c.device // per,
                         c.size if c.direction == D2H else -c.size) for c in self.copies)
        level, peak = [0.0] * num_nodes, [0.0] * num_nodes
        for _, _, node, change in events:  # at equal times, H2D ends (False) before D2H starts
            level[node] += change
            peak[node] = max(peak[node], level[node])
        return tuple(peak)

    @cached_property
    def exposed_offload(self) -> float:
        """How much later the step ends than with the same orders and no offload."""
        from .simulate import simulate

        return self.makespan - simulate(self.schedule, replace(self.costs, offload_fraction=0.0)).makespan

    def _again(self, costs: Costs) -> Simulation:
        if self.offload is None:  # pragma: no cover - every OffloadSimulation is made with one
            raise ValueError("an offload simulation without its offload")
        return simulate_offload(self.schedule, costs, self.offload)


def simulated(schedule: Schedule, costs: Costs) -> Simulation:
    """The level-3 simulation of ``schedule`` on ``costs``: ``simulate``'s, or, where the
    costs offload a share of every activation (``Costs.offload_fraction``, from
    ``hardware.Context.offload_activations``), ``simulate_offload``'s with that share of each
    activation on its device's copy stream over the system's host link, prefetched one op
    before its backward (``Offload.every``). Every front end times a schedule through it."""
    from .simulate import simulate

    if not costs.offload_fraction:
        return simulate(schedule, costs)
    if costs.host_link is None:
        raise ValueError("offload activations needs costs of a system with a host link ([host_link])")
    rates = CopyRates.of(costs.host_link, costs)
    return simulate_offload(schedule, costs, Offload.every(schedule, rates, costs.offload_fraction))


def simulate_offload(schedule: Schedule, costs: Costs, offload: Offload,
                     not_before: Sequence[float] | np.ndarray | None = None) -> OffloadSimulation:
    """Simulate one training step of ``schedule`` under ``costs`` with the activations of
    ``offload`` on each device's copy stream (module docstring); ``not_before``: per op (in
    ``schedule.ops`` order) a time it may not start before (a timed table's, e.g. CP-SAT's:
    moving a forward earlier than its table time could allocate before a D2H frees memory).
    Raises ``ValueError`` for blocks or link contention (not modelled with offload) and
    ``DeadlockError`` as ``simulate`` does."""
    if schedule.blocks:
        raise ValueError("offload: schedules with blocks (overlapped pairs) are not supported")
    if costs.contention:
        raise ValueError("offload: link contention between devices is not supported with offload")
    run = _Run(schedule, costs, offload, not_before)
    run.go()
    allreduces, optimizer = _tails(schedule, costs, run.end)
    pred = schedule.pred
    dev = schedule.device
    crosses = np.nonzero((pred >= 0) & (dev[np.maximum(pred, 0)] != dev))[0]
    t0 = run.end[pred[crosses]]
    return OffloadSimulation(schedule, costs, run.start, run.end, allreduces, optimizer,
                             (pred[crosses], crosses, t0, t0 + run.lag[crosses]), offload,
                             tuple(run.copies()), run.recomputed())


class _Run:
    """The event loop: each device runs its next op as soon as its input and, for an
    offloaded backward, its H2D are in; copy engines are replayed per device on demand."""

    def __init__(self, schedule: Schedule, costs: Costs, offload: Offload, not_before=None) -> None:
        self.schedule, self.offload = schedule, offload
        self.not_before = np.zeros(schedule.num_ops) if not_before is None else np.asarray(not_before, float)
        codes = schedule.codes
        op_time = costs.op_time
        self.dur = stage_kind_table(schedule, lambda k, p, s: op_time[(k, p, s)])[codes]
        self.lag = _messages(schedule, costs)[0][codes]
        n = schedule.num_ops
        self.start, self.end = np.zeros(n), np.full(n, np.nan)
        ops = schedule.ops
        kind, pipe, stage, mb = (a.tolist() for a in (ops.kind, ops.pipeline, ops.stage, ops.microbatch))
        self.engines = [_Engine(offload.rates) for _ in range(schedule.num_devices)]
        self.dev = schedule.device.tolist()
        self.d2h_of: dict[int, tuple] = {}  # F index -> (key, size)
        self.h2d_at: dict[int, list] = {}  # trigger op index -> (key, size) prefetched at its start
        self.wait_of: dict[int, tuple] = {}  # B index -> key
        offsets = schedule.offsets.tolist()
        issued: list[tuple] = []
        self.again: dict[int, tuple[int, float]] = {}  # recomputed B index -> (F index, size)
        fwd = {(pipe[i], stage[i], mb[i]): i for i in range(n) if kind[i] == 0}
        for i in range(n):
            key = (pipe[i], stage[i], mb[i])
            if kind[i] == 1 and key in offload.recompute:
                self.again[i] = (fwd[key], costs.activation[key[:2]])
                self.dur[i] += self.dur[fwd[key]]
            f = offload.fraction.get(key, 0.0)
            if not f:
                continue
            if kind[i] == 0:
                self.d2h_of[i] = (key, f * costs.activation[key[:2]])
            elif kind[i] == 1:
                self.wait_of[i] = key
                if offload.issue is None:
                    first = offsets[self.dev[i]]
                    size = f * costs.activation[key[:2]]  # the size is known here: the trigger may precede the F
                    self.h2d_at.setdefault(max(first, i - offload.prefetch), []).append((key, size))
                else:
                    issued.append((offload.issue[key], self.dev[i], key, f * costs.activation[key[:2]]))
        for t, d, key, size in sorted(issued):
            self.engines[d].h2d(key, t, size)

    def go(self) -> None:
        from pipetab.schedules.evaluate import deadlock_error

        offsets, pred = self.schedule.offsets.tolist(), self.schedule.pred.tolist()
        head, free = offsets[:-1], [0.0] * self.schedule.num_devices
        moved = True
        while moved:
            moved = False
            for d in range(self.schedule.num_devices):
                while head[d] < offsets[d + 1]:
                    i = head[d]
                    if not self._run(i, d, pred[i], free):
                        break
                    head[d] += 1
                    moved = True
        if np.isnan(self.end).any():
            raise deadlock_error(self.schedule, ~np.isnan(self.end))

    def _run(self, i: int, d: int, p: int, free: list[float]) -> bool:
        """Run op ``i`` on device ``d`` if its input is in; False if not yet."""
        ready = max(free[d], self.not_before[i])
        if p >= 0:
            if np.isnan(self.end[p]):
                return False
            ready = max(ready, self.end[p] + self.lag[i])
        engine = self.engines[d]
        if i in self.wait_of:  # an offloaded backward waits for its H2D
            ready = max(ready, engine.h2d_end(self.wait_of[i]))
        for key, size in self.h2d_at.get(i, ()):  # prefetches issued at this op's start
            engine.h2d(key, ready, size)
        self.start[i], self.end[i] = ready, ready + self.dur[i]
        free[d] = self.end[i]
        if i in self.d2h_of:
            key, size = self.d2h_of[i]
            engine.d2h(key, size, float(self.end[i]))
        return True

    def recomputed(self) -> tuple[tuple[int, float, float, float], ...]:
        return tuple((self.dev[i], float(self.end[f]), float(self.start[i]), size)
                     for i, (f, size) in self.again.items())

    def copies(self) -> list[Copy]:
        out = []
        for d, engine in enumerate(self.engines):
            times = engine.replay()
            for direction, queue in enumerate(engine.queues):
                for j, (key, size, _) in enumerate(queue):
                    s, e = times[direction][j]
                    out.append(Copy(key, d, direction, size, s, e))
        return out


class _Engine:
    """One device's two copy engines: requests in issue order per direction, run by a fluid
    model (rates change when the other direction starts or stops) that resumes where it
    stopped: a device asks for an H2D's end only when its backward is next, and every request
    it makes later is issued at that time or after (its ops run in order), so the copies
    already run keep their times."""

    def __init__(self, rates: CopyRates) -> None:
        self.rates = rates
        self.queues: tuple[list, list] = ([], [])  # (key, size, issue or trigger time) per direction
        self.times: tuple[list, list] = ([], [])  # [start, end] of the copies started, per direction
        self.done: dict[tuple, float] = {}  # D2H end per key
        self.left, self.active, self.now = [0.0, 0.0], [False, False], 0.0
        self.up_index: dict[tuple, int] = {}  # key -> its H2D's place in the queue

    def d2h(self, key: tuple, size: float, t: float) -> None:
        self.queues[D2H].append((key, size, t))

    def h2d(self, key: tuple, t: float, size: float) -> None:
        self.up_index.setdefault(key, len(self.queues[H2D]))
        self.queues[H2D].append((key, size, t))

    def h2d_end(self, key: tuple) -> float:
        j = self.up_index[key]
        self._run(lambda: len(self.times[H2D]) > j and not math.isnan(self.times[H2D][j][1]))
        if len(self.times[H2D]) <= j or math.isnan(self.times[H2D][j][1]):
            raise ValueError(f"offload: the H2D of {key} waits for a D2H that is never issued")
        return self.times[H2D][j][1]

    def replay(self) -> tuple[list, list]:
        """(start, end) of every D2H and every H2D requested (all run to their end)."""
        self._run(lambda: False)
        return self.times

    def _run(self, reached) -> None:
        """Advance the copies event by event until ``reached()`` or nothing is left to run."""
        queues, times, left, active = self.queues, self.times, self.left, self.active
        while not reached():
            for q in (D2H, H2D):
                if not active[q] and len(times[q]) < len(queues[q]) and self._ready(q) <= self.now:
                    times[q].append([self.now, math.nan])
                    left[q], active[q] = queues[q][len(times[q]) - 1][1], True
            rate = self.rates.shared(active[D2H] and active[H2D])
            finish = [self.now + left[q] / rate[q] if active[q] else math.inf for q in (D2H, H2D)]
            wake = [self._ready(q) if not active[q] else math.inf for q in (D2H, H2D)]
            t_next = min(*finish, *(w for w in wake if w > self.now), math.inf)
            if t_next == math.inf:
                return
            for q in (D2H, H2D):
                if not active[q]:
                    continue
                if finish[q] <= t_next:
                    times[q][-1][1] = finish[q]
                    active[q] = False
                    if q == D2H:
                        self.done[queues[D2H][len(times[D2H]) - 1][0]] = finish[q]
                else:
                    left[q] -= rate[q] * (t_next - self.now)
            self.now = t_next

    def _ready(self, q: int) -> float:
        nxt = len(self.times[q])
        if nxt >= len(self.queues[q]):
            return math.inf
        key, _, t = self.queues[q][nxt]
        return t if q == D2H else max(t, self.done.get(key, math.inf))


def offload_optimizer(costs: Costs, state_bytes: tuple[float, ...], params: tuple[float, ...],
                      link: HostLink, grad_bytes: tuple[float, ...] | None = None) -> Costs:
    """``costs`` with each device's optimizer state on the host (CPU Adam; Megatron's
    ``--optimizer-cpu-offload``, ZeRO-Offload): ``state_bytes[d]`` leaves the GPU's
    persistent memory, and the optimizer step becomes the gradients' D2H (``grad_bytes``,
    default 2 bytes per parameter), the host's update of ``params[d]`` parameters at
    ``link.adam_params_per_s`` and the updated bf16 weights' H2D (2 bytes per parameter),
    one after another (costs in seconds)."""
    if costs.unit != "s":
        raise ValueError(f"optimizer offload needs costs in seconds, these are in {costs.unit}")
    if not link.adam_params_per_s:
        raise ValueError("optimizer offload: the host link has no adam_params_per_s (host update rate)")
    num = len(costs.persistent)
    if len(state_bytes) != num or len(params) != num:
        raise ValueError(f"state_bytes and params must have one value per device ({num})")
    grads = grad_bytes or tuple(2.0 * p for p in params)
    step = tuple(g / link.d2h + p / link.adam_params_per_s + 2.0 * p / link.h2d for g, p in zip(grads, params))
    return replace(costs, persistent=tuple(p - s for p, s in zip(costs.persistent, state_bytes)),
                   optimizer_time=step)


def host_fits(sim: OffloadSimulation, link: HostLink, devices_per_node: int | None,
              optimizer_bytes: tuple[float, ...] = ()) -> bool:
    """Whether every node's host memory holds its offloaded activations at their peak plus
    the optimizer state offloaded by its devices."""
    per = devices_per_node or sim.schedule.num_devices
    state = [0.0] * len(sim.host_peaks(per))
    for d, b in enumerate(optimizer_bytes):
        state[d // per] += b
    return all(a + s <= link.host_memory_bytes for a, s in zip(sim.host_peaks(per), state))


__all__ = ["Copy", "CopyRates", "Offload", "OffloadSimulation", "host_fits",
           "offload_optimizer", "simulate_offload", "simulated"]
