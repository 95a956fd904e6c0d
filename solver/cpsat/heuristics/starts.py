"""The start phase: the known schedules, the registry's of the problem's shape and the
model's list schedules (``greedy``) judged by the evaluator, the fitting ones double-justified;
the best that fits is the first incumbent. Paced from one evaluation's measured time.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from pipetab.schedules import registry
from pipetab.schedules.placements import family_placement
from pipetab.schedules.rewrite import fused_backward, ops_one_at_a_time

from ..model.oracle import KnownEval, evaluate_known
from ..model.pairing import pairs_only
from ..params import CpSatConfig, StartParams
from .greedy import greedy_schedule, microbatch_spacing, stage_limits, warmup_depths
from .justify import justify, precedence_graph

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement, Schedule
    from pipetab.solver.deadline import Deadline

    from ..problem import Problem


# ---- the registry's schedules of a problem --------------------------------------------------
def _registry_options(problem: Problem) -> dict[str, int]:
    S, n0 = problem.num_devices, problem.num_stages[0]
    opts = {}
    if problem.num_pipelines == 1 and n0 % (2 * S) == 0:
        opts["waves"] = n0 // (2 * S)
    if problem.num_pipelines == 1 and n0 % S == 0 and n0 >= 2 * S:
        opts["chunks"] = n0 // S
    return opts


def registry_schedules(problem: Problem, placement: Placement, probe: tuple[int, int] = (4, 8),
                       until: Callable[[], float | None] = lambda: None,
                       params: StartParams = StartParams(), fused: bool | None = None,
                       done: set[str] | None = None) -> Iterator[Schedule]:
    """The registry's schedules (default options; Hanayo with the problem's waves, interleaved
    with its chunks) of the problem's shape and placement, least formula peak memory first under
    a cap, else least formula bubble; on a whole backward, then the split-backward ones with W
    fused into B (``fused``: those alone if True, none if False). ``done``: names not to
    generate, each generated one added. The shape is checked on a ``probe``-sized instance first;
    above ``StartParams.time_probe_cells`` a generator predicted to end past ``until()`` is skipped."""
    S, B = problem.num_devices, problem.num_microbatches
    fixed = problem.with_placement(placement)
    extra = _registry_options(problem)
    capped = any(problem.cap(d) is not None for d in range(S))
    candidates = []
    for name, spec in registry.REGISTRY.items():
        if (spec.slow_generator and params.slow_generator_cells < S * S * B) or (done is not None and name in done):
            continue
        names = {o.name for o in spec.options}
        opts = {k: v for k, v in extra.items() if k in names}
        if problem.overlap_pairs and "overlap" in names:
            opts["overlap"] = True  # where the search may overlap pairs, so may the registry's
        try:
            small = _generate(name, *probe, tuple(opts.items()))
            fuse = small.split_backward and not problem.split_backward
            if (fused is not None and fuse != fused) or not _shape_fits(fused_backward(small) if fuse else small,
                                                                          problem):
                continue
            f = spec.formula(S, B, **opts)
        except (ValueError, TypeError):
            continue
        peak = max(f.peak_activations) if f.peak_activations else math.inf
        key = peak if capped else (f.bubble_ratio if f.bubble_ratio is not None else math.inf)
        candidates.append((key, fuse, name, opts))
    # where pairs may overlap, generators with overlapped pairs first
    order = sorted(candidates, key=lambda c: (c[1], problem.overlap_pairs and not c[3].get("overlap"), c[0], c[2]))
    for _, fuse, name, opts in order:
        end = until()
        if end is not None and params.time_probe_cells[1] < S * B and (time.perf_counter() >= end or  # no probe past it
                time.perf_counter() + _generation_time(name, opts, params.time_probe_cells, S * B, S) > end):
            continue
        if done is not None:
            done.add(name)
        try:
            s = _generate(name, S, B, tuple(opts.items()))
        except (ValueError, TypeError):
            continue
        if fuse:
            s = fused_backward(s, keep_pairs=problem.overlap_pairs)
        if fixed.matches(s) is None:
            yield from as_searched(problem, [s])


def as_searched(problem: Problem, known: Sequence[Schedule]) -> list[Schedule]:
    """``known`` as a search of ``problem`` judges them: without blocks each overlapped pair as
    two ops (``ops_one_at_a_time``); with blocks unchanged; where pairs may overlap, each with
    its forward-backward pairs (``pairing.pairs_only``) and, if it has blocks, also every op alone."""
    if problem.blocks:
        return list(known)
    if not problem.overlap_pairs:
        return [ops_one_at_a_time(k) for k in known]
    out = []
    for k in known:
        out.append(pairs_only(k))
        if k.blocks:
            out.append(ops_one_at_a_time(k))
    return out


def _generation_time(name: str, opts: dict, sizes: tuple[int, int], cells: int, devices: int = 8) -> float:
    """A generator's predicted seconds for ``cells`` devices x microbatches on ``devices``: the
    line through its times at ``sizes`` cells on 8 devices (0 when it refuses them), times its
    growth from 8 to 16 devices per doubling beyond 8 (V-Half: 1.1, 1.9, 7.0 s for 1,024 cells on
    8, 16, 32 devices; 107 s on 64 x 256 where the line alone predicted 14)."""
    timed = functools.partial(_probe_seconds, name, tuple(sorted(opts.items())))
    small, large = timed(8, sizes[0] // 8), timed(8, sizes[1] // 8)
    if small is None or large is None:
        return 0.0
    slope = max(0.0, large - small) / (sizes[1] - sizes[0])
    line = large + slope * (cells - sizes[1])
    if devices <= 8:
        return line
    wider = timed(16, sizes[0] // 16)
    growth = 1.0 if wider is None or small < 0.01 else max(1.0, wider / small)
    return line * growth ** math.log2(devices / 8)


@functools.lru_cache(maxsize=None)  # once per process: every start phase of a command asks
def _probe_seconds(name: str, opts: tuple, devices: int, microbatches: int) -> float | None:
    t = time.perf_counter()
    try:
        registry.generate(name, devices, microbatches, **dict(opts))
    except (ValueError, TypeError):
        return None
    return time.perf_counter() - t


@functools.lru_cache(maxsize=128)  # a search asks for about 40 (16 generators, probes and full sizes)
def _generate(name: str, stages: int, microbatches: int, opts: tuple) -> Schedule:
    """A registry schedule, cached (a free-placement search asks once per placement)."""
    return registry.generate(name, stages, microbatches, **dict(opts))


def _shape_fits(probe: Schedule, problem: Problem) -> bool:
    """Whether a generator's small ``probe`` has the problem's shape: split, stages per device
    and placement family at the probe's size (a given placement is checked on the full schedule)."""
    S = problem.num_devices
    if probe.split_backward != problem.split_backward or probe.num_pipelines != problem.num_pipelines:
        return False
    n = tuple(probe.num_stages(p) for p in range(probe.num_pipelines))
    if any(a * S != b * probe.num_devices for a, b in zip(n, problem.num_stages)):
        return False
    family = problem.family
    if family is None or problem.is_free:
        return True
    try:
        return family_placement(family, probe.num_devices, n).stage2device == probe.placement.stage2device
    except ValueError:
        return False


