"""The search on one fixed placement (start, bound, search within the call's ``Deadline``)
and what every mode builds its ``Result`` from: a bound's assumptions, the solver's record,
an infeasible memory cap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, cast

from pipetab.schedules.placements import FAMILY_LABELS
from pipetab.solver.costs import Rounding
from pipetab.solver.pairs import paired_on_order

from ..heuristics.mirror import mirror_pairs
from ..heuristics.starts import Pace, Start, best_of, judge, more_starts, start_phase
from ..model.bounds import cap_violations, min_feasible_cap
from ..model.cpmodel import CpSatModel
from ..model.families import assumptions_of
from ..model.objectives import analytic_lower_bound, objective
from ..model.oracle import KnownEval, checked
from ..model.variables import BuildTimeout
from ..result import CyclicInfo, KnownGap, Mode, PhaseRecord, Result, SolveLog, SolverInfo, Status, gap_of
from .cyclic import cyclic_applies, cyclic_phase
from .strategy import SearchState, bound_phase, search_phase, solve_record

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement, Schedule
    from pipetab.solver.deadline import Deadline

    from ..params import CpSatConfig
    from ..problem import Problem


# ---- what a result says -------------------------------------------------------------------
# what a bound holds under where the search may overlap pairs (``Problem.overlap_pairs``)
PAIRS_ASSUMPTION = "a forward and a backward of different microbatches on one device may run as one overlapped block"


def base_assumptions(problem: Problem, placement_label: str) -> list[str]:
    """The conventions every bound of ``problem`` holds under."""
    out = [placement_label]
    if len(set(problem.microbatch2pipeline)) > 1:
        out.append("microbatch-to-pipeline assignment fixed")
    out.append("stage partition fixed (op times as given)")
    c = problem.costs
    if c.tick_s is not None:
        if c.rounding is Rounding.DOWN:
            out.append(f"durations rounded down to ticks of {c.tick_s:g} s (a lower bound of the real-valued problem)")
        else:
            out.append(f"durations rounded up to ticks of {c.tick_s:g} s (bound of the quantized problem)")
    elif c.unit == "slots":
        out.append("idealized slot costs" + (f", ticks of {c.tick_slots:g} slot" if c.tick_slots != 1 else ""))
    if any(problem.cap(d) is not None for d in range(problem.num_devices)):
        if problem.split_backward:
            out.append("activation live from its F's start: M - M_W to its B's end, M_W to its W's end")
        else:
            out.append("activation live from its F's start to its B's end")
    if c.chains and problem.overlap_pairs:
        out.append(PAIRS_ASSUMPTION + ("; blocks holding a W are not considered (one can be faster than this bound)"
                                       if problem.split_backward else ""))
    elif c.chains and not problem.blocks:
        out.append("ops run one at a time: no overlapped forward-backward pairs (a schedule with pairs can be "
                   "faster than this bound)")
    extra = objective(problem).assumption
    return out + ([extra] if extra else [])


def search_assumptions(problem: Problem, placement_label: str, applied: Iterable[str]) -> tuple[str, ...]:
    """``base_assumptions`` and those the applied model families add."""
    return tuple(base_assumptions(problem, placement_label) + assumptions_of(applied))


def placement_label(problem: Problem, placement: Placement | None) -> str:
    if placement is None:
        return "placement free"
    family = problem.family
    if family is not None and not problem.is_free:
        return f"placement fixed: {FAMILY_LABELS[family]}"
    return f"placement fixed: {[list(x) for x in placement.stage2device]}"


def solver_info(config: CpSatConfig, families=(), stopped_by=None) -> SolverInfo:
    return SolverInfo(config.workers, config.random_seed, tuple(config.portfolio() or ()), config.time_limit_s,
                      config.deterministic_time, tuple(families), stopped_by)


def infeasible_cap(problem: Problem, mode: Mode, deadline: Deadline, placement: Placement | None,
                   reasons: list[str], config: CpSatConfig, label: str | None = None) -> Result:
    """The answer to a memory cap no schedule fits: which devices, and the least cap."""
    mfc = min_feasible_cap(problem, deadline.wall_left())
    shown = "; ".join(reasons[:2]) + (f" (and {len(reasons) - 2} more devices)" if len(reasons) > 2 else "")
    return replace(finish(problem, mode, Status.INFEASIBLE, None, None, None, deadline.t0, None,
                          base_assumptions(problem, label or placement_label(problem, placement)),
                          f"{shown}; the smallest feasible activation cap is {mfc:g}", (), config),
                   min_feasible_cap=mfc)


def finish(problem: Problem, mode: Mode, status: Status, schedule: Schedule | None, value, bound, t0: float,
           t_first, assumptions, message: str, evals: Sequence[KnownEval], config: CpSatConfig, phases=(),
           families=(), analytic=None, stopped_by=None) -> Result:
    """A search's ``Result``, the start's known schedules (not greedy or justified) judged."""
    known = {}
    for e in evals:
        if e.name.startswith(("greedy", "justified-")):
            continue
        known[e.name] = KnownGap(e.makespan, e.fits, gap_of(e.makespan, bound) if e.fits else None,
                                 "" if e.fits else (e.memory.violation or e.error or ""))
    if schedule is not None and schedule.name.startswith("justified-") and not message:
        message = f"best schedule is {schedule.name!r}, a known schedule improved by double justification"
    elif schedule is not None and schedule.name != "cpsat" and not message:
        message = f"best schedule is the start {schedule.name!r}"
    return Result(mode=mode, status=status, schedule=schedule, makespan=value, lower_bound=bound,
                  unit=problem.costs.unit, runtime_s=time.perf_counter() - t0, time_to_first_s=t_first,
                  bound_assumptions=tuple(assumptions), message=message, known=known, tick_s=problem.costs.tick_s,
                  objective=problem.objective, tick_slots=problem.costs.tick_slots, log=SolveLog(tuple(phases)),
                  solver=solver_info(config, families, stopped_by), analytic_bound=analytic)


# ---- the search on one placement ------------------------------------------------------------
def shared_capped(problem: Problem, placement: Placement) -> bool:
    """Whether a device holds several stages under a cap that can bind: there the memory
    cumulative of variable-size lifetimes makes probes prove little, so the bound phase gets
    ``StrategyParams.shared_capped_bound_share`` and the mirror solve its share of the rest."""
    for d in range(placement.num_devices):
        held, cap = placement.stages_on(d), problem.cap(d)
        if len(held) > 1 and cap is not None:
            every = sum(problem.costs.activation[k] * problem.pipeline_counts[k[0]] for k in held)
            if cap < every - 1e-9:
                return True
    return False


class _Fixed:
    """One search on a fixed placement: problem, start, analytic bound, phases, shared state."""

    def __init__(self, problem: Problem, placement: Placement, config: CpSatConfig, deadline: Deadline,
                 mode: Mode, label: str, known: Sequence[Schedule], start: Start | None):
        self.problem, self.placement, self.config, self.deadline = problem, placement, config, deadline
        self.mode, self.label, self.known = mode, label, known
        self.start = cast("Start", start)  # None until the start phase runs (``PHASES``)
        self.pace = Pace(deadline, config.start)
        self.phases: list[PhaseRecord] = []
        self.t_first: float | None = None
        self.lb, self.lb_why = 0, ""
        self.cyclic: CyclicInfo | None = None
        self.fits = False  # whether the full model fits the time left (as the pace last said)
        self.state: SearchState | None = None
        self.cyclic_takes_all = (mode is Mode.SEARCH and problem.num_ops >= config.strategy.cyclic_all_ops
                                 and config.uses("cyclic") and cyclic_applies(problem, config, True))
        if start is not None:
            self.pace.measured_from(start.evals)
            self.started(start)

    def started(self, start: Start) -> None:
        self.start = start
        self.phases.append(PhaseRecord("start", start.wall_s, note=start.note))
        self.t_first = start.first_fit - self.deadline.t0 if start.first_fit is not None else None
        self.lb, self.lb_why = analytic_lower_bound(self.problem, self.placement)

    @property
    def best(self) -> KnownEval | None:
        return self.start.best if self.start is not None else None

    def settled(self) -> Result | None:
        """The result where a start meets the analytic bound (no phase can do better)."""
        best = self.best
        if best is not None and self.lb >= best.makespan:  # type: ignore[operator]
            return self.finish(Status.OPTIMAL, best.schedule, best.makespan, self.lb,
                               f"a start meets the analytic bound ({self.lb_why})")
        return None

    def run_cyclic(self, share: float) -> None:
        """The cyclic phase (``phases.cyclic``) on ``share`` of the time left: the best of its
        expanded kernels may become the start's best; what it proved goes into the result."""
        evals, record, self.cyclic = cyclic_phase(self.problem, self.placement, self.config, self.deadline, share,
                                                  self.pace, self.start.evals)
        self.phases.append(record)
        if evals:
            self.start.adopt(evals)
            self.t_first = self.t_first if self.t_first is not None else time.perf_counter() - self.deadline.t0

    def search_alone_and_pair(self, share: float) -> None:
        """Where pairs may overlap: CP-SAT's search of the same problem with every op alone
        (its full and cyclic models are strongest there) on ``share`` of the time left,
        from the best starts without pairs; its schedule, and its order and the best
        start's with adjacent forward-backward pairs overlapped (``solver.pairs``), join
        the starts."""
        t = time.perf_counter()
        plain = sorted((e for e in self.start.evals if e.fits and not e.schedule.blocks),
                       key=lambda e: e.makespan)  # type: ignore[arg-type,return-value]
        alone = search_fixed(replace(self.problem, overlap_pairs=False), self.placement,
                             self.config.replace(known_generators=False), [e.schedule for e in plain[:3]],
                             self.deadline.slice(share), Mode.SEARCH, self.label)
        if alone.schedule is None:
            return
        # which pairs an order admits depends on the order: the best start without pairs is paired too
        orders = {s.name: s for s in (alone.schedule, *(e.schedule for e in plain[:1]))}
        judged = {e.name for e in self.start.evals}
        found = [] if alone.schedule.name in judged else [alone.schedule]  # a start kept is judged already
        each = (self.pace.unit or 0.0) * self.pace.params.cost("evaluate")  # the judging of each found
        for sched in orders.values():
            if self.pace.fits("evaluate", self.deadline.end, 8):
                found += paired_on_order(sched, self.problem.costs, until=self.deadline.end - each * (len(found) + 3))
        evals, _ = judge(self.problem, found, self.pace)
        self.start.adopt(evals)
        best = best_of(evals)
        self.phases.append(PhaseRecord(
            "search alone", round(time.perf_counter() - t, 3),
            note=f"ops one at a time: {alone.makespan} ({alone.status}); with its order's pairs: "
                 f"{best.makespan if best is not None else '-'}"))
        if self.t_first is None and best is not None:
            self.t_first = time.perf_counter() - self.deadline.t0

    def without_model(self, message: str) -> Result:
        """No model follows: in search mode the start's pending sources get the time left;
        then the best schedule found comes back with the analytic bound."""
        t = time.perf_counter()
        judged = more_starts(self.start, self.deadline, self.pace) if self.mode is Mode.SEARCH else 0
        best = self.start.best
        if judged:
            self.phases.append(PhaseRecord("more starts", round(time.perf_counter() - t, 3),
                                           note=f"{judged} more schedules judged; best {best.name if best else '-'}"))
        if best is None:
            return self.finish(Status.UNKNOWN, None, None, self.lb, "no schedule within the time limit")
        return self.settled() or self.finish(Status.FEASIBLE, best.schedule, best.makespan, self.lb, message)

    def found(self, schedule: Schedule, value: int, bound: int, families=(), stopped_by=None) -> Result:
        """A schedule of objective ``value`` and a proven ``bound``: optimal where they meet."""
        status = Status.OPTIMAL if bound >= value else Status.FEASIBLE
        return self.finish(status, schedule, value, min(bound, value), "", families, stopped_by)

    def finish(self, status: Status, schedule, value, bound, message: str, families=(), stopped_by=None) -> Result:
        if (schedule is not None and schedule.name != "cpsat" and not schedule.name.startswith("cyclic-")
                and self.pace.fits("evaluate", self.deadline.end + 1.0, 3)):
            checked(self.problem, schedule, value)  # a start: its table validated too (solver schedules are already)
        result = finish(self.problem, self.mode, status, schedule, value, bound, self.deadline.t0, self.t_first,
                        search_assumptions(self.problem, self.label, families), message, self.start.evals,
                        self.config, tuple(self.phases), families, self.lb, stopped_by)
        return result if self.cyclic is None else replace(result, cyclic=self.cyclic)

    def solve_without_start(self) -> Result:
        """No start fits: one solve of the whole model for the time left."""
        problem, placement = self.problem, self.placement
        t = time.perf_counter()
        try:
            model = CpSatModel(problem, self.config, placement, objective(problem).no_start_horizon(problem, placement),
                               makespan_lb=self.lb, deadline=self.deadline.end)
        except BuildTimeout:
            return self.finish(Status.UNKNOWN, None, None, self.lb, "no schedule within the time limit")
        raw = model.solve(*self.deadline.limits())
        self.phases.append(PhaseRecord("solve", round(time.perf_counter() - t, 3),
                                       (solve_record("solve", self.config, None, raw),)))
        families = tuple(model.applied)
        found = None
        if raw.starts is not None:
            found = checked(problem, model.schedule_from(raw), raw.makespan)
            self.t_first = time.perf_counter() - self.deadline.t0
        if raw.status is Status.INFEASIBLE:
            return self.finish(Status.INFEASIBLE, None, None, None, "no schedule exists under these constraints",
                               families)
        bound = max(self.lb, raw.bound or self.lb)
        if found is None or found.makespan is None:
            return self.finish(Status.UNKNOWN, None, None, bound, "no schedule found within the limit", families)
        return self.found(found.schedule, found.makespan, bound, families)

    def bound_share(self) -> float:
        searching = self.mode is not Mode.BOUND
        share = self.config.strategy.bound_share if searching else 1.0
        if searching and shared_capped(self.problem, self.placement):
            share = min(share, self.config.strategy.shared_capped_bound_share)
        return share

    def conclude(self) -> Result:
        """The result of the bound and search phases: their incumbent and bound."""
        state = self.state
        assert state is not None  # the bound phase ran
        incumbent, bound = state.snapshot()
        assert incumbent.makespan is not None  # a judged schedule that fits
        return self.found(incumbent.schedule, incumbent.makespan, bound, state.families,
                          state.stopped_by if not state.done else None)


