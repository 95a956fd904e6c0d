"""``plan``: the best pipeline schedule for a model on a cluster, ranked by simulated step time.

The space: every split of the cluster's GPUs into pipeline x tensor x data parallel degrees
(tensor-parallel groups inside a node, dividing the model's heads), microbatch sizes that
divide the global batch, recomputation options, and every registry schedule (with the
variants in ``VARIANTS``) that accepts the shape. Each candidate is judged by the level-3
simulation (``hardware_costs`` + ``simulate``) and ranked by step time among those that fit
the GPU memory; the configurations shown are evaluated at all levels (``evaluate_levels``,
which validates their tables). CP-SAT then searches the linear placement of the best shapes
under the memory cap (``pipetab.solver.cpsat.search``) and adds what it finds.

Pruning, exact for the ranking shown:

* memory: a lower bound per candidate — the exact persistent memory of each device plus its
  peak activation count on an instance of at most ``4 * pp`` microbatches (the peak only
  grows with more microbatches; tested) times one layer's activation — drops candidates that
  cannot fit before anything is simulated; the memory of a candidate's full instance, exact
  from its per-device orders, is checked before it is simulated;
* time: a candidate's step is at least the simulated step of its instance of at most
  ``4 * pp`` microbatches plus, for each further microbatch, the average work of a device
  per microbatch (every registry generator repeats a steady pattern per microbatch, so a
  longer run adds at least that; tested); candidates are simulated in the order of this
  bound, and simulation stops once the bound exceeds the ``top``-th best step time that
  fits.

What it leaves out (``docs/cluster.md``): context and expert parallelism, interleaved or V
placements searched by CP-SAT, uneven layer splits, overlap of tensor-parallel
communication, and pipeline degree 1 (no schedule to choose).
"""

from .bounds import order_peaks, small_microbatches
from .cpsat import cpsat_search
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
