"""CP-SAT chooses which activations go to host memory or are recomputed (issue 40, item 6;
the model, its assumptions and the simulator check: docs/offload.md, "CP-SAT chooses"): the
base model (``CpSatModel``) is built with the caps lifted and this module adds the literals,
the copy engines and the memory; answers are re-simulated as timed tables and validated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from pipetab.schedules.ops import Kind
from pipetab.schedules.table import timed_table
from pipetab.schedules.validate import validate

from ...costs import Rounding, _ticks
from ...offload import CopyRates, Offload, OffloadSimulation, simulate_offload
from ..model.bounds import activation_scale, memory_scale
from ..model.cpmodel import CpSatModel
from ..model.variables import min_lag, predecessor
from ..params import CpSatConfig
from ..problem import Objective
from ..result import Status

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ...costs import Costs
    from ..problem import Problem

Key = tuple[int, int, int]
ASSUMPTIONS = ("an activation moves its offload share (1: all of it), or is recomputed, whole or not at all",
               "each device's two copy engines run at their directions' rates alone "
               "(both ways at once not slowed: a relaxation where the link's duplex is lower)")


@dataclass(frozen=True)
class OffloadAnswer:
    """The best schedule found with its offload choices, its makespan (CP-SAT's, or the
    simulator's where a shared duplex makes it longer: then ``feasible``), CP-SAT's bound
    (model ticks; it assumes independent copy directions) and its simulation (memory within
    caps); from ``offload_seconds``, seconds on the real-valued costs (the bound's proven on
    durations and copies rounded down to ticks of ``tick_s``)."""

    status: Status
    makespan: float | None
    bound: float | None
    offload: Offload | None
    sim: OffloadSimulation | None
    assumptions: tuple[str, ...] = ASSUMPTIONS
    tick_s: float | None = None


def search_offload(problem: Problem, rates: CopyRates, config: CpSatConfig | None = None,
                   choices: Mapping[Key, str] | None = None, workers: int | None = None,
                   det_limit: float | None = None, recompute: bool = True, offload: bool = True,
                   share: float = 1.0) -> OffloadAnswer:
    """Least objective of ``problem`` (a fixed placement, orders free, its caps kept) when
    CP-SAT also chooses which activations move ``share`` of themselves to host memory over
    ``rates`` (ticks; not with ``offload`` False: no host link) and, with ``recompute``, which to recompute;
    ``choices`` fixes some of them ("keep", "offload", "recompute"; every one: the
    fixed-choice model)."""
    placement = problem.fixed_placement
    if placement is None:
        raise ValueError("offload search needs a fixed placement")
    if problem.objective is not Objective.MAKESPAN or problem.blocks or problem.overlap_pairs:
        raise ValueError("offload search minimizes the makespan, without blocks or overlapped pairs")
    if not problem.costs.integral:
        raise ValueError("offload search needs integral costs (ticks or slots)")
    config = config or CpSatConfig()
    base = problem.with_costs(replace(problem.costs, capacity=(None,) * problem.num_devices))
    model = CpSatModel(base, config, placement, _horizon(problem, placement, rates))
    decisions = _add_offload(model, problem, placement, rates, choices or {}, (offload, recompute), share)
    raw = model.solve(config.time_limit_s, det_limit, workers)
    if raw.starts is None or raw.makespan is None:
        return OffloadAnswer(raw.status, None, raw.bound, None, None, _assumed(model))
    solver = model.solver
    chosen = {k: float(solver.value(h2d)) for k, (o, _, h2d) in decisions.items() if solver.boolean_value(o)}
    again = frozenset(k for k, (_, r, _) in decisions.items() if solver.boolean_value(r))
    plan = Offload(rates, dict.fromkeys(chosen, share), issue=chosen, recompute=again)
    schedule = model.schedule_from(raw, "cpsat-offload")
    starts = [raw.starts[op] - (problem.duration(op._replace(kind=Kind.F)) if op.kind is Kind.B
                                and op[1:] in again else 0) for op in schedule.ops.to_ops()]
    sim = simulate_offload(schedule, problem.costs, plan, starts)
    validate(timed_table(schedule, sim.start_times, sim.end_times), schedule)
    # the model lets the two copy directions run at full rate together (an assumption of its
    # bound); the simulator shares a finite duplex, so the schedule may take longer there (and
    # free memory later), as it may where copies were rounded down (a bound's model)
    exact = rates.duplex >= rates.d2h + rates.h2d and problem.costs.rounding is Rounding.UP
    if exact and (not all(sim.fits_memory) or sim.makespan > raw.makespan + 1e-9):
        raise RuntimeError(f"offload: the simulator gives {sim.makespan} (fits: {sim.fits_memory}) "
                           f"for CP-SAT's schedule of {raw.makespan}")
    if not all(sim.fits_memory):  # the copies, slower shared, free memory too late for the cap
        return OffloadAnswer(Status.UNKNOWN, None, raw.bound, None, sim, _assumed(model))
    if sim.makespan > raw.makespan + 1e-9:
        return OffloadAnswer(Status.FEASIBLE, math.ceil(sim.makespan - 1e-9), raw.bound, plan, sim, _assumed(model))
    return OffloadAnswer(raw.status, raw.makespan, raw.bound, plan, sim, _assumed(model))


def offload_seconds(problem: Problem, real: Costs, config: CpSatConfig | None = None,
                    tick_s: float | None = None) -> OffloadAnswer:
    """``search_offload`` on ``real`` costs in seconds that offload activations (``Costs.offload_fraction``
    of each chosen one over the system's host link): half the time on durations rounded up
    (the schedule), half on durations rounded down (the bound)."""
    link, config = real.host_link, config or CpSatConfig()
    if link is None or not real.offload_fraction:
        raise ValueError("offload seconds needs costs offloading activations over a system's host link")
    tick = tick_s or real.default_tick(config.seconds.ticks_per_op)
    half, det = config.replace(time_limit_s=config.time_limit_s / 2), config.deterministic_time
    found, proof = (search_offload(problem.with_costs(q), CopyRates.of(link, q), half, recompute=False,
                                   det_limit=det and det / 2, share=real.offload_fraction)
                    for q in (real.quantized(tick, r) for r in (Rounding.UP, Rounding.DOWN)))
    lb = None if proof.bound is None or proof.status is Status.INFEASIBLE else proof.bound * tick
    sim = plan = None
    if found.offload is not None and found.sim is not None:  # its choices and times on the real costs
        times = {k: t * tick for k, t in (found.offload.issue or {}).items()}
        plan = replace(found.offload, rates=CopyRates.of(link, real), issue=times)
        sim = simulate_offload(found.sim.schedule, real, plan, found.sim.start_times * tick)
    seconds = None if sim is None else sim.makespan
    status = Status.INFEASIBLE if proof.status is Status.INFEASIBLE else Status.UNKNOWN if seconds is None else \
        Status.OPTIMAL if lb is not None and lb >= seconds * (1 - 1e-12) else Status.FEASIBLE
    rounded = "lower bound: durations and copies rounded down to ticks (a bound of the real-valued problem)"
    return OffloadAnswer(status, seconds, lb, plan, sim, (*proof.assumptions, rounded), tick)


def _assumed(model: CpSatModel) -> tuple[str, ...]:
    fifo = "FIFO on every stage with these decisions: equal optima without it on small instances, not proven"
    return ASSUMPTIONS + ((fifo,) if model.fifo else ())


def _add_offload(model: CpSatModel, problem: Problem, placement: Placement, rates: CopyRates,
                 choices: Mapping[Key, str], allowed: tuple[bool, bool], share: float) -> dict[Key, tuple]:
    """The offload and recompute literals and the H2D start of every activation; copy
    engines, recomputed forwards (right before their B, after its input) and memory."""
    m, v, H = model.model, model.vars, model.horizon
    scale = activation_scale(problem) * min(memory_scale([share]), 100)  # the share kept integral too
    copies: dict[tuple[int, int], list] = {(d, 2): [v.interval[i] for i in v.device_ops(d)]
                                           for d in range(problem.num_devices)}
    memory: dict[int, list] = {}
    out = {}
    for op in v.ops:
        size = problem.costs.activation[(op.pipeline, op.stage)]
        if op.kind is not Kind.F or size <= 0:
            continue
        key, d = (op.pipeline, op.stage, op.microbatch), placement.device(op.pipeline, op.stage)
        o, r = m.new_bool_var(f"off_{key}"), m.new_bool_var(f"rc_{key}")
        m.add(o + r <= 1)
        if key in choices or not allowed[0]:
            m.add(o == int(choices.get(key) == "offload"))
        if key in choices or not allowed[1]:
            m.add(r == int(choices.get(key) == "recompute"))
        f_start, f_end = v.op_start(op), v.end(v.index[op])
        b = op._replace(kind=Kind.B)
        b_start, dur_f = v.op_start(b), problem.duration(op)
        cd, ch = (_copy_ticks(share * size, rate, problem.costs.rounding) for rate in (rates.d2h, rates.h2d))
        d2h, h2d, rc = (m.new_int_var(0, H, f"{x}_{key}") for x in ("d2h", "h2d", "rcs"))
        copies.setdefault((d, 0), []).append(m.new_optional_fixed_size_interval_var(d2h, cd, o, f"cd_{key}"))
        copies.setdefault((d, 1), []).append(m.new_optional_fixed_size_interval_var(h2d, ch, o, f"ch_{key}"))
        copies[(d, 2)].append(m.new_optional_fixed_size_interval_var(rc, dur_f, r, f"rc_{key}"))
        m.add(d2h >= f_end).only_enforce_if(o)
        m.add(h2d >= d2h + cd).only_enforce_if(o)
        m.add(h2d + ch <= b_start).only_enforce_if(o)
        m.add(rc + dur_f == b_start).only_enforce_if(r)
        pred = predecessor(b, problem.num_stages[op.pipeline]) or op  # a backward always has one
        m.add(rc >= v.end(v.index[pred]) + min_lag(problem, placement, pred, b)).only_enforce_if(r)
        away, back_start = m.new_bool_var(f"away_{key}"), m.new_int_var(0, H, f"bs_{key}")
        m.add(away == o + r)
        m.add(back_start == h2d).only_enforce_if(o)
        m.add(back_start == rc).only_enforce_if(r)
        for kind, part in problem.lifetimes(op.pipeline, op.stage):
            release = v.end(v.index[op._replace(kind=kind)])
            held, front, back = (m.new_int_var(0, H, f"{x}_{key}_{kind}") for x in ("held", "front", "back"))
            m.add(held == d2h + cd).only_enforce_if(o)
            m.add(held == f_end).only_enforce_if(r)
            m.add(held == release).only_enforce_if(~away)
            demand = round(part * scale)
            memory.setdefault(d, []).append((m.new_interval_var(f_start, front, held, ""), demand))
            memory[d].append((m.new_optional_interval_var(back_start, back, release, away, ""), demand))
            memory[d].append((m.new_optional_interval_var(held, m.new_int_var(0, H, ""), back_start, o, ""),
                              _ticks((1 - share) * part * scale, 1.0, problem.costs.rounding)))  # left behind
        out[key] = (o, r, h2d)
    for ivs in copies.values():
        m.add_no_overlap(ivs)
    for d, items in memory.items():
        cap = problem.cap(d)
        if cap is not None:
            m.add_cumulative([i for i, _ in items], [x for _, x in items], math.floor(cap * scale + 1e-9))
    return out


def _copy_ticks(size: float, rate: float, rounding: Rounding = Rounding.UP) -> int:
    return 0 if math.isinf(rate) else _ticks(size / rate, 1.0, rounding)


def _horizon(problem: Problem, placement: Placement, rates: CopyRates) -> int:
    """Every op, message, copy, all-reduce and optimizer one after another: a schedule
    running one microbatch at a time fits any cap that holds one activation per stage."""
    costs, total = problem.costs, 1
    for op in problem.ops:
        pred = predecessor(op, problem.num_stages[op.pipeline])
        total += problem.duration(op) + (0 if pred is None else min_lag(problem, placement, pred, op))
        if op.kind is Kind.F:
            size = costs.activation[(op.pipeline, op.stage)]
            total += _copy_ticks(size, rates.d2h) + _copy_ticks(size, rates.h2d)
    return (total + max(problem.optimizer(d) for d in range(problem.num_devices))
            + sum(round(g.allreduce_time) for g in costs.replica_groups))
