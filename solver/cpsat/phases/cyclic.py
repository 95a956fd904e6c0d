"""The cyclic phase on a fixed placement (docs/cpsat.md, "The cyclic model"): per block size k
the least period proven by probing ``model.cyclic_kernel`` up from the bound, the expansion's
makespan minimized at it, the best kernels expanded and checked. Its bound is on the period
among block-k periodic schedules; the step's bound stays the model's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from pipetab.solver.simulate import simulate

from ..heuristics.justify import justify, precedence_graph
from ..heuristics.modulo import first_modulo_kernel, regular_kernel
from ..model.cyclic import (
    Kernel,
    blocks,
    kernel_of,
    mixed_twin,
    pattern_period,
    per_microbatch_work,
    period_lower_bound,
    relabelled,
    steady_kernel,
    template_size,
)
from ..model.cyclic_kernel import CyclicModel
from ..model.oracle import KnownEval, checked
from ..result import CyclicInfo, PhaseRecord, SolveRecord, Status

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement
    from pipetab.solver.deadline import Deadline

    from ..heuristics.starts import Pace
    from ..params import CpSatConfig
    from ..problem import Problem


@dataclass
class BlockOutcome:
    """The least period found for one block size, its proven lower bound (among periodic
    schedules of this block), the best kernel and the solves behind them."""

    block: int
    bound: int
    why: str
    period: int | None = None
    kernel: Kernel | None = None
    solves: list[SolveRecord] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.period / self.block if self.period is not None else float("inf")


def _probe(problem, placement, block, period, config, deadline: Deadline, out: BlockOutcome, share: float,
           first: bool):
    """One solve at ``period`` on ``share`` of what the deadline has left."""
    model = CyclicModel(problem, placement, block, period, config)
    if out.kernel is not None and out.kernel.period == period:
        model.hint(dict(out.kernel.start))
    wall, det = deadline.limits()
    raw = model.solve(wall * share, None if det is None else det * share, first=first)
    deadline.charge(raw, len(model.ops))
    out.solves.append(SolveRecord("cyclic probe" if first else "cyclic makespan", "cyclic", 0, period, raw.status,
                                  raw.value, None, round(raw.wall_time, 3), round(raw.det_time, 3)))
    return raw


def _list_kernel(problem: Problem, placement: Placement, block: int, lb: int, params, deadline: Deadline,
                 seed: Kernel | None) -> Kernel | None:
    """``seed`` or the list scheduler's kernel of one period (``modulo``) where shorter."""
    until = None if deadline.deterministic else deadline.end
    firsts = (lambda: first_modulo_kernel(problem, placement, block, lb, params.modulo_steps, params.modulo_tries,
                                          until),
              lambda: regular_kernel(problem, placement, block, lb, params.modulo_tries, until=until))
    for first in firsts:
        if seed is not None and seed.period <= lb:
            break  # at the bound already: neither can do better
        kernel = first()
        if kernel is not None and (seed is None or kernel.period < seed.period):
            seed = kernel
    return seed


