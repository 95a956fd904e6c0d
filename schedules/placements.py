"""Placement families: which device holds each stage, for the shapes the schedules use.

One function, ``family_placement(family, num_devices, num_stages)``, gives the stage ->
device map of every family; the generators, the CP-SAT model and the command line all call
it (``family_stages`` gives the stages per pipeline a family needs). What else a family
decides — how many pipelines, which pipeline each microbatch takes, whether PyTorch's CSV
holds it, whether CP-SAT may choose its layer split, which option sizes it — is one row of
``TRAITS`` (``traits(family)``), asked instead of comparing family or schedule names.

* ``linear``: one pipeline, stage d on device d (GPipe, 1F1B, ZB-H1/H2);
* ``bidirectional``: two pipelines over the same devices, the down one stage s on device
  s, the up one stage s on device S-1-s (Chimera);
* ``wave``: one pipeline of 2WS stages zig-zagging over the S devices, W waves (Hanayo);
* ``v``: one pipeline of 2S stages, device d holding stages d and 2S-1-d (ZB-V, DualPipeV);
* ``interleaved``: one pipeline of vS stages, stage s on device s mod S (Megatron's
  interleaved 1F1B, v chunks);
* ``free``: no fixed map — the CP-SAT search chooses one (``family_placement`` refuses it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import StrEnum
from typing import Callable, Sequence

from .schedule import Placement


class PlacementFamily(StrEnum):
    """A placement family (module docstring)."""

    LINEAR = "linear"
    BIDIRECTIONAL = "bidirectional"
    WAVE = "wave"
    V = "v"
    INTERLEAVED = "interleaved"
    FREE = "free"


def family_of(value: object) -> PlacementFamily:
    """``value`` as a ``PlacementFamily``; ``ValueError`` naming the families otherwise."""
    if isinstance(value, str):  # a PlacementFamily is a str too
        try:
            return PlacementFamily(value)
        except ValueError:
            pass
    raise ValueError(f"placement must be one of {', '.join(PlacementFamily)}, got {value!r}")


def wave_device(stage: int, devices: int) -> int:
    """Device of ``stage`` in the wave layout over ``devices`` devices."""
    k, j = divmod(stage, devices)
    return j if k % 2 == 0 else devices - 1 - j


def family_stages(family: PlacementFamily | str, num_devices: int, *, waves: int = 1, chunks: int = 2,
                  pipelines: int = 1) -> tuple[int, ...]:
    """Stages per pipeline of ``family`` on ``num_devices`` devices (``waves`` for wave,
    ``chunks`` for interleaved, ``pipelines`` 1 or 2 for free)."""
    t = traits(family)
    if t.size_option == "waves" and (not isinstance(waves, int) or isinstance(waves, bool) or waves < 1):
        raise ValueError(f"waves must be an integer >= 1, got {waves!r}")
    if t.size_option == "chunks" and (not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 2):
        raise ValueError(f"chunks must be an integer >= 2, got {chunks!r}")
    if t.pipelines is None and pipelines not in (1, 2):
        raise ValueError(f"pipelines must be 1 or 2, got {pipelines!r}")
    return (t.stages_per_device(waves=waves, chunks=chunks) * num_devices,) * t.num_pipelines(pipelines)


def family_placement(family: PlacementFamily | str, num_devices: int, num_stages: tuple[int, ...]) -> Placement:
    """The placement of ``family`` for ``num_devices`` devices and the given stage counts
    per pipeline (module docstring); ``ValueError`` when the shapes do not fit the family."""
    return traits(family).place(num_devices, tuple(num_stages))


def _linear(D: int, n: tuple[int, ...]) -> Placement:
    if n != (D,):
        raise ValueError(f"linear placement needs one pipeline of {D} stages (one per device), got {list(n)}")
    return Placement((tuple(range(D)),), D)


def _bidirectional(D: int, n: tuple[int, ...]) -> Placement:
    if n != (D, D):
        raise ValueError(f"bidirectional placement needs two pipelines of {D} stages each, got {list(n)}")
    return Placement((tuple(range(D)), tuple(D - 1 - s for s in range(D))), D)


def _wave(D: int, n: tuple[int, ...]) -> Placement:
    if len(n) != 1 or n[0] % (2 * D):
        raise ValueError(f"wave placement needs one pipeline of 2*W*{D} stages (W waves), got {list(n)}")
    return Placement((tuple(wave_device(s, D) for s in range(n[0])),), D)


def _v(D: int, n: tuple[int, ...]) -> Placement:
    if n != (2 * D,):
        raise ValueError(f"v placement needs one pipeline of {2 * D} stages (two per device), got {list(n)}")
    return Placement((tuple(s if s < D else 2 * D - 1 - s for s in range(2 * D)),), D)


def _interleaved(D: int, n: tuple[int, ...]) -> Placement:
    if len(n) != 1 or n[0] % D or n[0] < 2 * D:
        raise ValueError(f"interleaved placement needs one pipeline of v*{D} stages (v >= 2 chunks), got {list(n)}")
    return Placement((tuple(s % D for s in range(n[0])),), D)


def _free(D: int, n: tuple[int, ...]) -> Placement:
    raise ValueError("free placement has no fixed stage -> device map (the CP-SAT search chooses one)")


def split_microbatches(num_pipelines: int, unit: int, microbatches: int) -> tuple[int, ...]:
    """Which pipeline each microbatch takes: all pipeline 0 with one pipeline; with two, in
    every ``unit`` of microbatches the first half go down (pipeline 0), the rest up
    (pipeline 1) — Chimera's split with units of S (2S with forward doubling), DualPipe's
    with one unit of all microbatches."""
    if num_pipelines == 1:
        return (0,) * microbatches
    if num_pipelines != 2:
        raise ValueError(f"pipelines must be 1 or 2, got {num_pipelines!r}")
    half = max(1, unit // 2)
    return tuple(0 if m % unit < half else 1 for m in range(microbatches))


@dataclass(frozen=True)
class FamilyTraits:
    """What a placement family decides, one row of ``TRAITS``.

    ``pipelines``: how many (None: free, where the ``pipelines`` option says, 1 or 2);
    ``size_option``: the option that sizes it (``waves``, ``chunks``; None: the devices
    alone); ``per_device``: stages of one pipeline per device, as a function of
    (waves, chunks); ``partitionable``: CP-SAT may choose or be given its layer split
    (``--partition``, ``--layers``); ``place``: its stage -> device map for D devices and
    the stages per pipeline (``ValueError`` when they do not fit; free has none)."""

    family: PlacementFamily
    label: str
    pipelines: int | None
    size_option: str | None
    per_device: Callable[[int, int], int]
    partitionable: bool
    place: Callable[[int, tuple[int, ...]], Placement]

    @property
    def fixed(self) -> bool:
        """Whether the family has a stage -> device map (``family_placement``); free has none."""
        return self.family is not PlacementFamily.FREE

    def num_pipelines(self, pipelines: int = 1) -> int:
        """Its pipelines (``pipelines`` where the family leaves it open: free)."""
        return pipelines if self.pipelines is None else self.pipelines

    def torch_csv(self, pipelines: int = 1) -> bool:
        """Whether PyTorch's pipelining CSV can hold its schedules: it holds one pipeline."""
        return self.num_pipelines(pipelines) == 1

    def stages_per_device(self, *, waves: int = 1, chunks: int = 2) -> int:
        """Stages of one pipeline on each device (``waves`` for wave, ``chunks`` for interleaved)."""
        return self.per_device(waves, chunks)

    def microbatch2pipeline(self, stages: int, microbatches: int, *, pipelines: int = 1,
                            per: int = 1) -> tuple[int, ...]:
        """Which pipeline each microbatch takes: two pipelines split every unit of ``per``
        x ``stages`` microbatches half down, half up (``split_microbatches``)."""
        return split_microbatches(self.num_pipelines(pipelines), per * stages, microbatches)


