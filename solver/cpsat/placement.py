"""Free placement as a decomposition: every placement of the stages on the devices up to
relabelling of identical devices (``canonical_placements``), each searched with its
placement fixed (``fixed.search_fixed``) on a slice of the deadline, those whose analytic
bound reaches the incumbent pruned; above ``DecomposeParams.max_placements`` placements,
one model with placement literals. The free problem's bound is the least over all
placements (proven for those searched, analytic for the rest)."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from pipetab.schedules.schedule import Placement, Schedule

from .bounds import cap_violations, safe_horizon
from .families import devices_identical
from .fixed import finish, infeasible_cap, search_assumptions, search_fixed
from .model import CpSatModel
from .objectives import analytic_lower_bound, objective
from .oracle import KnownEval, checked, evaluate_known, relabel_microbatches
from .result import Mode, PhaseRecord, Result, Status
from .starts import best_of, greedy_starts, judge
from .strategy import solve_record

if TYPE_CHECKING:
    from pipetab.solver.deadline import Deadline

    from .params import CpSatConfig
    from .problem import Problem


def canonical_placements(problem: Problem, limit: int) -> list[Placement] | None:
    """Every placement of the problem's stages on its devices, up to relabelling of
    identical devices (restricted growth strings); None when more than ``limit``."""
    keys = list(problem.stages)
    D, N = problem.num_devices, len(keys)
    out: list[Placement] = []

    def emit(assign: list[int]) -> bool:
        per, i = [], 0
        for n in problem.num_stages:
            per.append(tuple(assign[i:i + n]))
            i += n
        out.append(Placement(tuple(per), D))
        return len(out) <= limit

    if devices_identical(problem):
        assign = [0] * N

        def rec(i: int, top: int) -> bool:
            if i == N:
                return emit(assign)
            for d in range(min(top + 2, D)):
                assign[i] = d
                if not rec(i + 1, max(top, d)):
                    return False
            return True

        ok = rec(1, 0) if N > 1 else emit(assign)
    else:
        ok = all(emit(list(combo)) for combo in itertools.product(range(D), repeat=N))
    return out if ok else None


def canonical_devices(schedule: Schedule) -> Schedule:
    """The schedule with devices renumbered in order of first use by its stages."""
    pl = schedule.placement
    order: list[int] = []
    for stages in pl.stage2device:
        for d in stages:
            if d not in order:
                order.append(d)
    order += [d for d in range(pl.num_devices) if d not in order]
    new_of = {old: new for new, old in enumerate(order)}
    placement = Placement(tuple(tuple(new_of[d] for d in st) for st in pl.stage2device), pl.num_devices)
    orders: list = [()] * pl.num_devices
    for old, ops in enumerate(schedule.orders):
        orders[new_of[old]] = ops
    return Schedule(schedule.name, placement, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)


@dataclass
class _Free:
    """The incumbent and what every placement proved, over the decomposition."""

    schedule: Schedule | None = None
    value: float | None = None
    t_first: float | None = None
    bounds: list = field(default_factory=list)
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
    placements = canonical_placements(problem, limit) if config.uses("decompose") else None
    if placements is None:
        return _monolithic(problem, config, evals, deadline, mode)
    identical = devices_identical(problem)
    label = (f"placement free: all {len(placements)} placements"
             + (" up to relabelling of identical devices" if identical else "")
             + " enumerated, each solved with its placement fixed, pruned by bound")
    feasible = [(pl, analytic_lower_bound(problem.with_placement(pl), pl)[0]) for pl in placements
                if not cap_violations(problem.with_placement(pl), pl)]
    if not feasible:
        return infeasible_cap(problem, mode, deadline, None, ["no placement fits the memory capacity"], config)
    known_pl: dict = {}  # known schedules first (their placements give the first incumbent), then by bound
    for e in evals:
        if e.fits:
            key = (canonical_devices(e.schedule) if identical else e.schedule).placement.stage2device
            known_pl.setdefault(key, []).append(e)
    feasible.sort(key=lambda x: (x[0].stage2device not in known_pl, x[1]))
    run = _Free()
    best = best_of(evals)
    if best is not None:
        run.offer(best.schedule, best.makespan, deadline.t0)
    det = None if config.deterministic_time is None else config.deterministic_time / len(feasible)
    for idx, (pl, lb) in enumerate(feasible):
        _visit(problem, config, deadline, mode, label, run, feasible[idx:], pl, lb, det,
               [canonical_devices(e.schedule) if identical else e.schedule for e in known_pl.get(pl.stage2device, [])])
    if identical:
        run.families.add("device symmetry")
    return _free_result(problem, config, deadline, mode, label, run, evals, skipped)


def _visit(problem: Problem, config: CpSatConfig, deadline: Deadline, mode: Mode, label: str, run: _Free,
           rest: list, pl: Placement, lb: int, det: float | None, known: list[Schedule]) -> None:
    """Prune placement ``pl`` by its bound or search it on its share of the time left
    (``det`` deterministic seconds)."""
    if run.value is not None and lb >= run.value:
        run.bounds.append(lb)
        run.phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", 0.0,
                                      note=f"pruned: analytic bound {lb} >= {run.value}"))
        return
    remaining = deadline.wall_left()
    if remaining <= 0.05:
        run.bounds.append(lb)
        run.unsolved += 1
        return
    left = sum(1 for _, lb2 in rest if run.value is None or lb2 < run.value)
    slice_s = max(remaining / max(1, left), min(remaining, 0.5))
    if run.schedule is not None and run.schedule.placement.stage2device == pl.stage2device:
        known = [*known, run.schedule]
    res = search_fixed(problem, pl, config, known, deadline.within(max(0.05, slice_s), det), mode, label=label)
    run.families.update(res.solver.families)
    run.bounds.append(math.inf if res.status is Status.INFEASIBLE else
                      (res.lower_bound if res.lower_bound is not None else lb))
    run.phases.append(PhaseRecord(f"placement {[list(x) for x in pl.stage2device]}", round(res.runtime_s, 3),
                                  tuple(res.log.solves()),
                                  f"{res.status}, {problem.objective} {res.makespan}, bound {res.lower_bound}"))
    run.offer(res.schedule, res.makespan, deadline.t0)


def _free_result(problem: Problem, config: CpSatConfig, deadline: Deadline, mode: Mode, label: str, run: _Free,
                 evals: list[KnownEval], skipped: list[str]) -> Result:
    lb_all = min(run.bounds) if run.bounds else None
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
                      "no schedule found" if run.unsolved else "no schedule exists", evals, config, phases, families)
    ev = checked(problem.with_placement(run.schedule.placement), run.schedule, run.value)  # type: ignore[arg-type]
    status = Status.OPTIMAL if lb_all is not None and lb_all >= ev.makespan else Status.FEASIBLE
    return finish(problem, mode, status, run.schedule, ev.makespan, lb_all, deadline.t0, run.t_first, assumptions,
                  "", evals, config, phases, families)


def _monolithic(problem: Problem, config: CpSatConfig, evals: list[KnownEval], deadline: Deadline,
                mode: Mode) -> Result:
    """One model with placement literals (above ``max_placements`` canonical placements)."""
    if not objective(problem).free_placement:
        raise ValueError(f"the {problem.objective} objective with free placement needs the decomposition "
                         f"(at most {config.decompose.max_placements} canonical placements)")
    t0 = deadline.t0
    best = best_of(evals) or _dealt_start(problem)
    lb, _ = analytic_lower_bound(problem, None)
    horizon = best.makespan if best else safe_horizon(problem, None)
    t_first = time.perf_counter() - t0 if best else None
    model = CpSatModel(problem, config, None, horizon, makespan_lb=lb)  # type: ignore[arg-type]
    if config.uses("hints") and best is not None:
        sched = canonical_devices(best.schedule) if "device symmetry" in model.applied else best.schedule
        ev = evaluate_known(problem.with_placement(sched.placement), sched)
        model.hint(*relabel_microbatches(sched, ev.timing))  # type: ignore[arg-type]
    t = time.perf_counter()
    raw = model.solve(*deadline.slice(1.0).limits())
    phases = (PhaseRecord("solve", round(time.perf_counter() - t, 3), (solve_record("solve", config, None, raw),)),)
    assumptions = search_assumptions(problem, "placement free (one model with placement literals)", model.applied)
    chosen, value = (best.schedule, best.makespan) if best else (None, None)
    if raw.starts is not None:
        cand = model.schedule_from(raw)
        ev = checked(problem.with_placement(cand.placement), cand, raw.makespan)
        if value is None or ev.makespan < value:  # type: ignore[operator]
            chosen, value = cand, ev.makespan
            t_first = t_first if t_first is not None else time.perf_counter() - t0
    fam = tuple(model.applied)
    if raw.status == "infeasible" and chosen is None:
        return finish(problem, mode, Status.INFEASIBLE, None, None, None, t0, None, assumptions, "no schedule exists",
                      evals, config, phases, fam, lb)
    bound = max(lb, raw.bound) if raw.bound is not None else lb
    if chosen is None:
        return finish(problem, mode, Status.UNKNOWN, None, None, bound, t0, None, assumptions,
                      "no schedule found within the limit", evals, config, phases, fam, lb)
    status = Status.OPTIMAL if bound >= value else Status.FEASIBLE  # type: ignore[operator]
    return finish(problem, mode, status, chosen, value, min(bound, value), t0, t_first, assumptions, "",  # type: ignore[type-var]
                  evals, config, phases, fam, lb)


def _dealt_start(problem: Problem) -> KnownEval | None:
    """A first incumbent: a greedy schedule on the stages dealt round-robin over the devices."""
    D = problem.num_devices
    pl = Placement(tuple(tuple(s % D for s in range(n)) for n in problem.num_stages), D)
    fp = problem.with_placement(pl)
    if cap_violations(fp, pl):
        return None
    return best_of(evaluate_known(fp, s) for s in greedy_starts(fp, pl))
