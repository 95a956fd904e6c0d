"""``plan``: enumerate, bound, simulate, rank, search with CP-SAT and validate."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from pipetab.hardware.context import Context
from pipetab.schedules import registry

from .bounds import Bounds
from .cpsat import cpsat_outcome, cpsat_search, cpsat_shapes, worker_pool
from .result import Configuration, Plan, activation_peaks, configuration, rank
from .space import PlanSpace, costs_of, schedule_label, shapes

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Schedule


@dataclass(frozen=True)
class _Candidate:
    """A schedule variant on a shape (its context) and a bound (time for the candidates
    that may fit, memory for those that cannot)."""

    bound: float
    name: str
    opts: dict
    shape: Context


def plan(space: PlanSpace, progress: Callable[[str], None] | None = None, profile=None) -> Plan:
    """Search ``space`` (package docstring) and rank what fits by simulated step time.
    With a ``profile`` (``hardware.Profile``) the split, microbatch size and op costs are
    the profiled run's, and only the schedules vary (``plan_profiled``)."""
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    if profile is not None:
        return plan_profiled(space, profile, say, t0)
    bounds = Bounds(space)
    pool = worker_pool(min(2, space.cpsat_shapes)) if space.cpsat_shapes else None
    try:
        candidates, misfits, total = _bounded(space, bounds, say)
        results, misfit_runs, visited = _simulate_best(space, bounds, candidates, say)
        pruned_memory = len(misfits) + len(misfit_runs)
        closest = _closest_misfits(space, bounds, misfit_runs, misfits, space.top - len(results))
        simulated = sum(c.fits for c in results) + len(closest)
        shown, notes, ranked = _search_and_validate(space, bounds, rank(results + closest), pool, say)
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    return Plan(tuple(shown), total, pruned_memory - len(closest), len(candidates) - visited, simulated,
                tuple(notes), time.perf_counter() - t0, _question(space), tuple(ranked))


def _bounded(space: PlanSpace, bounds: Bounds, say) -> tuple[list[_Candidate], list[_Candidate], int]:
    """(candidates that may fit, by time bound; those that cannot, with their memory bound;
    the number enumerated)."""
    cap = space.system.device.usable_memory_bytes
    candidates, misfits = [], []
    all_shapes, variants = shapes(space), space.variants()
    say(f"{len(all_shapes)} shapes x {len(variants)} schedules = {len(all_shapes) * len(variants)} candidates")
    for shape in all_shapes:
        for name, opts in variants:
            need = bounds.memory(name, opts, shape)
            if need is None:
                continue
            if need > cap:
                misfits.append(_Candidate(need, name, opts, shape))
            else:
                candidates.append(_Candidate(bounds.time(name, opts, shape), name, opts, shape))
    candidates.sort(key=lambda c: (c.bound, c.name))
    say(f"{len(candidates)} candidates pass the memory bound ({len(misfits)} cannot fit); simulating by time bound")
    return candidates, misfits, len(all_shapes) * len(variants)


def _evaluate(space: PlanSpace, bounds: Bounds, cand: _Candidate, simulate_misfit: bool):
    """The candidate's configuration (simulated), or None when the generator refuses its
    full instance or, unless ``simulate_misfit``, when its exact memory does not fit."""
    from pipetab.solver.simulate import simulate

    sched = bounds.schedule(cand.name, cand.opts, cand.shape.pp, cand.shape.microbatches)
    if sched is None:
        return None
    costs = costs_of(space, sched, cand.shape)
    acts = activation_peaks(sched, costs)
    if not simulate_misfit and any(c is not None and p + a > c + 1e-9
                                   for p, a, c in zip(costs.persistent, acts, costs.capacity)):
        return None
    return configuration(space, cand.name, cand.opts, cand.shape, sched, costs, simulate(sched, costs).makespan, acts)


