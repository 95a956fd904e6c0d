"""The registry of known schedules: name -> generator, options, regime and level-1 formula."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from . import formulas
from .generators import check_shape
from .generators import chimera as _chimera
from .generators import controllable as _controllable
from .generators import dualpipe as _dualpipe
from .generators import hanayo as _hanayo
from .generators import interleaved as _interleaved
from .generators import linear as _linear
from .generators import looped as _looped
from .generators import zero_bubble as _zero_bubble
from .limits import check_size
from .placements import FamilyTraits, PlacementFamily, traits

if TYPE_CHECKING:
    from .schedule import Schedule


@dataclass(frozen=True)
class Option:
    """A schedule-specific option: Python keyword ``name``, CLI flag ``--<flag>``."""

    name: str
    flag: str
    default: object
    help: str
    parse: Callable[[str], object]


@dataclass(frozen=True)
class ScheduleSpec:
    """How to make a known schedule and what its authors say of it.

    ``ops_per_microbatch(stages, **options)``: how many ops one microbatch has (stages it
    passes x 2, or x 3 with a split backward), so that sizes are checked before anything
    is generated; without it, ``3 * stages`` (one stage per device, split backward).
    ``min_stages``: 1 for the schedules that run without a pipeline (PP = 1).
    ``slow_generator``: its generator's time grows with stages^2 x microbatches (a search
    over building blocks), so ``plan`` and CP-SAT's starts leave it out of large instances
    unless asked. ``family``: its placement family, whose ``traits`` (pipelines, microbatch
    split, torch CSV, partition) the front ends ask instead of its name. ``torchtitan``: its
    name in torchtitan's ``pipeline_parallel_schedule`` (None: none there); ``megatron``:
    Megatron-LM runs it (the emitters ask these two)."""

    name: str
    summary: str
    generator: Callable[..., Schedule]
    formula: Callable[..., formulas.Formula]
    regime: str
    options: tuple[Option, ...] = ()
    ops_per_microbatch: Callable[..., int] | None = None
    min_stages: int = 2
    slow_generator: bool = False
    family: PlacementFamily = field(kw_only=True)
    torchtitan: str | None = field(default=None, kw_only=True)
    megatron: bool = field(default=False, kw_only=True)


def parse_split(text: str) -> tuple[int, int]:
    """Parse ``A:B`` (two positive integers) as a layer split."""
    parts = str(text).split(":")
    try:
        a, b = (int(x) for x in parts)
    except ValueError:
        raise ValueError(f"split must look like A:B with positive integers (e.g. 1:2), got {text!r}") from None
    if a < 1 or b < 1:
        raise ValueError(f"split must look like A:B with positive integers (e.g. 1:2), got {text!r}")
    return a, b


def _parse_int(text: str) -> int:
    return int(text)


WAVES = Option("waves", "waves", 1, "Hanayo waves W (1..8)", _parse_int)
CHUNKS = Option(
    "chunks", "chunks", 2, f"interleaved chunks per device v (2..{_interleaved.MAX_CHUNKS})", _parse_int
)
SPLIT = Option(
    "split", "split", (1, 2),
    "layer split A:B between the lighter and heavier stage of each device", parse_split,
)

def parse_flag(text: str) -> bool:
    """``on``/``off`` (also ``true``/``false``, ``yes``/``no``, ``1``/``0``) as a bool."""
    value = str(text).strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"overlap-pairs must be on or off, got {text!r}")


OVERLAP = Option(
    "overlap", "overlap-pairs", True,
    "run the overlapped forward-backward pairs as one block on two streams (on) or one op after the other (off)",
    parse_flag,
)


OVERLAP_OFF = Option(
    "overlap", "overlap-pairs", False,
    "run the steady-state forward-backward pairs as one block on two streams (Megatron's combined 1F1B)",
    parse_flag,
)


def _two_per_stage(stages: int) -> int:
    return 2 * stages


REGISTRY: dict[str, ScheduleSpec] = {
    spec.name: spec
    for spec in (
        ScheduleSpec(
            "gpipe", "fill-drain: all forwards, then all backwards",
            _linear.gpipe, formulas.gpipe, "S >= 1, B >= 1", ops_per_microbatch=_two_per_stage, min_stages=1,
            family=PlacementFamily.LINEAR, torchtitan="GPipe",
        ),
        ScheduleSpec(
            "1f1b", "one-forward-one-backward after a warm-up (PipeDream-Flush, Megatron)",
            _linear.one_f_one_b, formulas.one_f_one_b, "S >= 1, B >= 1", ops_per_microbatch=_two_per_stage,
            min_stages=1,
            family=PlacementFamily.LINEAR, torchtitan="1F1B", megatron=True,
        ),
        ScheduleSpec(
            "chimera", "two opposite pipelines over the same devices, basic units concatenated",
            _chimera.chimera, formulas.chimera, _chimera.CHIMERA_REGIME, ops_per_microbatch=_two_per_stage,
            family=PlacementFamily.BIDIRECTIONAL,
        ),
        ScheduleSpec(
            "chimera-fd",
            "Chimera with forward doubling: units of 2S microbatches, forwards run in pairs "
            "(no intermediate bubbles at backward = 2 x forward, ~2x activation memory)",
            _chimera.chimera_forward_doubling, formulas.chimera_fd, _chimera.CHIMERA_FD_REGIME,
            ops_per_microbatch=_two_per_stage,
            family=PlacementFamily.BIDIRECTIONAL,
        ),
        ScheduleSpec(
            "hanayo", "one pipeline of 2*W*S stages laid out as waves over the devices",
            _hanayo.hanayo, formulas.hanayo, _hanayo.HANAYO_REGIME, (WAVES,),
            lambda stages, waves: 2 * 2 * waves * stages,
            family=PlacementFamily.WAVE,
        ),
        ScheduleSpec(
            "chimera-asym",
            "Chimera placement whose stages split the layers unevenly (A:B) between the "
            "two stages each device holds",
            _chimera.chimera_asym, formulas.chimera_asym, _chimera.CHIMERA_REGIME, (SPLIT,),
            lambda stages, split: 2 * stages,
            family=PlacementFamily.BIDIRECTIONAL,
        ),
        ScheduleSpec(
            "interleaved",
            "Megatron interleaved 1F1B: v chunks per device, one pipeline of v*S stages (loop)",
            _interleaved.interleaved, formulas.interleaved, _interleaved.INTERLEAVED_REGIME,
            (CHUNKS, OVERLAP_OFF), lambda stages, chunks, overlap: 2 * chunks * stages,
            family=PlacementFamily.INTERLEAVED, torchtitan="Interleaved1F1B", megatron=True,
        ),
        ScheduleSpec(
            "zb-h1",
            "zero bubble H1: 1F1B with split backward, weight gradients delayed to fill bubbles",
            _zero_bubble.zb_h1, formulas.zb_h1, _zero_bubble.ZB_H1_REGIME,
            ops_per_microbatch=lambda stages: 3 * stages,
            family=PlacementFamily.LINEAR,
        ),
        ScheduleSpec(
            "zb-h2",
            "zero bubble H2: 2(S-1-d)+1 warm-up forwards on device d, weight gradients delayed "
            "by 2d microbatches to fill the drain (zero bubble per device span at F=B=W; ~2x memory)",
            _zero_bubble.zb_h2, formulas.zb_h2, _zero_bubble.ZB_H2_REGIME,
            family=PlacementFamily.LINEAR,
        ),
        ScheduleSpec(
            "zbv",
            "zero bubble V: 2 chunks per device in a V (2S stages), split backward, handcrafted order",
            _zero_bubble.zbv, formulas.zbv, _zero_bubble.ZBV_REGIME,
            ops_per_microbatch=lambda stages: 3 * 2 * stages,
            family=PlacementFamily.V, torchtitan="ZBVZeroBubble",
        ),
        ScheduleSpec(
            "dualpipe",
            "DeepSeek DualPipe: two pipelines in opposite directions (two weight copies), "
            "overlapped forward-backward pairs, split backward, W queue",
            _dualpipe.dualpipe, formulas.dualpipe, _dualpipe.DUALPIPE_REGIME, (OVERLAP,),
            lambda stages, overlap: 3 * stages,
            family=PlacementFamily.BIDIRECTIONAL,
        ),
        ScheduleSpec(
            "dualpipev",
            "DeepSeek DualPipeV: 2S stages in a V over S devices, overlapped forward-backward "
            "pairs, split backward, W queue",
            _dualpipe.dualpipev, formulas.dualpipev, _dualpipe.DUALPIPEV_REGIME, (OVERLAP,),
            lambda stages, overlap: 3 * 2 * stages,
            family=PlacementFamily.V, torchtitan="DualPipeV",
        ),
        ScheduleSpec(
            "looped-bfs",
            "breadth-first looped (torch ScheduleLoopedBFS): v chunks per device, every microbatch through "
            "a device's first chunk, then its next; backwards in reverse",
            _looped.looped_bfs, formulas.looped_bfs, "S >= 2, B >= 1, 2 <= v <= 16", (CHUNKS,),
            lambda stages, chunks: 2 * chunks * stages,
            family=PlacementFamily.INTERLEAVED,
        ),
        ScheduleSpec(
            "interleaved-zb",
            "interleaved zero bubble (torch ScheduleInterleavedZeroBubble, ZB-1P on v chunks per device): "
            "split backward, W delayed by d on device d",
            _looped.interleaved_zb, formulas.interleaved_zb, "S >= 2, B a multiple of max(1, B // S), v >= 2",
            (CHUNKS,), lambda stages, chunks: 3 * chunks * stages,
            family=PlacementFamily.INTERLEAVED,
        ),
        ScheduleSpec(
            "v-half",
            "V-Half (Qi et al., controllable memory): V placement, building blocks with half of 1F1B's "
            "activation memory, split backward",
            _controllable.v_half, formulas.v_half, "S >= 2, B >= 1",
            ops_per_microbatch=lambda stages: 3 * 2 * stages, slow_generator=True,
            family=PlacementFamily.V,
        ),
        ScheduleSpec(
            "v-min",
            "V-Min (Qi et al., controllable memory): V placement, building blocks with a third of 1F1B's "
            "activation memory, split backward",
            _controllable.v_min, formulas.v_min, "S >= 2, B >= 1",
            ops_per_microbatch=lambda stages: 3 * 2 * stages, slow_generator=True,
            family=PlacementFamily.V,
        ),
    )
}


def spec(name: str) -> ScheduleSpec:
    """The registry entry of ``name``; ``ValueError`` listing the known names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(REGISTRY)}") from None