# ---- the model's own list schedules ---------------------------------------------------------
def greedy_starts(problem: Problem, placement: Placement, params: StartParams = StartParams(),
                  until: Callable[[], float | None] | None = None) -> Iterator[Schedule]:
    """The model's greedy memory-aware list schedules: the reserving one-microbatch-window kinds
    first (they never deadlock and fit any feasible cap); with a split backward on one stage per
    device Zero Bubble style ones (warm-up depths from ``warmup_depths`` plus 0 or 1); least-slack
    ones (``slack_starts``: first with several stages per device, else last); wider windows and
    forward-first priorities. ``until()``: when each gives up (perf_counter; default never)."""
    B, D = problem.num_microbatches, problem.num_devices
    limit: Callable[[], float | None] = until or (lambda: None)
    capped = any(problem.cap(d) is not None for d in range(D))
    if capped:
        yield from filter(None, [greedy_schedule(problem, placement, None, True, "greedy-reserve", reserve=True,
                                                 until=limit())])
    depths = (warmup_depths(problem) if problem.split_backward else None) or ()
    for extra in (0, 1) if depths else ():
        yield from filter(None, [greedy_schedule(problem, placement, None, name=f"greedy-zb{extra}", priority="BFW",
                                                 inflight={(0, s): n + extra for s, n in enumerate(depths)},
                                                 until=limit())])
    several = len(problem.stages) > D
    if several:
        yield from slack_starts(problem, placement, capped, params, limit)
    for w in sorted({D, B, 2 * D, 1}, reverse=not capped):
        if w > B:
            continue
        for bf in (True, False):
            if w == 1 and not bf:
                continue
            name = f"greedy-w{w}{'' if bf else '-ff'}"
            yield from filter(None, [greedy_schedule(problem, placement, w, bf, name=name, until=limit())])
    if capped:
        yield from filter(None, [greedy_schedule(problem, placement, None, False, "greedy-reserve-ff", reserve=True,
                                                 until=limit())])
    if not several:
        yield from slack_starts(problem, placement, capped, params, limit)


