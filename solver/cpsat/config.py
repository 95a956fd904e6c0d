"""How to solve: limits, stop rules, seeds, and the model families an ablation may switch
off. The strategy itself (``strategy``) has no switches; ``docs/cpsat.md`` describes it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# On 2 cores CP-SAT's default 2-worker portfolio has neither a no-LP worker nor a bound
# worker; both matter for this disjunctive model (reference/cpsat.md §9). These are the
# portfolios used when ``subsolvers`` is None (>= 4 workers: CP-SAT's own).
DEFAULT_PORTFOLIOS: dict[int, tuple[str, ...]] = {
    1: ("no_lp",),
    2: ("no_lp", "objective_lb_search_no_lp"),
    3: ("no_lp", "objective_lb_search_no_lp", "default_lp"),
}

# Model families an ablation can switch off (``CpSatConfig.ablate``). Each is without loss
# of generality (argued where ``constraints`` adds it); none is needed for correctness.
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
)


@dataclass(frozen=True)
class MaxRuntime:
    """Stop once ``seconds`` of wall-clock time have passed."""

    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"MaxRuntime seconds must be > 0, got {self.seconds!r}")

    def __call__(self, elapsed_s: float, since_improvement_s: float, gap: float | None) -> bool:
        return elapsed_s >= self.seconds


@dataclass(frozen=True)
class NoImprovement:
    """Stop once neither the best schedule nor the bound has improved for ``seconds``."""

    seconds: float

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError(f"NoImprovement seconds must be > 0, got {self.seconds!r}")

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


@dataclass(frozen=True)
class CpSatConfig:
    """How to solve.

    ``time_limit_s``: wall clock of the whole call, model building included (results come
    back within it, with the best schedule and bound so far). ``stop``: further stop rules
    (``MaxRuntime``, ``NoImprovement``, ``GapBelow``); the search stops at the first that
    holds. ``deterministic_time``: CP-SAT deterministic seconds shared by the phases
    instead of wall-clock shares (reproducible tests; the wall-clock limit still holds).
    ``workers``, ``random_seed``, ``log`` (CP-SAT's log to stdout).

    ``known_generators``: also try the registry's schedules of the problem's shape as
    starting schedules and judge them (their gaps in ``Result.known``); the model's own
    greedy list schedules are always tried. ``bound_share``: the share of the time left
    after the start that the bound phase may use before the search phase
    (``strategy``). ``ablate``: model families to switch off (``FAMILIES_OFF``).
    ``subsolvers`` / ``extra_params``: CP-SAT's portfolio and raw ``SatParameters``
    (None: ``DEFAULT_PORTFOLIOS``)."""

    time_limit_s: float = 60.0
    workers: int = 2
    deterministic_time: float | None = None
    random_seed: int = 0
    log: bool = False
    stop: tuple[StopRule, ...] = ()
    known_generators: bool = True
    bound_share: float = 0.55
    ablate: frozenset[str] = frozenset()
    subsolvers: tuple[str, ...] | None = None
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
        """Whether the model family ``family`` (one of ``FAMILIES_OFF``) is on."""
        return family not in self.ablate

    def stop_rules(self) -> tuple[StopRule, ...]:
        return (MaxRuntime(self.time_limit_s),) + self.stop

    def portfolio(self) -> tuple[str, ...] | None:
        """Subsolver names handed to CP-SAT (None: CP-SAT's own choice)."""
        if self.subsolvers is not None:
            return self.subsolvers
        return DEFAULT_PORTFOLIOS.get(self.workers)