def _simulate_best(space: PlanSpace, bounds: Bounds, candidates: list[_Candidate], say):
    """Simulate candidates in time-bound order until the bound reaches the ``top``-th best
    fitting step: (configurations that fit, candidates whose full instance does not fit,
    candidates visited)."""
    results: list[Configuration] = []
    misfit_runs: list[_Candidate] = []
    visited, last_note = 0, time.perf_counter()
    for cand in candidates:
        if len(results) >= space.top and cand.bound >= sorted(c.step_time_s for c in results)[space.top - 1]:
            break
        visited += 1
        conf = _evaluate(space, bounds, cand, simulate_misfit=False)
        if conf is None:
            if bounds.schedule(cand.name, cand.opts, cand.shape.pp, cand.shape.microbatches) is not None:
                misfit_runs.append(cand)
            continue
        results.append(conf)
        if time.perf_counter() - last_note > 2:
            say(f"simulated {len(results)} of {len(candidates)}")
            last_note = time.perf_counter()
    return results, misfit_runs, visited


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
    ranked, with what CP-SAT found)."""
    searched, skipped = cpsat_shapes(space, ranked)
    jobs = []
    for shape, best in searched:
        say(f"CP-SAT: searching {shape.label} m={shape.microbatches} on {best.label}'s placement for "
            f"{space.cpsat_time_s:g} s")
        jobs.append((shape, best, pool.submit(cpsat_search, space, shape, best) if pool else None))
    say(f"validating the {min(len(ranked), space.top)} best configurations")
    checked = {id(c): _validated(space, c, bounds) for c in ranked[:space.top]}
    outcomes = [cpsat_outcome(space, shape, job.result() if job else cpsat_search(space, shape, best), ranked)
                for shape, best, job in jobs] + [(None, note) for note in skipped]
    ranked = rank(ranked + [c for c, _ in outcomes if c is not None])
    shown = [checked.get(id(c)) or _validated(space, c, bounds) for c in ranked[:space.top]]
    return shown, [note for _, note in outcomes], ranked


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
    profile (``solver.pricing.profile_costs``), memory against the profile's ``memory_bytes``
    or else the GPU's usable memory."""
    from pipetab.solver.pricing import profile_costs
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
    shape = Context(tp=tp, dp=dp, pp=pp, sequence_parallel=False, zero=0, microbatch_size=b,
                    global_batch=space.global_batch, seq_len=space.model.seq_len)
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
        results.append(configuration(space, name, opts, shape, sched, costs, simulate(sched, costs).makespan,
                                      activation_peaks(sched, costs), capacity=capacity, profiled=True))
    shown = rank(results)[:space.top]
    validated = []
    for c in shown:
        sched = registry.generate(c.schedule, pp, shape.microbatches, **dict(c.options))
        validated.append(_validated(space, c, None, replace(profile_costs(sched, profile), capacity=(capacity,) * pp),
                                    sched))
    total = len(space.variants())
    return Plan(tuple(validated), total, 0, 0, len(results),
                (f"not run: the profile fixes the op times of one shape ({skipped} schedules do not apply)",),
                time.perf_counter() - t0, _question(space, profile), tuple(rank(results)))


def _validated(space: PlanSpace, conf: Configuration, bounds: Bounds | None, costs=None,
               sched: Schedule | None = None) -> Configuration:
    """``conf`` with its levels (``evaluate_levels`` validates the table; its simulation
    must give the ranked step time)."""
    from pipetab.solver.levels import evaluate_levels

    sched = sched or conf.searched or bounds.schedule(  # type: ignore[union-attr]
        conf.schedule, dict(conf.options), conf.shape.pp, conf.shape.microbatches)
    levels = evaluate_levels(sched, costs=costs or costs_of(space, sched, conf.shape))
    if abs(levels.simulation.makespan - conf.step_time_s) > 1e-9 * conf.step_time_s:
        raise AssertionError(f"{conf.label}: evaluate_levels gives {levels.simulation.makespan} s, "
                             f"the plan ranked {conf.step_time_s} s")
    return replace(conf, levels=levels)