def schedule_traits(name: str) -> FamilyTraits:
    """The traits of the named schedule's placement family (``placements.traits``)."""
    return traits(spec(name).family)


def _options(entry: ScheduleSpec, options: dict) -> dict:
    known = {o.name for o in entry.options}
    for key in options:
        if key not in known:
            allowed = ", ".join(sorted(known)) or "none"
            raise ValueError(f"schedule {entry.name!r} takes no option {key!r} (options: {allowed})")
    return {o.name: options.get(o.name, o.default) for o in entry.options}


def num_ops(name: str, stages: int, microbatches: int, **options) -> int | None:
    """How many ops the named schedule would have (None when the options are not numbers
    the generator could accept; it will say why)."""
    entry = spec(name)
    check_shape(stages, microbatches, entry.min_stages)
    opts = _options(entry, options)
    try:
        per = entry.ops_per_microbatch(stages, **opts) if entry.ops_per_microbatch else 3 * stages
    except TypeError:
        return None
    return per * microbatches if isinstance(per, int) and not isinstance(per, bool) else None


def check_request(name: str, stages: int, microbatches: int, **options) -> None:
    """``ValueError`` (one sentence) when the named schedule is beyond the size limits
    (``schedules.limits``), before anything is generated."""
    ops = num_ops(name, stages, microbatches, **options)
    shown = "".join(f", {k}={v}" for k, v in options.items())
    check_size(stages, ops or 0, f"{name} with S={stages}, B={microbatches}{shown}")


def generate(name: str, stages: int, microbatches: int, **options) -> Schedule:
    """Build the named schedule; ``ValueError`` with one clear sentence when it cannot
    (sizes are checked first, then every generator checks its own arguments)."""
    check_request(name, stages, microbatches, **options)
    entry = spec(name)
    return entry.generator(stages, microbatches, **_options(entry, options))


def formula(name: str, stages: int, microbatches: int, **options) -> formulas.Formula:
    """Level-1 closed-form numbers of the named schedule."""
    entry = spec(name)
    check_shape(stages, microbatches, entry.min_stages)
    return entry.formula(stages, microbatches, **_options(entry, options))
