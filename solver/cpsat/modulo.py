"""A list scheduler of one period (modulo scheduling, as compilers pipeline loops): the
template's ops in chain order, each at the earliest time after its input (and, FIFO,
after the same op of the pipeline's previous template microbatch) whose phases modulo the
period are free on its device. Solver-free and quick: the cyclic phase's first kernel of a
block where no known schedule gives one (``steady.block_period``); memory is only checked
afterwards (``cyclic.check_kernel``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pipetab.schedules.ops import Kind, Op

from .cyclic import Kernel, check_kernel, template_pipelines
from .variables import min_lag, predecessor

if TYPE_CHECKING:
    from pipetab.schedules.schedule import Placement

    from .problem import Problem


def _chain(problem: Problem, p: int, j: int) -> list[Op]:
    """Microbatch j's ops in chain order: forwards down, backwards up, each W right after
    its B."""
    n = problem.num_stages[p]
    out = [Op(Kind.F, p, s, j) for s in range(n)]
    for s in reversed(range(n)):
        out.append(Op(Kind.B, p, s, j))
        if problem.split_backward:
            out.append(Op(Kind.W, p, s, j))
    return out


def modulo_kernel(problem: Problem, placement: Placement, block: int, period: int) -> Kernel | None:
    """The list-scheduled kernel of ``block`` microbatches at ``period`` (module
    docstring), or None when an op finds no free phases or the kernel breaks the memory
    cap."""
    busy = np.zeros((problem.num_devices, period), bool)
    start: dict[Op, int] = {}
    pipes = template_pipelines(problem, block)
    order = sorted((j for mbs in pipes.values() for j in mbs))
    previous: dict[int, int] = {}
    for j in order:
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


def _first_free(busy: np.ndarray, ready: int, dur: int) -> int | None:
    """The earliest x >= ready (within one period of it) with phases x .. x + dur - 1
    free, or None."""
    P = len(busy)
    taken = np.roll(np.concatenate([busy, busy]), -(ready % P))[:P + dur - 1]
    count = np.concatenate([[0], np.cumsum(taken)])  # busy phases before each offset
    hits = np.flatnonzero(count[dur:dur + P] == count[:P])  # no busy phase in [x, x + dur)
    return None if not hits.size else ready + int(hits[0])


def first_modulo_kernel(problem: Problem, placement: Placement, block: int, lower: int,
                        steps: tuple[float, ...] = (1.1, 1.25, 1.5, 2.0), tries: int = 6) -> Kernel | None:
    """The kernel of the least period the list scheduler reaches among ``lower`` ..
    ``lower + tries - 1`` and ``lower`` times each of ``steps`` (None if none)."""
    periods = sorted({lower + i for i in range(tries)} | {-(-int(lower * 1000 * f) // 1000) for f in steps})
    for period in periods:
        kernel = modulo_kernel(problem, placement, block, period)
        if kernel is not None:
            return kernel
    return None
