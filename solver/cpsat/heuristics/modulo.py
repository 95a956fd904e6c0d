"""Solver-free first kernels of a block (the cyclic phase's upper bounds and hints; docs/cpsat.md,
"The cyclic model"), memory checked afterwards (``cyclic.check_kernel``): a modulo list
scheduler of one period, and regular kernels (each microbatch's chain at fixed waits).
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import numpy as np

from pipetab.schedules.ops import Kind, Op

from ..model.cyclic import Kernel, check_kernel, template_pipelines
from ..model.variables import min_lag, predecessor

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from ..problem import Problem


def _chain(problem: Problem, p: int, j: int) -> list[Op]:
    """Microbatch j's ops in chain order: forwards down, backwards up, each W after its B."""
    n = problem.num_stages[p]
    out = [Op(Kind.F, p, s, j) for s in range(n)]
    for s in reversed(range(n)):
        out.append(Op(Kind.B, p, s, j))
        if problem.split_backward:
            out.append(Op(Kind.W, p, s, j))
    return out


def modulo_kernel(problem: Problem, placement: Placement, block: int, period: int,
                  until: float | None = None) -> Kernel | None:
    """The list-scheduled kernel of ``block`` at ``period``, or None when an op finds no free
    phases, the kernel breaks the cap, or a microbatch is begun past ``until``."""
    busy = np.zeros((problem.num_devices, period), bool)
    start: dict[Op, int] = {}
    pipes = template_pipelines(problem, block)
    order = sorted((j for mbs in pipes.values() for j in mbs))
    previous: dict[int, int] = {}
    for j in order:
        if until is not None and time.perf_counter() > until:
            return None
        p = problem.microbatch2pipeline[j]
        before = previous.get(p)
        for op in _chain(problem, p, j):
            dur = problem.duration(op)
            if dur > period:
                return None
            pred = predecessor(op, problem.num_stages[p])
            ready = 0 if pred is None else start[pred] + problem.duration(pred) + min_lag(problem, placement, pred, op)
            if before is not None:
                ready = max(ready, start[op._replace(microbatch=before)] + dur)
            d = placement.device(op.pipeline, op.stage)
            at = _first_free(busy[d], ready, dur)
            if at is None:
                return None
            busy[d][(at + np.arange(dur)) % period] = True
            start[op] = at
        previous[p] = j
    kernel = Kernel(problem, placement, block, period, start)
    return kernel if check_kernel(kernel) is None else None


def regular_kernel(problem: Problem, placement: Placement, block: int, lower: int, tries: int = 4,
                   waits: tuple[int, ...] = (0, 1, 2), until: float | None = None, offsets: int = 16
                   ) -> Kernel | None:
    """The regular kernel of least period in ``lower`` .. ``lower + tries - 1``: forward waits
    from ``waits``, turn and backward waits from its first two, template offsets at most
    ``offsets`` points evenly apart; None when none passes ``check_kernel``, two template
    microbatches share a pipeline (FIFO: not regular) or past ``until``."""
    pipes = problem.microbatch2pipeline[:block]
    if len(set(pipes)) != block:
        return None
    for period in range(lower, lower + tries):
        points = range(0, period, -(-period // offsets))
        for wf, wt, wb in itertools.product(waits, waits[:2], waits[:2]):
            chains = [_regular_chain(problem, placement, p, j, (wf, wt, wb)) for j, p in enumerate(pipes)]
            for shift in itertools.product(points, repeat=block - 1):
                if until is not None and time.perf_counter() > until:
                    return None
                start = dict(chains[0])
                for chain, at in zip(chains[1:], shift):
                    start.update((op, t + at) for op, t in chain.items())
                kernel = Kernel(problem, placement, block, period, start)
                if check_kernel(kernel) is None:
                    return kernel
    return None


def _regular_chain(problem: Problem, placement: Placement, p: int, j: int, waits: tuple[int, int, int]
                   ) -> dict[Op, int]:
    """Microbatch j's op starts from 0, each op ``waits`` (forward, turn, backward) after its input."""
    wf, wt, wb = waits
    start: dict[Op, int] = {}
    for op in _chain(problem, p, j):
        pred = predecessor(op, problem.num_stages[p])
        if pred is None:
            start[op] = 0
            continue
        wait = wf if op.kind is Kind.F else 0 if op.kind is Kind.W else wt if pred.kind is Kind.F else wb
        start[op] = start[pred] + problem.duration(pred) + min_lag(problem, placement, pred, op) + wait
    return start


def _first_free(busy: np.ndarray, ready: int, dur: int) -> int | None:
    """The earliest x >= ready (within a period) with phases x .. x + dur - 1 free, or None."""
    P = len(busy)
    taken = np.roll(np.concatenate([busy, busy]), -(ready % P))[:P + dur - 1]
    count = np.concatenate([[0], np.cumsum(taken)])  # busy phases before each offset
    hits = np.flatnonzero(count[dur:dur + P] == count[:P])  # no busy phase in [x, x + dur)
    return None if not hits.size else ready + int(hits[0])


def first_modulo_kernel(problem: Problem, placement: Placement, block: int, lower: int,
                        steps: tuple[float, ...] = (1.1, 1.25, 1.5, 2.0), tries: int = 6,
                        until: float | None = None) -> Kernel | None:
    """The kernel of least period the list scheduler reaches in ``lower`` .. ``lower + tries -
    1`` and ``lower`` times each of ``steps`` (None if none before ``until``)."""
    periods = sorted({lower + i for i in range(tries)} | {-(-int(lower * 1000 * f) // 1000) for f in steps})
    for period in periods:
        kernel = modulo_kernel(problem, placement, block, period, until)
        if kernel is not None:
            return kernel
    return None
