"""``plan``'s shapes opened on the sweep executors (``pipetab.sweep.executors``: a local
process pool, or Dask with ``--scheduler ADDRESS``): opening a shape bounds every schedule
on it (memory, then a lower bound of the step time from a short run), the most costly part
of a large question, and depends on the shape alone, so shapes can be opened side by side
with the same bounds as in one process.

``opening(space, bounds, shape)`` is that work; ``open_shapes(executor, token, space,
shapes)`` runs it for several shapes on ``executor`` (each worker process keeps one
``Bounds`` per plan, ``token``, so schedules generated for one shape serve the next).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bounds import Bounds

if TYPE_CHECKING:
    from pipetab.hardware.context import Context

    from .space import PlanSpace

# (bound, name, options, priced) of a candidate that may fit (``Bounds.cheap`` when priced, else
# ``Bounds.serial_time``) and (bound, name, options) of one that cannot (memory)
Opening = tuple[list[tuple[float, str, dict, bool]], list[tuple[float, str, dict]]]

_BOUNDS: dict[str, Bounds] = {}  # a worker process's bounds of the plan it works for


def opening(space: PlanSpace, bounds: Bounds, shape: Context, lazy: bool = False) -> Opening:
    """(candidates that may fit, each with a lower bound of its step time priced but not
    simulated, ``Bounds.cheap``; candidates that cannot fit, each with its memory bound) of every
    schedule of ``space`` on ``shape``; a shape whose lightest device cannot hold its
    weights and one activation gives every schedule the shape's memory bound. ``lazy``: a
    schedule without blocks enters unpriced with ``Bounds.serial_time`` (no pricing; the
    search prices it, ``cheap``, only if it is taken out)."""
    cap = space.system.device.usable_memory_bytes
    variants = space.variants()
    need = bounds.shape_memory(shape)
    if need > cap:  # no schedule fits: none is bounded on its own (the shape's bound is theirs)
        return [], [(need, name, opts) for name, opts in variants]
    fits: list[tuple[float, str, dict, bool]] = []
    misfits: list[tuple[float, str, dict]] = []
    for name, opts in variants:
        bound = bounds.memory(name, opts, shape)
        if bound is None:
            continue
        if bound > cap:
            misfits.append((bound, name, opts))
            continue
        short = bounds.short(name, opts, shape.stages, shape.sizes.microbatches)
        if lazy and short is not None and not short.blocks:  # cheap's schedule: memory's, not refused
            fits.append((bounds.serial_time(shape), name, opts, False))
            continue
        cheap = bounds.cheap(name, opts, shape)
        if cheap is not None:
            fits.append((cheap, name, opts, True))
    return fits, misfits


def open_shape(task: tuple[str, PlanSpace, Context]) -> Opening:
    """``opening`` in a worker: ``task`` is (the plan's token, its space, the shape)."""
    token, space, shape = task
    bounds = _BOUNDS.get(token)
    if bounds is None:
        _BOUNDS.clear()
        bounds = _BOUNDS[token] = Bounds(space)
    return opening(space, bounds, shape)


def open_shapes(executor, token: str, space: PlanSpace, shapes: list[Context]) -> list[Opening]:
    """``opening`` of each of ``shapes`` on ``executor`` (entered), in the order given."""
    out: list[Opening | None] = [None] * len(shapes)
    for i, result in executor.run(open_shape, [(token, space, s) for s in shapes]):
        out[i] = result
    return [o for o in out if o is not None]
