"""A bound of all schedules that counts the waits colliding microbatches force (issue 45):
CP-SAT's proven bound of a relaxation keeping some devices' ops whole and contracting every
other device into each chain's least lag. Why it holds for every schedule (FIFO without loss,
the kept devices' restriction feasible): docs/cpsat.md, "The device relaxation"."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from ortools.sat.python import cp_model

from pipetab.schedules.ops import Kind, Op

from ..engine import SolverSetup, run_solver
from ..problem import Objective
from .bounds import activation_scale
from .variables import heads_tails, predecessor

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..params import CpSatConfig
    from ..problem import Problem


def relaxation_bound(problem: Problem, placement: Placement, devices: tuple[int, ...], config: CpSatConfig,
                     seconds: float, lower: int = 0) -> int:
    """The least makespan CP-SAT proves within ``seconds`` for the relaxation that keeps
    ``devices`` (module doc), at least ``lower`` (a bound of the problem already known);
    0 where the relaxation ends without a bound. Makespan objective, ops one at a time."""
    if problem.overlap_pairs or problem.blocks or problem.objective is not Objective.MAKESPAN:
        raise ValueError("problem: the device relaxation bounds the makespan of ops run one at a time")
    if placement is None:
        raise ValueError("placement: the device relaxation needs a fixed placement")
    if not devices or not all(0 <= d < problem.num_devices for d in devices):
        raise ValueError(f"devices: give devices in 0..{problem.num_devices - 1}, got {devices!r}")
    head, tail = heads_tails(problem, placement)
    kept = set(devices)
    model = cp_model.CpModel()
    horizon = sum(problem.duration(op) for op in problem.ops) + sum(head.values()) + sum(tail.values())
    T = model.new_int_var(min(lower, horizon), horizon, "T")
    start, ivs = _ops(model, problem, placement, kept, head, tail, horizon)
    least_opt = min((problem.optimizer(d) for d in range(problem.num_devices)), default=0)
    for op, s in start.items():
        d = placement.device(op.pipeline, op.stage)
        model.add(s + problem.duration(op) + max(tail[_first(op)] + least_opt, problem.optimizer(d)) <= T)
    for d in kept:
        model.add_no_overlap([iv for op, iv in ivs.items() if placement.device(op.pipeline, op.stage) == d])
    _memory(model, problem, placement, kept, start, horizon)
    model.minimize(T)
    setup = SolverSetup.of(config, seconds, config.deterministic_time)
    solved = run_solver(model, setup)
    if not solved.found and solved.code != cp_model.INFEASIBLE:
        return 0
    return math.ceil(solved.solver.best_objective_bound - 1e-9) if solved.found else horizon


def _first(op: Op) -> Op:
    return Op(op.kind, op.pipeline, op.stage, 0)


def _ops(model, problem: Problem, placement: Placement, kept: set[int], head, tail, horizon: int):
    """Each kept op's start and interval, its chain from the nearest kept predecessor with
    the least path between, and FIFO per stage and kind."""
    start: dict[Op, cp_model.IntVar] = {}
    ivs: dict[Op, cp_model.IntervalVar] = {}
    for op in problem.ops:
        if placement.device(op.pipeline, op.stage) in kept:
            lo, d = head[_first(op)], problem.duration(op)
            start[op] = model.new_int_var(lo, horizon - d - tail[_first(op)], f"s{op}")
            ivs[op] = model.new_fixed_size_interval_var(start[op], d, f"i{op}")
    for op, sv in start.items():
        n = problem.num_stages[op.pipeline]
        pr = predecessor(op, n)
        while pr is not None and pr not in start:
            pr = predecessor(pr, n)
        if pr is not None:
            gap = head[_first(op)] - head[_first(pr)] - problem.duration(pr)
            model.add(sv >= start[pr] + problem.duration(pr) + gap)
    for p, mbs in problem.pipeline_microbatches.items():
        for s in range(problem.num_stages[p]):  # each stage alone within its device's cap, under FIFO
            for rel, fwd in problem.memory_windows(p, s, problem.cap(placement.device(p, s)))[0]:
                if fwd in start:
                    model.add(start[fwd] >= start[rel] + problem.duration(rel))
        for a, b in itertools.pairwise(mbs):
            for s in range(problem.num_stages[p]):
                for k in problem.kinds:
                    if Op(k, p, s, a) in start:
                        model.add(start[Op(k, p, s, b)] >= start[Op(k, p, s, a)] + problem.duration(Op(k, p, s, a)))
    return start, ivs


def _memory(model, problem: Problem, placement: Placement, kept: set[int], start, horizon: int) -> None:
    """One cumulative per kept device with a cap: each activation part from its forward's
    start to its release op's end (``Problem.lifetimes``)."""
    scale = activation_scale(problem)
    for d in kept:
        cap = problem.cap(d)
        if cap is None:
            continue
        items = []
        for op, sv in start.items():
            if op.kind is not Kind.F or placement.device(op.pipeline, op.stage) != d:
                continue
            for kind, size in problem.lifetimes(op.pipeline, op.stage):
                rel = Op(kind, op.pipeline, op.stage, op.microbatch)
                end = start[rel] + problem.duration(rel)
                size_end = model.new_int_var(0, horizon, "")
                model.add(size_end == end - sv)
                items.append((model.new_interval_var(sv, size_end, end, ""), round(size * scale)))
        if items:
            model.add_cumulative([iv for iv, _ in items], [dem for _, dem in items], math.floor(cap * scale + 1e-9))
