"""How to solve: limits, stop rules, seeds, the names an ablation may switch off, and every
phase's tuned numbers as dataclass defaults (docs/cpsat.md gives the measurement behind
each); ``CpSatConfig.from_toml`` reads them (top-level keys and one table per part). The
time limit becomes one ``Deadline`` (``CpSatConfig.deadline``) at the public entry.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pipetab.solver.deadline import Deadline

# without subsolvers given (>= 4 workers: CP-SAT's own); on 2 cores CP-SAT's default has
# neither a no-LP nor a bound worker, and both matter here (reference/cpsat.md §9)
DEFAULT_PORTFOLIOS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, ("no_lp",)),
    (2, ("no_lp", "objective_lb_search_no_lp")),
    (3, ("no_lp", "objective_lb_search_no_lp", "default_lp")),
)

# what ``CpSatConfig.ablate`` can switch off: the switchable families of ``families.FAMILIES``
# and three steps of the strategy, each without loss of generality
FAMILIES_OFF = (
    "fifo",             # every stage runs each kind of op in microbatch order
    "symmetry_break",   # stage-0 forwards in microbatch order (implied by fifo)
    "dominance",        # last stage: B right after its F (unsplit backward)
    "order_literals",   # one-stage devices: pairwise order literals instead of no-overlap
    "redundant",        # memory chain, interval makespan, total-work cut
    "device_symmetry",  # free placement: identical devices relabelled
    "hints",            # complete hints from the incumbent
    "justify",          # double justification of the starting schedules
    "decompose",        # free placement: one fixed-placement search per canonical placement
    "cyclic",           # the cyclic phase: periodic schedules as starts (phases.cyclic)
)


# ---- stop rules: (elapsed s, s since the last improvement, gap or None) -> stop? ----------
@dataclass(frozen=True)
class _Seconds:
    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"{type(self).__name__} seconds must be > 0, got {self.seconds!r}")


@dataclass(frozen=True)
class MaxRuntime(_Seconds):
    """Stop once ``seconds`` of wall-clock time have passed."""

    def __call__(self, elapsed_s: float, since_improvement_s: float, gap: float | None) -> bool:
        return elapsed_s >= self.seconds


@dataclass(frozen=True)
class NoImprovement(_Seconds):
    """Stop once neither the best schedule nor the bound has improved for ``seconds``."""

    def __call__(self, elapsed_s: float, since_improvement_s: float, gap: float | None) -> bool:
        return since_improvement_s >= self.seconds


@dataclass(frozen=True)
class GapBelow:
    """Stop once the gap (makespan - bound) / makespan is at most ``gap``."""

    gap: float

    def __post_init__(self) -> None:
        if not 0 <= self.gap < 1:
            raise ValueError(f"GapBelow gap must be in [0, 1), got {self.gap!r}")

    def __call__(self, elapsed_s: float, since_improvement_s: float, gap: float | None) -> bool:
        return gap is not None and gap <= self.gap


StopRule = MaxRuntime | NoImprovement | GapBelow


# ---- the phases' tuned numbers ---------------------------------------------------------------
@dataclass(frozen=True)
class ModelParams:
    """One model: order literals replace a one-stage device's no-overlap up to
    ``order_literal_limit``; presolve probing for ``probing_det_limit`` deterministic s;
    ``portfolios``: subsolvers per worker count; the sweep bound up to ``sweep_max_cells``
    microbatch-stages (0.7 s at 524,288); at most ``pair_limit`` pair candidates (more: cut, a
    stated restriction); the activation-area bound only up to ``area_max_ticks`` of windows."""

    order_literal_limit: int = 60000
    pair_limit: int = 3000
    probing_det_limit: float = 0.1
    sweep_max_cells: int = 2_000_000
    area_max_ticks: int = 1_000_000
    portfolios: tuple[tuple[int, tuple[str, ...]], ...] = DEFAULT_PORTFOLIOS


# least-slack list schedules: (multiple of the microbatch spacing, scale of the per-stage
# warm-up depths or None), in the order tried
SLACK_STARTS = ((1, None), (2 / 3, None), (4 / 3, None), (1 / 2, None), (4 / 3, 1.0), (1, 1.0), (5 / 3, 1.0),
                (7 / 6, 1.1), (4 / 3, 1.1), (5 / 3, 1.1), (1 / 2, 1.1), (4 / 3, 1.25), (7 / 6, 1.5))


@dataclass(frozen=True)
class StartParams:
    """The start phase: it stops after ``share`` of the time once a schedule fits; ``costs``
    of its steps in evaluations; a model is built only while ``builds_left`` builds fit; above
    ``time_unfit_ops`` ops a schedule over the cap is not timed; ``probe`` (devices,
    microbatches) tells a generator's shape; full-size generation time extrapolated from
    ``time_probe_cells``; a slow generator only up to ``slow_generator_cells`` devices^2 x
    microbatches (V-Half: 0.3 s at 8 x 8 x 32, 5-10 s at 32 x 32 x 32)."""

    share: float = 0.3
    costs: tuple[tuple[str, float], ...] = (("evaluate", 1.0), ("greedy", 10.0), ("justify", 40.0), ("build", 60.0))
    builds_left: float = 2.5
    time_unfit_ops: int = 20000
    slack_starts: tuple[tuple[float, float | None], ...] = SLACK_STARTS
    probe: tuple[int, int] = (4, 8)
    justify_rounds: int = 8
    time_probe_cells: tuple[int, int] = (1024, 8192)
    slow_generator_cells: int = 2048

    def cost(self, step: str) -> float:
        return dict(self.costs)[step]


@dataclass(frozen=True)
class StrategyParams:
    """A fixed placement's search: the bound phase's share of the time after the start
    (``shared_capped_bound_share`` for several stages per device under a binding cap); a
    solve restarts with the next of ``searches`` after ``stall_share`` of the phase (at least
    ``stall_min_s``) without progress; ``growth_clamp`` of proof time per step; deterministic s
    per op of a build; ``safety_share`` (at most ``safety_max_s``) kept back. The cyclic phase
    gets ``cyclic_share`` below ``cyclic_all_ops`` ops where the full model fits, all the time
    otherwise (on issue 28's real-size set the full model improved nothing of that size), and
    from ``cyclic_only_ops`` no full model follows (a 393,216-op build ran 9 s past its limit).
    LP searches only up to ``lp_max_ops`` (``default_lp`` spent 41 s loading a 16,384-op V model).
    With overlapped pairs the cyclic phase gets ``cyclic_pairs_share``, else the all-alone search ``alone_share``.
    With the cyclic phase taking all, the start gives up after ``cyclic_start_share`` while none
    fits (Llama 3 70B, S=64, B=1024, 5 s: the list schedules used it all and found none).
    Within ``near_gap`` of the bound a first probe and the mirror solve get ``near_share`` (issue 45)."""

    bound_share: float = 0.55
    near_gap: float = 0.02
    near_share: float = 0.25
    shared_capped_bound_share: float = 0.2
    stall_share: float = 0.4
    stall_min_s: float = 2.0
    mirror_share: float = 0.5
    searches: tuple[tuple[str, ...], ...] = (("no_lp",), ("default_lp",))
    growth_clamp: tuple[float, float] = (2.0, 4.0)
    build_det_per_op: float = 2e-6
    safety_share: float = 0.05
    safety_max_s: float = 1.0
    cyclic_share: float = 0.15
    cyclic_pairs_share: float = 0.5
    cyclic_start_share: float = 0.5
    cyclic_all_ops: int = 16_384
    cyclic_only_ops: int = 65_536
    lp_max_ops: int = 8000
    alone_share: float = 0.3


@dataclass(frozen=True)
class DecomposeParams:
    """Free placement (one model with placement literals above ``max_placements``, up to
    ``free_model_max_intervals`` op-device intervals: 524,288 took 0.8 GB); the free partition
    (candidates and nodes per candidate, shares for the even split, the enumeration and the
    ``least_splits`` search on ``least_workers`` threads whatever ``workers`` says, the least
    slice of a split); the cyclic phase (from ``cyclic_min_ratio`` microbatches per device and,
    where the full model fits, ``cyclic_min_ops`` ops; ``max_blocks_tried`` blocks of at most
    ``max_block`` times the pattern and ``max_template_ops`` ops; the period probe, the
    makespan solve and each block but the last on their ``*_share`` of what is left; the best
    ``cyclic_expansions`` kernels expanded; ``cyclic_seeds`` starts' steady states as seeds;
    steady blocks up to ``cyclic_steady_factor`` times a kernel's; the modulo list scheduler
    tries ``modulo_tries`` periods up from the bound and each of ``modulo_steps`` on templates up
    to ``modulo_max_ops``; expansions up to ``cyclic_justify_max_ops`` justified: the precedence
    graph of 524,288 took 16 s)."""

    max_placements: int = 20000
    free_model_max_intervals: int = 1_000_000
    max_candidates: int = 50_000
    nodes_per_candidate: int = 20
    first_share: float = 0.25
    enumeration_share: float = 0.2
    least_splits: int = 8
    least_share: float = 0.15
    least_workers: int = 2
    min_slice_s: float = 0.5
    cyclic_min_ratio: float = 4.0
    cyclic_min_ops: int = 4000
    max_block: int = 32
    max_blocks_tried: int = 4
    max_template_ops: int = 20_000
    cyclic_probe_share: float = 0.5
    cyclic_makespan_share: float = 0.5
    cyclic_block_share: float = 0.5
    cyclic_expansions: int = 2
    cyclic_seeds: int = 3
    cyclic_steady_factor: int = 16
    modulo_tries: int = 6
    modulo_max_ops: int = 2000
    cyclic_justify_max_ops: int = 100_000
    modulo_steps: tuple[float, ...] = (1.1, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class SecondsParams:
    """``solve_seconds``: the search (durations rounded up) gets ``search_share`` of the time,
    the bound the rest; the first tick is 1/``ticks_per_op`` of the shortest op, refined at most
    ``refinements`` times until rounding moves a reference schedule by at most ``max_rounding``;
    the time of ``answer_simulations`` simulations (plus one per known schedule) is kept back,
    leaving the solves at least ``least_work_share``."""

    search_share: float = 0.75
    ticks_per_op: int = 20
    max_rounding: float = 0.005
    refinements: int = 3
    answer_simulations: int = 8
    least_work_share: float = 0.5


_PARTS = {"model": ModelParams, "start": StartParams, "strategy": StrategyParams, "decompose": DecomposeParams,
          "seconds": SecondsParams}


@dataclass(frozen=True)
class CpSatConfig:
    """How to solve. ``time_limit_s``: wall clock of the whole call, model building included;
    ``stop``: further stop rules (the first that holds stops); ``deterministic_time``: CP-SAT
    deterministic seconds shared by the phases instead of wall-clock shares (the wall limit
    still holds); ``known_generators``: also judge the registry's schedules of the shape (gaps
    in ``Result.known``); ``ablate``: names from ``FAMILIES_OFF``; ``subsolvers`` /
    ``extra_params``: CP-SAT's portfolio and raw ``SatParameters`` (None:
    ``ModelParams.portfolios``); ``model`` ... ``seconds``: the phases' numbers
    (``bound_share`` given here sets ``strategy.bound_share``)."""

    time_limit_s: float = 60.0
    workers: int = 2
    deterministic_time: float | None = None
    random_seed: int = 0
    log: bool = False
    stop: tuple[StopRule, ...] = ()
    known_generators: bool = True
    bound_share: float | None = None
    ablate: frozenset[str] = frozenset()
    subsolvers: tuple[str, ...] | None = None
    extra_params: tuple[tuple[str, object], ...] = field(default=())
    model: ModelParams = ModelParams()
    start: StartParams = StartParams()
    strategy: StrategyParams = StrategyParams()
    decompose: DecomposeParams = DecomposeParams()
    seconds: SecondsParams = SecondsParams()

    def __post_init__(self) -> None:
        if not (isinstance(self.time_limit_s, (int, float)) and math.isfinite(self.time_limit_s)
                and self.time_limit_s > 0):
            raise ValueError(f"time_limit_s must be a finite number of seconds > 0, got {self.time_limit_s!r}")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {self.workers!r}")
        if self.deterministic_time is not None and not self.deterministic_time > 0:
            raise ValueError(f"deterministic_time must be > 0, got {self.deterministic_time!r}")
        if self.bound_share is not None:
            if not 0 < self.bound_share < 1:
                raise ValueError(f"bound_share must be between 0 and 1 (exclusive), got {self.bound_share!r}")
            object.__setattr__(self, "strategy", replace(self.strategy, bound_share=self.bound_share))
        object.__setattr__(self, "stop", tuple(self.stop))
        for rule in self.stop:
            if not isinstance(rule, (MaxRuntime, NoImprovement, GapBelow)):
                raise ValueError(f"stop rules must be MaxRuntime, NoImprovement or GapBelow, got {rule!r}")
        object.__setattr__(self, "ablate", frozenset(self.ablate))
        unknown = sorted(self.ablate - set(FAMILIES_OFF))
        if unknown:
            raise ValueError(f"ablate names unknown families {unknown}; allowed: {', '.join(FAMILIES_OFF)}")
        if self.subsolvers is not None:
            object.__setattr__(self, "subsolvers", tuple(self.subsolvers))
        object.__setattr__(self, "extra_params", tuple(tuple(kv) for kv in self.extra_params))

    def replace(self, **changes) -> "CpSatConfig":
        return replace(self, **changes)

    def uses(self, family: str) -> bool:
        """Whether ``family`` (one of ``FAMILIES_OFF``) is on."""
        return family not in self.ablate

    def stop_rules(self) -> tuple[StopRule, ...]:
        return (MaxRuntime(self.time_limit_s), *self.stop)

    def deadline(self, t0: float | None = None) -> Deadline:
        """The one ``Deadline`` of a call with this config, beginning now (or at ``t0``)."""
        s = self.strategy
        return Deadline.start(self.time_limit_s, self.deterministic_time, safety_share=s.safety_share,
                              safety_max_s=s.safety_max_s, build_det_per_op=s.build_det_per_op, t0=t0)

    def portfolio(self) -> tuple[str, ...] | None:
        """Subsolver names handed to CP-SAT (None: CP-SAT's own choice)."""
        if self.subsolvers is not None:
            return self.subsolvers
        return dict(self.model.portfolios).get(self.workers)

    @classmethod
    def from_toml(cls, path: str | Path, **overrides: Any) -> "CpSatConfig":
        """A config from a TOML file, ``overrides`` on top; ``ValueError`` naming an unknown key."""
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        return cls.from_dict({**doc, **overrides})

    @classmethod
    def from_dict(cls, doc: dict) -> "CpSatConfig":
        kw: dict[str, Any] = {}
        top = {f.name for f in fields(cls)}
        for key, value in doc.items():
            if key in _PARTS:
                part = _PARTS[key]
                known = {f.name for f in fields(part)}
                if not isinstance(value, dict) or not set(value) <= known:
                    bad = sorted(set(value) - known) if isinstance(value, dict) else value
                    raise ValueError(f"[{key}] takes {', '.join(sorted(known))}; got {bad!r}")
                kw[key] = part(**{k: _plain(v) for k, v in value.items()})
            elif key in top:
                kw[key] = _plain(value)
            else:
                raise ValueError(f"unknown CP-SAT setting {key!r}; allowed: {', '.join(sorted(top))}")
        return cls(**kw)


def _plain(value: Any) -> Any:
    """TOML lists as the tuples the dataclasses hold."""
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    return value
