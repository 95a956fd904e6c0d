"""Solver configuration: limits, portfolio and one switch per constraint family.

Every constraint family of the model can be switched off by a config value, so an ablation
is ``config.replace(family=False)``. All families are without loss of generality (each is
argued where it is added, in ``constraints``); the conventions a bound does rest on
(placement, partition, time quantum, memory semantics) are listed in every result's
``bound_assumptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# On 2 cores CP-SAT's default 2-worker portfolio has neither a no-LP worker nor a bound
# worker; reference/cpsat.md §9 measured both to matter (the LP relaxation of this
# disjunctive model is weak). These are the portfolios used when ``subsolvers`` is None.
DEFAULT_PORTFOLIOS: dict[int, tuple[str, ...]] = {
    1: ("no_lp",),
    2: ("no_lp", "objective_lb_search_no_lp"),  # both as full solvers (see model.parameters)
    3: ("no_lp", "objective_lb_search_no_lp", "default_lp"),
}


@dataclass(frozen=True)
class CpSatConfig:
    """How to solve.

    Limits: ``time_limit_s`` (wall clock, whole call), ``deterministic_time`` (CP-SAT's
    deterministic limit per solve, for reproducible tests), ``workers``, ``random_seed``,
    ``log`` (CP-SAT's search log to stdout). ``extra_params``: (name, value) pairs set on
    CP-SAT's ``SatParameters`` as they are.

    Families: ``symmetry_break`` (stage-0 forwards of each pipeline start in microbatch
    order — a relabelling of identical microbatches, safe), ``fifo`` (every stage runs each
    kind of op of a pipeline's microbatches in one order; it implies the symmetry break
    and is *also* without loss of generality — see ``constraints.add_fifo`` for the
    relabelling argument; tests check it against the unrestricted model), ``memory``
    (cumulative activation lifetimes per device; under FIFO, precedences on single-stage
    devices), ``redundant`` (memory pigeonhole chain on stage 0, interval makespan per
    device, total-work cut for free placement), ``hints`` (complete hints from the best
    known or constructed schedule), ``device_symmetry`` (free placement: device
    relabelling for identical devices and uniform links).

    ``subsolvers``: CP-SAT subsolver names; None picks ``DEFAULT_PORTFOLIOS[workers]`` (for
    workers >= 4 CP-SAT's own portfolio, which includes no_lp and bound workers).
    ``decompose``: free placement is solved as one fixed-placement model per canonical
    placement, pruned by bound (reference/cpsat.md §9); False builds one monolithic model.
    ``dominance``: with FIFO, a device holding only a pipeline's last stage runs each B
    right after its F (an exchange argument, see ``constraints.add_last_stage_glue``).
    Phases after an unproven full model (fixed placement), in this order:
    ``upper_phase``: on at most 2 workers with the default portfolio, re-solve the model
    with one full search and CP-SAT's LNS, hinted with the incumbent, restarting a solve
    that stalls with the other search of ``phases.UPPER_SEARCHES`` and the next seed (the
    no-LP pair finds the first schedules and bounds fastest, LNS improves long pipelines
    further). ``relaxation``: prove bounds on relaxations that keep the
    no-overlap and memory constraints of only some devices (both pipeline ends first; any
    relaxation's bound is a bound of the problem). ``tighten``: rebuild the model with a
    horizon at or (once two proofs are timed) ahead of the bound; infeasible proves
    horizon + 1, a schedule found improves the incumbent, until time runs out
    (``phases.tighten_horizon``). Time split: justification at most 10%, then full model
    30% of what remains (without the upper phase: 50% before relaxations, 85% before
    tightening), upper phase half of the rest, relaxations a quarter of what then
    remains, tightening the rest.
    With at least 2 workers, a wall-clock limit, CP-SAT's portfolio left to the config and
    tightening on, the phases after justification use all workers by turns instead
    (``phases.bound_then_search``): the tightening for at most ``bound_share`` of the
    time left, then the upper phase. ``race``: the search and the tightening at once in
    two threads instead, each on half of the workers (``race``); None (default) races
    where a device holds several stages (``modes._races``), True always, False never.
    In ``bound`` mode the tightening runs alone on all workers (``modes.bound``: the
    bound is what is asked for).
    ``tree_proofs``: a tightening probe on at least 2 workers (CP-SAT's portfolio left to
    the config, wall-clock limit) runs CP-SAT's shared tree search on all of them
    (``phases.proof_config``).
    ``order_literals``: fixed placement under FIFO, a literal per pair of ops of two
    chains on a device whose order is open, with staircase implications, replacing the
    device's no-overlap (``constraints.add_order_literals``) when at most
    ``order_literal_limit`` literals are needed.
    ``max_placements``: above this many canonical placements the monolithic model is used.
    ``known_generators``: also judge the registry's matching schedules and greedy list
    schedules as known schedules (hints, horizon, gaps); off for ablations of the solver.
    ``justify``: fixed placement, improve every fitting known schedule by double
    justification (``justify``) for the hint and horizon, within 10% of the time limit.
    """

    time_limit_s: float = 60.0
    workers: int = 2
    deterministic_time: float | None = None
    random_seed: int = 0
    log: bool = False
    symmetry_break: bool = True
    fifo: bool = True
    memory: bool = True
    redundant: bool = True
    hints: bool = True
    dominance: bool = True
    upper_phase: bool = True
    relaxation: bool = True
    tighten: bool = True
    race: bool | None = None
    bound_share: float = 0.55
    tree_proofs: bool = True
    device_symmetry: bool = True
    order_literals: bool = True
    order_literal_limit: int = 60000
    subsolvers: tuple[str, ...] | None = None
    decompose: bool = True
    max_placements: int = 20000
    known_generators: bool = True
    justify: bool = True
    extra_params: tuple[tuple[str, object], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0 seconds, got {self.time_limit_s!r}")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {self.workers!r}")
        if self.deterministic_time is not None and not self.deterministic_time > 0:
            raise ValueError(f"deterministic_time must be > 0, got {self.deterministic_time!r}")
        if not 0 < self.bound_share < 1:
            raise ValueError(f"bound_share must be between 0 and 1 (exclusive), got {self.bound_share!r}")
        if self.subsolvers is not None:
            object.__setattr__(self, "subsolvers", tuple(self.subsolvers))
        object.__setattr__(self, "extra_params", tuple(tuple(kv) for kv in self.extra_params))

    def replace(self, **changes) -> "CpSatConfig":
        return replace(self, **changes)

    def portfolio(self) -> tuple[str, ...] | None:
        """Subsolver names handed to CP-SAT (None: CP-SAT's own choice)."""
        if self.subsolvers is not None:
            return self.subsolvers
        return DEFAULT_PORTFOLIOS.get(self.workers)
