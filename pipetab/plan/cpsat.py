"""CP-SAT on the plan's best shapes, at every size: each shape's best registry schedule
fixes the placement and the backward split, and ``cpsat.api.solve_seconds`` searches
better orders of it (the full model where it is small, the cyclic model's periodic
schedules where it is not: ``solver.cpsat.phases.cyclic``), in worker processes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipetab.schedules import registry
from pipetab.solver.pairs import paired_on_order

from .periodic import activation_peaks
from .result import Configuration, configuration, runs
from .space import PlanSpace, costs_of

if TYPE_CHECKING:
    from pipetab.hardware.context import Context


def cpsat_shapes(space: PlanSpace,
                 ranked: list[Configuration]) -> tuple[list[tuple[Context, Configuration]], list[str]]:
    """The best ``space.cpsat_shapes`` distinct shapes that fit, each with its best
    registry configuration (the placement and split CP-SAT searches), and notes (a shape
    that offloads activations is left to ``pipetab search``; every size is searched)."""
    seen: list[Context] = []
    out: list[tuple[Context, Configuration]] = []
    notes: list[str] = []
    for conf in ranked:
        if len(seen) >= space.cpsat_shapes or not conf.fits:
            break
        if conf.shape in seen or conf.source != "registry":
            continue
        seen.append(conf.shape)
        if conf.shape.offload_activations:  # CP-SAT's offload decisions are 'pipetab search --offload-activations'
            notes.append(f"{conf.shape.label}: not searched, it offloads activations (pipetab search "
                         f"--offload-activations {conf.shape.offload_activations:g} chooses which, on one shape)")
            continue
        out.append((conf.shape, conf))
    return out, notes


def _schedule_of(conf: Configuration):
    return registry.generate(conf.schedule, conf.shape.pp, conf.shape.microbatches, **dict(conf.options))  # type: ignore[arg-type]


def cpsat_search(space: PlanSpace, shape: Context, best: Configuration | None = None, t0: float | None = None):
    """CP-SAT on ``shape``'s hardware costs under the memory cap, in seconds
    (``cpsat.api.solve_seconds``: what ``pipetab search`` answers), with the
    placement, pipelines and backward split of ``best`` (the shape's best registry
    configuration; default 1F1B's linear placement with whole backward passes) and that
    schedule as a start; the ``Answer``. The ``space.cpsat_time_s`` budget runs from
    ``t0`` (``time.perf_counter``; default now): building the problem is part of it."""
    from dataclasses import replace

    from pipetab.solver.cpsat import CpSatConfig, Problem
    from pipetab.solver.cpsat.api import solve_seconds

    sched = _schedule_of(best) if best is not None else registry.generate("1f1b", shape.pp, shape.microbatches)  # type: ignore[arg-type]
    known = [sched]
    if best is None or best.schedule != "gpipe":
        try:
            gpipe = registry.generate("gpipe", shape.pp, shape.microbatches)  # type: ignore[arg-type]
            if gpipe.split_backward == sched.split_backward and gpipe.placement == sched.placement:
                known.append(gpipe)
        except ValueError:
            pass
    real = costs_of(space, sched, shape)
    # where an op's costs hold communication (expert parallelism) the search chooses pairs
    problem = replace(Problem.from_schedule(sched, real.quantized(real.default_tick(20))), name=f"plan {shape.label}",
                      overlap_pairs=bool(real.chains))
    # the CP-SAT entry of plan: one worker per searched shape (they run side by side)
    config = CpSatConfig(time_limit_s=space.cpsat_time_s, workers=1)
    return solve_seconds(problem, real, "search", config, known, deadline=config.deadline(t0))


def cpsat_outcome(space: PlanSpace, shape: Context, answer, ranked: list[Configuration]) -> tuple:
    """(configuration when it beats the shape's best registry schedule, else None; note).
    The schedule is re-simulated on the shape's costs and its table validated
    (``evaluate_levels``) before it is ranked."""
    from pipetab.solver.cpsat.phases.fixed import PAIRS_ASSUMPTION
    from pipetab.solver.cpsat.result import gap_of
    from pipetab.solver.levels import evaluate_levels

    techniques = " ".join(t.removeprefix("recompute=") for t in shape.memory_techniques)
    where = f"{shape.label} recompute {techniques or shape.recompute}"
    if answer.schedule is None:
        return None, f"{where}: no schedule within {space.cpsat_time_s:g} s ({answer.status})"
    costs = costs_of(space, answer.schedule, shape)

    def judged(sched):  # validated, simulated and memory-checked as every ranked row
        sim = evaluate_levels(sched, costs=costs).simulation
        assert sim is not None  # costs given: simulated
        return configuration(space, "cpsat", {}, shape, sched, costs, sim.makespan, activation_peaks(sched, costs),
                             searched=sched)

    found = unpaired = judged(answer.schedule)
    for paired in paired_on_order(answer.schedule, costs):  # pairs chosen on CP-SAT's order
        conf = judged(paired)
        if conf.fits and conf.step_time_s < found.step_time_s * (1 - 1e-9):
            found = conf
    sched = found.searched
    # what the table shows for the shape: its best registry schedule, on the even layout or a refined one
    rivals = [c for c in ranked if c.shape.even == shape and c.fits and c.source != "cpsat"]
    best = min(rivals, key=lambda c: c.step_time_s, default=None)
    start = min((c for c in rivals if c.source == "registry" and c.shape == shape), key=lambda c: c.step_time_s,
                default=best)
    better = found.fits and (best is None or found.step_time_s < best.step_time_s * (1 - 1e-9))
    pairs_bound = any(a.startswith(PAIRS_ASSUMPTION) for a in answer.assumptions)  # of schedules with pairs
    lb, gap = answer.lower_bound_s, gap_of(found.step_time_s, answer.lower_bound_s)
    if lb is None or answer.gap is None or gap is None:
        bound = ""
    elif found is unpaired or pairs_bound:
        bound = f", bound {lb:.6g} s, gap {100 * gap:.2f}%"
    else:
        bound = f", bound {lb:.6g} s of orders without overlapped pairs, gap {100 * answer.gap:.2f}% before pairing"
    kind = "whole" if not sched.split_backward else "split"
    if sched.blocks and found is unpaired:
        whose = "chosen by the search" if sched.name == "cpsat" else \
            f"of the start {sched.name!r}, which the search kept"
        kind += f" backward, {len(sched.blocks)} overlapped forward-backward pairs {whose}"
    elif found is not unpaired:
        kind += (f" backward; its order's adjacent forward-backward pairs overlapped after the search, "
                 f"{unpaired.step_time_s:.6g} s without")
    elif costs.chains and pairs_bound:
        kind += " backward, no overlapped forward-backward pair was faster"
    elif costs.chains:
        kind += " backward, forward-backward pairs not overlapped: CP-SAT orders ops one at a time and no pairing " \
                "of adjacent ops of its order was faster"
    else:
        kind += " backward"
    steady = answer.result.cyclic
    cyc = "" if steady is None else (f"; steady state {steady.block} microbatches every "
                                     f"{steady.period * answer.tick_s:.4g} s")
    head = (f"{where}: {answer.status} in {answer.runtime_s:.1f} s on the placement of "
            f"{start.label if start is not None else '1f1b'} ({kind}), even layout: {found.step_time_s:.6g} s "
            f"({sched.name}{bound}{cyc})")
    if best is None:
        return (found if better else None), head
    change = (found.step_time_s - best.step_time_s) / best.step_time_s
    shown = round(100 * abs(change), 3)  # as printed: a change below 0.0005 % reads "as fast as"
    side = "as fast as" if shown == 0 else "faster" if change < 0 else "slower"
    amount = "" if shown == 0 else f"{shown:.3f}% "
    layout = "" if best.source == "registry" else f", layers {runs(best.layers_per_stage)}"
    return (found if better else None,
            f"{head}, {amount}{side}{'' if shown == 0 else ' than'} the shape's best in the table "
            f"({best.label}{layout}, {best.step_time_s:.6g} s){'' if better else '; not shown'}")