# ---- the phases, a list run by one loop ------------------------------------------------------
def _start(run: _Fixed, share: float) -> None:
    run.started(start_phase(run.problem, run.placement, run.config, run.known, run.deadline, run.pace, share))


def _cyclic(run: _Fixed, share: float) -> Result | None:
    run.run_cyclic(share)
    cut = run.config.strategy.cyclic_only_ops
    out = run.settled()
    if out is None and run.problem.num_ops >= cut and run.best is not None:
        return run.without_model(f"best start or periodic schedule and analytic bound: the full model is not "
                                 f"built at {cut:,} ops or more after the cyclic phase")
    run.fits = run.pace.model_fits()
    return out


def _cyclic_applies(run: _Fixed) -> bool:
    run.fits = fits = run.pace.model_fits()
    return (run.config.uses("cyclic") and cyclic_applies(run.problem, run.config, fits)
            and (run.mode is not Mode.BOUND or not fits))


def _cyclic_share(run: _Fixed) -> float:
    strategy = run.config.strategy
    share = strategy.cyclic_pairs_share if run.problem.overlap_pairs else strategy.cyclic_share
    return 1.0 if not run.fits or run.problem.num_ops >= strategy.cyclic_all_ops else share


NO_ROOM = "the time limit leaves no time to build the CP-SAT model; best start and analytic bound"


