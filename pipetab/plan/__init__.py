"""``plan``: the best pipeline schedule for a model on a cluster, ranked by simulated step time.

The space: every split of the cluster's GPUs into pipeline x tensor x context x data
parallel degrees (PP = 1 included; tensor-parallel groups inside a node, dividing the
model's heads; context parallelism for long sequences; ``--pp/--tp/--cp/--dp/--ep`` pin a
dimension), ZeRO 1 and 3 with replicas, microbatch sizes that divide the global batch,
recomputation options, and every registry schedule (with the variants in ``VARIANTS``) that
accepts the shape. Each candidate is judged by the level-3 simulation (``hardware_costs`` +
``simulate``; a long run from a few of its periods, ``periodic``) and ranked by step time
among those that fit the GPU memory; the configurations shown are evaluated at all levels
(``evaluate_levels``, which validates their tables). The best are then tried with uneven
layouts and per-stage recomputation (``refine``), and CP-SAT searches the linear placement
of the best shapes under the memory cap (``pipetab.solver.cpsat.search``) and adds what it
finds. ``Plan.notes`` names what was not considered and why.

Pruning, exact for the ranking shown:

* a shape first enters with a bound of every schedule on it (``Bounds.shape_time``: the
  whole model's forward and backward per microbatch spread over the devices, or one
  microbatch's chain, whichever is longer); a shape whose lightest device cannot hold its
  weights and one activation is dropped whole (``Bounds.shape_memory``);
* memory: a lower bound per candidate — the exact persistent memory of each device plus its
  peak activation count on a short instance (the peak only grows with more microbatches;
  tested) times one layer's activation — drops candidates that cannot fit before anything
  is simulated; the memory of a candidate's run, exact from its per-device orders, is
  checked before it is ranked;
* time: a candidate enters with a bound of its step from its op times, priced but not
  simulated (``Bounds.cheap``; a schedule without blocks enters unpriced with its shape's
  bound counting the expert all-to-alls, ``Bounds.serial_time``, and is priced when first
  taken out), is re-entered with the bound of a short run (``Bounds.quick``; an offloading
  candidate first with its copy streams', ``Bounds.copy_time``) and then with its exact
  step time (``Bounds.run``) each time it reaches the top of the queue; the search stops
  once the next bound reaches the ``top``-th best step time that fits.

What it leaves out (``docs/cluster.md``): interleaved or V placements searched by CP-SAT,
layouts beyond the few ``refine`` tries, overlap of tensor-parallel communication.
"""

from .bounds import small_microbatches
from .cpsat import cpsat_search
from .periodic import order_peaks
from .result import Configuration, Plan
from .search import plan, plan_profiled
from .space import (
    GPUS,
    MAX_TOKENS_PER_MICROBATCH,
    VARIANTS,
    PlanSpace,
    cluster,
    plan_question,
    schedule_label,
    shape,
    shapes,
)

__all__ = [
    "GPUS", "MAX_TOKENS_PER_MICROBATCH", "VARIANTS", "Configuration", "Plan", "PlanSpace",
    "cluster", "cpsat_search", "order_peaks", "plan", "plan_profiled", "plan_question",
    "schedule_label", "shape", "shapes", "small_microbatches",
]
