"""The CP-SAT objectives as data: one ``ModelObjective`` per ``Objective``, in
``OBJECTIVES``. ``makespan``: one synchronous step, every device's end plus its optimizer and
every all-reduce. ``period``: the longest device span of a repeated step without a barrier
(the Zero Bubble paper's cost, ``solver.periodic``). ``memory``: the largest per-device peak
of live activations at a makespan the horizon fixes (bytes). The last two: fixed placement.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from pipetab.schedules.evaluate import Timing
from pipetab.schedules.ops import Kind, Op
from pipetab.solver import periodic
from pipetab.solver.simulate import SimTiming, Simulation, simulate

from ..problem import Objective, Problem
from . import bounds
from .sweep import PipelineArrays
from .variables import heads_tails

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from pipetab.schedules.schedule import Placement, Schedule
    from pipetab.solver.costs import Costs

    from .variables import Variables


class ModelObjective:
    """One objective, registered by name (``register``): the ``unit`` of its value (``ticks``
    or ``bytes``), the ``assumption`` it adds to a bound, ``free_placement`` (whether a model
    with placement literals can hold it), and its model terms and ``expression``, its value on
    a schedule (``judge``: model units; ``seconds``: real-valued costs), its solver-free
    ``lower_bound``, horizons and hints."""

    name: Objective
    unit = "ticks"
    assumption: str | None = None
    free_placement = True

    def lower_bound(self, problem: Problem, placement: Placement | None) -> tuple[int, str]:
        """A solver-free bound of the objective: (bound, which one)."""
        raise NotImplementedError

    def no_start_horizon(self, problem: Problem, placement: Placement | None) -> int:
        """Bounds every time of some optimal schedule (no start known)."""
        return bounds.safe_horizon(problem, placement)

    def model_horizon(self, problem: Problem, placement: Placement, cap: int) -> tuple[int, int | None]:
        """(horizon, objective cap or None) of the model of schedules of objective at most ``cap``."""
        return cap, None

    def variables(self, model: cp_model.CpModel, v: Variables, lb: int) -> None:
        v.makespan = model.new_int_var(max(lb, 0), v.horizon, "makespan")

    def constrain(self, model: cp_model.CpModel, v: Variables, orders, fifo: bool) -> None:
        return None

    def expression(self, v: Variables):
        return v.makespan

    def judge(self, problem: Problem, schedule: Schedule, sim: Simulation) -> tuple[int, Timing]:
        """The objective of a simulated schedule (model units) and its timing."""
        return round(sim.makespan), SimTiming(sim)

    def hint(self, model: cp_model.CpModel, v: Variables, schedule: Schedule, starts: dict, ends: dict) -> None:
        return None

    def seconds(self, problem: Problem, schedule: Schedule, costs: Costs) -> float:
        """The objective of ``schedule`` on real-valued ``costs``."""
        return simulate(schedule, costs).makespan


OBJECTIVES: dict[Objective, ModelObjective] = {}


def register(obj: ModelObjective) -> ModelObjective:
    """Add ``obj`` to ``OBJECTIVES`` under its name."""
    OBJECTIVES[obj.name] = obj
    return obj


def objective(problem: Problem) -> ModelObjective:
    """The registered objective of ``problem``."""
    return OBJECTIVES[problem.objective]


def analytic_lower_bound(problem: Problem, placement: Placement | None) -> tuple[int, str]:
    """The solver-free lower bound of the problem's objective: (bound, which one)."""
    return objective(problem).lower_bound(problem, placement)


# ---- makespan ------------------------------------------------------------------------------
class Makespan(ModelObjective):
    """One synchronous step: every device's end plus its optimizer time and every replica
    group's all-reduce (the ``makespan`` family bounds ``v.makespan`` below)."""

    name = Objective.MAKESPAN

    def lower_bound(self, problem: Problem, placement: Placement | None) -> tuple[int, str]:
        return bounds.makespan_lower_bound(problem, placement)


register(Makespan())


# ---- period --------------------------------------------------------------------------------
def add_period(model: cp_model.CpModel, v: "Variables", orders=None, fifo: bool = False) -> None:
    """period >= last_d - first_d on every device d holding ops (first_d at most each op's
    start, last_d at least each end); only ops that can be first (F) or last (the release op)
    count: with fixed ``orders`` each device's first and last, under ``fifo`` each stage's."""
    problem = v.problem
    if v.placement is None:
        raise ValueError("the period objective needs a fixed placement (free placement is decomposed)")
    rel = problem.release_kind
    firsts: dict[int, list[int]] = defaultdict(list)
    lasts: dict[int, list[int]] = defaultdict(list)
    if orders is not None:
        for d, order in enumerate(orders):
            if order:
                firsts[d].append(v.index[order[0]])
                lasts[d].append(v.index[order[-1]])
    elif fifo:
        for p, mbs in problem.pipeline_microbatches.items():
            for s in range(problem.num_stages[p]):
                d = v.placement.device(p, s)
                firsts[d].append(v.index[Op(Kind.F, p, s, mbs[0])])
                lasts[d].append(v.index[Op(rel, p, s, mbs[-1])])
    else:
        for i, op in enumerate(v.ops):
            if op.kind is Kind.F:
                firsts[v.device[i]].append(i)  # type: ignore[index]
            if op.kind is rel:
                lasts[v.device[i]].append(i)  # type: ignore[index]
    for d in firsts:
        for i in firsts[d]:
            model.add(v.first[d] <= v.start[i])
        for i in lasts[d]:
            model.add(v.last[d] >= v.end(i))
        model.add(v.period >= v.last[d] - v.first[d])