def _bound(run: _Fixed, share: float) -> None:
    t = time.perf_counter()
    run.state = SearchState(run.best, run.lb, run.config, run.deadline.t0)  # type: ignore[arg-type]
    rows: list = []
    bound_phase(run.problem, run.placement, run.config, run.state, run.deadline.slice(share), rows,
                leave_early=run.mode is not Mode.BOUND)
    run.phases.append(PhaseRecord("bound", round(time.perf_counter() - t, 3), tuple(rows)))


def _search(run: _Fixed, share: float) -> None:
    rows: list = []
    t = time.perf_counter()
    mirror = mirror_pairs(run.problem, run.placement) if shared_capped(run.problem, run.placement) else None
    search_phase(run.problem, run.placement, run.config, run.state, run.deadline.slice(share), rows, mirror)  # type: ignore[arg-type]
    run.phases.append(PhaseRecord("search", round(time.perf_counter() - t, 3), tuple(rows)))


@dataclass(frozen=True)
class Phase:
    """One phase on a fixed placement: ``applies``, its ``share`` of the time left, ``open``
    (runs only while no start meets the analytic bound) and ``run`` (a ``Result`` ends the
    search); every phase works on the one best-so-far (``_Fixed``)."""

    name: str
    applies: Callable[[_Fixed], bool]
    share: Callable[[_Fixed], float]
    run: Callable[[_Fixed, float], Result | None]
    open: bool = False


