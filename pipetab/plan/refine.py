"""What ``plan`` tries on its best configurations after the search: uneven layouts and
per-stage recomputation.

* Layouts (``layouts``): from the even split, one layer moved off the first stage, off the
  last, off both (Llama 3 405B's run: one fewer on the first and the last stage) and two
  off the last, each to the middle stage holding the fewest; the embedding and the LM head
  make the end stages heavier, so their devices set the pace.
* Per-stage recomputation (``recompute_layers``): on a one-pipeline schedule with one stage
  per device, a configuration that recomputes every layer in full is tried recomputing,
  instead, the first ``r_d`` layers of each stage (Megatron's ``--recompute-method block
  --recompute-num-layers``, per stage as AdaPipe chooses them): the least ``r_d`` whose
  saving, ``r_d`` layers' activation less what full recomputation keeps, times the
  stage's activations in flight at its peak, covers the device's excess without any
  recomputation; the later stages of 1F1B hold fewer microbatches and recompute fewer.

Each refined configuration is run like any candidate (``Bounds.run``) and ranked with the
rest; ``REFINED`` best configurations are refined.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pipetab.hardware.context import Recompute
from pipetab.hardware.layout import Layout

if TYPE_CHECKING:
    from pipetab.hardware.context import Context

    from .bounds import Bounds
    from .result import Configuration
    from .space import PlanSpace

REFINED = 3  # best configurations whose layout and recomputation plan refines


def _moved(counts: list[int], src: int) -> list[int] | None:
    """``counts`` with one layer moved from stage ``src`` to the middle stage holding the
    fewest (to the other stage with two stages); None when ``src`` has none."""
    if counts[src] == 0:
        return None
    out = list(counts)
    middle = [i for i in range(1, len(out) - 1)] or [1 - src]
    centre = (len(out) - 1) / 2
    dst = min(middle, key=lambda i: (out[i], abs(i - centre), i))
    out[src] -= 1
    out[dst] += 1
    return out


def layouts(counts: tuple[int, ...], mtp: int = 0) -> list[Layout]:
    """The uneven layouts tried from the even split ``counts`` (module docstring)."""
    last = len(counts) - 1
    tries = [_moved(list(counts), 0), _moved(list(counts), last)]
    if tries[0] is not None:
        tries.append(_moved(tries[0], last))
    if tries[1] is not None:
        tries.append(_moved(tries[1], last))
    out: list[Layout] = []
    for t in tries:
        if t is not None and tuple(t) != counts and (layout := Layout.of_layers(t, mtp)) not in out:
            out.append(layout)
    return out


def recompute_layers(name: str, opts: dict, base: Context, layers: tuple[int, ...],
                     bounds: Bounds) -> tuple[int, ...] | None:
    """Layers per stage to recompute so that schedule ``name`` on ``base`` (no
    recomputation; one stage per device, one pipeline, ``layers`` per stage) fits (module
    docstring); None when it fits already or the rule does not apply."""
    run = bounds.run(name, opts, base)
    full = bounds.run(name, opts, base.replace(recompute=Recompute.FULL))
    if run is None or full is None:
        return None
    sched, costs = run.schedule, run.costs
    if sched.num_pipelines != 1 or sched.num_stages(0) != sched.num_devices or len(layers) != sched.num_devices:
        return None
    out = []
    for s in range(sched.num_devices):
        d = sched.placement.device(0, s)
        excess = costs.persistent[d] + run.peaks[d] - (costs.capacity[d] or math.inf)
        size, small = costs.activation[(0, s)], full.costs.activation[(0, s)]
        if excess <= 0 or layers[s] == 0:
            out.append(0)
            continue
        per_layer = (size - small) / layers[s] * (run.peaks[d] / size if size else 0.0)
        out.append(min(layers[s], math.ceil(excess / per_layer)) if per_layer > 0 else layers[s])
    return tuple(out) if any(out) and out != list(layers) else None  # none, or all: nothing new


def refine(space: PlanSpace, bounds: Bounds, ranked: list[Configuration], evaluate) -> list[Configuration]:
    """Refined configurations of the ``REFINED`` best distinct candidates (module
    docstring); ``evaluate(name, opts, shape)`` runs one (None when it does not fit)."""
    out: list[Configuration] = []
    seen: set = set()
    for conf in [c for c in ranked if c.source == "registry" and c.fits][:REFINED]:
        if conf.shape.pp == 1 or not conf.layout or (conf.label, conf.shape) in seen:
            continue
        seen.add((conf.label, conf.shape))
        opts = dict(conf.options)
        for layout in layouts(conf.layers_per_stage, space.model.mtp_layers):
            found = evaluate(conf.schedule, opts, conf.shape.replace(layout=layout))
            out += [found] if found is not None else []
        if conf.shape.recompute is Recompute.FULL:
            base = conf.shape.replace(recompute=Recompute.NONE)
            if (r := recompute_layers(conf.schedule, opts, base, conf.layers_per_stage, bounds)) is not None:
                found = evaluate(conf.schedule, opts, base.replace(recompute_layers=r))
                out += [found] if found is not None else []
    return out