def period_lower_bound(problem: Problem, placement: Placement | None) -> tuple[int, str]:
    """A device's span holds its ops one at a time; on a one-stage device also the warm-up
    idle: from F(0, s)'s start to B(0, s)'s start passes at least the round trip L, in which at
    most k forwards run (k: activations the cap holds; ``Problem.window_shifts``), so span >=
    load + L - k F. With more than k microbatches the drain idle adds to it: from the last
    forward's start to its backward L passes again, holding only that forward and the B and W
    of the a + w activations live then (``_drain_idle``)."""
    if placement is None:
        total = sum(problem.duration(op) for op in problem.ops)
        return math.ceil(total / problem.num_devices), "total work over devices"
    load: dict[int, int] = defaultdict(int)
    for op in problem.ops:
        load[placement.device(op.pipeline, op.stage)] += problem.duration(op)
    best, why = 0, ""
    head, _ = heads_tails(problem, placement)
    counts = problem.pipeline_counts
    for d, ld in load.items():
        idle = 0
        held = placement.stages_on(d)
        if len(held) == 1:
            (p, s), = held
            f = Op(Kind.F, p, s, 0)
            k = problem.activations_fit(problem.cap(d), p, s)
            k = counts[p] if k is None else min(k, counts[p])
            trip = head[Op(Kind.B, p, s, 0)] - head[f]
            idle = max(0, trip - k * problem.duration(f))
            if counts[p] > k:
                idle += _drain_idle(problem, p, s, trip, k, counts[p], problem.cap(d))
        if ld + idle > best:
            best, why = ld + idle, f"load of device {d}" + (" and its warm-up and drain idle" if idle else "")
    for value, label in _through_paths(problem, placement, counts):
        if value > best:
            best, why = value, label
    return best, why


def _through_paths(problem: Problem, placement: Placement, counts: dict[int, int]):
    """One pipeline, one stage per device: device d's span holds the path down to a later
    device e, all of e's forwards and backwards, the path back to d and the W of the last
    microbatch on d, whichever microbatches are first and last. Yields (value, label)."""
    if problem.num_pipelines != 1 or any(len(placement.stages_on(d)) != 1 for d in range(problem.num_devices)):
        return
    pl, count, dev = PipelineArrays(problem, placement, 0), counts[0], placement.stage2device[0]
    for d in range(pl.n - 1):
        down = up = 0.0
        for e in range(d + 1, pl.n):
            down += pl.step_f[e - 1]
            up += pl.b[e - 1] + pl.lag_b[e - 1]
            yield (round(down + count * (pl.f[e] + pl.b[e]) + up + pl.w[d]),
                   f"device {dev[d]}'s span through all forwards and backwards of device {dev[e]}")


def _drain_idle(problem: Problem, p: int, s: int, trip: int, k: int, count: int, cap: float | None) -> int:
    """Least idle of a one-stage device between its last forward's start and that
    microbatch's backward start (``trip`` apart): ``trip`` minus the most work that fits,
    the forward plus the B and W of a - 1 other activations and the W of w held ones."""
    f, b = problem.duration(Op(Kind.F, p, s, 0)), problem.duration(Op(Kind.B, p, s, 0))
    w_time = problem.duration(Op(Kind.W, p, s, 0)) if problem.split_backward else 0
    m, m_w = problem.costs.activation[(p, s)], problem.weight_part(p, s)
    most = 0
    for a in range(1, k + 1):
        held = count - a
        if w_time and m_w > 1e-12 and cap is not None:
            held = min(held, math.floor((cap - a * m) / m_w + 1e-9))
        held = max(0, held) if w_time else 0
        most = max(most, f + (a - 1) * (b + w_time) + held * w_time)
    return max(0, trip - most)