PHASES = (
    Phase("start", lambda r: r.start is None,
          lambda r: r.config.strategy.cyclic_start_share if r.cyclic_takes_all else 1.0, _start),
    Phase("search alone", lambda r: r.problem.overlap_pairs and r.mode is Mode.SEARCH and not _cyclic_applies(r),
          lambda r: r.config.strategy.alone_share if r.pace.model_fits() else 1.0,
          lambda r, share: r.search_alone_and_pair(share)),
    Phase("cyclic", _cyclic_applies, _cyclic_share, _cyclic, open=True),
    Phase("no room", lambda r: not r.fits, lambda r: 1.0, lambda r, share: r.without_model(NO_ROOM), open=True),
    Phase("solve", lambda r: r.best is None, lambda r: 1.0, lambda r, share: r.solve_without_start(), open=True),
    Phase("bound", lambda r: True, _Fixed.bound_share, _bound, open=True),
    Phase("search", lambda r: r.mode is not Mode.BOUND and not r.state.should_stop(),  # type: ignore[union-attr]
          lambda r: 1.0, _search),
)


def search_fixed(problem: Problem, placement: Placement, config: CpSatConfig, known: Sequence[Schedule],
                 deadline: Deadline, mode: Mode, label: str | None = None, start: Start | None = None) -> Result:
    """``search`` or ``bound`` on ``placement``: ``PHASES`` in order, each that applies on its
    share of what is left; ``start``: the start phase already run here (``known`` not judged again)."""
    fixed = problem.with_placement(placement)
    label = label or placement_label(problem, placement)
    violations = cap_violations(fixed, placement)
    if violations:
        return infeasible_cap(fixed, mode, deadline, placement, violations, config, label)
    run = _Fixed(fixed, placement, config, deadline, mode, label, known, start)
    for phase in PHASES:
        out = run.settled() if phase.open else None
        if out is None and phase.applies(run):
            out = phase.run(run, phase.share(run))
        if out is not None:
            return out
    return run.conclude()
