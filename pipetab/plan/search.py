"""``plan``: enumerate, bound, simulate, rank, search with CP-SAT and validate."""

from __future__ import annotations

import heapq
import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from pipetab.hardware.context import Context
from pipetab.schedules import registry

from .bounds import Bounds
from .certificate import certify
from .cpsat import cpsat_outcome, cpsat_search, cpsat_shapes
from .parallel import Opening, open_shapes, opening
from .periodic import activation_peaks
from .refine import refine
from .result import Configuration, Plan, configuration, rank
from .space import PlanSpace, costs_of, rescues, schedule_label, shapes
from .workers import Workers

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule


# a candidate's bound: the shape's without blocks (``Bounds.serial_time``), priced, from a short run, its step
# time, from its copy streams (``Bounds.copy_time``: an offloading candidate's, before its short run)
SERIAL, CHEAP, QUICK, EXACT, COPIES = -1, 0, 1, 2, 3


@dataclass(frozen=True)
class _Candidate:
    """A schedule variant on a shape (its context) and a bound (time for the candidates
    that may fit, memory for those that cannot)."""

    bound: float
    name: str
    opts: dict
    shape: Context
    level: int = EXACT  # the bound is the candidate's step time (EXACT), ``Bounds.quick``'s or ``Bounds.cheap``'s


def plan(space: PlanSpace, progress: Callable[[str], None] | None = None, profile=None, executor=None) -> Plan:
    """Search ``space`` (package docstring) and rank what fits by simulated step time.
    With a ``profile`` (``hardware.Profile``) the split, microbatch size and op costs are
    the profiled run's, and only the schedules vary (``plan_profiled``). ``executor``: a
    sweep executor (``pipetab.sweep.make_executor``) that opens shapes side by side
    (``parallel``; the same answer as without)."""
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    if profile is not None:
        return plan_profiled(space, profile, say, t0)
    bounds = Bounds(space)
    pool = Workers(min(2, space.cpsat_shapes)) if space.cpsat_shapes else None
    search = _BestFirst(space, bounds, say, executor)
    try:
        try:
            results, misfit_runs = search.run()
        finally:
            if search.entered:
                executor.__exit__(None, None, None)
        pruned_memory = len(search.misfits) + len(misfit_runs)
        closest = _closest_misfits(space, bounds, misfit_runs, search.misfits, space.top - len(results))
        refined = refine(space, bounds, rank(results), _refined(space, bounds)) if space.refine else []
        simulated = sum(c.fits for c in results) + len(closest) + len(refined)
        shown, notes, ranked, proofs = _search_and_validate(space, bounds, rank(results + closest + refined), pool,
                                                            say)
    finally:
        if pool:  # interrupted or failed: ends the searches still running
            pool.close()
    return Plan(tuple(shown), search.total, pruned_memory - len(closest), search.pruned_time, simulated,
                tuple(notes), time.perf_counter() - t0, _question(space), tuple(ranked), space.notes(), len(refined),
                certify(shown, ranked, search.least_pruned, proofs))