def wide_starts(problem: Problem, placement: Placement, until: Callable[[], float | None] | None = None
                ) -> Iterator[Schedule]:
    """Forward-first list schedules admitting 5D/2 and 3D microbatches: on V under a cap of 2S
    within 1 % of the bound where ZB-V and narrower windows are not (docs/cpsat.md). Judged last."""
    B, D = problem.num_microbatches, problem.num_devices
    limit: Callable[[], float | None] = until or (lambda: None)
    for w in sorted({5 * D // 2, 3 * D} - {D, 2 * D}):
        if w < B:
            yield from filter(None, [greedy_schedule(problem, placement, w, False, name=f"greedy-w{w}-ff",
                                                     until=limit())])


def slack_starts(problem: Problem, placement: Placement, capped: bool,
                 params: StartParams = StartParams(), until: Callable[[], float | None] = lambda: None
                 ) -> Iterator[Schedule]:
    """Least-slack list schedules of ``StartParams.slack_starts`` (without a cap only those
    without warm-up depths), none begun past ``until()`` (a depth's stage limits take 0.2 s on V
    S=64, B=4096 before the list schedule can give up)."""
    spacing = microbatch_spacing(problem, placement)
    limits: dict[float, dict] = {}
    for k, depth in params.slack_starts:
        if depth is not None and not capped:
            continue
        end = until()
        if end is not None and time.perf_counter() > end:
            return
        if depth is not None and depth not in limits:
            limits[depth] = stage_limits(problem, placement, depth)
        inflight = None if depth is None else limits[depth]
        yield from filter(None, [greedy_schedule(
            problem, placement, None, name=f"greedy-slack{k:.2f}" + (f"-d{depth:g}" if depth else ""),
            inflight=inflight, slack={p: k * u for p, u in spacing.items()}, until=until())])


# ---- judging and pacing ---------------------------------------------------------------------
class Pace:
    """Predicts the start's steps and a model build from one evaluation's measured time
    (``StartParams.costs``); under a deterministic limit nothing is skipped for time."""

    def __init__(self, deadline: Deadline, params: StartParams):
        self.deadline = deadline
        self.params = params
        self.unit: float | None = None

    def measured(self, seconds: float) -> None:
        if self.unit is None:
            self.unit = max(seconds, 1e-4)

    def measured_from(self, evals: Iterable[KnownEval]) -> None:
        """The unit from schedules judged already (the first that was timed)."""
        for e in evals:
            if e.timing is not None:
                self.measured(e.sim_s)
                return

    def fits(self, step: str, until: float, times: float = 1.0) -> bool:
        """Whether ``step`` is predicted to end (``times`` over) before ``until``."""
        if self.deadline.deterministic:
            return time.perf_counter() < self.deadline.end
        need = (self.unit or 0.0) * self.params.cost(step) * times
        return time.perf_counter() + need < until

    def model_fits(self) -> bool:
        known = self.unit is not None or self.deadline.deterministic  # nothing judged yet: no time for a model
        return known and self.fits("build", self.deadline.end - self.reserve(), self.params.builds_left)

    def reserve(self) -> float:
        """Time kept for re-checking a solver's schedule (evaluate and validate)."""
        return (self.unit or 0.0) * 3


def judge(
    problem: Problem, schedules: Iterable[Schedule], pace: Pace | None = None
) -> tuple[list[KnownEval], list[str]]:
    """Each schedule of this problem judged by the evaluator (``pace``: measured; a schedule over
    the cap is not timed on large problems); the others named with why they do not apply."""
    evals, skipped = [], []
    for s in schedules:
        why = problem.matches(s)
        if why is not None:
            skipped.append(f"{s.name}: {why}")
            continue
        timed = pace is None or pace.unit is None or problem.num_ops <= pace.params.time_unfit_ops
        evals.append(evaluate_known(problem, s, time_unfit=timed))
        if pace is not None and evals[-1].timing is not None:
            pace.measured(evals[-1].sim_s)  # the simulation: the objective's judge varies by objective
    return evals, skipped


def best_of(evals: Iterable[KnownEval]) -> KnownEval | None:
    fitting = [e for e in evals if e.fits]
    return min(fitting, key=lambda e: e.makespan) if fitting else None  # type: ignore[arg-type,return-value]


@dataclass
class Start:
    """What the start judged, its best that fits, note, wall time; ``pending``: sources left."""

    evals: list[KnownEval]
    best: KnownEval | None
    note: str
    wall_s: float
    first_fit: float | None = None  # when the first schedule that fits was judged (perf_counter)
    pending: _Sources | None = None

    def adopt(self, evals: Iterable[KnownEval]) -> None:
        """``best``: the best that fits of it and ``evals`` (not added to ``evals``)."""
        self.best = best_of([*evals, *([self.best] if self.best is not None else [])])


class _Sources:
    """The start's schedule sources in order, (step, iterator) pairs, each generator giving up
    at ``limit`` (``hard`` while nothing fits), judged one schedule at a time while the next is
    predicted to end in time, appended to ``evals``; the rest stays for a later call."""

    def __init__(self, problem: Problem, placement: Placement, config: CpSatConfig, evals: list[KnownEval],
                 limit: float, hard: float):
        params = config.start
        self.problem, self.evals, self.limit, self.hard = problem, evals, limit, hard
        self.first_fit: float | None = None  # when the first judged here that fits was judged
        until = lambda: self.limit if best_of(self.evals) else self.hard  # noqa: E731
        done: set[str] = set()

        def registry(fused: bool):
            return ("evaluate", registry_schedules(problem, placement, params.probe, until, params, fused, done))

        self._registry = registry if config.known_generators else None
        self.greedy = [("greedy", greedy_starts(problem, placement, params, until)),
                       ("greedy", wide_starts(problem, placement, until))]
        # where pairs may overlap the registry's (DualPipe, DualPipeV: with pairs) come first
        order = [registry(False), registry(True), *self.greedy] if problem.overlap_pairs else \
            [registry(False), self.greedy[0], registry(True), self.greedy[1]]
        self.sources = order if self._registry else self.greedy
        self.params = params

    def resume(self) -> None:
        """Unjudged registry schedules first (one skipped as slow is retried), then the greedy ones left."""
        registry = self._registry
        self.sources = [registry(False), registry(True), *self.greedy] if registry else self.greedy

    def judge(self, pace: Pace, limit: float) -> list[KnownEval]:
        """Judge while each is predicted to end by ``limit`` (``hard`` while none fits); the new ones."""
        self.limit = limit
        new: list[KnownEval] = []
        for step, schedules in self.sources:
            while pace.fits(step, self.limit if best_of(self.evals) else self.hard,
                            1 + self.params.cost("evaluate") / self.params.cost(step)):
                s = next(schedules, None)
                if s is None:
                    break
                judged = judge(self.problem, [s], pace)[0]
                self.evals += judged
                new += judged
                if self.first_fit is None and best_of(judged):
                    self.first_fit = time.perf_counter()
        return new


def start_phase(problem: Problem, placement: Placement, config: CpSatConfig, known: Sequence[Schedule],
                deadline: Deadline, pace: Pace, hard_share: float = 1.0) -> Start:
    """Judge the known schedules, the registry's (``known_generators``), the greedy starts, the
    registry's split ones fused into a whole backward and the wide-window ones, then
    double-justify the fitting ones, best first — each step only while predicted to end within
    ``StartParams.share`` of the time (before one fits: ``hard_share``, all by default)."""
    t = time.perf_counter()
    params = config.start
    until = t + params.share * max(0.0, deadline.wall_left())
    hard = min(deadline.end - pace.reserve(), t + hard_share * max(0.0, deadline.wall_left()))
    evals, skipped = judge(problem, known, pace)
    first_fit = time.perf_counter() if best_of(evals) else None
    sources = _Sources(problem, placement, config, evals, until, hard)
    sources.judge(pace, until)
    if first_fit is None:
        first_fit = sources.first_fit
    notes = [f"{len(evals)} schedules judged"]
    if skipped:
        notes.append("skipped: " + "; ".join(skipped))
    if config.uses("justify"):
        justified = _justified(problem, placement, evals, pace, until, params.justify_rounds)
        if justified:
            notes.append("justified: " + ", ".join(f"{e.name} {e.makespan}" for e in justified))
        evals += justified
    best = best_of(evals)
    if best is not None:
        notes.append(f"best start {best.name} {best.makespan}")
    return Start(evals, best, "; ".join(notes), round(time.perf_counter() - t, 3),
                 first_fit if first_fit is not None or best is None else time.perf_counter(), sources)


def more_starts(start: Start, deadline: Deadline, pace: Pace) -> int:
    """For a search that builds no model: the pending sources judged while they fit in the
    time left (less the re-check's reserve); ``start`` updated; how many were judged."""
    if start.pending is None:
        return 0
    start.pending.resume()
    new = start.pending.judge(pace, deadline.end - pace.reserve())  # appended to start.evals
    start.adopt(new)
    return len(new)


def _justified(problem: Problem, placement: Placement, evals: list[KnownEval], pace: Pace, until: float,
               rounds: int) -> list[KnownEval]:
    """The fitting schedules improved by double justification, best first, while time allows."""
    # the precedence graph runs ops one at a time: schedules with overlapped pairs are not justified
    fitting = sorted((e for e in evals if e.fits and not e.schedule.blocks),
                     key=lambda e: e.makespan)  # type: ignore[arg-type,return-value]
    graph = precedence_graph(problem, placement) if fitting and pace.fits("justify", until) else None
    out = []
    for e in fitting if graph is not None else ():
        if not pace.fits("justify", until, 0.75):
            break
        better = justify(problem, placement, e, graph, rounds, until)
        if better is not None:
            out.append(better)
    return out
