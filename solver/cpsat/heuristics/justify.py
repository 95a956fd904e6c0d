"""The problem side of double justification (``solver.justification``): the FIFO precedence
graph of a fixed-placement problem (data edges with transfers, each kind of a stage in
microbatch order, on a one-stage device F(j + k) after release(j) for its k activations)
and a known schedule improved on it, checked by the evaluator (docs/cpsat.md).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from pipetab.schedules.ops import Kind, Op, data_successors
from pipetab.schedules.rewrite import relabel_microbatches
from pipetab.solver.justification import Edge, PrecedenceGraph, double_justify

from ..model.oracle import KnownEval, evaluate_known
from ..model.variables import min_lag

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..problem import Problem


def precedence_graph(problem: Problem, placement: Placement) -> PrecedenceGraph | None:
    """The FIFO precedence graph, or None when a capped device holds several stages (a
    cumulative, not precedences); a split backward's activation counts whole until W (sufficient)."""
    ops = tuple(problem.ops)
    index = {op: i for i, op in enumerate(ops)}
    duration = [problem.duration(op) for op in ops]
    succ: list[list[Edge]] = [[] for _ in ops]
    pred: list[list[Edge]] = [[] for _ in ops]

    def edge(a: int, b: int, lag: int) -> None:
        succ[a].append((b, lag))
        pred[b].append((a, lag))

    for op in ops:
        for nxt in data_successors(op, problem.num_stages[op.pipeline], problem.split_backward):
            edge(index[op], index[nxt], duration[index[op]] + min_lag(problem, placement, op, nxt))
    by_pipe = problem.pipeline_microbatches
    for p, s in problem.stages:
        mbs = by_pipe[p]
        for kind in problem.kinds:
            for a, b in itertools.pairwise(mbs):
                i = index[Op(kind, p, s, a)]
                edge(i, index[Op(kind, p, s, b)], duration[i])
    for d in range(problem.num_devices):
        cap = problem.cap(d)
        held = placement.stages_on(d)
        if cap is None or not held:
            continue
        if len(held) > 1:
            return None
        (p, s), = held
        k = problem.activations_fit(cap, p, s)
        if k is None:
            continue
        if k < 1:
            return None  # not even one activation fits: nothing to justify
        pairs, exact = problem.memory_windows(p, s, cap)
        if not exact:
            # a split backward freeing part at B: hold each whole activation until W,
            # which is sufficient (every result is re-checked by the evaluator)
            mbs = problem.pipeline_microbatches[p]
            pairs = [(Op(Kind.W, p, s, mbs[j]), Op(Kind.F, p, s, mbs[j + k])) for j in range(len(mbs) - k)]
        for release, forward in pairs:
            i = index[release]
            edge(i, index[forward], duration[i])
    device = tuple(placement.device(op.pipeline, op.stage) for op in ops)
    return PrecedenceGraph(ops, problem.num_devices, device, tuple(duration), tuple(map(tuple, succ)),
                           tuple(map(tuple, pred)))


def justify(problem: Problem, placement: Placement, known: KnownEval,
            graph: PrecedenceGraph | None = None, max_rounds: int = 8, until: float | None = None) -> KnownEval | None:
    """``known`` (fitting, timed) improved by double justification and checked by the evaluator;
    None when not strictly faster or memory is no set of precedences."""
    if not known.fits or known.timing is None:
        return None
    graph = graph or precedence_graph(problem, placement)
    if graph is None:
        return None
    _, timing = relabel_microbatches(known.schedule, known.timing)
    starts = double_justify(graph, [round(timing.start[op]) for op in graph.ops], max_rounds, until)
    schedule = problem.schedule_by_starts(f"justified-{known.name}", placement, dict(zip(graph.ops, starts)))
    judged = evaluate_known(problem, schedule)
    if judged.fits and judged.makespan < known.makespan:
        return judged
    return None