class _BestFirst:
    """Candidates in order of a lower bound of their step time, each bounded only when
    needed: a shape first enters with ``Bounds.shape_time`` (no schedule does better);
    taken out, its schedules' memory bounds prune those that cannot fit and the rest enter
    with their own time bounds; a candidate taken out is simulated. The search stops when
    the next bound reaches the ``top``-th best step that fits: nothing left can beat the
    configurations found, and the shapes never opened need no bound of their own."""

    def __init__(self, space: PlanSpace, bounds: Bounds, say, executor=None) -> None:
        self.space, self.bounds, self.say = space, bounds, say
        # shapes opened side by side on a sweep executor (``parallel``), entered when first needed:
        # a Dask cluster's workers are known only then (``batch``: 4 shapes per worker)
        several = executor is not None and (getattr(executor, "name", "") == "dask" or executor.workers > 1)
        self.executor = executor if several else None
        self.entered = False
        self.batch = 1
        self.token = f"{os.getpid()}-{id(self)}-{time.time_ns()}"
        self.variants = space.variants()
        all_shapes = shapes(space)
        self.total = len(all_shapes) * len(self.variants)
        self.misfits: list[_Candidate] = []
        self.ladders: dict[Context, list[Context]] = {}  # a rescued shape -> the techniques after it
        # a rescued shape with rungs after it -> [its candidates not yet simulated, its time bound]: when
        # every one is simulated and none fits (its bounds were loose, e.g. offload's), the next rung enters
        self.pending: dict[Context, list] = {}
        self.heap: list[tuple[float, int, Context | _Candidate]] = []
        for i, shape in enumerate(all_shapes):
            heapq.heappush(self.heap, (bounds.shape_time(shape), i, shape))
        self.tiebreak = len(all_shapes)
        self.pruned_time = 0
        self.least_pruned = float("inf")  # the least bound left in the queue when the search stops
        say(f"{len(all_shapes)} shapes x {len(self.variants)} schedules = {self.total} candidates")

    def _open(self, shape: Context, time_bound: float, found: Opening | None = None) -> None:
        """Push the candidates of ``shape`` (its ``opening``, computed here unless given);
        a shape none of whose schedules fits is rescued (``_rescue``; ``time_bound``: the shape's)."""
        fits, misfits = found if found is not None else opening(self.space, self.bounds, shape, lazy=True)
        self.misfits += [_Candidate(bound, name, opts, shape) for bound, name, opts in misfits]
        for bound, name, opts, priced in fits:
            self._push(_Candidate(bound, name, opts, shape, CHEAP if priced else SERIAL))
        if not fits:
            self._rescue(shape, time_bound)
        elif self.ladders.get(shape):
            self.pending[shape] = [len(fits), time_bound]

    def _simulated(self, shape: Context, fits: bool) -> None:
        """One candidate of ``shape`` simulated: the next rung of its ladder when it was the
        last of a rescued shape and none fitted."""
        left = self.pending.get(shape)
        if left is None:
            return
        left[0] -= 1
        if fits or left[0] <= 0:
            del self.pending[shape]
            if not fits:
                self._rescue(shape, left[1])

    def _rescue(self, shape: Context, bound: float) -> None:
        """A shape none of whose schedules fits: its next memory technique (``rescues``: the
        plain shape's first; a rescued shape's the next on its ladder) whose memory bound
        can fit enters as a shape of its own (rungs whose ``shape_memory`` exceeds the
        capacity are skipped: no schedule of theirs fits), so each shape gets the cheapest
        technique that fits it. ZeRO-2 and FP8 caching leave ``shape_time`` as it is (it
        counts no optimizer step and no stored bytes): such a rung keeps ``bound``. Offload
        costs no compute but the copies a slow host link cannot hide, which may cost more than
        recomputing: an offload rung enters beside the first rung after it that does not
        offload, which carries the rest of the ladder (the offload rung keeps the other
        offload shares), and their simulated steps decide."""
        ladder = self.ladders.pop(shape, None)
        if ladder is None:
            ladder = rescues(self.space, shape)
        cap = self.space.system.device.usable_memory_bytes
        for i, nxt in enumerate(ladder):
            if self.bounds.shape_memory(nxt) <= cap:
                rest = ladder[i + 1:]
                if not nxt.offload_activations or shape.offload_activations:
                    self._enter(nxt, rest, bound)
                    return
                off = [r for r in rest if r.offload_activations]
                self._enter(nxt, off, bound)
                if len(off) < len(rest):
                    self.ladders[shape] = rest[len(off):]
                    self._rescue(shape, bound)
                return

    def _enter(self, shape: Context, ladder: list[Context], bound: float) -> None:
        """A rung of a ladder enters the queue as a shape, ``ladder`` the rungs after it."""
        self.ladders[shape] = ladder
        self.total += len(self.variants)
        self.tiebreak += 1
        time_bound = self.bounds.shape_time(shape) if shape.recompute_modules else bound
        heapq.heappush(self.heap, (time_bound, self.tiebreak, shape))

    def _open_batch(self, first: Context, bound: float, limit: float) -> None:
        """Open ``first`` (its time bound ``bound``) and the shapes after it at the top of the
        queue whose bounds are below ``limit`` (at most ``batch``), on the executor when there
        are several."""
        if self.executor is not None and not self.entered:
            self.executor.__enter__()
            self.entered = True
            self.batch = 4 * self.executor.workers
        batch = [(bound, first)]
        while (self.executor is not None and len(batch) < self.batch and self.heap
               and isinstance(self.heap[0][2], Context) and self.heap[0][0] < limit):
            b, _, nxt = heapq.heappop(self.heap)
            assert isinstance(nxt, Context)
            batch.append((b, nxt))
        if len(batch) == 1 or self.executor is None:
            self._open(first, bound)
            return
        found = open_shapes(self.executor, self.token, self.space, [s for _, s in batch])
        for (b, shape), opened in zip(batch, found):
            self._open(shape, b, opened)

    def _push(self, cand: _Candidate) -> None:
        self.tiebreak += 1
        heapq.heappush(self.heap, (cand.bound, self.tiebreak, cand))

    def run(self) -> tuple[list[Configuration], list[_Candidate]]:
        """(configurations simulated, candidates whose full instance does not fit)."""
        results: list[Configuration] = []
        best: list[float] = []  # max-heap (negated) of the top fitting steps
        misfit_runs: list[_Candidate] = []
        single: set[Context] = set()  # shapes of one stage counted among the best (``distinct``)
        last_note = time.perf_counter()
        while self.heap:
            bound, _, item = heapq.heappop(self.heap)
            if len(best) >= self.space.top and bound >= -best[0]:
                heapq.heappush(self.heap, (bound, 0, item))
                break
            if isinstance(item, Context):
                self._open_batch(item, bound, -best[0] if len(best) >= self.space.top else float("inf"))
                continue
            cand = item
            if cand.level == SERIAL:  # priced next (``Bounds.cheap``, never None: its schedule is memory's)
                cheap = self.bounds.cheap(cand.name, cand.opts, cand.shape)
                self._push(replace(cand, bound=max(bound, cheap or bound), level=CHEAP))
                continue
            if cand.level == CHEAP and cand.shape.offload_activations:  # its copy streams first
                copies = self.bounds.copy_time(cand.name, cand.opts, cand.shape)
                if copies is not None and copies > bound:
                    self._push(replace(cand, bound=copies, level=COPIES))
                    continue
            if cand.level in (CHEAP, COPIES):  # its short run next: it enters again with the larger bound
                quick = self.bounds.quick(cand.name, cand.opts, cand.shape)
                if quick is not None and self.bounds.short_misfit(cand.name, cand.opts, cand.shape):
                    misfit_runs.append(cand)  # its short run with copies does not fit: no run
                    self._simulated(cand.shape, False)
                elif quick is not None:
                    self._push(replace(cand, bound=quick[0] if quick[1] else max(quick[0], bound),
                                       level=EXACT if quick[1] else QUICK))
                else:  # refused: it counts as simulated and not fitting (a rescued shape's next rung)
                    self._simulated(cand.shape, False)
                continue
            if cand.level == QUICK:  # its run next: it enters again with its step time
                step = self.bounds.time(cand.name, cand.opts, cand.shape)
                if step is not None:
                    self._push(replace(cand, bound=step, level=EXACT))
                else:
                    self._simulated(cand.shape, False)
                continue
            conf = _evaluate(self.space, self.bounds, cand, simulate_misfit=False)
            self._simulated(cand.shape, conf is not None)
            if conf is None:
                if self.bounds.run(cand.name, cand.opts, cand.shape) is not None:
                    misfit_runs.append(cand)
                continue
            results.append(conf)
            if conf.shape.stages == 1 and conf.shape in single:  # one stage: another schedule of the same run
                continue
            single.add(conf.shape)
            heapq.heappush(best, -conf.step_time_s)
            if len(best) > self.space.top:
                heapq.heappop(best)
            if time.perf_counter() - last_note > 2:
                self.say(f"simulated {len(results)} configurations")
                last_note = time.perf_counter()
        self.least_pruned = self.heap[0][0] if self.heap else float("inf")
        for _, _, item in self.heap:  # never reached: their bounds cannot beat the top
            self.pruned_time += len(self.variants) if isinstance(item, Context) else 1
        return results, misfit_runs


