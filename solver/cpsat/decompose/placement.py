"""Free placement as a decomposition: every placement up to relabelling of identical devices
(``canonical_placements``) searched with its placement fixed on a slice of the deadline,
those whose analytic bound reaches the incumbent pruned; above ``max_placements``, one model
with placement literals. The free bound is the least over placements (proven or analytic).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.placements import canonical_placements
from pipetab.schedules.rewrite import canonical_devices, relabel_microbatches

from ..heuristics.starts import Pace, Start, best_of, judge, start_phase
from ..model.bounds import cap_violations, safe_horizon, stage_loads
from ..model.cpmodel import CpSatModel
from ..model.families import devices_identical
from ..model.objectives import analytic_lower_bound, objective
from ..model.oracle import KnownEval, checked, evaluate_known
from ..model.variables import BuildTimeout
from ..phases.fixed import finish, infeasible_cap, search_assumptions, search_fixed
from ..phases.strategy import solve_record
from ..result import Mode, PhaseRecord, Result, Status

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement, Schedule
    from pipetab.solver.deadline import Deadline

    from ..model.cpmodel import RawSolve
    from ..params import CpSatConfig
    from ..problem import Problem


@dataclass
class _Free:
    """The incumbent and what every placement proved (``bounds``, by placement), over the
    decomposition; ``searched``: the placements searched, with their known schedules."""

    schedule: Schedule | None = None
    value: float | None = None
    t_first: float | None = None
    bounds: dict = field(default_factory=dict)
    searched: list = field(default_factory=list)
    phases: list = field(default_factory=list)
    families: set = field(default_factory=set)
    unsolved: int = 0

    def offer(self, schedule: Schedule | None, value, t0: float) -> None:
        if value is not None and (self.value is None or value < self.value):
            self.schedule, self.value = schedule, value
            if self.t_first is None:
                self.t_first = time.perf_counter() - t0


def search_free(problem: Problem, config: CpSatConfig, known: Sequence[Schedule], deadline: Deadline,
                mode: Mode) -> Result:
    """``search`` or ``bound`` with the placement free (module docstring)."""
    evals, skipped = judge(problem, known)
    limit = config.decompose.max_placements
    identical = devices_identical(problem)
    placements = (canonical_placements(problem.num_stages, problem.num_devices, limit, identical)
                  if config.uses("decompose") else None)
    if placements is None:
        return _monolithic(problem, config, evals, deadline, mode)
    label = (f"placement free: all {len(placements)} placements"
             + (" up to relabelling of identical devices" if identical else "")
             + " enumerated, each solved with its placement fixed, pruned by bound")
    known_pl, order = _visit_order(problem, evals, placements, identical)
    first_unknown = sum(1 for pl, _ in order if pl.stage2device in known_pl)
    run = _Free()
    best = best_of(evals)
    if best is not None:
        run.offer(best.schedule, best.makespan, deadline.t0)
    det = None if config.deterministic_time is None else config.deterministic_time / len(order)
    fits = 0
    for idx, (pl, load) in enumerate(order):
        pruned = run.value is not None and load >= run.value
        if pruned and idx < first_unknown:  # a known schedule's placement: pruned alone
            run.bounds[pl.stage2device] = load
            continue
        if pruned or deadline.wall_left() <= 0.05:  # pruned: so are all after it (by load)
            run.bounds.update((p.stage2device, x) for p, x in order[idx:])
            run.unsolved += 0 if pruned else len(order) - idx
            if pruned:
                run.phases.append(PhaseRecord(
                    f"{len(order) - idx} placements", 0.0,
                    note=f"pruned: a device's load, or the free bound, at least {load} >= {run.value}"))
            break
        fixed = problem.with_placement(pl)
        if cap_violations(fixed, pl):
            continue
        fits += 1
        _visit(problem, config, deadline, mode, label, run, order[idx:], pl, analytic_lower_bound(fixed, pl)[0],
               det, [canonical_devices(e.schedule) if identical else e.schedule
                     for e in known_pl.get(pl.stage2device, [])])
    if not fits and not run.unsolved and run.value is None:
        return infeasible_cap(problem, mode, deadline, None, ["no placement fits the memory capacity"], config)
    # the time the placements' slices left (most are pruned by bound): the open ones again, least bound first
    for pl, given in sorted(run.searched, key=lambda x: run.bounds[x[0].stage2device]):
        if deadline.left() < 0.5:
            break
        if run.value is not None and run.bounds[pl.stage2device] < run.value:
            _visit(problem, config, deadline, mode, label, run, [], pl, run.bounds[pl.stage2device],
                   deadline.det_left() if deadline.deterministic else None, given)
    if identical:
        run.families.add("device symmetry")
    return _free_result(problem, config, deadline, mode, label, run, evals, skipped)


def _visit_order(problem: Problem, evals: list[KnownEval], placements, identical: bool) -> tuple[dict, list]:
    """The fitting known schedules by placement, and the placements with their loads in visit
    order: known schedules' first, then by load. Cap checks and analytic bounds are computed on
    visit (5.3 ms apiece at S=8 with a cap: all 4,140 first took 22 s); an unvisited one's bound
    is its load (at least the free analytic bound)."""
    known_pl: dict = {}
    for e in evals:
        if e.fits:
            key = (canonical_devices(e.schedule) if identical else e.schedule).placement.stage2device
            known_pl.setdefault(key, []).append(e)
    work = stage_loads(problem)
    free_lb = analytic_lower_bound(problem, None)[0]  # every placement's, with its load: what an unvisited one counts
    order = sorted(((pl, max(free_lb, _most_loaded(problem, pl, work))) for pl in placements),
                   key=lambda x: (x[0].stage2device not in known_pl, x[1]))
    return known_pl, order


def _most_loaded(problem: Problem, placement: Placement, work: dict) -> int:
    """The largest device load under ``placement`` (``work`` per stage): a bound of it."""
    load = [0] * problem.num_devices
    for (p, st), w in work.items():
        load[placement.device(p, st)] += w
    return max(load)


def _visit(problem: Problem, config: CpSatConfig, deadline: Deadline, mode: Mode, label: str, run: _Free,
           rest: list, pl: Placement, lb: int, det: float | None, known: list[Schedule],
           start: Start | None = None) -> None:
    """Prune ``pl`` by its bound or search it on its share of the time left (``start``: run already)."""
    if run.value is not None and lb >= run.value:
        run.bounds[pl.stage2device] = lb
        run.phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", 0.0,
                                      note=f"pruned: analytic bound {lb} >= {run.value}"))
        return
    remaining = deadline.wall_left()
    if remaining <= 0.05:
        run.bounds[pl.stage2device] = lb
        run.unsolved += 1
        return
    left = sum(1 for _, lb2 in rest if run.value is None or lb2 < run.value)
    slice_s = max(remaining / max(1, left), min(remaining, 0.5))
    if run.schedule is not None and run.schedule.placement.stage2device == pl.stage2device:
        known = [*known, run.schedule]
    res = search_fixed(problem, pl, config, known, deadline.within(max(0.05, slice_s), det), mode, label=label,
                       start=start)
    run.families.update(res.solver.families)
    run.bounds[pl.stage2device] = (math.inf if res.status is Status.INFEASIBLE else
                                   max(lb, res.lower_bound if res.lower_bound is not None else lb))
    if res.status is not Status.INFEASIBLE:
        run.searched.append((pl, known))
    run.phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", round(res.runtime_s, 3),
                                  tuple(res.log.solves()),
                                  f"{res.status}, {problem.objective} {res.makespan}, bound {res.lower_bound}"))
    run.offer(res.schedule, res.makespan, deadline.t0)


def _free_result(problem: Problem, config: CpSatConfig, deadline: Deadline, mode: Mode, label: str, run: _Free,
                 evals: list[KnownEval], skipped: list[str], message: str = "") -> Result:
    lb_all = min(run.bounds.values()) if run.bounds else None
    if run.value is not None and lb_all is not None:
        lb_all = min(lb_all, run.value)
    if lb_all is not None and not math.isfinite(lb_all):
        lb_all = None
    phases = ([PhaseRecord("start", 0.0, note="skipped: " + "; ".join(skipped))] if skipped else []) + run.phases
    assumptions = search_assumptions(problem, label, run.families)
    families = tuple(sorted(run.families))
    if run.schedule is None:
        status = Status.UNKNOWN if run.unsolved else Status.INFEASIBLE
        return finish(problem, mode, status, None, None, lb_all, deadline.t0, None, assumptions,
                      ("no schedule found" if run.unsolved else "no schedule exists")
                      + (f": {message}" if message else ""),
                      evals, config, phases, families)
    ev = checked(problem.with_placement(run.schedule.placement), run.schedule, run.value)  # type: ignore[arg-type]
    status = Status.OPTIMAL if lb_all is not None and lb_all >= ev.makespan else Status.FEASIBLE
    return finish(problem, mode, status, run.schedule, ev.makespan, lb_all, deadline.t0, run.t_first, assumptions,
                  message, evals, config, phases, families)


def _monolithic(problem: Problem, config: CpSatConfig, evals: list[KnownEval], deadline: Deadline,
                mode: Mode) -> Result:
    """One model with placement literals, built only up to ``free_model_max_intervals``
    op-device intervals and where its build is predicted to fit; else ``_dealt_search``."""
    if not objective(problem).free_placement:
        raise ValueError(f"the {problem.objective} objective with free placement needs the decomposition "
                         f"(at most {config.decompose.max_placements} canonical placements)")
    intervals = problem.num_ops * problem.num_devices
    limit = config.decompose.free_model_max_intervals
    if intervals > limit:
        return _dealt_search(problem, config, evals, deadline, mode,
                             f"{intervals:,} op-device intervals are more than one model takes ({limit:,})")
    t0 = deadline.t0
    pace = Pace(deadline, config.start)
    pace.measured_from(evals)
    dealt = problem.dealt
    fp = problem.with_placement(dealt)
    start = None if cap_violations(fp, dealt) else start_phase(fp, dealt, config, (), deadline, pace)
    if start is not None:
        named = {e.name for e in evals}
        evals = [*evals, *(e for e in start.evals if e.name not in named)]
    best = best_of([*evals, *([start.best] if start is not None and start.best is not None else [])])
    lb, _ = analytic_lower_bound(problem, None)
    t_first = time.perf_counter() - t0 if best else None
    label = "placement free (one model with placement literals)"
    # the build grows with ops x devices: a fixed placement's build (StartParams.costs) times D / 5, measured
    # at 8 to 32 devices (12 to 13 evaluations of a schedule per device: 4.8 s for 16,384 ops on 32 devices)
    if not pace.fits("build", deadline.end - pace.reserve(),
                     config.start.builds_left * max(1.0, problem.num_devices / 5)):
        return _dealt_search(problem, config, evals, deadline, mode, "the time limit leaves no time to build it",
                             start)
    horizon = best.makespan if best else safe_horizon(problem, None)
    try:
        model = CpSatModel(problem, config, None, horizon, makespan_lb=lb,  # type: ignore[arg-type]
                           deadline=deadline.end - pace.reserve())
    except BuildTimeout:
        return _dealt_search(problem, config, evals, deadline, mode, "the time limit ran out while building it",
                             start)
    if config.uses("hints") and best is not None:
        sched = canonical_devices(best.schedule) if "device symmetry" in model.applied else best.schedule
        ev = evaluate_known(problem.with_placement(sched.placement), sched)
        model.hint(*relabel_microbatches(sched, ev.timing))  # type: ignore[arg-type]
    t = time.perf_counter()
    raw = model.solve(*deadline.slice(1.0).limits())
    phases = (PhaseRecord("solve", round(time.perf_counter() - t, 3), (solve_record("solve", config, None, raw),)),)
    return _monolithic_result(problem, config, mode, model, raw, best, lb, t0, t_first, evals,
                              search_assumptions(problem, label, model.applied), phases)


def _monolithic_result(problem: Problem, config: CpSatConfig, mode: Mode, model: CpSatModel, raw: RawSolve,
                       best: KnownEval | None, lb: int, t0: float, t_first: float | None,
                       evals: list[KnownEval], assumptions, phases) -> Result:
    """The result of the one model: its schedule where better than the best start."""
    chosen, value = (best.schedule, best.makespan) if best else (None, None)
    if raw.starts is not None:
        cand = model.schedule_from(raw)
        ev = checked(problem.with_placement(cand.placement), cand, raw.makespan)
        if value is None or ev.makespan < value:  # type: ignore[operator]
            chosen, value = cand, ev.makespan
            t_first = t_first if t_first is not None else time.perf_counter() - t0
    fam = tuple(model.applied)
    if raw.status is Status.INFEASIBLE and chosen is None:
        return finish(problem, mode, Status.INFEASIBLE, None, None, None, t0, None, assumptions, "no schedule exists",
                      evals, config, phases, fam, lb)
    bound = max(lb, raw.bound) if raw.bound is not None else lb
    if chosen is None:
        return finish(problem, mode, Status.UNKNOWN, None, None, bound, t0, None, assumptions,
                      "no schedule found within the limit", evals, config, phases, fam, lb)
    status = Status.OPTIMAL if bound >= value else Status.FEASIBLE  # type: ignore[operator]
    return finish(problem, mode, status, chosen, value, min(bound, value), t0, t_first, assumptions, "",  # type: ignore[type-var]
                  evals, config, phases, fam, lb)


def _dealt_search(problem: Problem, config: CpSatConfig, evals: list[KnownEval], deadline: Deadline, mode: Mode,
                  why: str, start: Start | None = None) -> Result:
    """Without one model (``why``): the stages dealt round-robin searched with their placement
    fixed (from ``start`` if run) for the time left; every other placement has the free
    analytic bound."""
    pl = problem.dealt
    lb, lb_why = analytic_lower_bound(problem, None)
    label = ("placement free: the stages dealt round-robin searched, every other placement bounded "
             f"analytically ({lb_why}); no model with placement literals ({why})")
    run = _Free()
    best = best_of(evals)
    if best is not None:
        run.offer(best.schedule, best.makespan, deadline.t0)
    run.bounds["every other placement"] = lb
    run.unsolved += 1  # the other placements are bounded, not searched: no proof that none has a schedule
    fixed = problem.with_placement(pl)
    if cap_violations(fixed, pl):
        run.phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", 0.0,
                                      note="breaks the memory cap"))
    else:
        _visit(problem, config, deadline, mode, label, run, [], pl, analytic_lower_bound(fixed, pl)[0],
               config.deterministic_time,
               [e.schedule for e in evals if e.fits and e.schedule.placement.stage2device == pl.stage2device], start)
    return _free_result(problem, config, deadline, mode, label, run, evals, [],
                        f"the stages dealt round-robin searched; no model with placement literals: {why}")