def block_period(problem: Problem, placement: Placement, block: int, config: CpSatConfig, deadline: Deadline,
                 seed: Kernel | None = None) -> BlockOutcome:
    """The least period of ``block`` within ``deadline``; ``seed``: a known kernel of it (first
    upper bound and hint), or the list scheduler's when shorter. With a kernel the bound is
    probed first, then the periods between (at a device's full load propagation is best: V
    S=16, 3:4:2, a message of 1, cap S: 18 in 5 s where 19 stayed unknown after 20 s)."""
    params = config.decompose
    lb, why = period_lower_bound(problem, placement, block)
    if template_size(problem, block) <= params.modulo_max_ops:
        seed = _list_kernel(problem, placement, block, lb, params, deadline, seed)
    out = BlockOutcome(block, lb, why, kernel=seed)
    lo, hi, step, proving = lb, None if seed is None else seed.period, 1, True
    at_bound = hi is not None  # a kernel known: the bound itself first (tight, it propagates best)
    build_s = 0.0
    while deadline.room(build_s) and (hi is None or lo < hi):
        P = lo + step - 1 if hi is None else lo if at_bound else (lo + hi) // 2
        t = time.perf_counter()
        raw = _probe(problem, placement, block, P, config, deadline, out, params.cyclic_probe_share, first=True)
        build_s = max(build_s, time.perf_counter() - t - raw.wall_time)
        if raw.status is Status.INFEASIBLE:
            lo = P + 1
            out.bound = max(out.bound, lo) if proving else out.bound
            why = "CP-SAT: no periodic schedule of a shorter period"
            step *= 2
        elif raw.starts is not None:
            hi, out.kernel = P, Kernel(problem, placement, block, P, raw.starts)
        elif hi is None:  # unknown below any schedule: stop proving, look further up
            proving, lo, step = False, P + 1, step * 2
        elif at_bound and (lo + hi) // 2 > lo:  # the bound unknown: bisect between it and the kernel
            proving = False
        else:
            break
        at_bound = False
    out.why = why
    if out.kernel is None:
        return out
    out.period = out.kernel.period
    if deadline.room(build_s):
        raw = _probe(problem, placement, block, out.period, config, deadline, out, params.cyclic_makespan_share,
                     first=False)
        if raw.starts is not None:
            out.kernel = Kernel(problem, placement, block, out.period, raw.starts)
    steady = steady_kernel(out.kernel, params.cyclic_steady_factor)
    if steady is not None and (steady.per_microbatch < out.kernel.per_microbatch or steady.block == block):
        out.kernel = steady  # the simulator's steady state of the same orders: never slower
        if steady.block != block:
            out.block, out.period = steady.block, steady.period
            out.bound, out.why = period_lower_bound(problem, placement, steady.block)
        out.period = steady.period
    return out


def cyclic_applies(problem: Problem, config: CpSatConfig, model_fits: bool = False) -> bool:
    """Whether the cyclic phase runs: a fixed placement, ``cyclic_min_ratio`` microbatches per
    device, a block size, and a problem the full model cannot settle in time or of at least
    ``cyclic_min_ops`` ops."""
    params = config.decompose
    shape = mixed_twin(problem) or problem
    return (not problem.is_free and problem.num_microbatches >= params.cyclic_min_ratio * problem.num_devices
            and (not model_fits or problem.num_ops >= params.cyclic_min_ops)
            and bool(blocks(shape, params.max_block * pattern_period(shape))))


def block_order(problem: Problem, placement: Placement, config: CpSatConfig) -> list[int]:
    """The block sizes to try (up to ``max_block`` times the pattern and ``max_template_ops``):
    the smallest first, then by bound per microbatch and size, less blocks no better per
    microbatch than one they are a multiple of; at most ``max_blocks_tried``."""
    params = config.decompose
    sizes = [k for k in blocks(problem, params.max_block * pattern_period(problem))
             if template_size(problem, k) <= params.max_template_ops]
    work = per_microbatch_work(problem, placement)
    rates = {k: period_lower_bound(problem, placement, k, work)[0] / k for k in sizes}
    out: list[int] = sizes[:1]
    for k in sorted(sizes[1:], key=lambda k: (rates[k], k)):
        if not any(rates[x] <= rates[k] + 1e-12 and k % x == 0 for x in out):
            out.append(k)
    return out[:params.max_blocks_tried]


