"""Placement families: which device holds each stage, for the shapes the schedules use.

One function, ``family_placement(family, num_devices, num_stages)``, gives the stage ->
device map of every family; the generators, the CP-SAT model and the command line all call
it (``family_stages`` gives the stages per pipeline a family needs).

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

from enum import StrEnum

from .schedule import Placement


class PlacementFamily(StrEnum):
    """A placement family (module docstring)."""

    LINEAR = "linear"
    BIDIRECTIONAL = "bidirectional"
    WAVE = "wave"
    V = "v"
    INTERLEAVED = "interleaved"
    FREE = "free"


# one line per family, for results and titles
FAMILY_LABELS = {
    PlacementFamily.LINEAR: "linear (stage d on device d)",
    PlacementFamily.BIDIRECTIONAL: "bidirectional (down s->s, up s->S-1-s)",
    PlacementFamily.WAVE: "wave (stages zig-zag over devices)",
    PlacementFamily.V: "v (device d holds stages d and 2S-1-d)",
    PlacementFamily.INTERLEAVED: "interleaved (stage s on device s mod S)",
    PlacementFamily.FREE: "free (the solver chooses)",
}


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
    f, D = family_of(family), num_devices
    if f is PlacementFamily.WAVE:
        if not isinstance(waves, int) or isinstance(waves, bool) or waves < 1:
            raise ValueError(f"waves must be an integer >= 1, got {waves!r}")
        return (2 * waves * D,)
    if f is PlacementFamily.INTERLEAVED:
        if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 2:
            raise ValueError(f"chunks must be an integer >= 2, got {chunks!r}")
        return (chunks * D,)
    if f is PlacementFamily.FREE and pipelines not in (1, 2):
        raise ValueError(f"pipelines must be 1 or 2, got {pipelines!r}")
    per = {PlacementFamily.LINEAR: 1, PlacementFamily.BIDIRECTIONAL: 2, PlacementFamily.V: 1,
           PlacementFamily.FREE: pipelines}[f]
    return ((2 * D,) if f is PlacementFamily.V else (D,)) * per


def family_placement(family: PlacementFamily | str, num_devices: int, num_stages: tuple[int, ...]) -> Placement:
    """The placement of ``family`` for ``num_devices`` devices and the given stage counts
    per pipeline (module docstring); ``ValueError`` when the shapes do not fit the family."""
    f, D = family_of(family), num_devices
    n = tuple(num_stages)
    if f is PlacementFamily.LINEAR:
        if n != (D,):
            raise ValueError(f"linear placement needs one pipeline of {D} stages (one per device), got {list(n)}")
        return Placement((tuple(range(D)),), D)
    if f is PlacementFamily.BIDIRECTIONAL:
        if n != (D, D):
            raise ValueError(f"bidirectional placement needs two pipelines of {D} stages each, got {list(n)}")
        return Placement((tuple(range(D)), tuple(D - 1 - s for s in range(D))), D)
    if f is PlacementFamily.WAVE:
        if len(n) != 1 or n[0] % (2 * D):
            raise ValueError(f"wave placement needs one pipeline of 2*W*{D} stages (W waves), got {list(n)}")
        return Placement((tuple(wave_device(s, D) for s in range(n[0])),), D)
    if f is PlacementFamily.V:
        if n != (2 * D,):
            raise ValueError(f"v placement needs one pipeline of {2 * D} stages (two per device), got {list(n)}")
        return Placement((tuple(s if s < D else 2 * D - 1 - s for s in range(2 * D)),), D)
    if f is PlacementFamily.INTERLEAVED:
        if len(n) != 1 or n[0] % D or n[0] < 2 * D:
            raise ValueError(
                f"interleaved placement needs one pipeline of v*{D} stages (v >= 2 chunks), got {list(n)}")
        return Placement((tuple(s % D for s in range(n[0])),), D)
    raise ValueError("free placement has no fixed stage -> device map (the CP-SAT search chooses one)")