def _one(waves: int, chunks: int) -> int:
    return 1


TRAITS: dict[PlacementFamily, FamilyTraits] = {t.family: t for t in (
    # family, label, pipelines (None: the pipelines option), size option,
    # stages of one pipeline per device (waves, chunks), partitionable, stage -> device map
    FamilyTraits(PlacementFamily.LINEAR, "linear (stage d on device d)", 1, None,
                 _one, True, _linear),
    FamilyTraits(PlacementFamily.BIDIRECTIONAL, "bidirectional (down s->s, up s->S-1-s)", 2, None,
                 _one, True, _bidirectional),
    FamilyTraits(PlacementFamily.WAVE, "wave (stages zig-zag over devices)", 1, "waves",
                 lambda waves, chunks: 2 * waves, False, _wave),
    FamilyTraits(PlacementFamily.V, "v (device d holds stages d and 2S-1-d)", 1, None,
                 lambda waves, chunks: 2, False, _v),
    FamilyTraits(PlacementFamily.INTERLEAVED, "interleaved (stage s on device s mod S)", 1, "chunks",
                 lambda waves, chunks: chunks, False, _interleaved),
    FamilyTraits(PlacementFamily.FREE, "free (the solver chooses)", None, None,
                 _one, False, _free),
)}

# one line per family, for results and titles
FAMILY_LABELS = {f: t.label for f, t in TRAITS.items()}


def traits(family: PlacementFamily | str) -> FamilyTraits:
    """The traits of ``family``; ``ValueError`` naming the families otherwise."""
    return TRAITS[family_of(family)]


def canonical_placements(num_stages: Sequence[int], num_devices: int, limit: int,
                         identical: bool = True) -> list[Placement] | None:
    """Every placement of ``num_stages`` stages per pipeline on ``num_devices`` devices, up to
    relabelling of the devices when they are ``identical`` (restricted growth strings); None
    when more than ``limit`` (the CP-SAT free placement's decomposition visits them)."""
    D, N = num_devices, sum(num_stages)
    out: list[Placement] = []

    def emit(assign: list[int]) -> bool:
        per, i = [], 0
        for n in num_stages:
            per.append(tuple(assign[i:i + n]))
            i += n
        out.append(Placement(tuple(per), D))
        return len(out) <= limit

    if identical:
        assign = [0] * N

        def rec(i: int, top: int) -> bool:
            if i == N:
                return emit(assign)
            for d in range(min(top + 2, D)):
                assign[i] = d
                if not rec(i + 1, max(top, d)):
                    return False
            return True

        ok = rec(1, 0) if N > 1 else emit(assign)
    else:
        ok = all(emit(list(combo)) for combo in itertools.product(range(D), repeat=N))
    return out if ok else None