class Period(ModelObjective):
    """The longest device span of a repeated step without barrier (Zero Bubble's cost)."""

    name = Objective.PERIOD
    assumption = ("objective: the longest device span from its first op's start to its last op's end "
                  "(steady state without a global barrier; all-reduce and optimizer not counted)")
    free_placement = False

    def lower_bound(self, problem: Problem, placement: Placement | None) -> tuple[int, str]:
        return period_lower_bound(problem, placement)

    def no_start_horizon(self, problem: Problem, placement: Placement | None) -> int:
        return bounds.period_horizon(problem, placement)  # type: ignore[arg-type]

    def model_horizon(self, problem: Problem, placement: Placement, cap: int) -> tuple[int, int | None]:
        return bounds.period_horizon(problem, placement, cap), cap

    def variables(self, model: cp_model.CpModel, v: Variables, lb: int) -> None:
        D = v.problem.num_devices
        v.makespan = model.new_int_var(0, v.horizon, "makespan")
        v.period = model.new_int_var(max(lb, 0), v.horizon, "period")
        v.first = [model.new_int_var(0, v.horizon, f"first_d{d}") for d in range(D)]
        v.last = [model.new_int_var(0, v.horizon, f"last_d{d}") for d in range(D)]

    def constrain(self, model: cp_model.CpModel, v: Variables, orders, fifo: bool) -> None:
        add_period(model, v, orders, fifo)

    def expression(self, v: Variables):
        return v.period

    def judge(self, problem: Problem, schedule: Schedule, sim: Simulation) -> tuple[int, Timing]:
        """The least integer period of ``schedule``'s orders on the integer costs and its earliest
        timing: ``solver.periodic.min_period`` rounded up (with integer durations and lags an integer
        P admits an integer timing iff P is at least it), timed by ``periodic_timing``. All-reduces
        are not part of the period (the objective's assumption)."""
        costs = replace(problem.costs, replica_groups=())
        period = math.ceil(periodic.min_period(schedule, costs) - 1e-9)
        timing = periodic.periodic_timing(schedule, costs, period)
        start = {op: round(t) for op, t in timing.start.items()}
        return period, Timing(start, {op: t + problem.duration(op) for op, t in start.items()})


    def hint(self, model: cp_model.CpModel, v: Variables, schedule: Schedule, starts: dict, ends: dict) -> None:
        firsts = [min((starts[op] for op in o), default=0) for o in schedule.orders]
        lasts = [max((ends[op] for op in o), default=0) for o in schedule.orders]
        for d in range(v.problem.num_devices):
            model.add_hint(v.first[d], firsts[d])
            model.add_hint(v.last[d], lasts[d])
        model.add_hint(v.period, max(b - a for a, b in zip(firsts, lasts)))

    def seconds(self, problem: Problem, schedule: Schedule, costs: Costs) -> float:
        return periodic.min_period(schedule, replace(costs, replica_groups=()))


register(Period())


# ---- peak memory ---------------------------------------------------------------------------
class PeakMemory(ModelObjective):
    """The largest per-device peak of live activation memory among schedules whose step ends by
    the horizon (``api.least_peak_memory``); beside it, "least makespan under a cap" is
    ``Makespan`` with caps. The peak is ``Variables.peak`` (units of 1/``memory_scale``), held
    by every device's cumulative of lifetimes (``families.add_memory``)."""

    name = Objective.MEMORY
    unit = "bytes"
    assumption = "objective: the largest per-device peak of live activations, the step ending by the horizon"
    free_placement = False

    def lower_bound(self, problem: Problem, placement: Placement | None) -> tuple[int, str]:
        """A forward allocates its whole activation at its start: every stage's fits."""
        scale = bounds.activation_scale(problem)
        most = max((problem.costs.activation[k] for k in problem.stages), default=0.0)
        return math.ceil(most * scale - 1e-9), "the largest activation of one stage"

    def model_horizon(self, problem: Problem, placement: Placement, cap: int) -> tuple[int, int | None]:
        return bounds.safe_horizon(problem, placement), cap

    def variables(self, model: cp_model.CpModel, v: Variables, lb: int) -> None:
        problem = v.problem
        v.makespan = model.new_int_var(0, v.horizon, "makespan")
        v.memory_scale = scale = bounds.activation_scale(problem)
        total = sum(round(problem.costs.activation[k] * scale) * problem.pipeline_counts[k[0]]
                    for k in problem.stages)
        v.peak = model.new_int_var(max(lb, 0), max(lb, total), "peak")

    def expression(self, v: Variables):
        return v.peak

    def judge(self, problem: Problem, schedule: Schedule, sim: Simulation) -> tuple[int, Timing]:
        return _scaled_peak(problem, schedule), SimTiming(sim)

    def hint(self, model: cp_model.CpModel, v: Variables, schedule: Schedule, starts: dict, ends: dict) -> None:
        model.add_hint(v.peak, _scaled_peak(v.problem, schedule))

    def seconds(self, problem: Problem, schedule: Schedule, costs: Costs) -> float:
        """Not a time: the peak on ``costs`` (bytes)."""
        return max(bounds.memory_check(problem.with_costs(costs), schedule).peaks, default=0.0)


register(PeakMemory())


def _scaled_peak(problem: Problem, schedule: Schedule) -> int:
    peak = max(bounds.memory_check(problem, schedule).peaks, default=0.0)
    return round(peak * bounds.activation_scale(problem))