def _evaluate(space: PlanSpace, bounds: Bounds, cand: _Candidate, simulate_misfit: bool):
    """The candidate's configuration (its run: ``Bounds.run``), or None when the generator
    refuses its full instance or, unless ``simulate_misfit``, when its exact memory does
    not fit."""
    run = bounds.run(cand.name, cand.opts, cand.shape)
    if run is None:
        return None
    costs = run.costs
    acts = list(run.peaks)
    if not simulate_misfit and any(c is not None and p + a > c + 1e-9
                                   for p, a, c in zip(costs.persistent, acts, costs.capacity)):
        return None
    return configuration(space, cand.name, cand.opts, cand.shape, run.schedule, costs, run.makespan, acts,
                         scale=run.scale)


def _refined(space: PlanSpace, bounds: Bounds):
    """``refine``'s evaluation: a candidate's configuration when it fits (source
    ``refined``), else None."""
    def evaluate(name: str, opts: dict, shape: Context):
        conf = _evaluate(space, bounds, _Candidate(0.0, name, opts, shape), simulate_misfit=False)
        return None if conf is None else replace(conf, source="refined")

    return evaluate


def _closest_misfits(space: PlanSpace, bounds: Bounds, runs: list[_Candidate], misfits: list[_Candidate],
                     room: int) -> list[Configuration]:
    """When fewer than ``top`` fit: the misfits needing least memory, simulated, to rank
    after those that fit."""
    out: list[Configuration] = []
    for cand in runs + sorted(misfits, key=lambda c: c.bound):
        if len(out) >= room:
            break
        conf = _evaluate(space, bounds, cand, simulate_misfit=True)
        if conf is not None:
            out.append(conf)
    return out