def cyclic_phase(problem: Problem, placement: Placement, config: CpSatConfig, deadline: Deadline, share: float,
                 pace: Pace, known: Sequence[KnownEval] = ()) -> tuple[list[KnownEval], PhaseRecord, CyclicInfo | None]:
    """The blocks of the best ``known`` schedules' steady states (``kernel_of``) and of
    ``block_order``, each on a share of ``share`` of the deadline, one skipped once a block it
    cannot beat is found; the best kernels expanded and judged: (expansions, the phase's record,
    the best block's proof). With a ``mixed_twin`` the kernels are the twin's, renamed back."""
    t = time.perf_counter()
    params = config.decompose
    twin = mixed_twin(problem)
    shape = twin or problem  # the kernels' problem
    largest = params.max_block * pattern_period(shape)
    seeds: dict[int, Kernel] = {}
    for ev in sorted((e for e in known if e.fits), key=lambda e: e.makespan)[:params.cyclic_seeds]:  # type: ignore[arg-type,return-value]
        if pace.fits("evaluate", deadline.end):
            seen = relabelled(ev.schedule, shape.microbatch2pipeline) if twin else ev.schedule
            kernel = kernel_of(shape, placement, seen, simulate(seen, shape.costs).start_times, largest)
            if kernel is not None and (kernel.block not in seeds or kernel.period < seeds[kernel.block].period):
                seeds[kernel.block] = kernel
    work = per_microbatch_work(shape, placement)
    sizes = sorted(seeds, key=lambda k: seeds[k].per_microbatch) + [
        k for k in block_order(shape, placement, config) if k not in seeds]
    if deadline.deterministic:
        phase = deadline.slice(share)
    else:  # leave the time to expand and check the kernels found
        reserve = (pace.unit or 0.0) * params.cyclic_expansions * 3
        phase = deadline.within(share * max(0.0, deadline.wall_left() - reserve))
    outcomes: list[BlockOutcome] = []
    best = float("inf")
    for i, k in enumerate(sizes[:params.max_blocks_tried]):
        if not phase.room(0.0):
            break
        if period_lower_bound(shape, placement, k, work)[0] / k >= best - 1e-12:
            continue
        last = i == min(len(sizes), params.max_blocks_tried) - 1
        out = block_period(shape, placement, k, config, phase.slice(1.0 if last else params.cyclic_block_share),
                           seeds.get(k))
        outcomes.append(out)
        best = min(best, out.rate)
    evals = _expanded(problem, placement, config, deadline, pace, outcomes)
    info = _info(outcomes, time.perf_counter() - t, twin and twin.microbatch2pipeline, problem.overlap_pairs)
    solves = tuple(r for o in outcomes for r in o.solves)
    note = "; ".join(f"block {o.block}: period {o.period if o.period is not None else '-'} "
                     f"(bound {o.bound}, {o.why})" for o in outcomes)
    return evals, PhaseRecord("cyclic", round(time.perf_counter() - t, 3), solves, note), info


def _expanded(problem: Problem, placement: Placement, config: CpSatConfig, deadline: Deadline, pace: Pace,
              outcomes: list[BlockOutcome]) -> list[KnownEval]:
    """The best kernels expanded to the problem's microbatches, judged and justified."""
    params = config.decompose
    found = sorted((o for o in outcomes if o.kernel is not None), key=lambda o: o.rate)
    evals = []
    for o in found[:params.cyclic_expansions]:
        if not pace.fits("evaluate", deadline.end, 3):
            break
        schedule = o.kernel.expand(name=f"cyclic-k{o.block}-P{o.period}",  # type: ignore[union-attr]
                                   labels=problem.microbatch2pipeline)
        ev = checked(problem, schedule, None)
        evals.append(ev)
        if config.uses("justify") and problem.num_ops <= params.cyclic_justify_max_ops and not schedule.blocks and \
                pace.fits("justify", deadline.end, 1.5):
            graph = precedence_graph(problem, placement)
            better = (justify(problem, placement, ev, graph, config.start.justify_rounds, deadline.end)
                      if graph else None)
            if better is not None:
                evals.append(better)
    return evals


def _info(outcomes: list[BlockOutcome], wall_s: float, mix, pairs: bool) -> CyclicInfo | None:
    """What is proven of the best block per microbatch (ties: smallest); ``mix``: a twin's pipelines."""
    found = [o for o in outcomes if o.period is not None]
    if not found:
        return None
    o = min(found, key=lambda o: (o.rate, o.block))
    return CyclicInfo(block=o.block, period=o.period, period_bound=min(o.bound, o.period),  # type: ignore[arg-type,type-var]
                      wall_s=round(wall_s, 3), why=o.why,
                      blocks=tuple((x.block, x.period, x.bound) for x in outcomes),
                      mix=() if mix is None else tuple(mix[:o.block]), pairs=pairs)
