"""The three modes of the CP-SAT model — evaluate, search, bound — plus the memory front
and the layer-split search, each returning a solver-independent ``Result``.

Every schedule a mode returns is re-timed by the solver-free evaluator
(``schedules.evaluate.asap`` with the transfer lags, plus all-reduce and optimizer tails),
whose makespan is asserted to be no worse than the solver's, and its table is validated.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from pipetab.schedules.schedule import Placement, Schedule
from pipetab.solver.costs import Costs

from .bounds import (
    analytic_lower_bound,
    cap_violations,
    min_feasible_cap,
    safe_horizon,
)
from .config import CpSatConfig
from .constraints import devices_identical
from .incumbent import checked, hint_incumbent, solution_of
from .justify import justify, precedence_graph
from .model import CpSatModel
from .oracle import (
    KnownEval,
    evaluate_known,
    greedy_candidates,
    relabel_microbatches,
)
from .phases import (
    SearchState,
    bound_then_search,
    improve_upper,
    relaxation_bounds,
    relaxation_sets,
    tighten_horizon,
    upper_phase_config,
)
from .problem import Problem
from .race import race
from .result import KnownGap, Result, gap_of

_FIFO_LABEL = (
    "every stage runs a pipeline's microbatches in one order (FIFO) — without loss of "
    "generality for identical microbatches: relabelling the k-th op of each kind on each "
    "stage as microbatch k keeps every time, dependency and memory profile"
)
_SYM_LABEL = "stage-0 forwards start in microbatch order (relabelling symmetry, without loss of generality)"


# ---- helpers ---------------------------------------------------------------------------------
def _unit(problem: Problem) -> str:
    return problem.costs.unit


def _base_assumptions(problem: Problem, placement_label: str) -> list[str]:
    out = [placement_label]
    if len(set(problem.microbatch2pipeline)) > 1:
        out.append("microbatch-to-pipeline assignment fixed")
    out.append("stage partition fixed (op times as given)")
    c = problem.costs
    if c.tick_s is not None:
        if getattr(c, "rounding", "up") == "down":
            out.append(
                f"durations rounded down to ticks of {c.tick_s:g} s (a lower bound of the real-valued problem)"
            )
        else:
            out.append(
                f"durations rounded up to ticks of {c.tick_s:g} s (bound of the quantized problem)"
            )
    elif c.unit == "slots":
        out.append("idealized slot costs")
    caps = [problem.cap(d) for d in range(problem.num_devices)]
    if any(cap is not None for cap in caps):
        rel = "W" if problem.split_backward else "B"
        out.append(f"activation live from its F's start to its {rel}'s end")
    return out


def _search_assumptions(problem: Problem, config: CpSatConfig, placement_label: str, applied: Iterable[str]) -> tuple[str, ...]:
    out = _base_assumptions(problem, placement_label)
    applied = set(applied)
    if "fifo" in applied:
        out.append(_FIFO_LABEL)
    elif "symmetry break" in applied:
        out.append(_SYM_LABEL)
    if "device symmetry" in applied:
        out.append("device relabelling symmetry (identical devices, uniform links; without loss of generality)")
    return tuple(out)


def _placement_label(problem: Problem, placement: Placement | None) -> str:
    if placement is None:
        return "placement free"
    if isinstance(problem.placement, str) and problem.placement != "free":
        names = {
            "linear": "linear (stage d on device d)",
            "bidirectional": "bidirectional (down s->s, up s->S-1-s)",
            "wave": "wave (stages zig-zag over devices)",
        }
        return f"placement fixed: {names[problem.placement]}"
    return f"placement fixed: {[list(x) for x in placement.stage2device]}"


def auto_known(problem: Problem, placement: Placement) -> list[Schedule]:
    """Known schedules of this problem: every registry generator whose schedule (default
    options; Hanayo with the problem's waves, interleaved with its chunks) has the
    problem's shape and placement, and greedy memory-aware list schedules (always
    including one microbatch at a time)."""
    from pipetab.schedules import registry

    out: list[Schedule] = []
    S, B = problem.num_devices, problem.num_microbatches
    fixed = problem.with_placement(placement)
    n0 = problem.num_stages[0]
    for name, spec in registry.REGISTRY.items():
        opts = {}
        names = {o.name for o in spec.options}
        if "waves" in names and problem.num_pipelines == 1 and n0 % (2 * S) == 0:
            opts["waves"] = n0 // (2 * S)
        if "chunks" in names and problem.num_pipelines == 1 and n0 % S == 0:
            opts["chunks"] = n0 // S
        try:
            s = registry.generate(name, S, B, **opts)
        except (ValueError, NotImplementedError, TypeError):
            continue
        if fixed.matches(s) is None:
            out.append(s)
    out += greedy_candidates(problem, placement)
    return out


def _judge(problem: Problem, schedules: Iterable[Schedule]) -> tuple[list[KnownEval], list[str]]:
    evals, skipped = [], []
    for s in schedules:
        why = problem.matches(s)
        if why is not None:
            skipped.append(f"{s.name}: {why}")
            continue
        evals.append(evaluate_known(problem, s))
    return evals, skipped


def _justified(problem: Problem, placement: Placement, evals: Sequence[KnownEval], until: float) -> list[KnownEval]:
    """The fitting known schedules improved by double justification (``justify``), best
    known first, while the clock is before ``until``. Each is worth trying: on linear
    S=16, B=64, cap 16, C=1 the best known (greedy, 378) does not improve but 1F1B (385)
    becomes 375."""
    fitting = sorted((e for e in evals if e.fits), key=lambda e: e.makespan)
    if not fitting or time.perf_counter() > until:
        return []  # e.g. later placements of a free-placement search, past the 10%
    graph = precedence_graph(problem, placement)
    if graph is None:
        return []
    out = []
    for e in fitting:
        if time.perf_counter() > until:
            break
        better = justify(problem, placement, e, graph)
        if better is not None:
            out.append(better)
    return out


def _best(evals: Iterable[KnownEval]) -> KnownEval | None:
    fitting = [e for e in evals if e.fits]
    return min(fitting, key=lambda e: e.makespan) if fitting else None


def _solver_details(config: CpSatConfig, time_limit: float) -> dict:
    return {
        "workers": config.workers,
        "random_seed": config.random_seed,
        "subsolvers": list(config.portfolio() or ()),
        "time_limit_s": round(time_limit, 3),
        "deterministic_time": config.deterministic_time,
    }


def _infeasible_cap(problem: Problem, mode: str, t0: float, placement: Placement | None, reasons: list[str],
                    label: str | None = None) -> Result:
    mfc = min_feasible_cap(problem)
    shown = "; ".join(reasons[:2]) + (f" (and {len(reasons) - 2} more devices)" if len(reasons) > 2 else "")
    return Result(
        mode, "infeasible", None, None, None, _unit(problem), time.perf_counter() - t0,
        bound_assumptions=tuple(_base_assumptions(problem, label or _placement_label(problem, placement))),
        message=shown + f"; the smallest feasible activation cap is {mfc:g}",
        min_feasible_cap=mfc, tick_s=problem.costs.tick_s,
    )


# ---- evaluate ---------------------------------------------------------------------------------
def evaluate(schedule: Schedule, costs: Costs, config: CpSatConfig | None = None) -> Result:
    """CP-SAT in fixed mode: the schedule's placement and per-device orders fixed (orders
    as precedence chains) → its makespan, which must equal the evaluator's (asap with
    transfer lags, plus all-reduce and optimizer tails). A memory cap the order breaks is
    reported as ``infeasible`` naming the device (prefix sums, no solver needed); so is a
    deadlocking order."""
    config = config or CpSatConfig()
    t0 = time.perf_counter()
    problem = Problem.from_schedule(schedule, costs)
    label = f"placement and per-device order fixed: {schedule.name}"
    known = evaluate_known(problem, schedule)
    mem = known.memory
    if not mem.fits or known.makespan is None:
        return Result(
            "evaluate", "infeasible", schedule, None, None, _unit(problem), time.perf_counter() - t0,
            bound_assumptions=(label,), message=mem.violation or known.error,
            details={"peak_activations": list(mem.peaks)}, tick_s=costs.tick_s,
        )
    oracle = known.makespan
    cfg = config.replace(hints=False)
    horizon = safe_horizon(problem, schedule.placement)
    model = CpSatModel(problem, cfg, schedule.placement, horizon, orders=schedule.orders)
    raw = model.solve(max(0.05, config.time_limit_s - (time.perf_counter() - t0)), workers=1)
    runtime = time.perf_counter() - t0
    details = {"evaluator_makespan": oracle, "peak_activations": list(mem.peaks),
               **_solver_details(config, config.time_limit_s), "workers": 1, "subsolvers": []}
    if raw.status != "optimal":
        return Result(
            "evaluate", "unknown" if raw.status != "infeasible" else "infeasible", schedule,
            raw.makespan, raw.bound, _unit(problem), runtime, raw.first_solution_time, (label,),
            message=f"CP-SAT did not settle the fixed schedule ({raw.status}) within the limit",
            details=details, tick_s=costs.tick_s,
        )
    if raw.makespan != oracle:
        raise RuntimeError(
            f"CP-SAT fixed mode gives makespan {raw.makespan} for {schedule.name!r}, "
            f"the evaluator {oracle}: a modelling bug"
        )
    return Result(
        "evaluate", "optimal", schedule, raw.makespan, raw.makespan, _unit(problem), runtime,
        raw.first_solution_time, (label,), details=details, tick_s=costs.tick_s,
    )


# ---- search (fixed placement) ----------------------------------------------------------------
def all_workers_flow_applies(config: CpSatConfig) -> bool:
    """Whether the phases after justification share out all workers by wall clock
    (``bound_then_search``, ``race``, or in ``bound`` mode the tightening alone) rather
    than run the sequential flow: at least 2 workers, CP-SAT's portfolio left to the
    config (no ``subsolvers``), tightening on, and a wall-clock limit only (wall-clock
    phase ends and stop events could not be reproduced under a deterministic limit)."""
    return (config.workers >= 2 and config.subsolvers is None and config.tighten
            and config.deterministic_time is None)


def _races(config: CpSatConfig, placement: Placement) -> bool:
    """Whether a search on all workers races (``race``) rather than bounds first
    (``bound_then_search``): ``config.race`` when set; by default where a device holds
    several stages. There the tightening's probes (interval model, no order literals)
    rarely raise the bound; in one run of the 20-s benchmark bounding first left 6
    bidirectional S=8 and S=16 searches 1-15 slots worse with bounds within 2 (weak
    evidence: the race's own searches there differ by as much between runs), so these
    shapes keep the race, the default before."""
    if config.race is not None:
        return config.race
    return any(len(placement.stages_on(d)) > 1 for d in range(placement.num_devices))


def _search_fixed(
    problem: Problem,
    placement: Placement,
    config: CpSatConfig,
    known: Sequence[Schedule],
    t0: float,
    deadline: float,
    mode: str,
    use_auto_known: bool = True,
    label: str | None = None,
) -> Result:
    fixed = problem.with_placement(placement)
    label = label or _placement_label(problem, placement)
    violations = cap_violations(fixed, placement)
    if violations:
        return _infeasible_cap(fixed, mode, t0, placement, violations, label)
    use_auto_known = use_auto_known and config.known_generators
    schedules = list(known) + (auto_known(fixed, placement) if use_auto_known else [])
    evals, skipped = _judge(fixed, schedules)
    justified = _justified(fixed, placement, evals, t0 + 0.1 * (deadline - t0)) if config.justify else []
    best = _best(evals + justified)
    t_first = time.perf_counter() - t0 if best else None
    lb, lb_why = analytic_lower_bound(fixed, placement)
    horizon = best.makespan if best else safe_horizon(fixed, placement)
    details = {**_solver_details(config, deadline - t0), "analytic_bound": lb, "analytic_bound_from": lb_why,
               "best_known": None if best is None else {"name": best.name, "makespan": best.makespan}}
    if skipped:
        details["skipped_known"] = skipped
    if justified:
        details["justified"] = {e.name: e.makespan for e in justified}
    if best is not None and lb >= best.makespan:
        assumptions = _search_assumptions(fixed, config, label, ())
        return _finish(fixed, mode, "optimal", best.schedule, best.makespan, lb, t0, t_first,
                       assumptions, "a known schedule meets the analytic bound", details, evals)
    if best is not None and all_workers_flow_applies(config):
        state = SearchState(best, lb)
        if mode == "bound":
            # the bound is what is asked for: the tightening alone on all workers
            details["flow"] = "bound first"
            tighten_horizon(fixed, placement, config, state, deadline, details)
        elif _races(config, placement):
            details["flow"] = "race"
            race(fixed, placement, config, state, deadline, details)
        else:
            details["flow"] = "bound then search"
            bound_then_search(fixed, placement, config, state, deadline, details)
        assumptions = _search_assumptions(fixed, config, label, details.get("families", ()))
        return _finish_state(fixed, mode, state, t0, t_first, assumptions, details, evals)
    details["flow"] = "sequential"
    model = CpSatModel(fixed, config, placement, horizon, makespan_lb=lb)
    details["families"] = list(model.applied)
    if best is not None:
        hint_incumbent(model, fixed, best)
    relax_sets = relaxation_sets(fixed, placement) if config.relaxation else []
    upper = upper_phase_config(config)
    remaining = deadline - time.perf_counter()
    # time split among the phases that follow an unproven full model: the full model
    # gets 30% before the upper-bound phase, else half before relaxations (one-stage
    # devices), else 85% before tightening
    share = 0.3 if upper is not None else 0.5 if relax_sets else 0.85 if config.tighten else 1.0
    raw = model.solve(max(0.05, remaining * share))
    details.update(solver_status=raw.status, solver_bound=raw.bound, solver_makespan=raw.makespan,
                   solver_wall_s=round(raw.wall_time, 3), solutions=raw.num_solutions,
                   solver_first_s=None if raw.first_solution_time is None else round(raw.first_solution_time, 3))
    assumptions = _search_assumptions(fixed, config, label, model.applied)
    incumbent = best
    found = solution_of(fixed, model, raw)
    if found is not None and (incumbent is None or found.makespan < incumbent.makespan):
        incumbent = found
        if t_first is None and raw.first_solution_time is not None:
            t_first = (deadline - t0) - remaining + raw.first_solution_time
    if raw.status == "infeasible":
        if best is not None:
            raise RuntimeError("CP-SAT reports infeasible although a known schedule fits: a modelling bug")
        return _finish(fixed, mode, "infeasible", None, None, None, t0, None, assumptions,
                       "no schedule exists under these constraints", details, evals)
    bound = max(lb, raw.bound) if raw.bound is not None else lb
    if incumbent is None:
        return _finish(fixed, mode, "unknown", None, None, bound, t0, None, assumptions,
                       "no schedule found within the limit", details, evals)

    def until(fraction: float) -> float:
        return min(deadline, time.perf_counter() + fraction * (deadline - time.perf_counter()))

    state = SearchState(incumbent, bound)
    if upper is not None and not state.done.is_set():
        improve_upper(fixed, placement, upper, state, until(0.5 if relax_sets or config.tighten else 1.0), details)
    if relax_sets and not state.done.is_set():
        incumbent, bound = state.snapshot()
        state.raise_bound(relaxation_bounds(fixed, placement, config, relax_sets, incumbent, bound,
                                            until(0.25 if config.tighten else 1.0), details))
    if config.tighten and not state.done.is_set():
        tighten_horizon(fixed, placement, config, state, deadline, details)
    return _finish_state(fixed, mode, state, t0, t_first, assumptions, details, evals)


def _finish_state(problem, mode, state: SearchState, t0, t_first, assumptions, details, evals) -> Result:
    """The result of a search that ended with ``state``'s incumbent and bound."""
    incumbent, bound = state.snapshot()
    makespan = incumbent.makespan
    status = "optimal" if bound >= makespan else "feasible"
    return _finish(problem, mode, status, incumbent.schedule, makespan, min(bound, makespan), t0, t_first,
                   assumptions, "", details, evals)


def _finish(problem, mode, status, schedule, makespan, bound, t0, t_first, assumptions, message, details, evals) -> Result:
    known = {}
    for e in evals:
        if e.name.startswith("greedy"):
            continue
        known[e.name] = KnownGap(
            e.makespan, e.fits, gap_of(e.makespan, bound) if e.fits else None,
            "" if e.fits else (e.memory.violation or e.error or ""),
        )
    if schedule is not None and schedule.name.startswith("justified-") and not message:
        message = f"best schedule is {schedule.name!r}, a known schedule improved by double justification"
    elif schedule is not None and schedule.name != "cpsat" and not message:
        message = f"best schedule is the known {schedule.name!r}"
    return Result(
        mode, status, schedule, makespan, bound, _unit(problem), time.perf_counter() - t0, t_first,
        tuple(assumptions), message, known=known, details=details, tick_s=problem.costs.tick_s,
    )


# ---- search (free placement) -----------------------------------------------------------------
def canonical_placements(problem: Problem, limit: int) -> list[Placement] | None:
    """Every placement of the problem's stages on its devices, up to relabelling of
    identical devices (restricted growth strings); None when more than ``limit``."""
    keys = list(problem.stages)
    D = problem.num_devices
    N = len(keys)
    identical = devices_identical(problem)
    out: list[Placement] = []

    def emit(assign: list[int]) -> bool:
        per = []
        i = 0
        for n in problem.num_stages:
            per.append(tuple(assign[i:i + n]))
            i += n
        out.append(Placement(tuple(per), D))
        return len(out) <= limit

    if identical:
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
        ok = True
        for combo in itertools.product(range(D), repeat=N):
            if not emit(list(combo)):
                ok = False
                break
    return out if ok else None


def _canonical_devices(schedule: Schedule) -> Schedule:
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
    orders = [()] * pl.num_devices
    for old, ops in enumerate(schedule.orders):
        orders[new_of[old]] = ops
    return Schedule(schedule.name, placement, schedule.microbatch2pipeline, tuple(orders),
                    schedule.stage_work, schedule.split_backward, schedule.params)


def _search_free(problem: Problem, config: CpSatConfig, known: Sequence[Schedule], t0: float,
                 deadline: float, mode: str) -> Result:
    evals, skipped = _judge(problem, known)
    placements = canonical_placements(problem, config.max_placements) if config.decompose else None
    if placements is None:
        return _search_free_monolithic(problem, config, evals, skipped, t0, deadline, mode)
    identical = devices_identical(problem)
    label = (
        f"placement free: all {len(placements)} placements"
        + (" up to relabelling of identical devices" if identical else "")
        + " enumerated, each solved with its placement fixed, pruned by bound"
    )
    rows = []
    feasible = []
    for pl in placements:
        fp = problem.with_placement(pl)
        if cap_violations(fp, pl):
            continue
        lb, _ = analytic_lower_bound(fp, pl)
        feasible.append((pl, lb))
    if not feasible:
        return _infeasible_cap(problem, mode, t0, None, ["no placement fits the memory capacity"])
    # known schedules first (their placements give the first incumbent), then by bound
    known_pl = {}
    for e in evals:
        if e.fits:
            key = e.schedule.placement.stage2device
            if identical:
                key = _canonical_devices(e.schedule).placement.stage2device
            known_pl.setdefault(key, []).append(e)
    feasible.sort(key=lambda x: (x[0].stage2device not in known_pl, x[1]))
    inc_sched, inc_ms = None, None
    best_known = _best(evals)
    if best_known is not None:
        inc_sched, inc_ms = best_known.schedule, best_known.makespan
    t_first = time.perf_counter() - t0 if inc_sched else None
    bounds = []
    solved = pruned = unsolved = 0
    all_applied: set[str] = set()
    for idx, (pl, lb) in enumerate(feasible):
        now = time.perf_counter()
        if inc_ms is not None and lb >= inc_ms:
            bounds.append(lb)
            pruned += 1
            rows.append({"placement": [list(x) for x in pl.stage2device], "analytic_bound": lb, "pruned": True})
            continue
        remaining = deadline - now
        if remaining <= 0.05:
            bounds.append(lb)
            unsolved += 1
            continue
        left = sum(1 for p2, lb2 in feasible[idx:] if inc_ms is None or lb2 < inc_ms)
        slice_s = max(remaining / max(1, left), min(remaining, 0.5))
        kn = [_canonical_devices(e.schedule) if identical else e.schedule
              for e in known_pl.get(pl.stage2device, [])]
        if inc_sched is not None and inc_sched.placement.stage2device == pl.stage2device:
            kn.append(inc_sched)
        sub_cfg = config.replace(time_limit_s=max(0.05, slice_s))
        res = _search_fixed(problem, pl, sub_cfg, kn, time.perf_counter(), time.perf_counter() + slice_s,
                            mode, label=label)
        solved += 1
        all_applied.update(res.details.get("families", ()))
        sub_lb = res.lower_bound if res.lower_bound is not None else lb
        if res.status == "infeasible":
            sub_lb = math.inf
        bounds.append(sub_lb)
        rows.append({"placement": [list(x) for x in pl.stage2device], "status": res.status,
                     "makespan": res.makespan, "lower_bound": res.lower_bound})
        if res.makespan is not None and (inc_ms is None or res.makespan < inc_ms):
            inc_sched, inc_ms = res.schedule, res.makespan
            if t_first is None:
                t_first = time.perf_counter() - t0
    lb_all = min(bounds) if bounds else None
    if inc_ms is not None and lb_all is not None:
        lb_all = min(lb_all, inc_ms)
    if lb_all is not None and not math.isfinite(lb_all):
        lb_all = None
    if identical:
        all_applied.add("device symmetry")
    assumptions = _search_assumptions(problem, config, label, all_applied | {"fifo"} if config.fifo else all_applied)
    details = {**_solver_details(config, deadline - t0), "placements": len(feasible), "solved": solved,
               "pruned": pruned, "unsolved": unsolved, "runs": rows[:200]}
    if skipped:
        details["skipped_known"] = skipped
    if inc_sched is None:
        status = "unknown" if unsolved else "infeasible"
        return _finish(problem, mode, status, None, None, lb_all, t0, None, assumptions,
                       "no schedule found" if unsolved else "no schedule exists", details, evals)
    ev = checked(problem.with_placement(inc_sched.placement), inc_sched, inc_ms)
    status = "optimal" if lb_all is not None and lb_all >= ev.makespan else "feasible"
    return _finish(problem, mode, status, inc_sched, ev.makespan, lb_all, t0, t_first, assumptions, "", details, evals)


def _search_free_monolithic(problem, config, evals, skipped, t0, deadline, mode) -> Result:
    best = _best(evals)
    lb, lb_why = analytic_lower_bound(problem, None)
    horizon = best.makespan if best else safe_horizon(problem, None)
    if best is None and config.hints:
        # a linear-ish greedy schedule as a first incumbent
        D = problem.num_devices
        pl = Placement(tuple(tuple(s % D for s in range(n)) for n in problem.num_stages), D)
        fp = problem.with_placement(pl)
        if not cap_violations(fp, pl):
            cands = [evaluate_known(fp, s) for s in greedy_candidates(fp, pl)]
            best = _best(cands)
            if best is not None:
                horizon = best.makespan
    t_first = time.perf_counter() - t0 if best else None
    model = CpSatModel(problem, config, None, horizon, makespan_lb=lb)
    if config.hints and best is not None:
        sched = _canonical_devices(best.schedule) if "device symmetry" in model.applied else best.schedule
        ev = evaluate_known(problem.with_placement(sched.placement), sched)
        s2, tm = relabel_microbatches(sched, ev.timing)
        model.hint(s2, tm, ev.makespan)
    remaining = deadline - time.perf_counter()
    raw = model.solve(max(0.05, remaining))
    label = "placement free (one model with placement literals)"
    assumptions = _search_assumptions(problem, config, label, model.applied)
    details = {**_solver_details(config, deadline - t0), "analytic_bound": lb, "analytic_bound_from": lb_why,
               "families": list(model.applied), "solver_status": raw.status}
    if skipped:
        details["skipped_known"] = skipped
    chosen, makespan = (best.schedule, best.makespan) if best else (None, None)
    if raw.starts is not None:
        cand = model.schedule_from(raw)
        ev = checked(problem.with_placement(cand.placement), cand, raw.makespan)
        if makespan is None or ev.makespan < makespan:
            chosen, makespan = cand, ev.makespan
            if t_first is None and raw.first_solution_time is not None:
                t_first = (deadline - t0) - remaining + raw.first_solution_time
    if raw.status == "infeasible" and chosen is None:
        return _finish(problem, mode, "infeasible", None, None, None, t0, None, assumptions,
                       "no schedule exists", details, evals)
    bound = max(lb, raw.bound) if raw.bound is not None else lb
    if chosen is None:
        return _finish(problem, mode, "unknown", None, None, bound, t0, None, assumptions,
                       "no schedule found within the limit", details, evals)
    status = "optimal" if bound >= makespan else "feasible"
    return _finish(problem, mode, status, chosen, makespan, min(bound, makespan), t0, t_first,
                   assumptions, "", details, evals)


# ---- public modes ----------------------------------------------------------------------------
def search(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = ()) -> Result:
    """Free the per-device orders (and the placement when ``problem.placement`` is
    ``"free"``) under the memory caps; return the best schedule found (never worse than the
    best known schedule that fits), its makespan, the proven lower bound and the gap.

    Known schedules (``known`` plus the registry's generators and greedy list schedules
    that match the problem) are evaluated first; the best that fits gives the horizon and a
    complete hint. An infeasible cap returns status ``infeasible`` with
    ``min_feasible_cap``."""
    config = config or CpSatConfig()
    t0 = time.perf_counter()
    deadline = t0 + config.time_limit_s
    if problem.is_free:
        return _search_free(problem, config, known, t0, deadline, "search")
    return _search_fixed(problem, problem.fixed_placement, config, known, t0, deadline, "search")


def bound(problem: Problem, config: CpSatConfig | None = None, known: Sequence[Schedule] = ()) -> Result:
    """The proven lower bound on the optimal makespan (max of analytic and CP-SAT bounds)
    and each known schedule's gap to it (``Result.known``); also the best schedule found
    on the way."""
    config = config or CpSatConfig()
    t0 = time.perf_counter()
    deadline = t0 + config.time_limit_s
    if problem.is_free:
        res = _search_free(problem, config, known, t0, deadline, "bound")
        if not res.known and problem.num_pipelines == 1 and problem.num_stages[0] == problem.num_devices:
            # judge the linear known schedules against the free-placement bound too
            pl = Placement((tuple(range(problem.num_devices)),), problem.num_devices)
            evals, _ = _judge(problem, auto_known(problem, pl))
            known_gaps = {e.name: KnownGap(e.makespan, e.fits, gap_of(e.makespan, res.lower_bound) if e.fits else None)
                          for e in evals if not e.name.startswith("greedy")}
            res = replace(res, known=known_gaps)
        return res
    return _search_fixed(problem, problem.fixed_placement, config, known, t0, deadline, "bound")


@dataclass(frozen=True)
class FrontPoint:
    """One point of the makespan-memory front."""

    cap: float | None
    status: str
    makespan: float | None
    lower_bound: float | None
    gap: float | None
    min_feasible_cap: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def memory_front(problem: Problem, caps: Sequence[int | None], config: CpSatConfig | None = None,
                 known: Sequence[Schedule] = ()) -> list[FrontPoint]:
    """Sweep activation caps (idealized: live activations per device; otherwise the
    memory left for activations, in the costs' unit); ``config.time_limit_s`` is per cap.
    Caps are solved in increasing order and every schedule found is a known schedule for
    the larger caps (it fits them too)."""
    config = config or CpSatConfig()
    order = sorted(caps, key=lambda c: math.inf if c is None else c)
    found: list[Schedule] = []
    points = {}
    for cap in order:
        costs = problem.costs.with_activation_cap(cap)
        res = search(problem.with_costs(costs), config, list(known) + found)
        if res.schedule is not None and not problem.is_free:
            found.append(res.schedule)
        points[cap] = FrontPoint(cap, res.status, res.makespan, res.lower_bound, res.gap, res.min_feasible_cap)
    return [points[c] for c in caps]


@dataclass(frozen=True)
class SplitSearch:
    """Result of ``search_splits``: the best candidate's result (its bound replaced by the
    least bound over all candidates) and one row per candidate."""

    best: Result
    best_stage_work: tuple[tuple[float, ...], ...] | None
    rows: tuple[dict, ...]


def scaled_costs(problem: Problem, stage_work: Sequence[Sequence[float]]) -> Costs:
    """The problem's costs with the layers of each pipeline re-partitioned: an op of a
    stage holding share w / sum(w) of its pipeline's work takes its old time times the
    ratio of new to old share, rounded half up, at least 1 tick — so every candidate
    splits the same model. Use op times fine enough to resolve the shares (e.g. forward 6
    slots rather than 1). Activations and messages are kept; pass ``costs_for`` to
    ``search_splits`` to model them too."""
    old = problem.stage_work or tuple((1.0,) * n for n in problem.num_stages)
    if tuple(len(w) for w in stage_work) != problem.num_stages:
        raise ValueError("stage_work must give one value per stage of every pipeline")
    if any(x <= 0 for w in stage_work for x in w):
        raise ValueError("stage_work values must be > 0")
    op_time = {}
    for (k, p, s), t in problem.costs.op_time.items():
        f = (stage_work[p][s] / sum(stage_work[p])) / (old[p][s] / sum(old[p]))
        op_time[(k, p, s)] = max(1, math.floor(t * f + 0.5))
    return replace(problem.costs, op_time=op_time)


def search_splits(
    problem: Problem,
    candidates: Sequence[Sequence[Sequence[float]]],
    config: CpSatConfig | None = None,
    known: Sequence[Schedule] = (),
    costs_for: Callable[[tuple[tuple[float, ...], ...]], Costs] | None = None,
) -> SplitSearch:
    """Try each candidate stage partition (``stage_work`` per pipeline and stage; e.g.
    Chimera's two directions with uneven layer splits), each a separate problem whose costs
    come from ``costs_for(stage_work)`` (default: ``scaled_costs``); ``config.time_limit_s``
    is shared among candidates. The bound of the best result is the least bound over the
    candidates, labelled "fixed partition per candidate"."""
    if not candidates:
        raise ValueError("search_splits needs at least one candidate stage_work")
    config = config or CpSatConfig()
    per = config.time_limit_s / len(candidates)
    rows = []
    best: Result | None = None
    best_work = None
    bounds = []
    for work in candidates:
        work = tuple(tuple(float(x) for x in w) for w in work)
        costs = costs_for(work) if costs_for else scaled_costs(problem, work)
        sub = replace(problem, costs=costs, stage_work=work)
        res = search(sub, config.replace(time_limit_s=per), known)
        rows.append({"stage_work": [list(w) for w in work], "status": res.status,
                     "makespan": res.makespan, "lower_bound": res.lower_bound, "gap": res.gap})
        if res.status != "infeasible":
            bounds.append(res.lower_bound)
        if res.makespan is not None and (best is None or best.makespan is None or res.makespan < best.makespan):
            best, best_work = res, work
    if best is None:
        best = res  # all infeasible / unknown: report the last
    lb = None if not bounds or any(b is None for b in bounds) else min(bounds)
    assumptions = tuple(
        a for a in best.bound_assumptions if not a.startswith("stage partition")
    ) + (f"stage partition: best of {len(candidates)} candidate splits (fixed partition per candidate)",)
    status = best.status
    if best.makespan is not None and lb is not None:
        status = "optimal" if lb >= best.makespan else "feasible"
    best = replace(best, lower_bound=lb, bound_assumptions=assumptions, status=status)
    return SplitSearch(best, best_work, tuple(rows))