def _search_and_validate(space: PlanSpace, bounds: Bounds, ranked: list[Configuration], pool, say):
    """CP-SAT on the best shapes (in ``pool``'s workers while this process validates the
    best configurations): (the ``top`` shown, validated; CP-SAT's notes; everything
    ranked, with what CP-SAT found; each searched shape with CP-SAT's bound and its
    assumptions)."""
    # CP-SAT needs a pipeline; it searches a shape's even layout (a refined layout is the registry schedule's)
    even = [replace(c, shape=c.shape.even) for c in ranked if c.shape.stages > 1]
    searched, skipped = cpsat_shapes(space, even)
    if searched:  # imported once here, not in each forked worker on its budget (about 1 s of OR-Tools)
        import pipetab.solver.cpsat.api
        import pipetab.solver.cpsat.phases.fixed  # noqa: F401
    jobs = []
    for i, (shape, best) in enumerate(searched):
        say(f"CP-SAT: searching {shape.label} m={shape.microbatches} on {best.label}'s placement for "
            f"{space.cpsat_time_s:g} s")
        t0 = time.perf_counter() if pool is None or i < pool.workers else None  # queued: its budget starts later
        jobs.append((shape, best, t0, pool.submit(cpsat_search, space, shape, best, t0) if pool else None))
    say(f"validating the {min(len(ranked), space.top)} best configurations")
    checked = {id(c): _validated(space, c, bounds) for c in distinct(ranked)[:space.top]}
    answers = [_cpsat_answer(space, shape, best, t0, job, ranked) for shape, best, t0, job in jobs]
    outcomes = [(conf, note) for conf, note, _ in answers] + [(None, note) for note in skipped]
    if space.cpsat_shapes and not searched and not skipped and ranked:
        outcomes.append((None, "not run: no configuration simulated has a pipeline (CP-SAT orders a pipeline's ops; "
                               "pin --pp to search one)"))
    ranked = rank(ranked + [c for c, _ in outcomes if c is not None])
    shown = [checked.get(id(c)) or _validated(space, c, bounds) for c in distinct(ranked)[:space.top]]
    return shown, [note for _, note in outcomes], ranked, [proof for _, _, proof in answers]


# seconds past its budget a CP-SAT worker may take to answer before plan stops it: the solver's
# own deadline keeps a safety margin inside the budget, so only a stalled build reaches this
CPSAT_GRACE_S = 0.5


def _cpsat_answer(space: PlanSpace, shape: Context, best: Configuration, t0: float | None, job, ranked):
    """(configuration or None, note, (shape, CP-SAT's lower bound or None, its
    assumptions)) of one CP-SAT search: its worker's answer, or a note that it was
    stopped at its budget (``t0`` plus ``space.cpsat_time_s`` and ``CPSAT_GRACE_S``)
    without one."""
    if job is None:
        answer = cpsat_search(space, shape, best, t0)
    else:
        budget = space.cpsat_time_s + CPSAT_GRACE_S
        try:
            answer = job.result(timeout=None if t0 is None else t0 + budget - time.perf_counter())
        except TimeoutError:
            return None, (f"{shape.label} recompute {shape.recompute}: stopped at its {space.cpsat_time_s:g} s "
                          "budget before it answered (building the model of this shape takes longer; give "
                          "--cpsat-time)"), (shape, None, ())
    conf, note = cpsat_outcome(space, shape, answer, ranked)
    return conf, note, (shape, answer.lower_bound_s, tuple(answer.assumptions))


def distinct(ranked: list[Configuration]) -> list[Configuration]:
    """``ranked`` with each configuration once: of the layouts and per-stage recomputations
    tried for one (schedule, options, shape), only the best (the first) stays, so the rows
    shown differ in more than a layer moved between stages; on one stage every schedule
    is the same run (its microbatches are gradient accumulation), so only the best stays."""
    seen: set = set()
    out = []
    for c in ranked:
        key = ("no pipeline", c.shape.even) if c.shape.stages == 1 else (c.schedule, c.options, c.shape.even)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _question(space: PlanSpace, profile=None) -> dict:
    out = {"model": space.model.name, "gpus": space.num_gpus,
           "gpus_per_node": space.system.devices_per_node, "system": space.system.name,
           "global_batch": space.global_batch, "seq_len": space.model.seq_len,
           "gpu_memory_bytes": space.system.device.memory_bytes, "reserved_bytes": space.system.device.reserved_bytes}
    if profile is not None:
        out["profile"] = profile.name
    return out


