"""Overlapped forward-backward pairs chosen by the CP-SAT model (``Problem.overlap_pairs``;
docs/cpsat.md, "Overlapped pairs", gives the candidate argument): one literal per candidate
pair, the pair then one block of ``Costs.block_time`` on the device's no-overlap. Above the
limit only candidates near the incumbent's pairs are kept, a restriction whose bounds and
proofs are dropped; blocks with a W are no candidates (bounds hold over F-B blocks only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from pipetab.schedules.ops import Kind, Op

from ..problem import _int
from .variables import PairCandidates, Variables

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from pipetab.schedules.schedule import Placement, Schedule

    from ..problem import Problem

StageKey = tuple[int, int]


def block_ticks(problem: Problem, placement: Placement) -> dict[tuple[StageKey, StageKey], int]:
    """Per (forward stage, backward stage) on one device whose block is shorter than its ops in
    turn: its integer time. ``ValueError`` where a block would end before one of its ops alone
    (the model takes each op's time as the least it lasts)."""
    out = {}
    for d in range(problem.num_devices):
        held = placement.stages_on(d)
        for pf, sf in held:
            for pb, sb in held:
                f, b = Op(Kind.F, pf, sf, 0), Op(Kind.B, pb, sb, 1)
                t = _int(problem.costs.block_time((f, b)), f"block {f}&{b}")
                df, db = problem.duration(f), problem.duration(b)
                if t < max(df, db):
                    raise ValueError(f"the costs give block {f}&{b} {t} ticks, less than one of its ops alone "
                                     f"({df}, {db}): overlapped pairs need each op's chain to take its op time")
                if t < df + db:
                    out[((pf, sf), (pb, sb))] = t
    return out


def _widest(problem: Problem, placement: Placement, f: StageKey, b: StageKey) -> int:
    """The largest microbatch distance a pair of these stages can have (module docstring)."""
    n = problem.pipeline_counts[f[0]]
    if f[0] != b[0]:
        return max(n, problem.pipeline_counts[b[0]]) - 1
    u = min(f[1], b[1])
    fit = problem.activations_fit(problem.cap(placement.device(f[0], u)), f[0], u)
    return n - 1 if fit is None else max(0, min(n - 1, fit - 1))


def _rank_pairs(f: StageKey, b: StageKey, nf: int, nb: int, window: int) -> Iterable[tuple[int, int]]:
    """(forward rank, backward rank) of the candidates within ``window``."""
    if f[0] == b[0]:
        return ((a, a - o) for o in range(1, window + 1) for a in range(o, nf))
    return ((a, c) for a in range(nf) for c in range(max(0, a - window), min(nb, a + window + 1)))


def pair_candidates(problem: Problem, placement: Placement, limit: int,
                    around: Schedule | None = None) -> PairCandidates | None:
    """The candidate pairs (module docstring); None when no pair gains. Above ``limit``, only
    those within one microbatch of a distance ``around``'s pairs use on the same stages, or at
    most 2 (``restricted``)."""
    ticks = block_ticks(problem, placement)
    if not ticks:
        return None
    mbs = problem.pipeline_microbatches
    rank = {m: i for ms in mbs.values() for i, m in enumerate(ms)}
    widest = {k: _widest(problem, placement, *k) for k in ticks}
    full = sum(sum(1 for _ in _rank_pairs(f, b, len(mbs[f[0]]), len(mbs[b[0]]), widest[(f, b)])) for f, b in ticks)
    near: dict[tuple[StageKey, StageKey], set[int]] | None = None
    if full > limit:
        near = {k: {1, 2} if k[0][0] == k[1][0] else {-1, 0, 1} for k in ticks}
        for block in (around.blocks if around is not None else ()):
            if len(block) == 2 and block[0].kind is Kind.F:
                fo, bo = block
                key = ((fo.pipeline, fo.stage), (bo.pipeline, bo.stage))
                if key in near:
                    o = rank[fo.microbatch] - rank[bo.microbatch]
                    near[key] |= {o - 1, o, o + 1}
    pairs = []
    for (f, b), t in ticks.items():
        nf, nb = len(mbs[f[0]]), len(mbs[b[0]])
        if near is None:
            ranks = _rank_pairs(f, b, nf, nb, widest[(f, b)])
        else:
            lo = 1 if f[0] == b[0] else -widest[(f, b)]
            offsets = sorted(o for o in near[(f, b)] if lo <= o <= widest[(f, b)])
            ranks = ((a, a - o) for o in offsets for a in range(max(0, o), min(nf, nb + o)))
        for a, c in ranks:
            pairs.append((Op(Kind.F, *f, mbs[f[0]][a]), Op(Kind.B, *b, mbs[b[0]][c]), t))
    return PairCandidates(tuple(pairs), near is not None)


def template_pairs(problem: Problem, placement: Placement, ops: Iterable[Op]) -> PairCandidates | None:
    """The cyclic model's candidates: every forward with every backward of the template ``ops``
    on one device whose pair gains (which copies pair is the phases' choice); None if none."""
    ticks, ops = block_ticks(problem, placement), tuple(ops)
    pairs = tuple((f, b, ticks[key]) for f in ops if f.kind is Kind.F for b in ops if b.kind is Kind.B
                  and (key := ((f.pipeline, f.stage), (b.pipeline, b.stage))) in ticks)
    return PairCandidates(pairs) if pairs else None


@dataclass(frozen=True)
class DeviceSavings:
    """Upper bounds of what pairs save on one device: ``forwards`` (each at its best pair) and
    ``backwards``; ``forward_share``/``backward_share``: the least saving per tick of each (0
    where the device runs W's), what a tick of an op alone forgoes."""

    forwards: int
    backwards: int
    forward_share: float
    backward_share: float

    @property
    def most(self) -> int:
        return min(self.forwards, self.backwards)


def device_savings(problem: Problem, placement: Placement, counts: Mapping[int, int] | None = None
                   ) -> dict[int, DeviceSavings]:
    """Per device with pairs that gain, what they can save (``DeviceSavings``) over ``counts``
    microbatches per pipeline (default: the problem's)."""
    ticks = block_ticks(problem, placement)
    counts = problem.pipeline_counts if counts is None else counts
    out: dict[int, DeviceSavings] = {}
    for d in range(problem.num_devices):
        by_f: dict[StageKey, int] = {}
        by_b: dict[StageKey, int] = {}
        for (f, b), t in ticks.items():
            if placement.device(*f) != d:
                continue
            gain = problem.duration(Op(Kind.F, *f, 0)) + problem.duration(Op(Kind.B, *b, 0)) - t
            by_f[f] = max(by_f.get(f, 0), gain)
            by_b[b] = max(by_b.get(b, 0), gain)
        if not by_f:
            continue
        held = placement.stages_on(d)
        f_share = min(by_f.get(k, 0) / problem.duration(Op(Kind.F, *k, 0)) for k in held)
        b_share = 0.0 if problem.split_backward else \
            min(by_b.get(k, 0) / problem.duration(Op(Kind.B, *k, 0)) for k in held)
        out[d] = DeviceSavings(sum(g * counts[f[0]] for f, g in by_f.items()),
                               sum(g * counts[b[0]] for b, g in by_b.items()), f_share, b_share)
    return out


def hint_pairs(model: cp_model.CpModel, v: Variables, schedule: Schedule, ends: dict[Op, int]) -> None:
    """Hint pair, alone and end variables from ``schedule``'s blocks and its ops' ``ends``."""
    chosen = {(v.index[b[0]], v.index[b[1]]) for b in schedule.blocks if len(b) == 2}
    for key, (y, _) in v.pair_lits.items():
        model.add_hint(y, int(key in chosen))
    paired = {i for key in chosen for i in key}
    for i, alone in v.alone.items():
        model.add_hint(alone, int(i not in paired))
        model.add_hint(v.ends[i], ends[v.ops[i]])  # type: ignore[arg-type]


def chosen_pairs(solver: cp_model.CpSolver, v: Variables) -> tuple[tuple[Op, Op], ...]:
    """The pairs a solution chose."""
    return tuple((v.ops[i], v.ops[j]) for (i, j), (y, _) in v.pair_lits.items() if solver.boolean_value(y))


def pairs_only(schedule: Schedule) -> Schedule:
    """``schedule`` with only its forward-backward blocks kept (others run op by op): a schedule
    of the class the model searches, renamed when changed."""
    keep = tuple(b for b in schedule.blocks
                 if len(b) == 2 and b[0].kind is Kind.F and b[1].kind is Kind.B)
    if keep == schedule.blocks:
        return schedule
    return schedule.with_blocks(keep, f"{schedule.name} (forward-backward pairs only)")