def plan_profiled(space: PlanSpace, profile, say, t0: float) -> Plan:
    """Every registry schedule on the profiled shape (its stages, ``tp``, ``dp`` and
    microbatch size; the microbatches follow from the global batch), costs from the
    profile (``solver.pricing.profile_costs``), memory against the profile's ``memory_bytes``
    or else the GPU's usable memory."""
    from pipetab.hardware.profile import check_possible
    from pipetab.solver.pricing import profile_costs
    from pipetab.solver.simulate import simulate

    tp, dp, b, n = profile.tp, profile.dp, profile.microbatch_size, space.num_gpus
    if b is None:
        raise ValueError(f"profile {profile.name!r} gives no 'microbatch_size': plan needs it")
    profile.check_matches(space.model, space.model.seq_len, space.system.device.peak_flops,
                          gpu_flag=f"the cluster ({space.system.name})")
    pp = profile.num_stages or n // (tp * dp)
    if pp * tp * dp != n:
        raise ValueError(f"profile {profile.name!r} describes {pp} stages x TP {tp} x DP {dp} GPUs, "
                         f"the cluster has {n}")
    if space.global_batch % (dp * b):
        raise ValueError(f"global batch {space.global_batch} is not a multiple of DP {dp} x microbatch size {b}")
    check_possible(profile, space.model, space.system.device.peak_flops, pp, f" ({space.system.name})")
    shape = Context(tp=tp, dp=dp, pp=pp, sequence_parallel=False, zero=0, microbatch_size=b,
                    global_batch=space.global_batch, seq_len=space.model.seq_len)
    capacity = profile.memory_bytes or space.system.device.usable_memory_bytes
    results, skipped = [], 0
    for name, opts in space.variants():
        try:
            sched = registry.generate(name, pp, shape.sizes.microbatches, **opts)
            costs = replace(profile_costs(sched, profile), capacity=(capacity,) * pp)
        except ValueError:
            skipped += 1
            continue
        say(f"simulating {schedule_label(name, opts)} on the profile")
        results.append(configuration(space, name, opts, shape, sched, costs, simulate(sched, costs).makespan,
                                      activation_peaks(sched, costs), capacity=capacity, profiled=True))
    shown = rank(results)[:space.top]
    validated = []
    for c in shown:
        sched = registry.generate(c.schedule, pp, shape.sizes.microbatches, **dict(c.options))
        validated.append(_validated(space, c, None, replace(profile_costs(sched, profile), capacity=(capacity,) * pp),
                                    sched))
    total = len(space.variants())
    return Plan(tuple(validated), total, 0, 0, len(results),
                (f"not run: the profile fixes the op times of one shape ({skipped} schedules do not apply)",),
                time.perf_counter() - t0, _question(space, profile), tuple(rank(results)),
                certificate=certify(validated, results, float("inf"), []))


def _validated(space: PlanSpace, conf: Configuration, bounds: Bounds | None, costs=None,
               sched: Schedule | None = None) -> Configuration:
    """``conf`` with its levels (``evaluate_levels`` validates the table; its simulation
    must give the ranked step time). A run extrapolated from a few periods
    (``periodic``) is validated on its largest simulated instance."""
    from pipetab.solver.levels import evaluate_levels

    run = None
    if sched is None and conf.searched is None and bounds is not None:
        run = bounds.run(conf.schedule, dict(conf.options), conf.shape)
        sched, costs = run.schedule, run.costs
    sched = sched or conf.searched
    if sched is None:
        raise ValueError(f"{conf.label}: no schedule to validate")
    levels = evaluate_levels(sched, costs=costs or costs_of(space, sched, conf.shape))
    # the simulation of what was ranked: the run itself, or the instance it was extrapolated from
    if levels.simulation is None:
        raise ValueError(f"{conf.label}: evaluate_levels ran no simulation")
    step, ranked = levels.simulation.makespan, conf.step_time_s
    if run is not None and run.extrapolated:
        ranked = run.schedule_makespan
    if abs(step - ranked) > 1e-9 * ranked:
        raise AssertionError(f"{conf.label}: evaluate_levels gives {step} s, the plan ranked {ranked} s")
    if run is not None and run.extrapolated:
        return replace(conf, levels=levels, sample_microbatches=sched.num_microbatches)
    return replace(conf, levels=levels)
